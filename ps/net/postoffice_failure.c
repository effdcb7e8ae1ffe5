/*
 * Failures, as each side sees them: the van reports a connection that
 * failed (peer_failed); a server or worker fails what waits for that peer
 * and leaves the verdict to the scheduler, which declares the node dead
 * (connection lost, or silent for PS_HEARTBEAT_TIMEOUT: see
 * postoffice_timer.c), tells everyone and fails the barriers it cannot
 * complete. A node told of a death, or of a new process that took a dead
 * node's id over (the scheduler's side: postoffice_recovery.c),
 * updates its table and connections. Every such event runs the node-event
 * callbacks once.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/net/node_table_internal.h"
#include "ps/net/postoffice_state_internal.h"

/* A node of the table is dead (declared by the scheduler, or found so by
 * the scheduler itself). Its connections are closed: should the process
 * be hung rather than gone and wake up, it must not talk for an id a new
 * process may take over. */
void ps__po_mark_dead(ps_postoffice_t *po, int id)
{
    ps_mutex_lock(&po->lock);
    int fresh = !ps__po_is_dead_locked(po, id);
    if (fresh) {
        ps__po_add_dead_locked(po, id);
        ps_cond_broadcast(&po->cond);
    }
    ps_mutex_unlock(&po->lock);
    if (!fresh)
        return;
    /* Requests waiting for it end with the scheduler's verdict before the
     * van drops its connections: closing them may fail those requests
     * first with what the van sees (a failed link). */
    ps__registry_fail_peer(po->reg, id, PS_ERR_PEER_GONE, 1);
    if (id != ps__po_my_id(po))
        po->van->ops->disconnect(po->van, id);
    if (po->res != NULL)
        ps__resender_forget_peer(po->res, id);
    ps__po_fire_node_event(po, id, PS_ERR_PEER_GONE);
}

/* Node side: the scheduler announced that a new process took `node`'s id
 * over. Its old connections were closed when it was declared dead; reach
 * it at its new address (if we talk to its role). */
void ps__po_node_recovered(ps_postoffice_t *po, const ps_node_t *node)
{
    char who[PS_NODE_HOSTNAME_MAX + 48];
    int id = node->id;
    int my_id = ps__po_my_id(po);
    ps_mutex_lock(&po->lock);
    int idx = ps__po_table_index(po, id);
    if (id == my_id || idx < 0 || (size_t)idx >= po->num_nodes || po->nodes == NULL) {
        ps_mutex_unlock(&po->lock);
        ps_warn(PS_LOG_CORE, "ignoring the recovery of node %d: not a peer in the table", id);
        return;
    }
    po->nodes[idx] = *node;
    po->nodes[idx].is_recovery = false;
    ps__po_remove_dead_locked(po, id);
    ps__po_set_lost_locked(po, id, PS_OK);
    int reach = po->ready && node->role != po->params.role && node->role != PS_ROLE_SCHEDULER;
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);

    ps__node_describe(node, who, sizeof(who));
    if (reach) {
        ps_status_t st = po->van->ops->connect(po->van, node, my_id);
        if (st != PS_OK)
            ps_warn(PS_LOG_CORE, "cannot connect to recovered node %d (%s): %s", id, who,
                    ps_status_str(st));
    }
    ps__registry_revive_peer(po->reg, id);
    ps_warn(PS_LOG_CORE, "node %d recovered: a new process (%s) took it over", id, who);
    ps__po_fire_node_event(po, id, PS_OK);
}

/* Node side: the scheduler is unreachable or silent. */
void ps__po_lost_scheduler(ps_postoffice_t *po, const char *why)
{
    ps_mutex_lock(&po->lock);
    if (!po->ready) {
        /* During start a scheduler that is not up yet is retried. */
        po->sched_conn_lost = 1;
        ps_cond_broadcast(&po->cond);
        ps_mutex_unlock(&po->lock);
        return;
    }
    if (po->sched_gone) {
        ps_mutex_unlock(&po->lock);
        return;
    }
    po->sched_gone = 1;
    int expected = po->released;
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);

    if (expected) {
        ps_debug(PS_LOG_CORE, "the scheduler left (%s)", why);
        return;
    }
    ps_error(PS_LOG_CORE, "lost the scheduler (%s): every wait of this node now ends with "
             "'peer gone'", why);
    ps__registry_close(po->reg, PS_ERR_PEER_GONE);
    ps__po_fire_node_event(po, PS_SCHEDULER_ID, PS_ERR_PEER_GONE);
}

void ps__po_sched_declare_dead(ps_postoffice_t *po, int id, const char *why)
{
    char who[64];
    int *notify = NULL;
    size_t num_notify = 0;
    int *fail_ids = NULL;
    int *fail_groups = NULL;
    size_t num_fail = 0;

    ps_mutex_lock(&po->lock);
    if (ps__po_is_dead_locked(po, id) || ps__po_table_index(po, id) < 0 || id == PS_SCHEDULER_ID) {
        ps_mutex_unlock(&po->lock);
        return;
    }
    ps__po_add_dead_locked(po, id);
    notify = malloc((po->num_nodes + 1) * sizeof(*notify));
    size_t total_arrived = 0;
    for (int g = 1; g < PS__NUM_GROUPS; g++)
        total_arrived += po->sched.arrivals[g].n;
    fail_ids = malloc((total_arrived + 1) * sizeof(*fail_ids));
    fail_groups = malloc((total_arrived + 1) * sizeof(*fail_groups));
    if (notify != NULL) {
        for (size_t i = 0; i < po->num_nodes; i++) {
            int nid = po->nodes[i].id;
            if (nid != PS_SCHEDULER_ID && !ps__po_is_dead_locked(po, nid))
                notify[num_notify++] = nid;
        }
    }
    if (fail_ids != NULL && fail_groups != NULL) {
        for (int g = 1; g < PS__NUM_GROUPS; g++) {
            if (!ps__po_group_has(g, id))
                continue;
            for (size_t i = 0; i < po->sched.arrivals[g].n; i++) {
                fail_ids[num_fail] = po->sched.arrivals[g].ids[i];
                fail_groups[num_fail] = g;
                num_fail++;
            }
            po->sched.arrivals[g].n = 0;
        }
    }
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);

    ps_error(PS_LOG_CORE, "%s is dead: %s; telling the other nodes",
             ps__po_id_describe(id, who, sizeof(who)), why);
    po->van->ops->disconnect(po->van, id);

    ps_node_t dead_node;
    ps_node_init(&dead_node);
    dead_node.id = id;
    dead_node.role = ps_id_to_role(id);
    ps_mutex_lock(&po->lock);
    int idx = ps__po_table_index(po, id);
    if (idx >= 0 && (size_t)idx < po->num_nodes)
        dead_node = po->nodes[idx];
    ps_mutex_unlock(&po->lock);

    for (size_t i = 0; i < num_notify; i++)
        ps__po_send_control(po, notify[i], PS_CTRL_NODE_FAILED, 0, PS_ERR_PEER_GONE, 0, &dead_node,
                            1, why);
    char body[128];
    for (size_t i = 0; i < num_fail; i++) {
        snprintf(body, sizeof(body), "barrier of group %s cannot complete: node %d is dead",
                 ps__po_group_name(fail_groups[i]), id);
        if (fail_ids[i] == PS_SCHEDULER_ID)
            ps__po_barrier_release(po, fail_groups[i], PS_ERR_PEER_GONE, body);
        else if (fail_ids[i] != id)
            ps__po_send_control(po, fail_ids[i], PS_CTRL_BARRIER, 0, PS_ERR_PEER_GONE,
                                fail_groups[i], NULL, 0, body);
    }
    free(notify);
    free(fail_ids);
    free(fail_groups);
    if (po->res != NULL)
        ps__resender_forget_peer(po->res, id);
    ps__registry_fail_peer(po->reg, id, PS_ERR_PEER_GONE, 1);
    ps__po_fire_node_event(po, id, PS_ERR_PEER_GONE);
    /* A restarted process may be waiting to take this id over. */
    ps__po_sched_try_recover(po);
}

void ps__po_cb_peer_failed(void *arg, int node_id, ps_status_t why)
{
    ps_postoffice_t *po = arg;
    char reason[128];
    char who[64];

    if (ps__po_closing(po))
        return;
    if (node_id < 0 || node_id == PS_NODE_EMPTY) {
        ps_debug(PS_LOG_CORE, "a connection without a node id closed: %s", ps_status_str(why));
        return;
    }
    if (po->is_scheduler) {
        ps_mutex_lock(&po->lock);
        if (po->finalizing) {
            ps__po_ids_add(&po->sched.left, &po->sched.num_left, &po->sched.left_cap, node_id);
            ps_cond_broadcast(&po->cond);
            ps_mutex_unlock(&po->lock);
            ps_debug(PS_LOG_CORE, "node %d left", node_id);
            return;
        }
        if (node_id >= PS__REFUSE_ID_BASE) {
            ps_mutex_unlock(&po->lock);
            ps_debug(PS_LOG_CORE, "a refused node left: %s", ps_status_str(why));
            return;
        }
        int known = po->ready && ps__po_table_index(po, node_id) >= 0;
        ps_mutex_unlock(&po->lock);
        if (known) {
            snprintf(reason, sizeof(reason), "its connection failed (%s)", ps_status_str(why));
            ps__po_sched_declare_dead(po, node_id, reason);
        }
        return;
    }
    if (node_id == PS_SCHEDULER_ID) {
        if (why == PS_ERR_AUTH) {
            /* The job-secret handshake failed (the van logged which side
             * refused): retrying cannot help, so start ends now with
             * PS_ERR_AUTH instead of at its deadline. */
            ps_mutex_lock(&po->lock);
            if (!po->ready && !po->table_received) {
                po->start_failure = PS_ERR_AUTH;
                snprintf(po->start_reason, sizeof(po->start_reason),
                         "no authenticated connection to it (wrong or missing PS_JOB_SECRET)");
                po->table_received = 1;
                ps_cond_broadcast(&po->cond);
                ps_mutex_unlock(&po->lock);
                return;
            }
            ps_mutex_unlock(&po->lock);
        }
        snprintf(reason, sizeof(reason), "connection failed: %s", ps_status_str(why));
        ps__po_lost_scheduler(po, reason);
        return;
    }
    if (po->res != NULL)
        ps__resender_forget_peer(po->res, node_id);
    /* The peer's death is the scheduler's to declare; meanwhile what waits
     * for it fails with what the van saw: a failed link (the peer may
     * live: PS_ERR_LINK_FAILED, also for a peer we could not reach) or a
     * closed connection (PS_ERR_PEER_GONE). */
    ps_status_t status = why == PS_ERR_LINK_FAILED || why == PS_ERR_UNREACHABLE
                             ? PS_ERR_LINK_FAILED
                             : PS_ERR_PEER_GONE;
    ps_mutex_lock(&po->lock);
    int quiet = po->finalizing;
    ps__po_set_lost_locked(po, node_id, status);
    ps_mutex_unlock(&po->lock);
    if (quiet)
        ps_debug(PS_LOG_CORE, "connection to node %d closed", node_id);
    else
        ps_warn(PS_LOG_CORE, "lost the connection to %s: %s; failing its requests",
                ps__po_id_describe(node_id, who, sizeof(who)), ps_status_str(why));
    ps__registry_fail_peer(po->reg, node_id, status, 0);
}

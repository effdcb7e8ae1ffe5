/*
 * The postoffice once it runs: the van's callbacks (control messages,
 * routing data to customers), barriers, heartbeats and failure detection,
 * finalize, and the public API. Joining the job is in bootstrap.c; the
 * state both share is in postoffice_state_internal.h.
 *
 * Threads:
 *  - the caller's thread runs start, barriers and finalize (the blocking
 *    parts: connecting, waiting for the node table);
 *  - the van's thread calls deliver / recv_buffer / peer_failed: control
 *    messages are handled there without blocking, data messages go to
 *    their customer inline (ps__registry_deliver);
 *  - one timer thread sends heartbeats, declares silent nodes dead
 *    (scheduler) and expires messages waiting for an unknown customer.
 *    It sleeps on a condition variable: an idle process uses no CPU.
 *
 * Control protocol on top of upstream's commands (ps_control_cmd_t):
 *  - ADD_NODE request (node → scheduler): nodes[0] = the node, aux_id =
 *    preferred rank. Reply (scheduler → node): the full table (servers,
 *    workers, scheduler), or head < 0 = the start failed, body = why.
 *  - BARRIER request: control.barrier_group; reply request=false, head =
 *    PS_OK or why the barrier cannot complete (body says more).
 *  - HEARTBEAT request (node → scheduler), echoed back as a reply.
 *  - NODE_FAILED (scheduler → nodes): nodes = the dead, head = why. A node
 *    closes its connections to the dead one (should it only be hung, it
 *    must not speak for an id a new process may take over).
 *  - ADD_NODE reply after the table: nodes = a recovered node
 *    (is_recovery), now at a new address (bootstrap.c).
 *  - ACK (PS_RESEND): app_id, customer_id, timestamp and request of the
 *    acknowledged data message; with who sends it and who receives it,
 *    that is the message's key (resender_internal.h).
 *
 * Failures, as each side sees them: the van reports a connection that
 * failed (peer_failed); a server or worker fails what waits for that peer
 * and leaves the verdict to the scheduler, which declares the node dead
 * (connection lost, or silent for PS_HEARTBEAT_TIMEOUT), tells everyone,
 * fails the barriers it cannot complete, and lets a restarted process take
 * its id over. Every such event runs the node-event callbacks once.
 */
#include "ps/net/postoffice.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/auth.h"
#include "ps/net/node_table_internal.h"
#include "ps/net/postoffice_state_internal.h"
#include "ps/net/van/progress_loop.h"

/* ---- small helpers ---- */

static int role_group_bit(ps_role_t role)
{
    switch (role) {
    case PS_ROLE_SCHEDULER:
        return PS_GROUP_SCHEDULER;
    case PS_ROLE_SERVER:
        return PS_GROUP_SERVER;
    case PS_ROLE_WORKER:
        return PS_GROUP_WORKER;
    default:
        return 0;
    }
}

static int group_has(int group, int id)
{
    return (group & role_group_bit(ps_id_to_role(id))) != 0;
}

static int group_size(const ps_postoffice_t *po, int group)
{
    return ((group & PS_GROUP_SCHEDULER) ? 1 : 0) +
           ((group & PS_GROUP_SERVER) ? po->params.num_servers : 0) +
           ((group & PS_GROUP_WORKER) ? po->params.num_workers : 0);
}

static const char *group_name(int group)
{
    static const char *names[PS__NUM_GROUPS] = {
        "none", "scheduler", "servers", "scheduler+servers",
        "workers", "scheduler+workers", "servers+workers", "all",
    };
    return group >= 0 && group < PS__NUM_GROUPS ? names[group] : "invalid";
}

/* "worker 9 (rank 0)" */
static const char *id_describe(int id, char *buf, size_t cap)
{
    if (id == PS_SCHEDULER_ID)
        snprintf(buf, cap, "the scheduler");
    else
        snprintf(buf, cap, "%s %d (rank %d)", ps_role_str(ps_id_to_role(id)), id,
                 ps_id_to_rank(id));
    return buf;
}

/* Index of a node id in the table, or -1. */
static int table_index(const ps_postoffice_t *po, int id)
{
    if (id == PS_SCHEDULER_ID)
        return po->params.num_servers + po->params.num_workers;
    if (id < 8)
        return -1;
    int rank = ps_id_to_rank(id);
    if (ps_id_to_role(id) == PS_ROLE_SERVER)
        return rank < po->params.num_servers ? rank : -1;
    return rank < po->params.num_workers ? po->params.num_servers + rank : -1;
}

static int in_list(const int *ids, size_t n, int id)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == id)
            return 1;
    }
    return 0;
}

/* Appends id to a growable int array (no-op if present); 0 on no memory. */
static int list_add(int **ids, size_t *n, size_t *cap, int id)
{
    if (in_list(*ids, *n, id))
        return 1;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        int *p = realloc(*ids, c * sizeof(*p));
        if (p == NULL)
            return 0;
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 1;
}

static int po_is_dead_locked(const ps_postoffice_t *po, int id)
{
    return in_list(po->dead, po->num_dead, id);
}

int ps__po_is_dead_locked(const ps_postoffice_t *po, int id)
{
    return po_is_dead_locked(po, id);
}

int ps__po_table_index(const ps_postoffice_t *po, int id)
{
    return table_index(po, id);
}

static void po_remove_dead(ps_postoffice_t *po, int id)
{
    for (size_t i = 0; i < po->num_dead; i++) {
        if (po->dead[i] == id) {
            po->dead[i] = po->dead[po->num_dead - 1];
            __atomic_store_n(&po->num_dead, po->num_dead - 1, __ATOMIC_RELEASE);
            return;
        }
    }
}

void ps__po_remove_dead_locked(ps_postoffice_t *po, int id)
{
    po_remove_dead(po, id);
}

/* Records (or forgets, why == PS_OK) how the connection to `id` failed. */
static void po_set_lost_locked(ps_postoffice_t *po, int id, ps_status_t why)
{
    for (size_t i = 0; i < po->num_lost; i++) {
        if (po->lost_ids[i] != id)
            continue;
        if (why == PS_OK) {
            po->num_lost--;
            po->lost_ids[i] = po->lost_ids[po->num_lost];
            po->lost_why[i] = po->lost_why[po->num_lost];
        } else {
            po->lost_why[i] = why;
        }
        return;
    }
    if (why == PS_OK)
        return;
    if (po->num_lost == po->cap_lost) {
        size_t cap = po->cap_lost ? po->cap_lost * 2 : 8;
        int *ids = realloc(po->lost_ids, cap * sizeof(*ids));
        if (ids == NULL)
            return;
        po->lost_ids = ids;
        ps_status_t *w = realloc(po->lost_why, cap * sizeof(*w));
        if (w == NULL)
            return;
        po->lost_why = w;
        po->cap_lost = cap;
    }
    po->lost_ids[po->num_lost] = id;
    po->lost_why[po->num_lost] = why;
    po->num_lost++;
}

static ps_status_t po_get_lost_locked(const ps_postoffice_t *po, int id)
{
    for (size_t i = 0; i < po->num_lost; i++) {
        if (po->lost_ids[i] == id)
            return po->lost_why[i];
    }
    return PS_OK;
}

/* num_dead is also read without the lock (send's fast path). */
static void po_add_dead_locked(ps_postoffice_t *po, int id)
{
    int *ids = po->dead;
    size_t n = po->num_dead;
    size_t cap = po->dead_cap;
    if (list_add(&ids, &n, &cap, id)) {
        po->dead = ids;
        po->dead_cap = cap;
        __atomic_store_n(&po->num_dead, n, __ATOMIC_RELEASE);
    }
}

static int po_group_has_dead_locked(const ps_postoffice_t *po, int group)
{
    for (size_t i = 0; i < po->num_dead; i++) {
        if (group_has(group, po->dead[i]))
            return 1;
    }
    return 0;
}

/* ---- sending ---- */

static void po_log_msg(const char *dir, const ps_msg_t *msg)
{
    if (ps_likely(ps__log_level < PS_LOG_DEBUG))
        return;
    char line[256];
    ps_msg_describe(msg, line, sizeof(line));
    ps_debug(PS_LOG_CORE, "%s %s %d: %s", dir, dir[0] == 's' ? "to" : "from",
             dir[0] == 's' ? msg->meta.recver : msg->meta.sender, line);
}

static ps_status_t po_van_send(ps_postoffice_t *po, ps_msg_t *msg)
{
    msg->meta.sender = ps__po_my_id(po);
    po_log_msg("send", msg);
    return po->van->ops->send(po->van, msg);
}

ps_status_t ps__po_send_control(ps_postoffice_t *po, int recver, ps_control_cmd_t cmd,
                                   int request, int head, int group, ps_node_t *nodes,
                                   size_t num_nodes, const char *body)
{
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.recver = recver;
    msg.meta.request = request != 0;
    msg.meta.head = head;
    msg.meta.control.cmd = cmd;
    msg.meta.control.barrier_group = group;
    msg.meta.control.nodes = num_nodes > 0 ? nodes : NULL;
    msg.meta.control.num_nodes = (uint32_t)num_nodes;
    if (body != NULL && body[0] != '\0') {
        msg.meta.body = (const uint8_t *)body;
        msg.meta.body_len = strlen(body);
    }
    ps_status_t st = po_van_send(po, &msg);
    if (st != PS_OK && !ps__po_closing(po))
        ps_warn(PS_LOG_CORE, "cannot send %s to node %d: %s", ps_control_cmd_str(cmd), recver,
                ps_status_str(st));
    return st;
}

/* ---- node-event callbacks ---- */

/* The callback list this thread is running (remove must not wait for it). */
static __thread const ps_postoffice_t *tls_in_node_cb;

void ps__po_fire_node_event(ps_postoffice_t *po, int id, ps_status_t why)
{
    ps__po_node_cb_t cbs[PS_NODE_CALLBACKS_MAX];
    size_t n;
    ps_mutex_lock(&po->cb_lock);
    if (why == PS_OK) {
        n = po->num_recovered_cbs;
        memcpy(cbs, po->recovered_cbs, n * sizeof(cbs[0]));
    } else {
        n = po->num_failed_cbs;
        memcpy(cbs, po->failed_cbs, n * sizeof(cbs[0]));
    }
    if (n > 0)
        po->cb_running++;
    ps_mutex_unlock(&po->cb_lock);
    if (n == 0)
        return;
    const ps_postoffice_t *outer = tls_in_node_cb;
    tls_in_node_cb = po;
    for (size_t i = 0; i < n; i++)
        cbs[i].fn(cbs[i].arg, po, id, why);
    tls_in_node_cb = outer;
    ps_mutex_lock(&po->cb_lock);
    if (--po->cb_running == 0)
        ps_cond_broadcast(&po->cb_cond);
    ps_mutex_unlock(&po->cb_lock);
}

/* ---- failure handling ---- */

/* A node of the table is dead (declared by the scheduler, or found so by
 * the scheduler itself). Its connections are closed: should the process
 * be hung rather than gone and wake up, it must not talk for an id a new
 * process may take over. */
static void po_mark_dead(ps_postoffice_t *po, int id)
{
    ps_mutex_lock(&po->lock);
    int fresh = !po_is_dead_locked(po, id);
    if (fresh) {
        po_add_dead_locked(po, id);
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
    int idx = table_index(po, id);
    if (id == my_id || idx < 0 || (size_t)idx >= po->num_nodes || po->nodes == NULL) {
        ps_mutex_unlock(&po->lock);
        ps_warn(PS_LOG_CORE, "ignoring the recovery of node %d: not a peer in the table", id);
        return;
    }
    po->nodes[idx] = *node;
    po->nodes[idx].is_recovery = false;
    po_remove_dead(po, id);
    po_set_lost_locked(po, id, PS_OK);
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
static void po_lost_scheduler(ps_postoffice_t *po, const char *why)
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

/* Scheduler side: node `id` is dead; tell everyone, fail the barriers it
 * can no longer reach. */
static void po_local_barrier_release(ps_postoffice_t *po, int group, ps_status_t status,
                                     const char *reason);

void ps__po_sched_declare_dead(ps_postoffice_t *po, int id, const char *why)
{
    char who[64];
    int *notify = NULL;
    size_t num_notify = 0;
    int *fail_ids = NULL;
    int *fail_groups = NULL;
    size_t num_fail = 0;

    ps_mutex_lock(&po->lock);
    if (po_is_dead_locked(po, id) || table_index(po, id) < 0 || id == PS_SCHEDULER_ID) {
        ps_mutex_unlock(&po->lock);
        return;
    }
    po_add_dead_locked(po, id);
    notify = malloc((po->num_nodes + 1) * sizeof(*notify));
    size_t total_arrived = 0;
    for (int g = 1; g < PS__NUM_GROUPS; g++)
        total_arrived += po->arrivals[g].n;
    fail_ids = malloc((total_arrived + 1) * sizeof(*fail_ids));
    fail_groups = malloc((total_arrived + 1) * sizeof(*fail_groups));
    if (notify != NULL) {
        for (size_t i = 0; i < po->num_nodes; i++) {
            int nid = po->nodes[i].id;
            if (nid != PS_SCHEDULER_ID && !po_is_dead_locked(po, nid))
                notify[num_notify++] = nid;
        }
    }
    if (fail_ids != NULL && fail_groups != NULL) {
        for (int g = 1; g < PS__NUM_GROUPS; g++) {
            if (!group_has(g, id))
                continue;
            for (size_t i = 0; i < po->arrivals[g].n; i++) {
                fail_ids[num_fail] = po->arrivals[g].ids[i];
                fail_groups[num_fail] = g;
                num_fail++;
            }
            po->arrivals[g].n = 0;
        }
    }
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);

    ps_error(PS_LOG_CORE, "%s is dead: %s; telling the other nodes",
             id_describe(id, who, sizeof(who)), why);
    po->van->ops->disconnect(po->van, id);

    ps_node_t dead_node;
    ps_node_init(&dead_node);
    dead_node.id = id;
    dead_node.role = ps_id_to_role(id);
    ps_mutex_lock(&po->lock);
    int idx = table_index(po, id);
    if (idx >= 0 && (size_t)idx < po->num_nodes)
        dead_node = po->nodes[idx];
    ps_mutex_unlock(&po->lock);

    for (size_t i = 0; i < num_notify; i++)
        ps__po_send_control(po, notify[i], PS_CTRL_NODE_FAILED, 0, PS_ERR_PEER_GONE, 0, &dead_node,
                        1, why);
    char body[128];
    for (size_t i = 0; i < num_fail; i++) {
        snprintf(body, sizeof(body), "barrier of group %s cannot complete: node %d is dead",
                 group_name(fail_groups[i]), id);
        if (fail_ids[i] == PS_SCHEDULER_ID)
            po_local_barrier_release(po, fail_groups[i], PS_ERR_PEER_GONE, body);
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

/* ---- barriers ---- */

static void po_local_barrier_release(ps_postoffice_t *po, int group, ps_status_t status,
                                     const char *reason)
{
    ps_mutex_lock(&po->lock);
    po->bar[group].done_gen++;
    po->bar[group].status = status;
    snprintf(po->bar[group].reason, sizeof(po->bar[group].reason), "%s",
             reason != NULL ? reason : "");
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);
}

/* Scheduler: `id` reached the barrier of `group`. */
static void sched_barrier_arrive(ps_postoffice_t *po, int id, int group)
{
    int *release = NULL;
    size_t num_release = 0;
    ps_status_t status = PS_OK;
    char body[160] = "";

    ps_mutex_lock(&po->lock);
    if (group < 1 || group >= PS__NUM_GROUPS || !group_has(group, id) ||
        table_index(po, id) < 0) {
        status = PS_ERR_INVALID_ARG;
        snprintf(body, sizeof(body), "node %d cannot enter a barrier of group %d", id, group);
    } else if (po_group_has_dead_locked(po, group)) {
        status = PS_ERR_PEER_GONE;
        snprintf(body, sizeof(body), "barrier of group %s cannot complete: a member is dead",
                 group_name(group));
    } else {
        ps__po_barrier_arrivals_t *a = &po->arrivals[group];
        if (!list_add(&a->ids, &a->n, &a->cap, id)) {
            status = PS_ERR_NO_MEMORY;
            snprintf(body, sizeof(body), "out of memory in the barrier");
        } else if ((int)a->n >= group_size(po, group)) {
            release = malloc(a->n * sizeof(*release));
            if (release != NULL) {
                memcpy(release, a->ids, a->n * sizeof(*release));
                num_release = a->n;
            }
            a->n = 0;
        }
    }
    ps_mutex_unlock(&po->lock);

    if (status != PS_OK) {
        ps_warn(PS_LOG_CORE, "%s", body);
        if (id == PS_SCHEDULER_ID)
            po_local_barrier_release(po, group < PS__NUM_GROUPS && group > 0 ? group : 0,
                                     status, body);
        else
            ps__po_send_control(po, id, PS_CTRL_BARRIER, 0, status, group, NULL, 0, body);
        return;
    }
    if (num_release > 0)
        ps_info(PS_LOG_CORE, "barrier of group %s released (%zu nodes)", group_name(group),
                num_release);
    for (size_t i = 0; i < num_release; i++) {
        if (release[i] == PS_SCHEDULER_ID)
            po_local_barrier_release(po, group, PS_OK, NULL);
        else
            ps__po_send_control(po, release[i], PS_CTRL_BARRIER, 0, PS_OK, group, NULL, 0, NULL);
    }
    free(release);
}

static ps_status_t po_barrier_until(ps_postoffice_t *po, int group, ps_deadline_t deadline,
                                    const char *what)
{
    if (group < 1 || group >= PS__NUM_GROUPS) {
        ps_error(PS_LOG_CORE, "barrier: %d is not a group (1 to 7)", group);
        return PS_ERR_INVALID_ARG;
    }
    ps_mutex_lock(&po->lock);
    if (!po->ready) {
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "barrier: this node has not joined the job");
        return PS_ERR_BAD_STATE;
    }
    if (!group_has(group, ps__po_my_id(po))) {
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "barrier: this %s is not in group %s",
                 ps_role_str(po->params.role), group_name(group));
        return PS_ERR_INVALID_ARG;
    }
    if (po->bar[group].busy) {
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "barrier of group %s: another thread of this node is already "
                 "waiting in it", group_name(group));
        return PS_ERR_BAD_STATE;
    }
    po->bar[group].busy = 1;
    uint64_t gen = po->bar[group].done_gen;
    ps_mutex_unlock(&po->lock);

    ps_status_t st = PS_OK;
    if (po->is_scheduler)
        sched_barrier_arrive(po, PS_SCHEDULER_ID, group);
    else
        st = ps__po_send_control(po, PS_SCHEDULER_ID, PS_CTRL_BARRIER, 1, 0, group, NULL, 0, NULL);
    /* A scheduler that cannot be reached any more has left: the same answer
     * whether the send or the connection's failure tells us first. */
    if (st == PS_ERR_UNREACHABLE || st == PS_ERR_LINK_FAILED)
        st = PS_ERR_PEER_GONE;

    char reason[160] = "";
    ps_mutex_lock(&po->lock);
    while (st == PS_OK) {
        if (po->bar[group].done_gen != gen) {
            st = po->bar[group].status;
            memcpy(reason, po->bar[group].reason, sizeof(reason));
            break;
        }
        if (po->sched_gone) {
            st = PS_ERR_PEER_GONE;
            break;
        }
        if (po_group_has_dead_locked(po, group)) {
            st = PS_ERR_PEER_GONE;
            break;
        }
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT &&
            po->bar[group].done_gen == gen) {
            st = PS_ERR_TIMED_OUT;
            break;
        }
    }
    po->bar[group].busy = 0;
    ps_mutex_unlock(&po->lock);

    if (st == PS_ERR_TIMED_OUT)
        ps_error(PS_LOG_CORE, "%s of group %s timed out: not every node reached it", what,
                 group_name(group));
    else if (st != PS_OK)
        ps_error(PS_LOG_CORE, "%s of group %s failed: %s%s%s", what, group_name(group),
                 ps_status_str(st), reason[0] ? ": " : "", reason);
    return st;
}

/* ---- van callbacks ---- */

static ps_status_t po_cb_recv_buffer(void *arg, const ps_meta_t *meta, unsigned index,
                                     uint64_t len, ps_slice_t *slice_p)
{
    ps_postoffice_t *po = arg;
    if (ps_meta_is_control(meta) || ps__po_closing(po))
        return PS_ERR_NOT_FOUND;
    return ps__registry_recv_buffer(po->reg, meta, index, len, slice_p);
}

const ps_node_t *ps__msg_nodes(const ps_msg_t *msg, size_t *n_p)
{
    if (msg->meta.control.nodes != NULL && msg->meta.control.num_nodes > 0) {
        *n_p = msg->meta.control.num_nodes;
        return msg->meta.control.nodes;
    }
    *n_p = msg->num_nodes;
    return msg->nodes;
}

void ps__msg_body(const ps_msg_t *msg, char *buf, size_t cap)
{
    size_t n = msg->meta.body_len < cap - 1 ? msg->meta.body_len : cap - 1;
    if (msg->meta.body != NULL && n > 0)
        memcpy(buf, msg->meta.body, n);
    else
        n = 0;
    buf[n] = '\0';
}

static void po_handle_control(ps_postoffice_t *po, const ps_msg_t *msg)
{
    const ps_meta_t *meta = &msg->meta;
    switch (meta->control.cmd) {
    case PS_CTRL_ADD_NODE:
        if (po->is_scheduler && meta->request)
            ps__po_sched_on_add_node(po, msg);
        else if (!po->is_scheduler && !meta->request && meta->sender == PS_SCHEDULER_ID)
            ps__po_node_on_add_node(po, msg);
        else
            ps_warn(PS_LOG_CORE, "ignoring an unexpected add_node from node %d", meta->sender);
        break;
    case PS_CTRL_BARRIER:
    case PS_CTRL_INSTANCE_BARRIER:
        if (po->is_scheduler && meta->request) {
            sched_barrier_arrive(po, meta->sender, meta->control.barrier_group);
        } else if (!meta->request && meta->sender == PS_SCHEDULER_ID) {
            int g = meta->control.barrier_group;
            if (g < 1 || g >= PS__NUM_GROUPS) {
                ps_warn(PS_LOG_CORE, "ignoring a barrier reply for group %d", g);
                break;
            }
            char why[160];
            ps__msg_body(msg, why, sizeof(why));
            po_local_barrier_release(po, g, meta->head < 0 ? (ps_status_t)meta->head : PS_OK,
                                     why);
        }
        break;
    case PS_CTRL_HEARTBEAT:
        if (po->is_scheduler && meta->request)
            ps__po_send_control(po, meta->sender, PS_CTRL_HEARTBEAT, 0, 0, 0, NULL, 0, NULL);
        break;
    case PS_CTRL_ACK:
        if (po->res != NULL) {
            ps__msg_key_t key;
            ps__msg_key_of_ack(meta, ps__po_my_id(po), &key);
            if (!ps__resender_on_ack(po->res, &key))
                ps_trace(PS_LOG_CORE, "acknowledgement of nothing waiting from node %d "
                         "(app %d ts %d)", meta->sender, meta->app_id, meta->timestamp);
        }
        break;
    case PS_CTRL_NODE_FAILED:
        if (!po->is_scheduler && meta->sender == PS_SCHEDULER_ID) {
            size_t n;
            const ps_node_t *nodes = ps__msg_nodes(msg, &n);
            char why[256];
            char who[64];
            ps__msg_body(msg, why, sizeof(why));
            for (size_t i = 0; i < n; i++) {
                ps_warn(PS_LOG_CORE, "the scheduler declared %s dead (%s)",
                        id_describe(nodes[i].id, who, sizeof(who)), why);
                po_mark_dead(po, nodes[i].id);
            }
        }
        break;
    default:
        ps_debug(PS_LOG_CORE, "ignoring control command %s from node %d",
                 ps_control_cmd_str(meta->control.cmd), meta->sender);
        break;
    }
}

/* ---- PS_RESEND and PS_DROP_MSG ---- */

/* Acknowledges a received data message: an ACK carrying its app, customer,
 * timestamp and request flag (the rest of its key is who sends the ACK
 * and who receives it). */
static void po_send_ack(ps_postoffice_t *po, const ps_meta_t *meta)
{
    ps_msg_t ack;
    ps_msg_init(&ack);
    ack.meta.recver = meta->sender;
    ack.meta.app_id = meta->app_id;
    ack.meta.customer_id = meta->customer_id;
    ack.meta.timestamp = meta->timestamp;
    ack.meta.request = meta->request;
    ack.meta.control.cmd = PS_CTRL_ACK;
    ps__msg_key_t key;
    ps__msg_key_of(meta, &key);
    ack.meta.control.msg_sig = ps__msg_key_sig(&key);
    (void)po_van_send(po, &ack); /* a lost ACK only costs a resend */
}

/* PS_DROP_MSG: 1 if this received data message is to be dropped (splitmix64:
 * a test knob, nothing a peer gains by predicting). */
static int po_drop_on_purpose(ps_postoffice_t *po)
{
    uint64_t z = __atomic_add_fetch(&po->drop_rng, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (int)(z % 100) < po->drop_pct;
}

static ps_status_t po_resend_cb(void *arg, ps_msg_t *msg)
{
    ps_postoffice_t *po = arg;
    if (ps__po_closing(po))
        return PS_ERR_SHUTDOWN;
    ps_debug(PS_LOG_CORE, "resending to node %d: app %d ts %d%s", msg->meta.recver,
             msg->meta.app_id, msg->meta.timestamp, msg->meta.request ? " request" : " response");
    return po_van_send(po, msg);
}

static void po_giveup_cb(void *arg, const ps_msg_t *msg, int retries)
{
    ps_postoffice_t *po = arg;
    char who[64];
    id_describe(msg->meta.recver, who, sizeof(who));
    if (msg->meta.request) {
        ps_error(PS_LOG_CORE, "%s did not acknowledge request ts %d of app %d after %d resends "
                 "(PS_RESEND_TIMEOUT %d ms); failing it with 'timed out'", who,
                 msg->meta.timestamp, msg->meta.app_id, retries,
                 (int)ps_config_int_or(PS_CFG_PS_RESEND_TIMEOUT, 1000));
        ps__registry_fail_request(po->reg, &msg->meta, PS_ERR_TIMED_OUT);
    } else {
        ps_error(PS_LOG_CORE, "%s did not acknowledge the response to its request ts %d of "
                 "app %d after %d resends (PS_RESEND_TIMEOUT %d ms); its request will time out",
                 who, msg->meta.timestamp, msg->meta.app_id, retries,
                 (int)ps_config_int_or(PS_CFG_PS_RESEND_TIMEOUT, 1000));
    }
}

static void po_cb_deliver(void *arg, ps_msg_t *msg)
{
    ps_postoffice_t *po = arg;
    if (ps__po_closing(po)) {
        ps_msg_release(msg);
        return;
    }
    if (!ps_meta_is_control(&msg->meta)) {
        if (po->drop_pct > 0 && po_drop_on_purpose(po)) {
            __atomic_add_fetch(&po->num_dropped, 1, __ATOMIC_RELAXED);
            ps_debug(PS_LOG_CORE, "dropping a message from node %d on purpose (PS_DROP_MSG=%d): "
                     "app %d ts %d", msg->meta.sender, po->drop_pct, msg->meta.app_id,
                     msg->meta.timestamp);
            ps_msg_release(msg);
            return;
        }
        if (po->res != NULL) {
            msg->meta.recver = ps__po_my_id(po);
            po_send_ack(po, &msg->meta);
            if (ps__resender_seen(po->res, &msg->meta, ps_time_now_ns())) {
                ps_debug(PS_LOG_CORE, "dropping a duplicate from node %d: app %d ts %d",
                         msg->meta.sender, msg->meta.app_id, msg->meta.timestamp);
                ps_msg_release(msg);
                return;
            }
        }
    }
    po_log_msg("recv", msg);
    ps__profile_msg(po->profile, &msg->meta);
    int sender = msg->meta.sender;
    if (po->is_scheduler) {
        uint64_t *seen = __atomic_load_n(&po->last_seen_ns, __ATOMIC_ACQUIRE);
        int idx = seen != NULL ? table_index(po, sender) : -1;
        if (idx >= 0)
            __atomic_store_n(&seen[idx], ps_time_now_ns(), __ATOMIC_RELAXED);
    } else if (sender == PS_SCHEDULER_ID) {
        __atomic_store_n(&po->sched_seen_ns, ps_time_now_ns(), __ATOMIC_RELAXED);
    }
    if (ps_meta_is_control(&msg->meta)) {
        po_handle_control(po, msg);
        ps_msg_release(msg);
    } else {
        ps__registry_deliver(po->reg, msg);
    }
}

static void po_cb_deliver_lane(void *arg, int sender, const uint8_t *bytes, size_t len)
{
    ps_postoffice_t *po = arg;
    int app_id, customer_id;
    if (ps__po_closing(po))
        return;
    if (sender < 8 || !ps_lane_len_ok(len) ||
        !ps_lane_hdr_read(bytes, len, &app_id, &customer_id)) {
        ps_warn_ratelimited(PS_LOG_CORE, "dropped a lane message of %zu bytes from node %d: "
                            "%s", len, sender, sender < 8 ? "not from a server or worker"
                                               : !ps_lane_len_ok(len) ? "outside the lane's size"
                                                                      : "unknown header");
        return;
    }
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level))
        ps_trace(PS_LOG_CORE, "recv: lane message of %zu bytes from node %d (app %d customer %d)",
                 len, sender, app_id, customer_id);
    ps__profile_lane(po->profile, sender, ps__po_my_id(po), app_id, customer_id,
                     len - PS_LANE_HDR_LEN);
    ps__registry_deliver_lane(po->reg, sender, app_id, customer_id, bytes + PS_LANE_HDR_LEN,
                              len - PS_LANE_HDR_LEN);
}

static void po_cb_peer_failed(void *arg, int node_id, ps_status_t why)
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
            list_add(&po->left, &po->num_left, &po->left_cap, node_id);
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
        int known = po->ready && table_index(po, node_id) >= 0;
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
        po_lost_scheduler(po, reason);
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
    po_set_lost_locked(po, node_id, status);
    ps_mutex_unlock(&po->lock);
    if (quiet)
        ps_debug(PS_LOG_CORE, "connection to node %d closed", node_id);
    else
        ps_warn(PS_LOG_CORE, "lost the connection to %s: %s; failing its requests",
                id_describe(node_id, who, sizeof(who)), ps_status_str(why));
    ps__registry_fail_peer(po->reg, node_id, status, 0);
}

/* ---- timer thread ---- */

static void po_kick_timer(void *arg)
{
    ps_postoffice_t *po = arg;
    ps_mutex_lock(&po->lock);
    po->timer_kick = 1;
    ps_cond_signal(&po->timer_cond);
    ps_mutex_unlock(&po->lock);
}

void ps__po_kick(ps_postoffice_t *po)
{
    po_kick_timer(po);
}

static void *po_timer_main(void *arg)
{
    ps_postoffice_t *po = arg;
    uint64_t interval_ns = (uint64_t)po->params.heartbeat_interval_s * PS_NSEC_PER_SEC;
    uint64_t timeout_ns = (uint64_t)po->params.heartbeat_timeout_s * PS_NSEC_PER_SEC;
    uint64_t next_heartbeat = 0;

    ps_mutex_lock(&po->lock);
    while (!po->timer_stop) {
        uint64_t now = ps_time_now_ns();
        uint64_t wake = UINT64_MAX;
        int send_heartbeat = 0;
        int lose_scheduler = 0;
        int dead_id = -1;
        uint64_t dead_silence = 0;

        if (po->ready && !po->is_scheduler && !po->sched_gone) {
            if (interval_ns > 0) {
                if (next_heartbeat == 0 || now >= next_heartbeat) {
                    send_heartbeat = 1;
                    next_heartbeat = now + interval_ns;
                }
                wake = next_heartbeat;
            }
            if (interval_ns > 0 && timeout_ns > 0 && !po->released) {
                uint64_t seen = __atomic_load_n(&po->sched_seen_ns, __ATOMIC_RELAXED);
                if (now > seen && now - seen > timeout_ns)
                    lose_scheduler = 1;
                else if (seen + timeout_ns + 1 < wake)
                    wake = seen + timeout_ns + 1;
            }
        }
        if (po->ready && po->is_scheduler && timeout_ns > 0 && po->last_seen_ns != NULL) {
            for (size_t i = 0; i + 1 < po->num_nodes && dead_id < 0; i++) {
                int id = po->nodes[i].id;
                if (po_is_dead_locked(po, id) || in_list(po->left, po->num_left, id))
                    continue;
                uint64_t seen = __atomic_load_n(&po->last_seen_ns[i], __ATOMIC_RELAXED);
                if (now > seen && now - seen > timeout_ns) {
                    dead_id = id;
                    dead_silence = now - seen;
                }
            }
            if (now + PS__DEAD_SCAN_NS < wake)
                wake = now + PS__DEAD_SCAN_NS;
        }
        po->timer_kick = 0;
        ps_mutex_unlock(&po->lock);

        if (send_heartbeat)
            ps__po_send_control(po, PS_SCHEDULER_ID, PS_CTRL_HEARTBEAT, 1, 0, 0, &po->my_node, 1,
                            NULL);
        if (lose_scheduler) {
            char why[96];
            snprintf(why, sizeof(why), "no message from it for more than %d s",
                     po->params.heartbeat_timeout_s);
            po_lost_scheduler(po, why);
        }
        if (dead_id >= 0) {
            char why[96];
            snprintf(why, sizeof(why), "no heartbeat for %.1f s (PS_HEARTBEAT_TIMEOUT is %d s)",
                     (double)dead_silence / 1e9, po->params.heartbeat_timeout_s);
            ps__po_sched_declare_dead(po, dead_id, why);
        }
        uint64_t pending = ps__registry_expire_pending(po->reg, ps_time_now_ns());
        if (pending != 0 && pending < wake)
            wake = pending;
        if (po->res != NULL) {
            uint64_t due = ps__resender_poll(po->res, ps_time_now_ns(), po_resend_cb,
                                             po_giveup_cb, po);
            if (due != 0 && due < wake)
                wake = due;
        }
        if (po->is_scheduler) {
            uint64_t late = ps__po_sched_expire_late(po, ps_time_now_ns());
            if (late != 0 && late < wake)
                wake = late;
        }

        ps_mutex_lock(&po->lock);
        if (po->timer_stop || po->timer_kick || dead_id >= 0 || lose_scheduler)
            continue;
        (void)ps_cond_wait(&po->timer_cond, &po->lock,
                           wake == UINT64_MAX ? ps_deadline_infinite() : ps_deadline_at_ns(wake));
    }
    ps_mutex_unlock(&po->lock);
    return NULL;
}

/* ---- teardown ---- */

/* Frees the postoffice once nothing runs in it; PS_ERR_TIMED_OUT (and
 * nothing freed) when a busy-poll waiter still ran the van's loop at
 * `deadline`. */
static ps_status_t po_free(ps_postoffice_t *po, ps_deadline_t deadline)
{
    if (po->timer_started) {
        ps_mutex_lock(&po->lock);
        po->timer_stop = 1;
        ps_cond_signal(&po->timer_cond);
        ps_mutex_unlock(&po->lock);
        ps_thread_join(&po->timer, NULL);
        po->timer_started = 0;
    }
    __atomic_store_n(&po->closing, 1, __ATOMIC_RELEASE);
    if (po->reg != NULL && ps__registry_stop_driving(po->reg, deadline) != PS_OK) {
        /* Its thread is inside the van (say, in a receive function that
         * blocks): closing the van, or freeing the registry it leaves
         * through, would pull them from under it. Outstanding requests
         * fail; the van, the registry and the postoffice stay. */
        ps__registry_close(po->reg, PS_ERR_SHUTDOWN);
        ps_error(PS_LOG_CORE, "a busy-poll waiter still runs the van's loop at the deadline; "
                 "leaving the van open and the postoffice allocated");
        return PS_ERR_TIMED_OUT;
    }
    const uint64_t abandoned = ps_van_loop_abandon_count();
    if (po->van != NULL)
        po->van->ops->close(po->van);
    if (ps_van_loop_abandon_count() != abandoned) {
        /* The van's thread was left stuck inside it (logged), with the van:
         * its callbacks lead here, so the registry and the postoffice stay. */
        po->van = NULL;
        if (po->reg != NULL)
            ps__registry_close(po->reg, PS_ERR_SHUTDOWN);
        ps_error(PS_LOG_CORE, "the van's progress thread is stuck inside it; leaving the "
                 "postoffice allocated");
        return PS_ERR_TIMED_OUT;
    }
    po->van = NULL;
    if (po->reg != NULL)
        ps__registry_destroy(po->reg);
    ps__resender_destroy(po->res);
    ps__profile_close(po->profile);
    free(po->late);
    for (int g = 0; g < PS__NUM_GROUPS; g++)
        free(po->arrivals[g].ids);
    free(po->reg_nodes);
    free(po->nodes);
    free(po->dead);
    free(po->left);
    free(po->lost_ids);
    free(po->lost_why);
    free(po->last_seen_ns);
    ps_cond_destroy(&po->cb_cond);
    ps_mutex_destroy(&po->cb_lock);
    ps_cond_destroy(&po->timer_cond);
    ps_cond_destroy(&po->cond);
    ps_mutex_destroy(&po->lock);
    free(po);
    return PS_OK;
}

/* ---- the scheduler leaves last ---- */

/* Waits until `expected` nodes disconnected (or died), up to `deadline`:
 * the scheduler leaves last, so that what it sent last (the final barrier
 * release, a start failure) is read before its connections close. */
void ps__po_linger(ps_postoffice_t *po, size_t expected, ps_deadline_t deadline)
{
    ps_mutex_lock(&po->lock);
    while (po->num_left + po->num_dead < expected) {
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT)
            break;
    }
    size_t left = po->num_left;
    ps_mutex_unlock(&po->lock);
    ps_debug(PS_LOG_CORE, "%zu of %zu nodes disconnected before the scheduler left", left,
             expected);
}

/* ---- public API ---- */

/* PS_SMALL_LANE: on where the van has a send_lane op, unless every data
 * message must pass the resender or the dropper (which see messages). */
static ps_status_t po_setup_lane(ps_postoffice_t *po)
{
    int on = 1;
    ps_status_t st = ps_config_get_bool(PS_CFG_PS_SMALL_LANE, &on);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    po->send_lane = ps_van_send_lane_op(po->van);
    po->lane_max = 0;
    if (on && po->send_lane != NULL && po->res == NULL && po->drop_pct == 0 &&
        !po->is_scheduler)
        po->lane_max = PS_LANE_MAX_PAYLOAD;
    ps_debug(PS_LOG_CORE, "small lane %s", po->lane_max ? "on" : "off");
    return PS_OK;
}

/* PS_RESEND, PS_RESEND_TIMEOUT and PS_DROP_MSG. */
static ps_status_t po_setup_resend(ps_postoffice_t *po)
{
    int resend = 0;
    ps_status_t st = ps_config_get_bool(PS_CFG_PS_RESEND, &resend);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    int64_t timeout_ms = 1000;
    st = ps_config_get_int(PS_CFG_PS_RESEND_TIMEOUT, &timeout_ms);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    int64_t drop = 0;
    st = ps_config_get_int(PS_CFG_PS_DROP_MSG, &drop);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    if (drop < 0 || drop > 100) {
        ps_error(PS_LOG_CORE, "PS_DROP_MSG is %lld; expected a percentage, 0 to 100",
                 (long long)drop);
        return PS_ERR_CONFIG;
    }
    if (resend) {
        if (timeout_ms <= 0 || timeout_ms > 3600 * 1000) {
            ps_error(PS_LOG_CORE, "PS_RESEND_TIMEOUT is %lld; expected 1 to 3600000 (ms)",
                     (long long)timeout_ms);
            return PS_ERR_CONFIG;
        }
        st = ps__resender_create((uint64_t)timeout_ms * PS_NSEC_PER_MSEC, PS__RESEND_MAX_RETRIES,
                                 PS__RESEND_DEDUP_CAP, &po->res);
        if (st != PS_OK)
            return st;
        ps_info(PS_LOG_CORE, "PS_RESEND: data messages are acknowledged, resent after %lld ms "
                "(then 2x, 3x, ...) at most %d times, and de-duplicated",
                (long long)timeout_ms, PS__RESEND_MAX_RETRIES);
    }
    po->drop_pct = (int)drop;
    po->drop_rng = ps_time_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)po;
    if (drop > 0)
        ps_warn(PS_LOG_CORE, "PS_DROP_MSG=%lld: dropping that percentage of the data messages "
                "this node receives, on purpose%s", (long long)drop,
                resend ? "" : " (without PS_RESEND=1 they are lost for good)");
    return PS_OK;
}

ps_status_t ps_postoffice_start(const ps_start_params_t *params, int do_barrier,
                                ps_postoffice_t **po_p)
{
    ps_start_params_t p;
    ps_status_t st;

    if (po_p == NULL)
        return PS_ERR_INVALID_ARG;
    /* A value that does not parse stops the start, whatever reads it later
     * (the getters with a fallback would only log it and go on). */
    if (ps_config_validate() != PS_OK) {
        ps_error(PS_LOG_CORE, "not starting: fix or unset the variables named above");
        return PS_ERR_CONFIG;
    }
    if (params == NULL) {
        st = ps_start_params_from_env(&p);
        if (st != PS_OK)
            return st;
    } else {
        p = *params;
    }
    p.scheduler_host[sizeof(p.scheduler_host) - 1] = '\0';
    p.node_host[sizeof(p.node_host) - 1] = '\0';
    p.interface[sizeof(p.interface) - 1] = '\0';
    p.van[sizeof(p.van) - 1] = '\0';
    if ((st = ps__po_check_params(&p)) != PS_OK)
        return st;

    /* The van, by name: unknown or unusable names are reported by the
     * registry with the list of vans compiled in. */
    const char *van_name = p.van;
    if (van_name[0] == '\0' && (st = ps_van_select_name(&van_name)) != PS_OK)
        return st;
    const ps_van_component_t *comp = NULL;
    if ((st = ps_van_find(van_name, &comp)) != PS_OK)
        return st;
    snprintf(p.van, sizeof(p.van), "%s", comp->name);

    ps_postoffice_t *po = calloc(1, sizeof(*po));
    if (po == NULL)
        return PS_ERR_NO_MEMORY;
    po->params = p;
    po->van_comp = comp;
    po->is_scheduler = p.role == PS_ROLE_SCHEDULER;
    po->my_id = po->is_scheduler ? PS_SCHEDULER_ID : PS_NODE_EMPTY;
    if (ps_mutex_init(&po->lock) != PS_OK) {
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_cond_init(&po->cond) != PS_OK) {
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_cond_init(&po->timer_cond) != PS_OK) {
        ps_cond_destroy(&po->cond);
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_mutex_init(&po->cb_lock) != PS_OK) {
        ps_cond_destroy(&po->timer_cond);
        ps_cond_destroy(&po->cond);
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_cond_init(&po->cb_cond) != PS_OK) {
        ps_mutex_destroy(&po->cb_lock);
        ps_cond_destroy(&po->timer_cond);
        ps_cond_destroy(&po->cond);
        ps_mutex_destroy(&po->lock);
        free(po);
        return PS_ERR_NO_MEMORY;
    }
    st = ps__registry_create(p.role, po_kick_timer, po, &po->reg);
    if (st != PS_OK)
        goto err;
    if ((st = ps__profile_open(ps_role_str(p.role), &po->profile)) != PS_OK)
        goto err;
    if ((st = po_setup_resend(po)) != PS_OK)
        goto err;
    if ((st = ps__po_setup_identity(po)) != PS_OK)
        goto err;

    ps_deadline_t deadline = ps_deadline_from_ms(p.start_timeout_ms);

    /* This node's address. */
    ps_node_init(&po->my_node);
    po->my_node.role = p.role;
    po->my_node.num_ports = 1;
    po->my_node.dev_types[0] = PS_DEV_CPU;
    if (po->is_scheduler) {
        po->my_node.id = PS_SCHEDULER_ID;
        snprintf(po->my_node.hostname, sizeof(po->my_node.hostname), "%s", p.scheduler_host);
        po->my_node.ports[0] = p.scheduler_port;
        ps_log_set_prefix("scheduler");
    } else {
        st = ps__po_select_host(&p, po->my_node.hostname, sizeof(po->my_node.hostname));
        if (st != PS_OK)
            goto err;
        po->my_node.ports[0] = p.port;
        po->my_node.aux_id = p.preferred_rank;
        ps_log_set_prefix(ps_role_str(p.role));
    }

    /* Open and bind the van. */
    ps_van_params_t vp;
    memset(&vp, 0, sizeof(vp));
    vp.role = p.role;
    vp.is_scheduler = po->is_scheduler;
    /* The scheduler carries control messages only: a spinning scheduler
     * would take a core from the workers and servers it serves. */
    vp.busy_poll = p.busy_poll && !po->is_scheduler;
    int ports = (int)ps_config_int_or(PS_CFG_DMLC_NUM_PORTS, 1);
    int conns = (int)ps_config_int_or(PS_CFG_PS_TCP_CONNS_PER_PEER, 1);
    vp.conns_per_peer = conns > ports ? conns : ports;
    vp.max_meta_bytes = ps_config_size_or(PS_CFG_PS_MAX_META_BYTES, 1u << 20);
    vp.max_message_bytes = ps_config_size_or(PS_CFG_PS_MAX_MESSAGE_BYTES, 4ull << 30);
    vp.max_data_segments = (uint32_t)ps_config_int_or(PS_CFG_PS_MAX_DATA_SEGMENTS, 16);
    vp.connect_timeout_ms = (int)ps_config_int_or(PS_CFG_PS_CONNECT_TIMEOUT_MS, 10000);
    vp.bind_any = ps_config_bool_or(PS_CFG_PS_BIND_ANY, 0) ||
                  (po->is_scheduler && ps_config_bool_or(PS_CFG_DMLC_USE_KUBERNETES, 0));
    /* The job secret, read once here (ps/net/auth.h); the van copies it. */
    if ((st = ps_auth_load(&vp.auth_key, &vp.auth_enabled)) != PS_OK)
        goto err;
    po->auth_enabled = vp.auth_enabled;
    if (vp.auth_enabled) {
        /* A van that does not run the handshake would let anyone in: with
         * a secret set, only the vans that check it may start. */
        static const char *const auth_vans[] = {"tcp", "shm", "ipc", "ucx", "fabric",
                                                "ibverbs"};
        int can = 0;
        for (size_t i = 0; i < sizeof(auth_vans) / sizeof(auth_vans[0]); i++)
            can |= strcmp(comp->name, auth_vans[i]) == 0;
        if (!can) {
            ps_error(PS_LOG_CORE, "PS_JOB_SECRET is set, but the %s van cannot check it yet; "
                     "use the tcp van or unset the secret", comp->name);
            st = PS_ERR_UNSUPPORTED;
            goto err;
        }
        ps_info(PS_LOG_CORE, "job secret set: every connection must prove it holds it");
    }
    ps_van_callbacks_t cb = {
        .arg = po,
        .recv_buffer = po_cb_recv_buffer,
        .deliver = po_cb_deliver,
        .peer_failed = po_cb_peer_failed,
        .deliver_lane = po_cb_deliver_lane,
    };
    st = comp->ops->open(&vp, &cb, &po->van);
    ps_auth_key_wipe(&vp.auth_key);
    if (st != PS_OK)
        goto err;
    if ((st = po->van->ops->query(po->van, &po->attr)) != PS_OK)
        goto err;
    if ((st = po_setup_lane(po)) != PS_OK)
        goto err;
    if (po->is_scheduler && (st = po->van->ops->set_node_id(po->van, PS_SCHEDULER_ID)) != PS_OK)
        goto err;
    int retries = po->is_scheduler || p.port != 0
                      ? 0
                      : (int)ps_config_int_or(PS_CFG_PS_BIND_RETRIES, 40);
    if ((st = po->van->ops->bind(po->van, &po->my_node, retries)) != PS_OK) {
        if (po->is_scheduler && st == PS_ERR_ADDRESS_IN_USE)
            ps_error(PS_LOG_CORE, "the scheduler cannot listen on %s:%d: the port is taken (by "
                     "another job's scheduler?); give this job another DMLC_PS_ROOT_PORT",
                     p.scheduler_host, p.scheduler_port);
        goto err;
    }
    char who[PS_NODE_HOSTNAME_MAX + 48];
    ps_info(PS_LOG_CORE, "%s listening (van %s)",
            ps__node_describe(&po->my_node, who, sizeof(who)), comp->name);

    if ((st = ps_thread_create("ps-po-timer", PS_THREAD_NO_CPU, po_timer_main, po,
                               &po->timer)) != PS_OK)
        goto err;
    po->timer_started = 1;

    if (po->is_scheduler) {
        ps_info(PS_LOG_CORE, "job %s: waiting for %d servers and %d workers to register "
                "(a node restarted later proves it belongs to the job with PS_JOB_ID=%s%s)",
                po->job_id, p.num_servers, p.num_workers, po->job_id,
                po->auth_enabled ? " or the job secret" : "");
        if (p.heartbeat_timeout_s > 0)
            ps_info(PS_LOG_CORE, "nodes silent for %d s are declared dead; they must send "
                    "heartbeats (PS_HEARTBEAT_INTERVAL)", p.heartbeat_timeout_s);
        st = ps__po_sched_start(po, deadline);
    } else {
        st = ps__po_node_start(po, deadline);
    }
    if (st != PS_OK)
        goto err;

    if (po->recovered) {
        /* As upstream: the others passed the start barrier long ago. */
        ps_info(PS_LOG_CORE, "took over node %d from a dead process; skipping the start barrier",
                ps__po_my_id(po));
    } else if (do_barrier) {
        int ms = ps_deadline_remaining_ms(deadline);
        ps_deadline_t bd = ms < 0 ? ps_deadline_infinite() : ps_deadline_from_ms(ms > 0 ? ms : 1);
        st = po_barrier_until(po, PS_GROUP_ALL, bd, "start barrier");
        if (st != PS_OK)
            goto err;
    }
    *po_p = po;
    return PS_OK;

err:
    (void)po_free(po, ps_deadline_from_ms(PS__DRIVERS_MIN_MS));
    return st;
}

ps_status_t ps_postoffice_finalize(ps_postoffice_t *po, int do_barrier)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    ps_deadline_t deadline = ps_deadline_from_ms(po->params.finalize_timeout_ms);
    ps_status_t st = PS_OK;

    ps_mutex_lock(&po->lock);
    po->finalizing = 1;
    int ready = po->ready && !po->sched_gone;
    int lost = po->ready && po->sched_gone;
    ps_cond_broadcast(&po->cond); /* ps_postoffice_wait_alive() ends */
    ps_mutex_unlock(&po->lock);

    if (do_barrier && ready) {
        st = po_barrier_until(po, PS_GROUP_ALL, deadline, "finalize barrier");
        if (st != PS_OK)
            ps_warn(PS_LOG_CORE, "leaving without the other nodes: %s", ps_status_str(st));
    } else if (do_barrier && lost) {
        /* No finalize barrier without the scheduler: the job did not end
         * together, whichever way this node learned it first. */
        st = PS_ERR_PEER_GONE;
        ps_warn(PS_LOG_CORE, "leaving without the other nodes: the scheduler is gone");
    }
    ps_mutex_lock(&po->lock);
    po->released = 1;
    ps_mutex_unlock(&po->lock);
    if (po->drop_pct > 0 || po->res != NULL) {
        uint64_t dropped = __atomic_load_n(&po->num_dropped, __ATOMIC_RELAXED);
        uint64_t resent = po->res != NULL ? ps__resender_num_resent(po->res) : 0;
        uint64_t dups = po->res != NULL ? ps__resender_num_duplicates(po->res) : 0;
        if (po->drop_pct > 0)
            ps_warn(PS_LOG_CORE, "PS_DROP_MSG=%d: %llu received data messages dropped on purpose; "
                    "PS_RESEND: %llu resent, %llu duplicates dropped", po->drop_pct,
                    (unsigned long long)dropped, (unsigned long long)resent,
                    (unsigned long long)dups);
        else
            ps_info(PS_LOG_CORE, "PS_RESEND: %llu resent, %llu duplicates dropped",
                    (unsigned long long)resent, (unsigned long long)dups);
    }
    if (po->is_scheduler && ready && do_barrier && st == PS_OK) {
        ps_deadline_t linger = ps_deadline_min(deadline, ps_deadline_from_ms(PS__LINGER_MS));
        ps__po_linger(po, po->num_nodes > 0 ? po->num_nodes - 1 : 0, linger);
    }
    /* However long the barrier took, drivers get a moment to hand the
     * van's loop back. */
    ps_deadline_t drivers = ps_deadline_from_ms(PS__DRIVERS_MIN_MS);
    if (ps_deadline_is_infinite(deadline) ||
        ps_deadline_remaining_ns(deadline) > ps_deadline_remaining_ns(drivers))
        drivers = deadline;
    if (po_free(po, drivers) != PS_OK)
        return PS_ERR_TIMED_OUT;
    ps_info(PS_LOG_CORE, "finalized");
    return st;
}

ps_status_t ps_postoffice_barrier(ps_postoffice_t *po, int group, int timeout_ms)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    if (timeout_ms < 0)
        timeout_ms = po->params.barrier_timeout_ms;
    return po_barrier_until(po, group, ps_deadline_from_ms(timeout_ms), "barrier");
}

int ps_postoffice_my_id(const ps_postoffice_t *po)
{
    return ps__po_my_id(po);
}

int ps_postoffice_my_rank(const ps_postoffice_t *po)
{
    return ps_id_to_rank(ps__po_my_id(po));
}

ps_role_t ps_postoffice_role(const ps_postoffice_t *po)
{
    return po->params.role;
}

int ps_postoffice_num_workers(const ps_postoffice_t *po)
{
    return po->params.num_workers;
}

int ps_postoffice_num_servers(const ps_postoffice_t *po)
{
    return po->params.num_servers;
}

int ps_postoffice_request_timeout_ms(const ps_postoffice_t *po)
{
    return po->params.request_timeout_ms;
}

int ps_postoffice_finalize_timeout_ms(const ps_postoffice_t *po)
{
    return po->params.finalize_timeout_ms;
}

int ps_postoffice_group_ids(const ps_postoffice_t *po, int group_or_id, int *ids, int cap)
{
    int n = 0;
    if (!ps_id_is_group(group_or_id)) {
        if (table_index(po, group_or_id) < 0)
            return 0;
        if (cap > 0 && ids != NULL)
            ids[0] = group_or_id;
        return 1;
    }
    /* Ids follow from the counts (scheduler 1, servers 8 + 2r, workers
     * 9 + 2r), so this works before the table arrives too. */
    if (group_or_id & PS_GROUP_SCHEDULER) {
        if (n < cap && ids != NULL)
            ids[n] = PS_SCHEDULER_ID;
        n++;
    }
    if (group_or_id & PS_GROUP_SERVER) {
        for (int r = 0; r < po->params.num_servers; r++, n++) {
            if (n < cap && ids != NULL)
                ids[n] = ps_server_rank_to_id(r);
        }
    }
    if (group_or_id & PS_GROUP_WORKER) {
        for (int r = 0; r < po->params.num_workers; r++, n++) {
            if (n < cap && ids != NULL)
                ids[n] = ps_worker_rank_to_id(r);
        }
    }
    return n;
}

ps_status_t ps_postoffice_server_key_range(const ps_postoffice_t *po, int server_rank,
                                           uint64_t *begin_p, uint64_t *end_p)
{
    int n = po->params.num_servers;
    if (server_rank < 0 || server_rank >= n || begin_p == NULL || end_p == NULL)
        return PS_ERR_INVALID_ARG;
    /* Upstream: [MAX / n * r, MAX / n * (r + 1)); the last range also takes
     * the few keys that rounding leaves above it. */
    uint64_t step = UINT64_MAX / (uint64_t)n;
    *begin_p = step * (uint64_t)server_rank;
    *end_p = server_rank == n - 1 ? UINT64_MAX : step * (uint64_t)(server_rank + 1);
    return PS_OK;
}

uint32_t ps_postoffice_capabilities(const ps_postoffice_t *po)
{
    return (uint32_t)po->attr.cap_flags;
}

const char *ps_postoffice_van_name(const ps_postoffice_t *po)
{
    return po->van_comp->name;
}

/* A van's send status as the postoffice reports it: no connection to the
 * peer (it failed, and the scheduler has not declared it dead yet) says
 * what the requests waiting for it were told. */
static ps_status_t po_send_status(ps_postoffice_t *po, int recver, ps_status_t st)
{
    if (st != PS_ERR_UNREACHABLE)
        return st;
    ps_mutex_lock(&po->lock);
    st = po_is_dead_locked(po, recver) || (recver == PS_SCHEDULER_ID && po->sched_gone)
             ? PS_ERR_PEER_GONE
             : po_get_lost_locked(po, recver);
    ps_mutex_unlock(&po->lock);
    return st == PS_OK ? PS_ERR_LINK_FAILED : st;
}

ps_status_t ps_postoffice_send(ps_postoffice_t *po, const ps_msg_t *msg)
{
    if (po == NULL || msg == NULL)
        return PS_ERR_INVALID_ARG;
    if (ps__po_closing(po))
        return PS_ERR_SHUTDOWN;
    int recver = msg->meta.recver;
    if (recver != PS_SCHEDULER_ID && recver < 8) {
        ps_error(PS_LOG_CORE, "send: %d is not a node id", recver);
        return PS_ERR_INVALID_ARG;
    }
    if (__atomic_load_n(&po->num_dead, __ATOMIC_RELAXED) > 0) {
        ps_mutex_lock(&po->lock);
        int dead = po_is_dead_locked(po, recver);
        ps_mutex_unlock(&po->lock);
        if (dead)
            return PS_ERR_PEER_GONE;
    }
    /* The van sends the message as from this node. The caller's message is
     * const: a copy (~800 bytes, the bulk of this function's cost) carries
     * the sender unless the caller has set it already. */
    int my_id = ps__po_my_id(po);
    const ps_msg_t *out = msg;
    ps_msg_t copy;
    if (msg->meta.sender != my_id) {
        copy = *msg;
        copy.meta.sender = my_id;
        out = &copy;
    }
    int tracked = 0;
    if (po->res != NULL && !ps_meta_is_control(&out->meta)) {
        /* Remembered before it leaves: its ACK may come back at once. */
        int kick = 0;
        ps_status_t ts = ps__resender_track(po->res, out, ps_time_now_ns(), &kick);
        if (ts == PS_OK)
            tracked = 1;
        else if (ts == PS_ERR_EXISTS)
            ps_warn_ratelimited(PS_LOG_CORE, "resend: a message to node %d with app %d customer "
                                "%d ts %d is still unacknowledged; this one with the same key "
                                "goes without resend", recver, out->meta.app_id,
                                out->meta.customer_id, out->meta.timestamp);
        if (kick)
            ps__po_kick(po);
    }
    po_log_msg("send", out);
    ps_status_t st = po->van->ops->send(po->van, out);
    if (st != PS_OK && tracked)
        ps__resender_untrack(po->res, out);
    return po_send_status(po, recver, st);
}

size_t ps_postoffice_lane_max(const ps_postoffice_t *po)
{
    return po != NULL ? po->lane_max : 0;
}

ps_status_t ps_postoffice_send_lane(ps_postoffice_t *po, int recver, int app_id, int customer_id,
                                    uint8_t *payload, size_t len)
{
    if (po == NULL || payload == NULL || len > po->lane_max)
        return PS_ERR_INVALID_ARG;
    if (app_id < 0 || app_id > PS_LANE_MAX_ID || customer_id < 0 || customer_id > PS_LANE_MAX_ID)
        return PS_ERR_UNSUPPORTED; /* ids the lane header cannot carry */
    if (ps__po_closing(po))
        return PS_ERR_SHUTDOWN;
    if (recver < 8) {
        ps_error(PS_LOG_CORE, "send_lane: %d is not the id of a server or worker", recver);
        return PS_ERR_INVALID_ARG;
    }
    if (__atomic_load_n(&po->num_dead, __ATOMIC_RELAXED) > 0) {
        ps_mutex_lock(&po->lock);
        int dead = po_is_dead_locked(po, recver);
        ps_mutex_unlock(&po->lock);
        if (dead)
            return PS_ERR_PEER_GONE;
    }
    uint8_t *bytes = payload - PS_LANE_HDR_LEN;
    ps_lane_hdr_write(bytes, app_id, customer_id);
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level))
        ps_trace(PS_LOG_CORE, "send: lane message of %zu bytes to node %d (app %d customer %d)",
                 len, recver, app_id, customer_id);
    return po_send_status(po, recver, po->send_lane(po->van, recver, bytes,
                                                    PS_LANE_HDR_LEN + len));
}

void ps_postoffice_traffic(const ps_postoffice_t *po, uint64_t *sent_p, uint64_t *recv_p)
{
    uint64_t s = 0;
    uint64_t r = 0;
    if (po->van != NULL)
        po->van->ops->stats(po->van, &s, &r);
    if (sent_p != NULL)
        *sent_p = s;
    if (recv_p != NULL)
        *recv_p = r;
}

int ps_postoffice_dead_nodes(const ps_postoffice_t *po, int *ids, int cap)
{
    ps_postoffice_t *mpo = (ps_postoffice_t *)po; /* the lock, not the state, changes */
    ps_mutex_lock(&mpo->lock);
    int n = (int)po->num_dead;
    for (int i = 0; i < n && i < cap && ids != NULL; i++)
        ids[i] = po->dead[i];
    ps_mutex_unlock(&mpo->lock);
    return n;
}

const char *ps_postoffice_job_id(const ps_postoffice_t *po)
{
    if (po == NULL)
        return "";
    ps_postoffice_t *mpo = (ps_postoffice_t *)po; /* the lock, not the state, changes */
    ps_mutex_lock(&mpo->lock);
    const char *id = po->job_id; /* written once, before the node is ready */
    ps_mutex_unlock(&mpo->lock);
    return id;
}

int ps_postoffice_is_recovery(const ps_postoffice_t *po)
{
    ps_postoffice_t *mpo = (ps_postoffice_t *)po; /* the lock, not the state, changes */
    ps_mutex_lock(&mpo->lock);
    int r = po->recovered;
    ps_mutex_unlock(&mpo->lock);
    return r;
}

static int po_group_or_id_has_dead_locked(const ps_postoffice_t *po, int group_or_id)
{
    if (ps_id_is_group(group_or_id))
        return po_group_has_dead_locked(po, group_or_id);
    return po_is_dead_locked(po, group_or_id);
}

ps_status_t ps_postoffice_wait_alive(ps_postoffice_t *po, int group, int timeout_ms)
{
    if (po == NULL || group < 1 || (!ps_id_is_group(group) && table_index(po, group) < 0))
        return PS_ERR_INVALID_ARG;
    if (timeout_ms < 0)
        timeout_ms = po->params.barrier_timeout_ms;
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    ps_status_t st = PS_OK;
    ps_mutex_lock(&po->lock);
    for (;;) {
        if (po->sched_gone) {
            st = PS_ERR_PEER_GONE;
            break;
        }
        if (po->finalizing) {
            st = PS_ERR_SHUTDOWN;
            break;
        }
        if (!po_group_or_id_has_dead_locked(po, group))
            break;
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT &&
            po_group_or_id_has_dead_locked(po, group)) {
            st = PS_ERR_TIMED_OUT;
            break;
        }
    }
    ps_mutex_unlock(&po->lock);
    if (st == PS_ERR_TIMED_OUT)
        ps_warn(PS_LOG_CORE, "no new process took over the dead nodes of %s %d within %d ms",
                ps_id_is_group(group) ? "group" : "node", group, timeout_ms);
    return st;
}

static ps_status_t po_add_callback(ps_postoffice_t *po, ps__po_node_cb_t *list, size_t *n,
                                   ps_node_event_func_t fn, void *arg)
{
    if (po == NULL || fn == NULL)
        return PS_ERR_INVALID_ARG;
    ps_mutex_lock(&po->cb_lock);
    if (*n >= PS_NODE_CALLBACKS_MAX) {
        ps_mutex_unlock(&po->cb_lock);
        ps_error(PS_LOG_CORE, "more than %d node callbacks registered", PS_NODE_CALLBACKS_MAX);
        return PS_ERR_NO_RESOURCE;
    }
    list[*n].fn = fn;
    list[*n].arg = arg;
    (*n)++;
    ps_mutex_unlock(&po->cb_lock);
    return PS_OK;
}

ps_status_t ps_postoffice_on_node_failed(ps_postoffice_t *po, ps_node_event_func_t fn,
                                         void *arg)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    return po_add_callback(po, po->failed_cbs, &po->num_failed_cbs, fn, arg);
}

ps_status_t ps_postoffice_on_node_recovered(ps_postoffice_t *po, ps_node_event_func_t fn,
                                            void *arg)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    return po_add_callback(po, po->recovered_cbs, &po->num_recovered_cbs, fn, arg);
}

static void po_remove_from(ps__po_node_cb_t *list, size_t *n, ps_node_event_func_t fn, void *arg)
{
    size_t j = 0;
    for (size_t i = 0; i < *n; i++) {
        if (list[i].fn != fn || list[i].arg != arg)
            list[j++] = list[i];
    }
    *n = j;
}

ps_status_t ps_postoffice_remove_node_callback_timed(ps_postoffice_t *po,
                                                     ps_node_event_func_t fn, void *arg,
                                                     int timeout_ms)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    if (timeout_ms < 0)
        timeout_ms = po->params.finalize_timeout_ms;
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    ps_status_t st = PS_OK;
    ps_mutex_lock(&po->cb_lock);
    po_remove_from(po->failed_cbs, &po->num_failed_cbs, fn, arg);
    po_remove_from(po->recovered_cbs, &po->num_recovered_cbs, fn, arg);
    /* A call that took its snapshot before may still run: wait for it,
     * unless it is this thread's (it would wait for itself). */
    while (po->cb_running > 0 && tls_in_node_cb != po) {
        if (ps_deadline_expired(deadline)) {
            st = PS_ERR_TIMED_OUT;
            break;
        }
        (void)ps_cond_wait(&po->cb_cond, &po->cb_lock, deadline);
    }
    ps_mutex_unlock(&po->cb_lock);
    return st;
}

void ps_postoffice_remove_node_callback(ps_postoffice_t *po, ps_node_event_func_t fn,
                                        void *arg)
{
    if (ps_postoffice_remove_node_callback_timed(po, fn, arg, -1) == PS_ERR_TIMED_OUT)
        ps_error(PS_LOG_CORE, "a node callback still runs after %d ms; removed the registration "
                 "without waiting for it", po->params.finalize_timeout_ms);
}

/* ---- internal accessors ---- */

void ps__postoffice_resend_stats(const ps_postoffice_t *po, uint64_t *resent_p,
                                 uint64_t *duplicates_p, uint64_t *dropped_p)
{
    *resent_p = po->res != NULL ? ps__resender_num_resent(po->res) : 0;
    *duplicates_p = po->res != NULL ? ps__resender_num_duplicates(po->res) : 0;
    *dropped_p = __atomic_load_n(&po->num_dropped, __ATOMIC_RELAXED);
}

ps__registry_t *ps__postoffice_registry(ps_postoffice_t *po)
{
    return po->reg;
}

int ps__postoffice_busy_poll(const ps_postoffice_t *po)
{
    return po->params.busy_poll;
}

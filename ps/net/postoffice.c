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
 *  - NODE_FAILED (scheduler → nodes): nodes = the dead, head = why.
 */
#include "ps/net/postoffice.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/node_table_internal.h"
#include "ps/net/postoffice_state_internal.h"

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

/* ---- failure handling ---- */

/* A node of the table is dead (declared by the scheduler, or found so by
 * the scheduler itself). */
static void po_mark_dead(ps_postoffice_t *po, int id)
{
    ps_mutex_lock(&po->lock);
    int fresh = !po_is_dead_locked(po, id);
    if (fresh) {
        po_add_dead_locked(po, id);
        ps_cond_broadcast(&po->cond);
    }
    ps_mutex_unlock(&po->lock);
    if (fresh)
        ps__registry_fail_peer(po->reg, id, PS_ERR_PEER_GONE, 1);
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
}

/* Scheduler side: node `id` is dead; tell everyone, fail the barriers it
 * can no longer reach. */
static void po_local_barrier_release(ps_postoffice_t *po, int group, ps_status_t status,
                                     const char *reason);

static void sched_declare_dead(ps_postoffice_t *po, int id, const char *why)
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
    ps__registry_fail_peer(po->reg, id, PS_ERR_PEER_GONE, 1);
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
        ps_debug(PS_LOG_CORE, "barrier of group %s released (%zu nodes)", group_name(group),
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

static void po_cb_deliver(void *arg, ps_msg_t *msg)
{
    ps_postoffice_t *po = arg;
    if (ps__po_closing(po)) {
        ps_msg_release(msg);
        return;
    }
    po_log_msg("recv", msg);
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
        int known = po->ready && table_index(po, node_id) >= 0;
        ps_mutex_unlock(&po->lock);
        if (known) {
            snprintf(reason, sizeof(reason), "its connection failed (%s)", ps_status_str(why));
            sched_declare_dead(po, node_id, reason);
        }
        return;
    }
    if (node_id == PS_SCHEDULER_ID) {
        snprintf(reason, sizeof(reason), "connection failed: %s", ps_status_str(why));
        po_lost_scheduler(po, reason);
        return;
    }
    ps_mutex_lock(&po->lock);
    int quiet = po->finalizing;
    ps_mutex_unlock(&po->lock);
    if (quiet)
        ps_debug(PS_LOG_CORE, "connection to node %d closed", node_id);
    else
        ps_warn(PS_LOG_CORE, "lost the connection to %s: %s; failing its requests",
                id_describe(node_id, who, sizeof(who)), ps_status_str(why));
    ps__registry_fail_peer(po->reg, node_id,
                           why == PS_ERR_LINK_FAILED ? PS_ERR_LINK_FAILED : PS_ERR_PEER_GONE, 0);
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
            sched_declare_dead(po, dead_id, why);
        }
        uint64_t pending = ps__registry_expire_pending(po->reg, ps_time_now_ns());
        if (pending != 0 && pending < wake)
            wake = pending;

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

static void po_free(ps_postoffice_t *po)
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
    if (po->van != NULL)
        po->van->ops->close(po->van);
    po->van = NULL;
    if (po->reg != NULL)
        ps__registry_destroy(po->reg);
    for (int g = 0; g < PS__NUM_GROUPS; g++)
        free(po->arrivals[g].ids);
    free(po->reg_nodes);
    free(po->nodes);
    free(po->dead);
    free(po->left);
    free(po->last_seen_ns);
    ps_cond_destroy(&po->timer_cond);
    ps_cond_destroy(&po->cond);
    ps_mutex_destroy(&po->lock);
    free(po);
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

ps_status_t ps_postoffice_start(const ps_start_params_t *params, int do_barrier,
                                ps_postoffice_t **po_p)
{
    ps_start_params_t p;
    ps_status_t st;

    if (po_p == NULL)
        return PS_ERR_INVALID_ARG;
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
    st = ps__registry_create(p.role, po_kick_timer, po, &po->reg);
    if (st != PS_OK)
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
    vp.busy_poll = p.busy_poll;
    int ports = (int)ps_config_int_or(PS_CFG_DMLC_NUM_PORTS, 1);
    int conns = (int)ps_config_int_or(PS_CFG_PS_TCP_CONNS_PER_PEER, 1);
    vp.conns_per_peer = conns > ports ? conns : ports;
    vp.max_meta_bytes = ps_config_size_or(PS_CFG_PS_MAX_META_BYTES, 1u << 20);
    vp.max_message_bytes = ps_config_size_or(PS_CFG_PS_MAX_MESSAGE_BYTES, 4ull << 30);
    vp.max_data_segments = (uint32_t)ps_config_int_or(PS_CFG_PS_MAX_DATA_SEGMENTS, 16);
    vp.connect_timeout_ms = (int)ps_config_int_or(PS_CFG_PS_CONNECT_TIMEOUT_MS, 10000);
    vp.bind_any = ps_config_bool_or(PS_CFG_PS_BIND_ANY, 0) ||
                  (po->is_scheduler && ps_config_bool_or(PS_CFG_DMLC_USE_KUBERNETES, 0));
    ps_van_callbacks_t cb = {
        .arg = po,
        .recv_buffer = po_cb_recv_buffer,
        .deliver = po_cb_deliver,
        .peer_failed = po_cb_peer_failed,
    };
    st = comp->ops->open(&vp, &cb, &po->van);
    if (st != PS_OK)
        goto err;
    if ((st = po->van->ops->query(po->van, &po->attr)) != PS_OK)
        goto err;
    if (po->is_scheduler && (st = po->van->ops->set_node_id(po->van, PS_SCHEDULER_ID)) != PS_OK)
        goto err;
    int retries = po->is_scheduler || p.port != 0
                      ? 0
                      : (int)ps_config_int_or(PS_CFG_PS_BIND_RETRIES, 40);
    if ((st = po->van->ops->bind(po->van, &po->my_node, retries)) != PS_OK)
        goto err;
    char who[PS_NODE_HOSTNAME_MAX + 48];
    ps_info(PS_LOG_CORE, "%s listening (van %s)",
            ps__node_describe(&po->my_node, who, sizeof(who)), comp->name);

    if ((st = ps_thread_create("ps-po-timer", PS_THREAD_NO_CPU, po_timer_main, po,
                               &po->timer)) != PS_OK)
        goto err;
    po->timer_started = 1;

    if (po->is_scheduler) {
        ps_info(PS_LOG_CORE, "waiting for %d servers and %d workers to register",
                p.num_servers, p.num_workers);
        if (p.heartbeat_timeout_s > 0)
            ps_info(PS_LOG_CORE, "nodes silent for %d s are declared dead; they must send "
                    "heartbeats (PS_HEARTBEAT_INTERVAL)", p.heartbeat_timeout_s);
        st = ps__po_sched_start(po, deadline);
    } else {
        st = ps__po_node_start(po, deadline);
    }
    if (st != PS_OK)
        goto err;

    if (do_barrier) {
        int ms = ps_deadline_remaining_ms(deadline);
        ps_deadline_t bd = ms < 0 ? ps_deadline_infinite() : ps_deadline_from_ms(ms > 0 ? ms : 1);
        st = po_barrier_until(po, PS_GROUP_ALL, bd, "start barrier");
        if (st != PS_OK)
            goto err;
    }
    *po_p = po;
    return PS_OK;

err:
    po_free(po);
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
    ps_mutex_unlock(&po->lock);

    if (do_barrier && ready) {
        st = po_barrier_until(po, PS_GROUP_ALL, deadline, "finalize barrier");
        if (st != PS_OK)
            ps_warn(PS_LOG_CORE, "leaving without the other nodes: %s", ps_status_str(st));
    }
    ps_mutex_lock(&po->lock);
    po->released = 1;
    ps_mutex_unlock(&po->lock);
    if (po->is_scheduler && ready && do_barrier && st == PS_OK) {
        ps_deadline_t linger = ps_deadline_min(deadline, ps_deadline_from_ms(PS__LINGER_MS));
        ps__po_linger(po, po->num_nodes > 0 ? po->num_nodes - 1 : 0, linger);
    }
    ps_info(PS_LOG_CORE, "finalized");
    po_free(po);
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
    ps_msg_t copy = *msg;
    return po_van_send(po, &copy);
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

/* ---- internal accessors ---- */

ps__registry_t *ps__postoffice_registry(ps_postoffice_t *po)
{
    return po->reg;
}

int ps__postoffice_busy_poll(const ps_postoffice_t *po)
{
    return po->params.busy_poll;
}

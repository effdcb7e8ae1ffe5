/*
 * The postoffice's side of the van: sending control messages, and the
 * van's callbacks, which run on the van's thread. Control messages are
 * handled there without blocking; data messages go to their customer
 * inline (ps__registry_deliver), after PS_DROP_MSG and PS_RESEND had their
 * say.
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
 */
#include <string.h>

#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/codec/lane.h"
#include "ps/net/postoffice_state_internal.h"

void ps__po_log_msg_line(const char *dir, const ps_msg_t *msg)
{
    char line[256];
    ps_msg_describe(msg, line, sizeof(line));
    ps_debug(PS_LOG_CORE, "%s %s %d: %s", dir, dir[0] == 's' ? "to" : "from",
             dir[0] == 's' ? msg->meta.recver : msg->meta.sender, line);
}

ps_status_t ps__po_van_send(ps_postoffice_t *po, ps_msg_t *msg)
{
    msg->meta.sender = ps__po_my_id(po);
    ps__po_log_msg("send", msg);
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
    ps_status_t st = ps__po_van_send(po, &msg);
    if (st != PS_OK && !ps__po_closing(po))
        ps_warn(PS_LOG_CORE, "cannot send %s to node %d: %s", ps_control_cmd_str(cmd), recver,
                ps_status_str(st));
    return st;
}

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
            ps__po_sched_barrier_arrive(po, meta->sender, meta->control.barrier_group);
        } else if (!meta->request && meta->sender == PS_SCHEDULER_ID) {
            int g = meta->control.barrier_group;
            if (g < 1 || g >= PS__NUM_GROUPS) {
                ps_warn(PS_LOG_CORE, "ignoring a barrier reply for group %d", g);
                break;
            }
            char why[160];
            ps__msg_body(msg, why, sizeof(why));
            ps__po_barrier_release(po, g, meta->head < 0 ? (ps_status_t)meta->head : PS_OK, why);
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
                        ps__po_id_describe(nodes[i].id, who, sizeof(who)), why);
                ps__po_mark_dead(po, nodes[i].id);
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
    if (!ps_meta_is_control(&msg->meta)) {
        if (po->drop_pct > 0 && ps__po_drop_on_purpose(po)) {
            __atomic_add_fetch(&po->num_dropped, 1, __ATOMIC_RELAXED);
            ps_debug(PS_LOG_CORE, "dropping a message from node %d on purpose (PS_DROP_MSG=%d): "
                     "app %d ts %d", msg->meta.sender, po->drop_pct, msg->meta.app_id,
                     msg->meta.timestamp);
            ps_msg_release(msg);
            return;
        }
        if (po->res != NULL) {
            msg->meta.recver = ps__po_my_id(po);
            ps__po_send_ack(po, &msg->meta);
            if (ps__resender_seen(po->res, &msg->meta, ps_time_now_ns())) {
                ps_debug(PS_LOG_CORE, "dropping a duplicate from node %d: app %d ts %d",
                         msg->meta.sender, msg->meta.app_id, msg->meta.timestamp);
                ps_msg_release(msg);
                return;
            }
        }
    }
    ps__po_log_msg("recv", msg);
    ps__profile_msg(po->profile, &msg->meta);
    int sender = msg->meta.sender;
    if (po->is_scheduler) {
        uint64_t *seen = __atomic_load_n(&po->sched.last_seen_ns, __ATOMIC_ACQUIRE);
        int idx = seen != NULL ? ps__po_table_index(po, sender) : -1;
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
    if (sender < PS_RANK_ID_BASE || !ps_lane_len_ok(len) ||
        !ps_lane_hdr_read(bytes, len, &app_id, &customer_id)) {
        ps_warn_ratelimited(PS_LOG_CORE, "dropped a lane message of %zu bytes from node %d: "
                            "%s", len, sender,
                            sender < PS_RANK_ID_BASE ? "not from a server or worker"
                            : !ps_lane_len_ok(len)   ? "outside the lane's size"
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

void ps__po_van_callbacks(ps_postoffice_t *po, ps_van_callbacks_t *cb_p)
{
    ps_van_callbacks_t cb = {
        .arg = po,
        .recv_buffer = po_cb_recv_buffer,
        .deliver = po_cb_deliver,
        .peer_failed = ps__po_cb_peer_failed,
        .deliver_lane = po_cb_deliver_lane,
    };
    *cb_p = cb;
}

/*
 * The van base (base.h): the steps every van takes the same way.
 */
#include "ps/net/van/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ps_van_base_init(ps_van_base_t *base, const char *name, const ps_van_ops_t *ops,
                      ps_log_component_t log, const ps_van_params_t *params,
                      const ps_van_callbacks_t *cb)
{
    base->handle.ops = ops;
    base->handle.name = name;
    base->handle.loop = NULL;
    base->params = *params;
    if (cb != NULL) {
        base->cb = *cb;
    } else {
        memset(&base->cb, 0, sizeof(base->cb));
    }
    base->log = log;
    base->my_id = PS_NODE_EMPTY;
    base->bytes_sent = 0;
    base->bytes_recv = 0;
    base->rx_nodes = NULL;
    base->rx_nodes_cap = 0;
    base->own_tag[0] = '\0';
    base->own_tag_len = 0;
}

void ps_van_base_fini(ps_van_base_t *base)
{
    free(base->rx_nodes);
    base->rx_nodes = NULL;
    base->rx_nodes_cap = 0;
    base->own_tag[0] = '\0';
    base->own_tag_len = 0;
}

void ps_van_base_stats(ps_van_t *van, uint64_t *sent_p, uint64_t *recv_p)
{
    ps_van_base_t *base = ps_van_base_of(van);
    if (sent_p != NULL) {
        *sent_p = __atomic_load_n(&base->bytes_sent, __ATOMIC_RELAXED);
    }
    if (recv_p != NULL) {
        *recv_p = __atomic_load_n(&base->bytes_recv, __ATOMIC_RELAXED);
    }
}

ps_status_t ps_van_base_set_node_id(ps_van_base_t *base, int node_id, int *changed_p)
{
    *changed_p = 0;
    if (node_id <= 0 || node_id >= PS_NODE_EMPTY) {
        return PS_ERR_INVALID_ARG;
    }
    int old = __atomic_exchange_n(&base->my_id, node_id, __ATOMIC_ACQ_REL);
    *changed_p = old != node_id;
    return PS_OK;
}

void ps_van_base_deliver(ps_van_base_t *base, ps_msg_t *msg)
{
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level)) {
        char line[192];
        ps_msg_describe(msg, line, sizeof(line));
        ps_trace(base->log, "received %s", line);
    }
    if (base->cb.deliver != NULL) {
        base->cb.deliver(base->cb.arg, msg);
    } else {
        ps_msg_release(msg);
    }
    ps_msg_init(msg);
}

void ps_van_base_hs_init(const ps_van_base_t *base, ps_van_hs_t *hs, const char *van, int initiator)
{
    ps_van_hs_init(hs, van, initiator, base->params.auth_enabled ? &base->params.auth_key : NULL,
                   (int32_t)base->params.role);
}

const char *ps_van_peer_name(int peer_id, const char *addr, char *buf, size_t cap)
{
    if (peer_id == PS_SCHEDULER_ID) {
        snprintf(buf, cap, "the scheduler");
    } else if (peer_id != PS_NODE_EMPTY && addr == NULL) {
        snprintf(buf, cap, "node %d", peer_id);
    } else if (peer_id != PS_NODE_EMPTY) {
        snprintf(buf, cap, "node %d at %s", peer_id, addr);
    } else {
        snprintf(buf, cap, "%s", addr != NULL ? addr : "an unknown peer");
    }
    return buf;
}

ps_status_t ps_van_msg_take_meta(ps_msg_t *msg, const ps_meta_t *meta, int sender)
{
    const ps_node_t *nodes = meta->control.nodes;
    const uint8_t *body = meta->body;
    size_t nn = meta->control.num_nodes;
    size_t bl = meta->body_len;
    if (meta != &msg->meta) {
        msg->meta = *meta;
    }
    msg->meta.sender = sender;
    msg->meta.control.nodes = NULL;
    msg->meta.body = NULL;
    if (nn == 0 && bl == 0) {
        return PS_OK;
    }
    /* Node list and body point into the van's receive buffer, which is
     * reused: the message gets its own copy, one block freed with it. */
    uint8_t *block = malloc(nn * sizeof(ps_node_t) + bl);
    if (block == NULL) {
        msg->meta.control.num_nodes = 0;
        msg->meta.body_len = 0;
        return PS_ERR_NO_MEMORY;
    }
    if (nn != 0) {
        memcpy(block, nodes, nn * sizeof(ps_node_t));
        msg->meta.control.nodes = (ps_node_t *)(void *)block;
    }
    if (bl != 0) {
        memcpy(block + nn * sizeof(ps_node_t), body, bl);
        msg->meta.body = block + nn * sizeof(ps_node_t);
    }
    msg->nodes = (ps_node_t *)(void *)block;
    msg->num_nodes = (uint32_t)nn;
    msg->nodes_owned = 1;
    return PS_OK;
}

void ps_van_base_set_own_tag(ps_van_base_t *base, const char *tag)
{
    size_t n = strlen(tag);
    if (n >= sizeof(base->own_tag)) {
        n = sizeof(base->own_tag) - 1;
    }
    memcpy(base->own_tag, tag, n);
    base->own_tag[n] = '\0';
    base->own_tag_len = (uint32_t)n;
}

ps_status_t ps_van_unconnected(const ps_van_base_t *base, int id, ps_status_t lost)
{
    if (lost != PS_OK) {
        return lost;
    }
    ps_warn_ratelimited(base->log, "send to node %d: not connected", id);
    return PS_ERR_UNREACHABLE;
}

ps_status_t ps_van_check_recver(const ps_van_base_t *base, int recver, const char *what)
{
    if (recver <= 0 || recver >= PS_NODE_EMPTY) {
        ps_error(base->log, "%s: message without a receiver (recver %d)", what, recver);
        return PS_ERR_INVALID_ARG;
    }
    return PS_OK;
}

ps_status_t ps_van_send_prepare(const ps_van_base_t *base, const ps_msg_t *msg,
                                uint32_t device_kinds, ps_meta_t *scratch,
                                const ps_meta_t **meta_p)
{
    if (msg == NULL || msg->num_data > PS_MSG_MAX_DATA) {
        return PS_ERR_INVALID_ARG;
    }
    int recver = msg->meta.recver;
    ps_status_t st = ps_van_check_recver(base, recver, "send");
    if (st != PS_OK) {
        return st;
    }
    if (base->own_tag_len != 0 && msg->meta.van_data_len >= base->own_tag_len &&
        memcmp(msg->meta.van_data, base->own_tag, base->own_tag_len) == 0) {
        ps_error(base->log, "send: van_data carries the %s van's own tag (%s); refused",
                 base->handle.name, base->own_tag);
        return PS_ERR_INVALID_ARG;
    }
    for (uint32_t i = 0; i < msg->num_data && device_kinds != PS_VAN_DEVICE_ANY; ++i) {
        if (!ps_van_moves_mem(device_kinds, &msg->data[i])) {
            ps_error(base->log, "send to node %d: segment %u is device memory of kind %d, which "
                     "the %s van does not move", recver, i, (int)ps_slice_mem_kind(&msg->data[i]),
                     base->handle.name);
            return PS_ERR_UNSUPPORTED;
        }
    }
    if (meta_p == NULL) {
        return PS_OK;
    }
    const ps_meta_t *meta = &msg->meta;
    if (meta->control.num_nodes == 0 && msg->num_nodes != 0) {
        /* The node list rides in the message rather than the meta. */
        *scratch = *meta;
        scratch->control.nodes = msg->nodes;
        scratch->control.num_nodes = msg->num_nodes;
        meta = scratch;
    }
    *meta_p = meta;
    return PS_OK;
}

ps_frame_limits_t ps_van_frame_limits(const ps_van_params_t *params)
{
    ps_frame_limits_t l = ps_frame_limits_default();
    if (params->max_meta_bytes != 0) {
        l.max_meta_bytes =
            params->max_meta_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)params->max_meta_bytes;
    }
    uint32_t segs = params->max_data_segments != 0 ? params->max_data_segments : l.max_segments;
    l.max_segments = segs < PS_MSG_MAX_DATA ? segs : PS_MSG_MAX_DATA;
    if (params->max_message_bytes != 0) {
        l.max_message_bytes = params->max_message_bytes + l.max_meta_bytes + PS_FRAME_MAX_HEADER_LEN;
    }
    return l;
}

void ps_van_frame_attr(const ps_frame_limits_t *limits, ps_van_attr_t *attr)
{
    uint64_t overhead = (uint64_t)limits->max_meta_bytes + PS_FRAME_MAX_HEADER_LEN;
    attr->max_message_bytes = limits->max_message_bytes > overhead
                                  ? limits->max_message_bytes - overhead
                                  : limits->max_message_bytes;
    attr->max_data_segments = limits->max_segments;
}

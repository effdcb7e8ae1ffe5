#include "ps/net/codec/message.h"

#include <string.h>

void ps_meta_init(ps_meta_t *meta)
{
    memset(meta, 0, sizeof(*meta));
    meta->head = PS_NODE_EMPTY;
    meta->app_id = PS_NODE_EMPTY;
    meta->customer_id = PS_NODE_EMPTY;
    meta->timestamp = PS_NODE_EMPTY;
    meta->sender = PS_NODE_EMPTY;
    meta->recver = PS_NODE_EMPTY;
    meta->src_dev_type = PS_DEV_UNK;
    meta->src_dev_id = -1;
    meta->dst_dev_type = PS_DEV_UNK;
    meta->dst_dev_id = -1;
    meta->control.cmd = PS_CTRL_EMPTY;
}

void ps_node_init(ps_node_t *node)
{
    memset(node, 0, sizeof(*node));
    node->role = PS_ROLE_SERVER;
    node->id = PS_NODE_EMPTY;
    node->aux_id = -1;
}

bool ps_node_equal(const ps_node_t *a, const ps_node_t *b)
{
    if (a->role != b->role || a->id != b->id ||
        a->customer_id != b->customer_id || a->is_recovery != b->is_recovery ||
        a->aux_id != b->aux_id || a->num_ports != b->num_ports ||
        a->endpoint_name_len != b->endpoint_name_len)
        return false;
    if (a->num_ports > PS_NODE_MAX_PORTS ||
        a->endpoint_name_len > PS_NODE_ENDPOINT_MAX)
        return false;
    if (strncmp(a->hostname, b->hostname, PS_NODE_HOSTNAME_MAX) != 0)
        return false;
    for (uint32_t i = 0; i < a->num_ports; i++) {
        if (a->ports[i] != b->ports[i] || a->dev_types[i] != b->dev_types[i] ||
            a->dev_ids[i] != b->dev_ids[i])
            return false;
    }
    return memcmp(a->endpoint_name, b->endpoint_name, a->endpoint_name_len) == 0;
}

static bool trace_equal(const ps_trace_t *a, const ps_trace_t *b)
{
    return a->pre_start == b->pre_start && a->start == b->start &&
           a->postsend == b->postsend && a->postrecv == b->postrecv &&
           a->process == b->process;
}

static bool control_equal(const ps_control_t *a, const ps_control_t *b)
{
    if (a->cmd != b->cmd || a->num_nodes != b->num_nodes ||
        a->barrier_group != b->barrier_group || a->msg_sig != b->msg_sig)
        return false;
    for (uint32_t i = 0; i < a->num_nodes; i++) {
        if (!ps_node_equal(&a->nodes[i], &b->nodes[i]))
            return false;
    }
    return true;
}

bool ps_meta_equal(const ps_meta_t *a, const ps_meta_t *b)
{
    if (a->head != b->head || a->app_id != b->app_id ||
        a->customer_id != b->customer_id || a->timestamp != b->timestamp ||
        a->sender != b->sender || a->recver != b->recver ||
        a->request != b->request || a->push != b->push || a->pull != b->pull ||
        a->simple_app != b->simple_app)
        return false;
    if (a->body_len != b->body_len ||
        (a->body_len != 0 && memcmp(a->body, b->body, a->body_len) != 0))
        return false;
    if (a->num_data_types != b->num_data_types ||
        a->num_data_types > PS_META_MAX_DATA)
        return false;
    for (uint32_t i = 0; i < a->num_data_types; i++) {
        if (a->data_types[i] != b->data_types[i])
            return false;
    }
    if (a->src_dev_type != b->src_dev_type || a->src_dev_id != b->src_dev_id ||
        a->dst_dev_type != b->dst_dev_type || a->dst_dev_id != b->dst_dev_id ||
        a->data_size != b->data_size || a->key != b->key || a->addr != b->addr ||
        a->val_len != b->val_len || a->option != b->option || a->sid != b->sid ||
        a->priority != b->priority)
        return false;
    if (!control_equal(&a->control, &b->control))
        return false;
    if (a->is_tensor != b->is_tensor || a->dtype != b->dtype ||
        a->ndim != b->ndim || a->ndim > PS_META_MAX_SHAPE)
        return false;
    for (uint32_t i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i])
            return false;
    }
    if (!trace_equal(&a->request_trace, &b->request_trace) ||
        !trace_equal(&a->response_trace, &b->response_trace))
        return false;
    if (a->num_slave_qp_counters != b->num_slave_qp_counters ||
        a->num_slave_qp_counters > PS_META_MAX_SLAVE_QP ||
        a->slave_qp_num != b->slave_qp_num)
        return false;
    for (uint32_t i = 0; i < a->num_slave_qp_counters; i++) {
        if (a->slave_qp_counter[i] != b->slave_qp_counter[i])
            return false;
    }
    return a->van_data_len == b->van_data_len &&
           a->van_data_len <= PS_META_VAN_DATA_MAX &&
           memcmp(a->van_data, b->van_data, a->van_data_len) == 0;
}

const char *ps_control_cmd_str(ps_control_cmd_t cmd)
{
    switch (cmd) {
    case PS_CTRL_EMPTY:
        return "empty";
    case PS_CTRL_TERMINATE:
        return "terminate";
    case PS_CTRL_ADD_NODE:
        return "add_node";
    case PS_CTRL_BARRIER:
        return "barrier";
    case PS_CTRL_ACK:
        return "ack";
    case PS_CTRL_HEARTBEAT:
        return "heartbeat";
    case PS_CTRL_BOOTSTRAP:
        return "bootstrap";
    case PS_CTRL_ADDR_REQUEST:
        return "addr_request";
    case PS_CTRL_ADDR_RESOLVED:
        return "addr_resolved";
    case PS_CTRL_INSTANCE_BARRIER:
        return "instance_barrier";
    case PS_CTRL_NODE_FAILED:
        return "node_failed";
    case PS_CTRL_AUTH:
        return "auth";
    }
    return "unknown";
}

const char *ps_device_type_str(ps_device_type_t type)
{
    switch (type) {
    case PS_DEV_UNK:
        return "unk";
    case PS_DEV_CPU:
        return "cpu";
    case PS_DEV_GPU:
        return "gpu";
    }
    return "unknown";
}

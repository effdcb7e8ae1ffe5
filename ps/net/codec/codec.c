#include "ps/net/codec/codec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pb.h>
#include <pb_decode.h>
#include <pb_encode.h>

#include "ps/base/log.h"
#include "ps/net/codec/meta.pb.h"

/* meta.options and message.h must agree on every size and enum value. */
#define PS__COUNT_OF(_type, _member) \
    (sizeof(((_type *)0)->_member) / sizeof(((_type *)0)->_member[0]))
_Static_assert(sizeof(((ps_wire_Node *)0)->hostname.bytes) == PS_NODE_HOSTNAME_MAX - 1,
               "meta.options: Node.hostname");
_Static_assert(PS__COUNT_OF(ps_wire_Node, ports) == PS_NODE_MAX_PORTS, "Node.ports");
_Static_assert(PS__COUNT_OF(ps_wire_Node, dev_types) == PS_NODE_MAX_PORTS, "Node.dev_types");
_Static_assert(PS__COUNT_OF(ps_wire_Node, dev_ids) == PS_NODE_MAX_PORTS, "Node.dev_ids");
_Static_assert(sizeof(((ps_wire_Node *)0)->endpoint_name.bytes) == PS_NODE_ENDPOINT_MAX,
               "meta.options: Node.endpoint_name");
_Static_assert(PS__COUNT_OF(ps_wire_Meta, data_type) == PS_META_MAX_DATA, "Meta.data_type");
_Static_assert(PS__COUNT_OF(ps_wire_Meta, shape) == PS_META_MAX_SHAPE, "Meta.shape");
_Static_assert(PS__COUNT_OF(ps_wire_Meta, slave_qp_counter) == PS_META_MAX_SLAVE_QP,
               "Meta.slave_qp_counter");
_Static_assert(sizeof(((ps_wire_Meta *)0)->van_data.bytes) == PS_META_VAN_DATA_MAX,
               "meta.options: Meta.van_data");
#define PS__SAME(_wire, _model) \
    _Static_assert((int)(_wire) == (int)(_model), #_wire " == " #_model)
PS__SAME(_ps_wire_Role_ARRAYSIZE, PS_ROLE_JOINT + 1);
PS__SAME(ps_wire_Role_SERVER, PS_ROLE_SERVER);
PS__SAME(ps_wire_Role_WORKER, PS_ROLE_WORKER);
PS__SAME(ps_wire_Role_SCHEDULER, PS_ROLE_SCHEDULER);
PS__SAME(ps_wire_Role_JOINT, PS_ROLE_JOINT);
PS__SAME(_ps_wire_ControlCmd_ARRAYSIZE, PS_CTRL_COUNT);
PS__SAME(ps_wire_ControlCmd_EMPTY, PS_CTRL_EMPTY);
PS__SAME(ps_wire_ControlCmd_TERMINATE, PS_CTRL_TERMINATE);
PS__SAME(ps_wire_ControlCmd_ADD_NODE, PS_CTRL_ADD_NODE);
PS__SAME(ps_wire_ControlCmd_BARRIER, PS_CTRL_BARRIER);
PS__SAME(ps_wire_ControlCmd_ACK, PS_CTRL_ACK);
PS__SAME(ps_wire_ControlCmd_HEARTBEAT, PS_CTRL_HEARTBEAT);
PS__SAME(ps_wire_ControlCmd_BOOTSTRAP, PS_CTRL_BOOTSTRAP);
PS__SAME(ps_wire_ControlCmd_ADDR_REQUEST, PS_CTRL_ADDR_REQUEST);
PS__SAME(ps_wire_ControlCmd_ADDR_RESOLVED, PS_CTRL_ADDR_RESOLVED);
PS__SAME(ps_wire_ControlCmd_INSTANCE_BARRIER, PS_CTRL_INSTANCE_BARRIER);
PS__SAME(ps_wire_ControlCmd_NODE_FAILED, PS_CTRL_NODE_FAILED);
PS__SAME(ps_wire_ControlCmd_AUTH, PS_CTRL_AUTH);
PS__SAME(_ps_wire_DataType_ARRAYSIZE, PS_DATA_TYPE_COUNT);
PS__SAME(ps_wire_DataType_CHAR, PS_DATA_CHAR);
PS__SAME(ps_wire_DataType_INT8, PS_DATA_INT8);
PS__SAME(ps_wire_DataType_INT16, PS_DATA_INT16);
PS__SAME(ps_wire_DataType_INT32, PS_DATA_INT32);
PS__SAME(ps_wire_DataType_INT64, PS_DATA_INT64);
PS__SAME(ps_wire_DataType_UINT8, PS_DATA_UINT8);
PS__SAME(ps_wire_DataType_UINT16, PS_DATA_UINT16);
PS__SAME(ps_wire_DataType_UINT32, PS_DATA_UINT32);
PS__SAME(ps_wire_DataType_UINT64, PS_DATA_UINT64);
PS__SAME(ps_wire_DataType_FLOAT, PS_DATA_FLOAT);
PS__SAME(ps_wire_DataType_DOUBLE, PS_DATA_DOUBLE);
PS__SAME(ps_wire_DataType_OTHER, PS_DATA_OTHER);
PS__SAME(ps_wire_DataType_FLOAT16, PS_DATA_FLOAT16);
PS__SAME(ps_wire_DataType_BFLOAT16, PS_DATA_BFLOAT16);
PS__SAME(_ps_wire_DeviceType_ARRAYSIZE, PS_DEV_TYPE_COUNT);
PS__SAME(ps_wire_DeviceType_UNK, PS_DEV_UNK);
PS__SAME(ps_wire_DeviceType_CPU, PS_DEV_CPU);
PS__SAME(ps_wire_DeviceType_GPU, PS_DEV_GPU);

/* ------------------------------------------------------------------ encode */

/* Why meta cannot be encoded, or NULL. Checked once up front so that the
 * conversions and callbacks below cannot fail on a bad value. */
static const char *meta_invalid(const ps_meta_t *m)
{
    if ((unsigned)m->src_dev_type >= PS_DEV_TYPE_COUNT ||
        (unsigned)m->dst_dev_type >= PS_DEV_TYPE_COUNT)
        return "device type outside its enum";
    if (m->num_data_types > PS_META_MAX_DATA)
        return "more data types than PS_META_MAX_DATA";
    for (uint32_t i = 0; i < m->num_data_types; i++) {
        if ((unsigned)m->data_types[i] >= PS_DATA_TYPE_COUNT)
            return "data type outside its enum";
    }
    if (m->body_len != 0 && m->body == NULL)
        return "body NULL with a length";
    if (m->ndim > PS_META_MAX_SHAPE)
        return "more tensor dimensions than PS_META_MAX_SHAPE";
    if (m->num_slave_qp_counters > PS_META_MAX_SLAVE_QP)
        return "more slave qp counters than PS_META_MAX_SLAVE_QP";
    if (m->van_data_len > PS_META_VAN_DATA_MAX)
        return "van data longer than PS_META_VAN_DATA_MAX";
    if ((unsigned)m->control.cmd >= PS_CTRL_COUNT)
        return "control command outside its enum";
    if (m->control.num_nodes != 0 && m->control.nodes == NULL)
        return "node list NULL with a count";
    for (uint32_t i = 0; i < m->control.num_nodes; i++) {
        const ps_node_t *n = &m->control.nodes[i];
        if ((unsigned)n->role > PS_ROLE_JOINT)
            return "node role outside its enum";
        if (strnlen(n->hostname, PS_NODE_HOSTNAME_MAX) == PS_NODE_HOSTNAME_MAX)
            return "node hostname not NUL-terminated";
        if (n->num_ports > PS_NODE_MAX_PORTS)
            return "more node ports than PS_NODE_MAX_PORTS";
        for (uint32_t j = 0; j < n->num_ports; j++) {
            if ((unsigned)n->dev_types[j] >= PS_DEV_TYPE_COUNT)
                return "node device type outside its enum";
        }
        if (n->endpoint_name_len > PS_NODE_ENDPOINT_MAX)
            return "node endpoint name longer than PS_NODE_ENDPOINT_MAX";
    }
    return NULL;
}

static void node_to_wire(const ps_node_t *n, ps_wire_Node *w)
{
    size_t host_len = strlen(n->hostname);

    memset(w, 0, sizeof(*w));
    w->role = (ps_wire_Role)n->role;
    w->id = n->id;
    w->customer_id = n->customer_id;
    w->hostname.size = (pb_size_t)host_len;
    memcpy(w->hostname.bytes, n->hostname, host_len);
    w->ports_count = (pb_size_t)n->num_ports;
    w->dev_types_count = (pb_size_t)n->num_ports;
    w->dev_ids_count = (pb_size_t)n->num_ports;
    for (uint32_t i = 0; i < n->num_ports; i++) {
        w->ports[i] = n->ports[i];
        w->dev_types[i] = (ps_wire_DeviceType)n->dev_types[i];
        w->dev_ids[i] = n->dev_ids[i];
    }
    w->is_recovery = n->is_recovery;
    w->endpoint_name.size = (pb_size_t)n->endpoint_name_len;
    memcpy(w->endpoint_name.bytes, n->endpoint_name, n->endpoint_name_len);
    w->aux_id = n->aux_id;
}

static bool encode_nodes(pb_ostream_t *stream, const pb_field_t *field,
                         void *const *arg)
{
    const ps_control_t *c = *arg;
    ps_wire_Node w; /* about 1 KiB: one node at a time, never the list */

    for (uint32_t i = 0; i < c->num_nodes; i++) {
        node_to_wire(&c->nodes[i], &w);
        if (!pb_encode_tag_for_field(stream, field) ||
            !pb_encode_submessage(stream, ps_wire_Node_fields, &w))
            return false;
    }
    return true;
}

static bool encode_body(pb_ostream_t *stream, const pb_field_t *field,
                        void *const *arg)
{
    const ps_meta_t *m = *arg;

    if (m->body_len == 0)
        return true; /* proto3: an empty field is not sent */
    return pb_encode_tag_for_field(stream, field) &&
           pb_encode_string(stream, m->body, m->body_len);
}

static bool trace_is_zero(const ps_trace_t *t)
{
    return (t->pre_start | t->start | t->postsend | t->postrecv | t->process) == 0;
}

static void trace_to_wire(const ps_trace_t *t, ps_wire_Trace *w)
{
    w->pre_start = t->pre_start;
    w->start = t->start;
    w->postsend = t->postsend;
    w->postrecv = t->postrecv;
    w->process = t->process;
}

/* m must have passed meta_invalid(). The callbacks keep pointers into m. */
static void meta_to_wire(const ps_meta_t *m, ps_wire_Meta *w)
{
    const ps_control_t *c = &m->control;

    memset(w, 0, sizeof(*w));
    w->head = m->head;
    w->app_id = m->app_id;
    w->customer_id = m->customer_id;
    w->timestamp = m->timestamp;
    w->sender = m->sender;
    w->recver = m->recver;
    w->request = m->request;
    w->push = m->push;
    w->pull = m->pull;
    w->data_type_count = (pb_size_t)m->num_data_types;
    for (uint32_t i = 0; i < m->num_data_types; i++)
        w->data_type[i] = (ps_wire_DataType)m->data_types[i];
    w->data_size = m->data_size;
    w->key = m->key;
    w->addr = m->addr;
    w->val_len = m->val_len;
    w->option = m->option;
    w->simple_app = m->simple_app;
    w->body.funcs.encode = encode_body;
    w->body.arg = (void *)m;
    w->src_dev_type = (ps_wire_DeviceType)m->src_dev_type;
    w->src_dev_id = m->src_dev_id;
    w->dst_dev_type = (ps_wire_DeviceType)m->dst_dev_type;
    w->dst_dev_id = m->dst_dev_id;
    w->sid = m->sid;
    w->priority = m->priority;

    /* An all-zero control decodes from nothing, so send nothing. */
    w->has_control = c->cmd != PS_CTRL_EMPTY || c->num_nodes != 0 ||
                     c->barrier_group != 0 || c->msg_sig != 0;
    w->control.cmd = (ps_wire_ControlCmd)c->cmd;
    w->control.node.funcs.encode = encode_nodes;
    w->control.node.arg = (void *)c;
    w->control.barrier_group = c->barrier_group;
    w->control.msg_sig = c->msg_sig;

    w->is_tensor = m->is_tensor;
    w->dtype = m->dtype;
    w->shape_count = (pb_size_t)m->ndim;
    memcpy(w->shape, m->shape, m->ndim * sizeof(m->shape[0]));
    w->has_request_trace = !trace_is_zero(&m->request_trace);
    trace_to_wire(&m->request_trace, &w->request_trace);
    w->has_response_trace = !trace_is_zero(&m->response_trace);
    trace_to_wire(&m->response_trace, &w->response_trace);
    w->slave_qp_counter_count = (pb_size_t)m->num_slave_qp_counters;
    memcpy(w->slave_qp_counter, m->slave_qp_counter,
           m->num_slave_qp_counters * sizeof(m->slave_qp_counter[0]));
    w->slave_qp_num = m->slave_qp_num;
    w->van_data.size = (pb_size_t)m->van_data_len;
    memcpy(w->van_data.bytes, m->van_data, m->van_data_len);
}

static ps_status_t check_encodable(const ps_meta_t *meta)
{
    const char *why = meta_invalid(meta);

    if (ps_unlikely(why != NULL)) {
        ps_error(PS_LOG_CODEC, "cannot encode meta: %s", why);
        return PS_ERR_INVALID_ARG;
    }
    return PS_OK;
}

ps_status_t ps_meta_encoded_size(const ps_meta_t *meta, size_t *size_p)
{
    ps_wire_Meta w;
    size_t size;
    ps_status_t status = check_encodable(meta);

    if (status != PS_OK)
        return status;
    meta_to_wire(meta, &w);
    if (!pb_get_encoded_size(&size, ps_wire_Meta_fields, &w)) {
        /* Unreachable after meta_invalid(); nanopb has no other failure. */
        ps_error(PS_LOG_CODEC, "cannot size meta: nanopb: unknown error");
        return PS_ERR_INVALID_ARG;
    }
    *size_p = size;
    return PS_OK;
}

ps_status_t ps_meta_encode(const ps_meta_t *meta, void *buf, size_t cap,
                           size_t *len_p)
{
    ps_wire_Meta w;
    pb_ostream_t stream;
    size_t need = 0;
    ps_status_t status = check_encodable(meta);

    if (status != PS_OK)
        return status;
    if (buf == NULL && cap != 0) {
        ps_error(PS_LOG_CODEC, "cannot encode meta: buffer NULL with %zu bytes", cap);
        return PS_ERR_INVALID_ARG;
    }
    meta_to_wire(meta, &w);
    /* One pass straight into buf; the sizing pass only runs on failure, to
     * say how much room was missing. */
    stream = pb_ostream_from_buffer(buf, cap);
    if (ps_likely(pb_encode(&stream, ps_wire_Meta_fields, &w))) {
        *len_p = stream.bytes_written;
        return PS_OK;
    }
    if (pb_get_encoded_size(&need, ps_wire_Meta_fields, &w) && need > cap) {
        ps_error(PS_LOG_CODEC, "cannot encode meta: needs %zu bytes, buffer has %zu",
                 need, cap);
        return PS_ERR_TOO_LARGE;
    }
    ps_error(PS_LOG_CODEC, "cannot encode meta: nanopb: %s", PB_GET_ERROR(&stream));
    return PS_ERR_INVALID_ARG;
}

/* ------------------------------------------------------------------ decode */

typedef struct {
    uintptr_t buf_begin; /* the input, for the zero-copy body */
    uintptr_t buf_end;
    const uint8_t *body;
    size_t body_len;
    ps_node_t *nodes;
    size_t node_cap;
    size_t num_nodes;
    /* Set by a callback that failed for a reason of ours (nanopb then only
     * says "callback failed"). */
    ps_status_t status;
    const char *why;
    bool node_cap_exceeded; /* the input may be fine; the array was small */
} decode_ctx_t;

static bool decode_fail(decode_ctx_t *ctx, ps_status_t status, const char *why)
{
    ctx->status = status;
    ctx->why = why;
    return false;
}

static const char *node_from_wire(const ps_wire_Node *w, ps_node_t *n)
{
    if ((unsigned)w->role > ps_wire_Role_JOINT)
        return "node role outside its enum";
    if (w->dev_types_count != w->ports_count || w->dev_ids_count != w->ports_count)
        return "node device lists and ports differ in length";
    for (pb_size_t i = 0; i < w->dev_types_count; i++) {
        if ((unsigned)w->dev_types[i] >= PS_DEV_TYPE_COUNT)
            return "node device type outside its enum";
    }
    if (memchr(w->hostname.bytes, '\0', w->hostname.size) != NULL)
        return "node hostname holds a NUL";

    n->role = (ps_role_t)w->role;
    n->id = w->id;
    n->customer_id = w->customer_id;
    memcpy(n->hostname, w->hostname.bytes, w->hostname.size);
    memset(n->hostname + w->hostname.size, 0, PS_NODE_HOSTNAME_MAX - w->hostname.size);
    n->num_ports = w->ports_count;
    for (pb_size_t i = 0; i < w->ports_count; i++) {
        n->ports[i] = w->ports[i];
        n->dev_types[i] = (ps_device_type_t)w->dev_types[i];
        n->dev_ids[i] = w->dev_ids[i];
    }
    n->is_recovery = w->is_recovery;
    n->endpoint_name_len = w->endpoint_name.size;
    memcpy(n->endpoint_name, w->endpoint_name.bytes, w->endpoint_name.size);
    n->aux_id = w->aux_id;
    return NULL;
}

/*
 * A callback's stream is a substream of pb_istream_from_buffer(), whose state
 * is the read position in the input, when the field was sent length-delimited
 * as it should be. Sent with another wire type, nanopb hands over a copy in
 * its own scratch buffer instead: refused, so that the body is never
 * referenced there and a node is never parsed out of a varint.
 */
static bool from_input(const decode_ctx_t *ctx, const pb_istream_t *stream)
{
    uintptr_t pos = (uintptr_t)stream->state;

    return pos >= ctx->buf_begin && pos <= ctx->buf_end &&
           stream->bytes_left <= ctx->buf_end - pos;
}

static bool decode_node(pb_istream_t *stream, const pb_field_t *field, void **arg)
{
    decode_ctx_t *ctx = *arg;
    ps_wire_Node w; /* one node at a time, straight into the caller's array */
    const char *why;

    if (!from_input(ctx, stream))
        return decode_fail(ctx, PS_ERR_PROTOCOL, "node is not a length-delimited field");
    if (ctx->num_nodes >= ctx->node_cap) {
        ctx->node_cap_exceeded = true;
        return decode_fail(ctx, PS_ERR_TOO_LARGE, "more nodes than the caller's array");
    }
    if (!pb_decode(stream, ps_wire_Node_fields, &w))
        return false; /* nanopb's reason stays in stream->errmsg */
    why = node_from_wire(&w, &ctx->nodes[ctx->num_nodes]);
    if (why != NULL)
        return decode_fail(ctx, PS_ERR_PROTOCOL, why);
    ctx->num_nodes++;
    return true;
}

/* Zero-copy: the body stays in the input and is only pointed at. */
static bool decode_body(pb_istream_t *stream, const pb_field_t *field, void **arg)
{
    decode_ctx_t *ctx = *arg;
    const uint8_t *pos = stream->state;
    size_t len = stream->bytes_left;

    if (!from_input(ctx, stream))
        return decode_fail(ctx, PS_ERR_PROTOCOL, "body is not a length-delimited field");
    if (!pb_read(stream, NULL, len))
        return false;
    ctx->body = len != 0 ? pos : NULL;
    ctx->body_len = len;
    return true;
}

static void trace_from_wire(const ps_wire_Trace *w, ps_trace_t *t)
{
    t->pre_start = w->pre_start;
    t->start = w->start;
    t->postsend = w->postsend;
    t->postrecv = w->postrecv;
    t->process = w->process;
}

static const char *meta_from_wire(const ps_wire_Meta *w, const decode_ctx_t *ctx,
                                  ps_node_t *nodes, ps_meta_t *m)
{
    if ((unsigned)w->src_dev_type >= PS_DEV_TYPE_COUNT ||
        (unsigned)w->dst_dev_type >= PS_DEV_TYPE_COUNT)
        return "device type outside its enum";
    for (pb_size_t i = 0; i < w->data_type_count; i++) {
        if ((unsigned)w->data_type[i] >= PS_DATA_TYPE_COUNT)
            return "data type outside its enum";
    }
    if ((unsigned)w->control.cmd >= PS_CTRL_COUNT)
        return "control command outside its enum";
    if (w->dtype < INT8_MIN || w->dtype > INT8_MAX)
        return "tensor dtype outside int8";

    memset(m, 0, sizeof(*m));
    m->head = w->head;
    m->app_id = w->app_id;
    m->customer_id = w->customer_id;
    m->timestamp = w->timestamp;
    m->sender = w->sender;
    m->recver = w->recver;
    m->request = w->request;
    m->push = w->push;
    m->pull = w->pull;
    m->simple_app = w->simple_app;
    m->body = ctx->body;
    m->body_len = ctx->body_len;
    m->num_data_types = w->data_type_count;
    for (pb_size_t i = 0; i < w->data_type_count; i++)
        m->data_types[i] = (ps_data_type_t)w->data_type[i];
    m->src_dev_type = (ps_device_type_t)w->src_dev_type;
    m->src_dev_id = w->src_dev_id;
    m->dst_dev_type = (ps_device_type_t)w->dst_dev_type;
    m->dst_dev_id = w->dst_dev_id;
    m->data_size = w->data_size;
    m->key = w->key;
    m->addr = w->addr;
    m->val_len = w->val_len;
    m->option = w->option;
    m->sid = w->sid;
    m->priority = w->priority;

    /* Without has_control the control fields are zero: EMPTY, no nodes. */
    m->control.cmd = (ps_control_cmd_t)w->control.cmd;
    m->control.num_nodes = (uint32_t)ctx->num_nodes;
    m->control.nodes = ctx->num_nodes != 0 ? nodes : NULL;
    m->control.barrier_group = w->control.barrier_group;
    m->control.msg_sig = w->control.msg_sig;

    m->is_tensor = w->is_tensor;
    m->dtype = (int8_t)w->dtype;
    m->ndim = w->shape_count;
    memcpy(m->shape, w->shape, w->shape_count * sizeof(w->shape[0]));
    trace_from_wire(&w->request_trace, &m->request_trace);
    trace_from_wire(&w->response_trace, &m->response_trace);
    m->num_slave_qp_counters = w->slave_qp_counter_count;
    memcpy(m->slave_qp_counter, w->slave_qp_counter,
           w->slave_qp_counter_count * sizeof(w->slave_qp_counter[0]));
    m->slave_qp_num = w->slave_qp_num;
    m->van_data_len = w->van_data.size;
    memcpy(m->van_data, w->van_data.bytes, w->van_data.size);
    return NULL;
}

ps_status_t ps_meta_decode(const void *buf, size_t len, ps_meta_t *meta_p,
                           ps_node_t *nodes, size_t node_cap)
{
    ps_wire_Meta w;
    ps_meta_t m;
    pb_istream_t stream;
    decode_ctx_t ctx;
    const char *why;

    if ((buf == NULL && len != 0) || (nodes == NULL && node_cap != 0)) {
        ps_error(PS_LOG_CODEC, "cannot decode meta: NULL buffer with a length");
        return PS_ERR_INVALID_ARG;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.buf_begin = (uintptr_t)buf;
    ctx.buf_end = (uintptr_t)buf + len;
    ctx.nodes = nodes;
    ctx.node_cap = node_cap;

    /* pb_decode() resets every static field again and leaves the callbacks. */
    memset(&w, 0, sizeof(w));
    w.body.funcs.decode = decode_body;
    w.body.arg = &ctx;
    w.control.node.funcs.decode = decode_node;
    w.control.node.arg = &ctx;
    stream = pb_istream_from_buffer(buf, len);
    if (!pb_decode(&stream, ps_wire_Meta_fields, &w)) {
        if (ctx.status == PS_ERR_TOO_LARGE && ctx.node_cap_exceeded) {
            /* Not an error of the input: the caller may grow its array
             * (ps_meta_decode_grow) and decode again. */
            ps_debug(PS_LOG_CODEC, "meta of %zu bytes: %s", len, ctx.why);
            return ctx.status;
        }
        if (ctx.status != PS_OK) {
            ps_warn_ratelimited(PS_LOG_CODEC, "rejecting meta of %zu bytes: %s",
                                len, ctx.why);
            return ctx.status;
        }
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting meta of %zu bytes: nanopb: %s",
                            len, PB_GET_ERROR(&stream));
        return PS_ERR_PROTOCOL;
    }
    why = meta_from_wire(&w, &ctx, nodes, &m);
    if (why != NULL) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting meta of %zu bytes: %s", len, why);
        return PS_ERR_PROTOCOL;
    }
    *meta_p = m;
    return PS_OK;
}

ps_status_t ps_meta_decode_grow(const void *buf, size_t len, ps_meta_t *meta_p,
                                ps_node_t **nodes_p, size_t *node_cap_p, size_t max_nodes)
{
    ps_status_t st;

    if (nodes_p == NULL || node_cap_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    for (;;) {
        st = ps_meta_decode(buf, len, meta_p, *nodes_p, *node_cap_p);
        if (st != PS_ERR_TOO_LARGE || *node_cap_p >= max_nodes) {
            break;
        }
        size_t cap = *node_cap_p == 0 ? 16 : *node_cap_p * 4;
        if (cap > max_nodes) {
            cap = max_nodes;
        }
        ps_node_t *nodes = realloc(*nodes_p, cap * sizeof(*nodes));
        if (nodes == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        *nodes_p = nodes;
        *node_cap_p = cap;
    }
    if (st == PS_ERR_TOO_LARGE) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting meta of %zu bytes: more than %zu nodes",
                            len, max_nodes);
    }
    return st;
}

/*
 * ps_msg_t helpers: building a message from slices, dropping its
 * references, and the one-line description PS_VERBOSE=2 logs print.
 */
#include "ps/net/message.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(offsetof(ps_msg_t, meta) == 0, "ps_msg_init clears what follows the meta");

void ps_msg_init(ps_msg_t *msg)
{
    /* The meta is cleared by ps_meta_init; clearing it twice was measurable
     * (every message passes here at least twice). */
    ps_meta_init(&msg->meta);
    memset((uint8_t *)msg + sizeof(msg->meta), 0, sizeof(*msg) - sizeof(msg->meta));
}

static ps_status_t add_data(ps_msg_t *msg, const ps_slice_t *slice, ps_data_type_t type,
                            int take_ref)
{
    if (msg == NULL || slice == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (msg->num_data >= PS_MSG_MAX_DATA || msg->num_data >= PS_META_MAX_DATA) {
        return PS_ERR_TOO_LARGE;
    }
    uint32_t i = msg->num_data;
    msg->data[i] = take_ref ? ps_slice_ref(slice) : *slice;
    msg->num_data = i + 1;
    msg->meta.data_size += slice->len;
    /* Types are kept index-aligned with the segments, as upstream. */
    msg->meta.data_types[i] = type;
    msg->meta.num_data_types = i + 1;
    return PS_OK;
}

ps_status_t ps_msg_add_data(ps_msg_t *msg, const ps_slice_t *slice, ps_data_type_t type)
{
    return add_data(msg, slice, type, 1);
}

ps_status_t ps_msg_lend_data(ps_msg_t *msg, const ps_slice_t *slice, ps_data_type_t type)
{
    return add_data(msg, slice, type, 0);
}

void ps_msg_release(ps_msg_t *msg)
{
    if (msg == NULL) {
        return;
    }
    for (uint32_t i = 0; i < msg->num_data && i < PS_MSG_MAX_DATA; ++i) {
        ps_slice_unref(&msg->data[i]);
    }
    msg->num_data = 0;
    if (msg->nodes_owned) {
        /* The allocation may also hold the decoded body (see message.h). */
        if (msg->meta.control.nodes == msg->nodes) {
            msg->meta.control.nodes = NULL;
            msg->meta.control.num_nodes = 0;
        }
        free(msg->nodes);
        msg->meta.body = NULL;
        msg->meta.body_len = 0;
    }
    msg->nodes = NULL;
    msg->num_nodes = 0;
    msg->nodes_owned = 0;
}

uint64_t ps_msg_data_bytes(const ps_msg_t *msg)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < msg->num_data && i < PS_MSG_MAX_DATA; ++i) {
        total += msg->data[i].len;
    }
    return total;
}

/* Appends to buf[*pos..cap) like snprintf, remembering the length the whole
 * line would have had so the caller can report truncation as snprintf does. */
static void describe_append(char *buf, size_t cap, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void describe_append(char *buf, size_t cap, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *dst = NULL;
    size_t room = 0;
    if (buf != NULL && *pos < cap) {
        dst = buf + *pos;
        room = cap - *pos;
    }
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) {
        *pos += (size_t)n;
    }
}

static void describe_id(char *buf, size_t cap, size_t *pos, const char *what, int id)
{
    if (id == PS_NODE_EMPTY) {
        describe_append(buf, cap, pos, " %s -", what);
    } else {
        describe_append(buf, cap, pos, " %s %d", what, id);
    }
}

int ps_msg_describe(const ps_msg_t *msg, char *buf, size_t cap)
{
    size_t pos = 0;
    if (buf != NULL && cap > 0) {
        buf[0] = '\0';
    }
    if (msg == NULL) {
        describe_append(buf, cap, &pos, "(null)");
        return (int)pos;
    }
    const ps_meta_t *m = &msg->meta;
    if (ps_meta_is_control(m)) {
        describe_append(buf, cap, &pos, "control %s", ps_control_cmd_str(m->control.cmd));
        describe_id(buf, cap, &pos, "from", m->sender);
        describe_id(buf, cap, &pos, "to", m->recver);
        uint32_t nodes = m->control.num_nodes != 0 ? m->control.num_nodes : msg->num_nodes;
        if (nodes != 0) {
            describe_append(buf, cap, &pos, " nodes %" PRIu32, nodes);
        }
        if (m->control.cmd == PS_CTRL_BARRIER || m->control.cmd == PS_CTRL_INSTANCE_BARRIER) {
            describe_append(buf, cap, &pos, " group %d", (int)m->control.barrier_group);
        }
        if (m->control.msg_sig != 0) {
            describe_append(buf, cap, &pos, " sig 0x%" PRIx64, m->control.msg_sig);
        }
        if (m->request) {
            describe_append(buf, cap, &pos, " request");
        }
        return (int)pos;
    }
    describe_append(buf, cap, &pos, "%s", m->request ? "request" : "response");
    if (m->push && m->pull) {
        describe_append(buf, cap, &pos, " push-pull");
    } else if (m->push) {
        describe_append(buf, cap, &pos, " push");
    } else if (m->pull) {
        describe_append(buf, cap, &pos, " pull");
    }
    if (m->simple_app) {
        describe_append(buf, cap, &pos, " simple");
    }
    describe_append(buf, cap, &pos, " app %d ts %d", (int)m->app_id, (int)m->timestamp);
    describe_id(buf, cap, &pos, "from", m->sender);
    describe_id(buf, cap, &pos, "to", m->recver);
    if (m->head != PS_NODE_EMPTY) {
        describe_append(buf, cap, &pos, " head %d", (int)m->head);
    }
    describe_append(buf, cap, &pos, " key %" PRIu64 " %" PRIu32 " seg %" PRIu64 "b", m->key,
                    msg->num_data, ps_msg_data_bytes(msg));
    if (m->body_len != 0) {
        describe_append(buf, cap, &pos, " body %zub", m->body_len);
    }
    return (int)pos;
}

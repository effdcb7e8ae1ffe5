/*
 * The fast meta form of meta_fast.h.
 */
#include "ps/net/codec/meta_fast.h"

#include <string.h>

#include "ps/base/endian.h"

#define FLAG_REQUEST 1u
#define FLAG_PUSH 2u
#define FLAG_PULL 4u
#define FLAG_SIMPLE_APP 8u
#define NUM_I32 13

/* Whole words, no early exit: the compiler vectorises it, and every
 * message passes here twice (size, then encode) with ~150 bytes to check. */
static int all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + sizeof(acc) <= n; i += sizeof(acc)) {
        uint64_t w;
        memcpy(&w, b + i, sizeof(w));
        acc |= w;
    }
    for (; i < n; ++i) {
        acc |= b[i];
    }
    return acc == 0;
}

size_t ps_meta_fast_size(const ps_meta_t *m)
{
    if (m->control.cmd != PS_CTRL_EMPTY || m->control.num_nodes != 0 ||
        m->control.barrier_group != 0 || m->control.msg_sig != 0 ||
        m->num_data_types > PS_META_MAX_DATA || m->body_len > PS_META_FAST_BODY_MAX ||
        (m->body_len != 0 && m->body == NULL) || m->is_tensor || m->dtype != 0 ||
        m->ndim != 0 || !all_zero(m->shape, sizeof(m->shape)) ||
        m->num_slave_qp_counters != 0 || m->slave_qp_num != 0 || m->van_data_len != 0 ||
        !all_zero(&m->request_trace, sizeof(m->request_trace)) ||
        !all_zero(&m->response_trace, sizeof(m->response_trace))) {
        return 0;
    }
    for (uint32_t i = 0; i < m->num_data_types; ++i) {
        if ((unsigned)m->data_types[i] >= PS_DATA_TYPE_COUNT) {
            return 0;
        }
    }
    if ((unsigned)m->src_dev_type >= PS_DEV_TYPE_COUNT ||
        (unsigned)m->dst_dev_type >= PS_DEV_TYPE_COUNT) {
        return 0;
    }
    return PS_META_FAST_FIXED_LEN + m->num_data_types + m->body_len;
}

ps_status_t ps_meta_fast_encode(const ps_meta_t *m, uint8_t *buf, size_t cap, size_t *len_p)
{
    size_t len = ps_meta_fast_size(m);
    if (len == 0) {
        return PS_ERR_UNSUPPORTED;
    }
    if (len > cap) {
        return PS_ERR_TOO_LARGE;
    }
    buf[0] = 0;
    buf[1] = PS_META_FAST_VERSION;
    buf[2] = (uint8_t)((m->request ? FLAG_REQUEST : 0) | (m->push ? FLAG_PUSH : 0) |
                       (m->pull ? FLAG_PULL : 0) | (m->simple_app ? FLAG_SIMPLE_APP : 0));
    buf[3] = (uint8_t)m->num_data_types;
    const int32_t i32[NUM_I32] = {
        m->head, m->app_id, m->customer_id, m->timestamp, m->sender,
        m->recver, (int32_t)m->src_dev_type, m->src_dev_id, (int32_t)m->dst_dev_type,
        m->dst_dev_id, m->option, m->sid, m->priority,
    };
    uint8_t *p = buf + 4;
    for (int i = 0; i < NUM_I32; ++i, p += 4) {
        ps_put_le32(p, (uint32_t)i32[i]);
    }
    ps_put_le64(p, m->data_size);
    ps_put_le64(p + 8, m->key);
    ps_put_le64(p + 16, m->addr);
    ps_put_le64(p + 24, m->val_len);
    ps_put_le32(p + 32, (uint32_t)m->body_len);
    p += 36;
    for (uint32_t i = 0; i < m->num_data_types; ++i) {
        *p++ = (uint8_t)m->data_types[i];
    }
    if (m->body_len != 0) {
        memcpy(p, m->body, m->body_len);
    }
    *len_p = len;
    return PS_OK;
}

ps_status_t ps_meta_fast_decode(const uint8_t *buf, size_t len, ps_meta_t *meta_p)
{
    if (len < PS_META_FAST_FIXED_LEN || buf[0] != 0 || buf[1] != PS_META_FAST_VERSION ||
        (buf[2] & ~(FLAG_REQUEST | FLAG_PUSH | FLAG_PULL | FLAG_SIMPLE_APP)) != 0 ||
        buf[3] > PS_META_MAX_DATA) {
        return PS_ERR_PROTOCOL;
    }
    uint32_t ntypes = buf[3];
    uint32_t body_len = ps_get_le32(buf + 88);
    if (body_len > PS_META_FAST_BODY_MAX ||
        len != PS_META_FAST_FIXED_LEN + (size_t)ntypes + body_len) {
        return PS_ERR_PROTOCOL;
    }
    int32_t i32[NUM_I32];
    for (int i = 0; i < NUM_I32; ++i) {
        i32[i] = (int32_t)ps_get_le32(buf + 4 + 4 * i);
    }
    if ((uint32_t)i32[6] >= PS_DEV_TYPE_COUNT || (uint32_t)i32[8] >= PS_DEV_TYPE_COUNT) {
        return PS_ERR_PROTOCOL;
    }
    const uint8_t *types = buf + PS_META_FAST_FIXED_LEN;
    for (uint32_t i = 0; i < ntypes; ++i) {
        if (types[i] >= PS_DATA_TYPE_COUNT) {
            return PS_ERR_PROTOCOL;
        }
    }
    ps_meta_t *m = meta_p;
    ps_meta_init(m);
    m->request = (buf[2] & FLAG_REQUEST) != 0;
    m->push = (buf[2] & FLAG_PUSH) != 0;
    m->pull = (buf[2] & FLAG_PULL) != 0;
    m->simple_app = (buf[2] & FLAG_SIMPLE_APP) != 0;
    m->head = i32[0];
    m->app_id = i32[1];
    m->customer_id = i32[2];
    m->timestamp = i32[3];
    m->sender = i32[4];
    m->recver = i32[5];
    m->src_dev_type = (ps_device_type_t)i32[6];
    m->src_dev_id = i32[7];
    m->dst_dev_type = (ps_device_type_t)i32[8];
    m->dst_dev_id = i32[9];
    m->option = i32[10];
    m->sid = i32[11];
    m->priority = i32[12];
    m->data_size = ps_get_le64(buf + 56);
    m->key = ps_get_le64(buf + 64);
    m->addr = ps_get_le64(buf + 72);
    m->val_len = ps_get_le64(buf + 80);
    m->num_data_types = ntypes;
    for (uint32_t i = 0; i < ntypes; ++i) {
        m->data_types[i] = (ps_data_type_t)types[i];
    }
    m->body_len = body_len;
    m->body = body_len != 0 ? types + ntypes : NULL;
    return PS_OK;
}

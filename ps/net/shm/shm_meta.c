/*
 * The compact meta of shm_meta.h.
 */
#include "ps/net/shm/shm_meta.h"

#include <string.h>

#include "ps/net/message.h"

typedef struct {
    int32_t head, app_id, customer_id, timestamp, sender, recver;
    int32_t src_dev_type, src_dev_id, dst_dev_type, dst_dev_id;
    int32_t option, sid, priority;
    uint8_t request, push, pull, simple_app;
    uint8_t is_tensor, ndim;
    int8_t dtype;
    uint32_t num_data_types;
    uint8_t data_types[PS_MSG_MAX_DATA];
    uint32_t body_len;
    uint64_t data_size, key, addr, val_len;
    /* body_len bytes of body follow, then ndim int64 of shape */
} fast_meta_t;

static int zero_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; ++i) {
        if (b[i] != 0) {
            return 0;
        }
    }
    return 1;
}

int ps__shm_meta_fast_size(const ps_meta_t *m, size_t *len_p)
{
    if (m->control.cmd != PS_CTRL_EMPTY || m->control.num_nodes != 0 ||
        m->control.barrier_group != 0 || m->control.msg_sig != 0 ||
        m->num_data_types > PS_MSG_MAX_DATA || m->body_len > PS__SHM_FAST_BODY_MAX ||
        m->ndim > PS_META_MAX_SHAPE || m->num_slave_qp_counters != 0 ||
        m->slave_qp_num != 0 || m->van_data_len != 0 ||
        !zero_bytes(&m->request_trace, sizeof(m->request_trace)) ||
        !zero_bytes(&m->response_trace, sizeof(m->response_trace))) {
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
    *len_p = sizeof(fast_meta_t) + m->body_len + m->ndim * sizeof(m->shape[0]);
    return 1;
}

void ps__shm_meta_fast_write(const ps_meta_t *m, uint8_t *out)
{
    fast_meta_t f;
    memset(&f, 0, sizeof(f));
    f.head = m->head;
    f.app_id = m->app_id;
    f.customer_id = m->customer_id;
    f.timestamp = m->timestamp;
    f.sender = m->sender;
    f.recver = m->recver;
    f.src_dev_type = (int32_t)m->src_dev_type;
    f.src_dev_id = m->src_dev_id;
    f.dst_dev_type = (int32_t)m->dst_dev_type;
    f.dst_dev_id = m->dst_dev_id;
    f.option = m->option;
    f.sid = m->sid;
    f.priority = m->priority;
    f.request = m->request;
    f.push = m->push;
    f.pull = m->pull;
    f.simple_app = m->simple_app;
    f.is_tensor = m->is_tensor;
    f.dtype = m->dtype;
    f.ndim = (uint8_t)m->ndim;
    f.num_data_types = m->num_data_types;
    for (uint32_t i = 0; i < m->num_data_types; ++i) {
        f.data_types[i] = (uint8_t)m->data_types[i];
    }
    f.body_len = (uint32_t)m->body_len;
    f.data_size = m->data_size;
    f.key = m->key;
    f.addr = m->addr;
    f.val_len = m->val_len;
    memcpy(out, &f, sizeof(f));
    if (m->body_len != 0) {
        memcpy(out + sizeof(f), m->body, m->body_len);
    }
    if (m->ndim != 0) {
        memcpy(out + sizeof(f) + m->body_len, m->shape, m->ndim * sizeof(m->shape[0]));
    }
}

ps_status_t ps__shm_meta_fast_read(const uint8_t *in, size_t len, ps_meta_t *meta_p)
{
    fast_meta_t f;
    if (len < sizeof(f)) {
        return PS_ERR_PROTOCOL;
    }
    memcpy(&f, in, sizeof(f));
    if (f.num_data_types > PS_MSG_MAX_DATA || f.body_len > PS__SHM_FAST_BODY_MAX ||
        f.ndim > PS_META_MAX_SHAPE || f.is_tensor > 1 ||
        len != sizeof(f) + f.body_len + f.ndim * sizeof(int64_t) ||
        (uint32_t)f.src_dev_type >= PS_DEV_TYPE_COUNT ||
        (uint32_t)f.dst_dev_type >= PS_DEV_TYPE_COUNT) {
        return PS_ERR_PROTOCOL;
    }
    ps_meta_t m;
    ps_meta_init(&m);
    m.head = f.head;
    m.app_id = f.app_id;
    m.customer_id = f.customer_id;
    m.timestamp = f.timestamp;
    m.sender = f.sender;
    m.recver = f.recver;
    m.src_dev_type = (ps_device_type_t)f.src_dev_type;
    m.src_dev_id = f.src_dev_id;
    m.dst_dev_type = (ps_device_type_t)f.dst_dev_type;
    m.dst_dev_id = f.dst_dev_id;
    m.option = f.option;
    m.sid = f.sid;
    m.priority = f.priority;
    m.request = f.request != 0;
    m.push = f.push != 0;
    m.pull = f.pull != 0;
    m.simple_app = f.simple_app != 0;
    m.is_tensor = f.is_tensor != 0;
    m.dtype = f.dtype;
    m.ndim = f.ndim;
    if (f.ndim != 0) {
        memcpy(m.shape, in + sizeof(f) + f.body_len, f.ndim * sizeof(m.shape[0]));
    }
    m.num_data_types = f.num_data_types;
    for (uint32_t i = 0; i < f.num_data_types; ++i) {
        if (f.data_types[i] >= PS_DATA_TYPE_COUNT) {
            return PS_ERR_PROTOCOL;
        }
        m.data_types[i] = (ps_data_type_t)f.data_types[i];
    }
    m.body_len = f.body_len;
    m.body = f.body_len != 0 ? in + sizeof(f) : NULL;
    m.data_size = f.data_size;
    m.key = f.key;
    m.addr = f.addr;
    m.val_len = f.val_len;
    *meta_p = m;
    return PS_OK;
}

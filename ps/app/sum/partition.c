#include "ps/app/sum/partition.h"

#include <stdlib.h>
#include <string.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"

#define DEFAULT_PARTITION_BYTES 4096000u

typedef struct {
    ps_sum_tensor_t *t;
    size_t off, len;
    ps_slice_t key; /* 8 bytes in t->keys */
} part_t;

struct ps_sum_tensor {
    ps_kv_worker_t *worker;
    ps_data_type_t type;
    size_t bytes;
    int request_timeout_ms;
    size_t num_parts;
    part_t *parts;
    ps_slice_t keys; /* every part's key */

    ps_mutex_t lock;
    ps_cond_t done;
    int outstanding;     /* parts of the operation not yet ended */
    ps_status_t result;  /* first error of the operation */
    ps_slice_t op_dst;   /* in-place push-pull: where the pulls go */
};

size_t ps_sum_partition_bytes(void)
{
    uint64_t v = ps_config_size_or(PS_CFG_BYTEPS_PARTITION_BYTES, DEFAULT_PARTITION_BYTES);
    return v > 0 ? (size_t)v : DEFAULT_PARTITION_BYTES;
}

ps_status_t ps_sum_part_key(ps_postoffice_t *po, uint32_t tensor_id, uint32_t part,
                            ps_key_t *key_p)
{
    if (!po || !key_p)
        return PS_ERR_INVALID_ARG;
    int ns = ps_postoffice_num_servers(po);
    if (ns <= 0)
        return PS_ERR_BAD_STATE;
    if (part >= PS_SUM_MAX_PARTS)
        return PS_ERR_TOO_LARGE;
    int server = (int)(((uint64_t)tensor_id + part) % (uint64_t)ns);
    uint64_t begin, end;
    ps_status_t st = ps_postoffice_server_key_range(po, server, &begin, &end);
    if (st != PS_OK)
        return st;
    uint64_t off = ((uint64_t)tensor_id << 24) | part;
    if (off >= end - begin)
        return PS_ERR_TOO_LARGE;
    *key_p = begin + off;
    return PS_OK;
}

ps_status_t ps_sum_tensor_create(ps_kv_worker_t *worker, ps_postoffice_t *po, uint32_t tensor_id,
                                 ps_data_type_t type, size_t bytes, size_t part_bytes,
                                 ps_sum_tensor_t **tensor_p)
{
    size_t es = ps_data_type_size(type);
    if (!worker || !po || !tensor_p || es == 0 || bytes == 0 || bytes % es != 0)
        return PS_ERR_INVALID_ARG;
    if (part_bytes == 0)
        part_bytes = ps_sum_partition_bytes();
    part_bytes -= part_bytes % es;
    if (part_bytes == 0)
        part_bytes = es;
    size_t n = (bytes + part_bytes - 1) / part_bytes;
    if (n > PS_SUM_MAX_PARTS)
        return PS_ERR_TOO_LARGE;

    ps_sum_tensor_t *t = calloc(1, sizeof(*t));
    if (!t)
        return PS_ERR_NO_MEMORY;
    t->worker = worker;
    t->type = type;
    t->bytes = bytes;
    t->request_timeout_ms = ps_postoffice_request_timeout_ms(po);
    t->num_parts = n;
    t->parts = calloc(n, sizeof(*t->parts));
    ps_status_t st = PS_ERR_NO_MEMORY;
    if (!t->parts || ps_slice_alloc(n * sizeof(ps_key_t), 0, &t->keys) != PS_OK)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        ps_key_t key;
        if ((st = ps_sum_part_key(po, tensor_id, (uint32_t)i, &key)) != PS_OK)
            goto fail;
        memcpy((char *)ps_slice_ptr(&t->keys) + i * sizeof(key), &key, sizeof(key));
        t->parts[i].t = t;
        t->parts[i].off = i * part_bytes;
        t->parts[i].len = i + 1 < n ? part_bytes : bytes - i * part_bytes;
        if ((st = ps_slice_sub(&t->keys, i * sizeof(key), sizeof(key), &t->parts[i].key)) != PS_OK)
            goto fail;
    }
    if ((st = ps_mutex_init(&t->lock)) != PS_OK)
        goto fail;
    if ((st = ps_cond_init(&t->done)) != PS_OK) {
        ps_mutex_destroy(&t->lock);
        goto fail;
    }
    *tensor_p = t;
    return PS_OK;

fail:
    for (size_t i = 0; t->parts && i < n; i++)
        ps_slice_unref(&t->parts[i].key);
    ps_slice_unref(&t->keys);
    free(t->parts);
    free(t);
    return st;
}

void ps_sum_tensor_destroy(ps_sum_tensor_t *t)
{
    if (!t)
        return;
    /* Callbacks reference t: wait for them (every request ends by the
     * job's request timeout). */
    if (ps_sum_tensor_wait(t, t->request_timeout_ms) == PS_ERR_TIMED_OUT) {
        ps_error(PS_LOG_APP, "sum tensor: %d requests still outstanding at destroy; leaking "
                 "the tensor rather than freeing it under them", t->outstanding);
        return;
    }
    for (size_t i = 0; i < t->num_parts; i++)
        ps_slice_unref(&t->parts[i].key);
    ps_slice_unref(&t->keys);
    ps_slice_unref(&t->op_dst);
    free(t->parts);
    ps_cond_destroy(&t->done);
    ps_mutex_destroy(&t->lock);
    free(t);
}

size_t ps_sum_tensor_num_parts(const ps_sum_tensor_t *t)
{
    return t ? t->num_parts : 0;
}

ps_status_t ps_sum_tensor_part(const ps_sum_tensor_t *t, size_t index, ps_key_t *key_p,
                               size_t *offset_p, size_t *len_p)
{
    if (!t || index >= t->num_parts)
        return PS_ERR_INVALID_ARG;
    if (key_p)
        memcpy(key_p, ps_slice_ptr(&t->parts[index].key), sizeof(*key_p));
    if (offset_p)
        *offset_p = t->parts[index].off;
    if (len_p)
        *len_p = t->parts[index].len;
    return PS_OK;
}

static void part_done(void *arg, int ts, ps_status_t status)
{
    ps_sum_tensor_t *t = arg;
    (void)ts;
    ps_mutex_lock(&t->lock);
    if (status != PS_OK && t->result == PS_OK)
        t->result = status;
    if (--t->outstanding == 0)
        ps_cond_broadcast(&t->done);
    ps_mutex_unlock(&t->lock);
}

static void fail_part(ps_sum_tensor_t *t, ps_status_t st)
{
    part_done(t, -1, st);
}

/* In-place push-pull: the part's push was acknowledged (the transport is
 * done reading it), now its pull may write the same bytes. */
static void pushed_then_pull(void *arg, int ts, ps_status_t status)
{
    part_t *p = arg;
    ps_sum_tensor_t *t = p->t;
    (void)ts;
    if (status != PS_OK) {
        fail_part(t, status);
        return;
    }
    ps_kv_pairs_t out = {p->key, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, t->type};
    ps_status_t st = ps_slice_sub(&t->op_dst, p->off, p->len, &out.vals);
    int pts;
    if (st == PS_OK)
        st = ps_kv_zpull(t->worker, &out, 0, part_done, t, &pts);
    ps_slice_unref(&out.vals);
    if (st != PS_OK)
        fail_part(t, st);
}

static int overlap(const ps_slice_t *a, const ps_slice_t *b)
{
    const char *pa = ps_slice_ptr(a), *pb = ps_slice_ptr(b);
    return pa && pb && pa < pb + b->len && pb < pa + a->len;
}

ps_status_t ps_sum_tensor_start(ps_sum_tensor_t *t, ps_sum_op_t op, const ps_slice_t *src,
                                const ps_slice_t *dst)
{
    return ps_sum_tensor_start_when(t, op, src, dst, NULL);
}

ps_status_t ps_sum_tensor_start_when(ps_sum_tensor_t *t, ps_sum_op_t op, const ps_slice_t *src,
                                     const ps_slice_t *dst, const ps_kv_ready_t *ready)
{
    if (!t || op < PS_SUM_OP_PUSH || op > PS_SUM_OP_PUSH_PULL)
        return PS_ERR_INVALID_ARG;
    int push = (op & PS_SUM_OP_PUSH) != 0, pull = (op & PS_SUM_OP_PULL) != 0;
    if ((push && (!src || src->len != t->bytes)) || (pull && (!dst || dst->len != t->bytes))) {
        ps_error(PS_LOG_APP, "sum tensor: buffers of %zu/%zu bytes for a %zu-byte tensor",
                 push && src ? src->len : 0, pull && dst ? dst->len : 0, t->bytes);
        return PS_ERR_INVALID_ARG;
    }
    ps_mutex_lock(&t->lock);
    if (t->outstanding > 0) {
        ps_mutex_unlock(&t->lock);
        return PS_ERR_BAD_STATE;
    }
    /* Every part counts until its request ended (or failed to start), so
     * the operation cannot end while parts are still being issued. */
    t->outstanding = (int)t->num_parts;
    t->result = PS_OK;
    /* Pushing from and pulling into the same bytes in one request would let
     * the answer land while the transport may still read the push (a
     * retransmission, an asynchronous send): pull only after the push was
     * acknowledged. */
    int two_phase = op == PS_SUM_OP_PUSH_PULL && overlap(src, dst);
    ps_slice_unref(&t->op_dst);
    if (two_phase)
        t->op_dst = ps_slice_ref(dst);
    ps_mutex_unlock(&t->lock);

    for (size_t i = 0; i < t->num_parts; i++) {
        const part_t *p = &t->parts[i];
        ps_kv_pairs_t in = {p->key, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, t->type};
        ps_kv_pairs_t out = {p->key, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, t->type};
        ps_status_t st = PS_OK;
        if (push)
            st = ps_slice_sub(src, p->off, p->len, &in.vals);
        if (st == PS_OK && pull)
            st = ps_slice_sub(dst, p->off, p->len, &out.vals);
        int ts;
        if (st == PS_OK) {
            if (two_phase)
                st = ps_kv_zpush_when(t->worker, &in, ready, 0, pushed_then_pull, &t->parts[i],
                                      &ts);
            else if (op == PS_SUM_OP_PUSH)
                st = ps_kv_zpush_when(t->worker, &in, ready, 0, part_done, t, &ts);
            else if (op == PS_SUM_OP_PULL)
                st = ps_kv_zpull(t->worker, &out, 0, part_done, t, &ts);
            else
                st = ps_kv_zpushpull_when(t->worker, &in, &out, ready, 0, part_done, t, &ts);
        }
        ps_slice_unref(&in.vals);
        ps_slice_unref(&out.vals);
        if (st != PS_OK)
            fail_part(t, st); /* not issued: its callback will not run */
    }
    return PS_OK;
}

ps_status_t ps_sum_tensor_wait(ps_sum_tensor_t *t, int timeout_ms)
{
    if (!t)
        return PS_ERR_INVALID_ARG;
    ps_deadline_t dl = ps_deadline_from_ms(timeout_ms < 0 ? t->request_timeout_ms : timeout_ms);
    ps_mutex_lock(&t->lock);
    while (t->outstanding > 0) {
        if (ps_cond_wait(&t->done, &t->lock, dl) == PS_ERR_TIMED_OUT && t->outstanding > 0) {
            ps_mutex_unlock(&t->lock);
            return PS_ERR_TIMED_OUT;
        }
    }
    ps_status_t st = t->result;
    ps_mutex_unlock(&t->lock);
    return st;
}

static ps_status_t run(ps_sum_tensor_t *t, ps_sum_op_t op, const ps_slice_t *src,
                       const ps_slice_t *dst, int timeout_ms)
{
    ps_status_t st = ps_sum_tensor_start(t, op, src, dst);
    return st == PS_OK ? ps_sum_tensor_wait(t, timeout_ms) : st;
}

ps_status_t ps_sum_tensor_push(ps_sum_tensor_t *t, const ps_slice_t *src, int timeout_ms)
{
    return run(t, PS_SUM_OP_PUSH, src, NULL, timeout_ms);
}

ps_status_t ps_sum_tensor_pull(ps_sum_tensor_t *t, const ps_slice_t *dst, int timeout_ms)
{
    return run(t, PS_SUM_OP_PULL, NULL, dst, timeout_ms);
}

ps_status_t ps_sum_tensor_push_pull(ps_sum_tensor_t *t, const ps_slice_t *src,
                                    const ps_slice_t *dst, int timeout_ms)
{
    return run(t, PS_SUM_OP_PUSH_PULL, src, dst, timeout_ms);
}

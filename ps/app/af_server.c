/*
 * The AF server: assembles each worker batch from its messages (in a
 * per-worker reorder buffer, af_order.h), delivers it whole and in order,
 * and sends each answer to the worker's pull slot.
 *
 * Receiving runs on the van's thread under the server's lock, and so does
 * the handler (in order per worker). Answering touches only the batch's
 * atomics, so a handler may answer inline or any thread later.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/af.h"
#include "ps/app/af_block.h"
#include "ps/app/host_stage.h"
#include "ps/app/af_order.h"
#include "ps/app/af_wire.h"
#include "ps/app/ready_queue.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/caps.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"

typedef struct af_batch {
    ps_af_batch_t pub; /* first: the handler's pointer is this batch's */
    int customer_id;   /* the worker's, to answer */
    uint32_t count;
    uint32_t num_push;
    uint32_t received;
    ps_af_tensor_t *tensors; /* count: pushes, then pull slots */
    uint64_t *slot_bytes;    /* count */
    ps_slice_t *data;        /* count: the pushes' bytes */
    int32_t *ts;             /* count */
    uint64_t *addr;          /* count */
    ps_trace_t *trace;       /* count: the pull requests' */
    uint8_t *present;        /* count */
    atomic_uchar *answered;  /* count */
    atomic_int left;         /* pull slots not answered */
    struct af_batch *next;   /* ready queue */
} af_batch_t;

typedef struct {
    ps__af_order_t order;
    af_batch_t *head, *tail; /* ready for get_batch */
} af_peer_t;

typedef struct {
    int rank;
    uint64_t key;
    ps_slice_t slice;
} af_reg_t;

struct ps_af_server {
    ps_postoffice_t *po;
    ps_customer_t *customer;
    int app_id;
    int my_id;
    int trace;
    int busy_poll;
    int device_ok; /* the van moves device memory itself (PS_CAP_DEVICE_MEMORY) */
    int request_timeout_ms;
    ps_af_handler_func_t handler;
    void *handler_arg;
    int num_workers;
    af_peer_t *peers;
    int closing;
    int pollers;     /* threads in get_batch, which destroy waits out */
    ps_mutex_t lock; /* peers, closing, pollers */
    ps_cond_t ready;
    ps_mutex_t reg_lock;
    af_reg_t *regs;
    size_t num_regs, cap_regs;
    /* Answers waiting for their device results (ps_af_server_respond_when);
     * made with the first, under reg_lock. */
    _Atomic(ps__ready_queue_t *) later;
    atomic_uint_least64_t n_batches, n_in_place, n_push_bytes, n_dropped;
};

/* ---- batches ---- */

static void batch_free(af_batch_t *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; i < b->count && b->data; i++)
        ps_slice_unref(&b->data[i]);
    free(b); /* one block with its arrays */
}

static void drop_item(void *arg, void *item)
{
    (void)arg;
    batch_free(item);
}

/* A batch and all its arrays in one allocation. */
static af_batch_t *batch_alloc(int sender, int worker_rank, int customer_id,
                               const ps__af_hdr_t *hdr)
{
    size_t n = hdr->count;
    af_batch_t *b = NULL;
    size_t end = sizeof(*b);
    size_t o_tensors = PS__AF_BLOCK_TAKE(&end, n, b->tensors);
    size_t o_bytes = PS__AF_BLOCK_TAKE(&end, n, b->slot_bytes);
    size_t o_data = PS__AF_BLOCK_TAKE(&end, n, b->data);
    size_t o_ts = PS__AF_BLOCK_TAKE(&end, n, b->ts);
    size_t o_addr = PS__AF_BLOCK_TAKE(&end, n, b->addr);
    size_t o_trace = PS__AF_BLOCK_TAKE(&end, n, b->trace);
    size_t o_present = PS__AF_BLOCK_TAKE(&end, n, b->present);
    size_t o_answered = PS__AF_BLOCK_TAKE(&end, n, b->answered);
    char *block = calloc(1, end);
    if (!block)
        return NULL;
    b = (af_batch_t *)block;
    b->count = hdr->count;
    b->num_push = hdr->num_push;
    b->customer_id = customer_id;
    b->tensors = (ps_af_tensor_t *)(block + o_tensors);
    b->slot_bytes = (uint64_t *)(block + o_bytes);
    b->data = (ps_slice_t *)(block + o_data);
    b->ts = (int32_t *)(block + o_ts);
    b->addr = (uint64_t *)(block + o_addr);
    b->trace = (ps_trace_t *)(block + o_trace);
    b->present = (uint8_t *)(block + o_present);
    b->answered = (atomic_uchar *)(block + o_answered);
    b->pub.sender = sender;
    b->pub.worker_rank = worker_rank;
    b->pub.seq = hdr->seq;
    b->pub.num_push = hdr->num_push;
    b->pub.push = b->tensors;
    b->pub.num_pull = hdr->count - hdr->num_push;
    b->pub.pull = b->tensors + hdr->num_push;
    atomic_init(&b->left, (int)(hdr->count - hdr->num_push));
    return b;
}

/* ---- registered receive tensors ---- */

/* The registered part for (rank, key) when len bytes fit in it; reg_lock
 * held. */
static const af_reg_t *reg_find(const ps_af_server_t *s, int rank, uint64_t key, uint64_t len)
{
    for (size_t i = 0; i < s->num_regs; i++) {
        const af_reg_t *r = &s->regs[i];
        if (r->rank == rank && r->key == key)
            return len != 0 && len <= r->slice.len ? r : NULL;
    }
    return NULL;
}

static ps_status_t server_recv_buffer(void *arg, ps_customer_t *customer, const ps_meta_t *meta,
                                      unsigned index, uint64_t len, ps_slice_t *slice_p)
{
    ps_af_server_t *s = arg;
    (void)customer;
    if (index != 0 || !meta->request || !meta->push || !meta->is_tensor)
        return PS_ERR_NOT_FOUND;
    ps_status_t st = PS_ERR_NOT_FOUND;
    ps_mutex_lock(&s->reg_lock);
    const af_reg_t *r = reg_find(s, ps_postoffice_peer_rank(s->po, meta->sender), meta->key, len);
    if (r != NULL && (s->device_ok || ps_slice_in_host_mem(&r->slice)))
        st = ps_slice_sub(&r->slice, 0, (size_t)len, slice_p);
    ps_mutex_unlock(&s->reg_lock);
    return st;
}

ps_status_t ps_af_server_register_recv_tensor(ps_af_server_t *s, const ps_af_tensor_t *tensor,
                                              const int *worker_ranks, const uint64_t *keys,
                                              size_t n)
{
    uint64_t bytes;
    if (!s || !tensor || !worker_ranks || !keys || n == 0 ||
        ps_af_tensor_bytes(tensor, &bytes) != PS_OK || bytes == 0 || bytes % n != 0 ||
        !tensor->data || (unsigned)tensor->mem_kind >= PS_MEM_KIND_COUNT)
        return PS_ERR_INVALID_ARG;
    ps_buf_t *buf;
    ps_status_t st = ps_buf_wrap_mem(tensor->data, (size_t)bytes, (ps_buf_mem_t)tensor->mem_kind,
                                     tensor->device, NULL, NULL, &buf);
    if (st != PS_OK)
        return st;
    size_t part = (size_t)(bytes / n);
    ps_mutex_lock(&s->reg_lock);
    for (size_t i = 0; i < n && st == PS_OK; i++) {
        for (size_t k = 0; k < s->num_regs; k++) {
            if (s->regs[k].rank == worker_ranks[i] && s->regs[k].key == keys[i])
                st = PS_ERR_EXISTS;
        }
    }
    if (st == PS_OK && s->num_regs + n > s->cap_regs) {
        size_t cap = (s->num_regs + n) * 2;
        af_reg_t *grown = realloc(s->regs, cap * sizeof(*grown));
        if (!grown) {
            st = PS_ERR_NO_MEMORY;
        } else {
            s->regs = grown;
            s->cap_regs = cap;
        }
    }
    for (size_t i = 0; i < n && st == PS_OK; i++) {
        af_reg_t *r = &s->regs[s->num_regs];
        r->rank = worker_ranks[i];
        r->key = keys[i];
        st = ps_slice_of(buf, i * part, part, &r->slice);
        if (st == PS_OK)
            s->num_regs++;
    }
    ps_mutex_unlock(&s->reg_lock);
    ps_buf_unref(buf);
    return st;
}

/* ---- receiving ---- */

static void dropped(ps_af_server_t *s, const ps_meta_t *m, const char *why)
{
    atomic_fetch_add_explicit(&s->n_dropped, 1, memory_order_relaxed);
    ps_warn_ratelimited(PS_LOG_APP, "af server app %d: dropped a message ts %d from node %d: %s",
                        s->app_id, m->timestamp, m->sender, why);
}

/* A whole batch, in order: to the handler or the ready queue. Lock held. */
static void deliver(ps_af_server_t *s, af_peer_t *p, af_batch_t *b)
{
    if (s->trace) {
        uint64_t now = ps_time_now_ns();
        for (uint32_t i = b->num_push; i < b->count; i++)
            b->trace[i].process = now;
    }
    atomic_fetch_add_explicit(&s->n_batches, 1, memory_order_relaxed);
    if (s->handler) {
        s->handler(s->handler_arg, s, &b->pub);
        return;
    }
    b->next = NULL;
    if (p->tail)
        p->tail->next = b;
    else
        p->head = b;
    p->tail = b;
    ps_cond_broadcast(&s->ready);
}

static void server_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    ps_af_server_t *s = arg;
    (void)customer;
    uint64_t now = s->trace ? ps_time_now_ns() : 0;
    const ps_meta_t *m = &msg->meta;
    ps__af_hdr_t hdr;
    ps_af_tensor_t t;
    uint64_t bytes;
    if (!m->request || m->simple_app)
        return dropped(s, m, "not a request");
    if (ps__af_hdr_read(m->body, m->body_len, &hdr) != PS_OK)
        return dropped(s, m, "no batch header");
    if (ps__af_meta_get_tensor(m, &t, &bytes) != PS_OK)
        return dropped(s, m, "no valid tensor");
    int rank = ps_postoffice_peer_rank(s->po, m->sender);
    if (ps_id_to_role(m->sender) != PS_ROLE_WORKER || rank < 0 || rank >= s->num_workers)
        return dropped(s, m, "not from a worker of this instance");
    int is_push = hdr.index < hdr.num_push;
    if (is_push != (m->push && !m->pull))
        return dropped(s, m, "push / pull flags disagree with its place in the batch");
    if (is_push && (msg->num_data != 1 || msg->data[0].len != bytes))
        return dropped(s, m, "pushed bytes differ from the tensor's size");
    if (!is_push && (msg->num_data != 0 || m->val_len != bytes))
        return dropped(s, m, "pull slot size differs from the tensor's");

    ps_mutex_lock(&s->lock);
    af_peer_t *p = &s->peers[rank];
    void **slot;
    if (s->closing) {
        ps_mutex_unlock(&s->lock);
        return;
    }
    if (ps__af_order_slot(&p->order, hdr.seq, &slot) != PS_OK) {
        ps_mutex_unlock(&s->lock);
        return dropped(s, m, "batch number outside the reorder window");
    }
    af_batch_t *b = *slot;
    if (b == NULL) {
        b = batch_alloc(m->sender, rank, m->customer_id, &hdr);
        if (b == NULL) {
            ps_mutex_unlock(&s->lock);
            return dropped(s, m, "out of memory");
        }
        *slot = b;
    } else if (b->count != hdr.count || b->num_push != hdr.num_push ||
               b->customer_id != m->customer_id || b->present[hdr.index]) {
        ps_mutex_unlock(&s->lock);
        return dropped(s, m, "disagrees with its batch, or repeats a message");
    }
    uint32_t i = hdr.index;
    b->present[i] = 1;
    b->ts[i] = m->timestamp;
    b->addr[i] = m->addr;
    b->slot_bytes[i] = bytes;
    b->tensors[i] = t;
    if (is_push) {
        b->data[i] = ps_slice_ref(&msg->data[0]);
        b->tensors[i].data = ps_slice_ptr(&b->data[i]);
        if (b->data[i].buf != NULL) {
            b->tensors[i].mem_kind = ps_slice_mem_ops_kind(&b->data[i]);
            b->tensors[i].device = ps_slice_device(&b->data[i]);
        }
        atomic_fetch_add_explicit(&s->n_push_bytes, bytes, memory_order_relaxed);
        ps_mutex_lock(&s->reg_lock);
        const af_reg_t *r = reg_find(s, rank, m->key, bytes);
        if (r != NULL && bytes != 0 && ps_slice_ptr(&r->slice) == b->tensors[i].data)
            atomic_fetch_add_explicit(&s->n_in_place, bytes, memory_order_relaxed);
        ps_mutex_unlock(&s->reg_lock);
    } else {
        b->trace[i] = m->request_trace;
        b->trace[i].postrecv = now;
    }
    if (++b->received == b->count)
        ps__af_order_mark_complete(&p->order, hdr.seq);
    af_batch_t *ready;
    while ((ready = ps__af_order_pop(&p->order)) != NULL)
        deliver(s, p, ready);
    ps_mutex_unlock(&s->lock);
}

/* ---- lifecycle ---- */

ps_status_t ps_af_server_create(ps_postoffice_t *po, int app_id, ps_af_handler_func_t handler,
                                void *arg, ps_af_server_t **server_p)
{
    if (!po || !server_p)
        return PS_ERR_INVALID_ARG;
    int nw = ps_postoffice_num_workers(po);
    if (nw <= 0) {
        ps_error(PS_LOG_APP, "af server: the job has no workers");
        return PS_ERR_CONFIG;
    }
    ps_af_server_t *s = calloc(1, sizeof(*s));
    if (!s)
        return PS_ERR_NO_MEMORY;
    s->po = po;
    s->app_id = app_id;
    s->my_id = ps_postoffice_my_id(po);
    s->trace = ps_config_bool_or(PS_CFG_STEPMESH_ENABLE_TRACE, 0);
    s->busy_poll = ps_config_bool_or(PS_CFG_STEPMESH_BUSY_POLL_ENABLE, 1);
    s->request_timeout_ms = ps_postoffice_request_timeout_ms(po);
    s->device_ok = (ps_postoffice_capabilities(po) & PS_CAP_DEVICE_MEMORY) != 0;
    s->handler = handler;
    s->handler_arg = arg;
    s->num_workers = nw;
    s->peers = calloc((size_t)nw, sizeof(*s->peers));
    ps_status_t st = PS_ERR_NO_MEMORY;
    if (!s->peers)
        goto fail;
    for (int i = 0; i < nw; i++)
        ps__af_order_init(&s->peers[i].order);
    if ((st = ps_mutex_init(&s->lock)) != PS_OK)
        goto fail;
    if ((st = ps_mutex_init(&s->reg_lock)) != PS_OK)
        goto fail_lock;
    if ((st = ps_cond_init(&s->ready)) != PS_OK)
        goto fail_reg;
    st = ps_customer_create(po, app_id, app_id, server_recv, s, &s->customer);
    if (st != PS_OK)
        goto fail_cond;
    if (ps_postoffice_capabilities(po) & PS_CAP_RECV_INTO_DEST) {
        ps_customer_set_recv_buffer_segments(s->customer, 1u << 0);
        ps_customer_set_recv_buffer_func(s->customer, server_recv_buffer, s);
    }
    *server_p = s;
    return PS_OK;

fail_cond:
    ps_cond_destroy(&s->ready);
fail_reg:
    ps_mutex_destroy(&s->reg_lock);
fail_lock:
    ps_mutex_destroy(&s->lock);
fail:
    free(s->peers);
    free(s);
    return st;
}

void ps_af_server_destroy(ps_af_server_t *s)
{
    if (!s)
        return;
    ps_mutex_lock(&s->lock);
    s->closing = 1;
    ps_cond_broadcast(&s->ready);
    /* A poller sees `closing` within a spin or a wake-up and leaves. */
    ps_deadline_t dl = ps_deadline_from_ms(s->request_timeout_ms);
    while (s->pollers > 0 && ps_cond_wait(&s->ready, &s->lock, dl) != PS_ERR_TIMED_OUT)
        ;
    int stuck = s->pollers;
    ps_mutex_unlock(&s->lock);
    if (stuck)
        ps_warn(PS_LOG_APP, "af server app %d: %d threads still in get_batch at destroy", s->app_id,
                stuck);
    /* Answers still waiting for their results are not sent (the workers'
     * batches time out); their batches are freed. */
    ps__ready_queue_destroy(atomic_exchange(&s->later, NULL));
    ps_customer_destroy(s->customer); /* no receive runs after this */
    for (int i = 0; i < s->num_workers; i++) {
        af_peer_t *p = &s->peers[i];
        ps__af_order_clear(&p->order, drop_item, NULL);
        while (p->head) {
            af_batch_t *b = p->head;
            p->head = b->next;
            batch_free(b);
        }
    }
    for (size_t i = 0; i < s->num_regs; i++)
        ps_slice_unref(&s->regs[i].slice);
    free(s->regs);
    ps_cond_destroy(&s->ready);
    ps_mutex_destroy(&s->reg_lock);
    ps_mutex_destroy(&s->lock);
    free(s->peers);
    free(s);
}

/* ---- polling ---- */

/* Takes one batch of every worker when each has one; lock held. */
static int take_round(ps_af_server_t *s, ps_af_batch_t **batches_p)
{
    for (int i = 0; i < s->num_workers; i++) {
        if (s->peers[i].head == NULL)
            return 0;
    }
    for (int i = 0; i < s->num_workers; i++) {
        af_peer_t *p = &s->peers[i];
        af_batch_t *b = p->head;
        p->head = b->next;
        if (p->head == NULL)
            p->tail = NULL;
        b->next = NULL;
        batches_p[i] = &b->pub;
    }
    return 1;
}

ps_status_t ps_af_server_get_batch(ps_af_server_t *s, ps_af_batch_t **batches_p, size_t cap,
                                   size_t *num_p, int timeout_ms)
{
    if (!s || !batches_p || !num_p || cap < (size_t)s->num_workers)
        return PS_ERR_INVALID_ARG;
    if (s->handler)
        return PS_ERR_BAD_STATE;
    ps_deadline_t dl = ps_deadline_from_ms(timeout_ms < 0 ? s->request_timeout_ms : timeout_ms);
    ps_status_t st = PS_OK;
    /* Busy polling where waits drive the van: run its loop here (the
     * batches arrive on this thread) rather than wait for its thread. */
    int drive = s->busy_poll && ps_customer_waits_drive(s->customer);
    int drove = 0;
    ps_mutex_lock(&s->lock);
    s->pollers++;
    for (;;) {
        if (s->closing) {
            st = PS_ERR_SHUTDOWN;
            break;
        }
        if (take_round(s, batches_p)) {
            *num_p = (size_t)s->num_workers;
            break;
        }
        if (s->busy_poll) {
            ps_mutex_unlock(&s->lock);
            int handled = drive ? ps_customer_drive(s->customer, 16) : -1;
            drove |= handled >= 0;
            if (handled <= 0) {
                for (int k = 0; k < 256; k++)
                    ps_cpu_relax();
                sched_yield();
            }
            ps_mutex_lock(&s->lock);
            if (ps_deadline_expired(dl)) {
                if (take_round(s, batches_p)) {
                    *num_p = (size_t)s->num_workers;
                    break;
                }
                st = PS_ERR_TIMED_OUT;
                break;
            }
        } else if (ps_cond_wait(&s->ready, &s->lock, dl) == PS_ERR_TIMED_OUT) {
            if (take_round(s, batches_p)) {
                *num_p = (size_t)s->num_workers;
                break;
            }
            st = PS_ERR_TIMED_OUT;
            break;
        }
    }
    /* The van's thread takes the loop back (a hand-back runs no receive
     * function, so under the lock; before destroy may free the customer). */
    if (drove)
        (void)ps_customer_drive(s->customer, 0);
    if (--s->pollers == 0 && s->closing)
        ps_cond_broadcast(&s->ready);
    ps_mutex_unlock(&s->lock);
    return st;
}

/* ---- answering ---- */

static ps_status_t send_answer(ps_af_server_t *s, af_batch_t *b, uint32_t i,
                               const ps_af_tensor_t *res, ps_buf_t *owner, uint64_t start_ns)
{
    uint8_t body[PS__AF_HDR_LEN];
    ps__af_hdr_t hdr = {.index = i, .count = b->count, .num_push = b->num_push, .seq = b->pub.seq};
    ps__af_hdr_write(body, &hdr);
    int is_pull = i >= b->num_push;

    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.app_id = s->app_id;
    msg.meta.customer_id = b->customer_id;
    msg.meta.timestamp = b->ts[i];
    msg.meta.request = false;
    msg.meta.push = !is_pull;
    msg.meta.pull = is_pull;
    msg.meta.head = ps__af_flag(i, b->count);
    msg.meta.recver = b->pub.sender;
    msg.meta.sender = s->my_id;
    msg.meta.body = body;
    msg.meta.body_len = sizeof(body);
    msg.meta.addr = b->addr[i];
    msg.meta.val_len = b->slot_bytes[i];
    ps__af_meta_set_tensor(&msg.meta, res ? res : &b->tensors[i]);
    ps_slice_t data = PS_SLICE_EMPTY_INIT;
    ps_status_t st = PS_OK;
    if (res != NULL && b->slot_bytes[i] != 0) {
        size_t len = (size_t)b->slot_bytes[i];
        ps_slice_t named = PS_SLICE_EMPTY_INIT;
        if (owner != NULL) {
            uintptr_t base = (uintptr_t)ps_buf_data(owner), at = (uintptr_t)res->data;
            st = at >= base ? ps_slice_of(owner, (size_t)(at - base), len, &named)
                            : PS_ERR_INVALID_ARG;
        } else {
            ps_buf_t *buf;
            st = ps_buf_wrap_mem(res->data, len, (ps_buf_mem_t)res->mem_kind, res->device, NULL,
                                 NULL, &buf);
            if (st == PS_OK) {
                st = ps_slice_of(buf, 0, len, &named);
                ps_buf_unref(buf);
            }
        }
        /* Device memory the van cannot send from goes as a host copy. */
        if (st == PS_OK)
            st = ps__app_sendable(&named, s->device_ok, &data);
        ps_slice_unref(&named);
        if (st == PS_OK)
            st = ps_msg_lend_data(&msg, &data, PS_DATA_CHAR);
    }
    if (st == PS_OK) {
        if (s->trace && is_pull) {
            msg.meta.request_trace = b->trace[i];
            msg.meta.response_trace.start = start_ns;
            msg.meta.response_trace.postsend = ps_time_now_ns();
        }
        st = ps_postoffice_send(s->po, &msg);
    }
    ps_slice_unref(&data); /* the transport took its own references */
    if (st != PS_OK)
        ps_debug(PS_LOG_APP, "af server: answer ts %d to node %d not sent: %s", b->ts[i],
                 b->pub.sender, ps_status_str(st));
    return st;
}

/* Matches results to unanswered slots of b: match[r] is result r's index
 * in the batch. */
static ps_status_t match_results(const af_batch_t *b, const ps_af_tensor_t *results,
                                 ps_buf_t *const *owners, size_t n, uint32_t *match)
{
    for (size_t r = 0; r < n; r++) {
        uint64_t bytes;
        if (ps_af_tensor_bytes(&results[r], &bytes) != PS_OK ||
            (unsigned)results[r].mem_kind >= PS_MEM_KIND_COUNT ||
            (bytes != 0 && results[r].data == NULL)) {
            ps_error(PS_LOG_APP, "af server: result %zu is not a valid tensor", r);
            return PS_ERR_INVALID_ARG;
        }
        if (owners && owners[r] &&
            ((uintptr_t)results[r].data < (uintptr_t)ps_buf_data(owners[r]) ||
             (uintptr_t)results[r].data - (uintptr_t)ps_buf_data(owners[r]) + bytes > ps_buf_length(owners[r]))) {
            ps_error(PS_LOG_APP, "af server: result %zu lies outside its owner", r);
            return PS_ERR_INVALID_ARG;
        }
        uint32_t found = UINT32_MAX;
        for (uint32_t i = b->num_push; i < b->count && found == UINT32_MAX; i++) {
            if (b->tensors[i].key != results[r].key || atomic_load(&((af_batch_t *)b)->answered[i]))
                continue;
            int taken = 0;
            for (size_t q = 0; q < r; q++)
                taken |= match[q] == i;
            if (!taken)
                found = i;
        }
        if (found == UINT32_MAX) {
            ps_error(PS_LOG_APP, "af server: result key %llu matches no unanswered pull slot",
                     (unsigned long long)results[r].key);
            return PS_ERR_INVALID_ARG;
        }
        if (bytes != b->slot_bytes[found]) {
            ps_error(PS_LOG_APP, "af server: result key %llu has %llu bytes, its slot %llu",
                     (unsigned long long)results[r].key, (unsigned long long)bytes,
                     (unsigned long long)b->slot_bytes[found]);
            return PS_ERR_INVALID_ARG;
        }
        match[r] = found;
    }
    return PS_OK;
}

ps_status_t ps_af_server_respond(ps_af_server_t *s, ps_af_batch_t *batch,
                                 const ps_af_tensor_t *results, ps_buf_t *const *owners, size_t n)
{
    if (!s || !batch || (n && !results))
        return PS_ERR_INVALID_ARG;
    uint64_t start_ns = s->trace ? ps_time_now_ns() : 0;
    af_batch_t *b = (af_batch_t *)batch;
    uint32_t num_pull = b->count - b->num_push;
    ps_status_t st = PS_OK;
    if (n == 0) {
        if (num_pull != 0) {
            ps_error(PS_LOG_APP, "af server: no results for a batch with %u pull slots", num_pull);
            return PS_ERR_INVALID_ARG;
        }
        /* Acknowledges every push; the batch ends. */
        for (uint32_t i = 0; i < b->count; i++) {
            ps_status_t one = send_answer(s, b, i, NULL, NULL, start_ns);
            if (st == PS_OK)
                st = one;
        }
        batch_free(b);
        return st;
    }
    uint32_t match_stack[64];
    uint32_t *match = n <= 64 ? match_stack : calloc(n, sizeof(*match));
    if (!match)
        return PS_ERR_NO_MEMORY;
    st = match_results(b, results, owners, n, match);
    int ended = 0;
    int matched = st == PS_OK;
    for (size_t r = 0; r < n && matched; r++) {
        /* A slot raced to by a concurrent respond is answered there. */
        if (atomic_exchange(&b->answered[match[r]], 1))
            continue;
        ps_status_t one = send_answer(s, b, match[r], &results[r], owners ? owners[r] : NULL,
                                      start_ns);
        if (one != PS_OK && st == PS_OK)
            st = one;
        if (atomic_fetch_sub(&b->left, 1) == 1)
            ended = 1;
    }
    if (match != match_stack)
        free(match);
    if (ended)
        batch_free(b);
    return st;
}

/* ---- answers that wait for their results ---- */

typedef struct {
    ps_af_server_t *server;
    af_batch_t *batch;
    size_t n;
    ps_af_tensor_t *results; /* n, copied */
    ps_buf_t **owners;       /* n, referenced (NULL entries allowed) */
} af_later_t;

static void later_free(af_later_t *l)
{
    for (size_t r = 0; r < l->n; r++)
        ps_buf_unref(l->owners[r]);
    free(l);
}

/* The answer's results never became ready: its slots are given up
 * unsent (the worker's batch times out), and the batch ends when no
 * other slot is left. */
static void later_abandon(af_later_t *l, ps_status_t why)
{
    af_batch_t *b = l->batch;
    uint32_t match_stack[64];
    uint32_t *match = l->n <= 64 ? match_stack : calloc(l->n, sizeof(*match));
    int ended = 0;
    ps_warn(PS_LOG_APP, "af server app %d: an answer to node %d's batch %llu never became ready "
            "(%s); not sent", l->server->app_id, b->pub.sender, (unsigned long long)b->pub.seq,
            ps_status_str(why));
    if (match && match_results(b, l->results, l->owners, l->n, match) == PS_OK) {
        for (size_t r = 0; r < l->n; r++) {
            if (!atomic_exchange(&b->answered[match[r]], 1) &&
                atomic_fetch_sub(&b->left, 1) == 1)
                ended = 1;
        }
    }
    if (match != match_stack)
        free(match);
    if (ended)
        batch_free(b);
}

static void later_run(void *arg, ps_status_t why)
{
    af_later_t *l = arg;
    if (why == PS_OK)
        (void)ps_af_server_respond(l->server, &l->batch->pub, l->results, l->owners, l->n);
    else
        later_abandon(l, why);
    later_free(l);
}

ps_status_t ps_af_server_respond_when(ps_af_server_t *s, ps_af_batch_t *batch,
                                      const ps_af_tensor_t *results, ps_buf_t *const *owners,
                                      size_t n, const ps_af_ready_t *ready)
{
    if (!s || !batch || (n && !results))
        return PS_ERR_INVALID_ARG;
    /* The first result in device memory names the kind and device. */
    const ps_af_tensor_t *dev = NULL;
    for (size_t r = 0; r < n && dev == NULL; r++) {
        if (results[r].mem_kind != PS_MEM_HOST)
            dev = &results[r];
    }
    if (!ready || dev == NULL || (!ready->event && !ready->stream))
        return ps_af_server_respond(s, batch, results, owners, n);
    af_batch_t *b = (af_batch_t *)batch;
    uint32_t match_stack[64];
    uint32_t *match = n <= 64 ? match_stack : calloc(n, sizeof(*match));
    if (!match)
        return PS_ERR_NO_MEMORY;
    ps_status_t st = match_results(b, results, owners, n, match);
    if (match != match_stack)
        free(match);
    if (st != PS_OK)
        return st; /* said now, not when the results are ready */
    ps_mem_event_h ev;
    bool own;
    if ((st = ps__ready_event((ps_mem_kind_t)dev->mem_kind, dev->device, ready->event,
                              ready->stream, "af answer", &ev, &own)) != PS_OK)
        return st;
    if (ev == NULL)
        return ps_af_server_respond(s, batch, results, owners, n); /* done already */
    ps__ready_queue_t *q;
    af_later_t *l = calloc(1, sizeof(*l) + n * (sizeof(*l->results) + sizeof(*l->owners)));
    st = l ? ps__ready_queue_get(&s->later, &s->reg_lock, &q) : PS_ERR_NO_MEMORY;
    if (st == PS_OK) {
        l->server = s;
        l->batch = b;
        l->n = n;
        l->results = (ps_af_tensor_t *)(l + 1);
        l->owners = (ps_buf_t **)(l->results + n);
        memcpy(l->results, results, n * sizeof(*results));
        for (size_t r = 0; r < n; r++)
            l->owners[r] = owners && owners[r] ? ps_buf_ref(owners[r]) : NULL;
        st = ps__ready_queue_add(q, ev, own, s->request_timeout_ms, later_run, l);
        if (st == PS_OK)
            return PS_OK;
        later_free(l);
        l = NULL;
    }
    free(l);
    if (own)
        (void)ps_mem_event_destroy(ev);
    return st;
}

void ps_af_server_stats(ps_af_server_t *s, ps_af_server_stats_t *stats_p)
{
    if (!s || !stats_p)
        return;
    stats_p->batches = atomic_load_explicit(&s->n_batches, memory_order_relaxed);
    stats_p->push_bytes_in_place = atomic_load_explicit(&s->n_in_place, memory_order_relaxed);
    stats_p->push_bytes = atomic_load_explicit(&s->n_push_bytes, memory_order_relaxed);
    stats_p->dropped = atomic_load_explicit(&s->n_dropped, memory_order_relaxed);
}

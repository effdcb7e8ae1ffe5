/*
 * The AF worker: one batch is one customer request per push tensor and per
 * pull slot (each message keeps its own timestamp, which transports key
 * their rendezvous on), all sharing the batch's handle as their ctx.
 *
 * Server i answers pull slot j with one response (timestamp of slot j); the
 * first answer of server i to a batch also counts that server's receipt of
 * every push of the batch (the server answers only a whole batch). A batch
 * without pull slots gets one acknowledgement per push from each server.
 *
 * The handle holds one reference for the caller and one per request still
 * outstanding (dropped by the customer's done function), plus one while a
 * response is being taken.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/af.h"
#include "ps/app/af_block.h"
#include "ps/app/host_stage.h"
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

struct ps_af_handle {
    atomic_int refs;
    atomic_int status;    /* the first failure, else PS_OK */
    atomic_int remaining; /* requests not yet ended */
    int num_servers;
    int num_push;
    int per_server; /* pull slots per server */
    int num_ts;     /* num_push + per_server */
    uint64_t seq;
    int *ts;          /* num_ts: pushes, then pull slots */
    ps_slice_t *push; /* num_push */
    ps_slice_t *dest; /* num_servers * per_server, server-major */
    uint64_t *dest_key;
    atomic_uchar *answered; /* num_ts * num_servers: message k of server i at k * ns + i */
    atomic_uchar *traced;   /* per dest */
    atomic_uchar *staged;   /* per dest: the van got a page-locked block for it (claim_dest) */
    /* per dest: the block came through a pipe (host_stage.h), which holds
     * a reference on the handle until it is gone */
    _Atomic(ps__app_pipe_t *) *pipes;
    ps_af_trace_t *req_trace;
    ps_af_trace_t *rsp_trace;
};

/* Memory registered for the worker's tensors: one buffer each, sliced for
 * every batch (a transport's registration hangs on the buffer). */
typedef struct {
    uintptr_t begin, end;
    ps_buf_t *buf;
} af_region_t;

struct ps_af_worker {
    ps_postoffice_t *po;
    ps_customer_t *customer;
    int app_id;
    int customer_id;
    int num_servers;
    int *server_ids;
    int trace;
    int busy_poll;
    int device_ok; /* the van moves device memory itself (PS_CAP_DEVICE_MEMORY) */
    int request_timeout_ms;
    atomic_uint_least64_t next_seq;
    atomic_uint_least64_t n_batches;
    atomic_uint_least64_t n_in_place;
    atomic_uint_least64_t n_copied;
    atomic_uint_least64_t n_staged;
    atomic_uint_least64_t n_piped;
    ps_mutex_t regions_lock;
    af_region_t *regions;
    size_t num_regions, cap_regions;
    /* Batches waiting for their readiness event (made with the first,
     * under regions_lock; NULL until then). */
    _Atomic(ps__ready_queue_t *) ready;
};

/* ---- handles ---- */

static void handle_free(ps_af_handle_t *h)
{
    for (int i = 0; i < h->num_push; i++)
        ps_slice_unref(&h->push[i]);
    for (int i = 0; i < h->num_servers * h->per_server; i++)
        ps_slice_unref(&h->dest[i]);
    free(h); /* one block with its arrays */
}

static void handle_unref(ps_af_handle_t *h, int n)
{
    if (atomic_fetch_sub(&h->refs, n) == n)
        handle_free(h);
}

/* A handle and all its per-batch arrays in one allocation: a batch costs
 * one malloc, not one per array. */
static ps_status_t handle_alloc(int ns, int num_push, int per_server, ps_af_handle_t **h_p)
{
    size_t nd = (size_t)ns * (size_t)per_server;
    size_t num_ts = (size_t)num_push + (size_t)per_server;
    ps_af_handle_t *h = NULL;
    size_t off = sizeof(*h);
    size_t o_ts = PS__AF_BLOCK_TAKE(&off, num_ts, h->ts);
    size_t o_push = PS__AF_BLOCK_TAKE(&off, (size_t)num_push + 1, h->push);
    size_t o_dest = PS__AF_BLOCK_TAKE(&off, nd + 1, h->dest);
    size_t o_key = PS__AF_BLOCK_TAKE(&off, nd + 1, h->dest_key);
    size_t o_answered = PS__AF_BLOCK_TAKE(&off, num_ts * (size_t)ns, h->answered);
    size_t o_traced = PS__AF_BLOCK_TAKE(&off, nd + 1, h->traced);
    size_t o_staged = PS__AF_BLOCK_TAKE(&off, nd + 1, h->staged);
    size_t o_pipes = PS__AF_BLOCK_TAKE(&off, nd + 1, h->pipes);
    size_t o_req = PS__AF_BLOCK_TAKE(&off, nd + 1, h->req_trace);
    size_t o_rsp = PS__AF_BLOCK_TAKE(&off, nd + 1, h->rsp_trace);
    char *block = calloc(1, off);
    if (!block)
        return PS_ERR_NO_MEMORY;
    h = (ps_af_handle_t *)block;
    h->num_servers = ns;
    h->num_push = num_push;
    h->per_server = per_server;
    h->num_ts = (int)num_ts;
    h->ts = (int *)(block + o_ts);
    h->push = (ps_slice_t *)(block + o_push);
    h->dest = (ps_slice_t *)(block + o_dest);
    h->dest_key = (uint64_t *)(block + o_key);
    h->answered = (atomic_uchar *)(block + o_answered);
    h->traced = (atomic_uchar *)(block + o_traced);
    h->staged = (atomic_uchar *)(block + o_staged);
    h->pipes = (_Atomic(ps__app_pipe_t *) *)(block + o_pipes);
    h->req_trace = (ps_af_trace_t *)(block + o_req);
    h->rsp_trace = (ps_af_trace_t *)(block + o_rsp);
    *h_p = h;
    return PS_OK;
}

static void handle_fail(ps_af_handle_t *h, ps_status_t st)
{
    int ok = PS_OK;
    atomic_compare_exchange_strong(&h->status, &ok, (int)st);
}

/* The customer's done function: one of the batch's requests ended. */
static void worker_done(void *arg, ps_customer_t *customer, int ts, void *ctx, ps_status_t status)
{
    (void)arg;
    (void)customer;
    (void)ts;
    ps_af_handle_t *h = ctx;
    if (status != PS_OK)
        handle_fail(h, status);
    atomic_fetch_sub(&h->remaining, 1);
    handle_unref(h, 1);
}

/* ---- responses ---- */

static ps_af_trace_t af_trace(const ps_trace_t *t)
{
    return (ps_af_trace_t){t->pre_start, t->start, t->postsend, t->postrecv, t->process};
}

typedef struct {
    int sender;
    int ts;
    uint32_t index;
    ps_af_handle_t *h;
    int server;          /* the sender's group rank (ps_postoffice_peer_rank) */
    uint64_t len;        /* claim_dest: the incoming bytes */
    int device_ok;       /* claim_dest: the van may write device memory */
    int timeout_ms;      /* claim_dest: bounds a pipe's waits for its copies */
    ps_slice_t *slice_p; /* claim_dest: where they go */
} af_claim_t;

/* Checks that message `c->index` of server `c->sender` is one of h's and
 * has the timestamp it came with. */
static int claim_matches(const ps_af_handle_t *h, const af_claim_t *c)
{
    return ps_id_to_role(c->sender) == PS_ROLE_SERVER && c->server >= 0 &&
           c->server < h->num_servers && c->index < (uint32_t)h->num_ts &&
           h->ts[c->index] == c->ts;
}

/* Under the request's claim: marks the message answered and takes a
 * reference on the handle. */
static ps_status_t claim_answer(void *ctx, void *arg)
{
    ps_af_handle_t *h = ctx;
    af_claim_t *c = arg;
    if (!claim_matches(h, c))
        return PS_ERR_NOT_FOUND;
    if (atomic_exchange(&h->answered[c->index * (uint32_t)h->num_servers + (uint32_t)c->server], 1))
        return PS_ERR_NOT_FOUND;
    atomic_fetch_add(&h->refs, 1);
    c->h = h;
    return PS_OK;
}

/* A pull slot's pipe, and the handle it holds. */
typedef struct {
    ps_af_handle_t *h;
    int slot;
} af_pipe_ref_t;

static void pipe_gone(void *arg)
{
    af_pipe_ref_t *ref = arg;
    atomic_store(&ref->h->pipes[ref->slot], NULL);
    handle_unref(ref->h, 1);
    free(ref);
}

/* A staged receipt of a large device destination through a pipe (one per
 * slot at a time). */
static ps_status_t claim_pipe(ps_af_handle_t *h, int slot, int timeout_ms, ps_slice_t *slice_p)
{
    if (atomic_load(&h->pipes[slot]) != NULL)
        return PS_ERR_UNSUPPORTED;
    af_pipe_ref_t *ref = malloc(sizeof(*ref));
    if (ref == NULL)
        return PS_ERR_NO_MEMORY;
    ref->h = h;
    ref->slot = slot;
    atomic_fetch_add(&h->refs, 1);
    ps__app_pipe_t *pipe;
    ps_status_t st = ps__app_pipe_open(&h->dest[slot], timeout_ms, pipe_gone, ref, slice_p, &pipe);
    if (st != PS_OK) {
        atomic_fetch_sub(&h->refs, 1);
        free(ref);
        return st;
    }
    atomic_store(&h->pipes[slot], pipe);
    return PS_OK;
}

/* Under the request's claim: a reference on the pull slot's destination,
 * when it still waits for exactly c->len bytes. */
static ps_status_t claim_dest(void *ctx, void *arg)
{
    ps_af_handle_t *h = ctx;
    af_claim_t *c = arg;
    if (!claim_matches(h, c) || c->index < (uint32_t)h->num_push)
        return PS_ERR_NOT_FOUND;
    uint32_t j = c->index - (uint32_t)h->num_push;
    if (atomic_load(&h->answered[c->index * (uint32_t)h->num_servers + (uint32_t)c->server]))
        return PS_ERR_NOT_FOUND;
    int slot = c->server * h->per_server + (int)j;
    const ps_slice_t *d = &h->dest[slot];
    if (d->len != c->len || c->len == 0)
        return PS_ERR_NOT_FOUND;
    if (!c->device_ok && !ps_slice_in_host_mem(d)) {
        /* Device memory the van cannot write: a page-locked staging block
         * to receive into, copied from in take_pull (as the KV worker's
         * claim_dest does); without one, the van's own buffer. */
        if (claim_pipe(h, slot, c->timeout_ms, c->slice_p) != PS_OK &&
            ps__app_receive_stage(d, c->slice_p) != PS_OK)
            return PS_ERR_NOT_FOUND;
        atomic_store(&h->staged[slot], 1);
        return PS_OK;
    }
    *c->slice_p = ps_slice_ref(d);
    return PS_OK;
}

static ps_status_t worker_recv_buffer(void *arg, ps_customer_t *customer, const ps_meta_t *meta,
                                      unsigned index, uint64_t len, ps_slice_t *slice_p)
{
    ps_af_worker_t *w = arg;
    (void)customer;
    ps__af_hdr_t hdr;
    if (index != 0 || meta->request || !meta->pull ||
        ps__af_hdr_read(meta->body, meta->body_len, &hdr) != PS_OK)
        return PS_ERR_NOT_FOUND;
    af_claim_t c = {.sender = meta->sender,
                    .server = ps_postoffice_peer_rank(w->po, meta->sender),
                    .ts = meta->timestamp,
                    .index = hdr.index,
                    .len = len,
                    .device_ok = w->device_ok,
                    .timeout_ms = w->request_timeout_ms,
                    .slice_p = slice_p};
    return ps_customer_claim_request(w->customer, meta->timestamp, claim_dest, &c);
}

/* Puts server c->server's answer to pull slot j in place. */
static ps_status_t take_pull(ps_af_worker_t *w, ps_af_handle_t *h, const af_claim_t *c,
                             const ps_msg_t *msg, uint64_t now)
{
    int slot = c->server * h->per_server + (int)(c->index - (uint32_t)h->num_push);
    const ps_slice_t *d = &h->dest[slot];
    size_t got = msg->num_data > 0 ? msg->data[0].len : 0;
    if (msg->meta.key != h->dest_key[slot] || got != d->len) {
        ps_warn_ratelimited(PS_LOG_APP,
                            "af worker: node %d answered slot %d (key %llu, %zu "
                            "bytes) with key %llu, %zu bytes",
                            msg->meta.sender, slot, (unsigned long long)h->dest_key[slot], d->len,
                            (unsigned long long)msg->meta.key, got);
        return PS_ERR_PROTOCOL;
    }
    if (got != 0) {
        if (ps_slice_ptr(&msg->data[0]) == ps_slice_ptr(d)) {
            atomic_fetch_add_explicit(&w->n_in_place, got, memory_order_relaxed);
        } else {
            /* The transport's own buffer (host memory): one copy. */
            if (!ps_slice_in_host_mem(&msg->data[0]))
                return PS_ERR_UNSUPPORTED;
            ps__app_pipe_t *pipe = atomic_load(&h->pipes[slot]);
            ps_status_t st;
            if (pipe != NULL && ps__app_pipe_owns(pipe, ps_slice_ptr(&msg->data[0]))) {
                uint64_t early = 0;
                st = ps__app_pipe_finish(pipe, got, &early);
                atomic_fetch_add_explicit(&w->n_piped, early, memory_order_relaxed);
            } else {
                st = ps__app_copy_in(d, 0, ps_slice_ptr(&msg->data[0]), got);
            }
            if (st != PS_OK)
                return st;
            atomic_fetch_add_explicit(&w->n_copied, got, memory_order_relaxed);
            if (atomic_load(&h->staged[slot]))
                atomic_fetch_add_explicit(&w->n_staged, got, memory_order_relaxed);
        }
    }
    if (w->trace) {
        h->req_trace[slot] = af_trace(&msg->meta.request_trace);
        h->rsp_trace[slot] = af_trace(&msg->meta.response_trace);
        h->rsp_trace[slot].postrecv = now;
        atomic_store_explicit(&h->traced[slot], 1, memory_order_release);
    }
    return PS_OK;
}

static void worker_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    ps_af_worker_t *w = arg;
    (void)customer;
    uint64_t now = w->trace ? ps_time_now_ns() : 0;
    const ps_meta_t *m = &msg->meta;
    ps__af_hdr_t hdr;
    if (m->request || ps__af_hdr_read(m->body, m->body_len, &hdr) != PS_OK) {
        ps_warn_ratelimited(PS_LOG_APP,
                            "af worker app %d: dropped a malformed message from "
                            "node %d",
                            w->app_id, m->sender);
        return;
    }
    af_claim_t c = {.sender = m->sender,
                    .server = ps_postoffice_peer_rank(w->po, m->sender),
                    .ts = m->timestamp,
                    .index = hdr.index};
    if (ps_customer_claim_request(w->customer, m->timestamp, claim_answer, &c) != PS_OK) {
        ps_debug(PS_LOG_APP, "af worker app %d: ignored an answer ts %d from node %d", w->app_id,
                 m->timestamp, m->sender);
        return;
    }
    ps_af_handle_t *h = c.h;
    int is_pull = c.index >= (uint32_t)h->num_push;
    if (is_pull != (m->pull && !m->push)) {
        handle_fail(h, PS_ERR_PROTOCOL);
        ps_customer_fail_request(w->customer, m->timestamp, PS_ERR_PROTOCOL);
        handle_unref(h, 1);
        return;
    }
    if (is_pull) {
        ps_status_t st = take_pull(w, h, &c, msg, now);
        if (st != PS_OK) {
            handle_fail(h, st);
            ps_customer_fail_request(w->customer, m->timestamp, st);
            handle_unref(h, 1);
            return;
        }
        /* The server answers a whole batch: its pushes all arrived. */
        uint32_t ns = (uint32_t)h->num_servers;
        for (int t = 0; t < h->num_push; t++) {
            if (!atomic_exchange(&h->answered[(uint32_t)t * ns + (uint32_t)c.server], 1))
                ps_customer_add_response(w->customer, h->ts[t], 1);
        }
    }
    ps_customer_add_response(w->customer, m->timestamp, 1);
    handle_unref(h, 1);
}

/* ---- lifecycle ---- */

ps_status_t ps_af_worker_create(ps_postoffice_t *po, int app_id, int customer_id,
                                ps_af_worker_t **worker_p)
{
    ps_af_worker_t *w = (po && worker_p) ? calloc(1, sizeof(*w)) : NULL;
    if (!w)
        return po && worker_p ? PS_ERR_NO_MEMORY : PS_ERR_INVALID_ARG;
    /* Every server (of this worker's instance), in rank order: each gets
     * every push of a batch. */
    int ns = ps_postoffice_num_servers(po);
    int *ids = ns > 0 ? calloc((size_t)ns, sizeof(int)) : NULL;
    if (!ids) {
        if (ns <= 0)
            ps_error(PS_LOG_APP, "af worker: the job has no servers");
        free(w);
        return ns <= 0 ? PS_ERR_CONFIG : PS_ERR_NO_MEMORY;
    }
    for (int i = 0; i < ns; i++)
        ids[i] = ps_postoffice_peer_id(po, PS_ROLE_SERVER, i);
    *w = (ps_af_worker_t){
        .po = po,
        .app_id = app_id,
        .customer_id = customer_id,
        .num_servers = ns,
        .server_ids = ids,
        .trace = ps_config_bool_or(PS_CFG_STEPMESH_ENABLE_TRACE, 0),
        .busy_poll = ps_config_bool_or(PS_CFG_STEPMESH_BUSY_POLL_ENABLE, 1),
        .device_ok = (ps_postoffice_capabilities(po) & PS_CAP_DEVICE_MEMORY) != 0,
        .request_timeout_ms = ps_postoffice_request_timeout_ms(po),
    };
    ps_status_t st = ps_mutex_init(&w->regions_lock);
    if (st == PS_OK) {
        st = ps_customer_create(po, app_id, customer_id, worker_recv, w, &w->customer);
        if (st != PS_OK)
            ps_mutex_destroy(&w->regions_lock);
    }
    if (st != PS_OK) {
        free(w->server_ids);
        free(w);
        return st;
    }
    ps_customer_set_done_func(w->customer, worker_done, w);
    if (ps_postoffice_capabilities(po) & PS_CAP_RECV_INTO_DEST) {
        ps_customer_set_recv_buffer_segments(w->customer, 1u << 0);
        ps_customer_set_recv_buffer_func(w->customer, worker_recv_buffer, w);
    }
    *worker_p = w;
    return PS_OK;
}

void ps_af_worker_destroy(ps_af_worker_t *w)
{
    if (!w)
        return;
    /* Batches still waiting for their data fail with PS_ERR_SHUTDOWN. */
    ps__ready_queue_destroy(atomic_exchange(&w->ready, NULL));
    ps_customer_destroy(w->customer); /* fails what is outstanding */
    for (size_t i = 0; i < w->num_regions; i++)
        ps_buf_unref(w->regions[i].buf);
    free(w->regions);
    ps_mutex_destroy(&w->regions_lock);
    free(w->server_ids);
    free(w);
}

/* ---- batches ---- */

ps_status_t ps_af_worker_register_tensor(ps_af_worker_t *w, const ps_af_tensor_t *t)
{
    uint64_t bytes;
    if (!w || !t || ps_af_tensor_bytes(t, &bytes) != PS_OK || bytes == 0 || !t->data ||
        (unsigned)t->mem_kind >= PS_MEM_KIND_COUNT)
        return PS_ERR_INVALID_ARG;
    uintptr_t begin = (uintptr_t)t->data, end = begin + (uintptr_t)bytes;
    ps_mutex_lock(&w->regions_lock);
    ps_status_t st = PS_OK;
    for (size_t i = 0; i < w->num_regions && st == PS_OK; i++) {
        if (begin < w->regions[i].end && w->regions[i].begin < end)
            st = PS_ERR_EXISTS;
    }
    if (st == PS_OK && w->num_regions == w->cap_regions) {
        size_t cap = w->cap_regions ? 2 * w->cap_regions : 8;
        af_region_t *grown = realloc(w->regions, cap * sizeof(*grown));
        if (grown) {
            w->regions = grown;
            w->cap_regions = cap;
        } else {
            st = PS_ERR_NO_MEMORY;
        }
    }
    ps_buf_t *buf = NULL;
    if (st == PS_OK)
        st = ps_buf_wrap_mem(t->data, (size_t)bytes, (ps_buf_mem_t)t->mem_kind, t->device, NULL,
                             NULL, &buf);
    if (st == PS_OK)
        w->regions[w->num_regions++] = (af_region_t){begin, end, buf};
    ps_mutex_unlock(&w->regions_lock);
    return st;
}

/* A slice of the registered region holding [data, data + bytes), if any. */
static int region_slice(ps_af_worker_t *w, const void *data, uint64_t bytes, ps_slice_t *slice_p)
{
    uintptr_t begin = (uintptr_t)data;
    int found = 0;
    ps_mutex_lock(&w->regions_lock);
    for (size_t i = 0; i < w->num_regions && !found; i++) {
        const af_region_t *r = &w->regions[i];
        if (begin >= r->begin && begin < r->end && bytes <= r->end - begin)
            found = ps_slice_of(r->buf, begin - r->begin, (size_t)bytes, slice_p) == PS_OK;
    }
    ps_mutex_unlock(&w->regions_lock);
    return found;
}

static ps_status_t wrap_tensor(ps_af_worker_t *w, const ps_af_tensor_t *t, ps_slice_t *slice_p)
{
    uint64_t bytes;
    ps_status_t st = ps_af_tensor_bytes(t, &bytes);
    if (st != PS_OK)
        return st;
    if ((unsigned)t->mem_kind >= PS_MEM_KIND_COUNT || (bytes != 0 && t->data == NULL))
        return PS_ERR_INVALID_ARG;
    if (bytes == 0) {
        *slice_p = (ps_slice_t)PS_SLICE_EMPTY_INIT;
        return PS_OK;
    }
    if (region_slice(w, t->data, bytes, slice_p))
        return PS_OK;
    ps_buf_t *buf;
    st = ps_buf_wrap_mem(t->data, (size_t)bytes, (ps_buf_mem_t)t->mem_kind, t->device, NULL, NULL,
                         &buf);
    if (st != PS_OK)
        return st;
    st = ps_slice_of(buf, 0, (size_t)bytes, slice_p);
    ps_buf_unref(buf);
    return st;
}

/* The push tensors as the van can send them: their memory, or, in device
 * memory a van cannot send from, a host copy (one copy), made just before
 * the sends, once the data is ready. */
static ps_status_t stage_pushes(ps_af_worker_t *w, ps_af_handle_t *h)
{
    for (int i = 0; i < h->num_push; i++) {
        ps_slice_t sendable;
        ps_status_t st = ps__app_sendable(&h->push[i], w->device_ok, &sendable);
        if (st != PS_OK)
            return st;
        ps_slice_unref(&h->push[i]);
        h->push[i] = sendable;
    }
    return PS_OK;
}

static ps_status_t send_one(ps_af_worker_t *w, ps_af_handle_t *h, int server, uint32_t index,
                            const ps_af_tensor_t *t, uint64_t start_ns)
{
    uint32_t count = (uint32_t)h->num_ts;
    int is_push = index < (uint32_t)h->num_push;
    uint8_t body[PS__AF_HDR_LEN];
    ps__af_hdr_t hdr = {
        .index = index, .count = count, .num_push = (uint32_t)h->num_push, .seq = h->seq};
    ps__af_hdr_write(body, &hdr);

    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.app_id = w->app_id;
    msg.meta.customer_id = w->customer_id;
    msg.meta.timestamp = h->ts[index];
    msg.meta.request = true;
    msg.meta.push = is_push;
    msg.meta.pull = !is_push;
    msg.meta.head = ps__af_flag(index, count);
    msg.meta.recver = w->server_ids[server];
    msg.meta.sender = ps_postoffice_my_id(w->po);
    msg.meta.body = body;
    msg.meta.body_len = sizeof(body);
    ps__af_meta_set_tensor(&msg.meta, t);
    const ps_slice_t *named;
    if (is_push) {
        named = &h->push[index];
    } else {
        named = &h->dest[server * h->per_server + (int)(index - (uint32_t)h->num_push)];
        if (w->trace) {
            msg.meta.request_trace.start = start_ns;
            msg.meta.request_trace.postsend = ps_time_now_ns();
        }
    }
    msg.meta.addr = (uint64_t)(uintptr_t)ps_slice_ptr(named);
    msg.meta.val_len = named->len;
    if (named->buf != NULL && ps_slice_mem_kind(named) != PS_BUF_MEM_HOST) {
        msg.meta.src_dev_type = is_push ? PS_DEV_GPU : PS_DEV_CPU;
        msg.meta.dst_dev_type = is_push ? PS_DEV_CPU : PS_DEV_GPU;
    }
    ps_status_t st;
    if (is_push && named->len > 0 && (st = ps_msg_lend_data(&msg, named, PS_DATA_CHAR)) != PS_OK)
        return st;
    return ps_postoffice_send(w->po, &msg);
}

/* Sends a prepared batch: stages its pushes, takes its sequence number
 * (so a batch that never goes leaves no gap), sends every message; a
 * failure is the batch's result (the servers drop what they got of it). */
static void send_batch(ps_af_worker_t *w, ps_af_handle_t *h, const ps_af_tensor_t *push,
                       size_t num_push, const ps_af_tensor_t *pull, uint64_t start_ns)
{
    int ns = h->num_servers;
    size_t per_server = (size_t)h->per_server;
    ps_status_t st = stage_pushes(w, h);
    h->seq = atomic_fetch_add(&w->next_seq, 1);
    for (int i = 0; i < ns && st == PS_OK; i++) {
        for (uint32_t k = 0; k < (uint32_t)h->num_ts && st == PS_OK; k++) {
            const ps_af_tensor_t *t = k < num_push ? &push[k]
                                                   : &pull[(size_t)i * per_server + (k - num_push)];
            st = send_one(w, h, i, k, t, start_ns);
        }
    }
    if (st != PS_OK) {
        handle_fail(h, st);
        for (int k = 0; k < h->num_ts; k++)
            ps_customer_fail_request(w->customer, h->ts[k], st);
    }
}

/* A batch whose push tensors are not ready yet: its tensors (copied: the
 * caller's arrays are read during the call only) and a reference on it. */
typedef struct {
    ps_af_worker_t *w;
    ps_af_handle_t *h;
    size_t num_push;
    uint64_t start_ns;
    ps_af_tensor_t tensors[]; /* push, then pull */
} af_deferred_t;

/* On the ready queue's thread: the data is ready (why PS_OK), or the batch
 * ends unsent. A batch that ended meanwhile (worker destroyed) is not
 * sent. */
static void deferred_run(void *arg, ps_status_t why)
{
    af_deferred_t *d = arg;
    if (why != PS_OK) {
        ps_warn(PS_LOG_APP, "af batch: not sent, its data never became ready: %s",
                ps_status_str(why));
        handle_fail(d->h, why);
        for (int k = 0; k < d->h->num_ts; k++)
            ps_customer_fail_request(d->w->customer, d->h->ts[k], why);
    } else if (atomic_load(&d->h->remaining) == d->h->num_ts) {
        send_batch(d->w, d->h, d->tensors, d->num_push, d->tensors + d->num_push, d->start_ns);
    }
    handle_unref(d->h, 1);
    free(d);
}

/* Queues the batch's sends behind `ready` (the queue owns it when
 * `own`); a failure fails the batch, which the caller then waits for. */
static ps_status_t defer_batch(ps_af_worker_t *w, ps_af_handle_t *h, const ps_af_tensor_t *push,
                               size_t num_push, const ps_af_tensor_t *pull, size_t num_pull,
                               uint64_t start_ns, ps_mem_event_h ready, bool own)
{
    af_deferred_t *d = malloc(sizeof(*d) + (num_push + num_pull) * sizeof(d->tensors[0]));
    ps__ready_queue_t *q = NULL;
    ps_status_t st = d ? ps__ready_queue_get(&w->ready, &w->regions_lock, &q) : PS_ERR_NO_MEMORY;
    if (st == PS_OK) {
        *d = (af_deferred_t){.w = w, .h = h, .num_push = num_push, .start_ns = start_ns};
        if (num_push)
            memcpy(d->tensors, push, num_push * sizeof(*push));
        if (num_pull)
            memcpy(d->tensors + num_push, pull, num_pull * sizeof(*pull));
        atomic_fetch_add(&h->refs, 1);
        st = ps__ready_queue_add(q, ready, own, w->request_timeout_ms, deferred_run, d);
        if (st != PS_OK)
            atomic_fetch_sub(&h->refs, 1);
    }
    if (st != PS_OK) {
        free(d);
        if (own)
            (void)ps_mem_event_destroy(ready);
        ps_error(PS_LOG_APP, "af batch: cannot wait for its data: %s", ps_status_str(st));
        handle_fail(h, st);
        for (int k = 0; k < h->num_ts; k++)
            ps_customer_fail_request(w->customer, h->ts[k], st);
    }
    return PS_OK;
}

/* The event a batch waits for (NULL: none, or complete already): from the
 * first push tensor in device memory, as ps_kv_ready_t for KV pushes. */
static ps_status_t batch_ready_event(const ps_af_tensor_t *push, size_t num_push,
                                     const ps_af_ready_t *ready, ps_mem_event_h *event_p,
                                     bool *own_p)
{
    *event_p = NULL;
    *own_p = false;
    if (ready == NULL || (ready->event == NULL && ready->stream == NULL))
        return PS_OK;
    for (size_t i = 0; i < num_push; i++) {
        if (push[i].mem_kind != PS_MEM_HOST)
            return ps__ready_event(push[i].mem_kind, push[i].device, ready->event, ready->stream,
                                   "af batch", event_p, own_p);
    }
    return PS_OK; /* host tensors are ready when the call is made */
}

ps_status_t ps_af_worker_batch_push_pull(ps_af_worker_t *w, const ps_af_tensor_t *push,
                                         size_t num_push, const ps_af_tensor_t *pull,
                                         size_t num_pull, ps_af_handle_t **handle_p)
{
    return ps_af_worker_batch_push_pull_when(w, push, num_push, pull, num_pull, NULL, handle_p);
}

ps_status_t ps_af_worker_batch_push_pull_when(ps_af_worker_t *w, const ps_af_tensor_t *push,
                                              size_t num_push, const ps_af_tensor_t *pull,
                                              size_t num_pull, const ps_af_ready_t *ready_in,
                                              ps_af_handle_t **handle_p)
{
    if (!w || !handle_p || (num_push && !push) || (num_pull && !pull) || num_push + num_pull == 0)
        return PS_ERR_INVALID_ARG;
    uint64_t start_ns = w->trace ? ps_time_now_ns() : 0;
    int ns = w->num_servers;
    if (num_pull % (size_t)ns != 0) {
        ps_error(PS_LOG_APP, "af worker: %zu pull tensors for %d servers", num_pull, ns);
        return PS_ERR_INVALID_ARG;
    }
    size_t per_server = num_pull / (size_t)ns;
    if (num_push + per_server > PS__AF_MAX_BATCH_MSGS) {
        ps_error(PS_LOG_APP, "af worker: a batch of %zu messages per server (at most %d)",
                 num_push + per_server, PS__AF_MAX_BATCH_MSGS);
        return PS_ERR_TOO_LARGE;
    }
    ps_mem_event_h ready = NULL;
    bool own_ready = false;
    ps_status_t st = batch_ready_event(push, num_push, ready_in, &ready, &own_ready);
    if (st != PS_OK)
        return st;
    ps_af_handle_t *h;
    st = handle_alloc(ns, (int)num_push, (int)per_server, &h);
    if (st != PS_OK)
        goto fail_event;
    atomic_init(&h->refs, 1);
    atomic_init(&h->status, PS_OK);
    for (size_t i = 0; i < num_push && st == PS_OK; i++)
        st = wrap_tensor(w, &push[i], &h->push[i]);
    for (size_t i = 0; i < num_pull && st == PS_OK; i++) {
        st = wrap_tensor(w, &pull[i], &h->dest[i]);
        h->dest_key[i] = pull[i].key;
    }
    if (st != PS_OK) {
        ps_error(PS_LOG_APP, "af worker: a tensor of the batch is not valid: %s",
                 ps_status_str(st));
        handle_free(h);
        goto fail_event;
    }

    /* Every request exists before any message leaves: an answer always
     * finds its request. */
    int made = 0;
    atomic_init(&h->remaining, h->num_ts);
    for (; made < h->num_ts; made++) {
        atomic_fetch_add(&h->refs, 1);
        st = ps_customer_new_request_ctx(w->customer, ns, w->server_ids, ns, h, &h->ts[made]);
        if (st != PS_OK) {
            atomic_fetch_sub(&h->refs, 1);
            break;
        }
    }
    if (st != PS_OK) {
        atomic_fetch_sub(&h->remaining, h->num_ts - made);
        for (int k = 0; k < made; k++)
            ps_customer_fail_request(w->customer, h->ts[k], st);
        handle_unref(h, 1);
        goto fail_event;
    }
    atomic_fetch_add_explicit(&w->n_batches, 1, memory_order_relaxed);
    *handle_p = h;
    if (ready != NULL)
        return defer_batch(w, h, push, num_push, pull, num_pull, start_ns, ready, own_ready);
    send_batch(w, h, push, num_push, pull, start_ns);
    return PS_OK;

fail_event:
    if (own_ready)
        (void)ps_mem_event_destroy(ready);
    return st;
}

ps_status_t ps_af_worker_wait(ps_af_worker_t *w, ps_af_handle_t *h, int timeout_ms)
{
    if (!w || !h)
        return PS_ERR_INVALID_ARG;
    ps_deadline_t dl = ps_deadline_from_ms(timeout_ms < 0 ? w->request_timeout_ms : timeout_ms);
    if (w->busy_poll && !ps_customer_waits_drive(w->customer)) {
        /* No loop to drive: spin on the batch's count; every few hundred turns let another
         * thread of this core run (the van's, on a small machine). */
        unsigned spins = 0;
        while (atomic_load(&h->remaining) > 0) {
            ps_cpu_relax();
            if ((++spins & 255) == 0) {
                if (ps_deadline_expired(dl))
                    return PS_ERR_TIMED_OUT;
                sched_yield();
            }
        }
        return (ps_status_t)atomic_load(&h->status);
    }
    /* Sleeping waits, or, where waits drive the van, busy ones that run its
     * loop on this thread: each answer is handled here, with no other
     * thread to be scheduled first. */
    for (int k = 0; k < h->num_ts; k++) {
        int left = ps_deadline_remaining_ms(dl);
        ps_status_t st = ps_customer_wait(w->customer, h->ts[k], left > 0 ? left : 0);
        if (st != PS_OK)
            return st;
    }
    return (ps_status_t)atomic_load(&h->status);
}

size_t ps_af_handle_num_slots(const ps_af_handle_t *h)
{
    return h ? (size_t)h->num_servers * (size_t)h->per_server : 0;
}

ps_status_t ps_af_worker_fetch_trace(ps_af_worker_t *w, const ps_af_handle_t *h, size_t slot,
                                     ps_af_trace_t *request_p, ps_af_trace_t *response_p)
{
    if (!w || !h || slot >= ps_af_handle_num_slots(h))
        return PS_ERR_INVALID_ARG;
    ps_af_handle_t *mh = (ps_af_handle_t *)h;
    if (!w->trace || !atomic_load_explicit(&mh->traced[slot], memory_order_acquire))
        return PS_ERR_NOT_FOUND;
    if (request_p)
        *request_p = h->req_trace[slot];
    if (response_p)
        *response_p = h->rsp_trace[slot];
    return PS_OK;
}

void ps_af_handle_release(ps_af_worker_t *w, ps_af_handle_t *h)
{
    (void)w;
    if (h)
        handle_unref(h, 1);
}

void ps_af_worker_stats(ps_af_worker_t *w, ps_af_worker_stats_t *stats_p)
{
    if (!w || !stats_p)
        return;
    stats_p->batches = atomic_load_explicit(&w->n_batches, memory_order_relaxed);
    stats_p->pull_bytes_in_place = atomic_load_explicit(&w->n_in_place, memory_order_relaxed);
    stats_p->pull_bytes_copied = atomic_load_explicit(&w->n_copied, memory_order_relaxed);
    stats_p->pull_bytes_staged = atomic_load_explicit(&w->n_staged, memory_order_relaxed);
    stats_p->pull_bytes_piped = atomic_load_explicit(&w->n_piped, memory_order_relaxed);
}

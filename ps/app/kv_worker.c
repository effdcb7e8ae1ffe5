/*
 * The KV worker: slices each request across the servers, sends one message
 * per server that owns any of its keys, and completes the request when
 * every such server has answered.
 *
 * Threads: application threads issue requests and wait; the van's progress
 * thread delivers responses (and, for pulls, asks where their values should
 * land). The customer tracks each request (count of responses, peers, how
 * it ended; its ctx is the kv_req_t) and calls worker_done exactly once per
 * request. A response finds its request through the customer's claim,
 * which takes a reference while the request cannot complete, so a request
 * completed by another thread (a peer declared dead, destroy) is never
 * freed under a response: no table of the worker's own, no lock of its own
 * on the way of a request or a response.
 *
 * The completion callback runs once: before the last response is counted
 * on success (so ps_kv_wait returns after it, as upstream), or from
 * worker_done when the request failed.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/host_stage.h"
#include "ps/app/kv.h"
#include "ps/app/kv_error.h"
#include "ps/app/kv_ipc.h"
#include "ps/app/kv_lane.h"
#include "ps/app/kv_regroup.h"
#include "ps/app/kv_slicer.h"
#include "ps/app/ready_queue.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/mpool.h"
#include "ps/base/stage_trace.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/gpu/mem.h"
#include "ps/net/caps.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"

#define KV_UNCLAIMED 32

/* One server's share of a request. */
typedef struct {
    int server_id;    /* 0: this server owns none of the keys */
    int responded;
    ps_slice_t keys;  /* its keys, to check the response against */
    ps_slice_t lens;  /* expected per-key lengths of a pull (empty: uniform) */
    ps_slice_t dest;  /* pull: where its values go */
    /* A pull the server sizes (ps_kv_pull_any): its answer, kept. */
    ps_slice_t got_vals;
    ps_slice_t got_lens;
    /* Receive in place: the van writes into `dest` through a proxy (a
     * buffer over the same memory whose release says the van let go).
     * `lent` keeps dest's buffer (and its registrations) meanwhile. */
    struct kv_req *req;
    atomic_int lending;
    ps_slice_t lent;
    /* The pull named `dest` to its server as an IPC handle (kv_ipc.h):
     * ipc_sent for the request's life; ipc_held, a holder of the request,
     * until a response of that server came (the server may write into
     * dest until it answers, even after the request failed). */
    int ipc_sent;
    atomic_int ipc_held;
    /* A push that went as an IPC handle: its values, which the server
     * reads after the send, referenced until the request is released (a
     * caller's temporary must not be freed under the server's copy). */
    ps_slice_t ipc_src;
    /* dest is device memory the van cannot write: the van was given a
     * page-locked staging block to receive into instead (claim_dest),
     * through `pipe` when it is large (host_stage.h): copies into dest
     * then start as the block fills. The pipe holds the request (a
     * holder and a reference) and the worker until it is gone. */
    atomic_int staged;
    _Atomic(ps__app_pipe_t *) pipe;
} kv_part_t;

typedef struct kv_req {
    atomic_int refs;
    /* Holders of a destination outside the request: responses copying
     * into it, vans receiving into it. None once the request completed
     * and this is 0: its destinations are nobody's then (ps_kv_cancel). */
    atomic_int holders;
    struct ps_kv_worker *w;
    atomic_int fired;     /* the completion callback ran */
    atomic_int ended;     /* the customer ended it (worker_done ran) */
    int pull;
    int any;              /* the servers size the values (ps_kv_pull_any) */
    ps_data_type_t type;  /* a pull's: what its destination holds */
    /* A pull regrouped for a user slicer (kv_regroup.h): its values arrive
     * in `scratch` and are copied into `user_dest` at completion. */
    size_t *scatter;
    size_t scatter_keys;
    ps_slice_t scratch;
    ps_slice_t user_dest;
    size_t elem_size;
    size_t uniform_bytes; /* per-key value bytes of a pull without lens */
    atomic_int remaining; /* responses still expected */
    ps_kv_done_func_t done;
    void *done_arg;
    int num_parts;
    kv_part_t parts[];
} kv_req_t;

struct ps_kv_worker {
    ps_postoffice_t *po;
    ps_customer_t *customer;
    int app_id;
    int customer_id;
    int num_servers;
    int device_ok;          /* the van moves device memory (PS_CAP_DEVICE_MEMORY) */
    int send_as_written;    /* it sends a segment as it is written (PS_CAP_SEND_AS_WRITTEN) */
    /* Device values go as IPC handles to the servers the van reaches
     * through shared memory (PS_DEVICE_IPC; the shm and ipc vans). */
    int device_ipc;
    int request_timeout_ms; /* bounds destroy's wait; po may be gone by then */
    /* The worker's own reference plus one per destination lent to a van
     * (a live proxy): the last one frees the worker, so destroy need not
     * wait for a van that keeps a dead peer's receive until it closes. */
    atomic_int users;
    int *server_ids;
    ps_kv_range_t *ranges;
    ps_kv_slicer_func_t slicer; /* NULL: by the servers' key ranges */
    void *slicer_arg;

    atomic_uint_least64_t n_requests;
    atomic_uint_least64_t n_messages;
    atomic_uint_least64_t n_in_place;
    atomic_uint_least64_t n_copied;
    atomic_uint_least64_t n_small;
    atomic_uint_least64_t n_lane;
    atomic_uint_least64_t n_staged;
    atomic_uint_least64_t n_ipc;
    atomic_uint_least64_t n_pull_ipc;
    atomic_uint_least64_t n_pull_staged;
    atomic_uint_least64_t n_pull_piped;
    atomic_uint_least64_t n_push_piped;

    /* Requests (with their num_servers parts) come from here: a pool get
     * and put cost a fifth of a calloc and free, on every request. */
    ps_mpool_t reqs;
    /* Pushes waiting for their readiness event (made on the first such
     * push, under `lock`; NULL until then). */
    _Atomic(ps__ready_queue_t *) ready;
    /* One freed request kept aside (NULL when none), taken and given back
     * with one atomic exchange: one request at a time (a latency loop)
     * then never takes the pool's lock. */
    _Atomic(kv_req_t *) spare;
    /* A request whose last reference a response dropped, released by the
     * next issue() once its message is out, or by destroy: a latency
     * loop then does that clean-up (three slice references, the pool)
     * while its next request travels, not between a response and the
     * waiter it lets go. */
    _Atomic(kv_req_t *) retired;

    /* Requests issued and not yet ended (worker_done), for destroy, which
     * waits on `idle` (with `lock`) while idle_waiters > 0. */
    atomic_size_t outstanding;
    atomic_int idle_waiters;
    ps_mutex_t lock;
    ps_cond_t idle; /* also: a request's last holder let go */

    /* Under `lock`: failed pulls whose destination a holder still had
     * when they failed, each referenced, for ps_kv_cancel to find by ts
     * (their tracker forgot them). Entries whose holders are gone are
     * pruned as new ones come. */
    struct kv_draining {
        int ts;
        kv_req_t *r;
    } *draining;
    size_t num_draining, draining_cap;
    /* Under `lock`: the last responses no request took and `draining` did
     * not know (ts, sender), for a failed pull whose draining_add comes
     * just after its server's answer: that server lets go of the
     * destination all the same (late_response). */
    struct kv_unclaimed {
        int ts, sender;
    } unclaimed[KV_UNCLAIMED];
    unsigned next_unclaimed;
    /* Under `lock`: results of server-sized pulls not taken yet. */
    struct kv_result {
        int ts;
        ps_slice_t vals, lens;
    } *results;
    size_t num_results, results_cap;
};

size_t ps_kv_pairs_num_keys(const ps_kv_pairs_t *kvs)
{
    return kvs ? kvs->keys.len / sizeof(ps_key_t) : 0;
}

/* ---- requests ---- */

static size_t req_size(int num_servers)
{
    return sizeof(kv_req_t) + (size_t)num_servers * sizeof(kv_part_t);
}

static ps_status_t req_get(ps_kv_worker_t *w, kv_req_t **r_p)
{
    kv_req_t *r = atomic_exchange_explicit(&w->spare, NULL, memory_order_acquire);
    if (r != NULL) {
        *r_p = r;
        return PS_OK;
    }
    return ps_mpool_get(&w->reqs, (void **)r_p);
}

static void req_put(ps_kv_worker_t *w, kv_req_t *r)
{
    kv_req_t *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&w->spare, &none, r, memory_order_release,
                                                 memory_order_relaxed))
        ps_mpool_put(&w->reqs, r);
}

static void req_release(ps_kv_worker_t *w, kv_req_t *r)
{
    for (int i = 0; i < r->num_parts; i++) {
        kv_part_t *p = &r->parts[i];
        if (!p->server_id)
            continue; /* never given slices: empty */
        ps_slice_unref(&p->keys);
        ps_slice_unref(&p->lens);
        ps_slice_unref(&p->dest);
        ps_slice_unref(&p->got_vals);
        ps_slice_unref(&p->got_lens);
        ps_slice_unref(&p->ipc_src);
    }
    free(r->scatter);
    ps_slice_unref(&r->scratch);
    ps_slice_unref(&r->user_dest);
    req_put(w, r);
}

static void req_unref(ps_kv_worker_t *w, kv_req_t *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        req_release(w, r);
}

/* Drops n references; the last one retires r (see ps_kv_worker::retired). */
static void req_unref_later(ps_kv_worker_t *w, kv_req_t *r, int n)
{
    if (atomic_fetch_sub(&r->refs, n) != n)
        return;
    kv_req_t *older = atomic_exchange_explicit(&w->retired, r, memory_order_acq_rel);
    if (older != NULL)
        req_release(w, older);
}

static void release_retired(ps_kv_worker_t *w)
{
    kv_req_t *r = atomic_exchange_explicit(&w->retired, NULL, memory_order_acq_rel);
    if (r != NULL)
        req_release(w, r);
}

static void fire_callback(kv_req_t *r, int ts, ps_status_t st)
{
    if (r->done && atomic_exchange(&r->fired, 1) == 0)
        r->done(r->done_arg, ts, st);
}

/* A request ended: wakes destroy when it waits for the last one. Both
 * sides write their counter, then read the other's (sequentially
 * consistent), so destroy either sees no request left or is woken. */
static void outstanding_drop(ps_kv_worker_t *w)
{
    if (atomic_fetch_sub(&w->outstanding, 1) == 1 && atomic_load(&w->idle_waiters) > 0) {
        ps_mutex_lock(&w->lock);
        ps_cond_broadcast(&w->idle);
        ps_mutex_unlock(&w->lock);
    }
}

/* A holder of one of r's destinations let go: wakes the cancels (and
 * destroy) that wait on `idle` for it (see outstanding_drop). */
static void holder_drop(ps_kv_worker_t *w, kv_req_t *r)
{
    if (atomic_fetch_sub(&r->holders, 1) == 1 && atomic_load(&w->idle_waiters) > 0) {
        ps_mutex_lock(&w->lock);
        ps_cond_broadcast(&w->idle);
        ps_mutex_unlock(&w->lock);
    }
}

/* Drops the entries of requests nobody holds any more (lock held); the
 * references go to *free_p (a caller-provided list, released after the
 * lock) — at most `cap` of them. */
static size_t draining_prune(ps_kv_worker_t *w, kv_req_t **free_p, size_t cap)
{
    size_t n = 0, j = 0;
    for (size_t i = 0; i < w->num_draining; i++) {
        if (n < cap && atomic_load(&w->draining[i].r->holders) == 0)
            free_p[n++] = w->draining[i].r;
        else
            w->draining[j++] = w->draining[i];
    }
    w->num_draining = j;
    return n;
}

#define KV_PRUNE_BATCH 8

static void part_answered_late(ps_kv_worker_t *w, kv_req_t *r, int sender);

/* A failed pull whose destination is still held: kept for ps_kv_cancel. */
static void draining_add(ps_kv_worker_t *w, int ts, kv_req_t *r)
{
    kv_req_t *done[KV_PRUNE_BATCH];
    atomic_fetch_add(&r->refs, 1);
    ps_mutex_lock(&w->lock);
    size_t n = draining_prune(w, done, KV_PRUNE_BATCH);
    if (w->num_draining == w->draining_cap) {
        size_t cap = w->draining_cap ? 2 * w->draining_cap : 8;
        struct kv_draining *d = realloc(w->draining, cap * sizeof(*d));
        if (d != NULL) {
            w->draining = d;
            w->draining_cap = cap;
        }
    }
    int kept = w->num_draining < w->draining_cap;
    if (kept)
        w->draining[w->num_draining++] = (struct kv_draining){ts, r};
    /* Servers that answered between the failure and now. */
    int answered[KV_UNCLAIMED];
    int num_answered = 0;
    for (int i = 0; i < KV_UNCLAIMED; i++) {
        if (w->unclaimed[i].sender != 0 && w->unclaimed[i].ts == ts) {
            answered[num_answered++] = w->unclaimed[i].sender;
            w->unclaimed[i].sender = 0;
        }
    }
    ps_mutex_unlock(&w->lock);
    for (int i = 0; i < num_answered; i++)
        part_answered_late(w, r, answered[i]);
    for (size_t i = 0; i < n; i++)
        req_unref(w, done[i]);
    if (!kept) {
        ps_warn(PS_LOG_APP, "kv worker app %d: out of memory: ps_kv_cancel cannot see ts %d",
                w->app_id, ts);
        req_unref(w, r);
    }
}

/* The customer's done hook: the request ended (failed, or all responses
 * counted other than by take_response). */
static void worker_done(void *arg, ps_customer_t *customer, int ts, void *ctx,
                        ps_status_t status)
{
    ps_kv_worker_t *w = arg;
    kv_req_t *r = ctx;
    (void)customer;
    /* No holder comes after completion (claims fail): one still there may
     * be writing into the caller's buffer. */
    if (status != PS_OK && r->pull && atomic_load(&r->holders) > 0)
        draining_add(w, ts, r);
    atomic_store(&r->ended, 1);
    fire_callback(r, ts, status);
    req_unref(w, r); /* the tracker's reference */
    outstanding_drop(w);
}

/* ---- responses ---- */

static int32_t load_i32(const void *base, size_t i)
{
    int32_t v;
    memcpy(&v, (const char *)base + i * sizeof(v), sizeof(v));
    return v;
}

/* A response as it came, a message or a lane payload. */
typedef struct {
    int sender;
    int ts;
    const void *keys;
    size_t keys_len;
    const void *vals;
    size_t vals_len;
    ps_data_type_t type; /* what the server says the values are */
    const ps_slice_t *vals_slice; /* the message's, NULL on the lane */
    const void *lens;
    size_t lens_len;
    int lane; /* the values came inline in a lane message: copied, by design */
    int written; /* the server wrote vals_len bytes into the destination (kv_ipc.h) */
    ps_status_t error; /* the server failed the request (kv_error.h) */
} kv_resp_t;

/* Values of type `got` for a destination of type `want`. CHAR (the
 * default, upstream's too) and OTHER are bytes of no stated type: they go
 * with anything. */
static int types_clash(ps_data_type_t want, ps_data_type_t got)
{
    return want != got && want != PS_DATA_CHAR && want != PS_DATA_OTHER &&
           got != PS_DATA_CHAR && got != PS_DATA_OTHER;
}

/* A response whose values are not of the pull's type (said, 1). */
static int type_clashes(const kv_req_t *r, const kv_resp_t *rp)
{
    if (!types_clash(r->type, rp->type))
        return 0;
    ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d holds %s values, the "
            "destination %s", rp->ts, rp->sender, ps_data_type_str(rp->type),
            ps_data_type_str(r->type));
    return 1;
}

/* A response to a pull the servers size: its keys must be the part's; its
 * per-key lengths (or, without them, an equal split) must add up to what
 * came. The values are kept in the part, the message's buffer referenced
 * (a lane payload copied). */
static ps_status_t take_any_response(const kv_req_t *r, kv_part_t *p, const kv_resp_t *rp)
{
    if (type_clashes(r, rp))
        return PS_ERR_PROTOCOL;
    size_t nk = p->keys.len / sizeof(ps_key_t);
    if (rp->keys_len != p->keys.len ||
        (rp->keys_len && memcmp(rp->keys, ps_slice_ptr(&p->keys), rp->keys_len) != 0)) {
        ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d has other keys than asked",
                rp->ts, rp->sender);
        return PS_ERR_PROTOCOL;
    }
    ps_status_t st = ps_slice_alloc(nk * sizeof(int32_t), 0, &p->got_lens);
    if (st != PS_OK)
        return st;
    int32_t *lens = ps_slice_ptr(&p->got_lens);
    uint64_t total = 0;
    if (rp->lens_len > 0) {
        if (rp->lens_len != nk * sizeof(int32_t)) {
            ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d: %zu length bytes for %zu "
                    "keys", rp->ts, rp->sender, rp->lens_len, nk);
            return PS_ERR_PROTOCOL;
        }
        for (size_t i = 0; i < nk; i++) {
            lens[i] = load_i32(rp->lens, i);
            if (lens[i] < 0)
                return PS_ERR_PROTOCOL;
            total += (uint64_t)lens[i] * r->elem_size;
        }
    } else if (nk > 0 && rp->vals_len % (nk * r->elem_size) == 0 &&
               rp->vals_len / (nk * r->elem_size) <= INT32_MAX) {
        for (size_t i = 0; i < nk; i++)
            lens[i] = (int32_t)(rp->vals_len / (nk * r->elem_size));
        total = rp->vals_len;
    }
    if (total != rp->vals_len) {
        ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d: %zu value bytes, its lengths "
                "say %llu", rp->ts, rp->sender, rp->vals_len, (unsigned long long)total);
        return PS_ERR_PROTOCOL;
    }
    if (rp->vals_len == 0)
        return PS_OK;
    if (rp->vals_slice != NULL) {
        p->got_vals = ps_slice_ref(rp->vals_slice);
        atomic_fetch_add_explicit(&r->w->n_in_place, rp->vals_len, memory_order_relaxed);
        return PS_OK;
    }
    atomic_fetch_add_explicit(&r->w->n_small, rp->vals_len, memory_order_relaxed);
    if ((st = ps_slice_alloc(rp->vals_len, 0, &p->got_vals)) == PS_OK)
        memcpy(ps_slice_ptr(&p->got_vals), rp->vals, rp->vals_len);
    return st;
}

/* A server-sized pull's parts, answered: their values (key order) in one
 * slice (the one part's own when only one answered with values) and their
 * lengths, kept for ps_kv_pull_result. */
static ps_status_t keep_any_result(ps_kv_worker_t *w, kv_req_t *r, int ts)
{
    struct kv_result res = {.ts = ts};
    size_t bytes = 0, nk = 0, with_vals = 0;
    const kv_part_t *only = NULL;
    for (int i = 0; i < r->num_parts; i++) {
        const kv_part_t *p = &r->parts[i];
        if (!p->server_id)
            continue;
        bytes += p->got_vals.len;
        nk += p->got_lens.len / sizeof(int32_t);
        if (p->got_vals.len) {
            with_vals++;
            only = p;
        }
    }
    ps_status_t st = ps_slice_alloc(nk * sizeof(int32_t), 0, &res.lens);
    if (st == PS_OK && with_vals == 1)
        res.vals = ps_slice_ref(&only->got_vals);
    else if (st == PS_OK)
        st = ps_slice_alloc(bytes, 0, &res.vals);
    size_t voff = 0, loff = 0;
    for (int i = 0; st == PS_OK && i < r->num_parts; i++) {
        const kv_part_t *p = &r->parts[i];
        if (!p->server_id)
            continue;
        memcpy((char *)ps_slice_ptr(&res.lens) + loff, ps_slice_ptr(&p->got_lens), p->got_lens.len);
        loff += p->got_lens.len;
        if (with_vals > 1 && p->got_vals.len)
            memcpy((char *)ps_slice_ptr(&res.vals) + voff, ps_slice_ptr(&p->got_vals),
                   p->got_vals.len);
        voff += p->got_vals.len;
    }
    ps_mutex_lock(&w->lock);
    if (st == PS_OK && w->num_results == w->results_cap) {
        size_t cap = w->results_cap ? 2 * w->results_cap : 8;
        struct kv_result *grown = realloc(w->results, cap * sizeof(*grown));
        if (grown != NULL) {
            w->results = grown;
            w->results_cap = cap;
        } else {
            st = PS_ERR_NO_MEMORY;
        }
    }
    if (st == PS_OK)
        w->results[w->num_results++] = res;
    ps_mutex_unlock(&w->lock);
    if (st != PS_OK) {
        ps_slice_unref(&res.vals);
        ps_slice_unref(&res.lens);
    }
    return st;
}

/* Checks a pull response from one server against what was asked, and puts
 * its values in place. */
static ps_status_t take_pull_response(ps_kv_worker_t *w, const kv_req_t *r, const kv_part_t *p,
                                      const ps_slice_t *dest, const kv_resp_t *rp)
{
    size_t nk = p->keys.len / sizeof(ps_key_t);
    int sender = rp->sender;
    int ts = rp->ts;

    if (rp->keys_len != p->keys.len ||
        (rp->keys_len && memcmp(rp->keys, ps_slice_ptr(&p->keys), rp->keys_len) != 0)) {
        ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d has other keys than asked",
                ts, sender);
        return PS_ERR_PROTOCOL;
    }

    if (type_clashes(r, rp))
        return PS_ERR_PROTOCOL;

    /* Per-key lengths, when the server sent them, say which key is off. */
    if (rp->lens_len > 0) {
        if (rp->lens_len != nk * sizeof(int32_t)) {
            ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d: %zu length bytes for %zu keys",
                    ts, sender, rp->lens_len, nk);
            return PS_ERR_PROTOCOL;
        }
        const void *got = rp->lens;
        const void *want = p->lens.len ? ps_slice_ptr(&p->lens) : NULL;
        for (size_t i = 0; i < nk; i++) {
            uint64_t g = (uint64_t)(int64_t)load_i32(got, i) * r->elem_size;
            uint64_t e = want ? (uint64_t)(int64_t)load_i32(want, i) * r->elem_size
                              : r->uniform_bytes;
            if (g == e)
                continue;
            ps_key_t key;
            memcpy(&key, (const char *)ps_slice_ptr(&p->keys) + i * sizeof(key), sizeof(key));
            if (g == 0) {
                ps_warn(PS_LOG_APP, "kv: pull ts %d: node %d has no value for key %llu",
                        ts, sender, (unsigned long long)key);
                return PS_ERR_NOT_FOUND;
            }
            ps_warn(PS_LOG_APP, "kv: pull ts %d: node %d returned %llu bytes for key %llu, "
                    "expected %llu", ts, sender, (unsigned long long)g,
                    (unsigned long long)key, (unsigned long long)e);
            return PS_ERR_PROTOCOL;
        }
    }

    size_t got_bytes = rp->vals_len;
    if (got_bytes != dest->len) {
        ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d has %zu value bytes, expected %zu",
                ts, sender, got_bytes, dest->len);
        return PS_ERR_PROTOCOL;
    }
    if (rp->written) {
        /* The server wrote them into the destination through its handle,
         * and waited for that copy before answering. */
        if (!p->ipc_sent) {
            ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d says it wrote into a "
                    "destination it was given no handle of", ts, sender);
            return PS_ERR_PROTOCOL;
        }
        atomic_fetch_add_explicit(&w->n_pull_ipc, got_bytes, memory_order_relaxed);
        return PS_OK;
    }
    /* Landed in place (the van asked recv_buffer): nothing to copy. */
    if (got_bytes == 0)
        return PS_OK;
    if (rp->vals == ps_slice_ptr(dest)) {
        atomic_fetch_add_explicit(&w->n_in_place, got_bytes, memory_order_relaxed);
        return PS_OK;
    }
    atomic_fetch_add_explicit(rp->lane ? &w->n_small : &w->n_copied, got_bytes,
                              memory_order_relaxed);
    if (!rp->lane && atomic_load(&p->staged))
        atomic_fetch_add_explicit(&w->n_pull_staged, got_bytes, memory_order_relaxed);
    ps__app_pipe_t *pipe = atomic_load(&p->pipe);
    if (!rp->lane && pipe != NULL && ps__app_pipe_owns(pipe, rp->vals)) {
        uint64_t early = 0;
        ps_status_t st = ps__app_pipe_finish(pipe, got_bytes, &early);
        atomic_fetch_add_explicit(&w->n_pull_piped, early, memory_order_relaxed);
        return st;
    }
    return ps__app_copy_in(dest, 0, rp->vals, got_bytes);
}

/* Which request and part a response answers (see claim_part). */
typedef struct {
    int sender;
    kv_req_t *r;
    kv_part_t *p;
} kv_claim_t;

/* A claim of a pull holds its destination until the values are in. */

/* Under the customer's claim (the request cannot end meanwhile): the part
 * of `sender`, if it has not answered yet, now answered and referenced. */
static ps_status_t claim_part(void *ctx, void *arg)
{
    kv_req_t *r = ctx;
    kv_claim_t *c = arg;
    int rank = ps_postoffice_peer_rank(r->w->po, c->sender);
    if (rank < 0 || rank >= r->num_parts)
        return PS_ERR_NOT_FOUND;
    kv_part_t *p = &r->parts[rank];
    if (p->server_id != c->sender || p->responded)
        return PS_ERR_NOT_FOUND;
    p->responded = 1;
    atomic_fetch_add(&r->refs, 1);
    if (r->pull)
        atomic_fetch_add(&r->holders, 1);
    c->r = r;
    c->p = p;
    return PS_OK;
}

/* A server answered (or can no longer write): it lets go of the part's
 * destination it was given as an IPC handle, if it was. */
static void ipc_let_go(ps_kv_worker_t *w, kv_req_t *r, kv_part_t *p)
{
    if (p->ipc_sent && atomic_exchange(&p->ipc_held, 0) != 0)
        holder_drop(w, r);
}

/* `sender` answered failed pull r: it lets go of its part's destination. */
static void part_answered_late(ps_kv_worker_t *w, kv_req_t *r, int sender)
{
    int rank = ps_postoffice_peer_rank(w->po, sender);
    if (rank >= 0 && rank < r->num_parts && r->parts[rank].server_id == sender)
        ipc_let_go(w, r, &r->parts[rank]);
}

/* The failed request `ts` held in `draining`, referenced, or NULL (the
 * worker's lock held). */
static kv_req_t *draining_find_ref(ps_kv_worker_t *w, int ts)
{
    for (size_t i = 0; i < w->num_draining; i++) {
        if (w->draining[i].ts == ts) {
            kv_req_t *r = w->draining[i].r;
            atomic_fetch_add(&r->refs, 1);
            return r;
        }
    }
    return NULL;
}

/* A response to a request that ended already: a failed pull waiting in
 * `draining` for the server it gave a handle to, or one about to be put
 * there (worker_done runs just after the request stopped taking
 * responses): remembered in `unclaimed` for draining_add. */
static void late_response(ps_kv_worker_t *w, int ts, int sender)
{
    ps_mutex_lock(&w->lock);
    kv_req_t *r = draining_find_ref(w, ts);
    if (r == NULL && sender != 0) {
        w->unclaimed[w->next_unclaimed] = (struct kv_unclaimed){ts, sender};
        w->next_unclaimed = (w->next_unclaimed + 1) % KV_UNCLAIMED;
    }
    ps_mutex_unlock(&w->lock);
    if (r == NULL)
        return;
    part_answered_late(w, r, sender);
    req_unref(w, r);
}

/* One server's answer to request rp->ts. */
static void take_response(ps_kv_worker_t *w, const kv_resp_t *rp)
{
    int ts = rp->ts;
    kv_claim_t claim = {.sender = rp->sender};
    if (ps_customer_claim_request(w->customer, ts, claim_part, &claim) != PS_OK) {
        /* Late (its request failed or timed out) or not ours. */
        ps_debug(PS_LOG_APP, "kv worker app %d: ignored a response ts %d from node %d",
                 w->app_id, ts, rp->sender);
        late_response(w, ts, rp->sender);
        return;
    }

    kv_req_t *r = claim.r;
    ps_status_t st = rp->error;
    if (r->pull)
        ipc_let_go(w, r, claim.p);
    if (r->pull) {
        if (st == PS_OK && rp->written && r->any) {
            /* No handle was sent: nothing may have been written. */
            ps_warn(PS_LOG_APP, "kv: pull response ts %d from node %d says it wrote in place "
                    "for a pull the servers size", ts, rp->sender);
            st = PS_ERR_PROTOCOL;
        }
        if (st == PS_OK)
            st = r->any ? take_any_response(r, claim.p, rp)
                        : take_pull_response(w, r, claim.p, &claim.p->dest, rp);
        holder_drop(w, r);
    }
    /* One decrement per part (p->responded was set once, under the claim):
     * exactly one response is the last, and its callback runs before the
     * count below lets a waiter go. That count, when it completes the
     * request, leaves the rest of worker_done to us. A server-sized pull's
     * result is kept before anyone can see the request complete. */
    int last = st == PS_OK && atomic_fetch_sub(&r->remaining, 1) == 1;
    if (last && r->any)
        st = keep_any_result(w, r, ts);
    if (last && r->scatter)
        st = ps__kv_regroup_scatter(r->scatter, r->scatter_keys, &r->scratch, &r->user_dest);
    if (st != PS_OK) {
        ps_customer_fail_request(w->customer, ts, st);
    } else {
        if (last)
            fire_callback(r, ts, PS_OK);
        if (ps_customer_add_response_quiet(w->customer, ts, 1)) {
            outstanding_drop(w);
            req_unref_later(w, r, 2); /* the tracker's and the claim's */
            return;
        }
    }
    req_unref_later(w, r, 1);
}

static void worker_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    ps_kv_worker_t *w = arg;
    (void)customer;
    if (msg->meta.request || msg->meta.simple_app) {
        ps_warn_ratelimited(PS_LOG_APP, "kv worker app %d: dropped a request from node %d",
                            w->app_id, msg->meta.sender);
        return;
    }
    kv_resp_t rp = {.sender = msg->meta.sender, .ts = msg->meta.timestamp};
    uint64_t written = 0;
    if (ps_unlikely(msg->meta.body_len != 0)) {
        if (ps__kv_ipc_written_parse(msg->meta.body, msg->meta.body_len, &written)) {
            rp.written = 1;
        } else {
            rp.error = ps__kv_error_read(msg->meta.body, msg->meta.body_len);
            if (rp.error != PS_OK)
                ps_debug(PS_LOG_APP, "kv worker app %d: node %d failed request ts %d: %s",
                         w->app_id, rp.sender, rp.ts, ps_status_str(rp.error));
        }
    }
    if (msg->num_data > 0) {
        rp.keys = ps_slice_ptr(&msg->data[0]);
        rp.keys_len = msg->data[0].len;
    }
    if (msg->num_data > 1) {
        rp.vals = ps_slice_ptr(&msg->data[1]);
        rp.vals_len = msg->data[1].len;
        rp.vals_slice = &msg->data[1];
    }
    rp.type = ps_meta_data_type(&msg->meta, 1);
    if (rp.written) {
        /* No value bytes came: the server says how many it wrote. */
        if (rp.vals_len != 0 || written > SIZE_MAX) {
            rp.error = PS_ERR_PROTOCOL;
        } else {
            rp.vals = NULL;
            rp.vals_slice = NULL;
            rp.vals_len = (size_t)written;
        }
    }
    if (msg->num_data > 2) {
        rp.lens = ps_slice_ptr(&msg->data[2]);
        rp.lens_len = msg->data[2].len;
    }
    take_response(w, &rp);
}

/* A response on the small lane (kv_lane.h). */
static void worker_lane_recv(void *arg, ps_customer_t *customer, int sender, int customer_id,
                             const uint8_t *payload, size_t len)
{
    ps_kv_worker_t *w = arg;
    (void)customer;
    (void)customer_id;
    ps__kv_lane_msg_t m = {0};
    if (ps__kv_lane_read(payload, len, &m) != PS_OK || m.request) {
        ps_warn_ratelimited(PS_LOG_APP, "kv worker app %d: dropped a %s lane message from "
                            "node %d", w->app_id, m.request ? "request" : "malformed", sender);
        return;
    }
    kv_resp_t rp = {
        .sender = sender,
        .ts = m.timestamp,
        .keys = m.keys,
        .keys_len = m.num_keys * sizeof(ps_key_t),
        .vals = m.vals,
        .vals_len = m.vals_len,
        .type = m.type,
        .lens = m.lens,
        .lens_len = m.lens != NULL ? m.num_keys * sizeof(int32_t) : 0,
        .lane = 1,
    };
    take_response(w, &rp);
}

/* What worker_recv_buffer asks of a request (see claim_dest). */
typedef struct {
    int sender;
    uint64_t len;
    ps_data_type_t type; /* what the server says the values are */
    ps_slice_t *slice_p;
} kv_dest_claim_t;

/* Frees a destroyed worker once nothing uses it (no customer, no lent
 * destination): every failed pull in `draining` is unheld by then. */
static void worker_free(ps_kv_worker_t *w)
{
    for (size_t i = 0; i < w->num_draining; i++)
        req_unref(w, w->draining[i].r);
    free(w->draining);
    for (size_t i = 0; i < w->num_results; i++) {
        ps_slice_unref(&w->results[i].vals);
        ps_slice_unref(&w->results[i].lens);
    }
    free(w->results);
    release_retired(w); /* no response is running any more */
    ps_cond_destroy(&w->idle);
    ps_mutex_destroy(&w->lock);
    kv_req_t *spare = atomic_exchange(&w->spare, NULL);
    if (spare != NULL)
        ps_mpool_put(&w->reqs, spare);
    ps_mpool_cleanup(&w->reqs);
    free(w->server_ids);
    free(w->ranges);
    free(w);
}

static void worker_unuse(ps_kv_worker_t *w)
{
    if (atomic_fetch_sub(&w->users, 1) == 1)
        worker_free(w);
}

/* The van let go of a part's destination (the last reference on its
 * proxy). */
static void proxy_released(void *data, size_t len, void *arg)
{
    kv_part_t *p = arg;
    kv_req_t *r = p->req;
    ps_kv_worker_t *w = r->w;
    (void)data;
    (void)len;
    ps_slice_unref(&p->lent);
    atomic_store(&p->lending, 0);
    holder_drop(w, r);
    req_unref(w, r);
    worker_unuse(w);
}

/* A part's pipe is gone (host_stage.h): nothing of it writes into the
 * destination any more. */
static void pipe_gone(void *arg)
{
    kv_part_t *p = arg;
    kv_req_t *r = p->req;
    ps_kv_worker_t *w = r->w;
    atomic_store(&p->pipe, NULL);
    holder_drop(w, r);
    req_unref(w, r);
    worker_unuse(w);
}

/* A staged receipt of a large device destination through a pipe (one per
 * part at a time), holding the request and the worker as a lent
 * destination does. */
static ps_status_t claim_pipe(kv_req_t *r, kv_part_t *p, ps_slice_t *slice_p)
{
    if (atomic_load(&p->pipe) != NULL)
        return PS_ERR_UNSUPPORTED;
    p->req = r;
    ps__app_pipe_t *pipe;
    atomic_fetch_add(&r->w->users, 1);
    atomic_fetch_add(&r->refs, 1);
    atomic_fetch_add(&r->holders, 1);
    ps_status_t st = ps__app_pipe_open(&p->dest, r->w->request_timeout_ms, pipe_gone, p, slice_p,
                                       &pipe);
    if (st != PS_OK) {
        atomic_fetch_sub(&r->holders, 1);
        atomic_fetch_sub(&r->refs, 1);
        atomic_fetch_sub(&r->w->users, 1);
        return st;
    }
    atomic_store(&p->pipe, pipe);
    return PS_OK;
}

/* Under the customer's claim: a slice over the destination of `sender`'s
 * part of a pull, when it still waits for exactly len bytes, through the
 * part's proxy (one van at a time), so that the request knows when the
 * van lets go. */
static ps_status_t claim_dest(void *ctx, void *arg)
{
    kv_req_t *r = ctx;
    kv_dest_claim_t *c = arg;
    int rank = ps_postoffice_peer_rank(r->w->po, c->sender);
    if (!r->pull || rank < 0 || rank >= r->num_parts)
        return PS_ERR_NOT_FOUND;
    kv_part_t *p = &r->parts[rank];
    if (p->server_id != c->sender || p->responded || p->dest.len != c->len || c->len == 0)
        return PS_ERR_NOT_FOUND;
    /* Values of another type are refused once they are in (take_response):
     * meanwhile they must not touch the destination. */
    if (types_clash(r->type, c->type))
        return PS_ERR_NOT_FOUND;
    if (!ps__app_receivable(&p->dest, r->w->device_ok)) {
        /* Device memory a van cannot write: it receives into a page-locked
         * staging block, and take_pull_response copies from there, several
         * times faster than from a pageable buffer of the van's own
         * (docs/GPU.md, the kind's copy bandwidth). Without a block, the
         * van's own buffer. */
        if (claim_pipe(r, p, c->slice_p) != PS_OK &&
            ps__app_receive_stage(&p->dest, c->slice_p) != PS_OK)
            return PS_ERR_NOT_FOUND;
        atomic_store(&p->staged, 1);
        return PS_OK;
    }
    if (atomic_exchange(&p->lending, 1) != 0)
        return PS_ERR_NOT_FOUND;
    /* The van finds the memory's registrations on the proxy where it would
     * on dest's own buffer; undoing them stays dest's (lent keeps it). Out
     * of memory: the van receives into a buffer of its own instead. */
    ps_buf_t *proxy;
    if (ps_buf_proxy(p->dest.buf, proxy_released, p, &proxy) != PS_OK) {
        atomic_store(&p->lending, 0);
        return PS_ERR_NOT_FOUND;
    }
    p->req = r;
    atomic_fetch_add(&r->w->users, 1);
    p->lent = ps_slice_ref(&p->dest);
    atomic_fetch_add(&r->refs, 1);
    atomic_fetch_add(&r->holders, 1);
    /* The proxy's first reference is the slice's. */
    c->slice_p->buf = proxy;
    c->slice_p->off = p->dest.off;
    c->slice_p->len = c->len;
    return PS_OK;
}

/* Where a pull response's values should land: straight in the caller's
 * buffer, when the van can put them there. */
static ps_status_t worker_recv_buffer(void *arg, ps_customer_t *customer, const ps_meta_t *meta,
                                      unsigned index, uint64_t len, ps_slice_t *slice_p)
{
    ps_kv_worker_t *w = arg;
    (void)customer;
    if (index != 1 || meta->request)
        return PS_ERR_NOT_FOUND;
    kv_dest_claim_t claim = {
        .sender = meta->sender,
        .len = len,
        .type = ps_meta_data_type(meta, 1),
        .slice_p = slice_p,
    };
    return ps_customer_claim_request(w->customer, meta->timestamp, claim_dest, &claim);
}

/* ---- lifecycle ---- */

ps_status_t ps_kv_worker_create(ps_postoffice_t *po, int app_id, int customer_id,
                                ps_kv_worker_t **worker_p)
{
    if (!po || !worker_p)
        return PS_ERR_INVALID_ARG;
    int ns = ps_postoffice_num_servers(po);
    if (ns <= 0) {
        ps_error(PS_LOG_APP, "kv worker: the job has no servers");
        return PS_ERR_CONFIG;
    }

    ps_kv_worker_t *w = calloc(1, sizeof(*w));
    if (!w)
        return PS_ERR_NO_MEMORY;
    w->po = po;
    w->app_id = app_id;
    w->customer_id = customer_id;
    w->num_servers = ns;
    w->device_ok = (ps_postoffice_capabilities(po) & PS_CAP_DEVICE_MEMORY) != 0;
    w->send_as_written = (ps_postoffice_capabilities(po) & PS_CAP_SEND_AS_WRITTEN) != 0;
    w->device_ipc = !w->device_ok && ps_config_bool_or(PS_CFG_PS_DEVICE_IPC, 0);
    w->request_timeout_ms = ps_postoffice_request_timeout_ms(po);
    atomic_init(&w->users, 1);
    w->server_ids = calloc((size_t)ns, sizeof(int));
    w->ranges = calloc((size_t)ns, sizeof(ps_kv_range_t));
    ps_status_t st = PS_ERR_NO_MEMORY;
    if (!w->server_ids || !w->ranges)
        goto fail_alloc;
    for (int i = 0; i < ns; i++) {
        w->server_ids[i] = ps_postoffice_peer_id(po, PS_ROLE_SERVER, i);
        st = ps_postoffice_server_key_range(po, i, &w->ranges[i].begin, &w->ranges[i].end);
        if (st != PS_OK)
            goto fail_alloc;
    }
    /* Chunks of about 64 KiB, however many servers a request covers. */
    size_t per_chunk = 65536 / req_size(ns);
    st = ps_mpool_init(&w->reqs, "kv requests", req_size(ns), 0, per_chunk ? per_chunk : 1, 0);
    if (st != PS_OK)
        goto fail_alloc;
    if ((st = ps_mutex_init(&w->lock)) != PS_OK)
        goto fail_pool;
    if ((st = ps_cond_init(&w->idle)) != PS_OK)
        goto fail_lock;
    st = ps_customer_create_lane(po, app_id, customer_id, worker_recv, worker_lane_recv, w,
                                 &w->customer);
    if (st != PS_OK)
        goto fail_cond;
    ps_customer_set_done_func(w->customer, worker_done, w);
    /* Segment 1 of a response carries its values (see worker_recv_buffer). */
    ps_customer_set_recv_buffer_segments(w->customer, 1u << 1);
    ps_kv_worker_set_recv_in_place(w, 1);
    *worker_p = w;
    return PS_OK;

fail_cond:
    ps_cond_destroy(&w->idle);
fail_lock:
    ps_mutex_destroy(&w->lock);
fail_pool:
    ps_mpool_cleanup(&w->reqs);
fail_alloc:
    free(w->server_ids);
    free(w->ranges);
    free(w);
    return st;
}

void ps_kv_worker_set_slicer(ps_kv_worker_t *w, ps_kv_slicer_func_t fn, void *arg)
{
    if (!w)
        return;
    w->slicer = fn;
    w->slicer_arg = arg;
}

void ps_kv_worker_set_recv_in_place(ps_kv_worker_t *w, int enable)
{
    if (!w)
        return;
    int can = (ps_postoffice_capabilities(w->po) & PS_CAP_RECV_INTO_DEST) != 0;
    ps_customer_set_recv_buffer_func(w->customer, enable && can ? worker_recv_buffer : NULL,
                                     enable && can ? w : NULL);
}

/* Waits until no holder has a destination of r (lock held), up to
 * `deadline`; 1 when none has. */
static int wait_unheld_locked(ps_kv_worker_t *w, kv_req_t *r, ps_deadline_t deadline)
{
    atomic_fetch_add(&w->idle_waiters, 1);
    while (atomic_load(&r->holders) > 0 && !ps_deadline_expired(deadline))
        (void)ps_cond_wait(&w->idle, &w->lock, deadline);
    atomic_fetch_sub(&w->idle_waiters, 1);
    return atomic_load(&r->holders) == 0;
}

/* Under the customer's claim: a reference on the outstanding request. */
static ps_status_t claim_ref(void *ctx, void *arg)
{
    kv_req_t *r = ctx;
    atomic_fetch_add(&r->refs, 1);
    *(kv_req_t **)arg = r;
    return PS_OK;
}

/* Servers declared dead write no more: their parts of r given as IPC
 * handles are let go. */
static void ipc_let_go_dead(ps_kv_worker_t *w, kv_req_t *r)
{
    int dead[64];
    int n = -1;
    for (int i = 0; i < r->num_parts; i++) {
        kv_part_t *p = &r->parts[i];
        if (!p->ipc_sent || atomic_load(&p->ipc_held) == 0)
            continue;
        if (n < 0)
            n = ps_postoffice_dead_nodes(w->po, dead, 64);
        for (int j = 0; j < n; j++) {
            if (dead[j] == p->server_id)
                ipc_let_go(w, r, p);
        }
    }
}

ps_status_t ps_kv_cancel(ps_kv_worker_t *w, int ts, int timeout_ms)
{
    if (!w || ts < 0)
        return PS_ERR_INVALID_ARG;
    if (timeout_ms < 0)
        timeout_ms = w->request_timeout_ms;
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    kv_req_t *r = NULL;
    if (ps_customer_claim_request(w->customer, ts, claim_ref, &r) == PS_OK) {
        /* No response is taken, no van is lent a destination, from now on. */
        ps_customer_fail_request(w->customer, ts, PS_ERR_CANCELLED);
        ps_mutex_lock(&w->lock);
    } else {
        /* Completed: only a failed one may still be held. */
        ps_mutex_lock(&w->lock);
        r = draining_find_ref(w, ts);
    }
    if (r == NULL) {
        ps_mutex_unlock(&w->lock);
        return PS_OK;
    }
    ps_mutex_unlock(&w->lock);
    ipc_let_go_dead(w, r);
    ps_mutex_lock(&w->lock);
    int unheld = wait_unheld_locked(w, r, deadline);
    ps_mutex_unlock(&w->lock);
    req_unref(w, r);
    if (!unheld) {
        ps_warn(PS_LOG_APP, "kv worker app %d: request %d's destination is still held after "
                "%d ms", w->app_id, ts, timeout_ms);
        return PS_ERR_TIMED_OUT;
    }
    return PS_OK;
}

ps_status_t ps_kv_worker_destroy_timed(ps_kv_worker_t *w, int timeout_ms)
{
    if (!w)
        return PS_OK;
    if (timeout_ms < 0)
        timeout_ms = w->request_timeout_ms;
    ps_deadline_t dl = ps_deadline_from_ms(timeout_ms);
    ps_mutex_lock(&w->lock);
    atomic_fetch_add(&w->idle_waiters, 1);
    while (atomic_load(&w->outstanding) > 0) {
        if (ps_cond_wait(&w->idle, &w->lock, dl) == PS_ERR_TIMED_OUT)
            break;
    }
    atomic_fetch_sub(&w->idle_waiters, 1);
    size_t left = atomic_load(&w->outstanding);
    ps_mutex_unlock(&w->lock);
    if (left)
        ps_warn(PS_LOG_APP, "kv worker app %d: %zu requests still outstanding at destroy",
                w->app_id, left);
    /* Pushes still waiting for their data fail with PS_ERR_SHUTDOWN. */
    ps__ready_queue_destroy(atomic_exchange(&w->ready, NULL));

    /* Fails what is still outstanding with PS_ERR_SHUTDOWN: worker_done
     * runs for each and drops its reference. */
    ps_status_t st = ps_customer_destroy_timed(w->customer, ps_deadline_remaining_ms(dl));
    if (st != PS_OK) {
        ps_error(PS_LOG_APP, "kv worker app %d: its customer is still in use; leaving the "
                 "worker allocated", w->app_id);
        return st;
    }
    /* A van may keep a failed pull's destination until it closes (a dead
     * peer's posted receive): the worker then goes when the van lets go,
     * rather than destroy waiting for ps_postoffice_finalize. */
    if (atomic_fetch_sub(&w->users, 1) != 1) {
        ps_info(PS_LOG_APP, "kv worker app %d: a van still holds a failed pull's destination; "
                "the worker is freed when it lets go (ps_kv_cancel says when a buffer is free)",
                w->app_id);
        return PS_OK;
    }
    worker_free(w);
    return PS_OK;
}

/* Valid after ps_postoffice_finalize() too (the customer is). */
void ps_kv_worker_destroy(ps_kv_worker_t *w)
{
    (void)ps_kv_worker_destroy_timed(w, -1);
}

/* ---- issuing requests ---- */

static ps_status_t check_pairs(const ps_kv_pairs_t *kvs, const char *what)
{
    if (kvs->keys.len % sizeof(ps_key_t) != 0) {
        ps_error(PS_LOG_APP, "kv %s: key bytes %zu not a multiple of 8", what, kvs->keys.len);
        return PS_ERR_INVALID_ARG;
    }
    if (kvs->lens.len != 0 && kvs->lens.len != ps_kv_pairs_num_keys(kvs) * sizeof(int32_t)) {
        ps_error(PS_LOG_APP, "kv %s: %zu length bytes for %zu keys", what, kvs->lens.len,
                 ps_kv_pairs_num_keys(kvs));
        return PS_ERR_INVALID_ARG;
    }
    if ((unsigned)kvs->type >= PS_DATA_TYPE_COUNT) {
        ps_error(PS_LOG_APP, "kv %s: unknown data type %d", what, (int)kvs->type);
        return PS_ERR_INVALID_ARG;
    }
    if (!ps_slice_in_host_mem(&kvs->keys) || !ps_slice_in_host_mem(&kvs->lens)) {
        ps_error(PS_LOG_APP, "kv %s: keys and lengths must be in host memory (values may be "
                 "device memory)", what);
        return PS_ERR_INVALID_ARG;
    }
    return PS_OK;
}

static size_t elem_size_of(ps_data_type_t type)
{
    size_t es = ps_data_type_size(type);
    return es ? es : 1;
}

static ps_status_t slice_pairs(ps_kv_worker_t *w, const ps_kv_pairs_t *kvs, const int *owner,
                               ps_kv_slice_t *slices)
{
    if (owner) {
        /* A user slicer's servers, in key order: shares by owner. */
        size_t nk = ps_kv_pairs_num_keys(kvs);
        ps_status_t st = ps_kv_shares_of_owners(owner, nk, w->num_servers, slices);
        return st != PS_OK ? st
                           : ps_kv_slice_vals(nk, kvs->lens.len ? ps_slice_ptr(&kvs->lens) : NULL,
                                              kvs->vals.len, elem_size_of(kvs->type), slices,
                                              w->num_servers, slices);
    }
    return ps_kv_slice_keys(ps_slice_ptr(&kvs->keys), ps_kv_pairs_num_keys(kvs),
                            kvs->lens.len ? ps_slice_ptr(&kvs->lens) : NULL, kvs->vals.len,
                            elem_size_of(kvs->type), w->ranges, w->num_servers, slices);
}

/* Sends one server's share of request `r` (timestamp ts) on the small lane (kv_lane.h)
 * when it fits there: its keys, the values pushed (vals, of a push), the
 * lengths (lens), all in host memory. PS_ERR_UNSUPPORTED when it does not fit
 * (nothing sent). */
static ps_status_t send_part_lane(ps_kv_worker_t *w, const kv_req_t *r, int ts,
                                  const kv_part_t *p, int push, const ps_slice_t *vals,
                                  const ps_slice_t *lens, ps_data_type_t type, int cmd)
{
    size_t lane_max = ps_postoffice_lane_max(w->po);
    if (lane_max == 0)
        return PS_ERR_UNSUPPORTED; /* no lane: nothing more to look at */
    size_t nk = p->keys.len / sizeof(ps_key_t);
    size_t len = ps__kv_lane_size(nk, vals->len, lens->len != 0);
    if (len == 0 || len > lane_max || !ps_slice_in_host_mem(vals) ||
        !ps_slice_in_host_mem(lens) || !ps_slice_in_host_mem(&p->keys) ||
        !ps_slice_in_host_mem(&p->dest))
        return PS_ERR_UNSUPPORTED;
    const ps_slice_t *named = r->pull ? &p->dest : vals;
    if (named->len > UINT32_MAX)
        return PS_ERR_UNSUPPORTED;
    ps__kv_lane_msg_t m = {
        .timestamp = ts,
        .cmd = cmd,
        .val_len = (uint32_t)named->len,
        .request = 1,
        .push = push,
        .pull = r->pull,
        .type = type,
        .num_keys = nk,
        .keys = ps_slice_ptr(&p->keys),
        .vals = ps_slice_ptr(vals),
        .vals_len = vals->len,
        .lens = lens->len ? ps_slice_ptr(lens) : NULL,
    };
    uint8_t buf[PS_POSTOFFICE_LANE_HEADROOM + PS_LANE_MAX_PAYLOAD] __attribute__((aligned(8)));
    uint8_t *payload = buf + PS_POSTOFFICE_LANE_HEADROOM;
    ps__kv_lane_write(payload, &m);
    ps_status_t st = ps_postoffice_send_lane(w->po, p->server_id, w->app_id, w->customer_id,
                                             payload, len);
    if (st == PS_OK)
        atomic_fetch_add_explicit(&w->n_lane, 1, memory_order_relaxed);
    return st;
}

static ps_status_t send_part_host(ps_kv_worker_t *w, const kv_req_t *r, int ts,
                                  const kv_part_t *p, int push, const ps_slice_t *vals_in,
                                  const ps_slice_t *lens_in, const ps__kv_ipc_desc_t *ipc,
                                  int num_ipc, ps_data_type_t type, int cmd);

/* Sends one server's message of request `r`. */
static ps_status_t send_part(ps_kv_worker_t *w, kv_req_t *r, int ts, kv_part_t *p,
                             const ps_kv_pairs_t *push, const ps_kv_slice_t *push_slice,
                             ps_data_type_t type, int cmd)
{
    /* Windows on the caller's slices, lent to the message below. */
    ps_slice_t vals = PS_SLICE_EMPTY_INIT;
    ps_slice_t lens = PS_SLICE_EMPTY_INIT;
    ps_status_t st = PS_OK;
    if (push) {
        vals = push->vals;
        st = ps_slice_narrow(&vals, push_slice->val_begin,
                             push_slice->val_end - push_slice->val_begin);
        if (st == PS_OK && push->lens.len) {
            lens = push->lens;
            st = ps_slice_narrow(&lens, push_slice->key_begin * sizeof(int32_t),
                                 (push_slice->key_end - push_slice->key_begin) * sizeof(int32_t));
        }
    } else if (p->lens.len) {
        lens = p->lens;
    }
    ps_slice_t staged = PS_SLICE_EMPTY_INIT;
    /* The push's descriptor, then the pull destination's (kv_ipc.h). */
    ps__kv_ipc_desc_t ipc[2];
    int num_ipc = 0;
    int device_push = st == PS_OK && push && !w->device_ok && !ps_slice_in_host_mem(&vals);
    int device_pull = r->pull && !r->any && p->dest.len != 0 && !ps_slice_in_host_mem(&p->dest);
    /* Whether this server can open our IPC handles: a peer-table lookup,
     * made only when a device value is on the line. */
    int same_host = (device_push || device_pull) && w->device_ipc &&
                    ps_postoffice_peer_same_host(w->po, p->server_id);
    if (device_push) {
        if (same_host && ps__kv_ipc_describe(&vals, &ipc[0]) == PS_OK) {
            /* The server copies the values out of this process's device
             * memory itself (kv_ipc.h): only their handle travels. */
            num_ipc = 1;
            atomic_fetch_add_explicit(&w->n_ipc, vals.len, memory_order_relaxed);
            p->ipc_src = ps_slice_ref(&vals);
            vals = (ps_slice_t)PS_SLICE_EMPTY_INIT;
        } else {
            /* Through a van that moves host memory only: this server's
             * share goes out of a pinned host copy made just before its
             * send, so copying the next share overlaps this one's send
             * (the van holds the copy while it needs it); a van that sends
             * a segment as it is written gets it in chunks, the copy of
             * the next overlapping the send of this one. */
            st = w->send_as_written
                     ? ps__app_sendable_as_written(&vals, w->request_timeout_ms, &staged)
                     : PS_ERR_UNSUPPORTED;
            if (st == PS_OK)
                atomic_fetch_add_explicit(&w->n_push_piped, vals.len, memory_order_relaxed);
            else if (st == PS_ERR_UNSUPPORTED)
                st = ps__app_sendable(&vals, 0, &staged);
            if (st == PS_OK) {
                atomic_fetch_add_explicit(&w->n_staged, vals.len, memory_order_relaxed);
                vals = staged;
            }
        }
    }
    /* A pull into device memory: the server writes the answer into it
     * through its handle (kv_ipc.h), and may do so until it answers, so
     * the server holds the destination from before the send. */
    int ipc_pull = st == PS_OK && device_pull && same_host &&
                   ps__kv_ipc_describe_pull(&p->dest, &ipc[num_ipc]) == PS_OK;
    if (ipc_pull) {
        num_ipc++;
        p->ipc_sent = 1;
        atomic_store(&p->ipc_held, 1);
        atomic_fetch_add(&r->holders, 1);
    }
    if (st == PS_OK)
        st = send_part_host(w, r, ts, p, push != NULL, &vals, &lens, num_ipc ? ipc : NULL,
                            num_ipc, type, cmd);
    if (st != PS_OK && ipc_pull)
        ipc_let_go(w, r, p); /* not sent: nothing will write */
    ps_slice_unref(&staged);
    return st;
}

/* send_part once the values are in host memory (or the van takes device
 * memory): the small lane when the share fits there, else a message. */
static ps_status_t send_part_host(ps_kv_worker_t *w, const kv_req_t *r, int ts,
                                  const kv_part_t *p, int push, const ps_slice_t *vals_in,
                                  const ps_slice_t *lens_in, const ps__kv_ipc_desc_t *ipc,
                                  int num_ipc, ps_data_type_t type, int cmd)
{
    ps_slice_t vals = *vals_in, lens = *lens_in;
    ps_status_t st = ipc ? PS_ERR_UNSUPPORTED
                         : send_part_lane(w, r, ts, p, push, &vals, &lens, type, cmd);
    if (st != PS_ERR_UNSUPPORTED)
        return st;

    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.app_id = w->app_id;
    msg.meta.customer_id = w->customer_id;
    msg.meta.timestamp = ts;
    msg.meta.request = true;
    msg.meta.push = push != 0;
    msg.meta.pull = r->pull != 0;
    msg.meta.head = cmd;
    msg.meta.recver = p->server_id;
    memcpy(&msg.meta.key, ps_slice_ptr(&p->keys), sizeof(msg.meta.key));

    /* addr/val_len name the buffer the answer goes to (a pull), else the
     * pushed values, as upstream. */
    const ps_slice_t *named = r->pull ? &p->dest : &vals;
    msg.meta.addr = (uint64_t)(uintptr_t)ps_slice_ptr(named);
    msg.meta.val_len = named->len;
    if (ipc) {
        msg.meta.body = (const uint8_t *)ipc;
        msg.meta.body_len = (size_t)num_ipc * sizeof(*ipc);
        if (!r->pull)
            msg.meta.val_len = ipc->len; /* the push's descriptor */
    }

    /* As from this node already: the postoffice then sends it as it is. */
    msg.meta.sender = ps_postoffice_my_id(w->po);
    /* The request and the caller hold every segment through the send: lent,
     * not referenced, so the message owns nothing and is not released. */
    if ((st = ps_msg_lend_data(&msg, &p->keys, PS_DATA_UINT64)) != PS_OK ||
        (st = ps_msg_lend_data(&msg, &vals, type)) != PS_OK ||
        (lens.len && (st = ps_msg_lend_data(&msg, &lens, PS_DATA_INT32)) != PS_OK))
        return st;
    return ps_postoffice_send(w->po, &msg);
}

/* Sends every server's share of request `r`; a failed send fails the
 * request (its callback and ps_kv_wait say why). */
static void send_parts(ps_kv_worker_t *w, kv_req_t *r, int ts, const ps_kv_pairs_t *push,
                       const ps_kv_slice_t *push_slices, ps_data_type_t type, int cmd)
{
    for (int i = 0; i < r->num_parts; i++) {
        kv_part_t *p = &r->parts[i];
        if (!p->server_id)
            continue;
        ps_status_t st = send_part(w, r, ts, p, push, push ? &push_slices[i] : NULL, type, cmd);
        atomic_fetch_add_explicit(&w->n_messages, 1, memory_order_relaxed);
        if (st != PS_OK) {
            ps_customer_fail_request(w->customer, ts, st);
            break;
        }
    }
}

/* A request whose pushed values are not ready yet: what send_parts needs
 * later, with references on the slices and the request. */
typedef struct {
    ps_kv_worker_t *w;
    kv_req_t *r;
    int ts;
    int cmd;
    ps_data_type_t type;
    int has_push;      /* 0: a pull (waiting for its destination, kv_ipc.h) */
    ps_kv_pairs_t push;
    ps_kv_slice_t slices[];
} kv_deferred_t;

/* On the ready queue's thread: the values are ready (why PS_OK), or the
 * request ends without being sent. A request that ended meanwhile
 * (ps_kv_cancel, a dead server, destroy) is not sent. (One that ends
 * while its messages go out may still reach a server; its answers are
 * not taken.) */
static void deferred_run(void *arg, ps_status_t why)
{
    kv_deferred_t *d = arg;
    if (why != PS_OK) {
        ps_warn(PS_LOG_APP, "kv %s %d: not sent, its %s never became ready: %s",
                d->has_push ? "push" : "pull", d->ts, d->has_push ? "data" : "destination",
                ps_status_str(why));
        ps_customer_fail_request(d->w->customer, d->ts, why);
    } else if (!atomic_load(&d->r->ended)) {
        send_parts(d->w, d->r, d->ts, d->has_push ? &d->push : NULL,
                   d->has_push ? d->slices : NULL, d->type, d->cmd);
    }
    ps_slice_unref(&d->push.keys);
    ps_slice_unref(&d->push.vals);
    ps_slice_unref(&d->push.lens);
    req_unref(d->w, d->r);
    free(d);
}

/* Queues request `r`'s sends behind `ready`, which the queue owns from
 * then on when `own`; on failure the event stays the caller's. `push`
 * NULL: a pull (its destination waits, see issue()). */
static ps_status_t defer_sends(ps_kv_worker_t *w, kv_req_t *r, int ts, const ps_kv_pairs_t *push,
                               const ps_kv_slice_t *push_slices, ps_data_type_t type, int cmd,
                               ps_mem_event_h ready, bool own)
{
    ps__ready_queue_t *q;
    size_t n = (size_t)r->num_parts;
    kv_deferred_t *d = malloc(sizeof(*d) + n * sizeof(d->slices[0]));
    ps_status_t st = d ? ps__ready_queue_get(&w->ready, &w->lock, &q) : PS_ERR_NO_MEMORY;
    if (st == PS_OK) {
        *d = (kv_deferred_t){.w = w, .r = r, .ts = ts, .cmd = cmd, .type = type,
                             .has_push = push != NULL};
        if (push) {
            d->push.keys = ps_slice_ref(&push->keys);
            d->push.vals = ps_slice_ref(&push->vals);
            d->push.lens = ps_slice_ref(&push->lens);
            d->push.type = push->type;
            memcpy(d->slices, push_slices, n * sizeof(d->slices[0]));
        }
        atomic_fetch_add(&r->refs, 1);
        st = ps__ready_queue_add(q, ready, own, w->request_timeout_ms, deferred_run, d);
        if (st == PS_OK)
            return PS_OK;
        ps_slice_unref(&d->push.keys);
        ps_slice_unref(&d->push.vals);
        ps_slice_unref(&d->push.lens);
        atomic_fetch_sub(&r->refs, 1); /* never the last: issue's own stays */
    }
    free(d);
    return st;
}

/* Servers whose per-request scratch issue() keeps on its stack. */
#define ISSUE_STACK_SERVERS 16

/* The common path of push, pull and push-pull. `push` is the data pushed
 * (NULL for a pull); `out` the destination of a pull (NULL for a push), or
 * with `any` the keys of a pull the servers size (no values). */
static ps_status_t issue_checked(ps_kv_worker_t *w, const ps_kv_pairs_t *push,
                                 const ps_kv_pairs_t *out, int any, const int *owner,
                                 ps__kv_regroup_t *rg, ps_mem_event_h ready, bool *own_ready_p,
                                 int cmd, ps_kv_done_func_t done, void *arg, int *ts_p);

/* The event a request waits for (NULL: none, or already complete) before
 * it is sent, for `vals` (a push's values, or a pull's destination), made
 * from ps_kv_ready_t; *own_p when ps made it (recorded on the caller's
 * stream). With on_default and no event or stream given, one is recorded
 * on the device's default stream. */
static ps_status_t ready_event(const ps_slice_t *vals, const ps_kv_ready_t *ready,
                               bool on_default, ps_mem_event_h *event_p, bool *own_p)
{
    static const ps_kv_ready_t none = {NULL, NULL};
    *event_p = NULL;
    *own_p = false;
    if (ready == NULL)
        ready = &none;
    if ((ready->event == NULL && ready->stream == NULL && !on_default) ||
        ps_slice_in_host_mem(vals))
        return PS_OK; /* host memory is ready when the call is made */
    return ps__ready_event(ps_slice_mem_ops_kind(vals), ps_slice_device(vals), ready->event,
                           ready->stream, "kv request", event_p, own_p);
}

/* The server of each key of `kvs` by the user's slicer (*owner_p, the
 * caller's to free; NULL for no keys); *regroup_p when they are not in
 * key order. */
static ps_status_t slicer_owners(ps_kv_worker_t *w, const ps_kv_pairs_t *kvs, int **owner_p,
                                 int *regroup_p)
{
    size_t nk = ps_kv_pairs_num_keys(kvs);
    *owner_p = NULL;
    *regroup_p = 0;
    if (nk == 0)
        return PS_OK;
    const char *keys = ps_slice_ptr(&kvs->keys);
    ps_status_t st = ps_kv_check_sorted((const uint64_t *)(const void *)keys, nk);
    if (st != PS_OK)
        return st;
    int *owner = malloc(nk * sizeof(*owner));
    if (!owner)
        return PS_ERR_NO_MEMORY;
    st = w->slicer(w->slicer_arg, (const ps_key_t *)(const void *)keys, nk, w->num_servers,
                   owner);
    for (size_t i = 0; st == PS_OK && i < nk; i++) {
        if (owner[i] < 0 || owner[i] >= w->num_servers) {
            ps_error(PS_LOG_APP, "kv: the slicer sent key %zu to server %d (of %d)", i, owner[i],
                     w->num_servers);
            st = PS_ERR_INVALID_ARG;
        } else if (i && owner[i] < owner[i - 1]) {
            *regroup_p = 1;
        }
    }
    if (st != PS_OK) {
        free(owner);
        return st;
    }
    *owner_p = owner;
    return PS_OK;
}

static ps_status_t issue(ps_kv_worker_t *w, const ps_kv_pairs_t *push, const ps_kv_pairs_t *out,
                         int any, const ps_kv_ready_t *ready, int cmd, ps_kv_done_func_t done,
                         void *arg, int *ts_p)
{
    ps_status_t st;
    ps_stage_begin();
    if (!w || !(push ? push : out) || !ts_p)
        return PS_ERR_INVALID_ARG;
    if ((push && (st = check_pairs(push, "push")) != PS_OK) ||
        (out && (st = check_pairs(out, "pull")) != PS_OK))
        return st;
    /* A user slicer: its servers in key order slice the request as it is;
     * out of order, the request is regrouped (kv_regroup.h). */
    int *owner = NULL;
    ps__kv_regroup_t rg;
    int regrouped = 0;
    if (w->slicer && (st = slicer_owners(w, push ? push : out, &owner, &regrouped)) != PS_OK)
        return st;
    if (regrouped) {
        if (any) {
            ps_error(PS_LOG_APP, "kv pull_any: the slicer sends keys to servers out of key order");
            st = PS_ERR_INVALID_ARG;
        } else {
            st = ps__kv_regroup(push, out, owner, w->num_servers, &rg);
        }
        free(owner);
        owner = NULL;
        if (st != PS_OK)
            return st;
        push = push ? &rg.push : NULL;
        out = out ? &rg.out : NULL;
    }
    ps_mem_event_h ev = NULL;
    bool own = false;
    /* A push as an IPC handle is read by the server's process as soon as
     * the handle arrives, outside this process's stream order: what is
     * still queued on the device's default stream (a copy from pageable
     * memory returns before its DMA ends) must be done first. */
    bool on_default = push && w->device_ipc && !ps_slice_in_host_mem(&push->vals);
    st = PS_OK;
    if (push && (ready || on_default))
        st = ready_event(&push->vals, ready, on_default, &ev, &own);
    /* Likewise a pull whose destination goes as an IPC handle: the server
     * writes into it outside this process's stream order, so the work
     * already queued on the device's default stream (a kernel still
     * reading the old values) goes first, as a staged pull's copy would
     * in stream order. */
    if (st == PS_OK && ev == NULL && out && !any && w->device_ipc &&
        !ps_slice_in_host_mem(&out->vals))
        st = ready_event(&out->vals, NULL, true, &ev, &own);
    if (st != PS_OK) {
        free(owner);
        if (regrouped)
            ps__kv_regroup_free(&rg);
        return st;
    }
    /* Device values are staged per server, in send_part. */
    st = issue_checked(w, push, out, any, regrouped ? rg.owner : owner, regrouped ? &rg : NULL,
                       ev, &own, cmd, done, arg, ts_p);
    if (own)
        (void)ps_mem_event_destroy(ev); /* not handed to the ready queue */
    free(owner);
    if (regrouped)
        ps__kv_regroup_free(&rg);
    return st;
}

static ps_status_t issue_checked(ps_kv_worker_t *w, const ps_kv_pairs_t *push,
                                 const ps_kv_pairs_t *out, int any, const int *owner,
                                 ps__kv_regroup_t *rg, ps_mem_event_h ready, bool *own_ready_p,
                                 int cmd, ps_kv_done_func_t done, void *arg, int *ts_p)
{
    const ps_kv_pairs_t *req = push ? push : out;
    ps_status_t st;
    /* (The same window, as a push-pull usually passes, is equal at once.) */
    if (push && out && out->keys.len &&
        (out->keys.len != push->keys.len ||
         (ps_slice_ptr(&out->keys) != ps_slice_ptr(&push->keys) &&
          memcmp(ps_slice_ptr(&out->keys), ps_slice_ptr(&push->keys), out->keys.len) != 0))) {
        ps_error(PS_LOG_APP, "kv push-pull: the pull keys differ from the push keys");
        return PS_ERR_INVALID_ARG;
    }

    int ns = w->num_servers;
    size_t nk = ps_kv_pairs_num_keys(req);
    /* Scratch per server, on the stack for the usual few servers (this
     * runs for every request; three heap round trips showed up). */
    int peers_stack[ISSUE_STACK_SERVERS];
    ps_kv_slice_t push_stack[ISSUE_STACK_SERVERS], out_stack[ISSUE_STACK_SERVERS];
    const int on_heap = ns > ISSUE_STACK_SERVERS;
    ps_kv_slice_t *push_slices = NULL, *out_slices = NULL;
    int *peers = NULL;
    kv_req_t *r;
    if ((st = req_get(w, &r)) != PS_OK)
        return st;
    memset(r, 0, req_size(ns));
    atomic_init(&r->refs, 1); /* issue's own, for the sends below */
    r->w = w;
    r->done = done;
    r->done_arg = arg;
    r->num_parts = ns;
    r->pull = out != NULL;
    r->any = any;
    if (rg && rg->scatter) {
        /* The pull's values come back regrouped: copied into the caller's
         * destination at completion. */
        r->scatter = rg->scatter;
        rg->scatter = NULL;
        r->scatter_keys = rg->num_keys;
        r->scratch = ps_slice_ref(&rg->out.vals);
        r->user_dest = ps_slice_ref(&rg->dest);
    }

    st = PS_ERR_NO_MEMORY;
    if (!on_heap) {
        peers = peers_stack;
        push_slices = push ? push_stack : NULL;
        out_slices = out ? out_stack : NULL;
    } else if (!(peers = calloc((size_t)ns, sizeof(*peers))) ||
               (push && !(push_slices = calloc((size_t)ns, sizeof(*push_slices)))) ||
               (out && !(out_slices = calloc((size_t)ns, sizeof(*out_slices))))) {
        goto fail;
    }

    if (push && (st = slice_pairs(w, push, owner, push_slices)) != PS_OK)
        goto fail;
    if (out) {
        /* The destination is cut by the request's keys and the pull's own
         * lengths (or a uniform size). A push-pull's keys were just cut
         * (and checked): only the destination's values are left to cut. */
        r->elem_size = elem_size_of(out->type);
        r->type = out->type;
        if (push) {
            st = ps_kv_slice_vals(nk, out->lens.len ? ps_slice_ptr(&out->lens) : NULL,
                                  out->vals.len, r->elem_size, push_slices, ns, out_slices);
        } else {
            st = slice_pairs(w, out, owner, out_slices);
        }
        if (st != PS_OK)
            goto fail;
        r->uniform_bytes = nk > 1 ? out->vals.len / nk : out->vals.len; /* (no keys: no bytes) */
    }

    const ps_kv_slice_t *slices = push ? push_slices : out_slices;
    int num_peers = 0;
    for (int i = 0; i < ns; i++) {
        kv_part_t *p = &r->parts[i];
        const ps_kv_slice_t *s = &slices[i];
        if (s->key_end == s->key_begin)
            continue;
        p->server_id = w->server_ids[i];
        peers[num_peers++] = p->server_id;
        size_t kb = s->key_begin, ke = s->key_end;
        st = ps_slice_sub(&req->keys, kb * sizeof(ps_key_t), (ke - kb) * sizeof(ps_key_t),
                          &p->keys);
        if (st == PS_OK && out) {
            st = ps_slice_sub(&out->vals, out_slices[i].val_begin,
                              out_slices[i].val_end - out_slices[i].val_begin, &p->dest);
            if (st == PS_OK && out->lens.len)
                st = ps_slice_sub(&out->lens, kb * sizeof(int32_t), (ke - kb) * sizeof(int32_t),
                                  &p->lens);
        }
        if (st != PS_OK)
            goto fail;
    }
    atomic_init(&r->remaining, num_peers);

    /* The tracker's reference (dropped by worker_done, which may run on
     * another thread as soon as the request exists, e.g. for a peer
     * declared dead) and the count destroy waits on, both before it
     * exists. */
    int ts;
    atomic_store_explicit(&r->refs, 2, memory_order_relaxed); /* no other thread has r yet */
    atomic_fetch_add(&w->outstanding, 1);
    st = ps_customer_new_request_ctx(w->customer, num_peers > 0 ? num_peers : 1, peers,
                                     num_peers, r, &ts);
    if (st != PS_OK) {
        atomic_fetch_sub(&r->refs, 1); /* never the last: issue's own stays */
        outstanding_drop(w);
    }
    if (on_heap)
        free(peers);
    peers = NULL;
    if (st != PS_OK)
        goto fail;

    /* From here on a failure is the request's result, reported through the
     * callback and ps_kv_wait like any other. */
    *ts_p = ts;
    if (num_peers == 0) {
        /* No keys, so no server to ask: done at once (a server-sized pull
         * with an empty result). */
        ps_status_t kept = any ? keep_any_result(w, r, ts) : PS_OK;
        if (kept == PS_OK) {
            fire_callback(r, ts, PS_OK);
            ps_customer_add_response(w->customer, ts, 1);
        } else {
            ps_customer_fail_request(w->customer, ts, kept);
        }
    }
    if (ready != NULL) {
        st = defer_sends(w, r, ts, push, push_slices, req->type, cmd, ready, *own_ready_p);
        if (st == PS_OK)
            *own_ready_p = false; /* the queue's now */
        else
            ps_customer_fail_request(w->customer, ts, st);
    } else {
        send_parts(w, r, ts, push, push_slices, req->type, cmd);
    }
    release_retired(w); /* while the messages travel */
    atomic_fetch_add_explicit(&w->n_requests, 1, memory_order_relaxed);
    if (on_heap) {
        free(push_slices);
        free(out_slices);
    }
    req_unref(w, r);
    return PS_OK;

fail:
    if (on_heap) {
        free(peers);
        free(push_slices);
        free(out_slices);
    }
    req_unref(w, r);
    return st;
}

/* ---- public entry points ---- */

static ps_status_t copy_into_slice(const void *src, size_t len, ps_slice_t *slice_p)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    if (len == 0) {
        *slice_p = s;
        return PS_OK;
    }
    ps_status_t st = ps_slice_alloc(len, 0, &s);
    if (st != PS_OK)
        return st;
    memcpy(ps_slice_ptr(&s), src, len);
    *slice_p = s;
    return PS_OK;
}

static void unref_pairs(ps_kv_pairs_t *kvs)
{
    ps_slice_unref(&kvs->keys);
    ps_slice_unref(&kvs->vals);
    ps_slice_unref(&kvs->lens);
}

ps_status_t ps_kv_push(ps_kv_worker_t *worker, const ps_key_t *keys, size_t num_keys,
                       const void *vals, size_t vals_bytes, const int32_t *lens,
                       ps_data_type_t type, int cmd, ps_kv_done_func_t done, void *arg,
                       int *ts_p)
{
    if ((num_keys && !keys) || (vals_bytes && !vals))
        return PS_ERR_INVALID_ARG;
    ps_kv_pairs_t kvs = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, type};
    ps_status_t st;
    if ((st = copy_into_slice(keys, num_keys * sizeof(ps_key_t), &kvs.keys)) != PS_OK ||
        (st = copy_into_slice(vals, vals_bytes, &kvs.vals)) != PS_OK ||
        (lens && (st = copy_into_slice(lens, num_keys * sizeof(int32_t), &kvs.lens)) != PS_OK)) {
        unref_pairs(&kvs);
        return st;
    }
    st = issue(worker, &kvs, NULL, 0, NULL, cmd, done, arg, ts_p);
    unref_pairs(&kvs);
    return st;
}

ps_status_t ps_kv_pull(ps_kv_worker_t *worker, const ps_key_t *keys, size_t num_keys,
                       void *vals, size_t vals_bytes, const int32_t *lens,
                       ps_data_type_t type, int cmd, ps_kv_done_func_t done, void *arg,
                       int *ts_p)
{
    if ((num_keys && !keys) || (vals_bytes && !vals))
        return PS_ERR_INVALID_ARG;
    ps_kv_pairs_t kvs = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, type};
    ps_status_t st;
    /* Keys and lengths are copied; the values land in the caller's buffer,
     * wrapped without a copy (it must stay valid until completion). */
    if ((st = copy_into_slice(keys, num_keys * sizeof(ps_key_t), &kvs.keys)) != PS_OK ||
        (lens && (st = copy_into_slice(lens, num_keys * sizeof(int32_t), &kvs.lens)) != PS_OK) ||
        (vals_bytes && (st = ps_slice_wrap(vals, vals_bytes, NULL, NULL, &kvs.vals)) != PS_OK)) {
        unref_pairs(&kvs);
        return st;
    }
    st = issue(worker, NULL, &kvs, 0, NULL, cmd, done, arg, ts_p);
    unref_pairs(&kvs);
    return st;
}

ps_status_t ps_kv_zpush(ps_kv_worker_t *worker, const ps_kv_pairs_t *kvs, int cmd,
                        ps_kv_done_func_t done, void *arg, int *ts_p)
{
    if (!kvs)
        return PS_ERR_INVALID_ARG;
    return issue(worker, kvs, NULL, 0, NULL, cmd, done, arg, ts_p);
}

ps_status_t ps_kv_zpull(ps_kv_worker_t *worker, const ps_kv_pairs_t *kvs, int cmd,
                        ps_kv_done_func_t done, void *arg, int *ts_p)
{
    if (!kvs)
        return PS_ERR_INVALID_ARG;
    return issue(worker, NULL, kvs, 0, NULL, cmd, done, arg, ts_p);
}

ps_status_t ps_kv_zpushpull(ps_kv_worker_t *worker, const ps_kv_pairs_t *push,
                            const ps_kv_pairs_t *out, int cmd,
                            ps_kv_done_func_t done, void *arg, int *ts_p)
{
    if (!push || !out)
        return PS_ERR_INVALID_ARG;
    return issue(worker, push, out, 0, NULL, cmd, done, arg, ts_p);
}

ps_status_t ps_kv_zpush_when(ps_kv_worker_t *worker, const ps_kv_pairs_t *kvs,
                             const ps_kv_ready_t *ready, int cmd, ps_kv_done_func_t done,
                             void *arg, int *ts_p)
{
    if (!kvs)
        return PS_ERR_INVALID_ARG;
    return issue(worker, kvs, NULL, 0, ready, cmd, done, arg, ts_p);
}

ps_status_t ps_kv_zpushpull_when(ps_kv_worker_t *worker, const ps_kv_pairs_t *push,
                                 const ps_kv_pairs_t *out, const ps_kv_ready_t *ready, int cmd,
                                 ps_kv_done_func_t done, void *arg, int *ts_p)
{
    if (!push || !out)
        return PS_ERR_INVALID_ARG;
    return issue(worker, push, out, 0, ready, cmd, done, arg, ts_p);
}

ps_status_t ps_kv_pull_any(ps_kv_worker_t *worker, const ps_slice_t *keys, ps_data_type_t type,
                           int cmd, ps_kv_done_func_t done, void *arg, int *ts_p)
{
    if (!keys)
        return PS_ERR_INVALID_ARG;
    ps_kv_pairs_t kvs = {.keys = *keys, .type = type};
    return issue(worker, NULL, &kvs, 1, NULL, cmd, done, arg, ts_p);
}

ps_status_t ps_kv_pull_result(ps_kv_worker_t *worker, int ts, ps_slice_t *vals_p,
                              ps_slice_t *lens_p)
{
    if (!worker || !vals_p || !lens_p)
        return PS_ERR_INVALID_ARG;
    ps_status_t st = PS_ERR_NOT_FOUND;
    ps_mutex_lock(&worker->lock);
    for (size_t i = 0; i < worker->num_results; i++) {
        if (worker->results[i].ts != ts)
            continue;
        *vals_p = worker->results[i].vals;
        *lens_p = worker->results[i].lens;
        worker->results[i] = worker->results[--worker->num_results];
        st = PS_OK;
        break;
    }
    ps_mutex_unlock(&worker->lock);
    return st;
}

ps_status_t ps_kv_wait(ps_kv_worker_t *worker, int ts, int timeout_ms)
{
    if (!worker)
        return PS_ERR_INVALID_ARG;
    ps_status_t st = ps_customer_wait(worker->customer, ts, timeout_ms);
    ps_stage_waited();
    return st;
}

void ps_kv_worker_stats(ps_kv_worker_t *worker, ps_kv_worker_stats_t *stats_p)
{
    if (!worker || !stats_p)
        return;
    stats_p->requests = atomic_load_explicit(&worker->n_requests, memory_order_relaxed);
    stats_p->messages = atomic_load_explicit(&worker->n_messages, memory_order_relaxed);
    stats_p->pull_bytes_in_place = atomic_load_explicit(&worker->n_in_place, memory_order_relaxed);
    stats_p->pull_bytes_copied = atomic_load_explicit(&worker->n_copied, memory_order_relaxed);
    stats_p->pull_bytes_small = atomic_load_explicit(&worker->n_small, memory_order_relaxed);
    stats_p->lane_messages = atomic_load_explicit(&worker->n_lane, memory_order_relaxed);
    stats_p->push_bytes_staged = atomic_load_explicit(&worker->n_staged, memory_order_relaxed);
    stats_p->push_bytes_ipc = atomic_load_explicit(&worker->n_ipc, memory_order_relaxed);
    stats_p->pull_bytes_ipc = atomic_load_explicit(&worker->n_pull_ipc, memory_order_relaxed);
    stats_p->pull_bytes_staged =
        atomic_load_explicit(&worker->n_pull_staged, memory_order_relaxed);
    stats_p->pull_bytes_piped =
        atomic_load_explicit(&worker->n_pull_piped, memory_order_relaxed);
    stats_p->push_bytes_piped =
        atomic_load_explicit(&worker->n_push_piped, memory_order_relaxed);
}

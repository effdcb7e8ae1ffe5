/*
 * test_benchmark: the seed's KV benchmark (ps-lite tests/test_benchmark.cc),
 * rewritten on ps's public API.
 *
 *   test_benchmark [len_bytes=1024000] [repeat=10] [mode=1] [--json]
 *
 * The role comes from DMLC_ROLE (and the rest of the DMLC_* bootstrap), so
 * the same binary is the scheduler, a server and a worker, as upstream.
 *
 * Modes (as upstream, plus 4):
 *   0 push-then-pull: `repeat` times, push key s to server s (then wait) for
 *     every server; then the same with pulls; prints the total times.
 *   1 push-pull, 2 push-only, 3 pull-only: each round issues a push and/or
 *     pull of every key, then waits for all of them; every LOG_DURATION
 *     rounds prints the goodput of those rounds; stops after
 *     TOTAL_DURATION rounds.
 *   4 latency: each round does one push-pull round trip (one request that
 *     pushes the value and returns it) per key, one at a time.
 *
 * Environment (upstream names and defaults): NUM_KEY_PER_SERVER (40),
 * LOG_DURATION (10), TOTAL_DURATION (2000000000), BENCHMARK_NTHREAD (1; one
 * KV worker, customer id = thread index, per thread), DEBUG_MODE (0; 1 makes
 * the server keep every pushed value and the worker check what it pulls).
 * ENABLE_RECV_BUFFER=1 makes each server register a receive buffer per
 * (worker rank, key) it owns (ps_kv_server_register_recv_buffer, as
 * upstream's RegisterRecvBuffer): pushes land there where the van receives
 * in place, and the server reports how many did. Pull responses land in
 * the worker's buffer whenever the van can (PS_CAP_RECV_INTO_DEST).
 * PS_BENCH_JSON=1 (or --json) adds one JSON line per report.
 * TEST_NUM_GPU_WORKER > 0 puts the workers' value buffers in device memory,
 * TEST_NUM_GPU_SERVER > 0 the servers' store (StepMesh's cpu2gpu, gpu2gpu,
 * gpu2cpu pairings; tests/test.sh sets them); the device is of the kind
 * PS_BENCH_DEVICE_KIND names: cuda (default) or emu (the emulated device).
 *
 * Keys as upstream: NUM_KEY_PER_SERVER x servers keys; key i goes to server
 * i % servers as ps key range_begin(server) + i. Every key has its own
 * page-aligned value buffer, sent and received zero-copy; an initial push of
 * every key warms up (and sizes the server's store) before measuring.
 *
 * Output per report (upstream's line; upstream labelled the latency "ns"
 * although the value was microseconds):
 *   [tid]<TAB>Application goodput: G Gbps.<TAB>Avg latency = L us per key
 * where G = 8 * len * keys * rounds / elapsed ns (push-pull counts one
 * direction) and L = elapsed / rounds / keys in microseconds. Each process
 * ends with its CPU time per GB its van sent and received (getrusage).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/gpu/mem.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"
#include "tests/bench/bench_stats.h"

enum {
    MODE_PUSH_THEN_PULL = 0,
    MODE_PUSH_PULL = 1,
    MODE_PUSH_ONLY = 2,
    MODE_PULL_ONLY = 3,
    MODE_LATENCY = 4,
};

static const char *const k_mode_names[] = {"push_then_pull", "push_pull", "push_only",
                                           "pull_only", "latency"};

#define PAGE_ALIGN 4096
/* Waits for the other processes (the end of a benchmark of unknown length). */
#define LONG_WAIT_MS (24 * 3600 * 1000)

typedef struct {
    size_t len;
    int repeat;
    int mode;
    int json;
    int keys_per_server;
    long long log_duration;
    long long total_duration;
    int nthread;
    int debug;
    int recv_buffer;   /* ENABLE_RECV_BUFFER */
    int worker_device; /* TEST_NUM_GPU_WORKER > 0 */
    int server_device; /* TEST_NUM_GPU_SERVER > 0 */
    ps_mem_kind_t device_kind;
} bench_config_t;

static bench_config_t g_cfg;
static const ps_mem_ops_t *g_dev; /* the device kind's ops, when one side uses it */
static ps_postoffice_t *g_po;
static pthread_mutex_t g_print_lock = PTHREAD_MUTEX_INITIALIZER;

static long long env_ll(const char *name, long long dflt)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end;
    errno = 0;
    double d = strtod(v, &end); /* upstream values like 2e9 are common */
    if (errno != 0 || *end != '\0') {
        fprintf(stderr, "test_benchmark: ignoring %s=%s: not a number\n", name, v);
        return dflt;
    }
    return (long long)d;
}

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_print_lock);
    vprintf(fmt, ap);
    pthread_mutex_unlock(&g_print_lock);
    va_end(ap);
}

static uint64_t traffic_bytes(void)
{
    uint64_t sent = 0, recv = 0;
    ps_postoffice_traffic(g_po, &sent, &recv);
    return sent + recv;
}

/* ------------------------------------------------------------------ server */

typedef struct {
    uint64_t key;
    int used;
    ps_slice_t val;
} store_entry_t;

/* The server's values: one page-aligned buffer per key, made on its first
 * push (as upstream). Later pushes are not copied unless DEBUG_MODE, where
 * every push gets a fresh buffer (responses still being sent keep theirs). */
typedef struct {
    pthread_mutex_t lock;
    store_entry_t *slots;
    size_t cap; /* power of two */
    size_t count;
    int debug;
    /* ENABLE_RECV_BUFFER: the buffers registered, one per (rank, key). */
    struct bench_recv_buf {
        int rank;
        uint64_t key;
        ps_slice_t buf;
    } *recv_bufs;
    size_t num_recv_bufs;
    atomic_ullong pushes, pushes_landed;
} bench_store_t;

static size_t store_hash(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static store_entry_t *store_find(bench_store_t *st, uint64_t key)
{
    for (size_t i = store_hash(key, st->cap);; i = (i + 1) & (st->cap - 1)) {
        if (!st->slots[i].used || st->slots[i].key == key)
            return &st->slots[i];
    }
}

static int store_grow(bench_store_t *st)
{
    size_t ncap = st->cap ? st->cap * 2 : 256;
    store_entry_t *old = st->slots;
    size_t ocap = st->cap;
    st->slots = calloc(ncap, sizeof(*st->slots));
    if (st->slots == NULL) {
        st->slots = old;
        return -1;
    }
    st->cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].used)
            *store_find(st, old[i].key) = old[i];
    }
    free(old);
    return 0;
}

static void store_destroy(bench_store_t *st)
{
    for (size_t i = 0; i < st->cap; i++) {
        if (st->slots[i].used)
            ps_slice_unref(&st->slots[i].val);
    }
    free(st->slots);
    pthread_mutex_destroy(&st->lock);
}

/* ------------------------------------------------- host or device buffers */

/* `len` bytes, page-aligned host memory or (device) the device kind's. */
static ps_status_t buf_new(int device, size_t len, ps_slice_t *slice_p)
{
    if (!device || len == 0)
        return ps_slice_alloc(len, PAGE_ALIGN, slice_p);
    return ps_mem_slice_alloc(g_cfg.device_kind, 0, len, slice_p);
}

static ps_status_t buf_write(const ps_slice_t *s, size_t off, const void *src, size_t len)
{
    if (ps_slice_in_host_mem(s)) {
        memcpy((char *)ps_slice_ptr(s) + off, src, len);
        return PS_OK;
    }
    return g_dev->copy_from_host((char *)ps_slice_ptr(s) + off, src, len);
}

static ps_status_t buf_read(void *dst, const ps_slice_t *s, size_t off, size_t len)
{
    if (ps_slice_in_host_mem(s)) {
        memcpy(dst, (const char *)ps_slice_ptr(s) + off, len);
        return PS_OK;
    }
    return g_dev->copy_to_host(dst, (const char *)ps_slice_ptr(s) + off, len);
}

static ps_status_t buf_set(const ps_slice_t *s, int byte)
{
    if (ps_slice_in_host_mem(s)) {
        memset(ps_slice_ptr(s), byte, s->len);
        return PS_OK;
    }
    return g_dev->memset(ps_slice_ptr(s), byte, s->len);
}

/* A new buffer of the server's store holding a copy of `src` (or zeros). */
static ps_status_t copy_to_new(const void *src, size_t len, ps_slice_t *slice_p)
{
    ps_status_t st = buf_new(g_cfg.server_device, len, slice_p);
    if (st != PS_OK || len == 0)
        return st;
    st = src != NULL ? buf_write(slice_p, 0, src, len) : buf_set(slice_p, 0);
    if (st != PS_OK)
        ps_slice_unref(slice_p);
    return st;
}

/* Stores one pushed value (caller holds the lock). */
static ps_status_t store_put(bench_store_t *st, uint64_t key, const void *data, size_t len)
{
    if ((st->count + 1) * 2 > st->cap && store_grow(st) != 0)
        return PS_ERR_NO_MEMORY;
    store_entry_t *e = store_find(st, key);
    if (e->used && e->val.len == len && !st->debug)
        return PS_OK;
    ps_slice_t fresh;
    ps_status_t s = copy_to_new(data, len, &fresh);
    if (s != PS_OK)
        return s;
    if (e->used) {
        ps_slice_unref(&e->val);
    } else {
        e->used = 1;
        e->key = key;
        st->count++;
    }
    e->val = fresh;
    return PS_OK;
}

/* Byte length of each key of a request: per-key lengths (in elements) or
 * an even split of the values. */
static size_t key_bytes(const ps_kv_pairs_t *kvs, size_t i, size_t n, size_t total)
{
    if (kvs->lens.len >= n * sizeof(int32_t)) {
        const int32_t *lens = ps_slice_ptr(&kvs->lens);
        size_t esize = ps_data_type_size(kvs->type);
        return (size_t)lens[i] * (esize ? esize : 1);
    }
    return n ? total / n : 0;
}

static void server_handle(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                          ps_kv_server_t *server)
{
    bench_store_t *st = arg;
    size_t n = ps_kv_pairs_num_keys(req);
    const ps_key_t *keys = ps_slice_ptr(&req->keys);
    ps_status_t s = PS_OK;

    if (meta->push && st->num_recv_bufs > 0) {
        atomic_fetch_add(&st->pushes, 1);
        int rank = ps_id_to_rank(meta->sender);
        for (size_t i = 0; i < st->num_recv_bufs; i++) {
            const struct bench_recv_buf *b = &st->recv_bufs[i];
            if (b->rank == rank && b->key == meta->key &&
                ps_slice_ptr(&req->vals) == ps_slice_ptr(&b->buf))
                atomic_fetch_add(&st->pushes_landed, 1);
        }
    }
    pthread_mutex_lock(&st->lock);
    if (meta->push) {
        const char *vals = ps_slice_ptr(&req->vals);
        size_t off = 0;
        for (size_t i = 0; i < n && s == PS_OK; i++) {
            size_t kb = key_bytes(req, i, n, req->vals.len);
            if (off + kb > req->vals.len) {
                s = PS_ERR_INVALID_ARG;
                break;
            }
            s = store_put(st, keys[i], vals ? vals + off : NULL, kb);
            off += kb;
        }
    }
    if (!meta->pull || s != PS_OK) {
        pthread_mutex_unlock(&st->lock);
        if (s != PS_OK)
            fprintf(stderr, "test_benchmark: server: cannot store a push: %s\n", ps_status_str(s));
        ps_kv_server_respond(server, meta, NULL);
        return;
    }

    ps_kv_pairs_t res = {.keys = req->keys, .vals = PS_SLICE_EMPTY_INIT,
                         .lens = PS_SLICE_EMPTY_INIT, .type = PS_DATA_CHAR};
    size_t want = n ? (size_t)meta->val_len / n : 0;
    if (n == 1) {
        store_entry_t *e = store_find(st, keys[0]);
        if (e->used)
            res.vals = ps_slice_ref(&e->val);
        else
            s = copy_to_new(NULL, want, &res.vals); /* pulled before any push */
    } else {
        /* Several keys in one request: one contiguous copy, in host memory. */
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            store_entry_t *e = store_find(st, keys[i]);
            total += e->used ? e->val.len : want;
        }
        if ((s = ps_slice_alloc(total, PAGE_ALIGN, &res.vals)) == PS_OK)
            memset(ps_slice_ptr(&res.vals), 0, total);
        char *dst = s == PS_OK ? ps_slice_ptr(&res.vals) : NULL;
        for (size_t i = 0; i < n && dst != NULL && s == PS_OK; i++) {
            store_entry_t *e = store_find(st, keys[i]);
            size_t kb = e->used ? e->val.len : want;
            if (e->used)
                s = buf_read(dst, &e->val, 0, kb);
            dst += kb;
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (s != PS_OK)
        fprintf(stderr, "test_benchmark: server: cannot answer a pull: %s\n", ps_status_str(s));
    ps_kv_server_respond(server, meta, &res);
    ps_slice_unref(&res.vals);
}

/* ENABLE_RECV_BUFFER: a buffer of len bytes for each (worker rank, key of
 * this server), registered with the server. */
static ps_status_t register_recv_buffers(bench_store_t *st, ps_kv_server_t *server)
{
    int ns = ps_postoffice_num_servers(g_po), nw = ps_postoffice_num_workers(g_po);
    int me = ps_postoffice_my_rank(g_po);
    size_t nkeys = (size_t)g_cfg.keys_per_server * (size_t)ns;
    uint64_t begin, end;
    ps_status_t s = ps_postoffice_server_key_range(g_po, me, &begin, &end);
    st->recv_bufs = calloc(nkeys * (size_t)nw, sizeof(*st->recv_bufs));
    if (s == PS_OK && st->recv_bufs == NULL)
        s = PS_ERR_NO_MEMORY;
    for (int r = 0; r < nw && s == PS_OK; r++) {
        for (size_t i = (size_t)me; i < nkeys && s == PS_OK; i += (size_t)ns) {
            struct bench_recv_buf *b = &st->recv_bufs[st->num_recv_bufs];
            b->rank = r;
            b->key = begin + i;
            if ((s = buf_new(g_cfg.server_device, g_cfg.len, &b->buf)) != PS_OK)
                break;
            st->num_recv_bufs++;
            s = ps_kv_server_register_recv_buffer(server, r, b->key, &b->buf);
        }
    }
    return s;
}

/* ------------------------------------------------------------------ worker */

typedef struct {
    uint64_t issue_ns;
    _Atomic uint64_t done_ns;
    atomic_int status;
    int ts;
} req_slot_t;

typedef struct {
    int tid;
    ps_kv_worker_t *kv;
    size_t nkeys;
    int nservers;
    ps_slice_t keybuf;     /* every ps key, in order */
    ps_slice_t *key_slices;
    ps_slice_t *vals;      /* pushed (and, except in push-pull, pulled) */
    ps_slice_t *pulls;     /* push-pull: pulls land apart from the pushed bytes */
    req_slot_t *slots;     /* two per key */
    int failed;
    bench_hist_t window;   /* request latencies of the current report */
    bench_hist_t total;
    uint64_t checked_bytes;
} worker_ctx_t;

static void on_done(void *arg, int ts, ps_status_t status)
{
    req_slot_t *slot = arg;
    (void)ts;
    atomic_store_explicit(&slot->status, (int)status, memory_order_relaxed);
    atomic_store_explicit(&slot->done_ns, bench_now_ns(), memory_order_release);
}

static void slot_arm(req_slot_t *slot, uint64_t now)
{
    slot->issue_ns = now;
    atomic_store_explicit(&slot->done_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->status, PS_OK, memory_order_relaxed);
}

static ps_kv_pairs_t pairs_of(worker_ctx_t *w, size_t i, const ps_slice_t *vals)
{
    ps_kv_pairs_t kv = {.keys = w->key_slices[i], .vals = *vals,
                        .lens = PS_SLICE_EMPTY_INIT, .type = PS_DATA_CHAR};
    return kv;
}

static int check(worker_ctx_t *w, ps_status_t s, const char *what, size_t key)
{
    if (s == PS_OK)
        return 0;
    fprintf(stderr, "[%d]\t%s of key %zu failed: %s\n", w->tid, what, key, ps_status_str(s));
    w->failed = 1;
    return -1;
}

static int issue(worker_ctx_t *w, size_t i, int pull, req_slot_t *slot)
{
    ps_kv_pairs_t kv;
    ps_status_t s;
    if (pull) {
        kv = pairs_of(w, i, w->pulls != NULL ? &w->pulls[i] : &w->vals[i]);
        s = ps_kv_zpull(w->kv, &kv, 0, on_done, slot, &slot->ts);
    } else {
        kv = pairs_of(w, i, &w->vals[i]);
        s = ps_kv_zpush(w->kv, &kv, 0, on_done, slot, &slot->ts);
    }
    return check(w, s, pull ? "pull" : "push", i);
}

/* Waits for a request; returns its completion time (0 on failure). */
static uint64_t finish(worker_ctx_t *w, size_t i, req_slot_t *slot, const char *what)
{
    ps_status_t s = ps_kv_wait(w->kv, slot->ts, -1);
    if (s == PS_OK)
        s = (ps_status_t)atomic_load_explicit(&slot->status, memory_order_relaxed);
    if (check(w, s, what, i) != 0)
        return 0;
    uint64_t done = atomic_load_explicit(&slot->done_ns, memory_order_acquire);
    return done ? done : bench_now_ns(); /* callback not run (should not happen) */
}

/* DEBUG_MODE: the value of key i is a pattern of the key's index. */
static ps_status_t fill_pattern(const ps_slice_t *dst, size_t len, size_t key)
{
    unsigned char *p = malloc(len);
    if (p == NULL)
        return PS_ERR_NO_MEMORY;
    for (size_t b = 0; b < len; b++)
        p[b] = (unsigned char)(key * 131 + b * 7 + 1);
    ps_status_t st = buf_write(dst, 0, p, len);
    free(p);
    return st;
}

static int check_pattern_bytes(worker_ctx_t *w, const unsigned char *p, size_t len, size_t key);

/* Checks the pattern in a buffer of host or device memory. */
static int check_pattern(worker_ctx_t *w, const ps_slice_t *src, size_t len, size_t key)
{
    if (ps_slice_in_host_mem(src))
        return check_pattern_bytes(w, ps_slice_ptr(src), len, key);
    unsigned char *p = malloc(len);
    int rc = -1;
    if (p == NULL || buf_read(p, src, 0, len) != PS_OK) {
        fprintf(stderr, "[%d]	DEBUG_MODE: cannot read key %zu back from device memory\n",
                w->tid, key);
        w->failed = 1;
    } else {
        rc = check_pattern_bytes(w, p, len, key);
    }
    free(p);
    return rc;
}

static int check_pattern_bytes(worker_ctx_t *w, const unsigned char *p, size_t len, size_t key)
{
    for (size_t b = 0; b < len; b++) {
        if (p[b] != (unsigned char)(key * 131 + b * 7 + 1)) {
            fprintf(stderr, "[%d]\tDEBUG_MODE: key %zu byte %zu pulled 0x%02x, pushed 0x%02x\n",
                    w->tid, key, b, p[b], (unsigned char)(key * 131 + b * 7 + 1));
            w->failed = 1;
            return -1;
        }
    }
    w->checked_bytes += len;
    return 0;
}

static int worker_setup(worker_ctx_t *w)
{
    ps_status_t s = ps_kv_worker_create(g_po, 0, w->tid, &w->kv);
    if (s != PS_OK) {
        fprintf(stderr, "[%d]\tcannot create the KV worker: %s\n", w->tid, ps_status_str(s));
        return -1;
    }
    w->nservers = ps_postoffice_num_servers(g_po);
    w->nkeys = (size_t)g_cfg.keys_per_server * (size_t)w->nservers;
    w->key_slices = calloc(w->nkeys, sizeof(ps_slice_t));
    w->vals = calloc(w->nkeys, sizeof(ps_slice_t));
    w->slots = calloc(2 * w->nkeys, sizeof(req_slot_t));
    if (g_cfg.mode == MODE_PUSH_PULL || g_cfg.mode == MODE_LATENCY)
        w->pulls = calloc(w->nkeys, sizeof(ps_slice_t));
    if (w->key_slices == NULL || w->vals == NULL || w->slots == NULL ||
        ((g_cfg.mode == MODE_PUSH_PULL || g_cfg.mode == MODE_LATENCY) && w->pulls == NULL))
        return check(w, PS_ERR_NO_MEMORY, "setup", 0);
    if (check(w, ps_slice_alloc(w->nkeys * sizeof(ps_key_t), 64, &w->keybuf), "setup", 0))
        return -1;
    ps_key_t *keys = ps_slice_ptr(&w->keybuf);
    for (size_t i = 0; i < w->nkeys; i++) {
        int server = (int)(i % (size_t)w->nservers);
        uint64_t begin, end;
        if (check(w, ps_postoffice_server_key_range(g_po, server, &begin, &end), "key range", i))
            return -1;
        keys[i] = begin + i;
        if (check(w, ps_slice_sub(&w->keybuf, i * sizeof(ps_key_t), sizeof(ps_key_t),
                                  &w->key_slices[i]), "setup", i) ||
            check(w, buf_new(g_cfg.worker_device, g_cfg.len, &w->vals[i]), "setup", i) ||
            check(w, g_cfg.debug ? fill_pattern(&w->vals[i], g_cfg.len, i)
                                 : buf_set(&w->vals[i], 1), "setup", i))
            return -1;
        if (w->pulls != NULL &&
            (check(w, buf_new(g_cfg.worker_device, g_cfg.len, &w->pulls[i]), "setup", i) ||
             check(w, buf_set(&w->pulls[i], 0), "setup", i)))
            return -1;
    }
    /* Warm-up, as upstream: every key pushed once (the server sizes its
     * store, connections and buffers get going). */
    for (size_t i = 0; i < w->nkeys; i++) {
        slot_arm(&w->slots[i], bench_now_ns());
        if (issue(w, i, 0, &w->slots[i]))
            return -1;
    }
    for (size_t i = 0; i < w->nkeys; i++) {
        if (finish(w, i, &w->slots[i], "warm-up push") == 0)
            return -1;
    }
    return 0;
}

static void worker_teardown(worker_ctx_t *w)
{
    if (w->kv != NULL)
        ps_kv_worker_destroy(w->kv);
    for (size_t i = 0; i < w->nkeys; i++) {
        if (w->key_slices)
            ps_slice_unref(&w->key_slices[i]);
        if (w->vals)
            ps_slice_unref(&w->vals[i]);
        if (w->pulls)
            ps_slice_unref(&w->pulls[i]);
    }
    ps_slice_unref(&w->keybuf);
    free(w->key_slices);
    free(w->vals);
    free(w->pulls);
    free(w->slots);
}

/* One report: the upstream line, and a JSON line when asked. */
static void report(worker_ctx_t *w, const char *event, const char *phase, size_t keys,
                   long long rounds, uint64_t elapsed_ns, const bench_hist_t *h,
                   double cpu_s, uint64_t moved)
{
    double ns = elapsed_ns ? (double)elapsed_ns : 1.0;
    double gbps = 8.0 * (double)g_cfg.len * (double)keys * (double)rounds / ns;
    double lat_us = rounds && keys ? ns / (double)rounds / (double)keys / 1000.0 : 0.0;
    double gb = (double)moved / 1e9;
    if (strcmp(event, "window") == 0)
        out("[%d]\tApplication goodput: %.4f Gbps.\tAvg latency = %.3f us per key\n", w->tid,
            gbps, lat_us);
    else
        out("[%d]\t%s%s%s: %lld rounds of %zu keys x %zu bytes: goodput %.4f Gbps, "
            "avg latency %.3f us per key, request latency p50 %.1f us p99 %.1f us, "
            "cpu %.3f s/GB\n", w->tid, event, phase ? " " : "", phase ? phase : "", rounds,
            keys, g_cfg.len, gbps, lat_us, (double)bench_hist_quantile(h, 0.5) / 1e3,
            (double)bench_hist_quantile(h, 0.99) / 1e3, gb > 0 ? cpu_s / gb : 0.0);
    if (!g_cfg.json)
        return;
    const char *bp = getenv("PS_BUSY_POLL");
    out("{\"bench\":\"test_benchmark\",\"event\":\"%s\",\"phase\":\"%s\",\"tid\":%d,"
        "\"worker_rank\":%d,\"mode\":%d,\"mode_name\":\"%s\",\"len\":%zu,\"keys\":%zu,"
        "\"servers\":%d,\"workers\":%d,\"threads\":%d,\"rounds\":%lld,\"elapsed_s\":%.6f,"
        "\"gbps\":%.6f,\"lat_us_mean\":%.3f,\"lat_us_p50\":%.3f,\"lat_us_p99\":%.3f,"
        "\"lat_us_max\":%.3f,\"requests\":%" PRIu64 ",\"cpu_s\":%.6f,\"gb_moved\":%.6f,"
        "\"cpu_s_per_gb\":%.6f,\"busy_poll\":%d,\"van\":\"%s\"}\n",
        event, phase ? phase : "", w->tid, ps_postoffice_my_rank(g_po), g_cfg.mode,
        k_mode_names[g_cfg.mode], g_cfg.len, keys, w->nservers,
        ps_postoffice_num_workers(g_po), g_cfg.nthread, rounds, ns / 1e9, gbps, lat_us,
        (double)bench_hist_quantile(h, 0.5) / 1e3, (double)bench_hist_quantile(h, 0.99) / 1e3,
        (double)h->max / 1e3, h->count, cpu_s, gb, gb > 0 ? cpu_s / gb : 0.0,
        bp != NULL && atoi(bp) != 0, ps_postoffice_van_name(g_po));
}

/* Mode 0: sequential push (then pull) of key s to server s, `repeat` times. */
static void run_push_then_pull(worker_ctx_t *w)
{
    size_t n = (size_t)w->nservers;
    for (int pull = 0; pull <= 1 && !w->failed; pull++) {
        bench_hist_reset(&w->window);
        uint64_t total_ns = 0;
        double cpu0 = bench_cpu_seconds();
        uint64_t moved0 = traffic_bytes();
        for (int r = 0; r < g_cfg.repeat && !w->failed; r++) {
            uint64_t start = bench_now_ns();
            for (size_t s = 0; s < n && !w->failed; s++) {
                req_slot_t *slot = &w->slots[s];
                uint64_t t0 = bench_now_ns();
                slot_arm(slot, t0);
                if (issue(w, s, pull, slot))
                    break;
                uint64_t done = finish(w, s, slot, pull ? "pull" : "push");
                if (done)
                    bench_hist_add(&w->window, done - t0);
            }
            total_ns += bench_now_ns() - start;
        }
        if (w->failed)
            break;
        out("%s %zu bytes to each server, repeat=%d, total_time=%.3f ms\n",
            pull ? "pull" : "push", g_cfg.len, g_cfg.repeat, (double)total_ns / 1e6);
        report(w, "summary", pull ? "pull" : "push", n, g_cfg.repeat, total_ns, &w->window,
               bench_cpu_seconds() - cpu0, traffic_bytes() - moved0);
    }
}

/* The timed rounds of modes 1-4: a "window" line every LOG_DURATION rounds,
 * a "summary" line at the end. */
typedef struct {
    long long rounds, window_rounds;
    uint64_t start, win_start;
    double cpu0, win_cpu0;
    uint64_t moved0, win_moved0;
} rounds_clock_t;

static void rounds_begin(worker_ctx_t *w, rounds_clock_t *rc)
{
    bench_hist_reset(&w->window);
    bench_hist_reset(&w->total);
    rc->rounds = rc->window_rounds = 0;
    rc->start = rc->win_start = bench_now_ns();
    rc->cpu0 = rc->win_cpu0 = bench_cpu_seconds();
    rc->moved0 = rc->win_moved0 = traffic_bytes();
}

/* After each round: counts it, and reports the window when it is full. */
static void rounds_count(worker_ctx_t *w, rounds_clock_t *rc)
{
    rc->rounds++;
    rc->window_rounds++;
    if (rc->rounds % g_cfg.log_duration != 0)
        return;
    uint64_t end = bench_now_ns();
    double cpu = bench_cpu_seconds();
    uint64_t moved = traffic_bytes();
    report(w, "window", NULL, w->nkeys, rc->window_rounds, end - rc->win_start, &w->window,
           cpu - rc->win_cpu0, moved - rc->win_moved0);
    bench_hist_merge(&w->total, &w->window);
    bench_hist_reset(&w->window);
    rc->window_rounds = 0;
    rc->win_start = end;
    rc->win_cpu0 = cpu;
    rc->win_moved0 = moved;
}

static void rounds_end(worker_ctx_t *w, const rounds_clock_t *rc)
{
    if (w->failed || rc->rounds == 0)
        return;
    bench_hist_merge(&w->total, &w->window);
    report(w, "summary", NULL, w->nkeys, rc->rounds, bench_now_ns() - rc->start, &w->total,
           bench_cpu_seconds() - rc->cpu0, traffic_bytes() - rc->moved0);
}

/* Modes 1-3: all keys in flight each round. */
static void run_rounds(worker_ctx_t *w)
{
    int do_push = g_cfg.mode != MODE_PULL_ONLY;
    int do_pull = g_cfg.mode != MODE_PUSH_ONLY;
    rounds_clock_t rc;
    rounds_begin(w, &rc);

    while (rc.rounds < g_cfg.total_duration && !w->failed) {
        uint64_t now = bench_now_ns();
        for (size_t i = 0; i < w->nkeys && !w->failed; i++) {
            if (do_push) {
                slot_arm(&w->slots[2 * i], now);
                issue(w, i, 0, &w->slots[2 * i]);
            }
            if (do_pull && !w->failed) {
                slot_arm(&w->slots[2 * i + 1], now);
                issue(w, i, 1, &w->slots[2 * i + 1]);
            }
        }
        for (size_t i = 0; i < w->nkeys && !w->failed; i++) {
            uint64_t done = 0, d;
            if (do_push && (d = finish(w, i, &w->slots[2 * i], "push")) > done)
                done = d;
            if (do_pull && (d = finish(w, i, &w->slots[2 * i + 1], "pull")) > done)
                done = d;
            if (w->failed)
                break;
            bench_hist_add(&w->window, done - now);
            if (g_cfg.debug && do_pull)
                check_pattern(w, w->pulls ? &w->pulls[i] : &w->vals[i],
                              g_cfg.len, i);
        }
        if (w->failed)
            break;
        rounds_count(w, &rc);
    }
    rounds_end(w, &rc);
}

/* Mode 4: one push-pull round trip at a time (small-message latency). */
static void run_latency(worker_ctx_t *w)
{
    rounds_clock_t rc;
    rounds_begin(w, &rc);

    while (rc.rounds < g_cfg.total_duration && !w->failed) {
        for (size_t i = 0; i < w->nkeys && !w->failed; i++) {
            req_slot_t *slot = &w->slots[i];
            ps_kv_pairs_t push = pairs_of(w, i, &w->vals[i]);
            ps_kv_pairs_t pull = pairs_of(w, i, &w->pulls[i]);
            uint64_t t0 = bench_now_ns();
            slot_arm(slot, t0);
            if (check(w, ps_kv_zpushpull(w->kv, &push, &pull, 0, on_done, slot, &slot->ts),
                      "push-pull", i))
                break;
            uint64_t done = finish(w, i, slot, "push-pull");
            if (done)
                bench_hist_add(&w->window, done - t0);
            if (g_cfg.debug && done)
                check_pattern(w, &w->pulls[i], g_cfg.len, i);
        }
        if (w->failed)
            break;
        rounds_count(w, &rc);
    }
    rounds_end(w, &rc);
}

static void *worker_thread(void *arg)
{
    worker_ctx_t *w = arg;
    if (worker_setup(w) == 0) {
        switch (g_cfg.mode) {
        case MODE_PUSH_THEN_PULL:
            run_push_then_pull(w);
            break;
        case MODE_LATENCY:
            run_latency(w);
            break;
        default:
            run_rounds(w);
            break;
        }
        if (g_cfg.debug && !w->failed && w->checked_bytes)
            out("[%d]\tDEBUG_MODE: %" PRIu64 " pulled bytes checked\n", w->tid,
                w->checked_bytes);
    }
    worker_teardown(w);
    return NULL;
}

static int run_worker(void)
{
    int n = g_cfg.nthread;
    worker_ctx_t *ctx = calloc((size_t)n, sizeof(worker_ctx_t));
    pthread_t *th = calloc((size_t)n, sizeof(pthread_t));
    int failed = 0;
    if (ctx == NULL || th == NULL) {
        free(ctx);
        free(th);
        fprintf(stderr, "test_benchmark: out of memory\n");
        return 1;
    }
    for (int t = 0; t < n; t++)
        ctx[t].tid = t;
    if (n == 1) {
        worker_thread(&ctx[0]);
    } else {
        int started = 0;
        for (; started < n; started++) {
            if (pthread_create(&th[started], NULL, worker_thread, &ctx[started]) != 0) {
                fprintf(stderr, "test_benchmark: cannot start worker thread %d\n", started);
                failed = 1;
                break;
            }
        }
        for (int t = 0; t < started; t++)
            pthread_join(th[t], NULL);
    }
    for (int t = 0; t < n; t++)
        failed |= ctx[t].failed;
    free(ctx);
    free(th);
    return failed;
}

/* ------------------------------------------------------------------ main */

static void usage(void)
{
    fprintf(stderr,
            "usage: test_benchmark [len_bytes=1024000] [repeat=10] [mode=1] [--json]\n"
            "  mode 0 push-then-pull, 1 push-pull, 2 push-only, 3 pull-only, 4 latency\n"
            "  env: DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER,\n"
            "       DMLC_NUM_WORKER (see ps docs); NUM_KEY_PER_SERVER=40 LOG_DURATION=10\n"
            "       TOTAL_DURATION=2e9 BENCHMARK_NTHREAD=1 DEBUG_MODE=0 PS_BENCH_JSON=0\n"
            "       TEST_NUM_GPU_WORKER=0 TEST_NUM_GPU_SERVER=0 PS_BENCH_DEVICE_KIND=cuda\n");
}

static int parse_args(int argc, char **argv)
{
    const char *pos[3] = {NULL, NULL, NULL};
    int npos = 0;
    g_cfg.json = (int)env_ll("PS_BENCH_JSON", 0) != 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            g_cfg.json = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage();
            exit(0);
        } else if (npos < 3) {
            pos[npos++] = argv[i];
        } else {
            usage();
            return -1;
        }
    }
    long long len = pos[0] ? atoll(pos[0]) : 1024000;
    g_cfg.repeat = pos[1] ? atoi(pos[1]) : 10;
    g_cfg.mode = pos[2] ? atoi(pos[2]) : MODE_PUSH_PULL;
    if (len <= 0 || g_cfg.repeat <= 0 || g_cfg.mode < 0 || g_cfg.mode > MODE_LATENCY) {
        fprintf(stderr, "test_benchmark: bad arguments (len %lld, repeat %d, mode %d)\n", len,
                g_cfg.repeat, g_cfg.mode);
        usage();
        return -1;
    }
    g_cfg.len = (size_t)len;
    g_cfg.keys_per_server = (int)env_ll("NUM_KEY_PER_SERVER", 40);
    g_cfg.log_duration = env_ll("LOG_DURATION", 10);
    g_cfg.total_duration = env_ll("TOTAL_DURATION", 2000000000LL);
    g_cfg.nthread = (int)env_ll("BENCHMARK_NTHREAD", 1);
    g_cfg.debug = (int)env_ll("DEBUG_MODE", 0) != 0;
    g_cfg.recv_buffer = (int)env_ll("ENABLE_RECV_BUFFER", 0) != 0;
    g_cfg.worker_device = env_ll("TEST_NUM_GPU_WORKER", 0) > 0;
    g_cfg.server_device = env_ll("TEST_NUM_GPU_SERVER", 0) > 0;
    const char *kind = getenv("PS_BENCH_DEVICE_KIND");
    if (kind == NULL || *kind == '\0' || strcmp(kind, "cuda") == 0) {
        g_cfg.device_kind = PS_MEM_CUDA;
    } else if (strcmp(kind, "emu") == 0) {
        g_cfg.device_kind = PS_MEM_EMU;
    } else {
        fprintf(stderr, "test_benchmark: PS_BENCH_DEVICE_KIND=%s: cuda or emu\n", kind);
        return -1;
    }
    if (g_cfg.keys_per_server <= 0 || g_cfg.log_duration <= 0 || g_cfg.total_duration <= 0 ||
        g_cfg.nthread <= 0) {
        fprintf(stderr, "test_benchmark: NUM_KEY_PER_SERVER, LOG_DURATION, TOTAL_DURATION and "
                        "BENCHMARK_NTHREAD must be positive\n");
        return -1;
    }
    return 0;
}

/* Every process: its CPU time per GB its van moved. */
static void report_cpu(const char *role)
{
    uint64_t sent = 0, recv = 0;
    ps_postoffice_traffic(g_po, &sent, &recv);
    double cpu = bench_cpu_seconds();
    double gb = (double)(sent + recv) / 1e9;
    if (gb >= 0.001)
        out("%s %d: cpu %.3f s for %.3f GB sent+received = %.3f s/GB\n", role,
            ps_postoffice_my_rank(g_po), cpu, gb, cpu / gb);
    else
        out("%s %d: cpu %.3f s for %.3f MB sent+received\n", role, ps_postoffice_my_rank(g_po),
            cpu, gb * 1e3);
    if (g_cfg.json)
        out("{\"bench\":\"test_benchmark\",\"event\":\"cpu\",\"role\":\"%s\",\"rank\":%d,"
            "\"cpu_s\":%.6f,\"gb_moved\":%.6f,\"cpu_s_per_gb\":%.6f}\n",
            role, ps_postoffice_my_rank(g_po), cpu, gb, gb > 0 ? cpu / gb : 0.0);
}

static int start_barrier(void)
{
    ps_status_t s = ps_postoffice_barrier(g_po, PS_GROUP_ALL, -1);
    if (s != PS_OK) {
        fprintf(stderr, "test_benchmark: start barrier: %s\n", ps_status_str(s));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* Lines reach a pipe (the launcher) as they are printed. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parse_args(argc, argv) != 0)
        return 2;

    if (g_cfg.worker_device || g_cfg.server_device) {
        g_dev = ps_mem_ops(g_cfg.device_kind);
        ps_status_t st = g_dev->init();
        if (st != PS_OK) {
            ps_mem_info_t info;
            ps_mem_describe(g_cfg.device_kind, &info);
            fprintf(stderr, "test_benchmark: TEST_NUM_GPU_*: no usable %s device: %s\n",
                    ps_mem_kind_name(g_cfg.device_kind), info.reason);
            return 1;
        }
    }

    ps_start_params_t params;
    ps_start_params_init(&params);
    ps_status_t s = ps_start_params_from_env(&params);
    if (s != PS_OK) {
        fprintf(stderr, "test_benchmark: bad or missing DMLC_* settings: %s\n", ps_status_str(s));
        usage();
        return 2;
    }
    /* No start barrier yet: the servers register their KV app first, so no
     * worker request can arrive before there is a handler for it. */
    s = ps_postoffice_start(&params, 0, &g_po);
    if (s != PS_OK) {
        fprintf(stderr, "test_benchmark: cannot start: %s\n", ps_status_str(s));
        return 1;
    }
    /* The end of a run of unknown length: wait as long as the workers run,
     * unless the user bounded barriers. */
    int long_wait = getenv("PS_BARRIER_TIMEOUT_MS") != NULL ? -1 : LONG_WAIT_MS;
    int failed = 0;
    ps_role_t role = ps_postoffice_role(g_po);
    const char *role_name = ps_role_str(role);

    if (role == PS_ROLE_SERVER) {
        bench_store_t store = {.debug = g_cfg.debug};
        ps_kv_server_t *server = NULL;
        pthread_mutex_init(&store.lock, NULL);
        if (store_grow(&store) != 0) {
            fprintf(stderr, "test_benchmark: out of memory\n");
            failed = 1;
        } else if ((s = ps_kv_server_create(g_po, 0, server_handle, &store, &server)) != PS_OK) {
            fprintf(stderr, "test_benchmark: cannot create the KV server: %s\n",
                    ps_status_str(s));
            failed = 1;
        } else if (g_cfg.recv_buffer && (s = register_recv_buffers(&store, server)) != PS_OK) {
            fprintf(stderr, "test_benchmark: cannot register receive buffers: %s\n",
                    ps_status_str(s));
            failed = 1;
        }
        failed |= start_barrier() != 0;
        if ((s = ps_postoffice_barrier(g_po, PS_GROUP_ALL, long_wait)) != PS_OK) {
            fprintf(stderr, "test_benchmark: server: end barrier: %s\n", ps_status_str(s));
            failed = 1;
        }
        report_cpu(role_name);
        if (g_cfg.recv_buffer)
            out("server: ENABLE_RECV_BUFFER: %llu of %llu pushes landed in registered receive "
                "buffers\n", (unsigned long long)atomic_load(&store.pushes_landed),
                (unsigned long long)atomic_load(&store.pushes));
        if (server != NULL)
            ps_kv_server_destroy(server);
        for (size_t i = 0; i < store.num_recv_bufs; i++)
            ps_slice_unref(&store.recv_bufs[i].buf);
        free(store.recv_bufs);
        store_destroy(&store);
    } else if (role == PS_ROLE_WORKER) {
        failed = start_barrier() != 0 || run_worker();
        report_cpu(role_name);
        if ((s = ps_postoffice_barrier(g_po, PS_GROUP_ALL, long_wait)) != PS_OK) {
            fprintf(stderr, "test_benchmark: worker: end barrier: %s\n", ps_status_str(s));
            failed = 1;
        }
    } else {
        failed |= start_barrier() != 0;
        if ((s = ps_postoffice_barrier(g_po, PS_GROUP_ALL, long_wait)) != PS_OK) {
            fprintf(stderr, "test_benchmark: scheduler: end barrier: %s\n", ps_status_str(s));
            failed = 1;
        }
        report_cpu(role_name);
    }
    s = ps_postoffice_finalize(g_po, 1);
    if (s != PS_OK) {
        fprintf(stderr, "test_benchmark: finalize: %s\n", ps_status_str(s));
        failed = 1;
    }
    return failed ? 1 : 0;
}

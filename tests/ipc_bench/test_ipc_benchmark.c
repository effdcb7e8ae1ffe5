/*
 * test_ipc_benchmark: the seed's IPC benchmark (ps-lite
 * tests/test_ipc_benchmark.cc) on ps's public API: workers push and pull
 * values that live in shared memory to servers, co-located ones through
 * the shared-memory van.
 *
 *   test_ipc_benchmark [len_bytes=1024000]
 *
 * Roles from DMLC_ROLE and the rest of the DMLC_* bootstrap, as upstream;
 * like upstream it sets BYTEPS_ENABLE_IPC=1 for itself (upstream's
 * BYTEPS_LOCAL_SIZE=1 has no counterpart: ps's shared memory is its own).
 * The van is the composed one ("ipc": same-host peers through
 * shared memory, the others through the network van that DMLC_ENABLE_RDMA /
 * DMLC_ENABLE_UCX / DMLC_PS_VAN_TYPE choose), unless those name "shm" (the
 * whole job through shared memory).
 *
 * Environment (upstream names and defaults): BYTEPS_PARTITION_BYTES
 * (4096000; len must not exceed it), NUM_KEY_PER_SERVER (10), LOG_DURATION
 * (10), BYTEPS_ENABLE_MIXED_MODE (0; 1 skews keys toward the servers not
 * co-located with a worker, with upstream's formula, assuming one
 * co-located server per worker). Added: TOTAL_DURATION (rounds; upstream
 * runs until killed).
 *
 * Worker: NUM_KEY_PER_SERVER x servers keys; key i is i << 16 in the range
 * of its server; each value is a buffer of ps_shm_buf_alloc() (upstream:
 * a POSIX shm segment BytePS_ShM_<key> per key; ours has no name and so
 * nothing to clean up), pushed without a copy. After one push of every key,
 * each round pushes and pulls every key (the pull into the same buffer, as
 * upstream) and waits for all; every LOG_DURATION rounds it prints
 *   Application goodput: G Gbps
 * with G = 8 * len * keys * rounds / elapsed ns (one direction's bytes).
 * Server: a buffer per key made on its first push (pushed bytes are not
 * copied, as upstream); pulls answered with it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/shm_alloc.h"

#define PAGE_ALIGN 4096
#define LONG_WAIT_MS (24 * 3600 * 1000)

static ps_postoffice_t *g_po;

static long long env_ll(const char *name, long long dflt)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end;
    errno = 0;
    double d = strtod(v, &end); /* upstream values like 2e9 are common */
    if (errno != 0 || *end != '\0') {
        fprintf(stderr, "test_ipc_benchmark: ignoring %s=%s: not a number\n", name, v);
        return dflt;
    }
    return (long long)d;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ server */

typedef struct {
    pthread_mutex_t lock;
    uint64_t *keys; /* decoded keys (offset in this server's range) */
    ps_slice_t *vals;
    size_t n, cap;
} store_t;

static ps_slice_t *store_find(store_t *st, uint64_t key)
{
    for (size_t i = 0; i < st->n; i++) {
        if (st->keys[i] == key)
            return &st->vals[i];
    }
    return NULL;
}

static ps_slice_t *store_add(store_t *st, uint64_t key, size_t len)
{
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        uint64_t *k = realloc(st->keys, cap * sizeof(*k));
        if (k == NULL)
            return NULL;
        st->keys = k;
        ps_slice_t *v = realloc(st->vals, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        st->vals = v;
        st->cap = cap;
    }
    if (ps_slice_alloc(len, PAGE_ALIGN, &st->vals[st->n]) != PS_OK)
        return NULL;
    memset(ps_slice_ptr(&st->vals[st->n]), 0, len);
    st->keys[st->n] = key;
    return &st->vals[st->n++];
}

static uint64_t g_range_begin;

static void server_handle(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                          ps_kv_server_t *server)
{
    store_t *st = arg;
    size_t n = ps_kv_pairs_num_keys(req);
    if (n != 1) {
        fprintf(stderr, "test_ipc_benchmark: server: a request with %zu keys (expected 1)\n", n);
        ps_kv_server_respond(server, meta, NULL);
        return;
    }
    ps_key_t key;
    memcpy(&key, ps_slice_ptr(&req->keys), sizeof(key));
    key -= g_range_begin;
    pthread_mutex_lock(&st->lock);
    ps_slice_t *val = store_find(st, key);
    if (meta->push) {
        /* The first push sizes the store; the bytes are not copied. */
        if (val == NULL && (val = store_add(st, key, req->vals.len)) == NULL)
            fprintf(stderr, "test_ipc_benchmark: server: out of memory\n");
        pthread_mutex_unlock(&st->lock);
        ps_kv_server_respond(server, meta, NULL);
        return;
    }
    ps_kv_pairs_t res = {.keys = req->keys, .vals = PS_SLICE_EMPTY_INIT,
                         .lens = PS_SLICE_EMPTY_INIT, .type = PS_DATA_CHAR};
    ps_slice_t lens = PS_SLICE_EMPTY_INIT;
    if (val != NULL) {
        res.vals = ps_slice_ref(val);
        if (ps_slice_alloc(sizeof(int32_t), 8, &lens) == PS_OK) {
            int32_t l = (int32_t)val->len;
            memcpy(ps_slice_ptr(&lens), &l, sizeof(l));
            res.lens = lens;
        }
    } else {
        fprintf(stderr, "test_ipc_benchmark: server: pull of key %" PRIu64 " before any push\n",
                key);
    }
    pthread_mutex_unlock(&st->lock);
    ps_kv_server_respond(server, meta, &res);
    ps_slice_unref(&res.vals);
    ps_slice_unref(&lens);
}

/* ------------------------------------------------------------------ worker */

/* Upstream's key placement: round robin, or in mixed mode skewed toward
 * the servers not co-located with a worker (the first ones). */
static int allocate_server(int seed, int total_keys, int num_servers, int num_workers)
{
    if (env_ll("BYTEPS_ENABLE_MIXED_MODE", 0) == 0)
        return seed % num_servers;
    int noncolocate = num_servers - num_workers;
    int colocate = num_workers;
    if (noncolocate <= 0 || colocate <= 0)
        return seed % num_servers;
    double ratio = (2.0 * noncolocate * (num_workers - 1)) /
                   ((double)num_workers * (num_workers + noncolocate) - 2.0 * noncolocate);
    double threshold = ratio * total_keys;
    if (seed < threshold)
        return seed % noncolocate;
    return noncolocate + seed % colocate;
}

static int run_worker(size_t len)
{
    int num_servers = ps_postoffice_num_servers(g_po);
    int num_workers = ps_postoffice_num_workers(g_po);
    long long partition = env_ll("BYTEPS_PARTITION_BYTES", 4096000);
    if ((long long)len > partition) {
        fprintf(stderr, "test_ipc_benchmark: %zu bytes per key is more than BYTEPS_PARTITION_BYTES (%lld): "
                        "tensor partition is not supported in this benchmark; try a smaller size or a "
                        "larger BYTEPS_PARTITION_BYTES\n", len, partition);
        return 1;
    }
    int per_server = (int)env_ll("NUM_KEY_PER_SERVER", 10);
    long long log_duration = env_ll("LOG_DURATION", 10);
    long long total_duration = env_ll("TOTAL_DURATION", 2000000000);
    if (per_server < 1 || log_duration < 1 || len == 0) {
        fprintf(stderr, "test_ipc_benchmark: NUM_KEY_PER_SERVER, LOG_DURATION and len must be positive\n");
        return 1;
    }
    int total = num_servers * per_server;
    printf("%d servers in total\n", num_servers);

    ps_kv_worker_t *kv;
    ps_status_t s = ps_kv_worker_create(g_po, 0, 0, &kv);
    if (s != PS_OK) {
        fprintf(stderr, "test_ipc_benchmark: cannot create the KV worker: %s\n", ps_status_str(s));
        return 1;
    }
    ps_kv_pairs_t *kvs = calloc((size_t)total, sizeof(*kvs));
    int *ts = calloc(2 * (size_t)total, sizeof(*ts));
    int *load = calloc((size_t)num_servers, sizeof(*load));
    int failed = kvs == NULL || ts == NULL || load == NULL;
    for (int i = 0; i < total && !failed; i++) {
        int server = allocate_server(i, total, num_servers, num_workers);
        load[server]++;
        uint64_t begin, end;
        ps_postoffice_server_key_range(g_po, server, &begin, &end);
        ps_key_t key = begin + ((uint64_t)i << 16);
        int32_t l = (int32_t)len;
        kvs[i].type = PS_DATA_CHAR;
        if (ps_slice_alloc(sizeof(key), PAGE_ALIGN, &kvs[i].keys) != PS_OK ||
            ps_slice_alloc(sizeof(l), PAGE_ALIGN, &kvs[i].lens) != PS_OK ||
            ps_shm_slice_alloc(len, &kvs[i].vals) != PS_OK) {
            fprintf(stderr, "test_ipc_benchmark: cannot allocate key %d\n", i);
            failed = 1;
            break;
        }
        memcpy(ps_slice_ptr(&kvs[i].keys), &key, sizeof(key));
        memcpy(ps_slice_ptr(&kvs[i].lens), &l, sizeof(l));
        /* The initial push (not timed) sizes the server's store. */
        if ((s = ps_kv_zpush(kv, &kvs[i], 0, NULL, NULL, &ts[0])) != PS_OK ||
            (s = ps_kv_wait(kv, ts[0], -1)) != PS_OK) {
            fprintf(stderr, "test_ipc_benchmark: initial push of key %d: %s\n", i, ps_status_str(s));
            failed = 1;
        }
    }
    for (int i = 0; i < num_servers && !failed; i++)
        fprintf(stderr, "server-%d load is %.1f%%\n", i, 100.0 * load[i] / total);

    uint64_t start = now_ns();
    long long cnt = 0;
    for (long long round = 0; round < total_duration && !failed; round++) {
        for (int i = 0; i < total && !failed; i++) {
            if ((s = ps_kv_zpush(kv, &kvs[i], 0, NULL, NULL, &ts[2 * i])) != PS_OK ||
                (s = ps_kv_zpull(kv, &kvs[i], 0, NULL, NULL, &ts[2 * i + 1])) != PS_OK) {
                fprintf(stderr, "test_ipc_benchmark: push/pull of key %d: %s\n", i, ps_status_str(s));
                failed = 1;
            }
        }
        for (int i = 0; i < 2 * total && !failed; i++) {
            if ((s = ps_kv_wait(kv, ts[i], -1)) != PS_OK) {
                fprintf(stderr, "test_ipc_benchmark: request of key %d: %s\n", i / 2,
                        ps_status_str(s));
                failed = 1;
            }
        }
        if (failed || ++cnt % log_duration != 0)
            continue;
        uint64_t end = now_ns();
        printf("Application goodput: %.4f Gbps\n",
               8.0 * (double)len * total * (double)cnt / (double)(end - start));
        cnt = 0;
        start = now_ns();
    }
    ps_kv_worker_destroy(kv);
    for (int i = 0; kvs != NULL && i < total; i++) {
        ps_slice_unref(&kvs[i].keys);
        ps_slice_unref(&kvs[i].vals);
        ps_slice_unref(&kvs[i].lens);
    }
    free(kvs);
    free(ts);
    free(load);
    return failed;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t len = 1024000;
    if (argc > 1) {
        char *end;
        long long v = strtoll(argv[1], &end, 10);
        if (*end != '\0' || v <= 0) {
            fprintf(stderr, "usage: test_ipc_benchmark [len_bytes=1024000]\n");
            return 2;
        }
        len = (size_t)v;
    }
    /* As upstream: IPC on. */
    setenv("BYTEPS_ENABLE_IPC", "1", 1);

    ps_start_params_t params;
    ps_start_params_init(&params);
    ps_status_t s = ps_start_params_from_env(&params);
    if (s != PS_OK) {
        fprintf(stderr, "test_ipc_benchmark: bad or missing DMLC_* settings: %s\n",
                ps_status_str(s));
        return 2;
    }
    /* BYTEPS_ENABLE_IPC=1 selects the composed van ("ipc") around the
     * network van the other variables choose, unless they name "shm". The
     * servers register their KV app before the start barrier, so that no
     * request arrives before there is a handler for it. */
    s = ps_postoffice_start(&params, 0, &g_po);
    if (s != PS_OK) {
        fprintf(stderr, "test_ipc_benchmark: cannot start: %s\n", ps_status_str(s));
        return 1;
    }
    int failed = 0;
    ps_role_t role = ps_postoffice_role(g_po);
    store_t store = {.keys = NULL};
    ps_kv_server_t *server = NULL;
    pthread_mutex_init(&store.lock, NULL);
    if (role == PS_ROLE_SERVER) {
        uint64_t end;
        ps_postoffice_server_key_range(g_po, ps_postoffice_my_rank(g_po), &g_range_begin, &end);
        if ((s = ps_kv_server_create(g_po, 0, server_handle, &store, &server)) != PS_OK) {
            fprintf(stderr, "test_ipc_benchmark: cannot create the KV server: %s\n",
                    ps_status_str(s));
            failed = 1;
        }
    }
    if ((s = ps_postoffice_barrier(g_po, PS_GROUP_ALL, -1)) != PS_OK) {
        fprintf(stderr, "test_ipc_benchmark: start barrier: %s\n", ps_status_str(s));
        failed = 1;
    }
    if (role == PS_ROLE_WORKER && !failed)
        failed = run_worker(len);
    /* The end of a run of unknown length: wait as long as the workers run
     * (the finalize barrier is bounded by PS_FINALIZE_TIMEOUT_MS), unless
     * the user bounded barriers. */
    int long_wait = getenv("PS_BARRIER_TIMEOUT_MS") != NULL ? -1 : LONG_WAIT_MS;
    if ((s = ps_postoffice_barrier(g_po, PS_GROUP_ALL, long_wait)) != PS_OK) {
        fprintf(stderr, "test_ipc_benchmark: end barrier: %s\n", ps_status_str(s));
        failed = 1;
    }
    if (server != NULL)
        ps_kv_server_destroy(server);
    for (size_t i = 0; i < store.n; i++)
        ps_slice_unref(&store.vals[i]);
    free(store.keys);
    free(store.vals);
    pthread_mutex_destroy(&store.lock);
    /* As upstream's Finalize(0, true): a last barrier, after which the
     * scheduler leaves last, so that every node reads its release. */
    if ((s = ps_postoffice_finalize(g_po, !failed)) != PS_OK)
        failed = 1;
    return failed;
}

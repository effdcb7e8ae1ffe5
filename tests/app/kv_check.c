/*
 * kv_check: one process of a KV job that checks every pulled byte and every
 * sum. Run it as scheduler, server and worker (DMLC_ROLE etc. from the
 * environment, e.g. through tools/launch/ps_launch.py).
 *
 * Servers run the default summing store. Every worker derives the same
 * table of keys (types, lengths) from a fixed seed, and the values any
 * worker pushes in any round from (rank, round, key, element) — so each
 * worker can compute every expected sum locally. Values are chosen so sums
 * are exact whatever the order of arrival: integers wrap (the same in any
 * order), and float types carry small integers (or quarters for fp16).
 *
 *   round 0  every worker pushes its random subset of every type's keys,
 *            all requests in flight at once, copying and zero-copy calls
 *            alternating; barrier
 *   round 1  push-pull, one worker at a time (barrier between turns): the
 *            answer must be the exact running sum
 *   round 2  push-pull by all workers at once; barrier
 *   final    pull every key anyone pushed and compare each byte with the
 *            sum of all rounds
 *   threads  three threads of each worker push (many requests in flight),
 *            push-pull and pull keys of their own, concurrently
 *   small    requests of a few bytes to one server (the small lane where
 *            the van has one: the stats must show they took it)
 *   errors   unknown key, wrong size, no keys, unsorted keys
 *
 * --copy: the worker lets the van receive pull responses into its own
 * buffers and copies them (the path of vans without PS_CAP_RECV_INTO_DEST).
 * --slicer=interleave: a user slicer (ps_kv_worker_set_slicer) that gives
 * keys to servers by a hash, out of key order: every request is regrouped.
 * --slicer=ordered: one that keeps key order but not the servers' ranges
 * (the first quarter of the key space to server 0, the rest to the last).
 *
 * Instance groups (DMLC_GROUP_SIZE > 1): each instance is a job of its own
 * with the same keys, its values salted with the instance, so a request
 * that reached another instance's server shows as a wrong sum. Ranks
 * above are group ranks. --whole-group: this process runs every instance
 * of its group (ps_postoffice_start_group), one thread each, and prints
 * a PASS line per instance.
 *
 * Prints "PASS <role> <rank> ..." and exits 0, or "FAIL ..." and exits 1.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/kv.h"
#include "ps/app/kv_store.h"
#include "ps/app/kv_sum.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/net/caps.h"
#include "ps/net/codec/message.h"
#include "ps/net/group.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"
#include "tests/lib/check_node.h"

#define NUM_RANDOM_KEYS 96
#define ROUNDS 3
#define BARRIER_TIMEOUT_MS 120000
#define WAIT_TIMEOUT_MS 60000
#define UNIFORM_FLOAT_ELEMS 33

/* Per instance (a thread each with --whole-group). */
static _Thread_local char g_summary[320] = "done";
static _Thread_local int t_rank;     /* group rank */
static _Thread_local int t_instance; /* instance in the group */

/* ---- deterministic data ---- */

typedef struct {
    ps_key_t key;
    ps_data_type_t type;
    int32_t elems;
    int owner; /* CHAR keys: the one worker that writes it (replace semantics) */
} key_info_t;

/* Types in the table; CHAR is replaced, every other one summed. */
static const ps_data_type_t k_types[] = {
    PS_DATA_INT8,   PS_DATA_INT16,  PS_DATA_INT32,  PS_DATA_INT64,   PS_DATA_UINT8,
    PS_DATA_UINT16, PS_DATA_UINT32, PS_DATA_UINT64, PS_DATA_FLOAT,   PS_DATA_DOUBLE,
    PS_DATA_FLOAT16, PS_DATA_BFLOAT16, PS_DATA_CHAR,
};
#define NUM_TYPES (sizeof(k_types) / sizeof(k_types[0]))

static int g_num_workers, g_num_servers;
static key_info_t *g_keys; /* built once, by the first worker instance */
static int g_num_keys;
static ps_mutex_t g_keys_lock;

static int cmp_key(const void *a, const void *b)
{
    ps_key_t x = ((const key_info_t *)a)->key, y = ((const key_info_t *)b)->key;
    return x < y ? -1 : x > y;
}

static size_t esize(ps_data_type_t t)
{
    size_t s = ps_data_type_size(t);
    return s ? s : 1;
}

/* The same table in every worker: random keys plus both ends of every
 * server's range. */
static void build_table_locked(ps_postoffice_t *po);
static void build_table(ps_postoffice_t *po)
{
    ps_mutex_lock(&g_keys_lock);
    if (g_keys == NULL)
        build_table_locked(po);
    ps_mutex_unlock(&g_keys_lock);
}

static void build_table_locked(ps_postoffice_t *po)
{
    int cap = NUM_RANDOM_KEYS + 2 * g_num_servers;
    g_keys = calloc((size_t)cap, sizeof(*g_keys));
    int n = 0;
    for (int i = 0; i < NUM_RANDOM_KEYS; i++)
        g_keys[n++].key = check_mix64(1000 + (uint64_t)i) % (UINT64_MAX - 1024);
    for (int s = 0; s < g_num_servers; s++) {
        uint64_t b, e;
        CHECK_OK(ps_postoffice_server_key_range(po, s, &b, &e));
        g_keys[n++].key = b;
        g_keys[n++].key = e - 1;
    }
    qsort(g_keys, (size_t)n, sizeof(*g_keys), cmp_key);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (u == 0 || g_keys[u - 1].key != g_keys[i].key)
            g_keys[u++] = g_keys[i];
    g_num_keys = u;
    for (int i = 0; i < g_num_keys; i++) {
        uint64_t h = check_mix64(g_keys[i].key);
        key_info_t *k = &g_keys[i];
        k->type = k_types[h % NUM_TYPES];
        uint64_t r = (h >> 8) % 100;
        if (k->type == PS_DATA_FLOAT)
            k->elems = UNIFORM_FLOAT_ELEMS; /* FLOAT requests use uniform sizes */
        else if (r < 5)
            k->elems = 0;
        else if (r < 10)
            k->elems = 4000 + (int32_t)((h >> 16) % 30000); /* large values */
        else
            k->elems = 1 + (int32_t)((h >> 16) % 100);
        k->owner = (int)((h >> 40) % (uint64_t)g_num_workers);
    }
}

/* Does worker r push key i in round `round`? */
static int pushes(int r, int round, int i)
{
    if (g_keys[i].type == PS_DATA_CHAR)
        return r == g_keys[i].owner;
    return check_hash4(7, (uint64_t)r, (uint64_t)round, g_keys[i].key) % 4 != 0;
}

/* The numeric value of element e pushed by worker r in `round` for key i,
 * as a double (exact), and its raw 64-bit pattern for the integer types. */
static uint64_t raw_value(int r, int round, int i, int32_t e)
{
    return check_hash4((uint64_t)r * 31 + (uint64_t)round, g_keys[i].key, (uint64_t)e,
                       99 + 1000 * (uint64_t)t_instance);
}

static double float_value(ps_data_type_t t, uint64_t raw)
{
    switch (t) {
    case PS_DATA_FLOAT:
    case PS_DATA_DOUBLE:
        return (double)(int)(raw % 201) - 100.0;
    case PS_DATA_FLOAT16:
        return ((double)(int)(raw % 65) - 32.0) * 0.25;
    case PS_DATA_BFLOAT16:
        return (double)(int)(raw % 9) - 4.0;
    default:
        return 0;
    }
}

static int is_float_type(ps_data_type_t t)
{
    return t == PS_DATA_FLOAT || t == PS_DATA_DOUBLE || t == PS_DATA_FLOAT16 ||
           t == PS_DATA_BFLOAT16;
}

/* Writes one element of type t with numeric value v (float types) or raw
 * bits (others). */
static void store_elem(ps_data_type_t t, unsigned char *dst, uint64_t raw, double v)
{
    switch (t) {
    case PS_DATA_FLOAT: {
        float f = (float)v;
        memcpy(dst, &f, 4);
        break;
    }
    case PS_DATA_DOUBLE:
        memcpy(dst, &v, 8);
        break;
    case PS_DATA_FLOAT16: {
        uint16_t h = ps_float_to_half((float)v);
        memcpy(dst, &h, 2);
        break;
    }
    case PS_DATA_BFLOAT16: {
        uint16_t h = ps_float_to_bf16((float)v);
        memcpy(dst, &h, 2);
        break;
    }
    default:
        memcpy(dst, &raw, esize(t)); /* little-endian: the low bytes */
        break;
    }
}

/* What worker r pushes for key i in `round`. */
static void fill_value(int r, int round, int i, unsigned char *dst)
{
    ps_data_type_t t = g_keys[i].type;
    for (int32_t e = 0; e < g_keys[i].elems; e++) {
        uint64_t raw = raw_value(r, round, i, e);
        store_elem(t, dst + (size_t)e * esize(t), raw, float_value(t, raw));
    }
}

/* The stored value of key i after the pushes of rounds < `upto_round`, plus
 * those of workers < `upto_worker` in round `upto_round`. Returns 0 if no
 * worker pushed it yet. */
static int expected_value(int i, int upto_round, int upto_worker, unsigned char *dst)
{
    ps_data_type_t t = g_keys[i].type;
    int any = 0;
    for (int32_t e = 0; e < g_keys[i].elems; e++) {
        uint64_t sum_raw = 0, last_raw = 0;
        double sum_f = 0;
        any = 0;
        for (int round = 0; round <= upto_round && round < ROUNDS; round++) {
            int wmax = round < upto_round ? g_num_workers : upto_worker;
            for (int r = 0; r < wmax; r++) {
                if (!pushes(r, round, i))
                    continue;
                uint64_t raw = raw_value(r, round, i, e);
                sum_raw += raw; /* wraps like the store's integer sums */
                sum_f += float_value(t, raw);
                last_raw = raw;
                any = 1;
            }
        }
        store_elem(t, dst + (size_t)e * esize(t), t == PS_DATA_CHAR ? last_raw : sum_raw,
                   is_float_type(t) ? sum_f : 0);
    }
    if (g_keys[i].elems == 0) {
        for (int round = 0; round <= upto_round && round < ROUNDS; round++) {
            int wmax = round < upto_round ? g_num_workers : upto_worker;
            for (int r = 0; r < wmax; r++)
                any |= pushes(r, round, i);
        }
    }
    return any;
}

/* ---- requests ---- */

/* One request's data: keys of one type, values, lengths. */
typedef struct {
    ps_data_type_t type;
    int n;
    int *idx;       /* indices into g_keys */
    size_t bytes;
    ps_kv_pairs_t kvs;
    ps_kv_pairs_t out; /* pull destination */
    int uniform;
} batch_t;

/* Callbacks of one instance's worker (they run on the worker's threads). */
typedef struct {
    atomic_int calls;
    atomic_int errors;
} done_count_t;
static done_count_t g_done[PS_GROUP_SIZE_MAX];
#define MY_DONE (&g_done[t_instance])

static void on_done(void *arg, int ts, ps_status_t st)
{
    done_count_t *d = arg;
    (void)ts;
    if (st != PS_OK)
        atomic_fetch_add(&d->errors, 1);
    atomic_fetch_add(&d->calls, 1);
}

static ps_slice_t alloc_slice(size_t len)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    CHECK_OK(ps_slice_alloc(len, 0, &s));
    if (len)
        memset(ps_slice_ptr(&s), 0xA5, len); /* poison: a missed write shows */
    return s;
}

/* The keys of type t that `want(i)` selects, with their values from
 * worker r in `round` (if round >= 0) and a destination of the same size. */
static void make_batch(batch_t *b, ps_data_type_t t, int r, int round, int final_pull)
{
    memset(b, 0, sizeof(*b));
    b->type = t;
    b->idx = calloc((size_t)g_num_keys, sizeof(int));
    for (int i = 0; i < g_num_keys; i++) {
        if (g_keys[i].type != t)
            continue;
        int sel;
        if (final_pull) {
            sel = 0;
            for (int rr = 0; rr < g_num_workers && !sel; rr++)
                for (int ro = 0; ro < ROUNDS && !sel; ro++)
                    sel = pushes(rr, ro, i);
        } else {
            sel = pushes(r, round, i);
        }
        if (sel)
            b->idx[b->n++] = i;
    }
    b->uniform = t == PS_DATA_FLOAT;
    for (int j = 0; j < b->n; j++)
        b->bytes += (size_t)g_keys[b->idx[j]].elems * esize(t);

    b->kvs.type = t;
    b->kvs.keys = alloc_slice((size_t)b->n * sizeof(ps_key_t));
    b->kvs.lens = b->uniform ? (ps_slice_t)PS_SLICE_EMPTY_INIT
                             : alloc_slice((size_t)b->n * sizeof(int32_t));
    b->kvs.vals = alloc_slice(b->bytes);
    size_t off = 0;
    for (int j = 0; j < b->n; j++) {
        int i = b->idx[j];
        memcpy((char *)ps_slice_ptr(&b->kvs.keys) + (size_t)j * 8, &g_keys[i].key, 8);
        if (!b->uniform)
            memcpy((char *)ps_slice_ptr(&b->kvs.lens) + (size_t)j * 4, &g_keys[i].elems, 4);
        if (!final_pull)
            fill_value(r, round, i, (unsigned char *)ps_slice_ptr(&b->kvs.vals) + off);
        off += (size_t)g_keys[i].elems * esize(t);
    }
    b->out.type = t;
    b->out.keys = ps_slice_ref(&b->kvs.keys);
    b->out.lens = ps_slice_ref(&b->kvs.lens);
    b->out.vals = alloc_slice(b->bytes);
}

static void free_batch(batch_t *b)
{
    ps_slice_unref(&b->kvs.keys);
    ps_slice_unref(&b->kvs.vals);
    ps_slice_unref(&b->kvs.lens);
    ps_slice_unref(&b->out.keys);
    ps_slice_unref(&b->out.vals);
    ps_slice_unref(&b->out.lens);
    free(b->idx);
}

/* Compares a pulled batch with the expected values. */
static void verify(const batch_t *b, const unsigned char *got, int upto_round, int upto_worker,
                   const char *what)
{
    size_t off = 0;
    size_t max_bytes = 0;
    for (int j = 0; j < b->n; j++) {
        size_t kb = (size_t)g_keys[b->idx[j]].elems * esize(b->type);
        if (kb > max_bytes)
            max_bytes = kb;
    }
    unsigned char *want = malloc(max_bytes ? max_bytes : 1);
    for (int j = 0; j < b->n; j++) {
        int i = b->idx[j];
        size_t kb = (size_t)g_keys[i].elems * esize(b->type);
        expected_value(i, upto_round, upto_worker, want);
        if (memcmp(want, got + off, kb) != 0) {
            size_t e = 0;
            while (memcmp(want + e * esize(b->type), got + off + e * esize(b->type),
                          esize(b->type)) == 0)
                e++;
            uint64_t w = 0, g = 0;
            memcpy(&w, want + e * esize(b->type), esize(b->type));
            memcpy(&g, got + off + e * esize(b->type), esize(b->type));
            check_fail("%s: key %" PRIu64 " (%s, %d elements) element %zu: expected 0x%" PRIx64
                       ", got 0x%" PRIx64,
                       what, g_keys[i].key, ps_data_type_str(b->type), g_keys[i].elems, e, w, g);
        }
        off += kb;
    }
    free(want);
}

static ps_status_t wait_ts(ps_kv_worker_t *w, int ts)
{
    return ps_kv_wait(w, ts, WAIT_TIMEOUT_MS);
}

static void barrier_workers(ps_postoffice_t *po)
{
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, BARRIER_TIMEOUT_MS));
}

/* ---- several application threads on one worker ---- */

#define THREADS 3
#define THREAD_ITERS 40
#define THREAD_ELEMS 3

typedef struct {
    ps_postoffice_t *po;
    ps_kv_worker_t *w;
    int t;
    int rank; /* the worker's group rank */
    done_count_t *done;
    int issued;
    int failed;
    char why[256];
} thread_arg_t;

/* Keys private to (worker, thread), spread over every server: the thread
 * knows their sums alone. Issues pushes without waiting for each, then
 * waits for them in batches, then checks with push-pull and pull. */
static void *thread_main(void *p)
{
    thread_arg_t *a = p;
    int nk = 2 * g_num_servers;
    ps_key_t keys[2 * 64];
    int64_t sum[2 * 64][THREAD_ELEMS];
    int64_t v[2 * 64 * THREAD_ELEMS];
    int pending[THREAD_ITERS];
    int npending = 0;
    ps_status_t st;

    if (nk > 2 * 64) {
        snprintf(a->why, sizeof(a->why), "too many servers");
        a->failed = 1;
        return NULL;
    }
    for (int j = 0; j < nk; j++) {
        uint64_t b, e;
        ps_postoffice_server_key_range(a->po, j / 2, &b, &e);
        keys[j] = b + 4096 + (uint64_t)a->rank * 256 + (uint64_t)a->t * 16 + (uint64_t)(j % 2);
        memset(sum[j], 0, sizeof(sum[j]));
    }
    for (int it = 0; it < THREAD_ITERS; it++) {
        for (int j = 0; j < nk; j++)
            for (int e = 0; e < THREAD_ELEMS; e++) {
                v[j * THREAD_ELEMS + e] = it * 7 + j * 3 + e + a->t;
                sum[j][e] += v[j * THREAD_ELEMS + e];
            }
        int ts;
        if (it % 2) {
            st = ps_kv_push(a->w, keys, (size_t)nk, v, sizeof(v[0]) * (size_t)nk * THREAD_ELEMS,
                            NULL, PS_DATA_INT64, 0, on_done, a->done, &ts);
        } else {
            ps_kv_pairs_t kvs = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                                 PS_DATA_INT64};
            kvs.keys = alloc_slice((size_t)nk * sizeof(ps_key_t));
            kvs.vals = alloc_slice(sizeof(v[0]) * (size_t)nk * THREAD_ELEMS);
            memcpy(ps_slice_ptr(&kvs.keys), keys, kvs.keys.len);
            memcpy(ps_slice_ptr(&kvs.vals), v, kvs.vals.len);
            st = ps_kv_zpush(a->w, &kvs, 0, on_done, a->done, &ts);
            /* The request holds its own references. */
            ps_slice_unref(&kvs.keys);
            ps_slice_unref(&kvs.vals);
        }
        if (st != PS_OK)
            goto bad;
        a->issued++;
        pending[npending++] = ts;
        if (it % 5 == 4 || it == THREAD_ITERS - 1) {
            for (int i = 0; i < npending; i++)
                if ((st = wait_ts(a->w, pending[i])) != PS_OK)
                    goto bad;
            npending = 0;
        }
    }

    /* Push-pull of ones: the answer is the running sum plus one. */
    int64_t ones[2 * 64 * THREAD_ELEMS], out[2 * 64 * THREAD_ELEMS];
    for (int i = 0; i < nk * THREAD_ELEMS; i++)
        ones[i] = 1;
    ps_kv_pairs_t push = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                          PS_DATA_INT64};
    ps_kv_pairs_t dst = push;
    size_t vbytes = sizeof(int64_t) * (size_t)nk * THREAD_ELEMS;
    CHECK_OK(ps_slice_wrap(keys, (size_t)nk * sizeof(ps_key_t), NULL, NULL, &push.keys));
    CHECK_OK(ps_slice_wrap(ones, vbytes, NULL, NULL, &push.vals));
    CHECK_OK(ps_slice_wrap(out, vbytes, NULL, NULL, &dst.vals));
    int ts;
    st = ps_kv_zpushpull(a->w, &push, &dst, 0, on_done, a->done, &ts);
    if (st == PS_OK)
        st = wait_ts(a->w, ts);
    ps_slice_unref(&push.keys);
    ps_slice_unref(&push.vals);
    ps_slice_unref(&dst.vals);
    if (st != PS_OK)
        goto bad;
    a->issued++;
    for (int j = 0; j < nk; j++)
        for (int e = 0; e < THREAD_ELEMS; e++) {
            sum[j][e] += 1;
            if (out[j * THREAD_ELEMS + e] != sum[j][e]) {
                snprintf(a->why, sizeof(a->why),
                         "thread %d push-pull key %" PRIu64 "[%d]: expected %" PRId64
                         ", got %" PRId64, a->t, keys[j], e, sum[j][e], out[j * THREAD_ELEMS + e]);
                a->failed = 1;
                return NULL;
            }
        }

    memset(out, 0, sizeof(out));
    st = ps_kv_pull(a->w, keys, (size_t)nk, out, vbytes, NULL, PS_DATA_INT64, 0, on_done, a->done,
                    &ts);
    if (st == PS_OK)
        st = wait_ts(a->w, ts);
    if (st != PS_OK)
        goto bad;
    a->issued++;
    for (int j = 0; j < nk; j++)
        for (int e = 0; e < THREAD_ELEMS; e++)
            if (out[j * THREAD_ELEMS + e] != sum[j][e]) {
                snprintf(a->why, sizeof(a->why),
                         "thread %d pull key %" PRIu64 "[%d]: expected %" PRId64 ", got %" PRId64,
                         a->t, keys[j], e, sum[j][e], out[j * THREAD_ELEMS + e]);
                a->failed = 1;
                return NULL;
            }
    return NULL;
bad:
    snprintf(a->why, sizeof(a->why), "thread %d: %s", a->t, ps_status_str(st));
    a->failed = 1;
    return NULL;
}

/* Returns the number of requests the threads issued. */
static int run_threads(ps_postoffice_t *po, ps_kv_worker_t *w)
{
    thread_arg_t args[THREADS];
    ps_thread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        memset(&args[t], 0, sizeof(args[t]));
        args[t].po = po;
        args[t].w = w;
        args[t].t = t;
        args[t].rank = t_rank;
        args[t].done = MY_DONE;
        CHECK_OK(ps_thread_create("kv_check", PS_THREAD_NO_CPU, thread_main, &args[t], &th[t]));
    }
    int issued = 0;
    for (int t = 0; t < THREADS; t++) {
        CHECK_OK(ps_thread_join(&th[t], NULL));
        if (args[t].failed)
            check_fail("%s", args[t].why);
        issued += args[t].issued;
    }
    return issued;
}

static int g_copy; /* --copy: pull responses copied, not received in place */
static ps_kv_slicer_func_t g_slicer; /* --slicer */

static ps_status_t slice_interleave(void *arg, const ps_key_t *keys, size_t n, int servers,
                                    int *server_of)
{
    (void)arg;
    for (size_t i = 0; i < n; i++)
        server_of[i] = (int)(((keys[i] * 0x9E3779B97F4A7C15ull) >> 33) % (uint64_t)servers);
    return PS_OK;
}

static ps_status_t slice_ordered(void *arg, const ps_key_t *keys, size_t n, int servers,
                                 int *server_of)
{
    (void)arg;
    for (size_t i = 0; i < n; i++)
        server_of[i] = keys[i] < UINT64_MAX / 4 ? 0 : servers - 1;
    return PS_OK;
}

/* Small requests, each to one server and within a lane message: a
 * push-pull of one key again and again (each answer the exact running sum
 * of this worker's pushes, on keys only it touches), a push of three keys
 * with lengths, then pulls of both. With a lane (ps_postoffice_lane_max),
 * they take it; the caller checks the stats say so. Returns the requests
 * issued. */
#define SMALL_ROUNDS 24
static int run_small(ps_postoffice_t *po, ps_kv_worker_t *w, int me)
{
    uint64_t b, e;
    CHECK_OK(ps_postoffice_server_key_range(po, me % g_num_servers, &b, &e));
    /* Clear of the table's keys and of run_threads' (b + 4096 + ...). */
    ps_key_t k0 = b + (1u << 20) + (ps_key_t)me * 16;
    int issued = 0, ts;

    ps_kv_pairs_t push = {alloc_slice(sizeof(ps_key_t)), alloc_slice(2 * sizeof(int32_t)),
                          PS_SLICE_EMPTY_INIT, PS_DATA_INT32};
    ps_kv_pairs_t out = {ps_slice_ref(&push.keys), alloc_slice(2 * sizeof(int32_t)),
                         PS_SLICE_EMPTY_INIT, PS_DATA_INT32};
    memcpy(ps_slice_ptr(&push.keys), &k0, sizeof(k0));
    int32_t want[2] = {0, 0};
    for (int r = 1; r <= SMALL_ROUNDS; r++) {
        int32_t v[2] = {me * 1000 + r, -r};
        memcpy(ps_slice_ptr(&push.vals), v, sizeof(v));
        want[0] += v[0];
        want[1] += v[1];
        CHECK_OK(ps_kv_zpushpull(w, &push, &out, 0, on_done, MY_DONE, &ts));
        issued++;
        CHECK_OK(wait_ts(w, ts));
        if (memcmp(ps_slice_ptr(&out.vals), want, sizeof(want)) != 0) {
            const int32_t *got = ps_slice_ptr(&out.vals);
            check_fail("small push-pull %d of key %llu: got {%d, %d}, expected {%d, %d}", r,
                       (unsigned long long)k0, got[0], got[1], want[0], want[1]);
        }
    }

    /* Three keys of 1, 2 and 3 int64 elements, pushed twice. */
    ps_key_t keys[3] = {k0 + 1, k0 + 2, k0 + 3};
    int32_t lens[3] = {1, 2, 3};
    int64_t vals[6], sum[6], got[6];
    for (int i = 0; i < 6; i++) {
        vals[i] = ((int64_t)me << 40) + i * 7 - 3;
        sum[i] = 2 * vals[i];
    }
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ps_kv_push(w, keys, 3, vals, sizeof(vals), lens, PS_DATA_INT64, 0, on_done,
                            MY_DONE, &ts));
        issued++;
        CHECK_OK(wait_ts(w, ts));
    }
    memset(got, 0x5A, sizeof(got));
    CHECK_OK(ps_kv_pull(w, keys, 3, got, sizeof(got), lens, PS_DATA_INT64, 0, on_done, MY_DONE,
                        &ts));
    issued++;
    CHECK_OK(wait_ts(w, ts));
    if (memcmp(got, sum, sizeof(sum)) != 0)
        check_fail("small pull of three keys with lengths: wrong values");
    int32_t last[2];
    CHECK_OK(ps_kv_pull(w, &k0, 1, last, sizeof(last), NULL, PS_DATA_INT32, 0, on_done, MY_DONE,
                        &ts));
    issued++;
    CHECK_OK(wait_ts(w, ts));
    if (memcmp(last, want, sizeof(want)) != 0)
        check_fail("small pull of key %llu: wrong values", (unsigned long long)k0);
    for (ps_kv_pairs_t *x = &push; x; x = x == &push ? &out : NULL) {
        ps_slice_unref(&x->keys);
        ps_slice_unref(&x->vals);
    }
    return issued;
}

static void run_worker(ps_postoffice_t *po)
{
    ps_kv_worker_t *w;
    CHECK_OK(ps_kv_worker_create(po, 0, 0, &w));
    if (g_copy)
        ps_kv_worker_set_recv_in_place(w, 0);
    if (g_slicer)
        ps_kv_worker_set_slicer(w, g_slicer, NULL);
    build_table(po);
    int me = t_rank;
    int issued = 0;
    int uncounted = 0; /* requests issued without a callback (error cases) */
    batch_t b[NUM_TYPES];

    /* Round 0: everything in flight at once. */
    int ts[NUM_TYPES];
    for (size_t t = 0; t < NUM_TYPES; t++) {
        make_batch(&b[t], k_types[t], me, 0, 0);
        if (t % 2 == 0) {
            const batch_t *x = &b[t];
            CHECK_OK(ps_kv_push(w, ps_slice_ptr(&x->kvs.keys), (size_t)x->n,
                                ps_slice_ptr(&x->kvs.vals), x->bytes,
                                x->uniform ? NULL : ps_slice_ptr(&x->kvs.lens), x->type, 0,
                                on_done, MY_DONE, &ts[t]));
        } else {
            CHECK_OK(ps_kv_zpush(w, &b[t].kvs, 0, on_done, MY_DONE, &ts[t]));
        }
        issued++;
    }
    for (size_t t = 0; t < NUM_TYPES; t++) {
        CHECK_OK(wait_ts(w, ts[t]));
        free_batch(&b[t]);
    }
    barrier_workers(po);

    /* Round 1: one worker at a time; each answer is the exact running sum. */
    for (int turn = 0; turn < g_num_workers; turn++) {
        if (turn == me) {
            for (size_t t = 0; t < NUM_TYPES; t++) {
                make_batch(&b[t], k_types[t], me, 1, 0);
                CHECK_OK(ps_kv_zpushpull(w, &b[t].kvs, &b[t].out, 0, on_done, MY_DONE, &ts[t]));
                issued++;
            }
            for (size_t t = 0; t < NUM_TYPES; t++) {
                CHECK_OK(wait_ts(w, ts[t]));
                verify(&b[t], ps_slice_ptr(&b[t].out.vals), 1, me + 1, "round 1 push-pull");
                free_batch(&b[t]);
            }
        }
        barrier_workers(po);
    }

    /* Round 2: all at once; only the owner-written CHAR values are
     * predictable here, the sums are checked by the final pull. */
    for (size_t t = 0; t < NUM_TYPES; t++) {
        make_batch(&b[t], k_types[t], me, 2, 0);
        CHECK_OK(ps_kv_zpushpull(w, &b[t].kvs, &b[t].out, 0, on_done, MY_DONE, &ts[t]));
        issued++;
    }
    for (size_t t = 0; t < NUM_TYPES; t++) {
        CHECK_OK(wait_ts(w, ts[t]));
        if (k_types[t] == PS_DATA_CHAR)
            verify(&b[t], ps_slice_ptr(&b[t].out.vals), 2, me + 1, "round 2 push-pull (char)");
        free_batch(&b[t]);
    }
    barrier_workers(po);

    /* Final: every key anyone pushed, every byte. */
    size_t verified_bytes = 0;
    int verified_keys = 0;
    for (size_t t = 0; t < NUM_TYPES; t++) {
        batch_t *x = &b[t];
        make_batch(x, k_types[t], me, -1, 1);
        if ((t + (size_t)me) % 2 == 0) {
            unsigned char *dst = malloc(x->bytes ? x->bytes : 1);
            memset(dst, 0x5A, x->bytes);
            int pts;
            CHECK_OK(ps_kv_pull(w, ps_slice_ptr(&x->kvs.keys), (size_t)x->n, dst, x->bytes,
                                x->uniform ? NULL : ps_slice_ptr(&x->kvs.lens), x->type, 0,
                                on_done, MY_DONE, &pts));
            issued++;
            CHECK_OK(wait_ts(w, pts));
            verify(x, dst, ROUNDS, 0, "final pull");
            free(dst);
        } else {
            int pts;
            CHECK_OK(ps_kv_zpull(w, &x->out, 0, on_done, MY_DONE, &pts));
            issued++;
            CHECK_OK(wait_ts(w, pts));
            verify(x, ps_slice_ptr(&x->out.vals), ROUNDS, 0, "final zpull");
        }
        verified_bytes += x->bytes;
        verified_keys += x->n;
        free_batch(x);
    }

    /* Several threads issuing at once on this worker. */
    issued += run_threads(po, w);

    /* Small requests (the small lane, where the postoffice has one). */
    ps_kv_worker_stats_t before;
    ps_kv_worker_stats(w, &before);
    issued += run_small(po, w, me);

    /* Error cases, from one worker. */
    if (me == 0) {
        /* A key nobody pushed: not in the table. */
        ps_key_t k = g_keys[0].key + 1;
        for (int i = 1; i < g_num_keys && g_keys[i].key == k; i++)
            k++;
        char buf[8];
        int pts;
        CHECK_OK(ps_kv_pull(w, &k, 1, buf, sizeof(buf), NULL, PS_DATA_CHAR, 0, NULL, NULL,
                            &pts));
        uncounted++;
        ps_status_t st = wait_ts(w, pts);
        if (st != PS_ERR_NOT_FOUND)
            check_fail("pull of an unknown key: expected not found, got %s", ps_status_str(st));
        /* Wrong size: a CHAR key pulled with 8 bytes more than it has. */
        for (int i = 0; i < g_num_keys; i++) {
            if (g_keys[i].type != PS_DATA_CHAR || g_keys[i].elems == 0)
                continue;
            size_t n = (size_t)g_keys[i].elems + 8;
            char *big = malloc(n);
            CHECK_OK(ps_kv_pull(w, &g_keys[i].key, 1, big, n, NULL, PS_DATA_CHAR, 0, NULL, NULL,
                                &pts));
            uncounted++;
            st = wait_ts(w, pts);
            free(big);
            if (st != PS_ERR_PROTOCOL)
                check_fail("pull with the wrong size: expected protocol error, got %s",
                           ps_status_str(st));
            break;
        }
        /* No keys: completes at once, callback included. */
        int before = atomic_load(&MY_DONE->calls);
        CHECK_OK(ps_kv_push(w, NULL, 0, NULL, 0, NULL, PS_DATA_FLOAT, 0, on_done, MY_DONE, &pts));
        issued++;
        if (atomic_load(&MY_DONE->calls) != before + 1)
            check_fail("a push of no keys did not complete at once");
        CHECK_OK(wait_ts(w, pts));
        /* Unsorted keys are refused before anything is sent. */
        ps_key_t bad[2] = {5, 3};
        float v[2] = {0, 0};
        if (ps_kv_push(w, bad, 2, v, sizeof(v), NULL, PS_DATA_FLOAT, 0, NULL, NULL, &pts) !=
            PS_ERR_INVALID_ARG)
            check_fail("unsorted keys were accepted");
    }

    if (atomic_load(&MY_DONE->calls) != issued)
        check_fail("%d callbacks for %d requests", atomic_load(&MY_DONE->calls), issued);
    if (atomic_load(&MY_DONE->errors) != 0)
        check_fail("%d callbacks reported an error", atomic_load(&MY_DONE->errors));

    /* Where pulled values landed: straight in the destination when the van
     * says it can (PS_CAP_RECV_INTO_DEST), else copied once. */
    ps_kv_worker_stats_t stats;
    ps_kv_worker_stats(w, &stats);
    if (stats.requests != (uint64_t)(issued + uncounted))
        check_fail("stats: %llu requests, issued %d", (unsigned long long)stats.requests, issued);
    if (!g_copy && (ps_postoffice_capabilities(po) & PS_CAP_RECV_INTO_DEST) &&
        stats.pull_bytes_copied)
        check_fail("%llu pulled bytes were copied although the van receives into the destination",
                   (unsigned long long)stats.pull_bytes_copied);
    if (g_copy && stats.pull_bytes_in_place)
        check_fail("%llu pulled bytes landed in place with --copy",
                   (unsigned long long)stats.pull_bytes_in_place);
    if (stats.pull_bytes_in_place + stats.pull_bytes_copied + stats.pull_bytes_small <
        verified_bytes)
        check_fail("stats: only %llu pulled bytes accounted for",
                   (unsigned long long)(stats.pull_bytes_in_place + stats.pull_bytes_copied +
                                        stats.pull_bytes_small));
    /* Every small request of run_small went on the lane, if there is one;
     * none went there without one. */
    uint64_t small_msgs = stats.lane_messages - before.lane_messages;
    uint64_t small_bytes = stats.pull_bytes_small - before.pull_bytes_small;
    if (ps_postoffice_lane_max(po) > 0) {
        if (small_msgs < SMALL_ROUNDS + 4 || small_bytes < (SMALL_ROUNDS + 1) * 8 + 48)
            check_fail("small lane: %llu lane messages and %llu small pulled bytes for %d "
                       "small requests", (unsigned long long)small_msgs,
                       (unsigned long long)small_bytes, SMALL_ROUNDS + 4);
    } else if (stats.lane_messages != 0 || stats.pull_bytes_small != 0) {
        check_fail("no small lane, yet %llu lane messages", (unsigned long long)stats.lane_messages);
    }

    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, BARRIER_TIMEOUT_MS));
    ps_kv_worker_destroy(w);
    snprintf(g_summary, sizeof(g_summary),
             "%d keys, %zu bytes verified, %d requests (%llu on the small lane), %llu bytes "
             "pulled in place, %llu copied, %llu small",
             verified_keys, verified_bytes, issued, (unsigned long long)stats.lane_messages,
             (unsigned long long)stats.pull_bytes_in_place,
             (unsigned long long)stats.pull_bytes_copied,
             (unsigned long long)stats.pull_bytes_small);
}

/* With --slicer: the store's handler, after checking that every key of the
 * request is one the slicer gives to this server. */
typedef struct {
    ps_kv_store_t *store;
    int rank, servers;
    atomic_ullong keys_checked;
} sliced_store_t;

static void sliced_handler(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                           ps_kv_server_t *server)
{
    sliced_store_t *s = arg;
    size_t n = ps_kv_pairs_num_keys(req);
    const ps_key_t *keys = ps_slice_ptr(&req->keys);
    int *owner = malloc((n ? n : 1) * sizeof(*owner));
    if (owner && n && g_slicer(NULL, keys, n, s->servers, owner) == PS_OK) {
        for (size_t i = 0; i < n; i++)
            if (owner[i] != s->rank)
                check_fail("server %d got key %llu, which the slicer gives to server %d",
                           s->rank, (unsigned long long)keys[i], owner[i]);
        atomic_fetch_add(&s->keys_checked, n);
    }
    free(owner);
    ps_kv_store_handler(s->store, meta, req, server);
}

static void run_server(ps_postoffice_t *po)
{
    ps_kv_store_t *store;
    ps_kv_server_t *server;
    CHECK_OK(ps_kv_store_create(&store));
    sliced_store_t sliced = {store, t_rank, g_num_servers, 0};
    if (g_slicer)
        CHECK_OK(ps_kv_server_create(po, 0, sliced_handler, &sliced, &server));
    else
        CHECK_OK(ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server));
    /* Serves until the workers are done. */
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, 10 * BARRIER_TIMEOUT_MS));
    ps_kv_server_destroy(server);
    snprintf(g_summary, sizeof(g_summary), "%zu keys stored%s", ps_kv_store_num_keys(store),
             g_slicer ? ", each where the slicer sent it" : "");
    /* (The ordered slicer leaves the middle servers without keys.) */
    if (g_slicer == slice_interleave && atomic_load(&sliced.keys_checked) == 0)
        check_fail("server %d: no request came", sliced.rank);
    ps_kv_store_destroy(store);
}

/* Waits until the workers are done. */
static void run_scheduler(ps_postoffice_t *po)
{
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, 10 * BARRIER_TIMEOUT_MS));
}

/* One instance: its role's function, finalize, its PASS line. */
static void run_instance(ps_postoffice_t *po)
{
    /* (The postoffice is gone after check_node_run.) */
    const char *role = ps_role_str(ps_postoffice_role(po));
    int rank = ps_postoffice_my_rank(po);
    int group_size = ps_postoffice_group_size(po);
    t_instance = ps_postoffice_instance(po);
    t_rank = rank / group_size;
    check_node_run(po, run_worker, run_server, run_scheduler);
    if (group_size > 1)
        printf("PASS %s %d: %s (group %d, instance %d)\n", role, rank, g_summary, t_rank,
               t_instance);
    else
        printf("PASS %s %d: %s\n", role, rank, g_summary);
}

static void *instance_main(void *arg)
{
    run_instance(arg);
    return NULL;
}

/* This process's one node. */
static void run_one(void)
{
    ps_postoffice_t *po = check_node_start();
    g_num_workers = ps_postoffice_num_workers(po);
    g_num_servers = ps_postoffice_num_servers(po);
    run_instance(po);
}

/* --whole-group: every instance of this process's group, a thread each
 * (the scheduler is one node). */
static void run_whole_group(void)
{
    ps_start_params_t params;
    CHECK_OK(ps_start_params_from_env(&params));
    if (params.role == PS_ROLE_SCHEDULER) {
        run_one();
        return;
    }
    int g = params.group_size;
    ps_postoffice_t **pos = calloc((size_t)g, sizeof(*pos));
    ps_thread_t *th = calloc((size_t)g, sizeof(*th));
    if (!pos || !th)
        check_fail("out of memory");
    check_role = ps_role_str(params.role);
    CHECK_OK(ps_postoffice_start_group(NULL, 1, pos));
    g_num_workers = ps_postoffice_num_workers(pos[0]);
    g_num_servers = ps_postoffice_num_servers(pos[0]);
    for (int i = 0; i < g; i++) {
        if (ps_postoffice_instance(pos[i]) != i)
            check_fail("postoffice %d of the group is instance %d", i,
                       ps_postoffice_instance(pos[i]));
        CHECK_OK(ps_thread_create("kv_check_inst", PS_THREAD_NO_CPU, instance_main, pos[i],
                                  &th[i]));
    }
    for (int i = 0; i < g; i++)
        CHECK_OK(ps_thread_join(&th[i], NULL));
    free(pos);
    free(th);
}

int main(int argc, char **argv)
{
    int whole_group = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--copy") == 0) {
            g_copy = 1;
        } else if (strcmp(argv[i], "--whole-group") == 0) {
            whole_group = 1;
        } else if (strcmp(argv[i], "--slicer=interleave") == 0) {
            g_slicer = slice_interleave;
        } else if (strcmp(argv[i], "--slicer=ordered") == 0) {
            g_slicer = slice_ordered;
        } else {
            fprintf(stderr, "usage: kv_check [--copy] [--whole-group] "
                    "[--slicer=interleave|ordered]\n");
            return 2;
        }
    }
    CHECK_OK(ps_mutex_init(&g_keys_lock));
    if (whole_group)
        run_whole_group();
    else
        run_one();
    free(g_keys);
    ps_mutex_destroy(&g_keys_lock);
    return 0;
}

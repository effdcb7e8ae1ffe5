/*
 * sum_check: one process of a summation job (scheduler, server or worker
 * from DMLC_*, e.g. through tools/launch/ps_launch.py). Servers run the
 * summation server (ps_sum_server_run, what tools/sum_server runs), with
 * BYTEPS_* from the environment; workers push and pull tensors of every
 * data type through the partitioning helper and check every element.
 *
 * Every worker derives the values any worker pushes in any round from
 * (rank, round, tensor, element), so each computes every expected sum
 * itself, in double precision:
 *  - integers: exact (wrapping) sums;
 *  - floats: with one or two terms the result must be the exact sum rounded
 *    once to the type; with more terms, whose order of arrival is not
 *    known, within the bound of recursive summation,
 *    |error| <= (m-1)u/(1-(m-1)u) * sum|x| (+ underflow), u the type's unit
 *    roundoff; tensors of small integers must be exact whatever the order.
 *
 * Sync mode: R rounds; even rounds one push-pull request per part, odd
 * rounds a push of everything then a pull. One tensor is pulled by worker
 * 0 before anyone pushed it: its wait must time out until the others push.
 * Async mode (BYTEPS_ENABLE_ASYNC=1): R rounds of pushes (and unchecked
 * pulls in between), then every tensor must hold the sum of all pushes.
 *
 * --dead DIR (sync, one server): the last worker pushes key A, then leaves
 * without finalizing; the others push A and B: A's round completes, B's
 * pull and A's next round must fail with "no value" (PS_ERR_NOT_FOUND),
 * not hang. The scheduler and server wait for the live workers' files in
 * DIR before leaving, and the server checks it failed exactly those
 * rounds.
 *
 * Prints "PASS <role> <rank>: ..." and exits 0, or "FAIL ..." and exits 1.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/app/kv.h"
#include "ps/app/kv_sum.h"
#include "ps/app/sum/partition.h"
#include "ps/app/sum/sum_server.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"
#include "tests/lib/check_node.h"

#define WAIT_MS 60000
#define BARRIER_MS 120000
#define SERVE_MS 300000

static char g_summary[512] = "done";

/* ---- deterministic values ---- */

typedef struct {
    uint32_t id;
    ps_data_type_t type;
    size_t elems;
    int exact; /* small integers: sums exact in any order */
    ps_sum_tensor_t *t;
    ps_slice_t src, dst;
} tensor_t;

static const ps_data_type_t k_types[] = {
    PS_DATA_FLOAT, PS_DATA_DOUBLE, PS_DATA_FLOAT16, PS_DATA_BFLOAT16,
    PS_DATA_INT8,  PS_DATA_UINT8,  PS_DATA_INT32,   PS_DATA_INT64,
};
#define NUM_TYPES (sizeof(k_types) / sizeof(k_types[0]))
static const size_t k_sizes[] = {1, 1000, 40000};
#define NUM_SIZES (sizeof(k_sizes) / sizeof(k_sizes[0]))

static int is_float(ps_data_type_t t)
{
    return t == PS_DATA_FLOAT || t == PS_DATA_DOUBLE || t == PS_DATA_FLOAT16 ||
           t == PS_DATA_BFLOAT16;
}

/* This worker's rank in its instance's job, and its instance (instance
 * groups: each instance sums its own values, salted with the instance, so
 * a push that reached another instance's server shows as a wrong sum). */
static int g_rank;
static int g_instance;

/* Element i of tensor `x` as pushed by `rank` in `round`, written to out. */
static void gen(const tensor_t *x, int rank, int round, size_t i, void *out)
{
    uint64_t h = check_hash4((uint64_t)rank + 1 + ((uint64_t)g_instance << 32),
                             (uint64_t)round + 1, x->id, i);
    double v = x->exact ? (double)((int)(h % 17) - 8)
                        : ((double)(h >> 11) * 0x1p-53) * 8.0 - 4.0; /* [-4, 4) */
    switch (x->type) {
    case PS_DATA_FLOAT: { float f = (float)v; memcpy(out, &f, 4); break; }
    case PS_DATA_DOUBLE: memcpy(out, &v, 8); break;
    case PS_DATA_FLOAT16: { uint16_t b = ps_float_to_half((float)v); memcpy(out, &b, 2); break; }
    case PS_DATA_BFLOAT16: { uint16_t b = ps_float_to_bf16((float)v); memcpy(out, &b, 2); break; }
    default: memcpy(out, &h, ps_data_type_size(x->type)); break; /* little-endian low bytes */
    }
}

static double as_double(ps_data_type_t t, const void *p)
{
    switch (t) {
    case PS_DATA_FLOAT: { float f; memcpy(&f, p, 4); return f; }
    case PS_DATA_DOUBLE: { double d; memcpy(&d, p, 8); return d; }
    case PS_DATA_FLOAT16: { uint16_t b; memcpy(&b, p, 2); return ps_half_to_float(b); }
    case PS_DATA_BFLOAT16: { uint16_t b; memcpy(&b, p, 2); return ps_bf16_to_float(b); }
    default: return 0;
    }
}

/* The exact sum rounded once to the type. */
static double round_to(ps_data_type_t t, double v)
{
    switch (t) {
    case PS_DATA_FLOAT: return (float)v;
    case PS_DATA_FLOAT16: return ps_half_to_float(ps_float_to_half((float)v));
    case PS_DATA_BFLOAT16: return ps_bf16_to_float(ps_float_to_bf16((float)v));
    default: return v;
    }
}

static void unit(ps_data_type_t t, double *u, double *tiny)
{
    switch (t) {
    case PS_DATA_FLOAT: *u = 0x1p-24; *tiny = 0x1p-150; break;
    case PS_DATA_DOUBLE: *u = 0x1p-53; *tiny = 0x1p-1074; break;
    case PS_DATA_FLOAT16: *u = 0x1p-11; *tiny = 0x1p-25; break;
    default: *u = 0x1p-8; *tiny = 0x1p-134; break;
    }
}

/* Checks x->dst against the sum of the pushes of `workers` workers over
 * rounds [r0, r1]. */
static size_t verify(const tensor_t *x, int workers, int r0, int r1, const char *what)
{
    size_t es = ps_data_type_size(x->type);
    const unsigned char *got = ps_slice_ptr(&x->dst);
    int m = workers * (r1 - r0 + 1);
    unsigned char v[8];
    for (size_t i = 0; i < x->elems; i++) {
        const unsigned char *g = got + i * es;
        if (!is_float(x->type)) {
            uint64_t sum = 0;
            for (int w = 0; w < workers; w++) {
                for (int r = r0; r <= r1; r++) {
                    uint64_t e = 0;
                    gen(x, w, r, i, v);
                    memcpy(&e, v, es);
                    sum += e;
                }
            }
            uint64_t have = 0;
            memcpy(&have, g, es);
            uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
            if (have != (sum & mask))
                check_fail("%s: tensor %u (%s) element %zu: got %" PRIu64 ", expected %" PRIu64, what,
                           x->id, ps_data_type_str(x->type), i, have, sum & mask);
            continue;
        }
        /* The reference in higher precision than any summed type (x87
         * long double: 64-bit significand); `direct` is the same sum in
         * double, which for two terms is the correctly rounded double sum. */
        long double exact_ld = 0;
        double direct = 0, mag = 0;
        for (int w = 0; w < workers; w++) {
            for (int r = r0; r <= r1; r++) {
                gen(x, w, r, i, v);
                double d = as_double(x->type, v);
                exact_ld += d;
                direct += d;
                mag += fabs(d);
            }
        }
        double exact = (double)exact_ld;
        double have = as_double(x->type, g);
        double u, tiny;
        unit(x->type, &u, &tiny);
        int ok;
        double tol = 0;
        if (m <= 2 || x->exact) {
            /* One rounding (or none): the result is determined. For the
             * 16-bit and 32-bit types the two-term sum is exact in double
             * and rounding it once is what the server's float sum gives. */
            ok = have == (x->type == PS_DATA_DOUBLE ? direct : round_to(x->type, exact));
        } else {
            double k = (double)(m - 1);
            tol = k * u / (1 - k * u) * mag + k * tiny;
            ok = fabsl((long double)have - exact_ld) <= tol;
        }
        if (!ok || isnan(have))
            check_fail("%s: tensor %u (%s%s) element %zu: got %.17g, exact sum %.17g (%d terms, "
                       "tolerance %.3g)",
                       what, x->id, ps_data_type_str(x->type), x->exact ? ", exact" : "", i, have,
                       exact, m, tol);
    }
    return x->elems * es;
}

static void fill(tensor_t *x, int round)
{
    size_t es = ps_data_type_size(x->type);
    unsigned char *p = ps_slice_ptr(&x->src);
    for (size_t i = 0; i < x->elems; i++)
        gen(x, g_rank, round, i, p + i * es);
}

static void tensor_init(tensor_t *x, ps_kv_worker_t *w, ps_postoffice_t *po, uint32_t id,
                        ps_data_type_t type, size_t elems, int exact, size_t part_bytes,
                        int in_place)
{
    size_t bytes = elems * ps_data_type_size(type);
    *x = (tensor_t){.id = id, .type = type, .elems = elems, .exact = exact};
    CHECK_OK(ps_sum_tensor_create(w, po, id, type, bytes, part_bytes, &x->t));
    CHECK_OK(ps_slice_alloc(bytes, 0, &x->src));
    if (in_place)
        x->dst = ps_slice_ref(&x->src);
    else
        CHECK_OK(ps_slice_alloc(bytes, 0, &x->dst));
}

static void tensor_fini(tensor_t *x)
{
    ps_sum_tensor_destroy(x->t);
    ps_slice_unref(&x->src);
    ps_slice_unref(&x->dst);
}

/* ---- worker ---- */

static int g_rounds = 3;
static size_t g_part_bytes = 65536;
static const char *g_dead_dir;

static void run_worker(ps_postoffice_t *po)
{
    int workers = ps_postoffice_num_workers(po);
    int async = ps_config_bool_or(PS_CFG_BYTEPS_ENABLE_ASYNC, 0);
    ps_kv_worker_t *w;
    CHECK_OK(ps_kv_worker_create(po, 0, 0, &w));

    size_t n = NUM_TYPES * NUM_SIZES + 4;
    tensor_t *ts = calloc(n, sizeof(*ts));
    if (!ts)
        check_fail("out of memory");
    size_t k = 0;
    for (size_t t = 0; t < NUM_TYPES; t++)
        for (size_t s = 0; s < NUM_SIZES; s++, k++)
            tensor_init(&ts[k], w, po, (uint32_t)k, k_types[t], k_sizes[s], 0, g_part_bytes,
                        k % 3 == 0);
    /* Small integers in every float type: exact sums in any order. */
    for (size_t t = 0; t < 4; t++, k++)
        tensor_init(&ts[k], w, po, (uint32_t)k, k_types[t], 3000, 1, g_part_bytes, 0);

    size_t verified = 0;
    if (!async) {
        for (int round = 0; round < g_rounds; round++) {
            for (size_t i = 0; i < n; i++)
                fill(&ts[i], round);
            if (round % 2 == 0) {
                for (size_t i = 0; i < n; i++)
                    CHECK_OK(ps_sum_tensor_start(ts[i].t, PS_SUM_OP_PUSH_PULL, &ts[i].src,
                                                 &ts[i].dst));
                for (size_t i = 0; i < n; i++)
                    CHECK_OK(ps_sum_tensor_wait(ts[i].t, WAIT_MS));
            } else {
                for (size_t i = 0; i < n; i++)
                    CHECK_OK(ps_sum_tensor_start(ts[i].t, PS_SUM_OP_PUSH, &ts[i].src, NULL));
                for (size_t i = 0; i < n; i++)
                    CHECK_OK(ps_sum_tensor_wait(ts[i].t, WAIT_MS));
                for (size_t i = 0; i < n; i++)
                    CHECK_OK(ps_sum_tensor_start(ts[i].t, PS_SUM_OP_PULL, NULL, &ts[i].dst));
                for (size_t i = 0; i < n; i++)
                    CHECK_OK(ps_sum_tensor_wait(ts[i].t, WAIT_MS));
            }
            char what[32];
            snprintf(what, sizeof(what), "round %d", round);
            for (size_t i = 0; i < n; i++)
                verified += verify(&ts[i], workers, round, round, what);
        }

        /* A pull before anyone pushed waits for every worker's push. */
        tensor_t e;
        tensor_init(&e, w, po, 5000, PS_DATA_FLOAT, 777, 0, 0, 0);
        if (g_rank == 0) {
            CHECK_OK(ps_sum_tensor_start(e.t, PS_SUM_OP_PULL, NULL, &e.dst));
            ps_status_t st = ps_sum_tensor_wait(e.t, 300);
            if (st != PS_ERR_TIMED_OUT)
                check_fail("early pull: ended with %s before anyone pushed", ps_status_str(st));
        }
        CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, BARRIER_MS));
        fill(&e, 0);
        if (g_rank == 0) {
            /* Its own push goes out while its pull still waits: a push-pull
             * op needs the tensor idle, so push through the KV API. */
            ps_key_t key;
            CHECK_OK(ps_sum_tensor_part(e.t, 0, &key, NULL, NULL));
            ps_kv_pairs_t kv = {PS_SLICE_EMPTY_INIT, e.src, PS_SLICE_EMPTY_INIT, PS_DATA_FLOAT};
            CHECK_OK(ps_slice_alloc(sizeof(key), 0, &kv.keys));
            memcpy(ps_slice_ptr(&kv.keys), &key, sizeof(key));
            int ts_push;
            CHECK_OK(ps_kv_zpush(w, &kv, 0, NULL, NULL, &ts_push));
            CHECK_OK(ps_kv_wait(w, ts_push, WAIT_MS));
            ps_slice_unref(&kv.keys);
            CHECK_OK(ps_sum_tensor_wait(e.t, WAIT_MS));
        } else {
            CHECK_OK(ps_sum_tensor_push(e.t, &e.src, WAIT_MS));
            CHECK_OK(ps_sum_tensor_pull(e.t, &e.dst, WAIT_MS));
        }
        verified += verify(&e, workers, 0, 0, "early pull");
        tensor_fini(&e);
    } else {
        for (int round = 0; round < g_rounds; round++) {
            for (size_t i = 0; i < n; i++)
                fill(&ts[i], round);
            ps_sum_op_t op = round % 2 ? PS_SUM_OP_PUSH_PULL : PS_SUM_OP_PUSH;
            for (size_t i = 0; i < n; i++)
                CHECK_OK(ps_sum_tensor_start(ts[i].t, op, &ts[i].src,
                                             op == PS_SUM_OP_PUSH ? NULL : &ts[i].dst));
            for (size_t i = 0; i < n; i++)
                CHECK_OK(ps_sum_tensor_wait(ts[i].t, WAIT_MS));
        }
        CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, BARRIER_MS));
        for (size_t i = 0; i < n; i++)
            CHECK_OK(ps_sum_tensor_pull(ts[i].t, &ts[i].dst, WAIT_MS));
        for (size_t i = 0; i < n; i++)
            verified += verify(&ts[i], workers, 0, g_rounds - 1, "async total");
        /* Everyone read the totals before anyone pushes again. */
        CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, BARRIER_MS));
    }

    for (size_t i = 0; i < n; i++)
        tensor_fini(&ts[i]);
    free(ts);
    ps_kv_worker_stats_t ws;
    ps_kv_worker_stats(w, &ws);
    ps_kv_worker_destroy(w);
    snprintf(g_summary, sizeof(g_summary),
             "%s, %d rounds, %zu tensors, %zu bytes verified, %" PRIu64 " requests",
             async ? "async" : "sync", g_rounds, n, verified, ws.requests);
}

/* ---- a worker leaving mid-round (--dead) ---- */

static void wait_files(int live)
{
    ps_deadline_t dl = ps_deadline_from_ms(WAIT_MS);
    for (int r = 0; r < live; r++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/done.%d", g_dead_dir, r);
        while (access(path, F_OK) != 0) {
            if (ps_deadline_expired(dl))
                check_fail("worker %d never finished (no %s)", r, path);
            ps_sleep_ms(20);
        }
    }
}

static void run_dead_worker(ps_postoffice_t *po)
{
    int workers = ps_postoffice_num_workers(po);
    int leaver = workers - 1;
    ps_kv_worker_t *w;
    CHECK_OK(ps_kv_worker_create(po, 0, 0, &w));
    tensor_t a, b;
    tensor_init(&a, w, po, 1, PS_DATA_FLOAT, 100, 0, 0, 0);
    tensor_init(&b, w, po, 2, PS_DATA_FLOAT, 100, 0, 0, 0);
    fill(&a, 0);
    fill(&b, 0);
    if (check_rank == leaver) {
        CHECK_OK(ps_sum_tensor_push(a.t, &a.src, WAIT_MS));
        CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, BARRIER_MS));
        printf("PASS worker %d: pushed key A, leaving without pushing B or finalizing\n", check_rank);
        fflush(stdout);
        _exit(0);
    }
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, BARRIER_MS));
    CHECK_OK(ps_sum_tensor_push(a.t, &a.src, WAIT_MS));
    CHECK_OK(ps_sum_tensor_push(b.t, &b.src, WAIT_MS));
    CHECK_OK(ps_sum_tensor_pull(a.t, &a.dst, WAIT_MS));
    verify(&a, workers, 0, 0, "key A (every worker pushed)");
    uint64_t t0 = ps_time_now_ms();
    ps_status_t st = ps_sum_tensor_pull(b.t, &b.dst, WAIT_MS);
    if (st != PS_ERR_NOT_FOUND)
        check_fail("pull of key B (the leaver never pushed): %s, expected PS_ERR_NOT_FOUND",
                   ps_status_str(st));
    uint64_t t_fail = ps_time_now_ms() - t0;
    fill(&a, 1);
    CHECK_OK(ps_sum_tensor_push(a.t, &a.src, WAIT_MS));
    st = ps_sum_tensor_pull(a.t, &a.dst, WAIT_MS);
    if (st != PS_ERR_NOT_FOUND)
        check_fail("pull of key A's next round: %s, expected PS_ERR_NOT_FOUND", ps_status_str(st));
    tensor_fini(&a);
    tensor_fini(&b);
    ps_kv_worker_destroy(w);

    char path[512];
    snprintf(path, sizeof(path), "%s/done.%d", g_dead_dir, check_rank);
    FILE *f = fopen(path, "w");
    if (!f)
        check_fail("cannot create %s", path);
    fclose(f);
    snprintf(g_summary, sizeof(g_summary),
             "key A summed, key B and A's next round failed with PS_ERR_NOT_FOUND "
             "(B after %" PRIu64 " ms)", t_fail);
}

static void run_dead_server(ps_postoffice_t *po)
{
    int live = ps_postoffice_num_workers(po) - 1;
    ps_sum_server_t *srv;
    CHECK_OK(ps_sum_server_create(po, 0, NULL, &srv));
    wait_files(live);
    ps_sum_stats_t st;
    ps_sum_stats(ps_sum_server_sum(srv), &st);
    ps_sum_server_destroy(srv);
    /* The leaver, reported by the postoffice's callback (the live workers
     * may have left too by now). */
    if (st.workers_gone < 1)
        check_fail("the server never learnt that the leaver is gone");
    if (st.keys_failed != 2 || st.pulls_failed != (uint64_t)(2 * live))
        check_fail("expected 2 failed keys and %d failed pulls, got %" PRIu64 " and %" PRIu64,
                   2 * live, st.keys_failed, st.pulls_failed);
    snprintf(g_summary, sizeof(g_summary),
             "%" PRIu64 " rounds, %" PRIu64 " keys failed, %" PRIu64 " pulls answered 'no value'",
             st.rounds, st.keys_failed, st.pulls_failed);
}

/* ---- main ---- */

static void usage(void)
{
    fprintf(stderr, "usage: sum_check [--rounds N] [--part-bytes B] [--dead DIR]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            g_rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--part-bytes") == 0 && i + 1 < argc)
            g_part_bytes = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--dead") == 0 && i + 1 < argc)
            g_dead_dir = argv[++i];
        else
            usage();
    }
    if (g_rounds < 1 || g_part_bytes < 1)
        usage();

    ps_start_params_t params;
    ps_status_t st = ps_start_params_from_env(&params);
    if (st != PS_OK)
        check_fail("environment: %s", ps_status_str(st));
    check_role = ps_role_str(params.role);

    if (!g_dead_dir && params.role != PS_ROLE_WORKER) {
        /* Exactly what tools/sum_server runs. */
        ps_sum_run_result_t res;
        st = ps_sum_server_run(&params, NULL, SERVE_MS, &res);
        check_rank = res.rank;
        if (st != PS_OK)
            check_fail("sum server: %s", ps_status_str(st));
        const ps_sum_stats_t *s = &res.stats;
        if (params.role == PS_ROLE_SERVER) {
            if (s->refused || s->pulls_failed || s->keys_failed || !s->pushes)
                check_fail("server counters: %" PRIu64 " refused, %" PRIu64 " failed pulls, %" PRIu64
                           " failed keys, %" PRIu64 " pushes",
                           s->refused, s->pulls_failed, s->keys_failed, s->pushes);
            snprintf(g_summary, sizeof(g_summary),
                     "%" PRIu64 " keys, %" PRIu64 " pushes, %" PRIu64 " pulls, %" PRIu64
                     " rounds, %" PRIu64 " pulls waited, %" PRIu64 " pushes held, %" PRIu64
                     " stores",
                     s->keys, s->pushes, s->pulls, s->rounds, s->pulls_waited, s->pushes_held,
                     s->stores);
        }
        printf("PASS %s %d: %s\n", check_role, check_rank, g_summary);
        return 0;
    }

    ps_postoffice_t *po;
    st = ps_postoffice_start(&params, 1, &po);
    if (st != PS_OK)
        check_fail("start: %s", ps_status_str(st));
    check_rank = ps_postoffice_my_rank(po);
    g_rank = check_rank / ps_postoffice_group_size(po);
    g_instance = ps_postoffice_instance(po);

    int expect_gone = g_dead_dir != NULL;
    switch (params.role) {
    case PS_ROLE_WORKER:
        if (g_dead_dir)
            run_dead_worker(po);
        else
            run_worker(po);
        break;
    case PS_ROLE_SERVER:
        run_dead_server(po);
        break;
    default:
        wait_files(ps_postoffice_num_workers(po) - 1);
        break;
    }
    /* With a worker gone the final barrier cannot complete: leave anyway. */
    st = ps_postoffice_finalize(po, params.role != PS_ROLE_SERVER || !expect_gone);
    if (st != PS_OK && !(expect_gone && st == PS_ERR_PEER_GONE))
        check_fail("finalize: %s", ps_status_str(st));
    printf("PASS %s %d: %s\n", check_role, check_rank, g_summary);
    return 0;
}

/*
 * sum_bench: throughput of the summation server's sums, next to plain
 * streaming loops measured in the same run over the same buffers.
 *
 *   bazel run -c opt //tests/sum:sum_bench -- [--mb 4] [--sources 8] [--ms 3500]
 *
 * Buffers: one accumulator of --mb MiB and --sources source buffers of the
 * same size (pushes from that many workers), so the working set (9 x 4 MiB
 * by default) is larger than a typical last-level cache slice, as on a
 * server summing pushes from the network. Figures are GB/s (1e9 bytes) of
 * INPUT processed: the bytes of the pushes summed per second.
 *
 *  - references: a[i] += b[i] and a[i] = b[i] + c[i] as plain C loops
 *    (compiled -O3, both for the baseline ISA and for AVX2; the faster is
 *    the reference), and memcpy;
 *  - kernels: ps_kv_sum (dst += src) and ps_kv_sum3 (dst = a + b) for
 *    float32 at every level, float16 and bfloat16 at every level;
 *  - server: a ps_sum (no network; answers go to a counting responder)
 *    summing rounds of --sources pushes per key over 8 keys, with 1, 2 and
 *    4 engine threads and in blocking mode.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/kv.h"
#include "ps/app/kv_sum.h"
#include "ps/app/sum/sum_server.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/time.h"

static size_t g_bytes = 4u << 20;
static int g_sources = 8;
static uint64_t g_ms = 3500; /* per probe, over all trials */

static void *xalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n) != 0) {
        fprintf(stderr, "sum_bench: out of memory\n");
        exit(1);
    }
    memset(p, 0, n);
    return p;
}

/* ---- plain loops (the references) ---- */

__attribute__((noinline)) static void plain_add(float *restrict a, const float *restrict b,
                                                size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] += b[i];
}

__attribute__((noinline)) static void plain_add3(float *restrict a, const float *restrict b,
                                                 const float *restrict c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + c[i];
}

#if defined(__x86_64__)
__attribute__((noinline, target("avx2"))) static void plain_add_avx2(float *restrict a,
                                                                     const float *restrict b,
                                                                     size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] += b[i];
}

__attribute__((noinline, target("avx2"))) static void plain_add3_avx2(float *restrict a,
                                                                      const float *restrict b,
                                                                      const float *restrict c,
                                                                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + c[i];
}
#endif

/* ---- timing ---- */

typedef void (*step_func_t)(void *ctx, int source);

/* One sample: runs step over the sources round-robin for about `ms`;
 * GB/s of `in_bytes` per step. */
static double sample(step_func_t step, void *ctx, size_t in_bytes, uint64_t ms)
{
    for (int s = 0; s < g_sources; s++) /* warm up */
        step(ctx, s);
    uint64_t t0 = ps_time_now_ns(), n = 0, t;
    uint64_t until = t0 + ms * 1000000ull;
    do {
        for (int s = 0; s < g_sources; s++)
            step(ctx, s);
        n += (uint64_t)g_sources;
        t = ps_time_now_ns();
    } while (t < until);
    return (double)n * (double)in_bytes / (double)(t - t0);
}

typedef struct {
    float *acc;
    float **src;
    ps_data_type_t type;
    ps_kv_sum_level_t level;
    int variant; /* 0 plain, 1 plain avx2 */
} kctx_t;

static void step_plain_add(void *c, int s)
{
    kctx_t *k = c;
#if defined(__x86_64__)
    if (k->variant) {
        plain_add_avx2(k->acc, k->src[s], g_bytes / 4);
        return;
    }
#endif
    plain_add(k->acc, k->src[s], g_bytes / 4);
}

static void step_plain_add3(void *c, int s)
{
    kctx_t *k = c;
    const float *b = k->src[s], *d = k->src[(s + 1) % g_sources];
#if defined(__x86_64__)
    if (k->variant) {
        plain_add3_avx2(k->acc, b, d, g_bytes / 4);
        return;
    }
#endif
    plain_add3(k->acc, b, d, g_bytes / 4);
}

static void step_memcpy(void *c, int s)
{
    kctx_t *k = c;
    memcpy(k->acc, k->src[s], g_bytes);
}

static void step_sum(void *c, int s)
{
    kctx_t *k = c;
    ps_kv_sum3_at(k->level, k->type, k->acc, k->acc, k->src[s], g_bytes);
}

static void step_sum3(void *c, int s)
{
    kctx_t *k = c;
    ps_kv_sum3_at(k->level, k->type, k->acc, k->src[s], k->src[(s + 1) % g_sources], g_bytes);
}

/* ---- the server path ---- */

typedef struct {
    atomic_uint_least64_t answers;
} counter_t;

static ps_status_t count_respond(void *arg, ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                 const ps_kv_pairs_t *res)
{
    (void)server;
    (void)meta;
    (void)res;
    atomic_fetch_add(&((counter_t *)arg)->answers, 1);
    return PS_OK;
}

#define SERVER_KEYS 8

static double bench_server(float **src, int threads, int blocking, int schedule, uint64_t ms)
{
    ps_sum_options_t o;
    ps_sum_options_init(&o);
    o.num_workers = g_sources;
    o.engine_threads = threads;
    o.engine_blocking = blocking;
    o.schedule = schedule;
    ps_sum_t *sum;
    if (ps_sum_create(&o, NULL, &sum) != PS_OK)
        return 0;
    counter_t cnt;
    atomic_init(&cnt.answers, 0);
    ps_sum_set_responder(sum, count_respond, &cnt);

    /* Pushes are zero-copy slices of the source buffers. */
    ps_slice_t vals[64], keys[SERVER_KEYS];
    for (int s = 0; s < g_sources; s++)
        ps_slice_wrap(src[s], g_bytes, NULL, NULL, &vals[s]);
    for (int k = 0; k < SERVER_KEYS; k++) {
        ps_slice_alloc(8, 0, &keys[k]);
        uint64_t key = (uint64_t)k;
        memcpy(ps_slice_ptr(&keys[k]), &key, 8);
    }

    uint64_t rounds = 0, t0 = 0, t = 0;
    int ts = 0;
    for (int phase = 0; phase < 2; phase++) { /* 0: warm-up round */
        uint64_t until = ps_time_now_ns() + (phase ? ms * 1000000ull : 0);
        if (phase)
            t0 = ps_time_now_ns();
        do {
            for (int k = 0; k < SERVER_KEYS; k++) {
                for (int w = 0; w < g_sources; w++) {
                    ps_kv_meta_t m = {.push = 1, .sender = 9 + 2 * w, .timestamp = ts++,
                                      .key = (uint64_t)k, .type = PS_DATA_FLOAT};
                    ps_kv_pairs_t req = {keys[k], vals[w], PS_SLICE_EMPTY_INIT, PS_DATA_FLOAT};
                    ps_sum_handler(sum, &m, &req, NULL);
                }
            }
            for (int k = 0; k < SERVER_KEYS; k++) {
                for (int w = 0; w < g_sources; w++) {
                    ps_kv_meta_t m = {.pull = 1, .sender = 9 + 2 * w, .timestamp = ts++,
                                      .key = (uint64_t)k, .type = PS_DATA_FLOAT};
                    ps_kv_pairs_t req = {keys[k], PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                                         PS_DATA_FLOAT};
                    ps_sum_handler(sum, &m, &req, NULL);
                }
            }
            ps_sum_flush(sum, 60000);
            if (phase)
                rounds++;
            t = ps_time_now_ns();
        } while (t < until);
    }
    ps_sum_stats_t st;
    ps_sum_stats(sum, &st);
    ps_sum_destroy(sum);
    for (int s = 0; s < g_sources; s++)
        ps_slice_unref(&vals[s]);
    for (int k = 0; k < SERVER_KEYS; k++)
        ps_slice_unref(&keys[k]);
    uint64_t want = (rounds + 1) * SERVER_KEYS * (uint64_t)g_sources * 2;
    if (atomic_load(&cnt.answers) != want || st.rounds != (rounds + 1) * SERVER_KEYS) {
        fprintf(stderr, "sum_bench: server answered %" PRIu64 " of %" PRIu64 " requests\n",
                (uint64_t)atomic_load(&cnt.answers), want);
        return 0;
    }
    return (double)rounds * SERVER_KEYS * g_sources * (double)g_bytes / (double)(t - t0);
}

/* ---- main ---- */

#define TRIALS 7

typedef struct {
    const char *name;
    step_func_t step; /* NULL: the server path */
    kctx_t ctx;
    size_t in_bytes;
    int threads, blocking, schedule;
    int ref; /* 0: compare with a[i] += b[i], 1: with a[i] = b[i] + c[i], -1: none */
    double gbs[TRIALS];
} probe_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[TRIALS];
    memcpy(s, v, (size_t)n * sizeof(*v));
    qsort(s, (size_t)n, sizeof(*s), cmp_double);
    return s[n / 2];
}

static double minimum(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double maximum(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static float **g_src;

static double probe_run(probe_t *x, uint64_t ms)
{
    return x->step ? sample(x->step, &x->ctx, x->in_bytes, ms)
                   : bench_server(g_src, x->threads, x->blocking, x->schedule, ms);
}

#define PAIRS 25

/* Candidate against reference in alternating short runs (ref, cand, ref,
 * ...): each candidate run is compared with the mean of the reference runs
 * around it, so load that changes over seconds cancels out. Median of the
 * PAIRS ratios. */
static double paired_ratio(probe_t *ref, probe_t *cand, uint64_t ms)
{
    double ratios[PAIRS];
    double before = probe_run(ref, ms);
    for (int i = 0; i < PAIRS; i++) {
        double c = probe_run(cand, ms);
        double after = probe_run(ref, ms);
        ratios[i] = c / ((before + after) / 2);
        before = after;
    }
    qsort(ratios, PAIRS, sizeof(double), cmp_double);
    return ratios[PAIRS / 2];
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc) {
            g_bytes = (size_t)(atof(argv[++i]) * (1 << 20)) & ~(size_t)63;
        } else if (strcmp(argv[i], "--sources") == 0 && i + 1 < argc) {
            g_sources = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
            g_ms = (uint64_t)atol(argv[++i]);
        } else {
            fprintf(stderr, "usage: sum_bench [--mb MiB] [--sources N] [--ms MS]\n");
            return 2;
        }
    }
    if (g_bytes < 64 || g_sources < 2 || g_sources > 64 || g_ms < 70) {
        fprintf(stderr, "sum_bench: --mb >= 64 bytes, 2 <= --sources <= 64, --ms >= 70\n");
        return 2;
    }

    float *acc = xalloc(g_bytes);
    float **src = calloc((size_t)g_sources, sizeof(*src));
    for (int s = 0; s < g_sources; s++) {
        src[s] = xalloc(g_bytes);
        for (size_t i = 0; i < g_bytes / 4; i++) /* small values: no overflow, no denormals */
            src[s][i] = (float)((i + (size_t)s) % 7) * 0.125f;
    }

    printf("sum_bench: %.2f MiB per push, %d sources (working set %.0f MiB), best kernels %s\n",
           (double)g_bytes / (1 << 20), g_sources, (double)g_bytes * (g_sources + 1) / (1 << 20),
           ps_kv_sum_level_name(ps_kv_sum_level()));
    printf("GB/s of input processed (1e9 bytes of pushed values per second)\n\n");

    /* Every probe is sampled once per trial, trials round-robin, so that
     * load from other processes hits them alike; medians are reported. */
    probe_t probes[64];
    int np = 0;
    int ref_add = -1, ref_add3 = -1, ref_add_avx2 = -1, ref_add3_avx2 = -1, best_sum = -1;
    int first_server = 0;
    for (int v = 0; v < 2; v++) {
#if !defined(__x86_64__)
        if (v)
            break;
#endif
        kctx_t c = {.acc = acc, .src = src, .type = PS_DATA_FLOAT, .variant = v};
        if (v)
            ref_add_avx2 = np;
        else
            ref_add = np;
        probes[np++] = (probe_t){v ? "plain a[i] += b[i] (avx2)" : "plain a[i] += b[i] (baseline)",
                                 step_plain_add, c, g_bytes, 0, 0, 0, -1, {0}};
        if (v)
            ref_add3_avx2 = np;
        else
            ref_add3 = np;
        probes[np++] = (probe_t){v ? "plain a[i] = b[i] + c[i] (avx2)"
                                   : "plain a[i] = b[i] + c[i] (baseline)",
                                 step_plain_add3, c, 2 * g_bytes, 0, 0, 0, -1, {0}};
    }
    {
        kctx_t c = {.acc = acc, .src = src};
        probes[np++] = (probe_t){"memcpy", step_memcpy, c, g_bytes, 0, 0, 0, -1, {0}};
    }
    static char names[32][80];
    int nn = 0;
    for (int l = 0; l < PS_KV_SUM_LEVEL_COUNT; l++) {
        if (!ps_kv_sum_level_supported((ps_kv_sum_level_t)l))
            continue;
        kctx_t c = {.acc = acc, .src = src, .type = PS_DATA_FLOAT, .level = (ps_kv_sum_level_t)l};
        const char *ln = ps_kv_sum_level_name(c.level);
        snprintf(names[nn], sizeof(names[nn]), "float32 ps_kv_sum dst += src (%s)", ln);
        if (c.level == ps_kv_sum_level())
            best_sum = np;
        probes[np++] = (probe_t){names[nn++], step_sum, c, g_bytes, 0, 0, 0, 0, {0}};
        snprintf(names[nn], sizeof(names[nn]), "float32 ps_kv_sum3 dst = a + b (%s)", ln);
        probes[np++] = (probe_t){names[nn++], step_sum3, c, 2 * g_bytes, 0, 0, 0, 1, {0}};
    }
    for (int t = 0; t < 2; t++) {
        for (int l = 0; l < PS_KV_SUM_LEVEL_COUNT; l++) {
            if (!ps_kv_sum_level_supported((ps_kv_sum_level_t)l))
                continue;
            kctx_t c = {.acc = acc, .src = src, .type = t ? PS_DATA_BFLOAT16 : PS_DATA_FLOAT16,
                        .level = (ps_kv_sum_level_t)l};
            snprintf(names[nn], sizeof(names[nn]), "%s ps_kv_sum dst += src (%s)",
                     ps_data_type_str(c.type), ps_kv_sum_level_name(c.level));
            probes[np++] = (probe_t){names[nn++], step_sum, c, g_bytes, 0, 0, 0, 0, {0}};
        }
    }
    first_server = np;
    const struct {
        const char *name;
        int threads, blocking, schedule;
    } modes[] = {
        {"server: 1 engine thread", 1, 0, 0},
        {"server: 2 engine threads", 2, 0, 0},
        {"server: 4 engine threads", 4, 0, 0},
        {"server: 4 engine threads, scheduling", 4, 0, 1},
        {"server: blocking (sums in the handler)", 1, 1, 0},
    };
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        kctx_t c = {.acc = acc, .src = src};
        probes[np++] = (probe_t){modes[m].name, NULL, c, g_bytes, modes[m].threads,
                                 modes[m].blocking, modes[m].schedule, 0, {0}};
    }

    g_src = src;
    uint64_t per = g_ms / TRIALS;
    for (int trial = 0; trial < TRIALS; trial++)
        for (int p = 0; p < np; p++)
            probes[p].gbs[trial] = probe_run(&probes[p], per);
    double med[64];
    for (int p = 0; p < np; p++)
        med[p] = median(probes[p].gbs, TRIALS);
    double r_add = med[ref_add], r_add3 = med[ref_add3];
    if (ref_add_avx2 >= 0 && med[ref_add_avx2] > r_add)
        r_add = med[ref_add_avx2];
    if (ref_add3_avx2 >= 0 && med[ref_add3_avx2] > r_add3)
        r_add3 = med[ref_add3_avx2];
    for (int p = 0; p < np; p++) {
        if (p == first_server)
            printf("  (server: %d pushes per key and round, %d keys, answers counted, no network)\n",
                   g_sources, SERVER_KEYS);
        printf("%-46s %7.2f GB/s", probes[p].name, med[p]);
        if (probes[p].ref == 0)
            printf("  %5.1f%% of the a[i] += b[i] reference", 100 * med[p] / r_add);
        else if (probes[p].ref == 1)
            printf("  %5.1f%% of the a[i] = b[i] + c[i] reference", 100 * med[p] / r_add3);
        printf("   [min %.2f max %.2f]\n", minimum(probes[p].gbs, TRIALS),
               maximum(probes[p].gbs, TRIALS));
    }
    printf("\nsummary: float32 %.0f KiB per push summed at %.2f GB/s = %.1f%% of the plain "
           "streaming loop a[i] += b[i] (%.2f GB/s, faster of baseline/avx2) in the same run; "
           "medians of %d interleaved trials\n",
           (double)g_bytes / 1024, med[best_sum], 100 * med[best_sum] / r_add, r_add, TRIALS);

    /* Paired ratios against the faster plain loop, for the headline rows. */
    int ref = ref_add_avx2 >= 0 && med[ref_add_avx2] > med[ref_add] ? ref_add_avx2 : ref_add;
    int ref3 = ref_add3_avx2 >= 0 && med[ref_add3_avx2] > med[ref_add3] ? ref_add3_avx2 : ref_add3;
    uint64_t pms = g_ms / 100 > 20 ? g_ms / 100 : 20;
    printf("\npaired (%d alternating runs of %" PRIu64 " ms against '%s'; median of ratios):\n",
           PAIRS, pms, probes[ref].name);
    for (int p = 0; p < np; p++) {
        int headline = p == best_sum || p == best_sum + 1 || p >= first_server ||
                       (probes[p].step == step_sum && probes[p].ctx.type != PS_DATA_FLOAT &&
                        probes[p].ctx.level == ps_kv_sum_level());
        if (!headline)
            continue;
        int r = probes[p].ref == 1 ? ref3 : ref;
        printf("  %-46s %6.1f%% of %s\n", probes[p].name,
               100 * paired_ratio(&probes[r], &probes[p], pms), probes[r].name);
    }

    for (int s = 0; s < g_sources; s++)
        free(src[s]);
    free(src);
    free(acc);
    return 0;
}

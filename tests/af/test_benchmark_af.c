/*
 * The AF latency benchmark, as StepMesh's test_benchmark_af_tensor (and,
 * built with AF_BENCH_VERIFY, test_benchmark_af_verify): one process of a
 * job (scheduler, FFN server or attention worker from DMLC_*).
 *
 * Every worker has 3 micro-batches; for each batch size b from
 * BENCHMARK_BATCH_START to BENCHMARK_BATCH_END by BENCHMARK_BATCH_STEP it
 * runs BENCHMARK_WARMUP + BENCHMARK_ITER iterations, and in each, for each
 * micro-batch mb, three batches one after the other, each waited for:
 *   push      a [b, H] uint8 tensor (FP8 stand-in) to every server
 *   pull      a [b, H] bf16 tensor from every server
 *   pushpull  both in one batch
 * with H = BENCHMARK_SIZE (7168) and keys as StepMesh's:
 * (pull ? 1 << 16 : 0) | worker_rank << 8 | mb. Servers register receive
 * tensors for the pushes of BENCHMARK_WORKER_NUMBER workers (their ranks
 * 0..N-1; it must equal DMLC_NUM_WORKER) and answer pulls from a stored
 * bf16 tensor per worker and micro-batch; workers register the memory of
 * their push and pull tensors once (ps_af_worker_register_tensor).
 *
 * The worker's thread is pinned as StepMesh's (ps_af_bind_cpu_core, offset
 * 0) when STEPMESH_BIND_CPU_CORE=1.
 *
 * Output (per batch size, and every 1000 iterations while it runs):
 *   push batch latency: mean=..us, min=..us, p50=..us, p90=..us, p99=..us, max=..us
 * (likewise pull and pushpull; as StepMesh's DumpLatency), then one line
 *   AF_BENCH {"op":"pushpull","batch":b,...}
 * per operation. With STEPMESH_ENABLE_TRACE=1, pushpull's stages too (per
 * pull slot, in us): req_send (issued to posted), server_queue (received
 * to handed to the handler), process (handler to respond), rsp_send
 * (respond to posted), net_cost = (rsp.received - req.posted) -
 * (rsp.posted - req.received), rsp_wake (answer received to the wait
 * returning).
 *
 * AF_BENCH_VERIFY: the pushed bytes are random each iteration; the server
 * computes every pulled value from the last push of that worker and
 * micro-batch (bf16 of byte + 3 * server rank, modulo 256) and the worker
 * checks every value ("pull verify failed" / "pushpull verify failed";
 * exit 1). Timings then include the server's computation.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/af.h"
#include "ps/app/kv_sum.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/status.h"
#include "ps/net/postoffice.h"
#include "tests/bench/bench_stats.h"
#include "tests/lib/check_node.h"

#ifndef AF_BENCH_VERIFY
#define AF_BENCH_VERIFY 0
#endif

#define MB_NUM 3
#define WAIT_MS 10000
#define REPORT_EVERY 1000

enum {
    OP_PUSH,
    OP_PULL,
    OP_PUSHPULL,
    OP_COUNT
};
static const char *const k_op_name[OP_COUNT] = {"push", "pull", "pushpull"};

enum {
    ST_REQ_SEND,
    ST_SERVER_QUEUE,
    ST_PROCESS,
    ST_RSP_SEND,
    ST_NET,
    ST_RSP_WAKE,
    ST_COUNT
};
static const char *const k_stage_name[ST_COUNT] = {"req_send", "server_queue", "process",
                                                   "rsp_send", "net_cost",     "rsp_wake"};

typedef struct {
    int64_t warmup, iter, batch_start, batch_end, batch_step, worker_number, hidden;
    int trace;
} cfg_t;

static cfg_t g_cfg;
static int g_barrier_ms;
static int g_num_workers, g_num_servers;

static uint64_t key_of(int pull, int rank, int mb)
{
    return ((uint64_t)(pull ? 1 : 0) << 16) | ((uint64_t)rank << 8) | (uint64_t)mb;
}

static uint16_t pulled_value(uint8_t pushed, int server_rank)
{
    return ps_float_to_bf16((float)((pushed + 3 * server_rank) & 0xff));
}

/* ---- server ---- */

typedef struct {
    ps_af_server_t *server;
    int rank;
    uint16_t *result; /* [workers][MB_NUM][batch_end * H] bf16 */
    uint8_t *recv;    /* [MB_NUM][workers][batch_end * H]: registered receive tensors */
    int errors;
} srv_t;

static uint16_t *result_of(srv_t *s, int worker, int mb)
{
    size_t per = (size_t)g_cfg.batch_end * (size_t)g_cfg.hidden;
    return s->result + ((size_t)worker * MB_NUM + (size_t)mb) * per;
}

static void on_batch(void *arg, ps_af_server_t *server, ps_af_batch_t *batch)
{
    srv_t *s = arg;
    int mb = -1;
    if (batch->num_push > 0)
        mb = (int)(batch->push[0].key & 0xff);
    else if (batch->num_pull > 0)
        mb = (int)(batch->pull[0].key & 0xff);
    if (mb < 0 || mb >= MB_NUM || batch->worker_rank >= g_num_workers) {
        s->errors++;
        return;
    }
    uint16_t *res = result_of(s, batch->worker_rank, mb);
    if (AF_BENCH_VERIFY && batch->num_push > 0) {
        uint64_t bytes;
        if (ps_af_tensor_bytes(&batch->push[0], &bytes) != PS_OK) {
            s->errors++;
            return;
        }
        const uint8_t *in = batch->push[0].data;
        for (uint64_t i = 0; i < bytes; i++)
            res[i] = pulled_value(in[i], s->rank);
    }
    if (batch->num_pull == 0) {
        if (ps_af_server_respond(server, batch, NULL, NULL, 0) != PS_OK)
            s->errors++;
        return;
    }
    ps_af_tensor_t out = batch->pull[0];
    out.data = res;
    if (ps_af_server_respond(server, batch, &out, NULL, 1) != PS_OK)
        s->errors++;
}

/* The van's threads busy-poll (PS_BUSY_POLL, or AF's default). */
static int g_busy_poll;

static void run_server(ps_postoffice_t *po)
{
    srv_t s = {.rank = check_rank};
    size_t per = (size_t)g_cfg.batch_end * (size_t)g_cfg.hidden;
    s.result = calloc((size_t)g_num_workers * MB_NUM * per, sizeof(uint16_t));
    s.recv = calloc((size_t)g_num_workers * MB_NUM, per);
    if (!s.result || !s.recv)
        check_fail("out of memory for %d workers' tensors", g_num_workers);
    CHECK_OK(ps_af_server_create(po, 0, on_batch, &s, &s.server));
    /* One receive tensor per micro-batch, split over the workers. */
    int ranks[256];
    uint64_t keys[256];
    for (int mb = 0; mb < MB_NUM; mb++) {
        for (int r = 0; r < g_num_workers; r++) {
            ranks[r] = r;
            keys[r] = key_of(0, r, mb);
        }
        int64_t shape[2] = {g_cfg.batch_end * g_num_workers, g_cfg.hidden};
        ps_af_tensor_t t;
        ps_af_tensor_init(&t, 0, s.recv + (size_t)mb * (size_t)g_num_workers * per, PS_AF_UINT8, 2,
                          shape);
        CHECK_OK(
            ps_af_server_register_recv_tensor(s.server, &t, ranks, keys, (size_t)g_num_workers));
    }
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, g_barrier_ms));
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, g_barrier_ms));
    ps_af_server_stats_t st;
    ps_af_server_stats(s.server, &st);
    ps_af_server_destroy(s.server);
    free(s.result);
    free(s.recv);
    if (s.errors)
        check_fail("%d batches could not be answered", s.errors);
    printf("PASS server %d: %llu batches, %llu of %llu push bytes into registered tensors\n",
           check_rank, (unsigned long long)st.batches, (unsigned long long)st.push_bytes_in_place,
           (unsigned long long)st.push_bytes);
}

/* ---- worker ---- */

static void dump_latency(const char *head, const bench_hist_t *h)
{
    printf("%s: mean=%.1fus, min=%.1fus, p50=%.1fus, p90=%.1fus, p99=%.1fus, max=%.1fus\n", head,
           bench_hist_mean(h) / 1e3, (double)h->min / 1e3,
           (double)bench_hist_quantile(h, 0.5) / 1e3, (double)bench_hist_quantile(h, 0.9) / 1e3,
           (double)bench_hist_quantile(h, 0.99) / 1e3, (double)h->max / 1e3);
}

static void dump_json(const char *op, int64_t b, const bench_hist_t *h, double cpu_s)
{
    printf("AF_BENCH {\"op\":\"%s\",\"batch\":%lld,\"hidden\":%lld,\"workers\":%d,"
           "\"servers\":%d,\"rank\":%d,\"samples\":%llu,\"mean_us\":%.2f,\"min_us\":%.2f,"
           "\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f,"
           "\"worker_cpu_s\":%.3f,\"verify\":%d}\n",
           op, (long long)b, (long long)g_cfg.hidden, g_num_workers, g_num_servers, check_rank,
           (unsigned long long)h->count, bench_hist_mean(h) / 1e3, (double)h->min / 1e3,
           (double)bench_hist_quantile(h, 0.5) / 1e3, (double)bench_hist_quantile(h, 0.9) / 1e3,
           (double)bench_hist_quantile(h, 0.99) / 1e3, (double)h->max / 1e3, cpu_s,
           AF_BENCH_VERIFY);
}

static void dump_all(int64_t b, bench_hist_t *lat, bench_hist_t *stage, const char *suffix,
                     double cpu_s, int json)
{
    char head[96];
    for (int op = 0; op < OP_COUNT; op++) {
        snprintf(head, sizeof(head), "%s batch latency%s", k_op_name[op], suffix);
        dump_latency(head, &lat[op]);
    }
    if (g_cfg.trace) {
        for (int st = 0; st < ST_COUNT; st++) {
            snprintf(head, sizeof(head), "pushpull stage %s%s", k_stage_name[st], suffix);
            dump_latency(head, &stage[st]);
        }
    }
    for (int op = 0; json && op < OP_COUNT; op++)
        dump_json(k_op_name[op], b, &lat[op], cpu_s);
}

static uint64_t diff_ns(uint64_t later, uint64_t earlier)
{
    return later > earlier ? later - earlier : 0;
}

static void add_stages(ps_af_worker_t *w, ps_af_handle_t *h, uint64_t waited_ns,
                       bench_hist_t *stage)
{
    for (size_t k = 0; k < ps_af_handle_num_slots(h); k++) {
        ps_af_trace_t rq, rs;
        if (ps_af_worker_fetch_trace(w, h, k, &rq, &rs) != PS_OK)
            check_fail("pushpull slot %zu has no trace", k);
        bench_hist_add(&stage[ST_REQ_SEND], diff_ns(rq.postsend, rq.start));
        bench_hist_add(&stage[ST_SERVER_QUEUE], diff_ns(rq.process, rq.postrecv));
        bench_hist_add(&stage[ST_PROCESS], diff_ns(rs.start, rq.process));
        bench_hist_add(&stage[ST_RSP_SEND], diff_ns(rs.postsend, rs.start));
        bench_hist_add(&stage[ST_NET], diff_ns(diff_ns(rs.postrecv, rq.postsend),
                                               diff_ns(rs.postsend, rq.postrecv)));
        bench_hist_add(&stage[ST_RSP_WAKE], diff_ns(waited_ns, rs.postrecv));
    }
}

static int verify(const char *what, const uint8_t *pushed, uint16_t *const *pull, size_t n)
{
    for (int s = 0; s < g_num_servers; s++) {
        for (size_t i = 0; i < n; i++) {
            if (pull[s][i] != pulled_value(pushed[i], s)) {
                printf("%s verify failed: server %d element %zu: got %#x, want %#x\n", what, s, i,
                       pull[s][i], pulled_value(pushed[i], s));
                return 1;
            }
        }
    }
    return 0;
}

static void run_worker(ps_postoffice_t *po)
{
    ps_af_worker_t *w;
    CHECK_OK(ps_af_worker_create(po, 0, 0, &w));
    int core;
    CHECK_OK(ps_af_bind_cpu_core(0, &core));
    printf("worker thread %s (waits spin: %s; van threads busy-poll: %s)\n",
           core >= 0 ? "pinned" : "not pinned",
           ps_config_bool_or(PS_CFG_STEPMESH_BUSY_POLL_ENABLE, 1) ? "yes" : "no",
           g_busy_poll ? "yes" : "no");
    if (core >= 0)
        printf("worker thread on core %d\n", core);
    int me = check_rank, ns = g_num_servers;
    size_t per = (size_t)g_cfg.batch_end * (size_t)g_cfg.hidden;
    uint8_t *push = malloc((size_t)MB_NUM * per);
    uint16_t *pull = calloc((size_t)MB_NUM * (size_t)ns * per, sizeof(uint16_t));
    bench_hist_t *lat = calloc(OP_COUNT, sizeof(bench_hist_t));
    bench_hist_t *stage = calloc(ST_COUNT, sizeof(bench_hist_t));
    if (!push || !pull || !lat || !stage)
        check_fail("out of memory");
    for (size_t i = 0; i < (size_t)MB_NUM * per; i++)
        push[i] = (uint8_t)check_mix64(i);
    /* Every micro-batch's tensors registered once, as StepMesh's. */
    int64_t pshape[1] = {(int64_t)((size_t)MB_NUM * per)};
    int64_t lshape[1] = {(int64_t)((size_t)MB_NUM * (size_t)ns * per)};
    ps_af_tensor_t all;
    ps_af_tensor_init(&all, 0, push, PS_AF_UINT8, 1, pshape);
    CHECK_OK(ps_af_worker_register_tensor(w, &all));
    ps_af_tensor_init(&all, 0, pull, PS_AF_BFLOAT16, 1, lshape);
    CHECK_OK(ps_af_worker_register_tensor(w, &all));
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, g_barrier_ms));
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)me;
    int failures = 0;
    for (int64_t b = g_cfg.batch_start; b <= g_cfg.batch_end; b += g_cfg.batch_step) {
        size_t n = (size_t)b * (size_t)g_cfg.hidden;
        int64_t shape[2] = {b, g_cfg.hidden};
        ps_af_tensor_t pt[MB_NUM], lt[MB_NUM][64];
        uint16_t *dst[MB_NUM][64];
        for (int mb = 0; mb < MB_NUM; mb++) {
            ps_af_tensor_init(&pt[mb], key_of(0, me, mb), push + (size_t)mb * per, PS_AF_UINT8, 2,
                              shape);
            for (int s = 0; s < ns; s++) {
                dst[mb][s] = pull + ((size_t)mb * (size_t)ns + (size_t)s) * per;
                ps_af_tensor_init(&lt[mb][s], key_of(1, me, mb), dst[mb][s], PS_AF_BFLOAT16, 2,
                                  shape);
            }
        }
        for (int op = 0; op < OP_COUNT; op++)
            bench_hist_reset(&lat[op]);
        for (int st = 0; st < ST_COUNT; st++)
            bench_hist_reset(&stage[st]);
        double cpu0 = bench_cpu_seconds();
        for (int64_t it = 0; it < g_cfg.warmup + g_cfg.iter; it++) {
            int measured = it >= g_cfg.warmup;
            for (int mb = 0; mb < MB_NUM; mb++) {
                if (AF_BENCH_VERIFY) {
                    uint8_t *p = push + (size_t)mb * per;
                    for (size_t i = 0; i < n; i += 8) {
                        uint64_t r = check_mix64(rng++);
                        memcpy(p + i, &r, n - i < 8 ? n - i : 8);
                    }
                }
                for (int op = 0; op < OP_COUNT; op++) {
                    int with_push = op != OP_PULL, with_pull = op != OP_PUSH;
                    ps_af_handle_t *h;
                    uint64_t t0 = bench_now_ns();
                    CHECK_OK(ps_af_worker_batch_push_pull(
                        w, with_push ? &pt[mb] : NULL, with_push ? 1 : 0, with_pull ? lt[mb] : NULL,
                        with_pull ? (size_t)ns : 0, &h));
                    ps_status_t st = ps_af_worker_wait(w, h, WAIT_MS);
                    uint64_t t1 = bench_now_ns();
                    if (st != PS_OK)
                        check_fail("batch %lld mb %d %s: %s", (long long)b, mb, k_op_name[op],
                                   ps_status_str(st));
                    if (measured) {
                        bench_hist_add(&lat[op], t1 - t0);
                        if (g_cfg.trace && op == OP_PUSHPULL)
                            add_stages(w, h, t1, stage);
                    }
                    ps_af_handle_release(w, h);
                    if (AF_BENCH_VERIFY && with_pull)
                        failures += verify(k_op_name[op], push + (size_t)mb * per, dst[mb], n);
                }
            }
            if (measured && (it - g_cfg.warmup + 1) % REPORT_EVERY == 0 &&
                it + 1 < g_cfg.warmup + g_cfg.iter)
                dump_all(b, lat, stage, "", 0.0, 0);
        }
        printf("batch %lld (%lld x %lld: %zu bytes pushed, %zu pulled per server), "
               "%lld iterations x %d micro-batches:\n",
               (long long)b, (long long)b, (long long)g_cfg.hidden, n, n * 2, (long long)g_cfg.iter,
               MB_NUM);
        dump_all(b, lat, stage, " overall", bench_cpu_seconds() - cpu0, 1);
    }
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, g_barrier_ms));
    ps_af_worker_stats_t ws;
    ps_af_worker_stats(w, &ws);
    ps_af_worker_destroy(w);
    free(push);
    free(pull);
    free(lat);
    free(stage);
    if (failures)
        check_fail("%d pulls did not verify", failures);
    printf("PASS worker %d: %llu batches, %llu result bytes in place, %llu copied%s\n", me,
           (unsigned long long)ws.batches, (unsigned long long)ws.pull_bytes_in_place,
           (unsigned long long)ws.pull_bytes_copied,
           AF_BENCH_VERIFY ? ", every pulled value verified" : "");
}

static void run_scheduler(ps_postoffice_t *po)
{
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, g_barrier_ms));
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, g_barrier_ms));
    printf("PASS scheduler 0\n");
}

static int64_t cfg_int(ps_config_id_t id, const char *name, int64_t min)
{
    int64_t v;
    if (ps_config_get_int(id, &v) != PS_OK || v < min)
        check_fail("%s must be an integer of at least %lld", name, (long long)min);
    return v;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_cfg.warmup = cfg_int(PS_CFG_BENCHMARK_WARMUP, "BENCHMARK_WARMUP", 0);
    g_cfg.iter = cfg_int(PS_CFG_BENCHMARK_ITER, "BENCHMARK_ITER", 1);
    g_cfg.batch_start = cfg_int(PS_CFG_BENCHMARK_BATCH_START, "BENCHMARK_BATCH_START", 1);
    g_cfg.batch_end = cfg_int(PS_CFG_BENCHMARK_BATCH_END, "BENCHMARK_BATCH_END", 1);
    g_cfg.batch_step = cfg_int(PS_CFG_BENCHMARK_BATCH_STEP, "BENCHMARK_BATCH_STEP", 1);
    g_cfg.worker_number = cfg_int(PS_CFG_BENCHMARK_WORKER_NUMBER, "BENCHMARK_WORKER_NUMBER", 1);
    g_cfg.hidden = cfg_int(PS_CFG_BENCHMARK_SIZE, "BENCHMARK_SIZE", 1);
    g_cfg.trace = ps_config_bool_or(PS_CFG_STEPMESH_ENABLE_TRACE, 0);
    if (g_cfg.batch_end < g_cfg.batch_start)
        check_fail("BENCHMARK_BATCH_END is below BENCHMARK_BATCH_START");
    /* Each iteration is a few round trips: the job's last barrier may come
     * long after its first when BENCHMARK_ITER is large. */
    g_barrier_ms = g_cfg.iter > 100000 ? INT_MAX : 600000;

    /* AF's default: busy polling (ps_af_start_params). */
    ps_start_params_t params;
    CHECK_OK(ps_start_params_from_env(&params));
    ps_af_start_params(&params);
    g_busy_poll = params.busy_poll;
    ps_postoffice_t *po = check_node_start_params(&params);
    g_num_workers = ps_postoffice_num_workers(po);
    g_num_servers = ps_postoffice_num_servers(po);
    if (g_cfg.worker_number != g_num_workers)
        check_fail("BENCHMARK_WORKER_NUMBER is %lld but the job has %d workers",
                   (long long)g_cfg.worker_number, g_num_workers);
    if (g_num_workers > 255 || g_num_servers > 64)
        check_fail("at most 255 workers (keys hold a byte of rank) and 64 servers");
    check_node_run(po, run_worker, run_server, run_scheduler);
    return 0;
}

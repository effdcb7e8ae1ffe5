/*
 * One process of an AF job (scheduler, server or worker from DMLC_*), as
 * StepMesh's ut_tensor_worker / ut_server: for batch b = 1..B each worker
 * pushes T random bf16 [b, H] tensors and pulls one [b, H] tensor per
 * server; each server answers with the sum of the pushed tensors; the
 * worker checks pull == sum of pushes (bf16 tolerance) and prints
 * "Batch b: ALL PASS duration=Nns" (or "FAILED k/I"). The I iterations of
 * one batch size are all in flight at once, so the servers' reorder
 * buffers see interleaved batches.
 *
 *   af_check [--batches B] [--tensors T] [--iters I] [--hidden H]
 *            [--register] [--poll] [--emu] [--hostile]
 *
 * --register: servers register receive tensors for every push (split over
 * the worker ranks, as StepMesh's RegisterRecvTensor) and workers register
 * the memory of their push and pull tensors. --hostile: before
 * its batches every worker sends each server HOSTILE_MSGS malformed AF
 * messages, which the servers must drop (and count) and go on. --poll: servers take
 * batches with ps_af_server_get_batch instead of a handler. --emu: the
 * workers' push and pull tensors are in the emulated device's memory
 * (vans that cannot move device memory get host copies).
 * Every server also checks, on each worker's first batch, that a result
 * with an unknown key or a wrong size is refused (PS_ERR_INVALID_ARG).
 * With STEPMESH_ENABLE_TRACE=1 the workers check every slot's trace.
 * Prints "PASS <role> <rank>: ..." at the end, or FAIL.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/af.h"
#include "ps/app/af_wire.h"
#include "ps/app/kv_sum.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/gpu/mem.h"
#include "ps/net/caps.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"
#include "tests/lib/check_node.h"

#define BARRIER_TIMEOUT_MS 120000
#define HOSTILE_MSGS 5
#define WAIT_MS 20000

static int g_batches = 4, g_tensors = 3, g_iters = 4, g_hidden = 7168;
static int g_register, g_poll, g_emu, g_hostile;
static int g_num_workers, g_num_servers;
static char g_summary[256];

static uint64_t push_key(int b, int it, int t)
{
    return ((uint64_t)b << 16) | ((uint64_t)it << 8) | (uint64_t)t;
}

/* The value a worker pushes: random-looking, exactly representable. */
static uint16_t push_value(int rank, int b, int it, int t, size_t i)
{
    uint64_t h = check_hash4((uint64_t)rank, (uint64_t)b, ((uint64_t)it << 8) | (uint64_t)t, i);
    float f = (float)((int64_t)(h % 2001) - 1000) / 64.0f;
    return ps_float_to_bf16(f);
}

/* ---- server ---- */

typedef struct {
    ps_af_server_t *server;
    atomic_int refused; /* invalid results refused */
    atomic_int answered;
    atomic_int errors;
} srv_t;

static void server_fail(srv_t *s, const char *what, ps_status_t st)
{
    printf("server: %s: %s\n", what, ps_status_str(st));
    atomic_fetch_add(&s->errors, 1);
}

static void answer(srv_t *s, ps_af_batch_t *batch)
{
    if (batch->num_pull == 0) {
        ps_status_t st = ps_af_server_respond(s->server, batch, NULL, NULL, 0);
        if (st != PS_OK)
            server_fail(s, "acknowledging pushes", st);
        return;
    }
    uint64_t bytes;
    ps_status_t st = ps_af_tensor_bytes(&batch->pull[0], &bytes);
    if (st != PS_OK || batch->pull[0].dtype != PS_AF_BFLOAT16)
        return server_fail(s, "pull slot", st != PS_OK ? st : PS_ERR_PROTOCOL);
    size_t n = (size_t)bytes / 2;
    ps_buf_t *out;
    if ((st = ps_buf_alloc((size_t)bytes, 0, &out)) != PS_OK)
        return server_fail(s, "allocating a result", st);
    uint16_t *o = ps_buf_data(out);
    for (size_t i = 0; i < n; i++) {
        float sum = 0.0f;
        for (size_t t = 0; t < batch->num_push; t++) {
            uint16_t v;
            memcpy(&v, (const uint8_t *)batch->push[t].data + 2 * i, 2);
            sum += ps_bf16_to_float(v);
        }
        o[i] = ps_float_to_bf16(sum);
    }
    for (size_t t = 0; t < batch->num_push; t++) {
        uint64_t pb;
        if (ps_af_tensor_bytes(&batch->push[t], &pb) != PS_OK || pb != bytes)
            return server_fail(s, "a push of another size than the pull", PS_ERR_PROTOCOL);
    }
    ps_af_tensor_t res = batch->pull[0];
    res.data = ps_buf_data(out);
    res.mem_kind = PS_MEM_HOST;
    res.device = 0;
    if (batch->seq == 0) {
        /* Refused: a key no slot has, and a size its slot does not have. */
        ps_af_tensor_t bad = res;
        bad.key ^= 0x5a5a0000ull;
        if ((st = ps_af_server_respond(s->server, batch, &bad, NULL, 1)) != PS_ERR_INVALID_ARG)
            return server_fail(s, "a result with an unknown key was not refused", st);
        bad = res;
        bad.shape[0] = bad.shape[0] > 1 ? bad.shape[0] - 1 : 2;
        if ((st = ps_af_server_respond(s->server, batch, &bad, NULL, 1)) != PS_ERR_INVALID_ARG)
            return server_fail(s, "a result of the wrong size was not refused", st);
        atomic_fetch_add(&s->refused, 2);
    }
    /* Every slot gets the sum, one respond call each: the batch ends with
     * the last, so the slots' keys are read before any. */
    size_t num_pull = batch->num_pull;
    ps_af_tensor_t *rs = calloc(num_pull, sizeof(*rs));
    if (!rs) {
        ps_buf_unref(out);
        return server_fail(s, "allocating results", PS_ERR_NO_MEMORY);
    }
    for (size_t j = 0; j < num_pull; j++) {
        rs[j] = res;
        rs[j].key = batch->pull[j].key;
    }
    for (size_t j = 0; j < num_pull; j++) {
        ps_buf_t *owner = out;
        if ((st = ps_af_server_respond(s->server, batch, &rs[j], &owner, 1)) != PS_OK) {
            server_fail(s, "respond", st);
            break;
        }
    }
    free(rs);
    atomic_fetch_add(&s->answered, 1);
    ps_buf_unref(out);
}

static void on_batch(void *arg, ps_af_server_t *server, ps_af_batch_t *batch)
{
    (void)server;
    answer(arg, batch);
}

static atomic_int g_stop;

static void *poll_loop(void *arg)
{
    srv_t *s = arg;
    ps_af_batch_t *batches[64];
    while (!atomic_load(&g_stop)) {
        size_t n = 0;
        ps_status_t st = ps_af_server_get_batch(s->server, batches, 64, &n, 100);
        if (st == PS_ERR_TIMED_OUT)
            continue;
        if (st != PS_OK) {
            server_fail(s, "get_batch", st);
            break;
        }
        if (n != (size_t)g_num_workers) {
            server_fail(s, "get_batch returned another count than the workers", PS_ERR_PROTOCOL);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (batches[i]->worker_rank != (int)i)
                server_fail(s, "get_batch out of rank order", PS_ERR_PROTOCOL);
            answer(s, batches[i]);
        }
    }
    return NULL;
}

/* Returns the registered memory, to free once the server is gone. */
static void **register_all(srv_t *s)
{
    void **mems = calloc((size_t)g_batches * g_iters * g_tensors, sizeof(void *));
    size_t num_mems = 0;
    int *ranks = calloc((size_t)g_num_workers, sizeof(int));
    uint64_t *keys = calloc((size_t)g_num_workers, sizeof(uint64_t));
    if (!ranks || !keys || !mems)
        check_fail("out of memory");
    for (int b = 1; b <= g_batches; b++) {
        for (int it = 0; it < g_iters; it++) {
            for (int t = 0; t < g_tensors; t++) {
                size_t part = (size_t)b * (size_t)g_hidden * 2;
                void *mem = calloc((size_t)g_num_workers, part);
                if (!mem)
                    check_fail("out of memory");
                mems[num_mems++] = mem;
                int64_t shape[2] = {(int64_t)b * g_num_workers, g_hidden};
                ps_af_tensor_t whole;
                ps_af_tensor_init(&whole, 0, mem, PS_AF_BFLOAT16, 2, shape);
                for (int r = 0; r < g_num_workers; r++) {
                    ranks[r] = r;
                    keys[r] = push_key(b, it, t);
                }
                CHECK_OK(ps_af_server_register_recv_tensor(s->server, &whole, ranks, keys,
                                                           (size_t)g_num_workers));
            }
        }
    }
    free(ranks);
    free(keys);
    return mems;
}

static void run_server(ps_postoffice_t *po)
{
    srv_t s = {0};
    CHECK_OK(ps_af_server_create(po, 0, g_poll ? NULL : on_batch, &s, &s.server));
    void **mems = g_register ? register_all(&s) : NULL;
    /* Before the workers start nothing is ready (polling times out); a
     * server with a handler does not poll. */
    ps_af_batch_t *none[64];
    size_t got = 0;
    ps_status_t want = g_poll ? PS_ERR_TIMED_OUT : PS_ERR_BAD_STATE;
    ps_status_t st0 = ps_af_server_get_batch(s.server, none, 64, &got, 20);
    if (st0 != want)
        check_fail("get_batch before any batch: %s, expected %s", ps_status_str(st0),
                   ps_status_str(want));
    pthread_t poller;
    if (g_poll && pthread_create(&poller, NULL, poll_loop, &s) != 0)
        check_fail("pthread_create");
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, BARRIER_TIMEOUT_MS)); /* start */
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, BARRIER_TIMEOUT_MS)); /* workers done */
    if (g_poll) {
        atomic_store(&g_stop, 1);
        pthread_join(poller, NULL);
    }
    ps_af_server_stats_t st;
    ps_af_server_stats(s.server, &st);
    ps_af_server_destroy(s.server);
    for (size_t i = 0; mems && i < (size_t)g_batches * g_iters * g_tensors; i++)
        free(mems[i]);
    free(mems);
    int expect = g_batches * g_iters * g_num_workers;
    if (atomic_load(&s.errors) != 0)
        check_fail("%d errors", atomic_load(&s.errors));
    if (atomic_load(&s.answered) != expect || st.batches != (uint64_t)expect)
        check_fail("answered %d batches (%llu delivered), expected %d", atomic_load(&s.answered),
                   (unsigned long long)st.batches, expect);
    if (atomic_load(&s.refused) != 2 * g_num_workers)
        check_fail("refused %d invalid results, expected %d", atomic_load(&s.refused),
                   2 * g_num_workers);
    uint64_t want_dropped = g_hostile ? (uint64_t)HOSTILE_MSGS * (uint64_t)g_num_workers : 0;
    if (st.dropped != want_dropped)
        check_fail("%llu messages dropped, expected %llu", (unsigned long long)st.dropped,
                   (unsigned long long)want_dropped);
    /* Where the van receives into a destination, every push lands in its
     * registered tensor. */
    if (g_register && (ps_postoffice_capabilities(po) & PS_CAP_RECV_INTO_DEST) &&
        st.push_bytes_in_place != st.push_bytes)
        check_fail("%llu of %llu pushed bytes landed in registered tensors",
                   (unsigned long long)st.push_bytes_in_place, (unsigned long long)st.push_bytes);
    snprintf(g_summary, sizeof(g_summary),
             "%d batches, %llu push bytes (%llu into registered tensors), %s", expect,
             (unsigned long long)st.push_bytes, (unsigned long long)st.push_bytes_in_place,
             g_poll ? "polled" : "handler");
}

/* ---- worker ---- */

/* Sends server `s` one AF-looking request, as a buggy or hostile peer
 * might: `hdr` NULL for no body, `bad_magic` to spoil it, a tensor of
 * dtype/rows, and `data_len` bytes of data. */
static void send_raw(ps_postoffice_t *po, int s, const ps__af_hdr_t *hdr, int bad_magic, int dtype,
                     int64_t rows, size_t data_len)
{
    static uint8_t junk[4096];
    uint8_t body[PS__AF_HDR_LEN];
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.app_id = 0;
    msg.meta.customer_id = 0;
    msg.meta.timestamp = 30000;
    msg.meta.request = true;
    msg.meta.push = true;
    msg.meta.recver = ps_postoffice_peer_id(po, PS_ROLE_SERVER, s);
    msg.meta.sender = ps_postoffice_my_id(po);
    int64_t shape[2] = {rows, 16};
    ps_af_tensor_t t;
    ps_af_tensor_init(&t, 1, NULL, dtype, 2, shape);
    ps__af_meta_set_tensor(&msg.meta, &t);
    if (hdr) {
        ps__af_hdr_write(body, hdr);
        if (bad_magic)
            body[3] ^= 0x40;
        msg.meta.body = body;
        msg.meta.body_len = sizeof(body);
    }
    ps_slice_t data = PS_SLICE_EMPTY_INIT;
    if (data_len) {
        CHECK_OK(ps_slice_wrap(junk, data_len, NULL, NULL, &data));
        CHECK_OK(ps_msg_lend_data(&msg, &data, PS_DATA_CHAR));
    }
    CHECK_OK(ps_postoffice_send(po, &msg));
    ps_slice_unref(&data);
}

/* HOSTILE_MSGS malformed messages to every server, each refused before it
 * touches a batch: no header, a spoilt header, an unknown dtype, a size
 * that is not the tensor's, a batch number far beyond the window. */
static void send_hostile(ps_postoffice_t *po)
{
    ps__af_hdr_t ok = {.index = 0, .count = 1, .num_push = 1, .seq = 0};
    ps__af_hdr_t far = {.index = 0, .count = 1, .num_push = 1, .seq = 1u << 20};
    for (int s = 0; s < g_num_servers; s++) {
        send_raw(po, s, NULL, 0, PS_AF_BFLOAT16, 4, 4 * 16 * 2);
        send_raw(po, s, &ok, 1, PS_AF_BFLOAT16, 4, 4 * 16 * 2);
        send_raw(po, s, &ok, 0, 99, 4, 4 * 16 * 2);
        send_raw(po, s, &ok, 0, PS_AF_BFLOAT16, 4, 4 * 16 * 2 - 1);
        send_raw(po, s, &far, 0, PS_AF_BFLOAT16, 4, 4 * 16 * 2);
    }
}

static int check_trace(ps_af_worker_t *w, ps_af_handle_t *h)
{
    int bad = 0;
    for (size_t k = 0; k < ps_af_handle_num_slots(h); k++) {
        ps_af_trace_t rq, rs;
        if (ps_af_worker_fetch_trace(w, h, k, &rq, &rs) != PS_OK) {
            bad++;
            continue;
        }
        /* Worker clock: start <= posted <= received back; server clock:
         * received <= processed <= respond <= posted. One host: one clock. */
        if (!(rq.start && rq.start <= rq.postsend && rq.postsend <= rs.postrecv && rq.postrecv &&
              rq.postrecv <= rq.process && rq.process <= rs.start && rs.start <= rs.postsend &&
              rq.postsend <= rq.postrecv && rs.postsend <= rs.postrecv))
            bad++;
    }
    return bad;
}

static void run_worker(ps_postoffice_t *po)
{
    ps_af_worker_t *w;
    CHECK_OK(ps_af_worker_create(po, 0, 0, &w));
    int trace = ps_config_bool_or(PS_CFG_STEPMESH_ENABLE_TRACE, 0);
    const ps_mem_ops_t *emu = NULL;
    if (g_emu) {
        emu = ps_mem_ops(PS_MEM_EMU);
        if (!ps_mem_kind_linked(PS_MEM_EMU))
            check_fail("the emulated device is not linked in");
        CHECK_OK(emu->init());
    }
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, BARRIER_TIMEOUT_MS));
    if (g_hostile)
        send_hostile(po);
    int me = check_rank, ns = g_num_servers, T = g_tensors, I = g_iters;
    int failed_batches = 0, trace_bad = 0;
    /* The tensors of every batch size, allocated (and with --register,
     * registered) once, as StepMesh's micro-batches are. */
    size_t nmax = (size_t)g_batches * (size_t)g_hidden;
    uint16_t *push = malloc((size_t)I * T * nmax * 2);
    uint16_t *pull = malloc((size_t)I * ns * nmax * 2);
    if (!push || !pull)
        check_fail("out of memory");
    if (g_register) {
        int64_t pshape[1] = {(int64_t)((size_t)I * T * nmax)};
        int64_t lshape[1] = {(int64_t)((size_t)I * ns * nmax)};
        ps_af_tensor_t all;
        ps_af_tensor_init(&all, 0, push, PS_AF_BFLOAT16, 1, pshape);
        CHECK_OK(ps_af_worker_register_tensor(w, &all));
        ps_af_tensor_init(&all, 0, pull, PS_AF_BFLOAT16, 1, lshape);
        CHECK_OK(ps_af_worker_register_tensor(w, &all));
        if (ps_af_worker_register_tensor(w, &all) != PS_ERR_EXISTS)
            check_fail("an overlapping region was registered twice");
    }
    for (int b = 1; b <= g_batches; b++) {
        size_t n = (size_t)b * (size_t)g_hidden;
        int64_t shape[2] = {b, g_hidden};
        uint16_t *host = malloc(n * 2);
        void **dev = calloc((size_t)I * (ns + T), sizeof(void *));
        ps_af_tensor_t *pt = calloc((size_t)I * T, sizeof(*pt));
        ps_af_tensor_t *lt = calloc((size_t)I * ns, sizeof(*lt));
        ps_af_handle_t **hs = calloc((size_t)I, sizeof(*hs));
        if (!host || !dev || !pt || !lt || !hs)
            check_fail("out of memory");
        for (int it = 0; it < I; it++) {
            for (int t = 0; t < T; t++) {
                uint16_t *p = push + ((size_t)it * T + t) * n;
                for (size_t i = 0; i < n; i++)
                    p[i] = push_value(me, b, it, t, i);
                ps_af_tensor_init(&pt[it * T + t], push_key(b, it, t), p, PS_AF_BFLOAT16, 2, shape);
                if (emu) {
                    void **d = &dev[I * ns + it * T + t];
                    CHECK_OK(emu->alloc(n * 2, 0, d));
                    CHECK_OK(emu->copy_from_host(*d, p, n * 2));
                    pt[it * T + t].data = *d;
                    pt[it * T + t].mem_kind = PS_MEM_EMU;
                }
            }
            for (int s = 0; s < ns; s++) {
                uint16_t *p = pull + ((size_t)it * ns + s) * n;
                memset(p, 0xff, n * 2);
                ps_af_tensor_init(&lt[it * ns + s], push_key(b, it, T), p, PS_AF_BFLOAT16, 2,
                                  shape);
                if (emu) {
                    CHECK_OK(emu->alloc(n * 2, 0, &dev[it * ns + s]));
                    lt[it * ns + s].data = dev[it * ns + s];
                    lt[it * ns + s].mem_kind = PS_MEM_EMU;
                }
            }
        }
        uint64_t t0 = ps_time_now_ns();
        for (int it = 0; it < I; it++)
            CHECK_OK(ps_af_worker_batch_push_pull(w, &pt[it * T], (size_t)T, &lt[it * ns],
                                                  (size_t)ns, &hs[it]));
        int failed = 0;
        for (int it = 0; it < I; it++) {
            ps_status_t st = ps_af_worker_wait(w, hs[it], WAIT_MS);
            if (st != PS_OK)
                check_fail("batch %d iteration %d: %s", b, it, ps_status_str(st));
            if (trace)
                trace_bad += check_trace(w, hs[it]);
            int bad = 0;
            for (int s = 0; s < ns && !bad; s++) {
                const uint16_t *got = pull + ((size_t)it * ns + s) * n;
                if (emu) {
                    CHECK_OK(emu->copy_to_host(host, dev[it * ns + s], n * 2));
                    got = host;
                }
                for (size_t i = 0; i < n && !bad; i++) {
                    float want = 0.0f;
                    for (int t = 0; t < T; t++)
                        want += ps_bf16_to_float(push[((size_t)it * T + t) * n + i]);
                    float g = ps_bf16_to_float(got[i]);
                    float diff = g > want ? g - want : want - g;
                    float tol = 1e-2f + 1e-2f * (want < 0 ? -want : want);
                    if (!(diff <= tol)) {
                        printf("batch %d iteration %d server %d element %zu: got %g, want %g\n", b,
                               it, s, i, (double)g, (double)want);
                        bad = 1;
                    }
                }
            }
            failed += bad;
            ps_af_handle_release(w, hs[it]);
        }
        uint64_t dur = ps_time_now_ns() - t0;
        if (failed == 0)
            printf("Batch %d: ALL PASS duration=%lluns\n", b, (unsigned long long)dur);
        else
            printf("Batch %d: FAILED %d/%d\n", b, failed, I);
        failed_batches += failed != 0;
        for (int k = 0; emu && k < I * (ns + T); k++)
            emu->free(dev[k]);
        free(host);
        free(dev);
        free(pt);
        free(lt);
        free(hs);
    }
    ps_af_worker_stats_t ws;
    ps_af_worker_stats(w, &ws);
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, BARRIER_TIMEOUT_MS));
    ps_af_worker_destroy(w);
    free(push);
    free(pull);
    if (failed_batches)
        check_fail("%d batch sizes failed", failed_batches);
    if (trace_bad)
        check_fail("%d slots with a missing or disordered trace", trace_bad);
    uint64_t pulled = 0;
    for (int b = 1; b <= g_batches; b++)
        pulled += (uint64_t)b * (uint64_t)g_hidden * 2 * (uint64_t)(ns * I);
    if (ws.pull_bytes_in_place + ws.pull_bytes_copied != pulled)
        check_fail("%llu + %llu result bytes counted, %llu pulled",
                   (unsigned long long)ws.pull_bytes_in_place,
                   (unsigned long long)ws.pull_bytes_copied, (unsigned long long)pulled);
    snprintf(g_summary, sizeof(g_summary),
             "%llu batches, %llu result bytes in place, %llu copied%s",
             (unsigned long long)ws.batches, (unsigned long long)ws.pull_bytes_in_place,
             (unsigned long long)ws.pull_bytes_copied, trace ? ", traces checked" : "");
}

static void run_scheduler(ps_postoffice_t *po)
{
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, BARRIER_TIMEOUT_MS)); /* start */
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, BARRIER_TIMEOUT_MS)); /* workers done */
    snprintf(g_summary, sizeof(g_summary), "scheduler");
}

static int int_arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        check_fail("%s needs a value", argv[*i]);
    int v = atoi(argv[++*i]);
    if (v <= 0)
        check_fail("%s must be positive", argv[*i - 1]);
    return v;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batches") == 0) {
            g_batches = int_arg(argc, argv, &i);
        } else if (strcmp(argv[i], "--tensors") == 0) {
            g_tensors = int_arg(argc, argv, &i);
        } else if (strcmp(argv[i], "--iters") == 0) {
            g_iters = int_arg(argc, argv, &i);
        } else if (strcmp(argv[i], "--hidden") == 0) {
            g_hidden = int_arg(argc, argv, &i);
        } else if (strcmp(argv[i], "--register") == 0) {
            g_register = 1;
        } else if (strcmp(argv[i], "--poll") == 0) {
            g_poll = 1;
        } else if (strcmp(argv[i], "--emu") == 0) {
            g_emu = 1;
        } else if (strcmp(argv[i], "--hostile") == 0) {
            g_hostile = 1;
        } else {
            fprintf(stderr, "usage: af_check [--batches B] [--tensors T] [--iters I] "
                            "[--hidden H] [--register] [--poll] [--emu] [--hostile]\n");
            return 2;
        }
    }
    if (g_iters > 255 || g_tensors > 254)
        check_fail("--iters at most 255 and --tensors at most 254 (they share a key)");
    ps_postoffice_t *po = check_node_start();
    g_num_workers = ps_postoffice_num_workers(po);
    g_num_servers = ps_postoffice_num_servers(po);
    check_node_run(po, run_worker, run_server, run_scheduler);
    printf("PASS %s %d: %s\n", check_role, check_rank, g_summary);
    return 0;
}

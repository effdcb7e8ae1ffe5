/*
 * One process of a KV job whose workers push from and pull into device
 * memory (scheduler, servers, workers from DMLC_*, e.g. through
 * tools/launch/ps_launch.py):
 *
 *   kv_device_check KIND [-r REPS] [-i] [-p] [-P] [-v VAN] [BYTES...]   KIND: cuda | emu
 *
 * For each size (default 4 KiB, 1 MiB, 4 MiB) and each path, every worker
 * pushes its values and, after a barrier of the workers, pulls the sums:
 *   cpu2cpu  host memory both ways: the reference the others compare to
 *   gpu2gpu  push from device memory, pull into device memory
 *   cpu2gpu  push from host memory, pull into device memory
 *   gpu2cpu  push from device memory, pull into host memory
 *   cpu_pp   push-pull from and into host memory, the reference for
 *   gpu_pp   push-pull from and into device memory.
 * Every pulled element is checked (copied back through the kind's ops)
 * against the sum over the workers; each line reports the time of the push
 * and of the pull, the median over REPS rounds (default 1) on one set of
 * buffers per path, each round with keys of its own. Last, a push whose
 * data a stream writes late, sent with the stream as its readiness
 * (ps_kv_zpush_when), its bytes checked too; then a pull the server
 * answers from device memory its stream writes LATE_MS late, with that
 * stream as the answer's readiness (ps_kv_server_respond_when): the pull
 * must carry what the stream wrote.
 *
 * The device pushes must have gone out of host copies, or with -i as IPC
 * handles (PS_DEVICE_IPC=1 over the shm van), every byte of them; with -i
 * every pull into device memory must have been written by the server
 * through the destination's IPC handle, and without it none: the worker's
 * counters say which. With -i, last, pull requests sent by hand with
 * destination descriptors the server cannot use (too small, past their
 * allocation, of an unknown kind, a malformed body) must be answered with
 * the values as bytes, and a good one written in place; the job then goes
 * on. With -p, some bytes of the staged pulls (not all) must have been
 * copied into the device while the rest of their value arrived (a van that
 * reports its progress: tcp, shm). With -P, some (not all) of the staged
 * push bytes must have been handed to the van while still being copied out
 * of the device (a van that sends as written: tcp), and without it none.
 * With -v, every process must have run on the van named VAN (as
 * ps_postoffice_van_name says it), so that a job meant for one van cannot
 * pass on another. Prints PASS/FAIL per process. The servers keep a
 * summing store in host memory.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <stdatomic.h>

#include "ps/app/kv.h"
#include "ps/app/kv_ipc.h"
#include "ps/base/buffer.h"
#include "ps/base/ids.h"
#include "ps/base/time.h"
#include "ps/gpu/mem.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"
#include "tests/lib/check_node.h"

#define NUM_KEYS 4

static ps_mem_kind_t g_kind;
static const ps_mem_ops_t *g_ops;
static size_t g_sizes[16];
static int g_num_sizes;
static int g_rounds_done;
static int g_reps = 1;
static int g_expect_ipc;
static int g_expect_piped; /* -p */
static int g_expect_push_piped; /* -P */
static uint64_t g_device_pulled; /* value bytes pulled into device memory */

/* A slice of `len` bytes in the device kind (device) or host memory. */
static void *alloc_slice(int device, size_t len, ps_slice_t *slice_p)
{
    CHECK_OK(ps_mem_slice_alloc(device ? g_kind : PS_MEM_HOST, 0, len, slice_p));
    return ps_slice_ptr(slice_p);
}

static void fill(int device, void *ptr, const float *host, size_t len)
{
    if (device)
        CHECK_OK(g_ops->copy_from_host(ptr, host, len));
    else
        memcpy(ptr, host, len);
}

static void read_back(int device, const void *ptr, float *host, size_t len)
{
    if (device)
        CHECK_OK(g_ops->copy_to_host(host, ptr, len));
    else
        memcpy(host, ptr, len);
}

/* Element i of worker w's push in round r: small integers, exact in float. */
static float value(int r, int w, size_t i)
{
    return (float)((i * 7 + (size_t)r * 13 + (size_t)w * 3) % 1000);
}

static double sum_over_workers(int r, int workers, size_t i)
{
    double s = 0;
    for (int w = 0; w < workers; w++)
        s += value(r, w, i);
    return s;
}

static double ms_since(uint64_t t0)
{
    return (double)(ps_time_now_ns() - t0) / 1e6;
}

/* A path's buffers, made once and used by each of its rounds (as a
 * training loop reuses its tensors). */
typedef struct {
    void *src_ptr, *dst_ptr;
    ps_slice_t src, dst;
} bufs_t;

/* One round: a push from `push_dev` memory, a barrier of the workers, a
 * pull into `pull_dev` memory (push-pull when `pushpull`), every element
 * checked. Each round uses its own keys, so the sums start at zero. */
static void round_trip(ps_postoffice_t *po, ps_kv_worker_t *w, const char *path, size_t bytes,
                       int push_dev, int pull_dev, int pushpull, const bufs_t *b,
                       double *push_ms_p, double *pull_ms_p)
{
    int r = g_rounds_done++;
    int workers = ps_postoffice_num_workers(po);
    int me = ps_postoffice_my_rank(po);
    size_t n = bytes / sizeof(float);
    ps_key_t keys[NUM_KEYS];
    for (int k = 0; k < NUM_KEYS; k++)
        keys[k] = (UINT64_MAX / NUM_KEYS) * (uint64_t)k + (uint64_t)r;
    ps_slice_t keys_slice;
    CHECK_OK(ps_slice_wrap(keys, sizeof(keys), NULL, NULL, &keys_slice));

    size_t len = n * sizeof(float) * NUM_KEYS;
    float *host = malloc(len);
    if (host == NULL)
        check_fail("out of memory");
    for (size_t i = 0; i < n * NUM_KEYS; i++)
        host[i] = value(r, me, i);
    fill(push_dev, b->src_ptr, host, len);

    ps_kv_pairs_t push = {keys_slice, b->src, PS_SLICE_EMPTY_INIT, PS_DATA_FLOAT};
    ps_kv_pairs_t out = {keys_slice, b->dst, PS_SLICE_EMPTY_INIT, PS_DATA_FLOAT};
    int ts;
    double push_ms = 0, pull_ms;
    uint64_t t0 = ps_time_now_ns();
    if (pull_dev)
        g_device_pulled += (pushpull ? 2 : 1) * (uint64_t)len;
    if (pushpull) {
        /* Each worker's push-pull answers with the sum so far: the workers
         * go one after another, and the last one sees the whole sum. */
        for (int turn = 0; turn < workers; turn++) {
            if (turn == me) {
                t0 = ps_time_now_ns();
                CHECK_OK(ps_kv_zpushpull(w, &push, &out, 0, NULL, NULL, &ts));
                CHECK_OK(ps_kv_wait(w, ts, -1));
                push_ms = ms_since(t0);
            }
            CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, -1));
        }
    } else {
        CHECK_OK(ps_kv_zpush(w, &push, 0, NULL, NULL, &ts));
        CHECK_OK(ps_kv_wait(w, ts, -1));
        push_ms = ms_since(t0);
        CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, -1));
    }
    t0 = ps_time_now_ns();
    CHECK_OK(ps_kv_zpull(w, &out, 0, NULL, NULL, &ts));
    CHECK_OK(ps_kv_wait(w, ts, -1));
    pull_ms = ms_since(t0);
    read_back(pull_dev, b->dst_ptr, host, len);
    for (size_t i = 0; i < n * NUM_KEYS; i++) {
        double want = sum_over_workers(r, workers, i);
        if ((double)host[i] != want)
            check_fail("%s %zu bytes: element %zu is %g, want %g", path, bytes, i,
                       (double)host[i], want);
    }
    *push_ms_p = push_ms;
    *pull_ms_p = pull_ms;
    free(host);
    ps_slice_unref(&keys_slice);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The paths, in the order each repetition runs them. */
static const struct {
    const char *name;
    int push_dev, pull_dev, pushpull;
} k_paths[] = {
    {"cpu2cpu", 0, 0, 0}, {"gpu2gpu", 1, 1, 0}, {"cpu2gpu", 0, 1, 0},
    {"gpu2cpu", 1, 0, 0}, {"cpu_pp", 0, 0, 1},  {"gpu_pp", 1, 1, 1},
};
#define NUM_PATHS (sizeof(k_paths) / sizeof(k_paths[0]))

/* g_reps rounds of every path at one size, the paths taking turns so that
 * none gets the warm-up or a quiet spell alone; prints the medians. */
static void measure(ps_postoffice_t *po, ps_kv_worker_t *w, size_t bytes)
{
    double push[NUM_PATHS][64], pull[NUM_PATHS][64];
    bufs_t bufs[NUM_PATHS];
    size_t len = bytes * NUM_KEYS;
    for (size_t p = 0; p < NUM_PATHS; p++) {
        bufs[p].src_ptr = alloc_slice(k_paths[p].push_dev, len, &bufs[p].src);
        bufs[p].dst_ptr = alloc_slice(k_paths[p].pull_dev, len, &bufs[p].dst);
    }
    for (int i = 0; i < g_reps; i++) {
        for (size_t p = 0; p < NUM_PATHS; p++)
            round_trip(po, w, k_paths[p].name, bytes, k_paths[p].push_dev, k_paths[p].pull_dev,
                       k_paths[p].pushpull, &bufs[p], &push[p][i], &pull[p][i]);
    }
    for (size_t p = 0; p < NUM_PATHS; p++) {
        ps_slice_unref(&bufs[p].src);
        ps_slice_unref(&bufs[p].dst);
    }
    size_t n = bytes / sizeof(float) * NUM_KEYS;
    for (size_t p = 0; p < NUM_PATHS; p++) {
        double push_ms = median(push[p], g_reps), pull_ms = median(pull[p], g_reps);
        printf("worker %d: %-8s %8zu bytes x %d keys: push %.3f ms, pull %.3f ms "
               "(%.2f / %.2f GB/s, median of %d), %zu sums checked each\n",
               ps_postoffice_my_rank(po), k_paths[p].name, bytes, NUM_KEYS, push_ms, pull_ms,
               (double)(bytes * NUM_KEYS) / (push_ms * 1e6),
               (double)(bytes * NUM_KEYS) / (pull_ms * 1e6), g_reps, n);
    }
}

static void sleep_on_stream(void *arg)
{
    ps_sleep_ms((uint64_t)(uintptr_t)arg);
}

/* The late-ready push's gate: a host function on the stream waits until
 * the worker opens it, GATE_CAP_MS at most (then it says so and returns,
 * so that a call that waits for the stream cannot hang the check). */
#define GATE_CAP_MS 30000
static atomic_int g_gate_open, g_gate_gave_up;

static void wait_for_gate(void *arg)
{
    (void)arg;
    for (int waited = 0; !atomic_load(&g_gate_open); waited++) {
        if (waited >= GATE_CAP_MS) {
            atomic_store(&g_gate_gave_up, 1);
            return;
        }
        ps_sleep_ms(1);
    }
}

/* A push whose data is written late: the stream waits at a gate (a host
 * function), then sets every byte to the worker's rank + 1; the push is
 * made at once with the stream as its readiness, and the gate opens only
 * once the call returned. So the call must not wait for the stream (it
 * would find the gate shut until GATE_CAP_MS), the push must end after the
 * gate opened, and the server must get what the stream wrote: every
 * pulled byte is the sum over the workers. No figure depends on the
 * machine's speed. */
#define LATE_BYTES (1 << 20)
/* How long the default stream sleeps before the IPC pull's memory is
 * written (that pull only checks data). */
#define LATE_MS 50
static void late_ready_round(ps_postoffice_t *po, ps_kv_worker_t *w)
{
    int r = g_rounds_done++;
    int workers = ps_postoffice_num_workers(po), me = ps_postoffice_my_rank(po);
    ps_key_t key = (uint64_t)r * 1000 + 17;
    ps_slice_t keys, src, dst;
    CHECK_OK(ps_slice_wrap(&key, sizeof(key), NULL, NULL, &keys));
    void *dev = alloc_slice(1, LATE_BYTES, &src);
    unsigned char *host = alloc_slice(0, LATE_BYTES, &dst);
    void *stream;
    CHECK_OK(g_ops->memset(dev, 0, LATE_BYTES));
    CHECK_OK(g_ops->stream_create(0, &stream));
    atomic_store(&g_gate_open, 0);
    atomic_store(&g_gate_gave_up, 0);
    CHECK_OK(g_ops->launch_host_func(stream, wait_for_gate, NULL));
    CHECK_OK(g_ops->memset_async(dev, me + 1, LATE_BYTES, stream));

    ps_kv_pairs_t push = {keys, src, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
    ps_kv_ready_t ready = {NULL, stream};
    int ts;
    uint64_t t0 = ps_time_now_ns();
    CHECK_OK(ps_kv_zpush_when(w, &push, &ready, 0, NULL, NULL, &ts));
    double call_ms = ms_since(t0);
    if (atomic_load(&g_gate_gave_up))
        check_fail("late-ready: the call waited for the stream's data (%.3f ms, the gate shut)",
                   call_ms);
    double open_ms = ms_since(t0);
    atomic_store(&g_gate_open, 1);
    CHECK_OK(ps_kv_wait(w, ts, -1));
    double done_ms = ms_since(t0);
    if (done_ms < open_ms)
        check_fail("late-ready: the push ended %.3f ms after the call, before the stream's "
                   "gate opened at %.3f ms", done_ms, open_ms);
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_WORKER, -1));
    ps_kv_pairs_t out = {keys, dst, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
    CHECK_OK(ps_kv_zpull(w, &out, 0, NULL, NULL, &ts));
    CHECK_OK(ps_kv_wait(w, ts, -1));
    unsigned want = (unsigned)(workers * (workers + 1) / 2);
    for (size_t i = 0; i < LATE_BYTES; i++) {
        if (host[i] != want)
            check_fail("late-ready: byte %zu is %u, want %u", i, host[i], want);
    }
    printf("worker %d: late-ready push of %d bytes: the call returned in %.3f ms with the "
           "stream's data not yet written, the push ended %.3f ms after the gate opened, %d "
           "bytes checked\n", me, LATE_BYTES, call_ms, done_ms - open_ms, LATE_BYTES);
    if (g_expect_ipc) {
        /* A pull through an IPC handle into memory the default stream still
         * writes (LATE_MS late): the server's write must come after. */
        ps_slice_t dst2;
        void *dev2 = alloc_slice(1, LATE_BYTES, &dst2);
        CHECK_OK(g_ops->launch_host_func(NULL, sleep_on_stream, (void *)(uintptr_t)LATE_MS));
        CHECK_OK(g_ops->memset_async(dev2, 0xee, LATE_BYTES, NULL));
        ps_kv_pairs_t out2 = {keys, dst2, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
        t0 = ps_time_now_ns();
        CHECK_OK(ps_kv_zpull(w, &out2, 0, NULL, NULL, &ts));
        CHECK_OK(ps_kv_wait(w, ts, -1));
        done_ms = ms_since(t0);
        g_device_pulled += LATE_BYTES;
        /* Read back after the default stream's work (the memset), which
         * the server's write must have followed. */
        ps_mem_event_h ev;
        CHECK_OK(g_ops->event_create(0, &ev));
        CHECK_OK(g_ops->event_record(ev, NULL));
        CHECK_OK(ps_mem_event_wait(ev, 10000));
        CHECK_OK(ps_mem_event_destroy(ev));
        CHECK_OK(g_ops->copy_to_host(host, dev2, LATE_BYTES));
        for (size_t i = 0; i < LATE_BYTES; i++) {
            if (host[i] != want)
                check_fail("pull behind the default stream: byte %zu is %u, want %u", i,
                           host[i], want);
        }
        printf("worker %d: pull into device memory behind the default stream's work: ended "
               "after %.3f ms (that work ends at %d ms), %d bytes checked\n", me, done_ms,
               LATE_MS, LATE_BYTES);
        ps_slice_unref(&dst2);
    }
    CHECK_OK(g_ops->stream_destroy(stream));
    ps_slice_unref(&src);
    ps_slice_unref(&dst);
    ps_slice_unref(&keys);
}

/* ---- pull requests by hand, with destination descriptors (-i) ---- */

#define RAW_CUSTOMER 50   /* + the worker's rank: a customer of this check's own */
#define RAW_BYTES 65536   /* too large for the small lane, so a message answers */

/* An answer the raw customer got. */
typedef struct {
    int ts;          /* -1: none yet */
    int written;     /* the body said the values were written in place */
    uint64_t written_len;
    size_t vals_len; /* value bytes that came */
    int vals_ok;     /* they were the key's values */
} raw_answer_t;

/* The last one, under its lock. */
static pthread_mutex_t g_raw_lock = PTHREAD_MUTEX_INITIALIZER;
static raw_answer_t g_raw = {-1, 0, 0, 0, 0};

static unsigned char raw_value(int me, size_t i)
{
    return (unsigned char)(i * 5 + (size_t)me * 11 + 3);
}

static int g_raw_me;

static void raw_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    (void)arg;
    (void)customer;
    uint64_t wl = 0;
    int written = ps__kv_ipc_written_parse(msg->meta.body, msg->meta.body_len, &wl);
    size_t vl = msg->num_data > 1 ? msg->data[1].len : 0;
    int ok = vl == RAW_BYTES;
    const unsigned char *v = vl ? ps_slice_ptr(&msg->data[1]) : NULL;
    for (size_t i = 0; ok && i < vl; i++)
        ok = v[i] == raw_value(g_raw_me, i);
    pthread_mutex_lock(&g_raw_lock);
    g_raw = (raw_answer_t){msg->meta.timestamp, written, wl, vl, ok};
    pthread_mutex_unlock(&g_raw_lock);
}

/* Sends a pull of `key` with `body` to `server` as ts and waits for the
 * answer. */
static raw_answer_t raw_pull(ps_postoffice_t *po, int server, ps_key_t *key, const void *body,
                             size_t body_len, int ts)
{
    ps_slice_t keys;
    CHECK_OK(ps_slice_wrap(key, sizeof(*key), NULL, NULL, &keys));
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.app_id = 0;
    msg.meta.customer_id = RAW_CUSTOMER + ps_postoffice_my_rank(po);
    msg.meta.timestamp = ts;
    msg.meta.request = true;
    msg.meta.pull = true;
    msg.meta.recver = server;
    msg.meta.key = *key;
    msg.meta.val_len = RAW_BYTES;
    msg.meta.body = body;
    msg.meta.body_len = body_len;
    msg.meta.sender = ps_postoffice_my_id(po);
    CHECK_OK(ps_msg_lend_data(&msg, &keys, PS_DATA_UINT64));
    CHECK_OK(ps_postoffice_send(po, &msg));
    uint64_t deadline = ps_time_now_ns() + 20ull * 1000 * 1000 * 1000;
    raw_answer_t got;
    for (;;) {
        pthread_mutex_lock(&g_raw_lock);
        got = g_raw;
        pthread_mutex_unlock(&g_raw_lock);
        if (got.ts == ts)
            break;
        if (ps_time_now_ns() > deadline)
            check_fail("hostile pulls: no answer to ts %d", ts);
        ps_sleep_ms(1);
    }
    ps_slice_unref(&keys);
    return got;
}

static void hostile_round(ps_postoffice_t *po, ps_kv_worker_t *w)
{
    int me = ps_postoffice_my_rank(po);
    g_raw_me = me;
    ps_key_t key = 1000000 + (ps_key_t)me; /* the first server's */
    int server = ps_postoffice_peer_id(po, PS_ROLE_SERVER, 0);
    ps_slice_t keys, src, dst;
    CHECK_OK(ps_slice_wrap(&key, sizeof(key), NULL, NULL, &keys));
    unsigned char *host = alloc_slice(0, RAW_BYTES, &src);
    for (size_t i = 0; i < RAW_BYTES; i++)
        host[i] = raw_value(me, i);
    ps_kv_pairs_t push = {keys, src, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
    int ts;
    CHECK_OK(ps_kv_zpush(w, &push, 0, NULL, NULL, &ts));
    CHECK_OK(ps_kv_wait(w, ts, -1));

    ps_customer_t *raw;
    CHECK_OK(ps_customer_create(po, 0, RAW_CUSTOMER + me, raw_recv, NULL, &raw));
    /* An interior destination: 100 bytes into an allocation. */
    void *dev = alloc_slice(1, RAW_BYTES + 200, &dst);
    ps_slice_t inner;
    CHECK_OK(ps_slice_sub(&dst, 100, RAW_BYTES, &inner));
    ps__kv_ipc_desc_t good;
    CHECK_OK(ps__kv_ipc_describe_pull(&inner, &good));
    static const struct {
        const char *what;
        int change;
    } cases[] = {{"too small", 1}, {"past its allocation", 2}, {"of an unknown kind", 3},
                 {"a malformed body", 4}, {"a push descriptor", 5}};
    int n = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ps__kv_ipc_desc_t d[2] = {good, good};
        size_t body_len = sizeof(d[0]);
        switch (cases[c].change) {
        case 1: d[0].len = RAW_BYTES - 4; break;
        case 2: d[0].offset = RAW_BYTES; break;
        case 3: d[0].kind = 99; break;
        case 4: body_len = sizeof(d[0]) + 5; break;
        case 5: d[0].magic = PS__KV_IPC_MAGIC; break;
        }
        CHECK_OK(g_ops->memset(dev, 0, RAW_BYTES + 200));
        raw_answer_t a = raw_pull(po, server, &key, d, body_len, ++n);
        if (a.written || a.vals_len != RAW_BYTES || !a.vals_ok)
            check_fail("hostile pulls: a descriptor %s: written %d, %zu value bytes (right: %d)",
                       cases[c].what, a.written, a.vals_len, a.vals_ok);
        unsigned char *back = malloc(RAW_BYTES + 200);
        if (back == NULL)
            check_fail("out of memory");
        CHECK_OK(g_ops->copy_to_host(back, dev, RAW_BYTES + 200));
        for (size_t i = 0; i < RAW_BYTES + 200; i++) {
            if (back[i] != 0)
                check_fail("hostile pulls: a descriptor %s: byte %zu of the allocation written",
                           cases[c].what, i);
        }
        free(back);
    }
    /* The good one: written in place, every byte, nothing around it. */
    raw_answer_t a = raw_pull(po, server, &key, &good, sizeof(good), ++n);
    if (!a.written || a.written_len != RAW_BYTES || a.vals_len != 0)
        check_fail("hostile pulls: the good descriptor: written %d (%llu bytes), %zu value "
                   "bytes came", a.written, (unsigned long long)a.written_len, a.vals_len);
    unsigned char *back = malloc(RAW_BYTES + 200);
    if (back == NULL)
        check_fail("out of memory");
    CHECK_OK(g_ops->copy_to_host(back, dev, RAW_BYTES + 200));
    for (size_t i = 0; i < RAW_BYTES + 200; i++) {
        unsigned char want = i >= 100 && i < 100 + RAW_BYTES ? raw_value(me, i - 100) : 0;
        if (back[i] != want)
            check_fail("hostile pulls: the good descriptor: byte %zu is %u, want %u", i,
                       back[i], want);
    }
    free(back);
    printf("worker %d: hostile pulls: %d bad destination descriptors answered with the values "
           "as bytes, a good one written in place, %d bytes checked\n", me, n - 1, RAW_BYTES);
    ps_customer_destroy(raw);
    ps_slice_unref(&inner);
    ps_slice_unref(&dst);
    ps_slice_unref(&src);
    ps_slice_unref(&keys);
}

/* The server's side of the late answer (KV app 1): each pull is answered
 * from device memory its stream fills with (worker rank + 7) after
 * LATE_MS, the stream named as the answer's readiness. */
static void *g_answer_stream;

static void late_answer_handler(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                                ps_kv_server_t *server)
{
    (void)arg;
    if (!meta->pull || meta->val_len <= 0) {
        CHECK_OK(ps_kv_server_respond_error(server, meta, PS_ERR_INVALID_ARG));
        return;
    }
    ps_slice_t vals;
    void *dev = alloc_slice(1, (size_t)meta->val_len, &vals);
    int value = (ps_id_to_rank(meta->sender) + 7) & 0xff;
    CHECK_OK(g_ops->launch_host_func(g_answer_stream, sleep_on_stream,
                                     (void *)(uintptr_t)LATE_MS));
    CHECK_OK(g_ops->memset_async(dev, value, (size_t)meta->val_len, g_answer_stream));
    ps_kv_pairs_t res = {req->keys, vals, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
    ps_kv_ready_t ready = {NULL, g_answer_stream};
    CHECK_OK(ps_kv_server_respond_when(server, meta, &res, &ready));
    ps_slice_unref(&vals); /* the answer holds its own reference */
}

/* The worker's side: a pull of KV app 1 into host memory, which must end
 * after the server's stream wrote (LATE_MS) and carry every byte of it. */
static void late_answer_round(ps_postoffice_t *po)
{
    int me = ps_postoffice_my_rank(po);
    ps_kv_worker_t *w;
    CHECK_OK(ps_kv_worker_create(po, 1, 0, &w));
    ps_key_t key = 23;
    ps_slice_t keys, dst;
    CHECK_OK(ps_slice_wrap(&key, sizeof(key), NULL, NULL, &keys));
    unsigned char *host = alloc_slice(0, LATE_BYTES, &dst);
    memset(host, 0, LATE_BYTES);
    ps_kv_pairs_t out = {keys, dst, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
    int ts;
    uint64_t t0 = ps_time_now_ns();
    CHECK_OK(ps_kv_zpull(w, &out, 0, NULL, NULL, &ts));
    CHECK_OK(ps_kv_wait(w, ts, -1));
    double done_ms = ms_since(t0);
    unsigned want = (unsigned)(me + 7) & 0xff;
    for (size_t i = 0; i < LATE_BYTES; i++) {
        if (host[i] != want)
            check_fail("late-ready answer: byte %zu is %u, want %u", i, host[i], want);
    }
    if (done_ms < LATE_MS)
        check_fail("late-ready answer: the pull ended after %.3f ms, before the server's "
                   "stream wrote at %d ms", done_ms, LATE_MS);
    printf("worker %d: late-ready answer of %d bytes: the pull ended %.3f ms after the call, "
           "the server's stream writing at %d ms, %d bytes checked\n", me, LATE_BYTES, done_ms,
           LATE_MS, LATE_BYTES);
    ps_kv_worker_destroy(w);
    ps_slice_unref(&dst);
    ps_slice_unref(&keys);
}

static void run_worker(ps_postoffice_t *po)
{
    ps_kv_worker_t *w;
    CHECK_OK(ps_kv_worker_create(po, 0, 0, &w));
    for (int s = 0; s < g_num_sizes; s++)
        measure(po, w, g_sizes[s]);
    late_ready_round(po, w);
    late_answer_round(po);
    if (g_expect_ipc)
        hostile_round(po, w);
    ps_kv_worker_stats_t st;
    ps_kv_worker_stats(w, &st);
    printf("worker %d: device values pushed: %llu bytes staged through host memory, %llu bytes "
           "as IPC handles\n", ps_postoffice_my_rank(po), (unsigned long long)st.push_bytes_staged,
           (unsigned long long)st.push_bytes_ipc);
    if (g_expect_ipc ? st.push_bytes_staged != 0 || st.push_bytes_ipc == 0
                     : st.push_bytes_ipc != 0 || st.push_bytes_staged == 0)
        check_fail("device pushes went %s, not %s", g_expect_ipc ? "staged" : "as IPC handles",
                   g_expect_ipc ? "as IPC handles (-i)" : "staged");
    printf("worker %d: %llu bytes of the staged pushes handed to the van while still being "
           "copied out\n", ps_postoffice_my_rank(po), (unsigned long long)st.push_bytes_piped);
    if (g_expect_push_piped ? st.push_bytes_piped == 0 || st.push_bytes_piped >= st.push_bytes_staged
                            : st.push_bytes_piped != 0)
        check_fail("device pushes: %llu of %llu staged bytes sent as they were copied out, "
                   "want %s", (unsigned long long)st.push_bytes_piped,
                   (unsigned long long)st.push_bytes_staged,
                   g_expect_push_piped ? "some, not all (-P)" : "none");
    printf("worker %d: device values pulled: %llu bytes written in place through IPC "
           "handles, %llu received into page-locked staging (%llu of them copied into the "
           "device while the rest arrived), of %llu pulled into device memory\n",
           ps_postoffice_my_rank(po), (unsigned long long)st.pull_bytes_ipc,
           (unsigned long long)st.pull_bytes_staged, (unsigned long long)st.pull_bytes_piped,
           (unsigned long long)g_device_pulled);
    if (st.pull_bytes_piped > st.pull_bytes_staged ||
        (g_expect_piped && (st.pull_bytes_piped == 0 || st.pull_bytes_piped == st.pull_bytes_staged)))
        check_fail("device pulls: %llu staged bytes copied into the device before their value "
                   "was in, of %llu staged (-p: some, not all)",
                   (unsigned long long)st.pull_bytes_piped, (unsigned long long)st.pull_bytes_staged);
    if (st.pull_bytes_ipc != (g_expect_ipc ? g_device_pulled : 0))
        check_fail("device pulls: %llu bytes through IPC handles, want %llu",
                   (unsigned long long)st.pull_bytes_ipc,
                   (unsigned long long)(g_expect_ipc ? g_device_pulled : 0));
    ps_kv_worker_destroy(w);
}

static void run_server(ps_postoffice_t *po)
{
    ps_kv_store_t *store;
    ps_kv_server_t *server, *late;
    CHECK_OK(g_ops->stream_create(0, &g_answer_stream));
    CHECK_OK(ps_kv_store_create(&store));
    CHECK_OK(ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server));
    CHECK_OK(ps_kv_server_create(po, 1, late_answer_handler, NULL, &late));
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, -1));
    ps_kv_server_destroy(late);
    ps_kv_server_destroy(server);
    ps_kv_store_destroy(store);
    CHECK_OK(g_ops->stream_destroy(g_answer_stream));
}

static void run_scheduler(ps_postoffice_t *po)
{
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, -1));
}

static void worker_then_barrier(ps_postoffice_t *po)
{
    run_worker(po);
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, -1));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || (strcmp(argv[1], "cuda") != 0 && strcmp(argv[1], "emu") != 0)) {
        fprintf(stderr, "usage: kv_device_check cuda|emu [-r REPS] [-i] [-p] [-P] [-v VAN] [BYTES...]\n");
        return 2;
    }
    g_kind = strcmp(argv[1], "cuda") == 0 ? PS_MEM_CUDA : PS_MEM_EMU;
    const char *want_van = NULL;
    for (int i = 2; i < argc && g_num_sizes < 16; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            g_reps = atoi(argv[++i]);
            if (g_reps < 1 || g_reps > 64) {
                fprintf(stderr, "kv_device_check: -r takes 1 to 64\n");
                return 2;
            }
            continue;
        }
        if (strcmp(argv[i], "-i") == 0) {
            g_expect_ipc = 1;
            continue;
        }
        if (strcmp(argv[i], "-p") == 0) {
            g_expect_piped = 1;
            continue;
        }
        if (strcmp(argv[i], "-P") == 0) {
            g_expect_push_piped = 1;
            continue;
        }
        if (strcmp(argv[i], "-v") == 0 && i + 1 < argc) {
            want_van = argv[++i];
            continue;
        }
        long long v = atoll(argv[i]);
        if (v <= 0 || v % (long long)sizeof(float) != 0) {
            fprintf(stderr, "kv_device_check: %s is not a positive multiple of 4\n", argv[i]);
            return 2;
        }
        g_sizes[g_num_sizes++] = (size_t)v;
    }
    if (g_num_sizes == 0) {
        g_sizes[0] = 4096;
        g_sizes[1] = 1 << 20;
        g_sizes[2] = 4 << 20;
        g_num_sizes = 3;
    }
    ps_postoffice_t *po = check_node_start();
    if (want_van != NULL && strcmp(ps_postoffice_van_name(po), want_van) != 0)
        check_fail("ran on the %s van, not %s", ps_postoffice_van_name(po), want_van);
    if (strcmp(check_role, "scheduler") != 0) {
        if (!ps_mem_kind_linked(g_kind))
            check_fail("the %s memory kind is not linked into this binary", argv[1]);
        g_ops = ps_mem_ops(g_kind);
        CHECK_OK(g_ops->init());
    }
    check_node_run(po, worker_then_barrier, run_server, run_scheduler);
    printf("PASS %s %d: %s device memory, %d rounds\n", check_role, check_rank, argv[1],
           g_rounds_done);
    return 0;
}

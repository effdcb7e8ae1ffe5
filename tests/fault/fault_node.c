/*
 * fault_node: one process of a KV job that keeps pushing and pulling while
 * the test breaks something (kill -9 of a node, a cut link, lost packets),
 * verifying every sum and reporting when it noticed the fault and when
 * every one of its waits had returned. Roles from DMLC_* as usual.
 *
 * Worker rank r owns one key on every server (the server's first key + 1 +
 * r). Round k pushes element i = k * (r + 1) + i (int64) to each of them
 * and pulls the result in the same request (push-pull); the default store
 * sums pushes, so after n applied rounds element i must be
 * (r + 1) * n(n + 1)/2 + n * i — checked for every element of every pull.
 * A server whose request failed is left out from then on (whether its last
 * push was applied is unknown).
 *
 * Environment (all optional):
 *   FAULT_ROUNDS      rounds to run; 0 (default): run until a fault was
 *                     seen, then FAULT_AFTER more rounds on what is left
 *   FAULT_AFTER       rounds after the fault (default 3)
 *   FAULT_BYTES       value bytes per key (default 65536)
 *   FAULT_ROUND_MS    pause between rounds (default 0)
 *   FAULT_LIMIT_MS    the whole run's limit (default 120000)
 *
 * Lines printed, times in ms of the wall clock (CLOCK_REALTIME) so that the
 * test can subtract the moment it broke something:
 *   looping <role> <rank>                       after a first good round
 *   FAULT_SEEN <t> <status> <what>              first error of a request
 *   NODE_FAILED <t> <node id> <status>          from the postoffice callback
 *   BARRIER <t> <status>                        the barrier of everyone
 *   RETURNED <t>                                every wait of this node ended
 *   PASS <role> <rank> <summary>                every check held; exit 0
 *                                               when the job ended whole, 1
 *                                               when it lost a node (the
 *                                               barrier of everyone failed),
 *                                               as a training script would
 *   FAIL <role> <rank> <why>                    exit 1: wrong data, a wait
 *                                               that outlived its deadline
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"
#include "tests/lib/check_node.h"

#define MAX_SERVERS 64
#define WAIT_MS 30000

static atomic_int g_node_failures;

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? strtol(v, NULL, 10) : dflt;
}

/* Open file descriptors and resident memory of this process, for the load
 * test's "bounded per peer" check. */
static void print_resources(const char *when)
{
    int fds = -3; /* ".", ".." and the directory's own descriptor */
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        while (readdir(d) != NULL)
            fds++;
        closedir(d);
    }
    long rss_kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof(line), f) != NULL)
            if (sscanf(line, "VmRSS: %ld kB", &rss_kb) == 1)
                break;
        fclose(f);
    }
    printf("RESOURCES %s fds %d rss_kb %ld\n", when, fds, rss_kb);
}

/* Runs on a postoffice thread: print and count, nothing more. */
static void on_node_failed(void *arg, ps_postoffice_t *po, int node_id, ps_status_t why)
{
    (void)arg;
    (void)po;
    printf("NODE_FAILED %lld %d %s\n", wall_ms(), node_id, ps_status_name(why));
    fflush(stdout);
    atomic_fetch_add(&g_node_failures, 1);
}

static ps_slice_t slice_or_die(size_t len)
{
    ps_slice_t s;
    if (ps_slice_alloc(len, 4096, &s) != PS_OK)
        check_fail("out of memory (%zu bytes)", len);
    return s;
}

typedef struct server_lane {
    int live;
    ps_key_t key;
    uint64_t applied;   /* rounds whose push-pull succeeded */
    ps_slice_t keys;
    ps_slice_t out;
    int ts;
    ps_status_t st;
} server_lane_t;

static void fill_push(int64_t *v, size_t n, uint64_t round)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (int64_t)(round * (uint64_t)(check_rank + 1) + i);
}

static void check_pull(const server_lane_t *lane, int server, size_t n)
{
    const int64_t *got = ps_slice_ptr(&lane->out);
    uint64_t k = lane->applied;
    int64_t base = (int64_t)((uint64_t)(check_rank + 1) * k * (k + 1) / 2);
    for (size_t i = 0; i < n; i++) {
        int64_t want = base + (int64_t)(k * i);
        if (got[i] != want)
            check_fail("server %d key %" PRIu64 " element %zu after %" PRIu64 " rounds: %" PRId64
                       ", the sum is %" PRId64, server, lane->key, i, k, got[i], want);
    }
}

static ps_status_t run_worker(ps_postoffice_t *po)
{
    long rounds = env_long("FAULT_ROUNDS", 0);
    long after = env_long("FAULT_AFTER", 3);
    size_t bytes = (size_t)env_long("FAULT_BYTES", 65536) & ~(size_t)7;
    long pause_ms = env_long("FAULT_ROUND_MS", 0);
    ps_deadline_t limit = ps_deadline_from_ms((int)env_long("FAULT_LIMIT_MS", 120000));
    size_t n = bytes / 8;
    int num_servers = ps_postoffice_num_servers(po);
    if (num_servers > MAX_SERVERS || n == 0)
        check_fail("%d servers or %zu bytes: out of this test's range", num_servers, bytes);

    ps_kv_worker_t *kv;
    if (ps_kv_worker_create(po, 0, 0, &kv) != PS_OK)
        check_fail("cannot create the kv worker");
    server_lane_t lanes[MAX_SERVERS];
    for (int s = 0; s < num_servers; s++) {
        uint64_t begin, end;
        if (ps_postoffice_server_key_range(po, s, &begin, &end) != PS_OK)
            check_fail("no key range for server %d", s);
        server_lane_t *l = &lanes[s];
        memset(l, 0, sizeof(*l));
        l->live = 1;
        l->key = begin + 1 + (ps_key_t)check_rank;
        l->keys = slice_or_die(sizeof(ps_key_t));
        memcpy(ps_slice_ptr(&l->keys), &l->key, sizeof(ps_key_t));
        l->out = slice_or_die(bytes);
    }
    ps_slice_t push = slice_or_die(bytes);

    long long fault_at = 0;
    long done = 0, since_fault = -1;
    uint64_t checked = 0;
    long long worst_round_ms = 0;
    for (uint64_t round = 1;; round++) {
        if (rounds > 0 && done >= rounds)
            break;
        if (since_fault >= after)
            break;
        if (ps_deadline_expired(limit))
            check_fail("%ld rounds and no fault seen before FAULT_LIMIT_MS", done);
        int live = 0;
        for (int s = 0; s < num_servers; s++)
            live += lanes[s].live;
        if (live == 0)
            break;
        fill_push(ps_slice_ptr(&push), n, round);
        long long t0 = wall_ms();
        for (int s = 0; s < num_servers; s++) {
            server_lane_t *l = &lanes[s];
            if (!l->live)
                continue;
            ps_kv_pairs_t in = {.keys = l->keys, .vals = push, .lens = PS_SLICE_EMPTY_INIT,
                                .type = PS_DATA_INT64};
            ps_kv_pairs_t out = {.keys = l->keys, .vals = l->out, .lens = PS_SLICE_EMPTY_INIT,
                                 .type = PS_DATA_INT64};
            /* What the lane would have after this round, if it is applied:
             * the push above carries round number `round`, so rounds that
             * failed on a lane must not be counted: a lane is dropped at
             * its first failure, which keeps applied == round - 1. */
            l->st = ps_kv_zpushpull(kv, &in, &out, 0, NULL, NULL, &l->ts);
        }
        for (int s = 0; s < num_servers; s++) {
            server_lane_t *l = &lanes[s];
            if (!l->live)
                continue;
            if (l->st == PS_OK) {
                ps_deadline_t d = ps_deadline_from_ms(WAIT_MS + 1000);
                l->st = ps_kv_wait(kv, l->ts, WAIT_MS);
                if (ps_deadline_expired(d))
                    check_fail("a wait for server %d outlived its %d ms deadline", s, WAIT_MS);
            }
            if (l->st == PS_OK) {
                l->applied++;
                check_pull(l, s, n);
                checked += n;
                continue;
            }
            l->live = 0;
            if (fault_at == 0) {
                fault_at = wall_ms();
                printf("FAULT_SEEN %lld %s request to server %d in round %" PRIu64 "\n", fault_at,
                       ps_status_name(l->st), s, round);
                fflush(stdout);
            }
        }
        long long took = wall_ms() - t0;
        if (took > worst_round_ms)
            worst_round_ms = took;
        done++;
        if (done == 1 && fault_at == 0) {
            print_resources("start");
            printf("looping %s %d\n", check_role, check_rank);
            fflush(stdout);
        }
        if (since_fault >= 0 || fault_at != 0 || atomic_load(&g_node_failures) > 0)
            since_fault++;
        if (pause_ms > 0)
            ps_sleep_ms((int)pause_ms);
    }
    print_resources("end");
    ps_status_t bar = ps_postoffice_barrier(po, PS_GROUP_ALL, WAIT_MS);
    printf("BARRIER %lld %s\n", wall_ms(), ps_status_name(bar));
    printf("RETURNED %lld\n", wall_ms());
    fflush(stdout);
    if (rounds > 0 && fault_at == 0 && bar != PS_OK)
        check_fail("no request failed, yet the barrier of everyone ended with %s", ps_status_name(bar));
    ps_kv_worker_destroy(kv);
    for (int s = 0; s < num_servers; s++) {
        ps_slice_unref(&lanes[s].keys);
        ps_slice_unref(&lanes[s].out);
    }
    ps_slice_unref(&push);
    ps_status_t fin = ps_postoffice_finalize(po, bar == PS_OK);
    printf("PASS worker %d: %ld rounds, %" PRIu64 " elements checked, slowest round %lld ms, "
           "barrier %s, finalize %s\n", check_rank, done, checked, worst_round_ms,
           ps_status_name(bar), ps_status_name(fin));
    return bar;
}

/* Servers serve; the scheduler only waits. Both meet the workers in the
 * barrier of everyone, which ends (OK or with the reason) by itself. */
static ps_status_t run_other(ps_postoffice_t *po, int is_server)
{
    ps_kv_store_t *store = NULL;
    ps_kv_server_t *server = NULL;
    if (is_server && (ps_kv_store_create(&store) != PS_OK ||
                      ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server) != PS_OK))
        check_fail("cannot create the kv server");
    int limit_ms = (int)env_long("FAULT_LIMIT_MS", 120000);
    print_resources("start");
    ps_status_t bar = ps_postoffice_barrier(po, PS_GROUP_ALL, limit_ms);
    print_resources("end");
    printf("BARRIER %lld %s\n", wall_ms(), ps_status_name(bar));
    printf("RETURNED %lld\n", wall_ms());
    fflush(stdout);
    if (bar == PS_ERR_TIMED_OUT)
        check_fail("the barrier of everyone waited out its whole %d ms", limit_ms);
    ps_status_t fin = ps_postoffice_finalize(po, bar == PS_OK);
    if (server != NULL) {
        ps_kv_server_destroy(server);
        ps_kv_store_destroy(store);
    }
    printf("PASS %s %d: barrier %s, finalize %s\n", check_role, check_rank, ps_status_name(bar),
           ps_status_name(fin));
    return bar;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *role = getenv("DMLC_ROLE");
    check_role = role != NULL ? role : "?";
    ps_postoffice_t *po;
    ps_status_t st = ps_postoffice_start(NULL, 1, &po);
    if (st != PS_OK)
        check_fail("start: %s", ps_status_name(st));
    check_rank = ps_postoffice_my_rank(po);
    if (ps_postoffice_on_node_failed(po, on_node_failed, NULL) != PS_OK)
        check_fail("cannot register the node-failed callback");
    ps_status_t job;
    switch (ps_postoffice_role(po)) {
    case PS_ROLE_WORKER:
        job = run_worker(po);
        break;
    case PS_ROLE_SERVER:
        job = run_other(po, 1);
        break;
    default:
        job = run_other(po, 0);
        break;
    }
    return job == PS_OK ? 0 : 1;
}

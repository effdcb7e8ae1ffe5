/*
 * sum_node: one node of a small summation job, configured by the
 * environment (DMLC_*, PS_*), for the hostile-input and job-secret tests.
 *
 * Worker rank w pushes, for SN_ROUNDS rounds (SN_ROUND_MS apart, so the job
 * is still running while the tests attack it), SN_LEN u32 values
 * (w+1)*(round+1) + i + s to every server s. A server adds them into its
 * per-worker running sums (u64) and answers with the sums; the worker
 * checks every element against the closed form after every round, so a
 * push lost, applied twice or corrupted is caught. With SN_UNTIL_FILE set,
 * a worker goes on past SN_ROUNDS until that file exists (a test whose
 * attacks take as long as they take ends the job when they are done).
 *
 * Prints "sum_node: <role> ok" and exits 0, or "sum_node: <what> failed:
 * <STATUS_NAME> (...)" and exits 1.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/codec/message.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "tests/lib/po_send.h"

#define SN_MAX_SERVERS 16
#define SN_MAX_WORKERS 64

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? atoi(v) : fallback;
}

static int fail(const char *what, ps_status_t st)
{
    printf("sum_node: %s failed: %s (%s)\n", what, ps_status_name(st), ps_status_str(st));
    fflush(stdout);
    return 1;
}

/* ---- server ---- */

typedef struct {
    ps_postoffice_t *po;
    size_t len;
    pthread_mutex_t lock;
    uint64_t *acc[SN_MAX_WORKERS];
    int bad;
} server_t;

static void server_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    server_t *s = arg;
    (void)customer;
    if (!msg->meta.request)
        return;
    int rank = ps_id_to_rank(msg->meta.sender);
    if (msg->num_data != 1 || msg->data[0].len != s->len * 4 || rank < 0 ||
        rank >= SN_MAX_WORKERS) {
        printf("sum_node: server: bad push from node %d\n", msg->meta.sender);
        __atomic_add_fetch(&s->bad, 1, __ATOMIC_RELAXED);
        return;
    }
    ps_slice_t out;
    if (ps_slice_alloc(s->len * 8, 0, &out) != PS_OK)
        return;
    const uint8_t *in = ps_slice_ptr(&msg->data[0]);
    uint64_t *o = ps_slice_ptr(&out);
    pthread_mutex_lock(&s->lock);
    if (s->acc[rank] == NULL)
        s->acc[rank] = calloc(s->len, sizeof(uint64_t));
    for (size_t i = 0; s->acc[rank] != NULL && i < s->len; i++) {
        uint32_t v;
        memcpy(&v, in + 4 * i, 4);
        s->acc[rank][i] += v;
        o[i] = s->acc[rank][i];
    }
    pthread_mutex_unlock(&s->lock);

    ps_status_t st = po_send_reply(s->po, msg, &out, PS_DATA_UINT64);
    if (st != PS_OK)
        printf("sum_node: server reply failed: %s\n", ps_status_name(st));
    ps_slice_unref(&out);
}

/* ---- worker ---- */

typedef struct {
    int rank;
    size_t len;
    int errors;
} worker_t;

static uint64_t expected(int rank, int round, int server_rank, size_t i)
{
    uint64_t r1 = (uint64_t)round + 1;
    return (uint64_t)(rank + 1) * r1 * (r1 + 1) / 2 + r1 * (i + (uint64_t)server_rank);
}

static void worker_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    worker_t *w = arg;
    if (msg->meta.request)
        return;
    int round = msg->meta.head;
    int srank = ps_id_to_rank(msg->meta.sender);
    if (msg->num_data != 1 || msg->data[0].len != w->len * 8) {
        printf("sum_node: worker %d round %d: answer from server %d is malformed\n", w->rank,
               round, srank);
        __atomic_add_fetch(&w->errors, 1, __ATOMIC_RELAXED);
    } else {
        const uint8_t *p = ps_slice_ptr(&msg->data[0]);
        for (size_t i = 0; i < w->len; i++) {
            uint64_t got;
            memcpy(&got, p + 8 * i, 8);
            if (got != expected(w->rank, round, srank, i)) {
                printf("sum_node: worker %d round %d: sum %zu from server %d is %llu, want %llu\n",
                       w->rank, round, i, srank, (unsigned long long)got,
                       (unsigned long long)expected(w->rank, round, srank, i));
                __atomic_add_fetch(&w->errors, 1, __ATOMIC_RELAXED);
                break;
            }
        }
    }
    ps_customer_add_response(customer, msg->meta.timestamp, 1);
}

static int more_rounds(int round, int rounds, const char *until_file)
{
    if (round < rounds)
        return 1;
    return until_file != NULL && until_file[0] != '\0' && access(until_file, F_OK) != 0;
}

static int run_worker(ps_postoffice_t *po, int rounds, int round_ms, size_t len)
{
    const char *until_file = getenv("SN_UNTIL_FILE");
    worker_t w = {.rank = ps_postoffice_my_rank(po), .len = len};
    ps_customer_t *c;
    ps_status_t st = ps_customer_create(po, 0, 0, worker_recv, &w, &c);
    if (st != PS_OK)
        return fail("customer create", st);
    int servers[SN_MAX_SERVERS];
    int ns = ps_postoffice_group_ids(po, PS_GROUP_SERVER, servers, SN_MAX_SERVERS);
    if (ns > SN_MAX_SERVERS)
        ns = SN_MAX_SERVERS;
    int round;
    for (round = 0; more_rounds(round, rounds, until_file); round++) {
        int ts;
        if ((st = ps_customer_new_request(c, ns, servers, ns, &ts)) != PS_OK)
            return fail("new request", st);
        for (int s = 0; s < ns; s++) {
            ps_slice_t payload;
            if ((st = ps_slice_alloc(len * 4, 0, &payload)) != PS_OK)
                return fail("alloc", st);
            uint32_t *p = ps_slice_ptr(&payload);
            for (size_t i = 0; i < len; i++)
                p[i] = (uint32_t)((w.rank + 1) * (round + 1) + (int)i + ps_id_to_rank(servers[s]));
            st = po_send_request(po, servers[s], 0, 0, ts, round, true, &payload, PS_DATA_UINT32);
            ps_slice_unref(&payload);
            if (st != PS_OK)
                return fail("send", st);
        }
        if ((st = ps_customer_wait(c, ts, 30000)) != PS_OK)
            return fail("wait", st);
        if (round_ms > 0)
            (void)ps_sleep_until(ps_deadline_from_ms(round_ms));
    }
    ps_customer_destroy(c);
    int errors = __atomic_load_n(&w.errors, __ATOMIC_RELAXED);
    if (errors != 0) {
        printf("sum_node: worker %d: %d wrong sums\n", w.rank, errors);
        return 1;
    }
    int workers[SN_MAX_WORKERS];
    int nw = ps_postoffice_group_ids(po, PS_GROUP_WORKER, workers, SN_MAX_WORKERS);
    printf("sum_node: worker %d: %d rounds with %d servers, every sum right; node table: %d "
           "workers, %d servers\n", w.rank, round, ns, nw, ns);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rounds = env_int("SN_ROUNDS", 40);
    int round_ms = env_int("SN_ROUND_MS", 50);
    size_t len = (size_t)env_int("SN_LEN", 1024);

    ps_postoffice_t *po;
    ps_status_t st = ps_postoffice_start(NULL, 1, &po);
    if (st != PS_OK)
        return fail("start", st);
    ps_role_t role = ps_postoffice_role(po);
    printf("sum_node: %s %d started (van %s, %d workers, %d servers)\n", ps_role_str(role),
           ps_postoffice_my_id(po), ps_postoffice_van_name(po), ps_postoffice_num_workers(po),
           ps_postoffice_num_servers(po));

    server_t srv;
    memset(&srv, 0, sizeof(srv));
    srv.po = po;
    srv.len = len;
    pthread_mutex_init(&srv.lock, NULL);
    ps_customer_t *server = NULL;
    if (role == PS_ROLE_SERVER &&
        (st = ps_customer_create(po, 0, 0, server_recv, &srv, &server)) != PS_OK)
        return fail("customer create", st);
    int rc = 0;
    if (role != PS_ROLE_SCHEDULER &&
        (st = ps_postoffice_barrier(po, PS_GROUP_SERVER | PS_GROUP_WORKER, 30000)) != PS_OK)
        return fail("servers+workers barrier", st);
    if (role == PS_ROLE_WORKER)
        rc = run_worker(po, rounds, round_ms, len);
    st = ps_postoffice_finalize(po, 1);
    if (server != NULL)
        ps_customer_destroy(server);
    for (int i = 0; i < SN_MAX_WORKERS; i++)
        free(srv.acc[i]);
    pthread_mutex_destroy(&srv.lock);
    if (st != PS_OK)
        return fail("finalize", st);
    if (srv.bad != 0) {
        printf("sum_node: server: %d bad pushes\n", srv.bad);
        return 1;
    }
    if (rc == 0)
        printf("sum_node: %s ok\n", ps_role_str(role));
    return rc;
}

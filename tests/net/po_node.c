/*
 * po_node: one node of a test job, configured by the environment as any ps
 * program (DMLC_ROLE, DMLC_PS_ROOT_URI, ...).
 *
 * scheduler: start (with the start barrier), finalize.
 * server:    answers every request with its payload XOR 0x5a.
 * worker:    PO_ROUNDS rounds; each sends a payload (sizes vary) to every
 *            server as one request, checks every byte of every answer,
 *            waits with a deadline; then a workers-only barrier.
 * Everyone:  a servers+workers barrier, then finalize with a barrier.
 * joint:     (DMLC_ROLE=joint) a server and a worker postoffice in this
 *            process, each running its role's flow on its own thread.
 *
 * PO_MODE=store: a job that survives a worker restarted after kill -9
 * (recovery). Servers keep a store of (worker rank, round) -> value, put
 * idempotently: a slot is applied once, a repeated put of the same value
 * is a duplicate, another value a conflict. Worker r puts
 * value(r, round, server) into every server for PO_ROUNDS rounds (one
 * request per round, PO_ROUND_MS apart, "po_node: worker <id> round <n>"
 * printed after each). A worker that took over a dead one's id asks the
 * servers how far its predecessor got and resumes there. Then everyone
 * meets in a servers+workers barrier, each worker asks every server to
 * check every slot of every worker, each server checks its own store, and
 * all meet in a final barrier. Barriers that fail because a node is dead
 * wait up to PO_RECOVERY_MS for a new process to take it over and are
 * entered again (0: fail at once).
 *
 * Prints "po_node: <role> <id> ok ..." and exits 0, or prints
 * "po_node: ... failed: <STATUS_NAME> ..." and exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/codec/message.h"
#include "ps/net/customer.h"
#include "ps/net/joint.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "tests/lib/po_send.h"

#define PO_APP 0
#define PO_CUSTOMER 0
#define PO_MAX_SERVERS 64

static const size_t po_sizes[] = {1, 7, 100, 4096, 65536 + 3, 1 << 20};
#define PO_NUM_SIZES (sizeof(po_sizes) / sizeof(po_sizes[0]))

typedef struct {
    ps_postoffice_t *po;
    int rank;
    int errors;               /* written on the van thread, read after waits */
} worker_state_t;

static uint8_t pattern(int worker_rank, int round, int server_rank, size_t i)
{
    return (uint8_t)(worker_rank * 31 + round * 17 + server_rank * 5 + (int)(i * 7));
}

static size_t round_size(int round)
{
    return po_sizes[(size_t)round % PO_NUM_SIZES];
}

static int fail(const char *what, ps_status_t st)
{
    printf("po_node: %s failed: %s (%s)\n", what, ps_status_name(st), ps_status_str(st));
    fflush(stdout);
    return 1;
}

/* ---- server ---- */

static void server_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    ps_postoffice_t *po = arg;
    (void)customer;
    if (!msg->meta.request || msg->num_data != 1)
        return;
    size_t len = msg->data[0].len;
    ps_slice_t out;
    if (ps_slice_alloc(len, 0, &out) != PS_OK)
        return;
    const uint8_t *in = ps_slice_ptr(&msg->data[0]);
    uint8_t *o = ps_slice_ptr(&out);
    for (size_t i = 0; i < len; i++)
        o[i] = in[i] ^ 0x5a;

    ps_status_t st = po_send_reply(po, msg, &out, PS_DATA_CHAR);
    if (st != PS_OK)
        printf("po_node: server reply failed: %s\n", ps_status_name(st));
    ps_slice_unref(&out);
}

/* ---- worker ---- */

static void worker_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    worker_state_t *w = arg;
    if (msg->meta.request)
        return;
    int ts = msg->meta.timestamp;
    int round = msg->meta.head;
    int server_rank = ps_id_to_rank(msg->meta.sender);
    size_t want = round_size(round);
    if (msg->num_data != 1 || msg->data[0].len != want) {
        printf("po_node: worker %d round %d: answer from server %d has %u segments, %zu bytes "
               "(want %zu)\n",
               w->rank, round, server_rank, msg->num_data,
               msg->num_data ? msg->data[0].len : 0, want);
        __atomic_add_fetch(&w->errors, 1, __ATOMIC_RELAXED);
    } else {
        const uint8_t *p = ps_slice_ptr(&msg->data[0]);
        for (size_t i = 0; i < want; i++) {
            if (p[i] != (pattern(w->rank, round, server_rank, i) ^ 0x5a)) {
                printf("po_node: worker %d round %d: byte %zu from server %d is 0x%02x\n",
                       w->rank, round, i, server_rank, p[i]);
                __atomic_add_fetch(&w->errors, 1, __ATOMIC_RELAXED);
                break;
            }
        }
    }
    ps_customer_add_response(customer, ts, 1);
}

static int run_worker(ps_postoffice_t *po, int rounds)
{
    worker_state_t *w = calloc(1, sizeof(*w));
    ps_customer_t *c;
    w->po = po;
    w->rank = ps_postoffice_my_rank(po);
    ps_status_t st = ps_customer_create(po, PO_APP, PO_CUSTOMER, worker_recv, w, &c);
    if (st != PS_OK)
        return fail("customer create", st);
    int servers[PO_MAX_SERVERS];
    int ns = ps_postoffice_group_ids(po, PS_GROUP_SERVER, servers, PO_MAX_SERVERS);
    if (ns > PO_MAX_SERVERS)
        ns = PO_MAX_SERVERS;

    for (int round = 0; round < rounds; round++) {
        size_t len = round_size(round);
        int ts;
        st = ps_customer_new_request(c, ns, servers, ns, &ts);
        if (st != PS_OK)
            return fail("new request", st);
        for (int s = 0; s < ns; s++) {
            ps_slice_t payload;
            if ((st = ps_slice_alloc(len, 0, &payload)) != PS_OK)
                return fail("alloc", st);
            uint8_t *p = ps_slice_ptr(&payload);
            for (size_t i = 0; i < len; i++)
                p[i] = pattern(w->rank, round, ps_id_to_rank(servers[s]), i);
            st = po_send_request(po, servers[s], PO_APP, PO_CUSTOMER, ts, round, true, &payload,
                                 PS_DATA_CHAR);
            ps_slice_unref(&payload);
            if (st != PS_OK)
                return fail("send", st);
        }
        st = ps_customer_wait(c, ts, 20000);
        if (st != PS_OK)
            return fail("wait", st);
        /* Waiting again on a completed request is fine. */
        if ((st = ps_customer_wait(c, ts, 0)) != PS_OK)
            return fail("second wait", st);
    }
    int errors = __atomic_load_n(&w->errors, __ATOMIC_RELAXED);
    if (errors != 0) {
        printf("po_node: worker %d: %d bad answers\n", w->rank, errors);
        return 1;
    }
    st = ps_postoffice_barrier(po, PS_GROUP_WORKER, 20000);
    if (st != PS_OK)
        return fail("workers barrier", st);
    printf("po_node: worker %d: %d rounds with %d servers ok\n", ps_postoffice_my_id(po), rounds,
           ns);
    ps_customer_destroy(c);
    free(w);
    return 0;
}

/* ---- store mode ---- */

enum { HEAD_PUT = 1, HEAD_PROGRESS = 2, HEAD_CHECK = 3 };

typedef struct {
    ps_postoffice_t *po;
    int rank;
    int num_workers;
    int rounds;
    ps_mutex_t lock;
    uint64_t *value; /* [worker rank * rounds + round] */
    uint8_t *have;
    int applied;
    int duplicates;
    int conflicts;
} store_t;

static uint64_t store_value(int worker_rank, int round, int server_rank)
{
    uint64_t z = (uint64_t)worker_rank * 1000003u + (uint64_t)round * 7919u +
                 (uint64_t)server_rank * 31u + 1u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void reply_u64(ps_postoffice_t *po, const ps_msg_t *req, const uint64_t *vals, int n)
{
    ps_slice_t out = PS_SLICE_EMPTY_INIT;
    if (n > 0 && ps_slice_alloc((size_t)n * 8, 0, &out) == PS_OK)
        memcpy(ps_slice_ptr(&out), vals, (size_t)n * 8);
    ps_status_t st = po_send_reply(po, req, &out, PS_DATA_UINT64);
    if (st != PS_OK)
        printf("po_node: server reply failed: %s\n", ps_status_name(st));
    ps_slice_unref(&out);
}

/* Slots present with the right value, and slots wrong (absent or other). */
static void store_check(store_t *s, uint64_t *good_p, uint64_t *bad_p)
{
    uint64_t good = 0;
    uint64_t bad = 0;
    ps_mutex_lock(&s->lock);
    for (int w = 0; w < s->num_workers; w++) {
        for (int r = 0; r < s->rounds; r++) {
            size_t i = (size_t)w * (size_t)s->rounds + (size_t)r;
            if (s->have[i] && s->value[i] == store_value(w, r, s->rank))
                good++;
            else
                bad++;
        }
    }
    ps_mutex_unlock(&s->lock);
    *good_p = good;
    *bad_p = bad;
}

static void store_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    store_t *s = arg;
    (void)customer;
    if (!msg->meta.request)
        return;
    int w = ps_id_to_rank(msg->meta.sender);
    if (w >= s->num_workers)
        return;
    if (msg->meta.head == HEAD_PUT) {
        uint64_t rv[2] = {0, 0};
        if (msg->num_data != 1 || msg->data[0].len != sizeof(rv))
            return;
        memcpy(rv, ps_slice_ptr(&msg->data[0]), sizeof(rv));
        if (rv[0] < (uint64_t)s->rounds) {
            size_t i = (size_t)w * (size_t)s->rounds + (size_t)rv[0];
            ps_mutex_lock(&s->lock);
            if (!s->have[i]) {
                s->have[i] = 1;
                s->value[i] = rv[1];
                s->applied++;
            } else if (s->value[i] == rv[1]) {
                s->duplicates++;
            } else {
                s->conflicts++;
            }
            ps_mutex_unlock(&s->lock);
        }
        reply_u64(s->po, msg, NULL, 0);
    } else if (msg->meta.head == HEAD_PROGRESS) {
        uint64_t n = 0;
        ps_mutex_lock(&s->lock);
        while ((int)n < s->rounds && s->have[(size_t)w * (size_t)s->rounds + n])
            n++;
        ps_mutex_unlock(&s->lock);
        reply_u64(s->po, msg, &n, 1);
    } else if (msg->meta.head == HEAD_CHECK) {
        uint64_t gb[2];
        store_check(s, &gb[0], &gb[1]);
        reply_u64(s->po, msg, gb, 2);
    }
}

/* A worker's view of the answers to one request to every server. */
typedef struct {
    ps_mutex_t lock;
    uint64_t vals[PO_MAX_SERVERS][2];
} answers_t;

static void store_worker_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    answers_t *a = arg;
    if (msg->meta.request)
        return;
    int s = ps_id_to_rank(msg->meta.sender);
    if (s < PO_MAX_SERVERS && msg->num_data == 1 && msg->data[0].len <= sizeof(a->vals[0])) {
        ps_mutex_lock(&a->lock);
        memcpy(a->vals[s], ps_slice_ptr(&msg->data[0]), msg->data[0].len);
        ps_mutex_unlock(&a->lock);
    }
    ps_customer_add_response(customer, msg->meta.timestamp, 1);
}

/* One request to every server: head, and per server an optional payload. */
static ps_status_t store_request(ps_postoffice_t *po, ps_customer_t *c, const int *servers,
                                 int ns, int head, int round, int rank)
{
    int ts;
    ps_status_t st = ps_customer_new_request(c, ns, servers, ns, &ts);
    if (st != PS_OK)
        return st;
    for (int i = 0; i < ns; i++) {
        ps_slice_t payload = PS_SLICE_EMPTY_INIT;
        if (head == HEAD_PUT) {
            uint64_t rv[2] = {(uint64_t)round,
                              store_value(rank, round, ps_id_to_rank(servers[i]))};
            if ((st = ps_slice_alloc(sizeof(rv), 0, &payload)) != PS_OK)
                return st;
            memcpy(ps_slice_ptr(&payload), rv, sizeof(rv));
        }
        st = po_send_request(po, servers[i], PO_APP, PO_CUSTOMER, ts, head, false, &payload,
                             PS_DATA_UINT64);
        ps_slice_unref(&payload);
        if (st != PS_OK)
            return st;
    }
    return ps_customer_wait(c, ts, 20000);
}

/* A barrier that, when a node of the group is dead, waits (up to
 * recovery_ms) for a new process to take it over and tries again. */
static ps_status_t robust_barrier(ps_postoffice_t *po, int group, int recovery_ms)
{
    for (int attempt = 0;; attempt++) {
        ps_status_t st = ps_postoffice_barrier(po, group, 60000);
        if (st != PS_ERR_PEER_GONE || recovery_ms <= 0 || attempt >= 10)
            return st;
        printf("po_node: %s %d: barrier %d: a node is dead; waiting up to %d ms for a new "
               "process to take it over\n", ps_role_str(ps_postoffice_role(po)),
               ps_postoffice_my_id(po), group, recovery_ms);
        st = ps_postoffice_wait_alive(po, group, recovery_ms);
        if (st != PS_OK)
            return st;
    }
}

static int run_store(ps_postoffice_t *po, int rounds, int round_ms, int recovery_ms)
{
    ps_role_t role = ps_postoffice_role(po);
    int me = ps_postoffice_my_id(po);
    int rank = ps_postoffice_my_rank(po);
    int recovered = ps_postoffice_is_recovery(po);
    ps_status_t st;

    if (role == PS_ROLE_SCHEDULER) {
        if ((st = robust_barrier(po, PS_GROUP_ALL, recovery_ms)) != PS_OK)
            return fail("final barrier", st);
        return 0;
    }
    if (role == PS_ROLE_SERVER) {
        store_t *s = calloc(1, sizeof(*s));
        s->po = po;
        s->rank = rank;
        s->num_workers = ps_postoffice_num_workers(po);
        s->rounds = rounds;
        s->value = calloc((size_t)s->num_workers * (size_t)rounds, sizeof(uint64_t));
        s->have = calloc((size_t)s->num_workers * (size_t)rounds, 1);
        ps_mutex_init(&s->lock);
        ps_customer_t *c;
        if ((st = ps_customer_create(po, PO_APP, PO_APP, store_recv, s, &c)) != PS_OK)
            return fail("customer create", st);
        if (!recovered &&
            (st = ps_postoffice_barrier(po, PS_GROUP_SERVER | PS_GROUP_WORKER, 20000)) != PS_OK)
            return fail("servers+workers barrier", st);
        if ((st = robust_barrier(po, PS_GROUP_SERVER | PS_GROUP_WORKER, recovery_ms)) != PS_OK)
            return fail("done barrier", st);
        uint64_t good, bad;
        store_check(s, &good, &bad);
        if ((st = robust_barrier(po, PS_GROUP_ALL, recovery_ms)) != PS_OK)
            return fail("final barrier", st);
        ps_customer_destroy(c);
        printf("po_node: server %d: %llu slots right, %llu wrong; %d applied, %d duplicates, "
               "%d conflicts\n", me, (unsigned long long)good, (unsigned long long)bad,
               s->applied, s->duplicates, s->conflicts);
        int rc = bad == 0 && s->conflicts == 0 &&
                         s->applied == s->num_workers * rounds
                     ? 0
                     : 1;
        ps_mutex_destroy(&s->lock);
        free(s->value);
        free(s->have);
        free(s);
        if (rc != 0)
            printf("po_node: server %d: store check failed\n", me);
        return rc;
    }

    /* worker */
    answers_t *a = calloc(1, sizeof(*a));
    ps_mutex_init(&a->lock);
    ps_customer_t *c;
    if ((st = ps_customer_create(po, PO_APP, PO_CUSTOMER, store_worker_recv, a, &c)) != PS_OK)
        return fail("customer create", st);
    int servers[PO_MAX_SERVERS];
    int ns = ps_postoffice_group_ids(po, PS_GROUP_SERVER, servers, PO_MAX_SERVERS);
    if (ns > PO_MAX_SERVERS)
        ns = PO_MAX_SERVERS;
    if (!recovered &&
        (st = ps_postoffice_barrier(po, PS_GROUP_SERVER | PS_GROUP_WORKER, 20000)) != PS_OK)
        return fail("servers+workers barrier", st);
    int start = 0;
    if (recovered) {
        if ((st = store_request(po, c, servers, ns, HEAD_PROGRESS, 0, rank)) != PS_OK)
            return fail("progress request", st);
        start = rounds;
        ps_mutex_lock(&a->lock);
        for (int i = 0; i < ns; i++) {
            int got = (int)a->vals[ps_id_to_rank(servers[i])][0];
            if (got < start)
                start = got;
        }
        ps_mutex_unlock(&a->lock);
        printf("po_node: worker %d took over from a dead process; resumes at round %d\n", me,
               start);
    }
    for (int round = start; round < rounds; round++) {
        if ((st = store_request(po, c, servers, ns, HEAD_PUT, round, rank)) != PS_OK)
            return fail("put", st);
        printf("po_node: worker %d round %d\n", me, round);
        if (round_ms > 0)
            ps_sleep_ms((uint64_t)round_ms);
    }
    if ((st = robust_barrier(po, PS_GROUP_SERVER | PS_GROUP_WORKER, recovery_ms)) != PS_OK)
        return fail("done barrier", st);
    memset(a->vals, 0, sizeof(a->vals));
    if ((st = store_request(po, c, servers, ns, HEAD_CHECK, 0, rank)) != PS_OK)
        return fail("check request", st);
    int rc = 0;
    uint64_t want = (uint64_t)ps_postoffice_num_workers(po) * (uint64_t)rounds;
    ps_mutex_lock(&a->lock);
    for (int i = 0; i < ns; i++) {
        const uint64_t *gb = a->vals[ps_id_to_rank(servers[i])];
        if (gb[0] != want || gb[1] != 0) {
            printf("po_node: worker %d: server %d has %llu of %llu slots right, %llu wrong\n",
                   me, servers[i], (unsigned long long)gb[0], (unsigned long long)want,
                   (unsigned long long)gb[1]);
            rc = 1;
        }
    }
    ps_mutex_unlock(&a->lock);
    if ((st = robust_barrier(po, PS_GROUP_ALL, recovery_ms)) != PS_OK)
        return fail("final barrier", st);
    ps_customer_destroy(c);
    ps_mutex_destroy(&a->lock);
    free(a);
    if (rc == 0)
        printf("po_node: worker %d: rounds %d to %d put, job checked: %llu slots on each of %d "
               "servers\n", me, start, rounds - 1, (unsigned long long)want, ns);
    return rc;
}

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? atoi(v) : fallback;
}

/* The default flow of one postoffice (see the top of this file). */
static int run_node(ps_postoffice_t *po, int rounds)
{
    ps_role_t role = ps_postoffice_role(po);
    int rc = 0;
    ps_status_t st;
    ps_customer_t *server = NULL;
    if (role == PS_ROLE_SERVER) {
        /* A server's customer is (app, app), as upstream. */
        st = ps_customer_create(po, PO_APP, PO_APP, server_recv, po, &server);
        if (st != PS_OK)
            return fail("customer create", st);
    }
    /* Servers must be listening before workers send: a barrier. (A message
     * that arrives early would wait for its customer anyway.) */
    if (role != PS_ROLE_SCHEDULER) {
        st = ps_postoffice_barrier(po, PS_GROUP_SERVER | PS_GROUP_WORKER, 20000);
        if (st != PS_OK)
            return fail("servers+workers barrier", st);
    }
    if (role == PS_ROLE_WORKER)
        rc = run_worker(po, rounds);

    st = ps_postoffice_finalize(po, 1);
    if (server != NULL)
        ps_customer_destroy(server);
    if (st != PS_OK)
        return fail("finalize", st);
    if (rc == 0)
        printf("po_node: %s ok\n", ps_role_str(role));
    return rc;
}

static void print_started(ps_postoffice_t *po)
{
    printf("po_node: %s %d started (rank %d, van %s, job %s)\n",
           ps_role_str(ps_postoffice_role(po)), ps_postoffice_my_id(po),
           ps_postoffice_my_rank(po), ps_postoffice_van_name(po), ps_postoffice_job_id(po));
}

typedef struct {
    ps_postoffice_t *po;
    int rounds;
    int rc;
} joint_half_t;

static void *joint_server_main(void *arg)
{
    joint_half_t *h = arg;
    h->rc = run_node(h->po, h->rounds);
    return NULL;
}

/* DMLC_ROLE=joint: the server and the worker flows side by side, one
 * postoffice each; both finalize (with their barriers) concurrently. */
static int run_joint(int rounds)
{
    ps_postoffice_t *server_po;
    ps_postoffice_t *worker_po;
    ps_status_t st = ps_postoffice_start_joint(NULL, 1, &server_po, &worker_po);
    if (st != PS_OK)
        return fail("joint start", st);
    print_started(server_po);
    print_started(worker_po);
    joint_half_t server = {.po = server_po, .rounds = rounds};
    ps_thread_t thread;
    st = ps_thread_create("po-joint-server", PS_THREAD_NO_CPU, joint_server_main, &server,
                          &thread);
    if (st != PS_OK)
        return fail("joint server thread", st);
    int rc = run_node(worker_po, rounds);
    ps_thread_join(&thread, NULL);
    if (rc == 0 && server.rc == 0)
        printf("po_node: joint ok\n");
    return rc != 0 ? rc : server.rc;
}

int main(void)
{
    int rounds = env_int("PO_ROUNDS", 12);
    setvbuf(stdout, NULL, _IOLBF, 0);

    const char *dmlc_role = getenv("DMLC_ROLE");
    if (dmlc_role != NULL && strcmp(dmlc_role, "joint") == 0)
        return run_joint(rounds);

    ps_postoffice_t *po;
    ps_status_t st = ps_postoffice_start(NULL, 1, &po);
    if (st != PS_OK)
        return fail("start", st);
    ps_role_t role = ps_postoffice_role(po);
    print_started(po);

    const char *mode = getenv("PO_MODE");
    if (mode != NULL && strcmp(mode, "store") == 0) {
        int rc = run_store(po, rounds, env_int("PO_ROUND_MS", 0), env_int("PO_RECOVERY_MS", 0));
        if (rc != 0) {
            ps_postoffice_finalize(po, 0);
            return rc;
        }
        st = ps_postoffice_finalize(po, 1);
        if (st != PS_OK)
            return fail("finalize", st);
        printf("po_node: %s ok\n", ps_role_str(role));
        return 0;
    }
    return run_node(po, rounds);
}

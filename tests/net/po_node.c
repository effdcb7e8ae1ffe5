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
#include "ps/net/codec/message.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"

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

    ps_msg_t res;
    ps_msg_init(&res);
    res.meta.recver = msg->meta.sender;
    res.meta.app_id = msg->meta.app_id;
    res.meta.customer_id = msg->meta.customer_id;
    res.meta.timestamp = msg->meta.timestamp;
    res.meta.head = msg->meta.head;
    res.meta.request = false;
    ps_msg_add_data(&res, &out, PS_DATA_CHAR);
    ps_status_t st = ps_postoffice_send(po, &res);
    if (st != PS_OK)
        printf("po_node: server reply failed: %s\n", ps_status_name(st));
    ps_msg_release(&res);
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
            ps_msg_t msg;
            ps_msg_init(&msg);
            msg.meta.recver = servers[s];
            msg.meta.app_id = PO_APP;
            msg.meta.customer_id = PO_CUSTOMER;
            msg.meta.timestamp = ts;
            msg.meta.head = round;
            msg.meta.request = true;
            msg.meta.push = true;
            ps_msg_add_data(&msg, &payload, PS_DATA_CHAR);
            st = ps_postoffice_send(po, &msg);
            ps_msg_release(&msg);
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

int main(void)
{
    const char *r = getenv("PO_ROUNDS");
    int rounds = r != NULL ? atoi(r) : 12;
    setvbuf(stdout, NULL, _IOLBF, 0);

    ps_postoffice_t *po;
    ps_status_t st = ps_postoffice_start(NULL, 1, &po);
    if (st != PS_OK)
        return fail("start", st);
    ps_role_t role = ps_postoffice_role(po);
    printf("po_node: %s %d started (rank %d, van %s)\n", ps_role_str(role),
           ps_postoffice_my_id(po), ps_postoffice_my_rank(po), ps_postoffice_van_name(po));

    int rc = 0;
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

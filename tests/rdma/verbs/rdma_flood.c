/*
 * A hostile RDMA CM peer for the ibverbs van's admission test.
 *
 *   rdma_flood HOST PORT N_SILENT N_HALF HOLD_S
 *
 * Sends N_SILENT connect requests with valid ps private data (one QP
 * each) and never completes them (no RTU after the node's accept), and
 * N_HALF that announce two QPs, complete the first (rdma_establish) and
 * never ask for the second. None has a QP of its own: the node's QPs wait
 * for a peer that will never send. Then it holds them until the node has
 * closed every one (a reject or a disconnect arrives) or HOLD_S seconds
 * have passed since the last request went out.
 *
 * Prints "flood: sent N" once every request has its first answer (the
 * node accepted it or refused it at once), then one summary line:
 *   flood: made M refused R closed C open O last_close_s T
 * (made: accepted by the node; refused: rejected at once; closed: made
 * and later closed by the node; T: seconds from "sent" to the last close).
 * Exit status 0 when it ran, 2 when it could not (usage, no device).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <rdma/rdma_cma.h>

#include "ps/base/sockaddr.h"
#include "ps/rdma/verbs/verbs_wire.h"

enum { ST_RESOLVING, ST_ASKED, ST_HELD, ST_REFUSED, ST_CLOSED, ST_ERROR };

typedef struct {
    struct rdma_cm_id *id;
    int half;
    int state;
} flood_conn_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int ask(flood_conn_t *c)
{
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
        nonce = (uint64_t)(uintptr_t)c ^ (uint64_t)(now_s() * 1e9);
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.node_id = 9 + 2 * (int32_t)(nonce % 1000); /* a worker's id, as a stranger would claim */
    d.qp_index = 0;
    d.qp_count = c->half ? 2 : 1;
    d.nonce = nonce;
    uint8_t pd[PS__VB_CONN_DATA_LEN];
    size_t len = 0;
    if (ps__vb_conn_data_encode(&d, pd, sizeof(pd), &len) != PS_OK)
        return -1;
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = pd;
    cp.private_data_len = (uint8_t)len;
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    cp.qp_num = (uint32_t)(nonce >> 40) & 0xffffffu; /* no QP behind it */
    return rdma_connect(c->id, &cp);
}

static flood_conn_t *conn_of(flood_conn_t *conns, int n, struct rdma_cm_id *id)
{
    intptr_t i = (intptr_t)id->context;
    return i >= 0 && i < n && conns[i].id == id ? &conns[i] : NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s HOST PORT N_SILENT N_HALF HOLD_S\n", argv[0]);
        return 2;
    }
    int n_silent = atoi(argv[3]), n_half = atoi(argv[4]);
    double hold_s = atof(argv[5]);
    int n = n_silent + n_half;
    int answered = 0, made = 0, refused = 0, closed = 0, errors = 0;
    ps_sockaddr_t addr;
    if (n <= 0 || ps_sockaddr_resolve(argv[1], (uint16_t)atoi(argv[2]), AF_UNSPEC, &addr) != PS_OK) {
        fprintf(stderr, "rdma_flood: bad address or counts\n");
        return 2;
    }
    struct rdma_event_channel *ch = rdma_create_event_channel();
    flood_conn_t *conns = calloc((size_t)n, sizeof(*conns));
    if (ch == NULL || conns == NULL) {
        fprintf(stderr, "rdma_flood: no event channel: %s\n", strerror(errno));
        return 2;
    }
    for (int i = 0; i < n; i++) {
        conns[i].half = i >= n_silent;
        if (rdma_create_id(ch, &conns[i].id, (void *)(intptr_t)i, RDMA_PS_TCP) != 0 ||
            rdma_resolve_addr(conns[i].id, NULL, (struct sockaddr *)&addr.ss, 2000) != 0) {
            fprintf(stderr, "rdma_flood: request %d: %s\n", i, strerror(errno));
            conns[i].state = ST_ERROR;
            errors++;
        }
    }
    double sent_at = 0, last_close = 0, stop_at = 0;
    for (;;) {
        if (sent_at == 0 && answered + errors >= n) {
            sent_at = now_s();
            stop_at = sent_at + hold_s;
            printf("flood: sent %d\n", n);
            fflush(stdout);
        }
        if (sent_at != 0 && (closed >= made || now_s() >= stop_at))
            break;
        struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ch, &ev) != 0)
            continue;
        flood_conn_t *c = conn_of(conns, n, ev->id);
        enum rdma_cm_event_type type = ev->event;
        rdma_ack_cm_event(ev);
        if (c == NULL)
            continue;
        switch (type) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (rdma_resolve_route(c->id, 2000) != 0)
                c->state = ST_ERROR, errors++;
            break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED:
            if (ask(c) != 0)
                c->state = ST_ERROR, errors++;
            else
                c->state = ST_ASKED;
            break;
        case RDMA_CM_EVENT_CONNECT_RESPONSE:
            /* Accepted: the half ones complete this QP and stop there. */
            if (c->half && rdma_establish(c->id) != 0)
                fprintf(stderr, "rdma_flood: rdma_establish: %s\n", strerror(errno));
            c->state = ST_HELD;
            made++;
            answered++;
            break;
        case RDMA_CM_EVENT_ESTABLISHED:
            break;
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
            if (c->state == ST_ASKED) {
                c->state = ST_REFUSED;
                refused++;
                answered++;
            } else if (c->state == ST_HELD) {
                c->state = ST_CLOSED;
                closed++;
                last_close = now_s();
            }
            break;
        default:
            if (c->state == ST_RESOLVING) {
                c->state = ST_ERROR;
                errors++;
            }
            break;
        }
    }
    printf("flood: made %d refused %d closed %d open %d errors %d last_close_s %.1f\n", made,
           refused, closed, made - closed, errors,
           last_close > sent_at && sent_at > 0 ? last_close - sent_at : 0.0);
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        if (conns[i].id != NULL)
            rdma_destroy_id(conns[i].id);
    }
    rdma_destroy_event_channel(ch);
    free(conns);
    return 0;
}

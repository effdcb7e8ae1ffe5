/*
 * Connections of the ibverbs van: the rdmacm side, run by one CM thread.
 *
 * connect() makes an outgoing connection of `nqp` RC queue pairs and waits
 * (within PS_CONNECT_TIMEOUT_MS) until all are established. Each attempt
 * resolves the address and route of every QP, creates the QPs on the
 * device's shared CQ and SRQ, and connects with private data carrying our
 * node id, the QP's index and count and a nonce. REJECTED, ADDR_ERROR,
 * ROUTE_ERROR, UNREACHABLE and CONNECT_ERROR end the attempt; a new one
 * starts after a backoff (50 ms doubling to 1 s) while the deadline allows,
 * and the caller gets a status, never an abort. Upstream CHECK-failed on any
 * event it did not expect (byteps #365: RDMA_CM_EVENT_ADDR_ERROR); here
 * every event is logged and handled.
 *
 * The passive side groups incoming QPs by the nonce and accepts each with
 * its own private data, so the connector learns who answered.
 *
 * With a job secret (PS_JOB_SECRET) the private data carries the handshake
 * of verbs_auth.h: the connector checks the acceptor's proof when the QPs
 * are established and posts its own first on QP 0 (send_proof); the
 * acceptor's connection is up only once that proof checked out in the
 * completion thread (ps__vb_auth_gate). A request with the wrong kind of
 * private data is rejected with a refusal record, which the connector
 * reports with PS_ERR_AUTH instead of retrying.
 *
 * The thread also reads the devices' async events (port errors, fatal
 * errors fail the connections on the device) and reaps failed connections:
 * their QPs are disconnected (moved to error, so outstanding work requests
 * flush), then destroyed once the flushes are in or PS__VB_REAP_MS passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/env.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/van/addr.h"
#include "ps/net/van/conn_list.h"
#include "ps/rdma/common/memcheck.h"
#include "ps/rdma/verbs/verbs_iface.h"
#include "ps/rdma/verbs/verbs_internal.h"
#include "ps/rdma/verbs/verbs_lag.h"

#define LISTEN_BACKLOG 128
#define CM_TICK_MS 100
/* rdma_cm events handled before the timers get a turn: under a flood of
 * requests, deadlines must still close what waits (and free its place
 * under PS_MAX_PENDING_CONNS) while new requests keep coming. */
#define CM_EVENTS_PER_TURN 32
/* Private data we send at most (an accept with the job-secret handshake). */
#define PD_MAX PS__VB_AUTH_ACCEPT_LEN

static uint64_t now_ns(void)
{
    return ps_time_now_ns();
}

/* ---- bind ---- */

static int iface_has_addr(void *arg, const char *ifname)
{
    int family = *(int *)arg;
    ps_sockaddr_t a;
    return ps_if_addr(ifname, family, &a) == PS_OK;
}

/* "eth2 (mlx5_0), eth0 (rxe0)" or "none" */
static void list_rdma_netdevs(char *buf, size_t cap)
{
    ps__vb_rdma_netdev_t list[8];
    size_t n = 0;
    buf[0] = '\0';
    if (ps__vb_rdma_netdevs("/sys", list, 8, &n) != PS_OK || n == 0) {
        snprintf(buf, cap, "none");
        return;
    }
    size_t pos = 0;
    for (size_t i = 0; i < n && pos < cap; i++) {
        int w = snprintf(buf + pos, cap - pos, "%s%s (%s)", i ? ", " : "", list[i].netdev,
                         list[i].ibdev);
        if (w < 0)
            break;
        pos += (size_t)w;
    }
}

/* DMLC_INTERFACE=auto without DMLC_NODE_HOST: the address of an interface
 * that has an RDMA device, rather than the first interface found. */
static ps_status_t auto_interface(ps__vb_van_t *van, ps_node_t *node)
{
    const char *iface = ps_config_str_or(PS_CFG_DMLC_INTERFACE, "");
    if (van->base.params.is_scheduler || strcmp(iface, "auto") != 0 ||
        ps_config_is_set(PS_CFG_DMLC_NODE_HOST))
        return PS_OK;
    ps_sockaddr_t cur;
    int family = AF_INET;
    if (ps_sockaddr_parse(node->hostname, 0, &cur) == PS_OK)
        family = ps_sockaddr_family(&cur);
    /* Nearest this process's GPU (STEPMESH_GPU, else the device the process
     * uses), as StepMesh: when there is one and sysfs says where it is. */
    int gpu = ps_config_is_set(PS_CFG_STEPMESH_GPU)
                  ? (int)ps_config_int_or(PS_CFG_STEPMESH_GPU, 0)
                  : -1;
    char near[PATH_MAX], how[64];
    ps_status_t gst = ps__vb_gpu_near("/sys", gpu, ps_env_get("CUDA_VISIBLE_DEVICES"), near,
                                      sizeof(near), how, sizeof(how));
    if (gst == PS_ERR_UNSUPPORTED)
        ps_info(PS_LOG_RDMA, "DMLC_INTERFACE=auto: CUDA_VISIBLE_DEVICES names GPUs by UUID "
                "and the process does not use CUDA yet; the RDMA interface is not chosen "
                "by its distance to the GPU");
    char ifname[IF_NAMESIZE], why[256];
    ps_status_t st = ps__vb_pick_interface("/sys", gst == PS_OK ? near : NULL, iface_has_addr,
                                           &family, ifname, sizeof(ifname), why, sizeof(why));
    if (st != PS_OK) {
        ps_error(PS_LOG_RDMA, "DMLC_INTERFACE=auto: %s; set DMLC_INTERFACE to an RDMA "
                 "interface or DMLC_NODE_HOST to its address", why);
        return PS_ERR_CONFIG;
    }
    ps_sockaddr_t a;
    if ((st = ps_if_addr(ifname, family, &a)) != PS_OK)
        return PS_ERR_CONFIG;
    char host[PS_NODE_HOSTNAME_MAX];
    if ((st = ps_sockaddr_format_host(&a, host, sizeof(host))) != PS_OK)
        return st;
    if (strcmp(host, node->hostname) != 0) {
        char nearest[128] = "";
        if (gst == PS_OK)
            snprintf(nearest, sizeof(nearest), " (the nearest to this process's GPU, %s)", how);
        ps_info(PS_LOG_RDMA, "DMLC_INTERFACE=auto: using %s (%s), which has an RDMA device%s",
                ifname, host, nearest);
    }
    snprintf(node->hostname, sizeof(node->hostname), "%s", host);
    return PS_OK;
}

typedef struct {
    struct rdma_cm_id *id;
    ps_sockaddr_t addr;
} listen_try_t;

static ps_status_t listen_try(void *arg, int port, int random, char *where, size_t cap)
{
    (void)random;
    listen_try_t *t = arg;
    ps_van_listen_where(&t->addr, port, where, cap);
    if (rdma_bind_addr(t->id, (struct sockaddr *)&t->addr.ss) == 0)
        return PS_OK;
    int err = errno;
    if (err == EADDRINUSE)
        return PS_ERR_ADDRESS_IN_USE;
    char nics[256];
    list_rdma_netdevs(nics, sizeof(nics));
    ps_error(PS_LOG_RDMA, "cannot listen on %s for RDMA: rdma_bind_addr: %s; the address "
             "must belong to an RDMA-capable interface (here: %s; set DMLC_NODE_HOST or "
             "DMLC_INTERFACE)", where, strerror(err), nics);
    return err == ENODEV || err == EADDRNOTAVAIL ? PS_ERR_CONFIG : ps_status_from_errno(err);
}

ps_status_t ps__vb_cm_bind(ps_van_t *v, ps_node_t *node, int max_retry)
{
    ps__vb_van_t *van = ps__vb_of(v);
    if (node == NULL)
        return PS_ERR_INVALID_ARG;
    if (van->listen_id != NULL) {
        ps_error(PS_LOG_RDMA, "bind: this van is already listening");
        return PS_ERR_BAD_STATE;
    }
    ps_status_t st = auto_interface(van, node);
    if (st != PS_OK)
        return st;
    ps_sockaddr_t addr;
    st = ps_van_listen_addr(node, van->base.params.bind_any, PS_LOG_RDMA, &addr);
    if (st != PS_OK)
        return st;
    if (!van->base.params.bind_any && node->hostname[0] != '\0') {
        /* The node's own address: the source of our connections too. */
        van->src_addr = addr;
        van->have_src = !ps_sockaddr_is_wildcard(&addr);
    }
    struct rdma_cm_id *id = NULL;
    if (rdma_create_id(van->channel, &id, NULL, RDMA_PS_TCP) != 0) {
        ps_error(PS_LOG_RDMA, "bind: rdma_create_id: %m");
        return PS_ERR_DEVICE;
    }
    listen_try_t t = {.id = id, .addr = addr};
    char where[PS_SOCKADDR_STRLEN];
    int port = 0;
    st = ps_van_listen_on_port(node, max_retry, van->base.params.is_scheduler, PS_LOG_RDMA,
                               listen_try, &t, NULL, &port, where, sizeof(where));
    if (st != PS_OK) {
        rdma_destroy_id(id);
        return st;
    }
    addr = t.addr;
    if (rdma_listen(id, LISTEN_BACKLOG) != 0) {
        ps_error(PS_LOG_RDMA, "rdma_listen on %s: %m", where);
        rdma_destroy_id(id);
        return PS_ERR_DEVICE;
    }
    if (id->verbs != NULL) {
        /* Bound to one device's address: set it up now, so that a broken
         * device fails here and not at the first connection. */
        ps__vb_dev_t *dev = NULL;
        st = ps__vb_dev_get(van, id->verbs, &dev);
        if (st != PS_OK) {
            rdma_destroy_id(id);
            return st;
        }
    }
    van->listen_id = id;
    van->listen_addr = addr;
    ps_van_listen_bound(node, port);
    ps_info(PS_LOG_RDMA, "listening on %s (rdma_cm)", where);
    return PS_OK;
}

/* ---- connection objects ---- */

static ps__vb_conn_t *conn_new(ps__vb_van_t *van, int outgoing)
{
    ps__vb_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->van = van;
    c->serial = __atomic_add_fetch(&van->next_serial, 1, __ATOMIC_RELAXED);
    c->refs = 1; /* van->conns */
    c->outgoing = outgoing;
    c->peer_id = PS_NODE_EMPTY;
    c->expect_id = PS_NODE_EMPTY;
    c->my_id_sent = PS_NODE_EMPTY;
    c->state = PS__VB_C_CONNECTING;
    c->notify = 1;
    c->backoff_ms = PS__VB_BACKOFF_MIN_MS;
    c->auth_on = van->base.params.auth_enabled;
    pthread_mutex_init(&c->lock, NULL);
    ps__vb_gcache_init(&c->gcache, PS__VB_GCACHE_MAX);
    for (unsigned i = 0; i < PS__VB_MAX_QP; i++) {
        c->qp[i].conn = c;
        c->qp[i].index = i;
    }
    return c;
}

/* van->lock held. */
static void conn_link(ps__vb_van_t *van, ps__vb_conn_t *c)
{
    PS_VAN_CONN_LINK(van->conns, c);
}

static void conn_unlink(ps__vb_van_t *van, ps__vb_conn_t *c)
{
    PS_VAN_CONN_UNLINK(van->conns, c);
}

/* Destroys one QP and its id (CM thread, or close). */
static void qp_destroy(ps__vb_van_t *van, ps__vb_qp_t *qp)
{
    ps__vb_qp_map_remove(van, qp);
    if (qp->id != NULL) {
        if (qp->qp != NULL)
            rdma_destroy_qp(qp->id);
        rdma_destroy_id(qp->id);
    }
    qp->id = NULL;
    qp->qp = NULL;
    qp->established = 0;
}

static void conn_destroy_qps(ps__vb_conn_t *c)
{
    for (unsigned i = 0; i < PS__VB_MAX_QP; i++)
        qp_destroy(c->van, &c->qp[i]);
    c->established = 0;
}

/* A REJECTED event's status when no listener had the port: the IB CM's
 * "invalid service ID" (InfiniBand and RoCE), or -ECONNREFUSED (iWARP).
 * Any other status is the listener's own refusal. */
#define PS__VB_REJ_INVALID_SERVICE_ID 8

static int rejected_for_no_listener(int status)
{
    return status == PS__VB_REJ_INVALID_SERVICE_ID || status == -ECONNREFUSED;
}

static const char *event_str(enum rdma_cm_event_type t)
{
    const char *s = rdma_event_str(t);
    return s != NULL ? s : "unknown";
}

/* Creates qp's QP on dev (shared CQ and SRQ). */
static ps_status_t qp_create(ps__vb_conn_t *c, ps__vb_qp_t *qp, ps__vb_dev_t *dev)
{
    ps__vb_van_t *van = c->van;
    if (c->dev != NULL && c->dev != dev) {
        ps_error(PS_LOG_RDMA, "connection to %s: its queue pairs ended up on two devices (%s, "
                 "%s); bind to one RDMA interface (DMLC_NODE_HOST)", c->addr_str, c->dev->name,
                 dev->name);
        return PS_ERR_CONFIG;
    }
    if (dev->fatal)
        return PS_ERR_DEVICE;
    c->dev = dev;
    static const uint32_t inl[] = {PS__VB_INLINE_WANT, 64, 0};
    uint32_t depth = van->send_depth;
    if (dev->attr.max_qp_wr > 0 && depth > (uint32_t)dev->attr.max_qp_wr)
        depth = (uint32_t)dev->attr.max_qp_wr;
    int err = 0;
    for (size_t i = 0; i < sizeof(inl) / sizeof(inl[0]); i++) {
        struct ibv_qp_init_attr a;
        memset(&a, 0, sizeof(a));
        a.qp_context = qp;
        a.send_cq = dev->cq;
        a.recv_cq = dev->cq;
        a.srq = dev->srq;
        a.qp_type = IBV_QPT_RC;
        a.sq_sig_all = 0;
        a.cap.max_send_wr = depth;
        a.cap.max_recv_wr = 0;
        a.cap.max_send_sge = dev->max_sge;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = inl[i];
        if (rdma_create_qp(qp->id, dev->pd, &a) == 0) {
            qp->qp = qp->id->qp;
            qp->qp_num = qp->qp->qp_num;
            qp->sq_depth = a.cap.max_send_wr < depth ? a.cap.max_send_wr : depth;
            qp->sq_used = 0;
            uint32_t got = a.cap.max_inline_data;
            /* Every QP of the device asks the same, so they all get the
             * same limit; keep the smallest seen. */
            uint32_t cur = __atomic_load_n(&dev->max_inline, __ATOMIC_ACQUIRE);
            if (cur == 0 || got < cur)
                __atomic_store_n(&dev->max_inline, got, __ATOMIC_RELEASE);
            ps__vb_qp_map_add(van, qp);
            return PS_OK;
        }
        err = errno;
    }
    ps_error(PS_LOG_RDMA, "%s: rdma_create_qp (%u send WRs): %s", dev->name, depth, strerror(err));
    return PS_ERR_DEVICE;
}

/* The private data of QP `index`'s connect request or accept. With a job
 * secret: the handshake's REQUEST (the transcript's id, not my_id) or
 * ACCEPT (verbs_auth.h); without: verbs_wire.h's, as it always was. */
static void fill_conn_data(ps__vb_conn_t *c, unsigned index, int my_id, uint8_t *buf, size_t *len)
{
    uint16_t flags = c->van->lag ? PS__VB_CONN_LAG : 0;
    if (c->auth_on) {
        *len = 0;
        if (c->outgoing)
            (void)ps__vb_auth_req_encode(&c->auth, flags, index, c->nqp, buf, PD_MAX, len);
        else
            (void)ps__vb_auth_accept_encode(&c->auth, flags, index, c->nqp, buf, PD_MAX, len);
        return;
    }
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.node_id = my_id;
    d.qp_index = (uint8_t)index;
    d.qp_count = (uint8_t)c->nqp;
    d.flags = c->van->lag ? PS__VB_CONN_LAG : 0;
    d.nonce = c->nonce;
    d.max_inline = c->dev != NULL ? __atomic_load_n(&c->dev->max_inline, __ATOMIC_ACQUIRE) : 0;
    *len = 0;
    (void)ps__vb_conn_data_encode(&d, buf, PS__VB_CONN_DATA_LEN, len);
}

void ps__vb_conn_ready(ps__vb_conn_t *c)
{
    ps__vb_van_t *van = c->van;
    if (van->lag && c->nqp > 1 && c->dev != NULL) {
        char why[160];
        const ps__vb_lag_ops_t *ops = ps__vb_lag_ops(why, sizeof(why));
        static int warned;
        if (ops == NULL) {
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                ps_warn(PS_LOG_RDMA, "STEPMESH_SPLIT_QP_LAG=1 but %s; queue pairs are not "
                        "pinned to ports", why);
        } else {
            struct ibv_qp *qps[PS__VB_MAX_QP];
            for (unsigned i = 0; i < c->nqp; i++)
                qps[i] = c->qp[i].qp;
            unsigned ports = 0;
            int err = 0;
            ps_status_t st = ps__vb_lag_pin(ops, qps, c->nqp, &ports, &err);
            if (st == PS_OK) {
                c->lag_pinned = 1;
                ps_info(PS_LOG_RDMA, "connection to %s: %u queue pairs pinned over %u LAG ports",
                        c->addr_str, c->nqp, ports);
            } else if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) {
                ps_warn(PS_LOG_RDMA, "STEPMESH_SPLIT_QP_LAG=1 but %s %s; queue pairs are not "
                        "pinned to ports", c->dev->name,
                        st == PS_ERR_UNSUPPORTED ? "is not a bonded (LAG) device"
                                                 : "refused mlx5dv_modify_qp_lag_port");
                (void)err;
            }
        }
    }
    int expected = PS__VB_C_CONNECTING;
    if (!__atomic_compare_exchange_n(&c->state, &expected, PS__VB_C_READY, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    ps__vb_conn_admitted_end(c);
    int id = __atomic_load_n(&c->peer_id, __ATOMIC_ACQUIRE);
    if (c->outgoing) {
        ps_info(PS_LOG_RDMA, "connected to node %d at %s (%u QP%s on %s, %u inline bytes)",
                c->expect_id, c->addr_str, c->nqp, c->nqp == 1 ? "" : "s", c->dev->name,
                __atomic_load_n(&c->dev->max_inline, __ATOMIC_ACQUIRE));
        int my = ps__vb_my_id(van);
        if (my != PS_NODE_EMPTY && my != __atomic_load_n(&c->my_id_sent, __ATOMIC_ACQUIRE)) {
            ps__vb_ctrl_t hello;
            memset(&hello, 0, sizeof(hello));
            hello.type = PS__VB_MSG_HELLO;
            hello.node_id = my;
            if (ps__vb_send_ctrl(c, &hello) == PS_OK)
                __atomic_store_n(&c->my_id_sent, my, __ATOMIC_RELEASE);
        }
    } else if (id != PS_NODE_EMPTY) {
        if (ps__vb_peer_add_in(van, c, id) != PS_OK) {
            ps__vb_conn_fail(c, PS_ERR_NO_MEMORY, "out of memory");
            return;
        }
        ps_info(PS_LOG_RDMA, "node %d connected from %s (%u QP%s)", id, c->addr_str, c->nqp,
                c->nqp == 1 ? "" : "s");
    } else {
        ps_info(PS_LOG_RDMA, "unassigned node connected from %s (%u QP%s)", c->addr_str, c->nqp,
                c->nqp == 1 ? "" : "s");
    }
    ps_mutex_lock(&van->lock);
    ps_cond_broadcast(&van->cond);
    ps_mutex_unlock(&van->lock);
    ps__vb_conn_kick(c);
}

/* ---- outgoing attempts (CM thread) ---- */

static void attempt_failed(ps__vb_conn_t *c, ps_status_t st, const char *what)
{
    conn_destroy_qps(c);
    c->last_err = st;
    uint64_t now = now_ns();
    uint64_t retry_at = now + (uint64_t)c->backoff_ms * PS_NSEC_PER_MSEC;
    if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != PS__VB_C_CONNECTING)
        return;
    if (retry_at >= c->deadline_ns) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s, after %d attempt%s", what, c->attempts,
                 c->attempts == 1 ? "" : "s");
        ps_warn(PS_LOG_RDMA, "cannot connect to node %d at %s: %s", c->expect_id, c->addr_str,
                msg);
        ps__vb_conn_fail(c, st, msg);
        return;
    }
    if (c->attempts == 1)
        ps_info(PS_LOG_RDMA, "connecting to node %d at %s: %s; retrying until the connect "
                "deadline (PS_CONNECT_TIMEOUT_MS)", c->expect_id, c->addr_str, what);
    else
        ps_debug(PS_LOG_RDMA, "connecting to node %d at %s: %s (attempt %d)", c->expect_id,
                 c->addr_str, what, c->attempts);
    c->retry_at_ns = retry_at;
    c->backoff_ms = c->backoff_ms * 2 > PS__VB_BACKOFF_MAX_MS ? PS__VB_BACKOFF_MAX_MS
                                                              : c->backoff_ms * 2;
}

static void attempt_start(ps__vb_conn_t *c)
{
    ps__vb_van_t *van = c->van;
    c->retry_at_ns = 0;
    c->attempts++;
    c->established = 0;
    /* A new nonce per attempt: the peer may still hold half of the last
     * attempt's queue pairs under the old one. */
    if (c->auth_on) {
        /* A fresh handshake per attempt; its nonce_i groups the QPs. */
        ps__vb_auth_start(&c->auth, __atomic_load_n(&c->my_id_sent, __ATOMIC_ACQUIRE),
                          (int32_t)van->base.params.role);
        c->nonce = ps__vb_auth_group(&c->auth);
    } else {
        c->nonce = ps_van_random();
    }
    char what[160];
    for (unsigned i = 0; i < c->nqp; i++) {
        ps__vb_qp_t *qp = &c->qp[i];
        if (rdma_create_id(van->channel, &qp->id, qp, RDMA_PS_TCP) != 0) {
            snprintf(what, sizeof(what), "rdma_create_id: %s", strerror(errno));
            qp->id = NULL;
            attempt_failed(c, PS_ERR_DEVICE, what);
            return;
        }
        struct sockaddr *src = van->have_src ? (struct sockaddr *)&van->src_addr.ss : NULL;
        if (rdma_resolve_addr(qp->id, src, (struct sockaddr *)&c->addr.ss, PS__VB_RESOLVE_MS) !=
            0) {
            snprintf(what, sizeof(what), "rdma_resolve_addr: %s", strerror(errno));
            attempt_failed(c, PS_ERR_UNREACHABLE, what);
            return;
        }
    }
}

/* ---- connect / disconnect (caller threads) ---- */

ps_status_t ps__vb_cm_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    ps__vb_van_t *van = ps__vb_of(v);
    if (peer == NULL || peer->id <= 0 || peer->id >= PS_NODE_EMPTY || peer->num_ports == 0)
        return PS_ERR_INVALID_ARG;
    if (__atomic_load_n(&van->stop, __ATOMIC_ACQUIRE))
        return PS_ERR_SHUTDOWN;
    ps__vb_conn_t *c = NULL;
    pthread_rwlock_wrlock(&van->peers_lock);
    if (peer->id < van->peers_cap && van->peers[peer->id].out != NULL) {
        ps__vb_conn_t *old = van->peers[peer->id].out;
        if (__atomic_load_n(&old->state, __ATOMIC_ACQUIRE) != PS__VB_C_FAILED) {
            c = old; /* connected or connecting: wait for it */
            ps__vb_conn_ref(c);
        }
    }
    pthread_rwlock_unlock(&van->peers_lock);

    if (c == NULL) {
        ps_sockaddr_t addr;
        ps_status_t st = ps_sockaddr_resolve(peer->hostname, (uint16_t)peer->ports[0], AF_UNSPEC,
                                             &addr);
        if (st != PS_OK) {
            ps_error(PS_LOG_RDMA, "connect: cannot resolve node %d's host '%s' (%s)", peer->id,
                     peer->hostname, ps_status_str(st));
            return PS_ERR_UNREACHABLE;
        }
        c = conn_new(van, 1);
        if (c == NULL)
            return PS_ERR_NO_MEMORY;
        c->addr = addr;
        if (ps_sockaddr_format(&addr, c->addr_str, sizeof(c->addr_str)) != PS_OK &&
            snprintf(c->addr_str, sizeof(c->addr_str), "%s", peer->hostname) < 0)
            c->addr_str[0] = '\0';
        c->expect_id = peer->id;
        /* Messages arriving on it are from that node (a temporary id while
         * the scheduler turns away unregistered nodes). */
        c->peer_id = peer->id;
        c->nqp = van->nqp;
        c->nonce = ps_van_random();
        c->my_id_sent = my_id != PS_NODE_EMPTY ? my_id : ps__vb_my_id(van);
        c->deadline_ns = now_ns() + (uint64_t)van->base.params.connect_timeout_ms * PS_NSEC_PER_MSEC;
        ps__vb_reorder_init(&c->reorder, c->nqp);

        pthread_rwlock_wrlock(&van->peers_lock);
        ps__vb_peer_t *p = NULL;
        if (peer->id >= van->peers_cap) {
            int cap = van->peers_cap == 0 ? 64 : van->peers_cap;
            while (cap <= peer->id)
                cap *= 2;
            ps__vb_peer_t *np = realloc(van->peers, (size_t)cap * sizeof(*np));
            if (np != NULL) {
                memset(np + van->peers_cap, 0, (size_t)(cap - van->peers_cap) * sizeof(*np));
                van->peers = np;
                van->peers_cap = cap;
            }
        }
        if (peer->id < van->peers_cap)
            p = &van->peers[peer->id];
        if (p != NULL) {
            p->out = c;
            p->lost = PS_OK;
        }
        pthread_rwlock_unlock(&van->peers_lock);
        if (p == NULL) {
            ps__vb_conn_unref(c);
            return PS_ERR_NO_MEMORY;
        }
        ps__vb_conn_ref(c); /* ours, while we wait */
        /* Before it is on van->conns: the timers leave it to the start. */
        __atomic_store_n(&c->starting, 1, __ATOMIC_RELEASE);
        ps_mutex_lock(&van->lock);
        conn_link(van, c);
        ps_mutex_unlock(&van->lock);
        ps__vb_conn_ref(c); /* the start list's */
        ps_van_handover_link_t *to_start = &c->start_link;
        ps_van_handover_put(&van->handover, &to_start, 1, NULL, 0);
        ps__vb_cm_wake(van);
    }

    /* Wait a little past the attempt deadline: the CM thread decides. */
    ps_deadline_t dl = ps_deadline_at_ns(c->deadline_ns + 2 * PS_NSEC_PER_SEC);
    ps_mutex_lock(&van->lock);
    while (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == PS__VB_C_CONNECTING &&
           !__atomic_load_n(&van->stop, __ATOMIC_ACQUIRE)) {
        if (ps_cond_wait(&van->cond, &van->lock, dl) == PS_ERR_TIMED_OUT)
            break;
    }
    ps_mutex_unlock(&van->lock);
    int state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    ps_status_t st = PS_OK;
    if (state == PS__VB_C_CONNECTING) {
        ps__vb_conn_fail(c, PS_ERR_TIMED_OUT, "connect deadline passed");
        st = PS_ERR_TIMED_OUT;
    } else if (state == PS__VB_C_FAILED) {
        ps_status_t why = __atomic_load_n(&c->why, __ATOMIC_ACQUIRE);
        st = why != PS_OK ? why : PS_ERR_PEER_GONE;
    }
    ps__vb_conn_unref(c);
    return st;
}

void ps__vb_cm_disconnect(ps_van_t *v, int node_id)
{
    ps__vb_van_t *van = ps__vb_of(v);
    ps__vb_conn_t *list[PS__VB_MAX_IN + 1];
    int n = 0;
    pthread_rwlock_rdlock(&van->peers_lock);
    if (node_id > 0 && node_id < van->peers_cap) {
        ps__vb_peer_t *p = &van->peers[node_id];
        if (p->out != NULL)
            list[n++] = p->out;
        for (int i = 0; i < p->num_in; i++)
            list[n++] = p->in[i];
        for (int i = 0; i < n; i++)
            ps__vb_conn_ref(list[i]);
    }
    pthread_rwlock_unlock(&van->peers_lock);
    for (int i = 0; i < n; i++) {
        __atomic_store_n(&list[i]->notify, 0, __ATOMIC_RELEASE);
        ps__vb_conn_fail(list[i], PS_ERR_CANCELLED, NULL);
        ps__vb_conn_unref(list[i]);
    }
    if (n > 0)
        ps_debug(PS_LOG_RDMA, "disconnected from node %d (%d connection%s)", node_id, n,
                 n == 1 ? "" : "s");
}

/* ---- events (CM thread) ---- */

typedef struct {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id *id;
    struct rdma_cm_id *listen_id;
    uint8_t pdata[UINT8_MAX + 1]; /* an accept has up to 196 bytes, a reject 148 */
    size_t pdata_len;
} cm_event_t;

static ps__vb_conn_t *incoming_by_nonce(ps__vb_van_t *van, uint64_t nonce, int node_id)
{
    ps__vb_conn_t *found = NULL;
    ps_mutex_lock(&van->lock);
    for (ps__vb_conn_t *c = van->conns; c != NULL; c = c->next) {
        if (!c->outgoing && c->nonce == nonce &&
            __atomic_load_n(&c->peer_id, __ATOMIC_ACQUIRE) == node_id &&
            __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == PS__VB_C_CONNECTING) {
            found = c;
            break;
        }
    }
    ps_mutex_unlock(&van->lock);
    return found;
}

/* Rejects a request with a REFUSAL (verbs_auth.h): the initiator reports
 * "refused us" with PS_ERR_AUTH instead of retrying. One log line per
 * connection (its QPs share `group`). */
static void refuse_request(ps__vb_van_t *van, struct rdma_cm_id *id, const char *from,
                           uint64_t group, const char *why)
{
    int seen = 0;
    for (unsigned i = 0; i < sizeof(van->refused) / sizeof(van->refused[0]); i++)
        seen |= van->refused[i] == group;
    if (!seen) {
        van->refused[van->refused_next++ % (sizeof(van->refused) / sizeof(van->refused[0]))] =
            group;
        ps_error(PS_LOG_RDMA, "refused connection from %s: %s", from, why);
    }
    uint8_t pd[PS__VB_AUTH_REFUSAL_LEN];
    size_t len = 0;
    (void)ps__vb_auth_refusal_encode(pd, sizeof(pd), &len);
    rdma_reject(id, pd, (uint8_t)len);
    rdma_destroy_id(id);
}

void ps__vb_conn_refuse(ps__vb_conn_t *c, const char *why)
{
    (void)ps__vb_auth_fail(&c->auth);
    if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == PS__VB_C_FAILED)
        return;
    ps_error(PS_LOG_RDMA, "refused connection from %s: %s", c->addr_str, why);
    __atomic_store_n(&c->notify, 0, __ATOMIC_RELEASE);
    ps__vb_conn_fail(c, PS_ERR_AUTH, NULL);
}

static void on_connect_request(ps__vb_van_t *van, const cm_event_t *ev)
{
    struct rdma_cm_id *id = ev->id;
    char from[PS_SOCKADDR_STRLEN] = "?";
    ps_sockaddr_t peer_addr;
    memset(&peer_addr, 0, sizeof(peer_addr));
    struct sockaddr *pa = rdma_get_peer_addr(id);
    if (pa != NULL && ps_sockaddr_from_sa(pa, pa->sa_family == AF_INET6
                                                  ? sizeof(struct sockaddr_in6)
                                                  : sizeof(struct sockaddr_in),
                                          &peer_addr) == PS_OK)
        ps_sockaddr_format(&peer_addr, from, sizeof(from));
    ps__vb_conn_data_t d;
    ps__vb_auth_req_t req;
    int has_auth = ps__vb_pd_kind(ev->pdata, ev->pdata_len) == PS__VB_PD_REQUEST;
    ps_status_t dst;
    if (has_auth) {
        dst = ps__vb_auth_req_decode(ev->pdata, ev->pdata_len, &req);
        memset(&d, 0, sizeof(d));
        d.node_id = req.id_i;
        d.qp_index = req.qp_index;
        d.qp_count = req.qp_count;
        d.flags = req.flags;
        d.nonce = req.group;
    } else {
        dst = ps__vb_conn_data_decode(ev->pdata, ev->pdata_len, &d);
    }
    if (dst != PS_OK) {
        ps_warn(PS_LOG_RDMA, "connection request from %s without valid ps private data "
                "(another program?); rejected", from);
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    if (__atomic_load_n(&van->stop, __ATOMIC_ACQUIRE)) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    if (has_auth != van->base.params.auth_enabled) {
        refuse_request(van, id, from, d.nonce,
                       has_auth ? "it wants a job-secret handshake, but this node has no "
                                  "PS_JOB_SECRET"
                                : "it does not hold the job secret");
        return;
    }
    ps__vb_conn_t *c = incoming_by_nonce(van, d.nonce, d.node_id);
    if (c != NULL && has_auth && !ps__vb_auth_same_request(&c->auth, &req))
        c = NULL; /* another handshake under the same group: its own connection */
    int created = 0;
    if (c == NULL) {
        /* A new connection: it waits for its handshake under admission's
         * cap and deadline (the first QP's request is its accept). */
        c = ps_van_admission_admit(&van->admission) ? conn_new(van, 0) : NULL;
        if (c == NULL) {
            rdma_reject(id, NULL, 0);
            rdma_destroy_id(id);
            return;
        }
        c->admitted = 1;
        created = 1;
        c->nonce = d.nonce;
        c->peer_id = d.node_id;
        c->nqp = d.qp_count;
        c->addr = peer_addr;
        snprintf(c->addr_str, sizeof(c->addr_str), "%s", from);
        c->deadline_ns = ps_van_admission_deadline(&van->admission);
        ps__vb_reorder_init(&c->reorder, c->nqp);
        if (has_auth) {
            /* Before any of its QPs exists: the poller sees the transcript
             * only through a QP (qp_create, the map's lock). */
            ps__vb_auth_respond(&c->auth, &van->base.params.auth_key, &req, ps__vb_my_id(van),
                                (int32_t)van->base.params.role);
        }
    }
    ps__vb_qp_t *qp = &c->qp[d.qp_index];
    const char *what = NULL;
    ps__vb_dev_t *dev = NULL;
    if (d.qp_count != c->nqp || qp->id != NULL) {
        what = "inconsistent queue pair index or count";
    } else if (ps__vb_dev_get(van, id->verbs, &dev) != PS_OK) {
        what = "no usable device context";
    } else {
        qp->id = id;
        id->context = qp;
        if (qp_create(c, qp, dev) != PS_OK) {
            qp->id = NULL;
            what = "cannot create its queue pair";
        }
    }
    if (what == NULL) {
        uint8_t pd[PD_MAX];
        size_t len = 0;
        fill_conn_data(c, d.qp_index, ps__vb_my_id(van), pd, &len);
        struct rdma_conn_param cp;
        memset(&cp, 0, sizeof(cp));
        cp.private_data = pd;
        cp.private_data_len = (uint8_t)len;
        cp.rnr_retry_count = 7; /* an empty SRQ is waited out, not fatal */
        if (rdma_accept(id, &cp) != 0) {
            ps_warn(PS_LOG_RDMA, "rdma_accept from %s: %m", from);
            qp_destroy(van, qp);
            what = "rdma_accept failed";
            id = NULL; /* destroyed with the QP */
        }
    }
    if (what != NULL) {
        if (id != NULL) {
            ps_warn(PS_LOG_RDMA, "connection request from node %d at %s: %s; rejected",
                    d.node_id, from, what);
            if (id->qp != NULL)
                rdma_destroy_qp(id);
            rdma_reject(id, NULL, 0);
            rdma_destroy_id(id);
        }
        if (created) {
            ps__vb_conn_admitted_end(c);
            ps__vb_conn_unref(c);
        } else
            ps__vb_conn_fail(c, PS_ERR_PROTOCOL, what);
        return;
    }
    if (created) {
        ps_mutex_lock(&van->lock);
        conn_link(van, c);
        ps_mutex_unlock(&van->lock);
    }
    ps_debug(PS_LOG_RDMA, "accepted queue pair %u of %u from node %d at %s", d.qp_index + 1u,
             d.qp_count, d.node_id, from);
}

/* Every QP of an outgoing connection with a job secret is established:
 * our proof goes first on QP 0; the connection is up if the responder's
 * checked out, else it waits for the responder's verdict. */
static void send_proof(ps__vb_conn_t *c)
{
    ps__vb_van_t *van = c->van;
    uint8_t msg[PS__VB_AUTH_PROOF_LEN];
    int good = 0;
    ps_status_t st = ps__vb_auth_proof_msg(&c->auth, &van->base.params.auth_key, msg, &good);
    if (st == PS_OK)
        st = ps__vb_send_first(c, msg, sizeof(msg));
    if (st != PS_OK) {
        ps__vb_conn_fail(c, st, "cannot send the job-secret proof");
        return;
    }
    if (!good) {
        ps_debug(PS_LOG_RDMA, "node %d at %s: its job-secret proof is wrong; waiting for its "
                 "verdict on ours", c->expect_id, c->addr_str);
        return;
    }
    ps_debug(PS_LOG_RDMA, "node %d at %s proved the job secret", c->expect_id, c->addr_str);
    ps__vb_conn_ready(c);
}

static void on_established(ps__vb_qp_t *qp, const cm_event_t *ev)
{
    ps__vb_conn_t *c = qp->conn;
    if (c->outgoing && c->auth_on) {
        const char *why = "";
        ps_status_t st = ps__vb_auth_on_accept(&c->auth, &c->van->base.params.auth_key, c->expect_id,
                                               qp->index, c->nqp, ev->pdata, ev->pdata_len,
                                               &why);
        if (st != PS_OK) {
            ps_error(PS_LOG_RDMA, "node %d at %s: %s; closing", c->expect_id, c->addr_str, why);
            (void)ps__vb_auth_fail(&c->auth);
            conn_destroy_qps(c);
            ps__vb_conn_fail(c, st == PS_ERR_AUTH ? PS_ERR_AUTH : PS_ERR_PROTOCOL, NULL);
            return;
        }
    } else if (c->outgoing) {
        ps__vb_conn_data_t d;
        if (ps__vb_conn_data_decode(ev->pdata, ev->pdata_len, &d) != PS_OK) {
            attempt_failed(c, PS_ERR_PROTOCOL, "the peer answered without ps private data");
            return;
        }
        if (d.node_id != PS_NODE_EMPTY && d.node_id != c->expect_id) {
            char what[128];
            snprintf(what, sizeof(what), "the node listening there is node %d", d.node_id);
            conn_destroy_qps(c);
            ps__vb_conn_fail(c, PS_ERR_PROTOCOL, what);
            return;
        }
    }
    if (!qp->established) {
        qp->established = 1;
        c->established++;
    }
    if (c->established != c->nqp)
        return;
    if (c->auth_on && c->outgoing)
        send_proof(c);
    else if (!c->auth_on || ps__vb_auth_gate(&c->auth, PS__VB_AUTH_GATE_UP))
        ps__vb_conn_ready(c); /* a responder with a secret: once the proof is in, too */
}

/* The responder turned our connection away for the job secret. */
static void refused_us(ps__vb_conn_t *c)
{
    ps_error(PS_LOG_RDMA, "node %d at %s refused us: wrong or missing PS_JOB_SECRET",
             c->expect_id, c->addr_str);
    (void)ps__vb_auth_fail(&c->auth);
    conn_destroy_qps(c);
    ps__vb_conn_fail(c, PS_ERR_AUTH, NULL);
}

static void on_conn_event(ps__vb_van_t *van, ps__vb_qp_t *qp, const cm_event_t *ev)
{
    ps__vb_conn_t *c = qp->conn;
    int state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    char what[160];
    switch (ev->type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (state != PS__VB_C_CONNECTING)
            return;
        if (rdma_resolve_route(qp->id, PS__VB_RESOLVE_MS) != 0) {
            snprintf(what, sizeof(what), "rdma_resolve_route: %s", strerror(errno));
            attempt_failed(c, PS_ERR_UNREACHABLE, what);
        }
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (state != PS__VB_C_CONNECTING)
            return;
        ps__vb_dev_t *dev = NULL;
        ps_status_t st = ps__vb_dev_get(van, qp->id->verbs, &dev);
        if (st == PS_OK)
            st = qp_create(c, qp, dev);
        if (st != PS_OK) {
            /* A device problem will not go away by retrying. */
            conn_destroy_qps(c);
            ps__vb_conn_fail(c, st, "cannot set up the device or its queue pair");
            return;
        }
        uint8_t pd[PD_MAX];
        size_t len = 0;
        fill_conn_data(c, qp->index, __atomic_load_n(&c->my_id_sent, __ATOMIC_ACQUIRE), pd, &len);
        struct rdma_conn_param cp;
        memset(&cp, 0, sizeof(cp));
        cp.private_data = pd;
        cp.private_data_len = (uint8_t)len;
        cp.retry_count = 7;
        cp.rnr_retry_count = 7;
        if (rdma_connect(qp->id, &cp) != 0) {
            snprintf(what, sizeof(what), "rdma_connect: %s", strerror(errno));
            attempt_failed(c, PS_ERR_UNREACHABLE, what);
        }
        return;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
        if (state == PS__VB_C_CONNECTING)
            on_established(qp, ev);
        return;
    case RDMA_CM_EVENT_REJECTED:
        if (state == PS__VB_C_CONNECTING && c->outgoing &&
            ps__vb_pd_kind(ev->pdata, ev->pdata_len) == PS__VB_PD_REFUSAL) {
            /* Understood with or without a secret of our own; no retry. */
            refused_us(c);
            return;
        }
        /* fall through */
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    {
        int nobody = ev->type == RDMA_CM_EVENT_REJECTED && rejected_for_no_listener(ev->status);
        snprintf(what, sizeof(what), "%s (status %d)%s", event_str(ev->type), ev->status,
                 nobody ? ": nobody listening there yet"
                 : ev->type == RDMA_CM_EVENT_REJECTED ? ": refused by the peer"
                 : ev->type == RDMA_CM_EVENT_ADDR_ERROR
                     ? ": the address is not reachable through an RDMA device"
                     : "");
        if (state == PS__VB_C_CONNECTING && c->outgoing) {
            /* Nobody listening is unreachable, as a refused TCP connect. */
            attempt_failed(c, ev->type == RDMA_CM_EVENT_REJECTED && !nobody ? PS_ERR_PEER_REFUSED
                                                                            : PS_ERR_UNREACHABLE,
                           what);
        } else {
            ps__vb_conn_fail(c, state == PS__VB_C_READY ? PS_ERR_LINK_FAILED : PS_ERR_UNREACHABLE,
                             what);
        }
        return;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
        if (state == PS__VB_C_CONNECTING && c->outgoing && c->auth_on &&
            ps__vb_auth_state(&c->auth) == PS__VB_AUTH_WAIT_VERDICT) {
            refused_us(c); /* the verdict on our proof */
            return;
        }
        if (state == PS__VB_C_CONNECTING && c->outgoing)
            attempt_failed(c, PS_ERR_PEER_GONE, "disconnected while connecting");
        else
            ps__vb_conn_fail(c, PS_ERR_PEER_GONE, "disconnected by the peer");
        return;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        ps_debug(PS_LOG_RDMA, "timewait exit on a queue pair of %s", c->addr_str);
        return;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        ps_error(PS_LOG_RDMA, "the RDMA device of the connection with %s was removed",
                 c->addr_str);
        ps__vb_conn_fail(c, PS_ERR_DEVICE, "device removed");
        return;
    case RDMA_CM_EVENT_ADDR_CHANGE:
        ps_warn(PS_LOG_RDMA, "the address of the connection with %s changed (bond failover?)",
                c->addr_str);
        return;
    default:
        ps_warn(PS_LOG_RDMA, "unexpected rdma_cm event %s (status %d) on the connection with %s; "
                "ignored", event_str(ev->type), ev->status, c->addr_str);
        return;
    }
}

static void drain_cm_events(ps__vb_van_t *van)
{
    for (int turn = 0; turn < CM_EVENTS_PER_TURN; turn++) {
        struct rdma_cm_event *e = NULL;
        if (rdma_get_cm_event(van->channel, &e) != 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                ps_warn_ratelimited(PS_LOG_RDMA, "rdma_get_cm_event: %m");
            return;
        }
        /* Copy what is needed and ack at once: an id may only be destroyed
         * after its events are acked, and handlers destroy ids. */
        cm_event_t ev;
        memset(&ev, 0, sizeof(ev));
        ev.type = e->event;
        ev.status = e->status;
        ev.id = e->id;
        ev.listen_id = e->listen_id;
        /* The kernel wrote the event through the rdma_cm command ABI,
         * which valgrind cannot follow. */
        PS_RDMA_DEVICE_WROTE(e, sizeof(*e));
        if (e->param.conn.private_data != NULL) {
            /* A u8 length: always fits. */
            ev.pdata_len = e->param.conn.private_data_len;
            PS_RDMA_DEVICE_WROTE(e->param.conn.private_data, ev.pdata_len);
            memcpy(ev.pdata, e->param.conn.private_data, ev.pdata_len);
        }
        rdma_ack_cm_event(e);

        if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            on_connect_request(van, &ev);
            continue;
        }
        ps__vb_qp_t *qp = ev.id != NULL ? ev.id->context : NULL;
        if (qp == NULL) {
            /* The listener: nothing but requests is expected on it. */
            ps_warn(PS_LOG_RDMA, "rdma_cm event %s (status %d) on the listening id; ignored",
                    event_str(ev.type), ev.status);
            continue;
        }
        if (qp->id != ev.id) {
            ps_debug(PS_LOG_RDMA, "rdma_cm event %s for a queue pair already gone",
                     event_str(ev.type));
            continue;
        }
        on_conn_event(van, qp, &ev);
    }
}

/* ---- device async events ---- */

static void drain_async(ps__vb_van_t *van, ps__vb_dev_t *dev)
{
    for (;;) {
        struct ibv_async_event ae;
        if (ibv_get_async_event(dev->ctx, &ae) != 0)
            return;
        switch (ae.event_type) {
        case IBV_EVENT_DEVICE_FATAL:
            ps_error(PS_LOG_RDMA, "%s: fatal device error; every connection on it fails",
                     dev->name);
            dev->fatal = 1;
            break;
        case IBV_EVENT_PORT_ERR:
            ps_warn(PS_LOG_RDMA, "%s port %d went down", dev->name, ae.element.port_num);
            break;
        case IBV_EVENT_PORT_ACTIVE:
            ps_info(PS_LOG_RDMA, "%s port %d is active", dev->name, ae.element.port_num);
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: {
            ps__vb_qp_t *qp = ae.element.qp != NULL ? ae.element.qp->qp_context : NULL;
            if (qp != NULL) {
                ps__vb_conn_ref(qp->conn);
                ps__vb_conn_fail(qp->conn, PS_ERR_LINK_FAILED, ibv_event_type_str(ae.event_type));
                ps__vb_conn_unref(qp->conn);
            }
            break;
        }
        case IBV_EVENT_SRQ_ERR:
            ps_error(PS_LOG_RDMA, "%s: shared receive queue error", dev->name);
            dev->fatal = 1;
            break;
        default:
            ps_debug(PS_LOG_RDMA, "%s: async event %s", dev->name,
                     ibv_event_type_str(ae.event_type));
            break;
        }
        ibv_ack_async_event(&ae);
    }
}

/* ---- the thread ---- */

/* A connection connect() made: its first attempt. */
static void start_one(ps__vb_conn_t *c)
{
    __atomic_store_n(&c->starting, 0, __ATOMIC_RELEASE);
    if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == PS__VB_C_CONNECTING)
        attempt_start(c);
    ps__vb_conn_unref(c); /* the start list's */
}

/* A failed connection: its QPs go to error, what is posted flushes back
 * to us, and the timers reap it once drained. */
static void close_one(ps__vb_conn_t *c)
{
    for (unsigned i = 0; i < PS__VB_MAX_QP; i++) {
        if (c->qp[i].id != NULL && c->qp[i].qp != NULL)
            (void)rdma_disconnect(c->qp[i].id);
    }
    if (!c->on_dead) {
        c->on_dead = 1;
        c->dead_since_ns = now_ns();
    }
    __atomic_store_n(&c->closing, 0, __ATOMIC_RELEASE);
    ps__vb_conn_unref(c); /* the close list's */
}

static void take_handover(ps__vb_van_t *van)
{
    ps_van_handover_link_t *to_start, *to_close, *l;
    if (!ps_van_handover_take(&van->handover, &to_start, &to_close))
        return;
    to_start = ps_van_handover_reverse(to_start);
    while ((l = ps_van_handover_pop(&to_start)) != NULL)
        start_one(PS_VAN_HANDOVER_OF(l, ps__vb_conn_t, start_link));
    while ((l = ps_van_handover_pop(&to_close)) != NULL)
        close_one(PS_VAN_HANDOVER_OF(l, ps__vb_conn_t, close_link));
}

static int conn_drained(ps__vb_conn_t *c)
{
    int busy = 0;
    pthread_mutex_lock(&c->lock);
    for (unsigned i = 0; i < PS__VB_MAX_QP; i++)
        busy |= c->qp[i].sq_used != 0;
    pthread_mutex_unlock(&c->lock);
    return !busy;
}

/* Attempt retries, connect deadlines, reaping. Returns ms to the next
 * timer (at most CM_TICK_MS; 0 when a batch was full and more wait). */
static int run_timers(ps__vb_van_t *van)
{
    enum { MAX_BATCH = 64 };
    ps__vb_conn_t *retry[MAX_BATCH], *late[MAX_BATCH], *reap[MAX_BATCH];
    int nr = 0, nl = 0, np = 0;
    uint64_t now = now_ns();
    uint64_t next = now + CM_TICK_MS * PS_NSEC_PER_MSEC;
    ps_mutex_lock(&van->lock);
    for (ps__vb_conn_t *c = van->conns; c != NULL; c = c->next) {
        int state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
        if (state == PS__VB_C_CONNECTING && !__atomic_load_n(&c->starting, __ATOMIC_ACQUIRE)) {
            if (now >= c->deadline_ns) {
                if (nl < MAX_BATCH) {
                    ps__vb_conn_ref(c);
                    late[nl++] = c;
                }
            } else if (c->outgoing && c->retry_at_ns != 0 && now >= c->retry_at_ns) {
                if (nr < MAX_BATCH) {
                    ps__vb_conn_ref(c);
                    retry[nr++] = c;
                }
            } else if (c->retry_at_ns != 0 && c->retry_at_ns < next) {
                next = c->retry_at_ns;
            }
        } else if (state == PS__VB_C_FAILED && c->on_dead &&
                   !__atomic_load_n(&c->closing, __ATOMIC_ACQUIRE) && np < MAX_BATCH) {
            if (now - c->dead_since_ns >= PS__VB_REAP_MS * PS_NSEC_PER_MSEC || conn_drained(c)) {
                conn_unlink(van, c);
                reap[np++] = c; /* takes the list's reference */
            }
        }
    }
    ps_mutex_unlock(&van->lock);
    for (int i = 0; i < nr; i++) {
        if (__atomic_load_n(&retry[i]->state, __ATOMIC_ACQUIRE) == PS__VB_C_CONNECTING)
            attempt_start(retry[i]);
        ps__vb_conn_unref(retry[i]);
    }
    for (int i = 0; i < nl; i++) {
        ps__vb_conn_t *c = late[i];
        int auth = c->auth_on ? ps__vb_auth_fail(&c->auth) : PS__VB_AUTH_OFF;
        if (!c->outgoing) {
            /* Silent or slow before its handshake ended: admission's
             * deadline (a debug line: a flood of them is no news). */
            char who[PS_SOCKADDR_STRLEN + 48];
            snprintf(who, sizeof(who), "connection from %s%s", c->addr_str,
                     auth == PS__VB_AUTH_WAIT_PROOF ? " (no job-secret proof)" : "");
            ps_van_admission_expired(&van->admission, who);
            conn_destroy_qps(c);
            ps__vb_conn_fail(c, auth == PS__VB_AUTH_WAIT_PROOF ? PS_ERR_AUTH : PS_ERR_PROTOCOL,
                             NULL);
            ps__vb_conn_unref(c);
            continue;
        }
        if (auth == PS__VB_AUTH_WAIT_PROOF || auth == PS__VB_AUTH_WAIT_VERDICT) {
            /* Connected, but the handshake did not finish in time. */
            ps_error(PS_LOG_RDMA, "node %d at %s did not answer our job-secret proof within "
                     "%d ms (PS_CONNECT_TIMEOUT_MS); does it use the same PS_JOB_SECRET?",
                     c->expect_id, c->addr_str, van->base.params.connect_timeout_ms);
            conn_destroy_qps(c);
            ps__vb_conn_fail(c, PS_ERR_AUTH, NULL);
            ps__vb_conn_unref(c);
            continue;
        }
        char what[200];
        snprintf(what, sizeof(what), "no connection within %d ms (PS_CONNECT_TIMEOUT_MS)%s%s",
                 van->base.params.connect_timeout_ms, c->last_err != PS_OK ? "; last error: " : "",
                 c->last_err != PS_OK ? ps_status_str(c->last_err) : "");
        conn_destroy_qps(c);
        /* An outgoing one says what its attempts met (nobody listening,
         * refused) when they met anything: the deadline may pass while the
         * last attempt is still in flight. */
        ps_status_t why = c->last_err != PS_OK ? c->last_err : PS_ERR_TIMED_OUT;
        ps__vb_conn_fail(c, why, what);
        ps__vb_conn_unref(c);
    }
    for (int i = 0; i < np; i++) {
        conn_destroy_qps(reap[i]);
        ps__vb_conn_unref(reap[i]);
    }
    if (nr == MAX_BATCH || nl == MAX_BATCH || np == MAX_BATCH)
        return 0;
    uint64_t after = now_ns();
    return next > after ? (int)((next - after) / PS_NSEC_PER_MSEC) + 1 : 0;
}

static void *cm_main(void *arg)
{
    ps__vb_van_t *van = arg;
    while (!__atomic_load_n(&van->stop, __ATOMIC_ACQUIRE)) {
        take_handover(van);
        int timeout = run_timers(van);
        struct pollfd fds[2 + PS__VB_MAX_DEVS];
        int nfds = 0;
        fds[nfds].fd = van->channel->fd;
        fds[nfds++].events = POLLIN;
        fds[nfds].fd = van->cm_wakefd;
        fds[nfds++].events = POLLIN;
        int ndevs = __atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE);
        for (int i = 0; i < ndevs; i++) {
            fds[nfds].fd = van->devs[i]->ctx->async_fd;
            fds[nfds++].events = POLLIN;
        }
        int n = poll(fds, (nfds_t)nfds, timeout);
        if (n < 0) {
            if (errno != EINTR) {
                ps_error(PS_LOG_RDMA, "poll in the CM thread: %m");
                ps_sleep_ms(10);
            }
            continue;
        }
        if (fds[1].revents & POLLIN) {
            uint64_t v;
            while (read(van->cm_wakefd, &v, sizeof(v)) > 0) {
            }
        }
        if (fds[0].revents & POLLIN)
            drain_cm_events(van);
        for (int i = 0; i < ndevs; i++) {
            if (fds[2 + i].revents & POLLIN)
                drain_async(van, van->devs[i]);
            if (van->devs[i]->fatal) {
                /* Fail what is on the dead device (once each). */
                ps__vb_conn_t *list[64];
                int k = 0;
                ps_mutex_lock(&van->lock);
                for (ps__vb_conn_t *c = van->conns; c != NULL && k < 64; c = c->next) {
                    if (c->dev == van->devs[i] &&
                        __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != PS__VB_C_FAILED) {
                        ps__vb_conn_ref(c);
                        list[k++] = c;
                    }
                }
                ps_mutex_unlock(&van->lock);
                for (int j = 0; j < k; j++) {
                    ps__vb_conn_fail(list[j], PS_ERR_DEVICE, "the RDMA device failed");
                    ps__vb_conn_unref(list[j]);
                }
            }
        }
    }
    return NULL;
}

ps_status_t ps__vb_cm_start(ps__vb_van_t *van)
{
    ps_status_t st = ps_thread_create("ps-rdma-cm", PS_THREAD_NO_CPU, cm_main, van,
                                      &van->cm_thread);
    if (st != PS_OK) {
        ps_error(PS_LOG_RDMA, "cannot start the rdma_cm thread (%s)", ps_status_str(st));
        return st;
    }
    van->cm_started = 1;
    return PS_OK;
}

void ps__vb_cm_stop(ps__vb_van_t *van)
{
    if (!van->cm_started)
        return;
    __atomic_store_n(&van->stop, 1, __ATOMIC_RELEASE);
    ps__vb_cm_wake(van);
    ps_mutex_lock(&van->lock);
    ps_cond_broadcast(&van->cond);
    ps_mutex_unlock(&van->lock);
    ps_thread_join(&van->cm_thread, NULL);
    van->cm_started = 0;
}

void ps__vb_cm_destroy_all(ps__vb_van_t *van)
{
    /* The hand-over lists hold references. */
    ps_van_handover_link_t *to_start, *to_close, *l;
    (void)ps_van_handover_take(&van->handover, &to_start, &to_close);
    while ((l = ps_van_handover_pop(&to_start)) != NULL)
        ps__vb_conn_unref(PS_VAN_HANDOVER_OF(l, ps__vb_conn_t, start_link));
    while ((l = ps_van_handover_pop(&to_close)) != NULL)
        ps__vb_conn_unref(PS_VAN_HANDOVER_OF(l, ps__vb_conn_t, close_link));
    while (van->conns != NULL) {
        ps__vb_conn_t *c = van->conns;
        conn_unlink(van, c);
        __atomic_store_n(&c->state, PS__VB_C_FAILED, __ATOMIC_RELEASE);
        pthread_mutex_lock(&c->lock);
        ps__vb_tx_t *q = ps__vb_conn_take_queues(c);
        pthread_mutex_unlock(&c->lock);
        ps__vb_tx_release_list(q);
        conn_destroy_qps(c);
        ps__vb_conn_unref(c);
    }
    if (van->listen_id != NULL) {
        rdma_destroy_id(van->listen_id);
        van->listen_id = NULL;
    }
}

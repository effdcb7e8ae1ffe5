/*
 * The composed van "ipc": peers on this host through shared memory, every
 * other peer through a network van, in one job (BytePS's
 * BYTEPS_ENABLE_IPC=1).
 *
 * It owns two vans: the network van chosen the usual way
 * (ps__van_select_network_name(): DMLC_ENABLE_UCX, DMLC_ENABLE_RDMA,
 * DMLC_PS_VAN_TYPE; "ipc" or "shm" there mean tcp) — tcp, fabric, ucx or
 * ibverbs — and an shm van.
 *   - bind: the network van binds (and picks the port); the shm van then
 *     listens under the same (host, port), so the node table — one address
 *     per node — names both. If that fails, everyone reaches this node
 *     through the network.
 *   - connect(peer): the shm van tries the peer's rendezvous socket; if
 *     somebody listens there, the peer shares this kernel, network
 *     namespace and job, and the shm channel is its route. Otherwise the
 *     network van connects. The route of a node is fixed until the next
 *     connect() or disconnect() for it, so its messages stay in order.
 *   - send: by route; a node we never connected to is answered through
 *     the van it came in by (the shm van knows whether it has a channel).
 *   - peer_failed: a node's messages may come through both vans (each
 *     side routes by its own connect()), and each van delivers what a
 *     dead peer sent before it reports the peer; so the failure is
 *     reported once, when every van that carried the node has reported it
 *     — never ahead of data still on its way through the other van.
 * The callbacks of both vans go straight to the postoffice's; the
 * capabilities are what both offer.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ps/base/log.h"
#include "ps/net/shm/shm_job.h"
#include "ps/net/shm/shm_van.h"
#include "ps/net/van/base.h"
#include "ps/net/van/progress_loop.h"
#include "ps/net/van/van.h"

/* Routes; also bits of which vans carried a node. */
enum { ROUTE_NONE = 0, ROUTE_NET = 1, ROUTE_SHM = 2 };

typedef struct multi_van multi_van_t;

/* What a sub-van's callbacks point at. */
typedef struct {
    multi_van_t *mv;
    int route; /* ROUTE_NET or ROUTE_SHM */
} sub_arg_t;

struct multi_van {
    ps_van_base_t base; /* first: handle, params, callbacks */
    /* close() stops the shm van (drained, its thread gone, its channels
     * closed: sends into it then fail cleanly), closes the network van
     * (whose thread may send through the shm van until then), and only
     * then frees the shm van. Sends take the read side of close_lock and
     * skip a freed van. */
    pthread_rwlock_t close_lock;
    int shm_closed;
    const ps_van_component_t *net_comp;
    ps_van_t *net;
    ps_van_t *shm;
    int shm_listening;
    sub_arg_t net_arg, shm_arg;
    uint8_t route[PS_NODE_EMPTY];    /* atomic bytes */
    uint8_t carried[PS_NODE_EMPTY];  /* atomic bytes: ROUTE_* bits of vans that carried it */
    uint8_t failed[PS_NODE_EMPTY];   /* atomic bytes: ROUTE_* bits of vans that lost it */
    uint8_t reported[PS_NODE_EMPTY]; /* atomic bytes: peer_failed already said */
};

static ps_status_t cb_recv_buffer(void *arg, const ps_meta_t *meta, unsigned index, uint64_t len,
                                  ps_slice_t *slice_p)
{
    multi_van_t *mv = ((sub_arg_t *)arg)->mv;
    if (mv->base.cb.recv_buffer == NULL) {
        return PS_ERR_NOT_FOUND;
    }
    return mv->base.cb.recv_buffer(mv->base.cb.arg, meta, index, len, slice_p);
}

static void cb_deliver(void *arg, ps_msg_t *msg)
{
    sub_arg_t *sub = arg;
    multi_van_t *mv = sub->mv;
    int id = msg->meta.sender;
    if (id > 0 && id < PS_NODE_EMPTY &&
        (__atomic_load_n(&mv->carried[id], __ATOMIC_RELAXED) & sub->route) == 0) {
        __atomic_or_fetch(&mv->carried[id], (uint8_t)sub->route, __ATOMIC_ACQ_REL);
    }
    if (mv->base.cb.deliver != NULL) {
        mv->base.cb.deliver(mv->base.cb.arg, msg);
    } else {
        ps_msg_release(msg);
    }
}

static void cb_peer_failed(void *arg, int node_id, ps_status_t why)
{
    sub_arg_t *sub = arg;
    multi_van_t *mv = sub->mv;
    if (node_id > 0 && node_id < PS_NODE_EMPTY) {
        uint8_t lost = __atomic_or_fetch(&mv->failed[node_id], (uint8_t)sub->route,
                                         __ATOMIC_ACQ_REL);
        uint8_t carried = __atomic_load_n(&mv->carried[node_id], __ATOMIC_ACQUIRE);
        if ((carried & ~lost) != 0) {
            /* The other van still carries it: its last messages may be on
             * their way there, and that van reports it when it goes. */
            ps_debug(PS_LOG_SHM, "node %d lost by %s; waiting for the other van", node_id,
                     sub->route == ROUTE_SHM ? "shm" : "the network van");
            return;
        }
        if (__atomic_exchange_n(&mv->reported[node_id], 1, __ATOMIC_ACQ_REL) != 0) {
            return;
        }
    }
    if (mv->base.cb.peer_failed != NULL) {
        mv->base.cb.peer_failed(mv->base.cb.arg, node_id, why);
    }
}

static multi_van_t *mv_of(ps_van_t *v)
{
    return (multi_van_t *)v;
}

static void mv_close(ps_van_t *v)
{
    multi_van_t *mv = mv_of(v);
    if (mv == NULL) {
        return;
    }
    const uint64_t abandoned = ps_van_loop_abandon_count();
    if (mv->shm != NULL) {
        ps__shm_stop(mv->shm);
    }
    if (mv->net != NULL) {
        mv->net->ops->close(mv->net);
    }
    pthread_rwlock_wrlock(&mv->close_lock);
    mv->shm_closed = 1;
    pthread_rwlock_unlock(&mv->close_lock);
    if (ps_van_loop_abandon_count() != abandoned) {
        /* A van's thread was left stuck inside it (logged): its callbacks
         * lead here, so this van stays allocated, and the shm van with it. */
        return;
    }
    if (mv->shm != NULL) {
        /* Which path the job's bytes took (tests check the shm part). */
        uint64_t s_sent = 0, s_recv = 0;
        mv->shm->ops->stats(mv->shm, &s_sent, &s_recv);
        ps_info(PS_LOG_SHM,
                "ipc van closed: %llu bytes sent and %llu received through shared memory",
                (unsigned long long)s_sent, (unsigned long long)s_recv);
        mv->shm->ops->close(mv->shm);
    }
    pthread_rwlock_destroy(&mv->close_lock);
    free(mv);
}

static const ps_van_ops_t mv_ops;

/* The network van's name: what the job would use without IPC. */
static const char *net_van_name(void)
{
    const char *name = "tcp";
    if (ps__van_select_network_name(&name) != PS_OK || strcasecmp(name, "ipc") == 0 ||
        strcasecmp(name, "mixed") == 0 || strcasecmp(name, "shm") == 0) {
        name = "tcp";
    }
    return name;
}

static ps_status_t mv_open(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                           ps_van_t **van_p)
{
    if (params == NULL || van_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    const char *net_name = net_van_name();
    const ps_van_component_t *net_comp = NULL;
    ps_status_t st = ps_van_find(net_name, &net_comp);
    if (st != PS_OK) {
        return st;
    }
    if (net_comp->ops == &mv_ops) {
        return PS_ERR_INVALID_ARG;
    }
    multi_van_t *mv = calloc(1, sizeof(*mv));
    if (mv == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps_van_base_init(&mv->base, "ipc", &mv_ops, PS_LOG_SHM, params, cb);
    pthread_rwlock_init(&mv->close_lock, NULL);
    mv->net_comp = net_comp;
    mv->net_arg.mv = mv;
    mv->net_arg.route = ROUTE_NET;
    mv->shm_arg.mv = mv;
    mv->shm_arg.route = ROUTE_SHM;
    ps_van_callbacks_t sub = {
        .recv_buffer = cb_recv_buffer,
        .deliver = cb_deliver,
        .peer_failed = cb_peer_failed,
    };
    sub.arg = &mv->net_arg;
    st = net_comp->ops->open(params, &sub, &mv->net);
    if (st != PS_OK) {
        pthread_rwlock_destroy(&mv->close_lock);
        free(mv);
        return st;
    }
    sub.arg = &mv->shm_arg;
    st = ps__shm_ops()->open(params, &sub, &mv->shm);
    if (st != PS_OK) {
        mv_close(&mv->base.handle);
        return st;
    }
    ps_info(PS_LOG_SHM, "same-host peers through shared memory, the others through %s",
            net_comp->name);
    *van_p = &mv->base.handle;
    return PS_OK;
}

static ps_status_t mv_query(ps_van_t *v, ps_van_attr_t *attr_p)
{
    multi_van_t *mv = mv_of(v);
    if (attr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_van_attr_t n, s;
    ps_status_t st = mv->net->ops->query(mv->net, &n);
    if (st == PS_OK) {
        st = mv->shm->ops->query(mv->shm, &s);
    }
    if (st != PS_OK) {
        return st;
    }
    ps_van_attr_t a = n;
    /* Data paths the app may count on: what both offer. */
    uint64_t both = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_BUSY_POLL |
                    PS_CAP_SEND_AS_WRITTEN;
    a.cap_flags = (n.cap_flags & ~both) | (n.cap_flags & s.cap_flags & both);
    a.cap_flags &= ~(uint64_t)PS_CAP_SAME_HOST_ONLY;
    a.max_message_bytes =
        n.max_message_bytes < s.max_message_bytes ? n.max_message_bytes : s.max_message_bytes;
    a.max_data_segments =
        n.max_data_segments < s.max_data_segments ? n.max_data_segments : s.max_data_segments;
    *attr_p = a;
    return PS_OK;
}

static ps_status_t mv_bind(ps_van_t *v, ps_node_t *node, int max_retry)
{
    multi_van_t *mv = mv_of(v);
    ps_status_t st = mv->net->ops->bind(mv->net, node, max_retry);
    if (st != PS_OK) {
        return st;
    }
    ps_node_t same = *node;
    same.num_ports = 1;
    same.ports[0] = node->ports[0];
    st = mv->shm->ops->bind(mv->shm, &same, 0);
    if (st != PS_OK) {
        ps_warn(PS_LOG_SHM, "no shared-memory rendezvous for %s:%d (%s); peers on this host reach this node through %s",
                node->hostname, node->ports[0], ps_status_str(st), mv->net_comp->name);
    } else {
        mv->shm_listening = 1;
    }
    return PS_OK;
}

static ps_status_t mv_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    multi_van_t *mv = mv_of(v);
    if (peer == NULL || peer->id <= 0 || peer->id >= PS_NODE_EMPTY) {
        return PS_ERR_INVALID_ARG;
    }
    int id = peer->id;
    ps_status_t st = ps__shm_try_connect(mv->shm, peer, my_id);
    int route = ROUTE_SHM;
    if (st != PS_OK) {
        if (st != PS_ERR_UNREACHABLE) {
            ps_warn(PS_LOG_SHM, "shared memory to node %d failed (%s); using %s", id,
                    ps_status_str(st), mv->net_comp->name);
        }
        st = mv->net->ops->connect(mv->net, peer, my_id);
        route = ROUTE_NET;
    }
    if (st == PS_OK) {
        int old = __atomic_exchange_n(&mv->route[id], (uint8_t)route, __ATOMIC_ACQ_REL);
        if (__atomic_exchange_n(&mv->reported[id], 0, __ATOMIC_ACQ_REL) != 0) {
            /* Its failure was reported: this is a new process for the id,
             * what the vans knew of the old one does not count. */
            __atomic_store_n(&mv->failed[id], 0, __ATOMIC_RELEASE);
            __atomic_store_n(&mv->carried[id], (uint8_t)route, __ATOMIC_RELEASE);
        } else {
            __atomic_or_fetch(&mv->carried[id], (uint8_t)route, __ATOMIC_ACQ_REL);
        }
        if (old != route) {
            ps_info(PS_LOG_SHM, "node %d (%s:%d) is reached through %s", id, peer->hostname,
                    peer->num_ports > 0 ? peer->ports[0] : 0,
                    route == ROUTE_SHM ? "shared memory" : mv->net_comp->name);
        }
    }
    return st;
}

static void mv_disconnect(ps_van_t *v, int node_id)
{
    multi_van_t *mv = mv_of(v);
    mv->shm->ops->disconnect(mv->shm, node_id);
    mv->net->ops->disconnect(mv->net, node_id);
    if (node_id > 0 && node_id < PS_NODE_EMPTY) {
        __atomic_store_n(&mv->route[node_id], ROUTE_NONE, __ATOMIC_RELEASE);
        __atomic_store_n(&mv->carried[node_id], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&mv->failed[node_id], 0, __ATOMIC_RELEASE);
    }
}

static ps_status_t mv_set_node_id(ps_van_t *v, int node_id)
{
    multi_van_t *mv = mv_of(v);
    ps_status_t a = mv->net->ops->set_node_id(mv->net, node_id);
    ps_status_t b = mv->shm->ops->set_node_id(mv->shm, node_id);
    return a != PS_OK ? a : b;
}

static ps_status_t mv_send(ps_van_t *v, const ps_msg_t *msg)
{
    multi_van_t *mv = mv_of(v);
    if (msg == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    pthread_rwlock_rdlock(&mv->close_lock);
    int shm_ok = !mv->shm_closed;
    int id = msg->meta.recver;
    int route = id > 0 && id < PS_NODE_EMPTY ? __atomic_load_n(&mv->route[id], __ATOMIC_ACQUIRE)
                                             : ROUTE_NONE;
    if (route == ROUTE_NONE && shm_ok && ps__shm_has_peer(mv->shm, id)) {
        route = ROUTE_SHM;
    }
    ps_status_t st = PS_ERR_SHUTDOWN;
    if (route != ROUTE_SHM) {
        st = mv->net->ops->send(mv->net, msg);
    } else if (shm_ok) {
        st = mv->shm->ops->send(mv->shm, msg);
    }
    pthread_rwlock_unlock(&mv->close_lock);
    return st;
}

static ps_status_t mv_register_mem(ps_van_t *v, ps_buf_t *buf)
{
    multi_van_t *mv = mv_of(v);
    return mv->net->ops->register_mem(mv->net, buf);
}

static ps_status_t mv_deregister_mem(ps_van_t *v, ps_buf_t *buf)
{
    multi_van_t *mv = mv_of(v);
    return mv->net->ops->deregister_mem(mv->net, buf);
}

static void mv_stats(ps_van_t *v, uint64_t *sent_p, uint64_t *recv_p)
{
    multi_van_t *mv = mv_of(v);
    uint64_t s1 = 0, r1 = 0, s2 = 0, r2 = 0;
    mv->net->ops->stats(mv->net, &s1, &r1);
    mv->shm->ops->stats(mv->shm, &s2, &r2);
    if (sent_p != NULL) {
        *sent_p = s1 + s2;
    }
    if (recv_p != NULL) {
        *recv_p = r1 + r2;
    }
}

/* Drives both vans: the waiter's answer may come through either. A van
 * without the op keeps its own thread. */
static int mv_progress(ps_van_t *v, unsigned budget)
{
    multi_van_t *mv = mv_of(v);
    int n = 0;
    int (*op)(ps_van_t *, unsigned) = ps_van_progress_op(mv->shm);
    if (op != NULL) {
        n += op(mv->shm, budget);
    }
    op = ps_van_progress_op(mv->net);
    if (op != NULL) {
        n += op(mv->net, budget);
    }
    return n;
}

const char *ps__ipc_route(ps_van_t *v, int id)
{
    multi_van_t *mv = mv_of(v);
    if (id <= 0 || id >= PS_NODE_EMPTY || mv->shm_closed) {
        return "none";
    }
    switch (__atomic_load_n(&mv->route[id], __ATOMIC_ACQUIRE)) {
    case ROUTE_SHM:
        return "shm";
    case ROUTE_NET:
        return "net";
    default:
        return ps__shm_has_peer(mv->shm, id) ? "shm" : "none";
    }
}

static int mv_same_host(ps_van_t *v, int id)
{
    return strcmp(ps__ipc_route(v, id), "shm") == 0;
}

static const ps_van_ops_t mv_ops = {
    .size = sizeof(ps_van_ops_t),
    .open = mv_open,
    .close = mv_close,
    .query = mv_query,
    .bind = mv_bind,
    .connect = mv_connect,
    .disconnect = mv_disconnect,
    .set_node_id = mv_set_node_id,
    .send = mv_send,
    .register_mem = mv_register_mem,
    .deregister_mem = mv_deregister_mem,
    .stats = mv_stats,
    .progress = mv_progress,
    .same_host = mv_same_host,
};

const ps_van_component_t ps__ipc_component = {
    .name = "ipc",
    .aliases = "mixed",
    .ops = &mv_ops,
    .unavailable = NULL,
};

PS_VAN_REGISTER(ps__ipc_component)

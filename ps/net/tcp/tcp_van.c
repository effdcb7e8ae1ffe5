/*
 * The TCP van: lifecycle, the peer table, the progress thread, and the ops
 * table registered as component "tcp" (aliases "zmq" and "0", the names
 * upstream jobs use for its ZMQ van).
 *
 * The progress loop (ps/net/van/progress_loop.h: when to spin, sleep or
 * stand back for a driving waiter) runs this van's epoll: the listening
 * socket, every connection and the loop's wake eventfd, through which
 * other threads hand it work (new connections to start, connections to
 * close). Without busy polling it sleeps in epoll_wait itself; with it, it
 * polls epoll without sleeping while traffic flows.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/tcp/tcp_internal.h"

#define PS__TCP_MAX_EVENTS 64
/* Free receive buffers the pool keeps. */
#define PS__TCP_POOL_CACHE (256u << 20)
#define PS__TCP_DEFAULT_CONNECT_MS 10000

void ps__tcp_wake(ps__tcp_van_t *van)
{
    ps_van_loop_wake(&van->loop);
}

/* ---- peer table ---- */

static void remove_from(ps__tcp_conn_t **arr, int *num, const ps__tcp_conn_t *conn)
{
    for (int i = 0; i < *num; ++i) {
        if (arr[i] == conn) {
            memmove(&arr[i], &arr[i + 1], (size_t)(*num - i - 1) * sizeof(*arr));
            (*num)--;
            return;
        }
    }
}

void ps__tcp_peer_remove_conn(ps__tcp_van_t *van, ps__tcp_conn_t *conn, ps_status_t why)
{
    if (conn->peer_id == PS_NODE_EMPTY) {
        return;
    }
    pthread_rwlock_wrlock(&van->sock.peers.lock);
    ps__tcp_peer_t *p = ps_van_peer_table_get(&van->sock.peers, conn->peer_id, 0);
    if (p != NULL) {
        remove_from(p->out, &p->num_out, conn);
        remove_from(p->in, &p->num_in, conn);
        if (p->chosen == conn) {
            __atomic_store_n(&p->chosen, NULL, __ATOMIC_RELEASE);
        }
        ps_van_peer_went(&p->hdr, why);
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
}

ps_status_t ps__tcp_peer_add_in(ps__tcp_van_t *van, ps__tcp_conn_t *conn, int id)
{
    pthread_rwlock_wrlock(&van->sock.peers.lock);
    ps__tcp_peer_t *p = ps_van_peer_table_get(&van->sock.peers, id, 1);
    if (p == NULL) {
        pthread_rwlock_unlock(&van->sock.peers.lock);
        return PS_ERR_NO_MEMORY;
    }
    /* More streams than we index still deliver; they are just not used
     * for replies. */
    if (p->num_in < PS__TCP_MAX_STREAMS) {
        p->in[p->num_in++] = conn;
    }
    ps_van_peer_connected(&p->hdr);
    conn->peer_id = id;
    pthread_rwlock_unlock(&van->sock.peers.lock);
    return PS_OK;
}

/* The connection of a single-stream peer (the peer table's lock held for reading):
 * see ps__tcp_peer_t.chosen. */
static ps__tcp_conn_t *single_stream_conn(ps__tcp_van_t *van, ps__tcp_peer_t *p)
{
    ps__tcp_conn_t *c = __atomic_load_n(&p->chosen, __ATOMIC_ACQUIRE);
    if (c != NULL) {
        return c;
    }
    int me = __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
    int lower_is_me = me != PS_NODE_EMPTY && me < p->hdr.id;
    ps__tcp_conn_t *mine = p->num_out > 0 ? p->out[0] : NULL;
    ps__tcp_conn_t *theirs = NULL;
    for (int i = 0; i < p->num_in && theirs == NULL; ++i) {
        if (p->in[i]->nstreams <= 1) {
            theirs = p->in[i];
        }
    }
    c = lower_is_me ? (mine != NULL ? mine : theirs) : (theirs != NULL ? theirs : mine);
    if (c == NULL) {
        c = p->in[0]; /* only a striped group of the peer's: its stream 0 */
    }
    /* Concurrent first senders (under the read lock): one choice wins. */
    ps__tcp_conn_t *expected = NULL;
    if (!__atomic_compare_exchange_n(&p->chosen, &expected, c, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        c = expected;
    }
    return c;
}

int ps__tcp_peer_send_conns(ps__tcp_van_t *van, int id, uint64_t data_total,
                            ps__tcp_conn_t **conns)
{
    int n = 0;
    pthread_rwlock_rdlock(&van->sock.peers.lock);
    ps__tcp_peer_t *p = ps_van_peer_table_get(&van->sock.peers, id, 0);
    if (p != NULL) {
        /* Our own connections first; else the peer's connection to us (a
         * node we never connected to can still be answered). One fixed
         * choice per peer keeps its messages in order. */
        if (p->num_out > 0) {
            int group = p->out[0]->nstreams;
            if (group > 1 && p->num_out != group) {
                n = -1; /* a stream failed: so does the peer, right now */
            } else if (group > 1 && data_total >= PS__TCP_STRIPE_MIN) {
                for (n = 0; n < group; ++n) {
                    conns[n] = p->out[n];
                }
            } else if (group > 1) {
                conns[n++] = p->out[0];
            }
        }
        if (n == 0 && (p->num_out > 0 || p->num_in > 0)) {
            conns[n++] = single_stream_conn(van, p);
        }
        for (int i = 0; i < n; ++i) {
            __atomic_add_fetch(&conns[i]->refs, 1, __ATOMIC_RELAXED);
        }
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    return n;
}

/* ---- progress thread ---- */

static void handle_conn_event(ps__tcp_conn_t *conn, uint32_t events)
{
    if (conn->state == PS__TCP_DEAD) {
        return;
    }
    if (conn->state == PS__TCP_CONNECTING) {
        if (conn->hs.state == PS_VAN_HS_WAIT_CHALLENGE ||
            conn->hs.state == PS_VAN_HS_WAIT_VERDICT) {
            /* Connected, in the job-secret handshake: read the challenge. */
            ps__tcp_on_readable(conn);
            return;
        }
        ps__tcp_on_connected_event(conn, events);
        return;
    }
    if ((events & (EPOLLERR | EPOLLHUP)) && conn->rx_off) {
        /* Not reading (striping waits), yet the socket failed. */
        ps_info(PS_LOG_TCP, "connection with node %d at %s failed", conn->peer_id,
                conn->addr_str);
        ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
        return;
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        /* Errors and EOF surface through read(). */
        ps__tcp_on_readable(conn);
        if (conn->state == PS__TCP_DEAD) {
            return;
        }
    }
    if (events & EPOLLOUT) {
        ps_status_t st = ps__tcp_flush(conn);
        if (st != PS_OK) {
            ps_warn(PS_LOG_TCP, "sending to node %d at %s failed (%s)", conn->peer_id,
                    conn->addr_str, ps_status_str(st));
            ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
        }
    }
}

static void bury(ps__tcp_van_t *van)
{
    while (van->graveyard != NULL) {
        ps__tcp_conn_t *conn = van->graveyard;
        van->graveyard = conn->next_grave;
        conn->next_grave = NULL;
        ps__tcp_conn_unref(conn);
    }
}

/* One round of the event loop (the loop held): timers, then what epoll
 * has within `timeout_ns` (-1: until something happens), at most `max`
 * events. Returns how many events it handled. */
static int run_round(ps__tcp_van_t *van, int64_t timeout_ns, unsigned max)
{
    struct epoll_event evs[PS__TCP_MAX_EVENTS];
    int t = ps__tcp_run_timers(van);
    bury(van);
    int64_t t_ns = t < 0 ? -1 : (int64_t)t * (int64_t)PS_NSEC_PER_MSEC;
    if (t_ns >= 0 && (timeout_ns < 0 || t_ns < timeout_ns)) {
        timeout_ns = t_ns;
    }
    int cap = max < PS__TCP_MAX_EVENTS ? (int)max : PS__TCP_MAX_EVENTS;
    int n = ps_van_epoll_wait(van->sock.epfd, evs, cap, timeout_ns, PS_LOG_TCP);
    for (int i = 0; i < n; ++i) {
        ps__tcp_handle_t *h = evs[i].data.ptr;
        switch (h->kind) {
        case PS__TCP_H_WAKE:
            ps_van_loop_clear_wake(&van->loop); /* the work: tcp_handover */
            break;
        case PS__TCP_H_LISTEN:
            ps__tcp_accept_all(van);
            break;
        case PS__TCP_H_CONN:
            handle_conn_event((ps__tcp_conn_t *)h, evs[i].events);
            break;
        }
    }
    ps__tcp_run_ready(van);
    bury(van);
    return n;
}

static int tcp_poll(void *arg, unsigned budget)
{
    return run_round(arg, 0, budget);
}

/* Sleeping is epoll_wait itself, which handles what woke it. */
static int tcp_wait(void *arg, int64_t timeout_ns)
{
    return run_round(arg, timeout_ns, PS__TCP_MAX_EVENTS);
}

static void tcp_handover(void *arg)
{
    ps__tcp_start_pending(arg);
}

static int64_t tcp_outstanding(void *arg, uint64_t *moved_p)
{
    ps__tcp_van_t *van = arg;
    *moved_p = __atomic_load_n(&van->base.bytes_sent, __ATOMIC_RELAXED);
    return __atomic_load_n(&van->queued, __ATOMIC_ACQUIRE);
}

static const ps_van_loop_ops_t tcp_loop_ops = {
    .size = sizeof(ps_van_loop_ops_t),
    .poll = tcp_poll,
    .wait = tcp_wait,
    .handover = tcp_handover,
    .outstanding = tcp_outstanding,
};

/* ---- ops ---- */

static void tcp_close(ps_van_t *v);
static const ps_van_ops_t tcp_ops;

static ps_status_t tcp_open(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                            ps_van_t **van_p)
{
    if (params == NULL || van_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps__tcp_van_t *van = calloc(1, sizeof(*van));
    if (van == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps_van_base_init(&van->base, "tcp", &tcp_ops, PS_LOG_TCP, params, cb);
    ps_van_base_set_own_tag(&van->base, PS__TCP_OWN_TAG);
    van->base.handle.loop = &van->loop;
    van->base.params.connect_timeout_ms =
        ps_van_connect_timeout_ms(van->base.params.connect_timeout_ms, PS__TCP_DEFAULT_CONNECT_MS);
    van->limits = ps_van_frame_limits(params);
    uint64_t sockbuf = ps_config_size_or(PS_TCP_CFG(PS_TCP_SOCKBUF), 0);
    van->sockbuf = sockbuf > INT_MAX / 2 ? INT_MAX / 2 : (int)sockbuf;
    const char *align = ps_config_str_or(PS_TCP_CFG(PS_TCP_ALIGN_COPY), "auto");
    if (ps_send_align_init(&van->align, align, PS_LOG_TCP) != 0) {
        ps_warn(PS_LOG_TCP, "PS_TCP_ALIGN_COPY=%s is not on, off or auto; using auto", align);
    }
    /* The larger of DMLC_NUM_PORTS (the postoffice's) and this van's own. */
    int conns = (int)ps_config_int_or(PS_TCP_CFG(PS_TCP_CONNS_PER_PEER), 1);
    van->conns_per_peer = params->conns_per_peer > conns ? params->conns_per_peer : conns;
    if (van->conns_per_peer < 1) {
        van->conns_per_peer = 1;
    }
    if (van->conns_per_peer > PS__TCP_MAX_STREAMS) {
        ps_warn(PS_LOG_TCP, "%d connections per peer requested; the tcp van opens at most %d",
                van->conns_per_peer, PS__TCP_MAX_STREAMS);
        van->conns_per_peer = PS__TCP_MAX_STREAMS;
    }
    van->prealloc = ps_config_size_or(PS_CFG_PS_RECV_PREALLOC_BYTES, 4u << 20);
    if (van->prealloc < PS__TCP_RBUF_SIZE) {
        van->prealloc = PS__TCP_RBUF_SIZE;
    }
    van->wake_handle.kind = PS__TCP_H_WAKE;
    van->listen_handle.kind = PS__TCP_H_LISTEN;
    const ps_van_loop_params_t lp = {
        .thread_name = "ps-tcp-progress",
        .log = PS_LOG_TCP,
        .busy_poll = params->busy_poll,
        .budget = PS__TCP_MAX_EVENTS,
    };
    ps_status_t st = ps_van_loop_init(&van->loop, &lp, &tcp_loop_ops, van);
    if (st != PS_OK) {
        free(van);
        return st;
    }
    ps_van_sock_init(&van->sock, sizeof(ps__tcp_peer_t), PS_LOG_TCP);
    (void)ps_van_handover_init(&van->handover);

    st = ps_mpool_init(&van->entries, "tcp send queue", sizeof(ps__tcp_entry_t), 64, 64, 0);
    if (st != PS_OK) {
        ps_van_sock_fini(&van->sock);
        ps_van_handover_fini(&van->handover);
        ps_van_loop_cleanup(&van->loop);
        free(van);
        return st;
    }
    st = ps_van_sock_open(&van->sock, PS__TCP_POOL_CACHE, &van->loop, &van->wake_handle);
    if (st != PS_OK) {
        tcp_close(&van->base.handle);
        return st;
    }
    st = ps_van_loop_start(&van->loop, NULL, 0);
    if (st != PS_OK) {
        tcp_close(&van->base.handle);
        return st;
    }
    *van_p = &van->base.handle;
    return PS_OK;
}

static void tcp_close(ps_van_t *v)
{
    if (v == NULL) {
        return;
    }
    ps__tcp_van_t *van = ps__tcp_of(v);
    /* Queued frames leave first (bounded); then everything is ours alone,
     * unless the thread is stuck in the van: then all of it stays. */
    if (ps_van_loop_stop(&van->loop) != PS_OK) {
        return;
    }
    ps__tcp_close_all(van);
    bury(van);
    ps_van_sock_fini(&van->sock);
    ps_van_base_fini(&van->base);
    ps_mpool_cleanup(&van->entries);
    ps_van_handover_fini(&van->handover);
    ps_van_loop_cleanup(&van->loop);
    ps_send_align_fini(&van->align);
    free(van);
}

static ps_status_t tcp_query(ps_van_t *v, ps_van_attr_t *attr_p)
{
    ps__tcp_van_t *van = ps__tcp_of(v);
    if (attr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_van_attr_t a;
    memset(&a, 0, sizeof(a));
    a.cap_flags = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_BUSY_POLL |
                  PS_CAP_SEND_AS_WRITTEN;
    if (van->conns_per_peer > 1) {
        a.cap_flags |= PS_CAP_MULTI_STREAM;
    }
    ps_van_frame_attr(&van->limits, &a);
    a.num_streams = (uint32_t)van->conns_per_peer;
    *attr_p = a;
    return PS_OK;
}

/* The connections a new node id is announced on: ours, stream 0 of each
 * group (streams > 0 carry chunks only, after one hello). */
static int pick_announced(void *peer, void **out, int max)
{
    ps__tcp_peer_t *p = peer;
    int n = 0;
    for (int i = 0; i < p->num_out && n < max; ++i) {
        if (p->out[i]->stream == 0) {
            __atomic_add_fetch(&p->out[i]->refs, 1, __ATOMIC_RELAXED);
            out[n++] = p->out[i];
        }
    }
    return n;
}

static ps_status_t tcp_set_node_id(ps_van_t *v, int node_id)
{
    ps__tcp_van_t *van = ps__tcp_of(v);
    int changed;
    ps_status_t st = ps_van_base_set_node_id(&van->base, node_id, &changed);
    if (st != PS_OK || !changed) {
        return st;
    }
    /* Re-announce on every connection we opened, in line with the data
     * already queued on it. */
    void **list;
    int n = ps_van_peer_table_collect(&van->sock.peers, pick_announced, PS__TCP_MAX_STREAMS, &list);
    ps_status_t result = PS_OK;
    for (int i = 0; i < n; ++i) {
        ps__tcp_conn_t *conn = list[i];
        uint8_t hello[128];
        size_t len;
        ps_status_t st = ps__tcp_encode_hello(van, node_id, conn->nonce, conn->stream,
                                              conn->nstreams, hello, sizeof(hello), &len);
        if (st == PS_OK) {
            st = ps__tcp_conn_send_frame(conn, hello, len, NULL, 0, PS_SEND_ALIGN_NONE);
        }
        if (st != PS_OK && st != PS_ERR_PEER_GONE && result == PS_OK) {
            result = st;
        }
        ps__tcp_conn_unref(conn);
    }
    free(list);
    ps_info(PS_LOG_TCP, "node id is now %d (announced on %d connections)", node_id, n);
    return result;
}

static const ps_van_ops_t tcp_ops = {
    .size = sizeof(ps_van_ops_t),
    .open = tcp_open,
    .close = tcp_close,
    .query = tcp_query,
    .bind = ps__tcp_bind,
    .connect = ps__tcp_connect,
    .disconnect = ps__tcp_disconnect,
    .set_node_id = tcp_set_node_id,
    .send = ps__tcp_send,
    .register_mem = ps_van_no_register_mem,
    .deregister_mem = ps_van_no_deregister_mem,
    .stats = ps_van_base_stats,
    .progress = ps_van_loop_progress,
};

const ps_van_component_t ps__tcp_component = {
    .name = "tcp",
    .aliases = "zmq,0",
    .ops = &tcp_ops,
    .unavailable = NULL,
};

PS_VAN_REGISTER(ps__tcp_component)

static const ps_config_entry_t tcp_vars[] = {
#define PS_CONFIG_VAR PS_CONFIG_ENTRY
#include "ps/net/tcp/tcp_config_vars.h"
#undef PS_CONFIG_VAR
};
PS_CONFIG_TABLE(ps__tcp_config, "tcp", tcp_vars)

PS_LOG_COMPONENT(ps__tcp_log, "tcp")

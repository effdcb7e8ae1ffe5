/*
 * Sockets of the TCP van: listening (bind), opening connections (connect,
 * with retries until PS_CONNECT_TIMEOUT_MS), accepting, and tearing a
 * connection down.
 *
 * Who talks to whom. Every process listens. connect(peer) opens our own
 * connection to the peer and sends a hello first, announcing our node id
 * (PS_NODE_EMPTY while the scheduler has not assigned one yet, plus a
 * random nonce). The accepting side learns from the hello who is at the
 * other end and stamps that id as `sender` on every message it delivers
 * from the connection. send() to a single-stream peer sticks to one
 * connection, preferably the one the lower node id opened, so that both
 * directions share it (ps__tcp_peer_t.chosen); to a multi-stream peer it
 * uses our own streams.
 *
 * Replying to a node that has no id yet: as upstream, the scheduler reads
 * the node's address from its ADD_NODE, assigns it an id, and connect()s
 * back to it; the reply goes over that connection. The node, once it knows
 * its id (set_node_id), re-announces itself on the connections it opened,
 * so the scheduler's side of them gets identified too. The alternative,
 * replying on the unidentified incoming connection, would need the reply
 * to name a connection rather than a node id, which the van interface does
 * not have.
 *
 * Failures. A connection that breaks (EOF, reset, a broken frame) is
 * closed with one log line; if it belonged to an identified peer, the
 * peer's other connections are closed too and peer_failed() is called
 * once. An unidentified connection (garbage from a port scanner, say) just
 * goes away.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/tcp/tcp_internal.h"
#include "ps/net/van/addr.h"
#include "ps/net/van/conn_list.h"

ps__tcp_conn_t *ps__tcp_conn_new(ps__tcp_van_t *van, int outgoing)
{
    ps__tcp_conn_t *conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        return NULL;
    }
    /* Before its handshake an accepted connection gets only a few KiB
     * (admission.h); ps__tcp_admitted() gives it the full buffer. */
    size_t rcap = outgoing ? PS__TCP_RBUF_SIZE : PS_VAN_PREAUTH_BYTES;
    conn->rbuf = malloc(rcap);
    if (conn->rbuf == NULL) {
        free(conn);
        return NULL;
    }
    conn->rcap = rcap;
    conn->handle.kind = PS__TCP_H_CONN;
    conn->van = van;
    conn->refs = 1;
    conn->outgoing = outgoing;
    conn->peer_id = PS_NODE_EMPTY;
    conn->fd = -1;
    conn->state = outgoing ? PS__TCP_CONNECTING : PS__TCP_READY;
    ps_van_base_hs_init(&van->base, &conn->hs, "tcp", outgoing);
    pthread_mutex_init(&conn->send_lock, NULL);
    ps_msg_init(&conn->rmsg);
    conn->phase = PS__TCP_RX_HEADER;
    return conn;
}

static void conn_free(ps__tcp_conn_t *conn)
{
    ps_msg_release(&conn->rmsg);
    free(conn->rbuf);
    pthread_mutex_destroy(&conn->send_lock);
    free(conn);
}

void ps__tcp_conn_unref(ps__tcp_conn_t *conn)
{
    if (__atomic_sub_fetch(&conn->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        conn_free(conn);
    }
}

void ps__tcp_conn_destroy_now(ps__tcp_conn_t *conn)
{
    if (conn->fd >= 0) {
        close(conn->fd);
        conn->fd = -1;
    }
    ps__tcp_entries_free(conn->van, ps__tcp_queue_take(conn));
    conn_free(conn);
}

static void tune_socket(ps__tcp_van_t *van, int fd)
{
    int one = 1;
    /* Small messages (meta, ping-pong) must not wait for Nagle. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (van->sockbuf > 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &van->sockbuf, sizeof(van->sockbuf));
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &van->sockbuf, sizeof(van->sockbuf));
    }
}

static void conn_link(ps__tcp_van_t *van, ps__tcp_conn_t *conn)
{
    PS_VAN_CONN_LINK(van->conns, conn);
}

static void conn_unlink(ps__tcp_van_t *van, ps__tcp_conn_t *conn)
{
    PS_VAN_CONN_UNLINK(van->conns, conn);
}

/* ---- bind ---- */

typedef struct {
    ps__tcp_van_t *van;
    ps_sockaddr_t addr;
    int fd;
} listen_try_t;

/* Accepted sockets inherit the buffer sizes; the receive buffer must be
 * set before the handshake for the window scale to match it. */
static void tune_listener(void *arg, int fd)
{
    tune_socket(arg, fd);
}

static ps_status_t listen_try(void *arg, int port, int random, char *where, size_t cap)
{
    (void)random;
    listen_try_t *t = arg;
    ps_van_listen_where(&t->addr, port, where, cap);
    return ps_van_ip_listen(&t->addr, where, PS_LOG_TCP, tune_listener, t->van, &t->fd);
}

ps_status_t ps__tcp_bind(ps_van_t *v, ps_node_t *node, int max_retry)
{
    ps__tcp_van_t *van = ps__tcp_of(v);
    if (node == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    listen_try_t t = {.van = van, .fd = -1};
    char where[PS_SOCKADDR_STRLEN];
    int port = 0;
    ps_status_t st = ps_van_sock_may_bind(&van->sock);
    if (st == PS_OK) {
        st = ps_van_listen_addr(node, van->base.params.bind_any, PS_LOG_TCP, &t.addr);
    }
    if (st == PS_OK) {
        st = ps_van_listen_on_port(node, max_retry, van->base.params.is_scheduler, PS_LOG_TCP,
                                   listen_try, &t, NULL, &port, where, sizeof(where));
    }
    if (st != PS_OK) {
        return st;
    }
    van->listen_addr = t.addr;
    st = ps_van_sock_listen(&van->sock, t.fd, &van->listen_handle, where);
    if (st != PS_OK) {
        return st;
    }
    ps_van_listen_bound(node, port);
    ps_info(PS_LOG_TCP, "listening on %s", where);
    return PS_OK;
}

/* ---- accept ---- */

static int take_accepted(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
    ps__tcp_van_t *van = arg;
    ps__tcp_conn_t *conn = ps__tcp_conn_new(van, 0);
    if (conn == NULL) {
        return -1;
    }
    conn->admit_pending = 1;
    conn->hs_deadline_ns = ps_van_admission_deadline(&van->sock.adm);
    if (conn->hs_deadline_ns < van->hs_next_ns || van->hs_next_ns == 0) {
        van->hs_next_ns = conn->hs_deadline_ns;
    }
    tune_socket(van, fd);
    conn->fd = fd;
    if (ps_sockaddr_from_sa(sa, len, &conn->addr) != PS_OK ||
        ps_sockaddr_format(&conn->addr, conn->addr_str, sizeof(conn->addr_str)) != PS_OK) {
        strcpy(conn->addr_str, "?");
    }
    if (ps_van_epoll_ctl(van->sock.epfd, EPOLL_CTL_ADD, fd, EPOLLIN, &conn->handle) != 0) {
        ps_warn_ratelimited(PS_LOG_TCP, "epoll_ctl for a connection from %s: %m", conn->addr_str);
        ps_van_admission_done(&van->sock.adm);
        ps__tcp_conn_destroy_now(conn);
        return 0;
    }
    conn->in_epoll = 1;
    conn_link(van, conn);
    ps_van_hs_accept(&conn->hs); /* job secret: INIT expected first */
    ps_debug(PS_LOG_TCP, "accepted a connection from %s", conn->addr_str);
    return 0;
}

void ps__tcp_accept_all(ps__tcp_van_t *van)
{
    ps_van_admission_each(&van->sock.adm, NULL, take_accepted, van);
}

void ps__tcp_admitted(ps__tcp_conn_t *conn)
{
    if (!conn->admit_pending) {
        return;
    }
    conn->admit_pending = 0;
    ps_van_admission_done(&conn->van->sock.adm);
    if (conn->rcap < PS__TCP_RBUF_SIZE) {
        /* On failure it keeps the small one, which grows when needed. */
        uint8_t *nb = realloc(conn->rbuf, PS__TCP_RBUF_SIZE);
        if (nb != NULL) {
            conn->rbuf = nb;
            conn->rcap = PS__TCP_RBUF_SIZE;
        }
    }
}

/* Accepted connections that missed their handshake deadline go; returns
 * the earliest deadline still ahead (0: none). */
static uint64_t expire_handshakes(ps__tcp_van_t *van, uint64_t now)
{
    uint64_t next = 0;
    ps__tcp_conn_t *conn = van->conns;
    while (conn != NULL) {
        ps__tcp_conn_t *following = conn->next;
        if (conn->admit_pending) {
            if (now >= conn->hs_deadline_ns) {
                ps_van_admission_expired(&van->sock.adm, conn->addr_str);
                ps__tcp_conn_fail(conn, PS_ERR_TIMED_OUT, 0);
            } else if (next == 0 || conn->hs_deadline_ns < next) {
                next = conn->hs_deadline_ns;
            }
        }
        conn = following;
    }
    return next;
}

/* ---- connect ---- */

ps_status_t ps__tcp_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    ps__tcp_van_t *van = ps__tcp_of(v);
    ps_sockaddr_t addr;
    ps_status_t st = ps_van_peer_addr(peer, PS_LOG_TCP, &addr);
    if (st != PS_OK) {
        return st;
    }
    int hello_id = my_id != PS_NODE_EMPTY ? my_id : __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
    uint64_t deadline = ps_time_now_ns() + (uint64_t)van->base.params.connect_timeout_ms * PS_NSEC_PER_MSEC;

    pthread_rwlock_wrlock(&van->sock.peers.lock);
    ps__tcp_peer_t *p = ps_van_peer_table_get(&van->sock.peers, peer->id, 1);
    if (p == NULL) {
        pthread_rwlock_unlock(&van->sock.peers.lock);
        return PS_ERR_NO_MEMORY;
    }
    ps__tcp_conn_t *replaced[PS__TCP_MAX_STREAMS];
    int num_replaced = 0;
    if (p->num_out > 0) {
        if (ps_sockaddr_equal(&p->out[0]->addr, &addr)) {
            pthread_rwlock_unlock(&van->sock.peers.lock);
            return PS_OK; /* already connected (or connecting) */
        }
        /* The id moved to another address (a recovered node took it over):
         * the old connections go. */
        for (int i = 0; i < p->num_out; ++i) {
            __atomic_add_fetch(&p->out[i]->refs, 1, __ATOMIC_RELAXED);
            replaced[num_replaced++] = p->out[i];
            if (p->chosen == p->out[i]) {
                __atomic_store_n(&p->chosen, NULL, __ATOMIC_RELEASE);
            }
        }
        p->num_out = 0;
    }
    ps__tcp_conn_t *fresh[PS__TCP_MAX_STREAMS];
    /* The scheduler only exchanges control messages: one stream is plenty. */
    int nstreams = peer->id == PS_SCHEDULER_ID || van->base.params.is_scheduler
                       ? 1
                       : van->conns_per_peer;
    uint64_t nonce = ps_van_random();
    int made = 0;
    for (; made < nstreams; ++made) {
        ps__tcp_conn_t *conn = ps__tcp_conn_new(van, 1);
        if (conn == NULL) {
            st = PS_ERR_NO_MEMORY;
            break;
        }
        conn->peer_id = peer->id;
        conn->addr = addr;
        if (ps_sockaddr_format(&addr, conn->addr_str, sizeof(conn->addr_str)) != PS_OK) {
            strcpy(conn->addr_str, "?");
        }
        conn->nonce = nonce;
        conn->hs.t.id_i = hello_id; /* job secret: the id the handshake binds */
        conn->stream = made;
        conn->nstreams = nstreams;
        conn->connect_deadline_ns = deadline;
        uint8_t hello[128];
        size_t hello_len;
        st = ps__tcp_encode_hello(van, hello_id, nonce, made, nstreams, hello, sizeof(hello),
                                  &hello_len);
        if (st == PS_OK) {
            /* Queued: the connection is not up yet. */
            st = ps__tcp_conn_send_frame(conn, hello, hello_len, NULL, 0, PS_SEND_ALIGN_NONE);
        }
        if (st != PS_OK) {
            ps__tcp_conn_destroy_now(conn);
            break;
        }
        fresh[made] = conn;
    }
    if (made == nstreams) {
        for (int i = 0; i < made; ++i) {
            p->out[p->num_out++] = fresh[i];
        }
        ps_van_peer_connected(&p->hdr);
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    if (made != nstreams) {
        for (int i = 0; i < made; ++i) {
            ps__tcp_conn_destroy_now(fresh[i]);
        }
        made = 0;
    }

    char where[PS_SOCKADDR_STRLEN] = "";
    if (made > 0) {
        memcpy(where, fresh[0]->addr_str, sizeof(where));
    }
    ps_van_handover_link_t *to_start[PS__TCP_MAX_STREAMS];
    ps_van_handover_link_t *to_close[PS__TCP_MAX_STREAMS];
    for (int i = 0; i < made; ++i) {
        /* The start list holds a reference: the connection may be torn
         * down (disconnect, a failing sibling) before the progress thread
         * takes it. */
        __atomic_add_fetch(&fresh[i]->refs, 1, __ATOMIC_RELAXED);
        to_start[i] = &fresh[i]->start_link;
    }
    for (int i = 0; i < num_replaced; ++i) {
        to_close[i] = &replaced[i]->close_link;
    }
    ps_van_handover_put(&van->handover, to_start, made, to_close, num_replaced);
    ps__tcp_wake(van);
    if (made == 0) {
        return st;
    }
    ps_info(PS_LOG_TCP, "connecting to node %d at %s%s", peer->id, where,
            num_replaced ? " (replacing its old address)" : "");
    return PS_OK;
}

void ps__tcp_disconnect(ps_van_t *v, int node_id)
{
    ps__tcp_van_t *van = ps__tcp_of(v);
    ps_van_handover_link_t *to_close[2 * PS__TCP_MAX_STREAMS];
    int n = 0;
    pthread_rwlock_wrlock(&van->sock.peers.lock);
    ps__tcp_peer_t *p = ps_van_peer_table_get(&van->sock.peers, node_id, 0);
    if (p != NULL) {
        /* The close list holds a reference of its own on each. */
        for (int i = 0; i < p->num_out + p->num_in; ++i) {
            ps__tcp_conn_t *c = i < p->num_out ? p->out[i] : p->in[i - p->num_out];
            __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
            to_close[n++] = &c->close_link;
        }
        p->num_out = p->num_in = 0;
        __atomic_store_n(&p->chosen, NULL, __ATOMIC_RELEASE);
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    if (n > 0) {
        ps_van_handover_put(&van->handover, NULL, 0, to_close, n);
        ps__tcp_wake(van);
        ps_info(PS_LOG_TCP, "disconnecting from node %d", node_id);
    }
}

static void conn_connect_failed(ps__tcp_conn_t *conn, int err)
{
    uint64_t now = ps_time_now_ns();
    if (now >= conn->connect_deadline_ns) {
        ps_error(PS_LOG_TCP, "cannot connect to node %d at %s: %s (gave up after %d ms, PS_CONNECT_TIMEOUT_MS)",
                 conn->peer_id, conn->addr_str, strerror(err), conn->van->base.params.connect_timeout_ms);
        ps__tcp_conn_fail(conn, PS_ERR_UNREACHABLE, 1);
        return;
    }
    /* The peer may not be listening yet (a launcher starts everyone at
     * once): try again a little later. */
    conn->retry_at_ns = ps_van_connect_backoff(&conn->backoff_ms, now);
    ps_debug(PS_LOG_TCP, "connect to node %d at %s: %s; retrying in %u ms", conn->peer_id,
             conn->addr_str, strerror(err), conn->backoff_ms);
}

static void conn_start_connect(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    int fd = socket(ps_sockaddr_family(&conn->addr), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        ps_error(PS_LOG_TCP, "connect to node %d: socket(): %s", conn->peer_id, strerror(err));
        conn_connect_failed(conn, err);
        return;
    }
    tune_socket(van, fd);
    int r = connect(fd, ps_sockaddr_sa(&conn->addr), conn->addr.len);
    if (r != 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        conn_connect_failed(conn, err);
        return;
    }
    pthread_mutex_lock(&conn->send_lock);
    conn->fd = fd;
    pthread_mutex_unlock(&conn->send_lock);
    if (ps_van_epoll_ctl(van->sock.epfd, EPOLL_CTL_ADD, fd, EPOLLOUT, &conn->handle) != 0) {
        ps_error(PS_LOG_TCP, "connect to node %d: epoll_ctl: %m", conn->peer_id);
        ps__tcp_conn_fail(conn, PS_ERR_NO_RESOURCE, 1);
        return;
    }
    conn->in_epoll = 1;
    conn->retry_at_ns = 0;
}

void ps__tcp_start_pending(ps__tcp_van_t *van)
{
    ps_van_handover_link_t *to_start, *to_close, *l;
    if (!ps_van_handover_take(&van->handover, &to_start, &to_close)) {
        return;
    }
    while ((l = ps_van_handover_pop(&to_start)) != NULL) {
        ps__tcp_conn_t *conn = PS_VAN_HANDOVER_OF(l, ps__tcp_conn_t, start_link);
        if (conn->state == PS__TCP_CONNECTING) {
            conn_link(van, conn);
            van->num_connecting++;
            conn_start_connect(conn);
        }
        ps__tcp_conn_unref(conn); /* the start list's reference */
    }
    while ((l = ps_van_handover_pop(&to_close)) != NULL) {
        ps__tcp_conn_t *conn = PS_VAN_HANDOVER_OF(l, ps__tcp_conn_t, close_link);
        ps__tcp_conn_fail(conn, PS_OK, 0);
        ps__tcp_conn_unref(conn); /* disconnect()'s reference */
    }
}

void ps__tcp_on_connected_event(ps__tcp_conn_t *conn, uint32_t events)
{
    ps__tcp_van_t *van = conn->van;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(conn->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
    }
    if (err == 0 && (events & (EPOLLERR | EPOLLHUP)) != 0) {
        err = ECONNREFUSED;
    }
    if (err != 0) {
        epoll_ctl(van->sock.epfd, EPOLL_CTL_DEL, conn->fd, NULL);
        conn->in_epoll = 0;
        pthread_mutex_lock(&conn->send_lock);
        int fd = conn->fd;
        conn->fd = -1;
        pthread_mutex_unlock(&conn->send_lock);
        close(fd);
        conn_connect_failed(conn, err);
        return;
    }
    if (van->base.params.auth_enabled) {
        /* Job secret: stay CONNECTING (the queue held, the connect deadline
         * running) until the peer proved it; tcp_auth.c then calls
         * ps__tcp_conn_ready(). */
        if (ps__tcp_auth_start(conn) != PS_OK) {
            ps_warn(PS_LOG_TCP, "connection to node %d at %s failed right away", conn->peer_id,
                    conn->addr_str);
            ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
        }
        return;
    }
    ps__tcp_conn_ready(conn);
}

void ps__tcp_conn_ready(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    pthread_mutex_lock(&conn->send_lock);
    conn->state = PS__TCP_READY;
    ps__tcp_set_epoll(conn, 1);
    pthread_mutex_unlock(&conn->send_lock);
    van->num_connecting--;
    ps_info(PS_LOG_TCP, "connected to node %d at %s", conn->peer_id, conn->addr_str);
    ps_status_t st = ps__tcp_flush(conn);
    if (st != PS_OK) {
        ps_warn(PS_LOG_TCP, "connection to node %d at %s failed right away (%s)", conn->peer_id,
                conn->addr_str, ps_status_str(st));
        ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
    }
}

void ps__tcp_close_all(ps__tcp_van_t *van)
{
    ps_van_handover_link_t *to_start, *to_close, *l;
    (void)ps_van_handover_take(&van->handover, &to_start, &to_close);
    while ((l = ps_van_handover_pop(&to_start)) != NULL) {
        ps__tcp_conn_t *conn = PS_VAN_HANDOVER_OF(l, ps__tcp_conn_t, start_link);
        if (conn->state != PS__TCP_DEAD) {
            conn_link(van, conn);
        }
        ps__tcp_conn_unref(conn);
    }
    while ((l = ps_van_handover_pop(&to_close)) != NULL) {
        ps__tcp_conn_t *conn = PS_VAN_HANDOVER_OF(l, ps__tcp_conn_t, close_link);
        if (!conn->linked && conn->state != PS__TCP_DEAD) {
            conn_link(van, conn);
        }
        ps__tcp_conn_fail(conn, PS_OK, 0);
        ps__tcp_conn_unref(conn);
    }
    while (van->conns != NULL) {
        ps__tcp_conn_fail(van->conns, PS_OK, 0);
    }
}

/* The shorter of two timeouts in ms (-1: none). */
static int min_timeout(int a, int b)
{
    return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

int ps__tcp_run_timers(ps__tcp_van_t *van)
{
    int adm = ps_van_admission_timer(&van->sock.adm);
    if (van->hs_next_ns != 0) {
        uint64_t now = ps_time_now_ns();
        if (now >= van->hs_next_ns) {
            van->hs_next_ns = expire_handshakes(van, now);
        }
        if (van->hs_next_ns != 0) {
            adm = min_timeout(adm, ps_deadline_remaining_ms(ps_deadline_at_ns(van->hs_next_ns)));
        }
    }
    if (van->num_connecting == 0) {
        return adm;
    }
    uint64_t now = ps_time_now_ns();
    uint64_t next = UINT64_MAX;
    ps__tcp_conn_t *conn = van->conns;
    while (conn != NULL) {
        ps__tcp_conn_t *following = conn->next;
        if (conn->state == PS__TCP_CONNECTING) {
            if (now >= conn->connect_deadline_ns) {
                ps_error(PS_LOG_TCP, "cannot connect to node %d at %s: %s within %d ms (PS_CONNECT_TIMEOUT_MS)",
                         conn->peer_id, conn->addr_str, conn->fd < 0 ? "refused (nothing listening there?) on every try" : "no answer", van->base.params.connect_timeout_ms);
                ps__tcp_conn_fail(conn, PS_ERR_UNREACHABLE, 1);
            } else {
                if (conn->fd < 0 && now >= conn->retry_at_ns) {
                    conn_start_connect(conn);
                }
                if (conn->state == PS__TCP_CONNECTING) {
                    uint64_t at = conn->fd < 0 ? conn->retry_at_ns : conn->connect_deadline_ns;
                    if (at < next) {
                        next = at;
                    }
                }
            }
        }
        conn = following;
    }
    if (next == UINT64_MAX) {
        return adm;
    }
    return min_timeout(adm, ps_deadline_remaining_ms(ps_deadline_at_ns(next)));
}

/* ---- teardown ---- */

void ps__tcp_conn_fail(ps__tcp_conn_t *conn, ps_status_t why, int notify)
{
    ps__tcp_van_t *van = conn->van;
    if (conn->state == PS__TCP_DEAD) {
        return;
    }
    int id = conn->peer_id;
    int was_connecting = conn->state == PS__TCP_CONNECTING;
    ps__tcp_peer_remove_conn(van, conn, why);
    if (conn->in_epoll) {
        epoll_ctl(van->sock.epfd, EPOLL_CTL_DEL, conn->fd, NULL);
        conn->in_epoll = 0;
    }
    pthread_mutex_lock(&conn->send_lock);
    conn->state = PS__TCP_DEAD;
    int fd = conn->fd;
    conn->fd = -1;
    ps__tcp_entry_t *queue = ps__tcp_queue_take(conn);
    pthread_mutex_unlock(&conn->send_lock);
    if (fd >= 0) {
        close(fd);
    }
    ps__tcp_entries_free(van, queue);
    ps__tcp_rx_reset(conn);
    if (conn->admit_pending) {
        conn->admit_pending = 0;
        ps_van_admission_done(&van->sock.adm);
    }
    if (was_connecting && conn->linked) {
        van->num_connecting--;
    }
    /* Off the live list; the van's reference goes after this loop
     * iteration, when no epoll event of this round can point at it. */
    conn_unlink(van, conn);
    conn->next_grave = van->graveyard;
    van->graveyard = conn;

    if (!notify || why == PS_OK || id == PS_NODE_EMPTY) {
        return;
    }
    if (van->failing_peer == id) {
        return; /* a sibling drained below: the peer is being failed */
    }
    /* A peer is connected or it is not: its other streams go too, and the
     * postoffice hears about it once. */
    ps__tcp_conn_t *others[2 * PS__TCP_MAX_STREAMS];
    int n = 0;
    pthread_rwlock_rdlock(&van->sock.peers.lock);
    ps__tcp_peer_t *p = ps_van_peer_table_get(&van->sock.peers, id, 0);
    if (p != NULL) {
        for (int i = 0; i < p->num_out; ++i) {
            others[n++] = p->out[i];
        }
        for (int i = 0; i < p->num_in; ++i) {
            others[n++] = p->in[i];
        }
        for (int i = 0; i < n; ++i) {
            __atomic_add_fetch(&others[i]->refs, 1, __ATOMIC_RELAXED);
        }
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    /* What the peer sent on its other streams before this one broke is
     * still delivered (a peer that finished its work and exited must not
     * lose its last messages): read them dry first. */
    int outer = van->failing_peer;
    van->failing_peer = id;
    for (int i = 0; i < n; ++i) {
        if (others[i]->state == PS__TCP_READY) {
            ps__tcp_on_readable(others[i]);
        }
    }
    ps__tcp_run_ready(van); /* a striped frame completed by the drain */
    van->failing_peer = outer;
    for (int i = 0; i < n; ++i) {
        ps__tcp_conn_fail(others[i], why, 0);
        ps__tcp_conn_unref(others[i]);
    }
    /* Info, not a warning: the line saying why the connection ended came
     * first, and only the postoffice knows whether a peer leaving is a
     * failure (or the job finishing). */
    ps_info(PS_LOG_TCP, "lost node %d at %s (%s)", id, conn->addr_str, ps_status_str(why));
    if (van->base.cb.peer_failed != NULL) {
        van->base.cb.peer_failed(van->base.cb.arg, id, why);
    }
}

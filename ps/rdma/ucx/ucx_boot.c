/*
 * The UCX van's handshake socket. Every process listens on its node's
 * ip:port with a plain TCP socket of ps's own (not a UCX listener: UCX 1.13
 * crashes at cleanup after connections that never sent a request, and
 * gives ps no say over what a stranger may cost). A connection is opened
 * to the peer's port, carries the handshake records (ucx_hs.h: the
 * job-secret steps, HELLO, ACK) and is closed once the two ends hold each
 * other's worker addresses; the UCX endpoints are made from those
 * (ucx_conn.c).
 *
 * Accepted sockets are under the van base's admission control
 * (ps/net/van/admission.h): a cap on those that have not finished the
 * handshake, its deadline (ps__ucx_run_timers), the listener paused on
 * EMFILE. A socket's receive buffer grows only as bytes arrive, to one
 * record at most (PS__UCX_REC_MAX: two worker addresses).
 *
 * The listener and the sockets sit in an epoll set of their own
 * (van->bfd), which the progress loop sleeps on beside the workers' event
 * fds; ps__ucx_boot_poll() runs every PS__UCX_CTL_EVERY turns of the loop
 * and when the set woke it. All of it belongs to the progress thread,
 * bind() aside (before the thread accepts).
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
#include "ps/net/van/addr.h"
#include "ps/net/van/sock_core.h"
#include "ps/rdma/ucx/ucx_internal.h"

/* Events one poll takes at most. */
#define BOOT_EVENTS 64
/* The first receive buffer; it doubles as it fills. */
#define BOOT_RX_FIRST 256
/* Bytes close() reads and drops from a socket first, so that unread input
 * does not turn our last record into a reset. */
#define BOOT_DRAIN_MAX 16384

ps_status_t ps__ucx_boot_open(ps__ucx_van_t *van)
{
    van->boot_listen_fd = -1;
    van->bfd = epoll_create1(EPOLL_CLOEXEC);
    if (van->bfd < 0) {
        ps_error(PS_LOG_UCX, "epoll_create1: %m");
        return PS_ERR_NO_RESOURCE;
    }
    ps_van_admission_init(&van->adm, PS_LOG_UCX);
    return PS_OK;
}

void ps__ucx_boot_close(ps__ucx_van_t *van)
{
    if (van->boot_listen_fd >= 0) {
        close(van->boot_listen_fd);
        van->boot_listen_fd = -1;
    }
    if (van->bfd >= 0) {
        close(van->bfd);
        van->bfd = -1;
    }
}

/* ---- bind ---- */

typedef struct {
    ps_sockaddr_t addr;
    int fd;
} listen_try_t;

static ps_status_t listen_try(void *arg, int port, int random, char *where, size_t cap)
{
    (void)random;
    listen_try_t *t = arg;
    ps_van_listen_where(&t->addr, port, where, cap);
    return ps_van_ip_listen(&t->addr, where, PS_LOG_UCX, NULL, NULL, &t->fd);
}

ps_status_t ps__ucx_bind(ps_van_t *v, ps_node_t *node, int max_retry)
{
    ps__ucx_van_t *van = ps__ucx_of(v);
    if (node == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (__atomic_load_n(&van->boot_listen_fd, __ATOMIC_ACQUIRE) >= 0) {
        ps_error(PS_LOG_UCX, "bind: this van is already listening");
        return PS_ERR_BAD_STATE;
    }
    listen_try_t t = {.fd = -1};
    char where[PS_SOCKADDR_STRLEN];
    int port = 0;
    ps_status_t st = ps_van_listen_addr(node, van->base.params.bind_any, PS_LOG_UCX, &t.addr);
    if (st == PS_OK) {
        st = ps_van_listen_on_port(node, max_retry, van->base.params.is_scheduler, PS_LOG_UCX,
                                   listen_try, &t, NULL, &port, where, sizeof(where));
    }
    if (st != PS_OK) {
        return st;
    }
    /* Before epoll: the progress thread accepts through it. */
    ps_van_admission_listener(&van->adm, van->bfd, t.fd, &van->boot_listen_fd);
    if (ps_van_epoll_ctl(van->bfd, EPOLL_CTL_ADD, t.fd, EPOLLIN, &van->boot_listen_fd) != 0) {
        ps_error(PS_LOG_UCX, "bind: epoll_ctl for %s: %m", where);
        close(t.fd);
        return PS_ERR_NO_RESOURCE;
    }
    __atomic_store_n(&van->boot_listen_fd, t.fd, __ATOMIC_RELEASE);
    ps_van_listen_bound(node, port);
    ps_info(PS_LOG_UCX, "listening on %s", where);
    ps__ucx_wake(van); /* a loop asleep before bind() watches the listener now */
    return PS_OK;
}

/* ---- one connection's socket ---- */

static int boot_watch(ps__ucx_conn_t *conn, uint32_t events)
{
    return ps_van_epoll_ctl(conn->van->bfd, EPOLL_CTL_MOD, conn->boot_fd, events, conn);
}

void ps__ucx_boot_shut(ps__ucx_conn_t *conn)
{
    if (conn->boot_fd >= 0) {
        if (conn->btx_len > conn->btx_off) {
            /* The last record (ACK, REFUSED) leaves if the socket takes it. */
            (void)!send(conn->boot_fd, conn->btx + conn->btx_off, conn->btx_len - conn->btx_off,
                        MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        char sink[1024];
        size_t drained = 0;
        ssize_t n;
        while (drained < BOOT_DRAIN_MAX &&
               (n = recv(conn->boot_fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0) {
            drained += (size_t)n;
        }
        close(conn->boot_fd); /* also leaves the epoll set */
        conn->boot_fd = -1;
    }
    free(conn->brx);
    free(conn->btx);
    conn->brx = conn->btx = NULL;
    conn->brx_len = conn->brx_cap = conn->btx_off = conn->btx_len = 0;
    conn->boot_connecting = 0;
    conn->boot_linger = 0;
}

/* Writes what waits; 1 when all of it left, 0 when the socket is full, -1
 * on an error (errno). */
static int boot_flush(ps__ucx_conn_t *conn)
{
    while (conn->btx_off < conn->btx_len) {
        ssize_t n = send(conn->boot_fd, conn->btx + conn->btx_off, conn->btx_len - conn->btx_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            conn->btx_off += (uint32_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        } else {
            return -1;
        }
    }
    conn->btx_off = conn->btx_len = 0;
    return 1;
}

ps_status_t ps__ucx_boot_send(ps__ucx_conn_t *conn, int type, int node_id, uint32_t cookie,
                              uint64_t nonce, uint64_t seq0, const void *payload, size_t len)
{
    if (conn->boot_fd < 0) {
        return PS_ERR_BAD_STATE;
    }
    size_t rec = PS__UCX_REC_PREFIX + PS__UCX_HS_LEN + len;
    if (rec > PS__UCX_REC_MAX) {
        return PS_ERR_INVALID_ARG;
    }
    uint8_t *buf = realloc(conn->btx, conn->btx_len + rec);
    if (buf == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    conn->btx = buf;
    ps__ucx_rec_pack(buf + conn->btx_len, len, type, node_id, cookie, nonce, seq0);
    if (len != 0) {
        memcpy(buf + conn->btx_len + PS__UCX_REC_PREFIX + PS__UCX_HS_LEN, payload, len);
    }
    conn->btx_len += (uint32_t)rec;
    if (conn->boot_connecting) {
        return PS_OK; /* leaves once the socket is connected */
    }
    int r = boot_flush(conn);
    if (r < 0) {
        return ps_status_from_errno(errno);
    }
    if (r == 0 && boot_watch(conn, EPOLLIN | EPOLLOUT) != 0) {
        return PS_ERR_NO_RESOURCE;
    }
    return PS_OK;
}

void ps__ucx_boot_linger(ps__ucx_conn_t *conn)
{
    if (conn->btx_len == 0) {
        ps__ucx_boot_shut(conn);
    } else {
        conn->boot_linger = 1; /* shut once the rest has left */
    }
}

int ps__ucx_boot_connect(ps__ucx_conn_t *conn)
{
    ps__ucx_van_t *van = conn->van;
    int fd = socket(ps_sockaddr_family(&conn->addr), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return errno;
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conn->boot_fd = fd;
    conn->boot_connecting = 1;
    conn->boot_heard = 0;
    int err = 0;
    if (connect(fd, ps_sockaddr_sa(&conn->addr), conn->addr.len) != 0 && errno != EINPROGRESS) {
        err = errno; /* refused at once: nobody listens yet */
    } else if (ps_van_epoll_ctl(van->bfd, EPOLL_CTL_ADD, fd, EPOLLOUT, conn) != 0) {
        err = errno;
    }
    if (err != 0) {
        ps__ucx_boot_shut(conn);
    }
    return err;
}

/* The connection's socket is connected, or its connect failed. */
static void boot_connected(ps__ucx_conn_t *conn)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(conn->boot_fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
    }
    if (err != 0) {
        ps__ucx_conn_boot_lost(conn, err);
        return;
    }
    conn->boot_connecting = 0;
    if (boot_watch(conn, EPOLLIN) != 0) {
        ps__ucx_conn_boot_lost(conn, ENOMEM);
        return;
    }
    ps__ucx_conn_greet(conn);
}

/* Hands each whole record in the buffer to ucx_conn.c; 0 once the
 * connection was closed on the way. */
static int boot_records(ps__ucx_conn_t *conn)
{
    size_t off = 0;
    while (conn->boot_fd >= 0) {
        size_t total = 0;
        int r = ps__ucx_rec_complete(conn->brx + off, conn->brx_len - off, &total);
        if (r < 0) {
            ps_warn_ratelimited(PS_LOG_UCX, "malformed handshake record from %s; closing",
                                conn->addr_str);
            ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, conn->outgoing);
            return 0;
        }
        if (r == 0) {
            break;
        }
        const uint8_t *hs = conn->brx + off + PS__UCX_REC_PREFIX;
        off += total;
        ps__ucx_conn_on_record(conn, hs, total - PS__UCX_REC_PREFIX);
    }
    if (conn->boot_fd < 0) {
        return 0;
    }
    memmove(conn->brx, conn->brx + off, conn->brx_len - off);
    conn->brx_len -= (uint32_t)off;
    return 1;
}

static void boot_readable(ps__ucx_conn_t *conn)
{
    while (conn->boot_fd >= 0) {
        if (conn->brx_len == conn->brx_cap) {
            uint32_t cap = conn->brx_cap == 0 ? BOOT_RX_FIRST : conn->brx_cap * 2;
            if (cap > PS__UCX_REC_MAX) {
                cap = PS__UCX_REC_MAX;
            }
            uint8_t *buf = cap > conn->brx_cap ? realloc(conn->brx, cap) : NULL;
            if (buf == NULL) { /* full with no whole record cannot be: a bound */
                ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, conn->outgoing);
                return;
            }
            conn->brx = buf;
            conn->brx_cap = cap;
        }
        ssize_t n = recv(conn->boot_fd, conn->brx + conn->brx_len, conn->brx_cap - conn->brx_len,
                         MSG_DONTWAIT);
        if (n > 0) {
            conn->boot_heard = 1;
            conn->brx_len += (uint32_t)n;
            if (!boot_records(conn)) {
                return;
            }
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            ps__ucx_conn_boot_lost(conn, n == 0 ? 0 : errno);
            return;
        }
    }
}

static void boot_event(ps__ucx_conn_t *conn, uint32_t events)
{
    if (conn->boot_fd < 0 || conn->state == PS__UCX_DEAD) {
        return; /* closed by an earlier event of this poll */
    }
    if (conn->boot_connecting) {
        boot_connected(conn);
        return;
    }
    if ((events & EPOLLOUT) && conn->btx_len != 0) {
        int r = boot_flush(conn);
        if (r < 0) {
            ps__ucx_conn_boot_lost(conn, errno);
            return;
        }
        if (r == 1 && conn->boot_linger) {
            ps__ucx_boot_shut(conn);
            return;
        }
        if (r == 1 && boot_watch(conn, EPOLLIN) != 0) {
            ps__ucx_conn_boot_lost(conn, ENOMEM);
            return;
        }
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        boot_readable(conn);
    }
}

static int take_accepted(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
    ps__ucx_van_t *van = arg;
    ps__ucx_conn_t *conn = ps__ucx_conn_accepted(van, fd, sa, len);
    if (conn == NULL) {
        return -1;
    }
    if (ps_van_epoll_ctl(van->bfd, EPOLL_CTL_ADD, fd, EPOLLIN, conn) != 0) {
        ps__ucx_conn_fail(conn, PS_ERR_NO_RESOURCE, 0);
    }
    return 0;
}

int ps__ucx_boot_poll(ps__ucx_van_t *van)
{
    struct epoll_event ev[BOOT_EVENTS];
    int n = epoll_wait(van->bfd, ev, BOOT_EVENTS, 0);
    if (n <= 0) {
        return 0;
    }
    /* An event's connection may be closed, and let go, by an earlier one's
     * (a failed peer closes all its connections): each is held meanwhile. */
    for (int i = 0; i < n; ++i) {
        if (ev[i].data.ptr != &van->boot_listen_fd) {
            ps__ucx_conn_ref(ev[i].data.ptr);
        }
    }
    for (int i = 0; i < n; ++i) {
        if (ev[i].data.ptr == &van->boot_listen_fd) {
            ps_van_admission_each(&van->adm, NULL, take_accepted, van);
        } else {
            boot_event(ev[i].data.ptr, ev[i].events);
        }
    }
    for (int i = 0; i < n; ++i) {
        if (ev[i].data.ptr != &van->boot_listen_fd) {
            ps__ucx_conn_unref(ev[i].data.ptr);
        }
    }
    van->timer_scan_ns = 0; /* connections changed */
    return n;
}

/*
 * Channels of the shared-memory van: the rendezvous socket (bind), opening
 * a channel (connect), accepting one, the packets on its socket, and
 * tearing it down.
 *
 * Bootstrap. Every process listens on an abstract unix socket named after
 * the job id and its node's (host, port) — the scheduler's after
 * DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT — so the first ADD_NODE needs
 * nothing but the names every process of a job already knows. An abstract
 * name is dropped by the kernel with its socket, so a killed process leaves
 * nothing behind; it is private to a network namespace, so "reachable" here
 * means "same kernel and namespace" (what the composed van routes by).
 *
 * connect(peer) makes the channel memory (a memfd holding a ring each way),
 * connects and sends HELLO with the memfd; both ends then close the
 * descriptor, so the memory goes away with the last mapping. The acceptor
 * answers WELCOME. Who is at the other end is what the HELLO (and later ID
 * records) say; the kernel's SO_PEERCRED gives the peer's pid, which
 * process_vm_readv() needs.
 *
 * Failures. EOF or an error on the socket is the peer's death (or close):
 * what is left in the ring is read first, then the peer's channels close
 * and peer_failed() is called once. A broken record or packet closes the
 * channel with one log line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/shm/shm_internal.h"
#include "ps/net/shm/shm_seg.h"
#include "ps/net/van/addr.h"

/* Largest packet we expect (a HELLO). */
#define PKT_MAX 512

ps__shm_chan_t *ps__shm_chan_new(ps__shm_van_t *van, int outgoing)
{
    ps__shm_chan_t *ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        return NULL;
    }
    ch->handle.kind = PS__SHM_H_CHAN;
    ch->van = van;
    ch->refs = 1;
    ch->outgoing = outgoing;
    ch->peer_id = PS_NODE_EMPTY;
    ch->fd = -1;
    ch->state = outgoing ? PS__SHM_CH_READY : PS__SHM_CH_HANDSHAKE;
    ps_van_base_hs_init(&van->base, &ch->hs, "shm", outgoing);
    ch->tok_free = UINT32_MAX;
    ch->created_ns = ps_time_now_ns();
    pthread_mutex_init(&ch->tx_lock, NULL);
    pthread_mutex_init(&ch->ack_lock, NULL);
    ps_msg_init(&ch->rmsg);
    return ch;
}

static void chan_free(ps__shm_chan_t *ch)
{
    if (ch->fd >= 0) {
        close(ch->fd);
    }
    if (ch->mem != NULL) {
        munmap(ch->mem, ch->mem_len);
    }
    ps_msg_release(&ch->rmsg);
    free(ch->rmeta);
    free(ch->scratch);
    free(ch->tokens);
    free(ch->acks);
    ps__shm_idmap_clear(&ch->announced, NULL);
    pthread_mutex_destroy(&ch->tx_lock);
    pthread_mutex_destroy(&ch->ack_lock);
    free(ch);
}

void ps__shm_chan_unref(ps__shm_chan_t *ch)
{
    if (__atomic_sub_fetch(&ch->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        chan_free(ch);
    }
}

/* "node 9 (pid 123)" for log lines. */
static const char *chan_desc(const ps__shm_chan_t *ch, char *buf, size_t cap)
{
    if (ch->peer_id != PS_NODE_EMPTY) {
        snprintf(buf, cap, "node %d (pid %d)", ch->peer_id, (int)ch->peer_pid);
    } else {
        snprintf(buf, cap, "an unassigned node (pid %d)", (int)ch->peer_pid);
    }
    return buf;
}

void ps__shm_bell(ps__shm_chan_t *ch)
{
    if (ch->fd < 0) {
        return;
    }
    uint8_t b = PS__SHM_PKT_BELL;
    ssize_t r;
    do {
        r = send(ch->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    /* EAGAIN: the peer has unread packets, so it will look anyway. Other
     * errors show up as EOF on the progress thread. */
}

/* Sends a packet with at most one descriptor (tx_lock held). */
static ps_status_t send_pkt(ps__shm_chan_t *ch, const void *pkt, size_t len, int fd)
{
    if (ch->fd < 0) {
        return PS_ERR_PEER_GONE;
    }
    struct iovec iov = {.iov_base = (void *)pkt, .iov_len = len};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    ssize_t r;
    do {
        r = sendmsg(ch->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r == (ssize_t)len) {
        return PS_OK;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return PS_ERR_AGAIN;
    }
    return PS_ERR_PEER_GONE;
}

/* The SEG announcement (tx_lock held): the peer maps the segment before it
 * reads the record that names it (it drains its socket when it meets an
 * unknown segment, and this packet is queued there before the record is
 * published). */
ps_status_t ps__shm_announce(ps__shm_chan_t *ch, uint64_t id, uint64_t size, int fd)
{
    ps__shm_pkt_seg_t pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = PS__SHM_PKT_SEG;
    pkt.seg_id = id;
    pkt.size = size;
    return send_pkt(ch, &pkt, sizeof(pkt), fd);
}

/* ---- bind ---- */

typedef struct {
    ps__shm_van_t *van;
    const char *host;
    int fd;
} listen_try_t;

/* A listener's name is the job's, the host's and the port's (shm_job.c). */
static ps_status_t listen_try(void *arg, int port, int random, char *where, size_t cap)
{
    (void)random;
    listen_try_t *t = arg;
    snprintf(where, cap, "%s:%d", t->host, port);
    struct sockaddr_un addr;
    socklen_t alen;
    ps_status_t st = ps__shm_sock_addr(t->van->job, t->host, port, &addr, &alen);
    if (st != PS_OK) {
        ps_error(PS_LOG_SHM, "bind: no socket name for %s", where);
        return st;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ps_error(PS_LOG_SHM, "bind: socket(): %m");
        return ps_status_from_errno(errno);
    }
    st = ps_van_bind_listen(fd, (struct sockaddr *)&addr, alen, where, PS_LOG_SHM);
    if (st == PS_OK) {
        t->fd = fd;
    }
    return st;
}

ps_status_t ps__shm_bind(ps_van_t *v, ps_node_t *node, int max_retry)
{
    ps__shm_van_t *van = ps__shm_of(v);
    if (node == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_van_sock_may_bind(&van->sock);
    if (st != PS_OK) {
        return st;
    }
    listen_try_t t = {
        .van = van,
        .host = node->hostname[0] != '\0' ? node->hostname : "localhost",
        .fd = -1,
    };
    char taken[PS__SHM_JOB_MAX + 64];
    snprintf(taken, sizeof(taken), "another process of job '%s' on this host listens there",
             van->job);
    char where[PS_NODE_HOSTNAME_MAX + 8];
    int port = 0;
    st = ps_van_listen_on_port(node, max_retry, van->base.params.is_scheduler, PS_LOG_SHM,
                               listen_try, &t, taken, &port, where, sizeof(where));
    if (st != PS_OK) {
        return st;
    }
    snprintf(van->listen_host, sizeof(van->listen_host), "%s", t.host);
    van->listen_port = port;
    st = ps_van_sock_listen(&van->sock, t.fd, &van->listen_handle, where);
    if (st != PS_OK) {
        return st;
    }
    ps_van_listen_bound(node, port);
    ps_info(PS_LOG_SHM, "listening as %s (job '%s')", where, van->job);
    return PS_OK;
}

/* ---- connect ---- */

static ps_status_t on_welcome(ps__shm_chan_t *ch, const uint8_t *buf, size_t len);

static pid_t peer_pid_of(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        return 0;
    }
    return cred.pid;
}

/* Whether the process at the other end of fd may speak to us: without a
 * job secret, only one of our own user (abstract unix sockets have no
 * permissions: any local user can connect, or listen under a job's names);
 * with one, the handshake decides. Refusals are logged. */
static int peer_uid_ok(const ps__shm_van_t *van, int fd, const char *what)
{
    if (van->base.params.auth_enabled) {
        return 1;
    }
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        ps_warn_ratelimited(PS_LOG_SHM, "%s: SO_PEERCRED: %m; refused", what);
        return 0;
    }
    if (cred.uid != geteuid()) {
        ps_warn_ratelimited(PS_LOG_SHM, "%s: pid %d runs as uid %u, this process as uid %u; refused (PS_JOB_SECRET admits other users)",
                            what, (int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
        return 0;
    }
    return 1;
}

/* Reads the acceptor's answer during connect (flags: 0 to wait up to
 * SO_RCVTIMEO, MSG_DONTWAIT). An acceptor that refuses us sends its WELCOME
 * and closes; if our later packets (the proof, the HELLO) are still unread
 * in its queue then, the kernel marks our socket ECONNRESET, and recv
 * reports that error before the WELCOME that is queued for us. The error is
 * cleared by being reported, so one more look finds the answer. */
ssize_t ps__shm_recv_answer(int fd, void *buf, size_t cap, int flags)
{
    ssize_t got;
    do {
        got = recv(fd, buf, cap, flags);
    } while (got < 0 && errno == EINTR);
    if (got < 0 && errno == ECONNRESET) {
        do {
            got = recv(fd, buf, cap, MSG_DONTWAIT);
        } while (got < 0 && errno == EINTR);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            errno = ECONNRESET;
        }
    }
    return got;
}

/* A fresh memfd with both rings, mapped. */
static ps_status_t make_chan_mem(ps__shm_van_t *van, ps__shm_chan_t *ch, int *fd_p)
{
    char label[96];
    snprintf(label, sizeof(label), "ps-shm:%s:chan", van->job);
    size_t one = ps__shm_ring_bytes(van->ring_bytes);
    size_t len = 2 * one;
    int fd;
    ps_status_t st = ps__shm_memfd_new(label, len, &fd);
    if (st != PS_OK) {
        return st;
    }
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        ps_error(PS_LOG_SHM, "mmap of a channel's memory (%zu bytes): %m", len);
        close(fd);
        return PS_ERR_NO_MEMORY;
    }
    ps__shm_ring_init(mem, van->ring_bytes);
    ps__shm_ring_init((uint8_t *)mem + one, van->ring_bytes);
    /* Ring 0 carries connector -> acceptor, ring 1 the answers. */
    ps__shm_ring_attach(&ch->tx, mem, van->ring_bytes);
    ps__shm_ring_attach(&ch->rx, (uint8_t *)mem + one, van->ring_bytes);
    ch->mem = mem;
    ch->mem_len = len;
    *fd_p = fd;
    return PS_OK;
}

static ps_status_t shm_connect(ps__shm_van_t *van, const ps_node_t *peer, int my_id, int quiet)
{
    int port;
    ps_status_t pst = ps_van_peer_port(peer, PS_LOG_SHM, &port);
    if (pst != PS_OK) {
        return pst;
    }
    const char *host = peer->hostname[0] != '\0' ? peer->hostname : "localhost";

    /* Idempotent: a live channel of ours to the same place stays. */
    pthread_rwlock_rdlock(&van->sock.peers.lock);
    ps__shm_peer_t *p = ps_van_peer_table_get(&van->sock.peers, peer->id, 0);
    int have = p != NULL && p->out != NULL && p->out->peer_port == port &&
               strcmp(p->out->peer_host, host) == 0;
    pthread_rwlock_unlock(&van->sock.peers.lock);
    if (have) {
        return PS_OK;
    }

    struct sockaddr_un addr;
    socklen_t alen;
    ps_status_t st = ps__shm_sock_addr(van->job, host, port, &addr, &alen);
    if (st != PS_OK) {
        return st;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ps_error(PS_LOG_SHM, "connect: socket(): %m");
        return ps_status_from_errno(errno);
    }
    /* A listener with a full backlog makes connect() wait: bounded. */
    struct timeval tv = {.tv_sec = van->base.params.connect_timeout_ms / 1000,
                         .tv_usec = (van->base.params.connect_timeout_ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int r;
    do {
        r = connect(fd, (struct sockaddr *)&addr, alen);
    } while (r != 0 && errno == EINTR);
    if (r != 0) {
        int err = errno;
        close(fd);
        if (err == ECONNREFUSED || err == ENOENT) {
            if (!quiet) {
                ps_info(PS_LOG_SHM, "nobody listens as %s:%d in job '%s' on this host (node %d not started, elsewhere, or in another job)",
                        host, port, van->job, peer->id);
            }
            return PS_ERR_UNREACHABLE;
        }
        ps_error(PS_LOG_SHM, "cannot connect to node %d as %s:%d: %s", peer->id, host, port,
                 strerror(err));
        return err == EAGAIN || err == ETIMEDOUT ? PS_ERR_TIMED_OUT : PS_ERR_UNREACHABLE;
    }
    if (!peer_uid_ok(van, fd, "connect")) {
        close(fd);
        return PS_ERR_AUTH;
    }
    ps__shm_chan_t *ch = ps__shm_chan_new(van, 1);
    if (ch == NULL) {
        close(fd);
        return PS_ERR_NO_MEMORY;
    }
    ch->fd = fd;
    ch->peer_pid = peer_pid_of(fd);
    ch->peer_id = peer->id;
    ch->peer_port = port;
    snprintf(ch->peer_host, sizeof(ch->peer_host), "%s", host);
    ch->nonce = ps_van_random();
    int memfd = -1;
    st = make_chan_mem(van, ch, &memfd);
    if (st != PS_OK) {
        ps__shm_chan_unref(ch);
        return st;
    }
    ch->rx_ready = 1;

    /* Job secret (shm_auth.c): both sides proved before the HELLO. */
    if (van->base.params.auth_enabled) {
        st = ps__shm_auth_connect(ch, my_id != PS_NODE_EMPTY
                                          ? my_id
                                          : __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE));
        if (st != PS_OK) {
            close(memfd);
            ps__shm_chan_unref(ch);
            return st;
        }
    }

    ps__shm_pkt_hello_t hello;
    memset(&hello, 0, sizeof(hello));
    hello.type = PS__SHM_PKT_HELLO;
    hello.magic = PS__SHM_MAGIC;
    hello.version = PS__SHM_VERSION;
    hello.node_id = my_id != PS_NODE_EMPTY ? my_id : __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
    hello.nonce = ch->nonce;
    hello.ring_bytes = van->ring_bytes;
    hello.cookie_addr = (uint64_t)(uintptr_t)van->cookie;
    memcpy(hello.cookie, van->cookie, sizeof(hello.cookie));
    snprintf(hello.job, sizeof(hello.job), "%s", van->job);
    /* Blocking (the socket is fresh, its buffer empty). */
    struct iovec iov = {.iov_base = &hello, .iov_len = sizeof(hello)};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &memfd, sizeof(int));
    ssize_t sent;
    do {
        sent = sendmsg(fd, &mh, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    close(memfd);
    uint8_t answer[PKT_MAX];
    ssize_t got;
    if (sent != (ssize_t)sizeof(hello)) {
        int err = errno;
        /* An acceptor that refused our job-secret proof may have answered
         * and closed before our HELLO arrived: its verdict says more. */
        got = ps__shm_recv_answer(fd, answer, sizeof(answer), MSG_DONTWAIT);
        if (got <= 0 || answer[0] != PS__SHM_PKT_WELCOME) {
            ps_error(PS_LOG_SHM, "connect to node %d as %s:%d: sending the hello: %s", peer->id,
                     host, port, strerror(err));
            ps__shm_chan_unref(ch);
            return PS_ERR_PEER_GONE;
        }
    } else {
        /* The answer, synchronously: when connect() returns, the peer has
         * accepted us (or we know why not), and we know whether it can read
         * our memory. Its progress thread answers at once. */
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        got = ps__shm_recv_answer(fd, answer, sizeof(answer), 0);
    }
    if (got <= 0) {
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ps_error(PS_LOG_SHM, "connect to node %d as %s:%d: no answer within %d ms (PS_CONNECT_TIMEOUT_MS)",
                     peer->id, host, port, van->base.params.connect_timeout_ms);
            st = PS_ERR_TIMED_OUT;
        } else {
            ps_error(PS_LOG_SHM, "connect to node %d as %s:%d: it closed the channel", peer->id,
                     host, port);
            st = PS_ERR_PEER_GONE;
        }
        ps__shm_chan_unref(ch);
        return st;
    }
    st = answer[0] == PS__SHM_PKT_WELCOME ? on_welcome(ch, answer, (size_t)got) : PS_ERR_PROTOCOL;
    if (st == PS_OK) {
        st = ps__shm_auth_welcomed(ch); /* job secret: its verdict on the peer */
    }
    if (st != PS_OK) {
        ps__shm_chan_unref(ch);
        return st;
    }
    int flags = fcntl(fd, F_GETFL);
    (void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);

    ps__shm_chan_t *old = NULL;
    pthread_rwlock_wrlock(&van->sock.peers.lock);
    p = ps_van_peer_table_get(&van->sock.peers, peer->id, 1);
    if (p == NULL) {
        pthread_rwlock_unlock(&van->sock.peers.lock);
        ps__shm_chan_unref(ch);
        return PS_ERR_NO_MEMORY;
    }
    old = p->out;
    p->out = ch;
    ps_van_peer_connected(&p->hdr);
    pthread_rwlock_unlock(&van->sock.peers.lock);

    /* The start list takes our reference. The id moved (a restarted node
     * took it over): the old channel goes, with a reference of the close
     * list's. */
    ps_van_handover_link_t *to_start = &ch->start_link;
    ps_van_handover_link_t *to_close = old != NULL ? &old->close_link : NULL;
    if (old != NULL) {
        __atomic_add_fetch(&old->refs, 1, __ATOMIC_RELAXED);
    }
    ps_van_handover_put(&van->handover, &to_start, 1, &to_close, old != NULL);
    ps__shm_wake(van);
    ps_info(PS_LOG_SHM, "connected to node %d as %s:%d (pid %d)%s", peer->id, host, port,
            (int)ch->peer_pid, old != NULL ? ", replacing its old channel" : "");
    return PS_OK;
}

ps_status_t ps__shm_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    return shm_connect(ps__shm_of(v), peer, my_id, 0);
}

ps_status_t ps__shm_try_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    return shm_connect(ps__shm_of(v), peer, my_id, 1);
}

void ps__shm_disconnect(ps_van_t *v, int node_id)
{
    ps__shm_van_t *van = ps__shm_of(v);
    ps_van_handover_link_t *to_close[5];
    int n = 0;
    pthread_rwlock_wrlock(&van->sock.peers.lock);
    ps__shm_peer_t *p = ps_van_peer_table_get(&van->sock.peers, node_id, 0);
    if (p != NULL) {
        /* The close list holds a reference of its own on each. */
        for (int i = -1; i < p->num_in; ++i) {
            ps__shm_chan_t *ch = i < 0 ? p->out : p->in[i];
            if (ch != NULL) {
                __atomic_add_fetch(&ch->refs, 1, __ATOMIC_RELAXED);
                to_close[n++] = &ch->close_link;
            }
        }
        p->out = NULL;
        p->num_in = 0;
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    if (n > 0) {
        ps_van_handover_put(&van->handover, NULL, 0, to_close, n);
        ps__shm_wake(van);
        ps_info(PS_LOG_SHM, "disconnecting from node %d", node_id);
    }
}

/* ---- the progress thread's side ---- */

static ps_status_t chan_watch(ps__shm_van_t *van, ps__shm_chan_t *ch)
{
    uint32_t events = EPOLLIN | EPOLLRDHUP;
    if (ps_van_epoll_ctl(van->sock.epfd, EPOLL_CTL_ADD, ch->fd, events, &ch->handle) != 0) {
        ps_error(PS_LOG_SHM, "epoll_ctl for a channel: %m");
        return PS_ERR_NO_RESOURCE;
    }
    ch->in_epoll = 1;
    return PS_OK;
}

void ps__shm_take_pending(ps__shm_van_t *van)
{
    ps_van_handover_link_t *to_start, *to_close, *l;
    if (!ps_van_handover_take(&van->handover, &to_start, &to_close)) {
        return;
    }
    while ((l = ps_van_handover_pop(&to_start)) != NULL) {
        ps__shm_chan_t *ch = PS_VAN_HANDOVER_OF(l, ps__shm_chan_t, start_link);
        if (ch->state == PS__SHM_CH_DEAD || ps__shm_list_chan(van, ch) != PS_OK) {
            ps__shm_chan_fail(ch, PS_OK, 0);
            ps__shm_chan_unref(ch);
            continue;
        }
        /* The list holds the start list's reference now. */
        if (chan_watch(van, ch) != PS_OK) {
            ps__shm_chan_fail(ch, PS_ERR_NO_RESOURCE, 1);
        }
    }
    while ((l = ps_van_handover_pop(&to_close)) != NULL) {
        ps__shm_chan_t *ch = PS_VAN_HANDOVER_OF(l, ps__shm_chan_t, close_link);
        ps__shm_chan_fail(ch, PS_OK, 0);
        ps__shm_chan_unref(ch);
    }
}

/* A process of another user is refused before it counts against admission
 * (without the job secret). */
static int screen_uid(void *arg, int fd)
{
    if (peer_uid_ok(arg, fd, "accept")) {
        return 1;
    }
    /* Best effort: a ps connector reports why. */
    ps__shm_pkt_welcome_t w;
    memset(&w, 0, sizeof(w));
    w.type = PS__SHM_PKT_WELCOME;
    w.magic = PS__SHM_MAGIC;
    snprintf(w.reason, sizeof(w.reason), "it runs as another user (no PS_JOB_SECRET)");
    (void)send(fd, &w, sizeof(w), MSG_DONTWAIT | MSG_NOSIGNAL);
    close(fd);
    return 0;
}

static int take_accepted(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
    ps__shm_van_t *van = arg;
    (void)sa;
    (void)len;
    ps__shm_chan_t *ch = ps__shm_chan_new(van, 0);
    if (ch == NULL) {
        return -1;
    }
    ch->admit_pending = 1;
    ch->fd = fd;
    ch->peer_pid = peer_pid_of(fd);
    ps_van_hs_accept(&ch->hs); /* job secret: AUTH expected first */
    if (ps__shm_list_chan(van, ch) != PS_OK) {
        ps_van_admission_done(&van->sock.adm);
        ps__shm_chan_unref(ch);
        return 0;
    }
    if (chan_watch(van, ch) != PS_OK) {
        ps__shm_chan_fail(ch, PS_OK, 0);
        return 0;
    }
    ps_debug(PS_LOG_SHM, "accepted a channel from pid %d", (int)ch->peer_pid);
    return 0;
}

void ps__shm_accept_all(ps__shm_van_t *van)
{
    ps_van_admission_each(&van->sock.adm, screen_uid, take_accepted, van);
}

/* An accepted channel got its hello (or went away): no longer pending. */
static void chan_admitted(ps__shm_chan_t *ch)
{
    if (ch->admit_pending) {
        ch->admit_pending = 0;
        ps_van_admission_done(&ch->van->sock.adm);
    }
}

/* Whether we can read the peer's memory: its cookie, where it says. */
static int probe_cma(pid_t pid, uint64_t addr, const uint8_t *want)
{
    uint8_t got[PS__SHM_COOKIE_LEN];
    struct iovec local = {.iov_base = got, .iov_len = sizeof(got)};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = sizeof(got)};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n != (ssize_t)sizeof(got)) {
        ps_info(PS_LOG_SHM, "cannot read pid %d's memory (%s): large values to it are copied through the ring (one copy more)",
                (int)pid, n < 0 ? strerror(errno) : "short read");
        return 0;
    }
    return memcmp(got, want, sizeof(got)) == 0;
}

static void refuse(ps__shm_chan_t *ch, const char *why)
{
    ps__shm_pkt_welcome_t w;
    memset(&w, 0, sizeof(w));
    w.type = PS__SHM_PKT_WELCOME;
    w.magic = PS__SHM_MAGIC;
    w.accepted = 0;
    snprintf(w.reason, sizeof(w.reason), "%s", why);
    pthread_mutex_lock(&ch->tx_lock);
    (void)send_pkt(ch, &w, sizeof(w), -1);
    pthread_mutex_unlock(&ch->tx_lock);
}

static ps_status_t on_hello(ps__shm_chan_t *ch, const uint8_t *buf, size_t len, int fd)
{
    ps__shm_van_t *van = ch->van;
    char why[160];
    if (ch->outgoing || ch->state != PS__SHM_CH_HANDSHAKE) {
        ps_error(PS_LOG_SHM, "unexpected hello from pid %d; closing", (int)ch->peer_pid);
        return PS_ERR_PROTOCOL;
    }
    ps__shm_pkt_hello_t h;
    if (len != sizeof(h) || fd < 0) {
        ps_error(PS_LOG_SHM, "malformed hello from pid %d (%zu bytes%s); closing",
                 (int)ch->peer_pid, len, fd < 0 ? ", no memory" : "");
        return PS_ERR_PROTOCOL;
    }
    memcpy(&h, buf, sizeof(h));
    h.job[sizeof(h.job) - 1] = '\0';
    if (h.magic != PS__SHM_MAGIC || h.version != PS__SHM_VERSION) {
        snprintf(why, sizeof(why), "protocol version %u, this process speaks %u", h.version,
                 PS__SHM_VERSION);
        ps_error(PS_LOG_SHM, "refusing pid %d: %s", (int)ch->peer_pid, why);
        refuse(ch, why);
        return PS_ERR_PROTOCOL;
    }
    if (strcmp(h.job, van->job) != 0) {
        snprintf(why, sizeof(why), "it belongs to job '%s', this process to job '%s'", h.job,
                 van->job);
        ps_error(PS_LOG_SHM, "refusing pid %d: %s", (int)ch->peer_pid, why);
        refuse(ch, why);
        return PS_ERR_AUTH;
    }
    if (h.ring_bytes < 4096 || h.ring_bytes > (1ull << 30) ||
        (h.ring_bytes & (h.ring_bytes - 1)) != 0) {
        ps_error(PS_LOG_SHM, "hello from pid %d has a bad ring size %llu; closing",
                 (int)ch->peer_pid, (unsigned long long)h.ring_bytes);
        return PS_ERR_PROTOCOL;
    }
    if (h.node_id != PS_NODE_EMPTY && (h.node_id <= 0 || h.node_id >= PS_NODE_EMPTY)) {
        ps_error(PS_LOG_SHM, "hello from pid %d claims node id %d; closing", (int)ch->peer_pid,
                 h.node_id);
        return PS_ERR_PROTOCOL;
    }
    ps_status_t ast = ps__shm_auth_hello(ch, h.node_id); /* job secret: the id it proved under */
    if (ast != PS_OK) {
        return ast;
    }
    size_t one = ps__shm_ring_bytes(h.ring_bytes);
    const char *bad;
    if (ps__shm_memfd_check(fd, 2 * one, &bad) != PS_OK) {
        ps_error(PS_LOG_SHM, "the channel memory pid %d sent is %s; closing", (int)ch->peer_pid,
                 bad);
        return PS_ERR_PROTOCOL;
    }
    void *mem = mmap(NULL, 2 * one, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        ps_error(PS_LOG_SHM, "mapping the channel memory of pid %d: %m", (int)ch->peer_pid);
        return PS_ERR_NO_MEMORY;
    }
    ch->mem = mem;
    ch->mem_len = 2 * one;
    ps__shm_ring_attach(&ch->rx, mem, h.ring_bytes);
    int can_read = van->allow_cma && probe_cma(ch->peer_pid, h.cookie_addr, h.cookie);

    ps__shm_pkt_welcome_t w;
    memset(&w, 0, sizeof(w));
    w.type = PS__SHM_PKT_WELCOME;
    w.magic = PS__SHM_MAGIC;
    w.accepted = 1;
    w.can_read_you = (uint8_t)can_read;
    w.node_id = __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
    w.cookie_addr = (uint64_t)(uintptr_t)van->cookie;
    memcpy(w.cookie, van->cookie, sizeof(w.cookie));
    pthread_mutex_lock(&ch->tx_lock);
    ps__shm_ring_attach(&ch->tx, (uint8_t *)mem + one, h.ring_bytes);
    ch->state = PS__SHM_CH_READY;
    ps_status_t st = send_pkt(ch, &w, sizeof(w), -1);
    pthread_mutex_unlock(&ch->tx_lock);
    if (st != PS_OK) {
        ps_warn(PS_LOG_SHM, "cannot answer pid %d's hello (%s)", (int)ch->peer_pid,
                ps_status_str(st));
        return PS_ERR_PEER_GONE;
    }
    chan_admitted(ch);
    ch->nonce = h.nonce;
    ch->rx_ready = 1;
    if (h.node_id != PS_NODE_EMPTY) {
        st = ps__shm_peer_add_in(van, ch, h.node_id);
        if (st != PS_OK) {
            return st;
        }
        ps_info(PS_LOG_SHM, "node %d connected (pid %d)", h.node_id, (int)ch->peer_pid);
    } else {
        ps_info(PS_LOG_SHM, "unassigned node connected (pid %d)", (int)ch->peer_pid);
    }
    return PS_OK;
}

static ps_status_t on_welcome(ps__shm_chan_t *ch, const uint8_t *buf, size_t len)
{
    ps__shm_van_t *van = ch->van;
    ps__shm_pkt_welcome_t w;
    if (!ch->outgoing || len != sizeof(w)) {
        ps_error(PS_LOG_SHM, "unexpected welcome from pid %d; closing", (int)ch->peer_pid);
        return PS_ERR_PROTOCOL;
    }
    memcpy(&w, buf, sizeof(w));
    w.reason[sizeof(w.reason) - 1] = '\0';
    if (w.magic != PS__SHM_MAGIC) {
        ps_error(PS_LOG_SHM, "malformed welcome from pid %d; closing", (int)ch->peer_pid);
        return PS_ERR_PROTOCOL;
    }
    if (!w.accepted && w.pad == PS__SHM_REFUSED_AUTH) {
        return ps__shm_auth_refused(ch); /* job secret */
    }
    if (!w.accepted) {
        ps_error(PS_LOG_SHM, "node %d (pid %d) refused the channel: %s", ch->peer_id,
                 (int)ch->peer_pid, w.reason);
        return PS_ERR_PEER_REFUSED;
    }
    if (w.node_id != PS_NODE_EMPTY && w.node_id != ch->peer_id) {
        ps_error(PS_LOG_SHM, "channel to node %d: pid %d is node %d; closing", ch->peer_id,
                 (int)ch->peer_pid, w.node_id);
        return PS_ERR_PROTOCOL;
    }
    int can_read = van->allow_cma && probe_cma(ch->peer_pid, w.cookie_addr, w.cookie);
    pthread_mutex_lock(&ch->tx_lock);
    __atomic_store_n(&ch->tx_cma, van->allow_cma && w.can_read_you, __ATOMIC_RELEASE);
    if (can_read) {
        uint8_t ok = PS__SHM_PKT_CMA_OK;
        (void)send_pkt(ch, &ok, 1, -1);
    }
    pthread_mutex_unlock(&ch->tx_lock);
    ps_debug(PS_LOG_SHM, "node %d (pid %d) welcomed us; it %s read us, we %s read it",
             ch->peer_id, (int)ch->peer_pid, w.can_read_you ? "can" : "cannot",
             can_read ? "can" : "cannot");
    return PS_OK;
}

/* Handles one packet; the descriptor (if any) is consumed or closed. */
static ps_status_t on_packet(ps__shm_chan_t *ch, const uint8_t *buf, size_t len, int fd)
{
    ps_status_t st = PS_OK;
    /* Job secret (shm_auth.c): its packets, and nothing else from a
     * channel that has not finished it. */
    if (buf[0] == PS__SHM_PKT_AUTH || ps_van_hs_pending(&ch->hs)) {
        st = ch->outgoing ? PS_ERR_PROTOCOL : ps__shm_auth_on_packet(ch, buf, len);
        if (fd >= 0) {
            close(fd);
        }
        return st;
    }
    switch (buf[0]) {
    case PS__SHM_PKT_BELL:
        /* The peer made room (or wrote while we slept: the ring is polled
         * anyway). */
        if (ch->tx_blocked) {
            __atomic_store_n(&ch->want_flush, 1, __ATOMIC_RELEASE);
        }
        break;
    case PS__SHM_PKT_HELLO:
        st = on_hello(ch, buf, len, fd);
        break;
    case PS__SHM_PKT_CMA_OK:
        pthread_mutex_lock(&ch->tx_lock);
        __atomic_store_n(&ch->tx_cma, ch->van->allow_cma, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&ch->tx_lock);
        break;
    case PS__SHM_PKT_SEG: {
        ps__shm_pkt_seg_t s;
        if (len != sizeof(s) || fd < 0 || ch->state != PS__SHM_CH_READY) {
            ps_error(PS_LOG_SHM, "malformed segment announcement from pid %d; closing",
                     (int)ch->peer_pid);
            st = PS_ERR_PROTOCOL;
            break;
        }
        memcpy(&s, buf, sizeof(s));
        st = ps__shm_rx_add_segment(ch, s.seg_id, s.size, fd);
        fd = -1; /* taken over */
        break;
    }
    default:
        ps_error(PS_LOG_SHM, "unknown packet 0x%02x from pid %d; closing", buf[0],
                 (int)ch->peer_pid);
        st = PS_ERR_PROTOCOL;
        break;
    }
    if (fd >= 0) {
        close(fd);
    }
    return st;
}

/* Reads one packet: 1 read, 0 nothing there, -1 EOF or error (logged). */
static int read_packet(ps__shm_chan_t *ch, uint8_t *buf, size_t cap, size_t *len_p, int *fd_p)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    ssize_t n;
    do {
        n = recvmsg(ch->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    *fd_p = -1;
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return 0;
        }
        char d[64];
        ps_info(PS_LOG_SHM, "channel with %s: %m", chan_desc(ch, d, sizeof(d)));
        return -1;
    }
    /* Descriptors: keep the first, close any other. */
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; ++i) {
                int f;
                memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                if (*fd_p < 0) {
                    *fd_p = f;
                } else {
                    close(f);
                }
            }
        }
    }
    if (n == 0) {
        if (*fd_p >= 0) {
            close(*fd_p);
            *fd_p = -1;
        }
        return -1;
    }
    if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
        if (*fd_p >= 0) {
            close(*fd_p);
        }
        *fd_p = -1;
        char d[64];
        ps_error(PS_LOG_SHM, "oversized packet from %s; closing", chan_desc(ch, d, sizeof(d)));
        return -2;
    }
    *len_p = (size_t)n;
    return 1;
}

/* Drains the socket's packets; used by the receive path when a record
 * names a segment not seen yet. PS_OK, or why the channel must close. */
ps_status_t ps__shm_read_packets(ps__shm_chan_t *ch)
{
    uint8_t buf[PKT_MAX];
    for (;;) {
        if (ch->state == PS__SHM_CH_DEAD || ch->fd < 0) {
            return PS_ERR_PEER_GONE;
        }
        size_t len = 0;
        int fd = -1;
        int r = read_packet(ch, buf, sizeof(buf), &len, &fd);
        if (r == 0) {
            return PS_OK;
        }
        if (r < 0) {
            return r == -1 ? PS_ERR_PEER_GONE : PS_ERR_PROTOCOL;
        }
        ps_status_t st = on_packet(ch, buf, len, fd);
        if (st != PS_OK) {
            return st;
        }
    }
}

void ps__shm_on_socket(ps__shm_chan_t *ch, uint32_t events)
{
    (void)events;
    if (ch->state == PS__SHM_CH_DEAD) {
        return;
    }
    ps_status_t st = ps__shm_read_packets(ch);
    if (st == PS_OK || ch->state == PS__SHM_CH_DEAD) {
        return;
    }
    if (st == PS_ERR_PEER_GONE && ch->rx_ready) {
        /* What the peer wrote before it went is still there: read it. */
        while (ch->state != PS__SHM_CH_DEAD && ps__shm_rx_poll(ch, 1 << 20) > 0) {
        }
        if (ch->state == PS__SHM_CH_DEAD) {
            return;
        }
        char d[64];
        ps_info(PS_LOG_SHM, "%s closed its channel", chan_desc(ch, d, sizeof(d)));
    }
    ps__shm_chan_fail(ch, st, 1);
}

int ps__shm_run_timers(ps__shm_van_t *van)
{
    uint64_t now = ps_time_now_ns();
    uint64_t next = UINT64_MAX;
    int paused = __atomic_load_n(&van->sock.listen_fd, __ATOMIC_ACQUIRE) >= 0
                     ? ps_van_admission_timer(&van->sock.adm)
                     : -1;
    for (size_t i = 0; i < van->nchans; ++i) {
        ps__shm_chan_t *ch = van->chans[i];
        if (ch->state != PS__SHM_CH_HANDSHAKE) {
            continue;
        }
        /* Accepted channels: PS_HANDSHAKE_TIMEOUT_MS (admission.h). */
        int ms = ch->outgoing ? van->base.params.connect_timeout_ms : van->sock.adm.handshake_ms;
        uint64_t limit = (uint64_t)ms * PS_NSEC_PER_MSEC;
        if (now - ch->created_ns >= limit) {
            char who[32];
            snprintf(who, sizeof(who), "pid %d", (int)ch->peer_pid);
            ps_van_admission_expired(&van->sock.adm, who);
            ps__shm_chan_fail(ch, PS_ERR_TIMED_OUT, 0);
        } else if (ch->created_ns + limit < next) {
            next = ch->created_ns + limit;
        }
    }
    if (next == UINT64_MAX) {
        return paused;
    }
    int ms = ps_deadline_remaining_ms(ps_deadline_at_ns(next));
    return paused >= 0 && paused < ms ? paused : ms;
}

/* ---- teardown ---- */

void ps__shm_chan_fail(ps__shm_chan_t *ch, ps_status_t why, int notify)
{
    ps__shm_van_t *van = ch->van;
    if (ch->state == PS__SHM_CH_DEAD) {
        return;
    }
    int id = ch->peer_id;
    ps__shm_peer_remove_chan(van, ch, why);
    if (ch->in_epoll) {
        epoll_ctl(van->sock.epfd, EPOLL_CTL_DEL, ch->fd, NULL);
        ch->in_epoll = 0;
    }
    pthread_mutex_lock(&ch->tx_lock);
    ch->state = PS__SHM_CH_DEAD;
    int fd = ch->fd;
    ch->fd = -1;
    pthread_mutex_unlock(&ch->tx_lock);
    if (fd >= 0) {
        close(fd);
    }
    chan_admitted(ch);
    pthread_mutex_lock(&ch->ack_lock);
    ch->acks_closed = 1;
    __atomic_store_n(&ch->nacks, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ch->ack_lock);
    ps__shm_tx_drop(ch);
    ps__shm_rx_reset(ch);

    if (!notify || why == PS_OK || id == PS_NODE_EMPTY) {
        return;
    }
    /* A peer is there or it is not: its other channel goes too, and the
     * postoffice hears about it once. */
    ps__shm_chan_t *others[5];
    int n = 0;
    pthread_rwlock_rdlock(&van->sock.peers.lock);
    ps__shm_peer_t *p = ps_van_peer_table_get(&van->sock.peers, id, 0);
    if (p != NULL) {
        if (p->out != NULL) {
            others[n++] = p->out;
        }
        for (int i = 0; i < p->num_in; ++i) {
            others[n++] = p->in[i];
        }
        for (int i = 0; i < n; ++i) {
            __atomic_add_fetch(&others[i]->refs, 1, __ATOMIC_RELAXED);
        }
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    for (int i = 0; i < n; ++i) {
        /* What the peer wrote on its other channel before it went (the
         * answer it sent last, say) is delivered first. */
        while (others[i]->state != PS__SHM_CH_DEAD && others[i]->rx_ready &&
               ps__shm_rx_poll(others[i], 1 << 20) > 0) {
        }
        ps__shm_chan_fail(others[i], why, 0);
        ps__shm_chan_unref(others[i]);
    }
    ps_info(PS_LOG_SHM, "lost node %d (pid %d): %s", id, (int)ch->peer_pid, ps_status_str(why));
    if (van->base.cb.peer_failed != NULL) {
        van->base.cb.peer_failed(van->base.cb.arg, id, why);
    }
}

void ps__shm_close_all(ps__shm_van_t *van)
{
    ps__shm_take_pending(van);
    for (size_t i = 0; i < van->nchans; ++i) {
        ps__shm_chan_t *ch = van->chans[i];
        ps__shm_chan_fail(ch, PS_OK, 0);
        ch->listed = 0;
        ps__shm_chan_unref(ch);
    }
    van->nchans = 0;
}

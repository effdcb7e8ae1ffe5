/*
 * tcp_van_bench: the TCP van on its own, next to bare TCP sockets doing the
 * same work in the same run.
 *
 *   push      a sender streams N-byte messages to a receiver, which acks
 *             every few messages (the sender keeps a window in flight):
 *             goodput in Gbit/s and CPU seconds per GB moved.
 *   pingpong  8-byte (or --size) request, same-size reply: round-trip
 *             percentiles in microseconds.
 *   codec     the meta encode/decode every message pays (no network).
 *
 * Usage: tcp_van_bench [--van | --raw] [--mode push|pingpong|codec|all]
 *                      [--size N]... [--seconds S] [--iters N] [--busy]
 *                      [--fork] [--inline] [--host H] [--window W]
 *
 * Default: both the van and raw sockets, every mode, sizes 4 KB, 64 KB,
 * 1 MB, 4 MB for push and 8 B for ping-pong, in blocking and busy-poll
 * mode. --fork puts the receiver in a child process (else a second van or
 * thread in this one). --inline drives the van ping-pong from the progress
 * thread's callback instead of an application thread (no hand-off).
 * PS_TCP_SOCKBUF sets the van's socket buffers; the raw sockets use the
 * same value.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/van.h"

enum { MSG_PUSH = 1, MSG_ACK = 2, MSG_PING = 3, MSG_PONG = 4, MSG_STOP = 5 };

#define RECV_ID 8
#define SEND_ID 9
#define MAX_SIZES 16

typedef struct {
    int do_van, do_raw;
    int do_push, do_ping, do_codec;
    size_t sizes[MAX_SIZES];
    int num_sizes;
    size_t ping_size;
    double seconds;
    int iters;
    int busy_only, blocking_only;
    int fork_mode;
    int inline_mode;
    int app_block;
    int window;
    int repeat;
    const char *host;
    int sockbuf;
} opts_t;

static opts_t g_opts;

/* Set once a side stops its peer on purpose (lost peers are expected). */
static int g_stopping;

/* The last result, for --repeat summaries. */
static double g_last_value;
static double g_last_cpu;

static double now_s(void)
{
    return (double)ps_time_now_ns() / 1e9;
}

static double cpu_s(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void print_latency(const char *what, const char *mode, size_t size, uint64_t *ns, int n,
                          double cpu)
{
    qsort(ns, (size_t)n, sizeof(*ns), cmp_u64);
    double p50 = ns[n / 2] / 1e3, p90 = ns[(int)(n * 0.90)] / 1e3, p99 = ns[(int)(n * 0.99)] / 1e3;
    double p999 = ns[(int)(n * 0.999)] / 1e3, mx = ns[n - 1] / 1e3;
    g_last_value = p50;
    g_last_cpu = p99;
    printf("%-4s pingpong %-8s size %8zu  rtt_us p50 %8.1f p90 %8.1f p99 %8.1f p99.9 %8.1f max %8.1f  (%d rounds, cpu %.2f s)\n",
           what, mode, size, p50, p90, p99, p999, mx, n, cpu);
    fflush(stdout);
}

static void print_bw(const char *what, const char *mode, size_t size, uint64_t msgs, double secs,
                     double cpu)
{
    double bytes = (double)msgs * (double)size;
    double gbps = bytes * 8 / secs / 1e9;
    g_last_value = gbps;
    g_last_cpu = cpu / (bytes / 1e9);
    printf("%-4s push     %-8s size %8zu  %7.2f Gbit/s  %8.0f msg/s  cpu %.2f s/GB  (%llu msgs in %.2f s)\n",
           what, mode, size, gbps, (double)msgs / secs, cpu / (bytes / 1e9),
           (unsigned long long)msgs, secs);
    fflush(stdout);
}

static int window_for(size_t size)
{
    if (g_opts.window > 0) {
        return g_opts.window;
    }
    size_t w = (16u << 20) / (size ? size : 1);
    if (w < 4) {
        w = 4;
    }
    if (w > 256) {
        w = 256;
    }
    return (int)w;
}

/* ======================================================================
 * The van side
 * ====================================================================== */

typedef struct {
    const ps_van_ops_t *ops;
    ps_van_t *van;
    ps_node_t node;
    int busy;
    /* receiver */
    uint64_t received; /* atomic */
    int ack_every;
    int stop;          /* atomic */
    /* sender */
    uint64_t acked;    /* atomic */
    uint64_t pongs;    /* atomic */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;       /* atomic: an app thread sleeps on cv */
    /* inline ping-pong */
    uint64_t *rtt;
    int rtt_n, rtt_want;
    uint64_t t0;
    ps_slice_t ping;
} vside_t;

static void vside_signal(vside_t *s)
{
    if (__atomic_load_n(&s->waiting, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* Waits until *ctr >= target: spins in busy mode, sleeps otherwise. */
static void vside_wait_blocking(vside_t *s, uint64_t *ctr, uint64_t target);

static void vside_wait(vside_t *s, uint64_t *ctr, uint64_t target)
{
    if (s->busy && !g_opts.app_block) {
        /* Spin, but politely: on two cores the progress threads need them. */
        while (__atomic_load_n(ctr, __ATOMIC_ACQUIRE) < target) {
            sched_yield();
        }
        return;
    }
    vside_wait_blocking(s, ctr, target);
}

static void vside_wait_blocking(vside_t *s, uint64_t *ctr, uint64_t target)
{
    if (__atomic_load_n(ctr, __ATOMIC_ACQUIRE) >= target) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->waiting, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(ctr, __ATOMIC_SEQ_CST) < target) {
        pthread_cond_wait(&s->cv, &s->mu);
    }
    __atomic_store_n(&s->waiting, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
}

static void send_small(vside_t *s, int to, int head, uint64_t key, const ps_slice_t *data)
{
    ps_msg_t m;
    ps_msg_init(&m);
    m.meta.recver = to;
    m.meta.head = head;
    m.meta.key = key;
    if (data != NULL) {
        ps_msg_add_data(&m, data, PS_DATA_CHAR);
    }
    ps_status_t st = s->ops->send(s->van, &m);
    if (st != PS_OK) {
        fprintf(stderr, "send failed: %s\n", ps_status_str(st));
    }
    ps_msg_release(&m);
}

static void recv_deliver(void *arg, ps_msg_t *msg)
{
    vside_t *s = arg;
    switch (msg->meta.head) {
    case MSG_PUSH: {
        uint64_t n = __atomic_add_fetch(&s->received, 1, __ATOMIC_RELAXED);
        if (n % (uint64_t)s->ack_every == 0 || msg->meta.key != 0) {
            /* key != 0 asks for an ack right away (the last of a run). */
            send_small(s, msg->meta.sender, MSG_ACK, n, NULL);
        }
        break;
    }
    case MSG_PING:
        /* Echo the value back without copying it. */
        send_small(s, msg->meta.sender, MSG_PONG, msg->meta.key,
                   msg->num_data ? &msg->data[0] : NULL);
        break;
    case MSG_STOP:
        __atomic_store_n(&g_stopping, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        break;
    default:
        break;
    }
    ps_msg_release(msg);
}

static void send_deliver(void *arg, ps_msg_t *msg)
{
    vside_t *s = arg;
    if (msg->meta.head == MSG_ACK) {
        __atomic_store_n(&s->acked, msg->meta.key, __ATOMIC_SEQ_CST);
        vside_signal(s);
    } else if (msg->meta.head == MSG_PONG) {
        if (s->rtt != NULL && s->rtt_n < s->rtt_want) {
            /* Inline ping-pong: the next ping leaves from this callback. */
            uint64_t t = ps_time_now_ns();
            s->rtt[s->rtt_n++] = t - s->t0;
            if (s->rtt_n < s->rtt_want) {
                s->t0 = ps_time_now_ns();
                send_small(s, RECV_ID, MSG_PING, 0, &s->ping);
            }
        }
        __atomic_add_fetch(&s->pongs, 1, __ATOMIC_SEQ_CST);
        vside_signal(s);
    }
    ps_msg_release(msg);
}

static void peer_failed(void *arg, int node_id, ps_status_t why)
{
    (void)arg;
    if (!__atomic_load_n(&g_stopping, __ATOMIC_ACQUIRE)) {
        /* A crashed peer would leave us waiting for acks forever. */
        fprintf(stderr, "tcp_van_bench: lost node %d (%s) in the middle of a run\n", node_id,
                ps_status_str(why));
        _exit(1);
    }
}

static int vside_open(vside_t *s, int id, int busy, int receiver, int ack_every)
{
    memset(s, 0, sizeof(*s));
    s->ack_every = ack_every > 0 ? ack_every : 1; /* before the progress thread starts */
    const ps_van_component_t *c;
    if (ps_van_find("tcp", &c) != PS_OK) {
        return -1;
    }
    s->ops = c->ops;
    s->busy = busy;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    ps_van_params_t p;
    memset(&p, 0, sizeof(p));
    p.role = receiver ? PS_ROLE_SERVER : PS_ROLE_WORKER;
    p.busy_poll = busy;
    p.connect_timeout_ms = 10000;
    ps_van_callbacks_t cb = {0};
    memset(&cb, 0, sizeof(cb));
    cb.arg = s;
    cb.deliver = receiver ? recv_deliver : send_deliver;
    cb.peer_failed = peer_failed;
    if (s->ops->open(&p, &cb, &s->van) != PS_OK) {
        return -1;
    }
    ps_node_init(&s->node);
    s->node.id = id;
    snprintf(s->node.hostname, sizeof(s->node.hostname), "%s", g_opts.host);
    if (s->ops->bind(s->van, &s->node, 40) != PS_OK) {
        return -1;
    }
    return 0;
}

static void vside_close(vside_t *s)
{
    if (s->van != NULL) {
        s->ops->close(s->van);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

/* A receiver process that failed (a sanitizer report, a crash) fails the
 * run. */
static void check_child(int status)
{
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "tcp_van_bench: the receiving process failed (status 0x%x)\n", status);
        exit(1);
    }
}

/* The receiving side in a child process: reports its port through `fd`,
 * serves until STOP, then reports its CPU time. */
static void van_child(int fd, int busy, int ack_every)
{
    vside_t r;
    if (vside_open(&r, RECV_ID, busy, 1, ack_every) != 0) {
        _exit(2);
    }
    int port = r.node.ports[0];
    if (write(fd, &port, sizeof(port)) != sizeof(port)) {
        _exit(3);
    }
    pthread_mutex_lock(&r.mu);
    while (!__atomic_load_n(&r.stop, __ATOMIC_ACQUIRE)) {
        pthread_cond_wait(&r.cv, &r.mu);
    }
    pthread_mutex_unlock(&r.mu);
    vside_close(&r);
    _exit(0);
}

typedef struct {
    vside_t local;  /* receiver in this process (no fork) */
    pid_t child;
    ps_node_t peer;
} vpeer_t;

static int vpeer_start(vpeer_t *p, int busy, int ack_every)
{
    memset(p, 0, sizeof(*p));
    p->child = -1;
    ps_node_init(&p->peer);
    p->peer.id = RECV_ID;
    snprintf(p->peer.hostname, sizeof(p->peer.hostname), "%s", g_opts.host);
    p->peer.num_ports = 1;
    if (g_opts.fork_mode) {
        int pfd[2];
        if (pipe(pfd) != 0) {
            return -1;
        }
        p->child = fork();
        if (p->child == 0) {
            close(pfd[0]);
            van_child(pfd[1], busy, ack_every);
        }
        close(pfd[1]);
        int port = 0;
        if (read(pfd[0], &port, sizeof(port)) != sizeof(port)) {
            close(pfd[0]);
            return -1;
        }
        close(pfd[0]);
        p->peer.ports[0] = port;
        return 0;
    }
    if (vside_open(&p->local, RECV_ID, busy, 1, ack_every) != 0) {
        return -1;
    }
    p->peer.ports[0] = p->local.node.ports[0];
    return 0;
}

static double vpeer_stop(vpeer_t *p, vside_t *sender)
{
    __atomic_store_n(&g_stopping, 1, __ATOMIC_RELEASE);
    send_small(sender, RECV_ID, MSG_STOP, 0, NULL);
    double child_cpu = 0;
    if (p->child > 0) {
        int status;
        struct rusage ru;
        wait4(p->child, &status, 0, &ru);
        check_child(status);
        child_cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    } else {
        vside_close(&p->local);
    }
    return child_cpu;
}

static void van_push(size_t size, int busy)
{
    int window = window_for(size);
    int ack_every = window / 4 > 0 ? window / 4 : 1;
    vpeer_t peer;
    vside_t s;
    if (vpeer_start(&peer, busy, ack_every) != 0 || vside_open(&s, SEND_ID, busy, 0, 1) != 0 ||
        s.ops->connect(s.van, &peer.peer, SEND_ID) != PS_OK) {
        fprintf(stderr, "van push: setup failed\n");
        exit(1);
    }
    /* Rotate over enough buffers that the sender does not always read the
     * same cache-hot bytes. */
    int nbuf = (int)((64u << 20) / size);
    if (nbuf < 1) {
        nbuf = 1;
    }
    if (nbuf > 1024) {
        nbuf = 1024;
    }
    ps_slice_t *bufs = calloc((size_t)nbuf, sizeof(*bufs));
    for (int i = 0; i < nbuf; ++i) {
        ps_slice_alloc(size, 4096, &bufs[i]);
        memset(ps_slice_ptr(&bufs[i]), i, size);
    }
    uint64_t sent = 0;
    double warm = 0.3 * g_opts.seconds;
    double t_start = 0, cpu_start = 0;
    uint64_t sent_start = 0;
    double t0 = now_s();
    for (;;) {
        double t = now_s();
        if (t_start == 0 && t - t0 >= warm) {
            /* Measure from an acked point after the warm-up. */
            vside_wait(&s, &s.acked, sent - (sent % (uint64_t)ack_every));
            t_start = now_s();
            cpu_start = cpu_s(RUSAGE_SELF);
            sent_start = __atomic_load_n(&s.acked, __ATOMIC_ACQUIRE);
        }
        if (t_start != 0 && t - t_start >= g_opts.seconds) {
            break;
        }
        if (sent >= (uint64_t)window) {
            vside_wait(&s, &s.acked, sent - (uint64_t)window + 1);
        }
        ps_msg_t m;
        ps_msg_init(&m);
        m.meta.recver = RECV_ID;
        m.meta.head = MSG_PUSH;
        m.meta.key = 0;
        ps_msg_add_data(&m, &bufs[sent % (uint64_t)nbuf], PS_DATA_CHAR);
        if (s.ops->send(s.van, &m) != PS_OK) {
            fprintf(stderr, "van push: send failed\n");
            exit(1);
        }
        ps_msg_release(&m);
        sent++;
    }
    /* Count what was acknowledged, i.e. really received. */
    uint64_t acked_target = sent - (sent % (uint64_t)ack_every);
    vside_wait(&s, &s.acked, acked_target);
    double t_end = now_s();
    uint64_t done = __atomic_load_n(&s.acked, __ATOMIC_ACQUIRE) - sent_start;
    double cpu = cpu_s(RUSAGE_SELF) - cpu_start;
    double child_cpu = vpeer_stop(&peer, &s);
    vside_close(&s);
    __atomic_store_n(&g_stopping, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < nbuf; ++i) {
        ps_slice_unref(&bufs[i]);
    }
    free(bufs);
    /* In fork mode the child's CPU covers its whole life; say so by adding
     * it (it idles outside the measured window). */
    print_bw("van", busy ? "busy" : "blocking", size, done, t_end - t_start, cpu + child_cpu);
}

static void van_pingpong(size_t size, int busy)
{
    vpeer_t peer;
    vside_t s;
    if (vpeer_start(&peer, busy, 1) != 0 || vside_open(&s, SEND_ID, busy, 0, 1) != 0 ||
        s.ops->connect(s.van, &peer.peer, SEND_ID) != PS_OK) {
        fprintf(stderr, "van pingpong: setup failed\n");
        exit(1);
    }
    ps_slice_alloc(size, 0, &s.ping);
    memset(ps_slice_ptr(&s.ping), 7, size);
    int warm = g_opts.iters / 10 + 10;
    int n = g_opts.iters;
    uint64_t *rtt = calloc((size_t)n, sizeof(*rtt));
    /* Warm-up, application-driven. */
    for (int i = 0; i < warm; ++i) {
        send_small(&s, RECV_ID, MSG_PING, 0, &s.ping);
        vside_wait(&s, &s.pongs, (uint64_t)i + 1);
    }
    double cpu0 = cpu_s(RUSAGE_SELF);
    if (g_opts.inline_mode) {
        s.rtt_want = n;
        s.rtt_n = 0;
        __atomic_store_n(&s.rtt, rtt, __ATOMIC_RELEASE);
        s.t0 = ps_time_now_ns();
        send_small(&s, RECV_ID, MSG_PING, 0, &s.ping);
        /* The progress threads do all the work; this one sleeps. */
        vside_wait_blocking(&s, &s.pongs, (uint64_t)warm + (uint64_t)n);
    } else {
        for (int i = 0; i < n; ++i) {
            uint64_t t0 = ps_time_now_ns();
            send_small(&s, RECV_ID, MSG_PING, 0, &s.ping);
            vside_wait(&s, &s.pongs, (uint64_t)warm + (uint64_t)i + 1);
            rtt[i] = ps_time_now_ns() - t0;
        }
    }
    double cpu = cpu_s(RUSAGE_SELF) - cpu0;
    vpeer_stop(&peer, &s);
    ps_slice_unref(&s.ping);
    vside_close(&s);
    __atomic_store_n(&g_stopping, 0, __ATOMIC_RELEASE);
    char mode[32];
    snprintf(mode, sizeof(mode), "%s%s", busy ? "busy" : "blocking", g_opts.inline_mode ? "/inl" : "");
    print_latency("van", mode, size, rtt, n, cpu);
    free(rtt);
}

/* ======================================================================
 * Bare sockets: the same exchanges with writev/recv on one connection.
 * ====================================================================== */

typedef struct {
    uint32_t type;
    uint32_t pad;
    uint64_t len;
} raw_hdr_t;

static void raw_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (g_opts.sockbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &g_opts.sockbuf, sizeof(g_opts.sockbuf));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &g_opts.sockbuf, sizeof(g_opts.sockbuf));
    }
}

/* Reads exactly len bytes; spins on EAGAIN when busy (non-blocking fd). */
static int raw_read(int fd, void *p, size_t len, int busy)
{
    char *c = p;
    while (len > 0) {
        ssize_t n = recv(fd, c, len, busy ? MSG_DONTWAIT : MSG_WAITALL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (busy) {
                sched_yield();
            }
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

static int raw_writev(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        ssize_t n = writev(fd, iov, cnt);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        while (cnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

typedef struct {
    int lfd;
    int busy;
    int ack_every;
    size_t max_size;
} raw_server_t;

static void *raw_serve(void *arg)
{
    raw_server_t *sv = arg;
    int fd = accept(sv->lfd, NULL, NULL);
    if (fd < 0) {
        return NULL;
    }
    raw_tune(fd);
    if (sv->busy) {
        set_nonblock(fd);
    }
    char *buf = malloc(sv->max_size ? sv->max_size : 1);
    memset(buf, 0, sv->max_size ? sv->max_size : 1);
    uint64_t count = 0;
    for (;;) {
        raw_hdr_t h;
        if (raw_read(fd, &h, sizeof(h), sv->busy) != 0) {
            break;
        }
        if (h.len > sv->max_size || raw_read(fd, buf, h.len, sv->busy) != 0) {
            break;
        }
        if (h.type == MSG_PUSH) {
            ++count;
            if (count % (uint64_t)sv->ack_every == 0 || h.pad != 0) {
                raw_hdr_t a = {MSG_ACK, 0, count};
                struct iovec iov = {&a, sizeof(a)};
                raw_writev(fd, &iov, 1);
            }
        } else if (h.type == MSG_PING) {
            raw_hdr_t a = {MSG_PONG, 0, h.len};
            struct iovec iov[2] = {{&a, sizeof(a)}, {buf, h.len}};
            raw_writev(fd, iov, h.len ? 2 : 1);
        } else {
            break;
        }
    }
    free(buf);
    close(fd);
    return NULL;
}

/* The raw receiver: a thread here, or a child process with --fork. */
typedef struct {
    raw_server_t sv;
    pthread_t thread;
    pid_t child;
    int port;
} raw_peer_t;

static int raw_listen(int *port_p)
{
    ps_sockaddr_t a;
    if (ps_sockaddr_parse(g_opts.host, 0, &a) != PS_OK) {
        return -1;
    }
    int fd = socket(ps_sockaddr_family(&a), SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    raw_tune(fd);
    if (bind(fd, ps_sockaddr_sa(&a), a.len) != 0 || listen(fd, 4) != 0) {
        close(fd);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &len);
    ps_sockaddr_t b;
    ps_sockaddr_from_sa((struct sockaddr *)&ss, len, &b);
    *port_p = ps_sockaddr_port(&b);
    return fd;
}

static int raw_peer_start(raw_peer_t *p, int busy, int ack_every, size_t max_size)
{
    memset(p, 0, sizeof(*p));
    p->sv.busy = busy;
    p->sv.ack_every = ack_every;
    p->sv.max_size = max_size;
    p->sv.lfd = raw_listen(&p->port);
    if (p->sv.lfd < 0) {
        return -1;
    }
    if (g_opts.fork_mode) {
        p->child = fork();
        if (p->child == 0) {
            raw_serve(&p->sv);
            _exit(0);
        }
        close(p->sv.lfd);
        return 0;
    }
    return pthread_create(&p->thread, NULL, raw_serve, &p->sv);
}

static double raw_peer_stop(raw_peer_t *p, int fd)
{
    raw_hdr_t h = {MSG_STOP, 0, 0};
    struct iovec iov = {&h, sizeof(h)};
    raw_writev(fd, &iov, 1);
    close(fd);
    if (g_opts.fork_mode) {
        int status;
        struct rusage ru;
        wait4(p->child, &status, 0, &ru);
        check_child(status);
        return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    }
    pthread_join(p->thread, NULL);
    close(p->sv.lfd);
    return 0;
}

static int raw_connect(int port, int busy)
{
    ps_sockaddr_t a;
    if (ps_sockaddr_parse(g_opts.host, (uint16_t)port, &a) != PS_OK) {
        return -1;
    }
    ps_sockaddr_set_port(&a, (uint16_t)port);
    int fd = socket(ps_sockaddr_family(&a), SOCK_STREAM, 0);
    raw_tune(fd);
    if (connect(fd, ps_sockaddr_sa(&a), a.len) != 0) {
        close(fd);
        return -1;
    }
    if (busy) {
        set_nonblock(fd);
    }
    return fd;
}

static void raw_push(size_t size, int busy)
{
    int window = window_for(size);
    int ack_every = window / 4 > 0 ? window / 4 : 1;
    raw_peer_t peer;
    int fd;
    if (raw_peer_start(&peer, busy, ack_every, size) != 0 ||
        (fd = raw_connect(peer.port, busy)) < 0) {
        fprintf(stderr, "raw push: setup failed\n");
        exit(1);
    }
    int nbuf = (int)((64u << 20) / size);
    if (nbuf < 1) {
        nbuf = 1;
    }
    if (nbuf > 1024) {
        nbuf = 1024;
    }
    char **bufs = calloc((size_t)nbuf, sizeof(*bufs));
    for (int i = 0; i < nbuf; ++i) {
        if (posix_memalign((void **)&bufs[i], 4096, size) != 0) {
            exit(1);
        }
        memset(bufs[i], i, size);
    }
    uint64_t sent = 0, acked = 0;
    double warm = 0.3 * g_opts.seconds;
    double t_start = 0, cpu_start = 0;
    uint64_t acked_start = 0;
    double t0 = now_s();
    for (;;) {
        double t = now_s();
        if (t_start == 0 && t - t0 >= warm) {
            while (acked < sent - (sent % (uint64_t)ack_every)) {
                raw_hdr_t a;
                if (raw_read(fd, &a, sizeof(a), busy) != 0) {
                    exit(1);
                }
                acked = a.len;
            }
            t_start = now_s();
            cpu_start = cpu_s(RUSAGE_SELF);
            acked_start = acked;
        }
        if (t_start != 0 && t - t_start >= g_opts.seconds) {
            break;
        }
        while (sent >= (uint64_t)window && acked < sent - (uint64_t)window + 1) {
            raw_hdr_t a;
            if (raw_read(fd, &a, sizeof(a), busy) != 0) {
                exit(1);
            }
            acked = a.len;
        }
        raw_hdr_t h = {MSG_PUSH, 0, size};
        struct iovec iov[2] = {{&h, sizeof(h)}, {bufs[sent % (uint64_t)nbuf], size}};
        if (raw_writev(fd, iov, 2) != 0) {
            exit(1);
        }
        sent++;
    }
    while (acked < sent - (sent % (uint64_t)ack_every)) {
        raw_hdr_t a;
        if (raw_read(fd, &a, sizeof(a), busy) != 0) {
            exit(1);
        }
        acked = a.len;
    }
    double t_end = now_s();
    double cpu = cpu_s(RUSAGE_SELF) - cpu_start;
    double child_cpu = raw_peer_stop(&peer, fd);
    for (int i = 0; i < nbuf; ++i) {
        free(bufs[i]);
    }
    free(bufs);
    print_bw("raw", busy ? "busy" : "blocking", size, acked - acked_start, t_end - t_start,
             cpu + child_cpu);
}

static void raw_pingpong(size_t size, int busy)
{
    raw_peer_t peer;
    int fd;
    if (raw_peer_start(&peer, busy, 1, size) != 0 || (fd = raw_connect(peer.port, busy)) < 0) {
        fprintf(stderr, "raw pingpong: setup failed\n");
        exit(1);
    }
    char *buf = calloc(1, size ? size : 1);
    int warm = g_opts.iters / 10 + 10;
    int n = g_opts.iters;
    uint64_t *rtt = calloc((size_t)n, sizeof(*rtt));
    double cpu0 = 0;
    for (int i = -warm; i < n; ++i) {
        if (i == 0) {
            cpu0 = cpu_s(RUSAGE_SELF);
        }
        uint64_t t0 = ps_time_now_ns();
        raw_hdr_t h = {MSG_PING, 0, size};
        struct iovec iov[2] = {{&h, sizeof(h)}, {buf, size}};
        raw_writev(fd, iov, size ? 2 : 1);
        raw_hdr_t r;
        if (raw_read(fd, &r, sizeof(r), busy) != 0 || raw_read(fd, buf, r.len, busy) != 0) {
            exit(1);
        }
        if (i >= 0) {
            rtt[i] = ps_time_now_ns() - t0;
        }
    }
    double cpu = cpu_s(RUSAGE_SELF) - cpu0;
    raw_peer_stop(&peer, fd);
    print_latency("raw", busy ? "busy" : "blocking", size, rtt, n, cpu);
    free(rtt);
    free(buf);
}

/* ======================================================================
 * The meta codec alone: what every message pays on each side.
 * ====================================================================== */

static void codec_cost(void)
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.app_id = 0;
    m.customer_id = 0;
    m.timestamp = 12345;
    m.sender = 9;
    m.recver = 8;
    m.request = true;
    m.push = true;
    m.key = 1234567;
    m.num_data_types = 2;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_FLOAT;
    m.data_size = 4104;
    uint8_t buf[1024];
    size_t len = 0;
    const int n = 200000;
    uint64_t t0 = ps_time_now_ns();
    for (int i = 0; i < n; ++i) {
        m.timestamp = i;
        if (ps_meta_encode(&m, buf, sizeof(buf), &len) != PS_OK) {
            exit(1);
        }
    }
    uint64_t t1 = ps_time_now_ns();
    ps_meta_t out;
    for (int i = 0; i < n; ++i) {
        if (ps_meta_decode(buf, len, &out, NULL, 0) != PS_OK) {
            exit(1);
        }
    }
    uint64_t t2 = ps_time_now_ns();
    printf("codec    data meta of %zu bytes: encode %.2f us, decode %.2f us (mean of %d)\n", len,
           (double)(t1 - t0) / n / 1e3, (double)(t2 - t1) / n / 1e3, n);
    fflush(stdout);
}

/* ====================================================================== */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs raw and van alternately g_opts.repeat times; with repeats, prints
 * the medians (value and its companion: CPU s/GB, or p99). */
static void run_case(void (*raw)(size_t, int), void (*van)(size_t, int), size_t size, int busy,
                     const char *what, const char *unit, const char *unit2)
{
    double rv[64], rc[64], vv[64], vc[64];
    int n = g_opts.repeat < 64 ? g_opts.repeat : 64;
    for (int r = 0; r < n; ++r) {
        if (g_opts.do_raw) {
            raw(size, busy);
            rv[r] = g_last_value;
            rc[r] = g_last_cpu;
        }
        if (g_opts.do_van) {
            van(size, busy);
            vv[r] = g_last_value;
            vc[r] = g_last_cpu;
        }
    }
    if (n < 2) {
        return;
    }
    qsort(rv, (size_t)n, sizeof(double), cmp_double);
    qsort(rc, (size_t)n, sizeof(double), cmp_double);
    qsort(vv, (size_t)n, sizeof(double), cmp_double);
    qsort(vc, (size_t)n, sizeof(double), cmp_double);
    printf("== median of %d: %s %s size %zu:", n, what, busy ? "busy" : "blocking", size);
    if (g_opts.do_raw) {
        printf("  raw %.2f %s (%.2f %s)", rv[n / 2], unit, rc[n / 2], unit2);
    }
    if (g_opts.do_van) {
        printf("  van %.2f %s (%.2f %s)", vv[n / 2], unit, vc[n / 2], unit2);
    }
    if (g_opts.do_raw && g_opts.do_van) {
        printf("  van/raw %.2f", vv[n / 2] / rv[n / 2]);
    }
    printf("\n");
    fflush(stdout);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: tcp_van_bench [--van|--raw] [--mode push|pingpong|codec|all] [--size N]...\n"
            "                     [--seconds S] [--iters N] [--busy|--blocking] [--fork]\n"
            "                     [--inline] [--app-block] [--host H] [--window W]\n"
            "                     [--repeat R]\n");
    exit(2);
}

static size_t parse_size(const char *s)
{
    uint64_t v;
    if (ps_config_parse_size(s, &v) != PS_OK) {
        usage();
    }
    return (size_t)v;
}

int main(int argc, char **argv)
{
    g_opts.do_van = g_opts.do_raw = 1;
    g_opts.do_push = g_opts.do_ping = g_opts.do_codec = 1;
    g_opts.ping_size = 8;
    g_opts.seconds = 2;
    g_opts.iters = 20000;
    g_opts.host = "127.0.0.1";
    int explicit_size = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--van")) {
            g_opts.do_raw = 0;
        } else if (!strcmp(a, "--raw")) {
            g_opts.do_van = 0;
        } else if (!strcmp(a, "--mode") && next) {
            g_opts.do_push = !strcmp(next, "push") || !strcmp(next, "all");
            g_opts.do_ping = !strcmp(next, "pingpong") || !strcmp(next, "all");
            g_opts.do_codec = !strcmp(next, "codec") || !strcmp(next, "all");
            ++i;
        } else if (!strcmp(a, "--size") && next) {
            if (!explicit_size) {
                g_opts.num_sizes = 0;
                explicit_size = 1;
            }
            if (g_opts.num_sizes < MAX_SIZES) {
                g_opts.sizes[g_opts.num_sizes++] = parse_size(next);
            }
            g_opts.ping_size = parse_size(next);
            ++i;
        } else if (!strcmp(a, "--seconds") && next) {
            g_opts.seconds = atof(next);
            ++i;
        } else if (!strcmp(a, "--iters") && next) {
            g_opts.iters = atoi(next);
            ++i;
        } else if (!strcmp(a, "--busy")) {
            g_opts.busy_only = 1;
        } else if (!strcmp(a, "--blocking")) {
            g_opts.blocking_only = 1;
        } else if (!strcmp(a, "--fork")) {
            g_opts.fork_mode = 1;
        } else if (!strcmp(a, "--app-block")) {
            g_opts.app_block = 1;
        } else if (!strcmp(a, "--inline")) {
            g_opts.inline_mode = 1;
        } else if (!strcmp(a, "--host") && next) {
            g_opts.host = next;
            ++i;
        } else if (!strcmp(a, "--repeat") && next) {
            g_opts.repeat = atoi(next);
            ++i;
        } else if (!strcmp(a, "--window") && next) {
            g_opts.window = atoi(next);
            ++i;
        } else {
            usage();
        }
    }
    if (!explicit_size) {
        size_t def[] = {4096, 65536, 1u << 20, 4u << 20};
        for (size_t i = 0; i < sizeof(def) / sizeof(def[0]); ++i) {
            g_opts.sizes[g_opts.num_sizes++] = def[i];
        }
    }
    if (g_opts.iters < 10) {
        g_opts.iters = 10;
    }
    ps_config_id_t sockbuf_id;
    g_opts.sockbuf = ps_config_find("PS_TCP_SOCKBUF", &sockbuf_id) == PS_OK
                         ? (int)ps_config_size_or(sockbuf_id, 0)
                         : 0;
    printf("# tcp_van_bench host %s, %s, sockbuf %d, %.1f s per push run, %d ping-pong rounds\n",
           g_opts.host, g_opts.fork_mode ? "two processes" : "one process", g_opts.sockbuf,
           g_opts.seconds, g_opts.iters);
    if (g_opts.repeat < 1) {
        g_opts.repeat = 1;
    }
    if (g_opts.do_codec) {
        codec_cost();
    }
    for (int busy = 0; busy <= 1; ++busy) {
        if ((busy && g_opts.blocking_only) || (!busy && g_opts.busy_only)) {
            continue;
        }
        if (g_opts.do_push) {
            for (int i = 0; i < g_opts.num_sizes; ++i) {
                run_case(raw_push, van_push, g_opts.sizes[i], busy, "push", "Gbit/s", "s/GB");
            }
        }
        if (g_opts.do_ping) {
            size_t size = explicit_size ? g_opts.ping_size : 8;
            run_case(raw_pingpong, van_pingpong, size, busy, "pingpong", "us p50", "us p99");
        }
    }
    return 0;
}

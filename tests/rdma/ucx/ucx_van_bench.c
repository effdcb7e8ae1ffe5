/*
 * ucx_van_bench: the UCX van on its own (no postoffice), two processes on
 * loopback, for comparing with ucx_perftest on the same transport.
 *
 *   pingpong  a request of --size bytes (8), a reply of the same size;
 *             round-trip percentiles in microseconds. The server answers
 *             from its progress thread; the client's application thread
 *             sends and waits (as a KV worker does), or with --inline the
 *             client answers from its progress thread too (no hand-off).
 *             With --lane, every message of --size bytes or less (up to
 *             PS_LANE_MAX_PAYLOAD - 8) goes through the small lane
 *             (send_lane / deliver_lane: no meta, no frame) instead.
 *   push      the client streams --size-byte messages (4 MiB) with a
 *             window of 16 in flight; the server acks every one; MB/s.
 *
 *   ucx_van_bench [--mode pingpong|push] [--size N] [--iters N] [--busy] [--inline]
 *                 [--lane]
 *
 * UCX_TLS and the other UCX_* variables apply as usual.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ps/base/buffer.h"
#include "ps/base/endian.h"
#include "ps/base/time.h"
#include "ps/net/codec/lane.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/van.h"

#define SERVER_ID 8
#define CLIENT_ID 9
#define WINDOW 16

typedef struct {
    const ps_van_ops_t *ops;
    ps_van_t *van;
    int peer;
    size_t size;
    int inline_reply;
    int lane;           /* small messages through send_lane */
    uint64_t received;  /* atomic */
    uint64_t remaining; /* inline mode: round trips still to send */
    uint64_t *stamps;   /* inline mode: send times */
    uint64_t *rtts;
    uint64_t done;      /* atomic: inline round trips measured */
} side_t;

static side_t g;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;

/* One payload per size, sent again and again (zero copy, as a KV worker
 * pushes the same tensor buffer every round). */
static ps_slice_t g_payload[2];

/* A lane message: the lane header, the key, then size bytes. */
static int send_lane_msg(side_t *s, uint64_t key, size_t size)
{
    uint8_t buf[PS_LANE_VAN_HEADROOM + PS_LANE_MAX_BYTES] __attribute__((aligned(8)));
    uint8_t *bytes = buf + PS_LANE_VAN_HEADROOM;
    ps_lane_hdr_write(bytes, 0, 0);
    ps_put_le64(bytes + PS_LANE_HDR_LEN, key);
    memset(bytes + PS_LANE_HDR_LEN + 8, 0x5a, size);
    return s->ops->send_lane(s->van, s->peer, bytes, PS_LANE_HDR_LEN + 8 + size) == PS_OK ? 0
                                                                                        : -1;
}

static int send_msg(side_t *s, uint64_t key, size_t size)
{
    if (s->lane && size + PS_LANE_HDR_LEN + 8 <= PS_LANE_MAX_BYTES) {
        return send_lane_msg(s, key, size);
    }
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.recver = s->peer;
    msg.meta.key = key;
    ps_slice_t *pl = &g_payload[size > 64];
    if (pl->len != size) {
        ps_slice_unref(pl);
        if (ps_slice_alloc(size, 4096, pl) != PS_OK) {
            return -1;
        }
        memset(ps_slice_ptr(pl), 0x5a, size);
    }
    ps_msg_add_data(&msg, pl, PS_DATA_UINT8);
    int rc = s->ops->send(s->van, &msg) == PS_OK ? 0 : -1;
    ps_msg_release(&msg);
    return rc;
}

/* Message `key` of `len` bytes arrived (either way). */
static void on_message(side_t *s, uint64_t key, size_t len)
{
    if (s->peer == CLIENT_ID) {
        /* Server: answer at once; a zero-length key ends the run. */
        send_msg(s, key, len > 64 ? 8 : len);
        return;
    }
    if (__atomic_load_n(&s->inline_reply, __ATOMIC_ACQUIRE)) {
        uint64_t now = ps_time_now_ns();
        uint64_t i = __atomic_load_n(&s->done, __ATOMIC_RELAXED);
        s->rtts[i] = now - s->stamps[i];
        __atomic_store_n(&s->done, i + 1, __ATOMIC_RELEASE);
        if (i + 1 < s->remaining) {
            s->stamps[i + 1] = ps_time_now_ns();
            send_msg(s, i + 1, s->size);
        }
        return;
    }
    pthread_mutex_lock(&g_lock);
    __atomic_add_fetch(&s->received, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

static void on_deliver(void *arg, ps_msg_t *msg)
{
    uint64_t key = msg->meta.key;
    size_t len = msg->num_data > 0 ? msg->data[0].len : 0;
    ps_msg_release(msg);
    on_message(arg, key, len);
}

static void on_deliver_lane(void *arg, int sender, const uint8_t *bytes, size_t len)
{
    (void)sender;
    if (len < PS_LANE_HDR_LEN + 8) {
        return;
    }
    on_message(arg, ps_get_le64(bytes + PS_LANE_HDR_LEN), len - PS_LANE_HDR_LEN - 8);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static ps_status_t open_side(side_t *s, int id, int busy, ps_node_t *node)
{
    const ps_van_component_t *c;
    ps_status_t st = ps_van_find("ucx", &c);
    if (st != PS_OK) {
        return st;
    }
    s->ops = c->ops;
    ps_van_params_t p;
    memset(&p, 0, sizeof(p));
    p.role = id == SERVER_ID ? PS_ROLE_SERVER : PS_ROLE_WORKER;
    p.busy_poll = busy;
    p.connect_timeout_ms = 20000;
    ps_van_callbacks_t cb = {0};
    memset(&cb, 0, sizeof(cb));
    cb.arg = s;
    cb.deliver = on_deliver;
    cb.deliver_lane = on_deliver_lane;
    st = s->ops->open(&p, &cb, &s->van);
    if (st != PS_OK) {
        return st;
    }
    ps_node_init(node);
    node->id = id;
    snprintf(node->hostname, sizeof(node->hostname), "127.0.0.1");
    return s->ops->bind(s->van, node, 40);
}

/* Spins (busy-poll) or sleeps on a condition variable, as a KV worker's
 * wait does. */
static void wait_received(side_t *s, uint64_t n, int busy)
{
    if (busy) {
        while (__atomic_load_n(&s->received, __ATOMIC_ACQUIRE) < n) {
            sched_yield();
        }
        return;
    }
    pthread_mutex_lock(&g_lock);
    while (__atomic_load_n(&s->received, __ATOMIC_ACQUIRE) < n) {
        pthread_cond_wait(&g_cond, &g_lock);
    }
    pthread_mutex_unlock(&g_lock);
}

int main(int argc, char **argv)
{
    const char *mode = "pingpong";
    size_t size = 0;
    uint64_t iters = 20000;
    int busy = 0, inl = 0, lane = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            mode = argv[++i];
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            size = (size_t)atoll(argv[++i]);
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = (uint64_t)atoll(argv[++i]);
        } else if (strcmp(argv[i], "--busy") == 0) {
            busy = 1;
        } else if (strcmp(argv[i], "--inline") == 0) {
            inl = 1;
        } else if (strcmp(argv[i], "--lane") == 0) {
            lane = 1;
        } else {
            fprintf(stderr, "usage: %s [--mode pingpong|push] [--size N] [--iters N] [--busy] "
                    "[--inline] [--lane]\n", argv[0]);
            return 2;
        }
    }
    int push = strcmp(mode, "push") == 0;
    if (size == 0) {
        size = push ? 4u << 20 : 8;
    }
    int pfd[2], done_fd[2];
    if (pipe(pfd) != 0 || pipe(done_fd) != 0) {
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* The server: answers everything from its progress thread. */
        ps_node_t node;
        g.peer = CLIENT_ID;
        g.lane = lane;
        if (open_side(&g, SERVER_ID, busy, &node) != PS_OK) {
            _exit(3);
        }
        int port = node.ports[0];
        if (write(pfd[1], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
            _exit(4);
        }
        char x;
        if (read(done_fd[0], &x, 1) < 0) {
            _exit(5);
        }
        g.ops->close(g.van);
        _exit(0);
    }
    int port;
    if (read(pfd[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        return 1;
    }
    ps_node_t node, server;
    g.peer = SERVER_ID;
    g.size = size;
    g.lane = lane;
    if (open_side(&g, CLIENT_ID, busy, &node) != PS_OK) {
        return 1;
    }
    ps_node_init(&server);
    server.id = SERVER_ID;
    snprintf(server.hostname, sizeof(server.hostname), "127.0.0.1");
    server.num_ports = 1;
    server.ports[0] = port;
    if (g.ops->connect(g.van, &server, CLIENT_ID) != PS_OK) {
        return 1;
    }
    /* Warm up (connection, first messages). */
    for (int i = 0; i < 100; ++i) {
        send_msg(&g, (uint64_t)i, 8);
        wait_received(&g, (uint64_t)i + 1, busy);
    }
    g.received = 0;
    __atomic_store_n(&g.inline_reply, inl && !push, __ATOMIC_RELEASE);
    if (push) {
        uint64_t t0 = ps_time_now_ns();
        for (uint64_t i = 0; i < iters; ++i) {
            if (i >= WINDOW) {
                wait_received(&g, i - WINDOW + 1, busy);
            }
            send_msg(&g, i, size);
        }
        wait_received(&g, iters, busy);
        double s = (double)(ps_time_now_ns() - t0) / 1e9;
        printf("ucx van push %zu bytes x %llu, window %d, %s: %.0f MB/s (%.2f Gbit/s)\n", size,
               (unsigned long long)iters, WINDOW, busy ? "busy-poll" : "blocking",
               (double)size * (double)iters / s / 1e6, (double)size * (double)iters * 8 / s / 1e9);
    } else {
        uint64_t *rtt = calloc(iters, sizeof(*rtt));
        uint64_t *stamps = calloc(iters, sizeof(*stamps));
        if (rtt == NULL || stamps == NULL) {
            return 1;
        }
        if (g.inline_reply) {
            g.rtts = rtt;
            g.stamps = stamps;
            g.remaining = iters;
            stamps[0] = ps_time_now_ns();
            send_msg(&g, 0, size);
            while (__atomic_load_n(&g.done, __ATOMIC_ACQUIRE) < iters) {
                ps_sleep_ns(1000000); /* the progress thread does the work */
            }
        } else {
            for (uint64_t i = 0; i < iters; ++i) {
                uint64_t t0 = ps_time_now_ns();
                send_msg(&g, i, size);
                wait_received(&g, i + 1, busy);
                rtt[i] = ps_time_now_ns() - t0;
            }
        }
        qsort(rtt, iters, sizeof(*rtt), cmp_u64);
        printf("ucx van ping-pong %zu bytes%s, %s%s: median %.2f us, p99 %.2f us (%llu round "
               "trips)\n", size, lane ? " on the small lane" : "", busy ? "busy-poll" : "blocking",
               g.inline_reply ? ", answered inline" : ", application thread",
               rtt[iters / 2] / 1e3, rtt[iters * 99 / 100] / 1e3, (unsigned long long)iters);
        free(rtt);
        free(stamps);
    }
    g.ops->close(g.van);
    if (write(done_fd[1], "x", 1) != 1) {
        return 1;
    }
    int status;
    waitpid(pid, &status, 0);
    return 0;
}

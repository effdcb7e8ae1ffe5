/*
 * shm_van_bench: the shared-memory van on its own (no postoffice, no KV
 * app), between two processes.
 *
 *   shm_van_bench [--size N] [--iters N] [--busy] [--inline] [--van shm|ipc]
 *   shm_van_bench --push --size N [--iters N] [--window W] [--busy]
 *
 * A child process echoes every message; the parent sends N-byte messages
 * one at a time and reports the round trip in microseconds (p50 / p99).
 * By default the parent's main thread sends and waits (spinning on a flag
 * the progress thread sets, as an application thread waits for a reply);
 * --inline sends the next message from the progress thread's callback (no
 * hand-off between threads: the van's own cost). --busy turns on
 * busy-polling (PS_BUSY_POLL) in both processes.
 *
 * --push streams N-byte messages one way (the child answers each with 8
 * bytes; at most W, default 8, in flight) and reports Gbit/s and the CPU
 * seconds both processes spent per GB moved.
 */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/van.h"

static ps_van_t *g_van;
static const ps_van_ops_t *g_ops;
static int g_inline;
static int g_iters;
static size_t g_size;
static ps_slice_t g_payload;
static uint64_t g_got;      /* atomic: replies seen */
static uint64_t g_sent_ns;  /* inline mode: when the current ping left */
static double *g_us;
static int g_peer = 8;
static int g_measuring; /* atomic: the inline ping-pong runs */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void send_to(int to, uint64_t key, const ps_slice_t *data)
{
    ps_msg_t m;
    ps_msg_init(&m);
    m.meta.recver = to;
    m.meta.key = key;
    m.meta.request = true;
    ps_msg_add_data(&m, data, PS_DATA_CHAR);
    if (g_ops->send(g_van, &m) != PS_OK) {
        fprintf(stderr, "shm_van_bench: send failed\n");
        exit(1);
    }
    ps_msg_release(&m);
}

static int g_push;
static ps_slice_t g_small;

static void echo_deliver(void *arg, ps_msg_t *msg)
{
    (void)arg;
    send_to(msg->meta.sender, msg->meta.key, g_push ? &g_small : &msg->data[0]);
    ps_msg_release(msg);
}

static double cpu_s(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void client_deliver(void *arg, ps_msg_t *msg)
{
    (void)arg;
    uint64_t n = __atomic_load_n(&g_got, __ATOMIC_RELAXED) + 1;
    if (__atomic_load_n(&g_measuring, __ATOMIC_ACQUIRE)) {
        uint64_t t = now_ns();
        if (n <= (uint64_t)g_iters) {
            g_us[n - 1] = (double)(t - g_sent_ns) / 1000.0;
        }
        if (n < (uint64_t)g_iters) {
            g_sent_ns = now_ns();
            send_to(g_peer, n, &g_payload);
        }
    }
    __atomic_store_n(&g_got, n, __ATOMIC_RELEASE);
    ps_msg_release(msg);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void open_van(const char *name, int busy, void (*deliver)(void *, ps_msg_t *), int id,
                     ps_node_t *node)
{
    const ps_van_component_t *c;
    if (ps_van_find(name, &c) != PS_OK) {
        exit(1);
    }
    g_ops = c->ops;
    ps_van_params_t p;
    memset(&p, 0, sizeof(p));
    p.role = PS_ROLE_WORKER;
    p.busy_poll = busy;
    p.connect_timeout_ms = 10000;
    ps_van_callbacks_t cb = {.arg = NULL, .recv_buffer = NULL, .deliver = deliver,
                             .peer_failed = NULL};
    if (g_ops->open(&p, &cb, &g_van) != PS_OK) {
        exit(1);
    }
    ps_node_init(node);
    node->id = id;
    snprintf(node->hostname, sizeof(node->hostname), "127.0.0.1");
    node->num_ports = 1;
    if (g_ops->bind(g_van, node, 40) != PS_OK || g_ops->set_node_id(g_van, id) != PS_OK) {
        exit(1);
    }
}

int main(int argc, char **argv)
{
    const char *van = "shm";
    int busy = 0;
    int window = 8;
    g_size = 8;
    g_iters = 100000;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            g_size = (size_t)atol(argv[++i]);
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            g_iters = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--busy") == 0) {
            busy = 1;
        } else if (strcmp(argv[i], "--inline") == 0) {
            g_inline = 1;
        } else if (strcmp(argv[i], "--push") == 0) {
            g_push = 1;
        } else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc) {
            window = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--van") == 0 && i + 1 < argc) {
            van = argv[++i];
        } else {
            fprintf(stderr, "usage: shm_van_bench [--size N] [--iters N] [--busy] [--inline] [--van shm|ipc]\n");
            return 2;
        }
    }
    char job[64];
    snprintf(job, sizeof(job), "vanbench-%d", (int)getpid());
    ps_config_set(PS_CFG_PS_JOB_ID, job);
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        return 1;
    }
    if (ps_slice_alloc(8, 8, &g_small) != PS_OK) {
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        ps_node_t me;
        open_van(van, busy, echo_deliver, 8, &me);
        if (write(pipefd[1], &me.ports[0], sizeof(me.ports[0])) < 0) {
            _exit(1);
        }
        for (;;) {
            pause();
        }
    }
    int port = 0;
    if (read(pipefd[0], &port, sizeof(port)) != sizeof(port)) {
        return 1;
    }
    ps_node_t me, peer;
    open_van(van, busy, client_deliver, 9, &me);
    ps_node_init(&peer);
    peer.id = 8;
    snprintf(peer.hostname, sizeof(peer.hostname), "127.0.0.1");
    peer.num_ports = 1;
    peer.ports[0] = port;
    if (g_ops->connect(g_van, &peer, 9) != PS_OK) {
        return 1;
    }
    if (ps_slice_alloc(g_size, 64, &g_payload) != PS_OK) {
        return 1;
    }
    memset(ps_slice_ptr(&g_payload), 7, g_size);
    /* Warm-up: a few round trips. */
    for (int i = 0; i < 1000; ++i) {
        uint64_t want = __atomic_load_n(&g_got, __ATOMIC_ACQUIRE) + 1;
        send_to(8, 0, &g_payload);
        while (__atomic_load_n(&g_got, __ATOMIC_ACQUIRE) < want) {
            sched_yield();
        }
    }
    if (g_push) {
        __atomic_store_n(&g_got, 0, __ATOMIC_RELEASE);
        double cpu0 = cpu_s(RUSAGE_SELF);
        uint64_t t0 = now_ns();
        for (int i = 0; i < g_iters; ++i) {
            while (__atomic_load_n(&g_got, __ATOMIC_ACQUIRE) + (uint64_t)window <= (uint64_t)i) {
                sched_yield();
            }
            send_to(8, (uint64_t)i, &g_payload);
        }
        while (__atomic_load_n(&g_got, __ATOMIC_ACQUIRE) < (uint64_t)g_iters) {
            sched_yield();
        }
        double secs = (double)(now_ns() - t0) / 1e9;
        double cpu_parent = cpu_s(RUSAGE_SELF) - cpu0;
        kill(child, SIGKILL);
        struct rusage ru;
        wait4(child, NULL, 0, &ru);
        double cpu_child = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
        double gb = (double)g_size * g_iters / 1e9;
        printf("van %s push %zu bytes x %d: %.2f Gbit/s, cpu %.3f s/GB (sender %.3f, receiver %.3f)\n",
               van, g_size, g_iters, 8 * gb / secs, (cpu_parent + cpu_child) / gb,
               cpu_parent / gb, cpu_child / gb);
        g_ops->close(g_van);
        ps_slice_unref(&g_payload);
        ps_slice_unref(&g_small);
        return 0;
    }
    g_us = calloc((size_t)g_iters, sizeof(*g_us));
    __atomic_store_n(&g_got, 0, __ATOMIC_RELEASE);
    if (g_inline) {
        __atomic_store_n(&g_measuring, 1, __ATOMIC_RELEASE);
        g_sent_ns = now_ns();
        send_to(8, 0, &g_payload);
        while (__atomic_load_n(&g_got, __ATOMIC_ACQUIRE) < (uint64_t)g_iters) {
            usleep(1000);
        }
    } else {
        for (int i = 0; i < g_iters; ++i) {
            uint64_t t = now_ns();
            send_to(8, (uint64_t)i, &g_payload);
            unsigned spins = 0;
            while (__atomic_load_n(&g_got, __ATOMIC_ACQUIRE) <= (uint64_t)i) {
                if (++spins % 64 == 0) {
                    sched_yield();
                }
            }
            g_us[i] = (double)(now_ns() - t) / 1000.0;
        }
    }
    qsort(g_us, (size_t)g_iters, sizeof(*g_us), cmp_double);
    printf("van %s size %zu %s%s: round trip p50 %.2f us p99 %.2f us (%d)\n", van, g_size,
           busy ? "busy" : "blocking", g_inline ? " inline" : "", g_us[g_iters / 2],
           g_us[(size_t)(g_iters * 0.99)], g_iters);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    g_ops->close(g_van);
    ps_slice_unref(&g_payload);
    ps_slice_unref(&g_small);
    free(g_us);
    return 0;
}

/*
 * tcp_pingpong: the raw TCP round trip that ps's small-message latency
 * (test_benchmark mode 4) is compared with, measured in the same run.
 *
 *   tcp_pingpong [size=8] [iterations=20000] [--busy-poll] [--json] [--host ADDR]
 *
 * Forks: the child echoes, the parent sends `size` bytes and waits for them
 * back, `iterations` times after a warm-up, over loopback TCP with
 * TCP_NODELAY. Blocking mode sleeps in recv() like a thread that waits for
 * work; --busy-poll spins on non-blocking recv() in both processes, like
 * ps with PS_BUSY_POLL=1. Prints the median, p99 and mean round trip.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/bench/bench_stats.h"

#define WARMUP 1000

static int g_busy;

static int set_opts(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        return -1;
    if (g_busy && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        return -1;
    return 0;
}

static int xfer(int fd, char *buf, size_t len, int sending)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = sending ? send(fd, buf + done, len - done, MSG_NOSIGNAL)
                            : recv(fd, buf + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
        } else if (n == 0) {
            return -1;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

static int echo_loop(int lfd, size_t size)
{
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0 || set_opts(fd) != 0)
        return 1;
    char *buf = malloc(size);
    if (buf == NULL)
        return 1;
    while (xfer(fd, buf, size, 0) == 0) {
        if (xfer(fd, buf, size, 1) != 0)
            break;
    }
    free(buf);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    size_t size = 8;
    long iters = 20000;
    int json = 0, npos = 0;
    const char *host = "127.0.0.1";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--busy-poll") == 0) {
            g_busy = 1;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
            host = argv[++i];
        } else if (npos == 0) {
            size = (size_t)atol(argv[i]);
            npos++;
        } else if (npos == 1) {
            iters = atol(argv[i]);
            npos++;
        } else {
            fprintf(stderr, "usage: tcp_pingpong [size] [iterations] [--busy-poll] [--json] "
                            "[--host ADDR]\n");
            return 2;
        }
    }
    if (size == 0 || iters <= 0) {
        fprintf(stderr, "tcp_pingpong: size and iterations must be positive\n");
        return 2;
    }

    struct sockaddr_in addr = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "tcp_pingpong: bad IPv4 address %s\n", host);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t alen = sizeof(addr);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen) != 0) {
        fprintf(stderr, "tcp_pingpong: listen: %m\n");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "tcp_pingpong: fork: %m\n");
        return 1;
    }
    if (child == 0)
        _exit(echo_loop(lfd, size));
    close(lfd);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || set_opts(fd) != 0) {
        fprintf(stderr, "tcp_pingpong: connect: %m\n");
        kill(child, SIGKILL);
        return 1;
    }
    char *buf = calloc(1, size);
    bench_hist_t *h = malloc(sizeof(*h));
    if (buf == NULL || h == NULL) {
        kill(child, SIGKILL);
        return 1;
    }
    bench_hist_reset(h);
    int rc = 0;
    double cpu0 = 0;
    uint64_t start = 0;
    for (long i = 0; i < WARMUP + iters; i++) {
        if (i == WARMUP) {
            cpu0 = bench_cpu_seconds();
            start = bench_now_ns();
        }
        uint64_t t0 = bench_now_ns();
        if (xfer(fd, buf, size, 1) != 0 || xfer(fd, buf, size, 0) != 0) {
            fprintf(stderr, "tcp_pingpong: connection lost: %m\n");
            rc = 1;
            break;
        }
        if (i >= WARMUP)
            bench_hist_add(h, bench_now_ns() - t0);
    }
    double elapsed = (double)(bench_now_ns() - start) / 1e9;
    double cpu = bench_cpu_seconds() - cpu0;
    close(fd);
    waitpid(child, NULL, 0);
    if (rc == 0) {
        const char *mode = g_busy ? "busy-poll" : "blocking";
        printf("tcp ping-pong %zu bytes, %s: median %.2f us, p99 %.2f us, mean %.2f us "
               "(%" PRIu64 " round trips in %.2f s)\n",
               size, mode, (double)bench_hist_quantile(h, 0.5) / 1e3,
               (double)bench_hist_quantile(h, 0.99) / 1e3, bench_hist_mean(h) / 1e3, h->count,
               elapsed);
        if (json)
            printf("{\"bench\":\"tcp_pingpong\",\"size\":%zu,\"busy_poll\":%d,\"round_trips\":%"
                   PRIu64 ",\"lat_us_p50\":%.3f,\"lat_us_p99\":%.3f,\"lat_us_mean\":%.3f,"
                   "\"client_cpu_s\":%.3f}\n",
                   size, g_busy, h->count, (double)bench_hist_quantile(h, 0.5) / 1e3,
                   (double)bench_hist_quantile(h, 0.99) / 1e3, bench_hist_mean(h) / 1e3, cpu);
    }
    free(buf);
    free(h);
    return rc;
}

/*
 * shm_ref_bench: the reference figures the shared-memory van is compared
 * with, measured in the same run as the van's own figures.
 *
 *   shm_ref_bench memcpy [--mib 256] [--reps 5]
 *       copies a buffer of MiB mebibytes into another, reps times (after
 *       touching both): GB/s min / median / max.
 *   shm_ref_bench pingpong [--iters 200000]
 *       two processes spin on a flag in a shared page: one writes a
 *       sequence number, the other echoes it; round trip in microseconds,
 *       p50 / p99 / max (after a warm-up).
 *
 * Output: one line "memcpy_gbs min M med D max X" or
 * "pingpong_us p50 A p99 B max C".
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Through a pointer the compiler cannot see through: the copy happens. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;

static int run_memcpy(size_t mib, int reps)
{
    size_t len = mib << 20;
    char *a = malloc(len), *b = malloc(len);
    if (a == NULL || b == NULL || reps < 1) {
        fprintf(stderr, "shm_ref_bench: cannot allocate 2 x %zu MiB\n", mib);
        return 1;
    }
    memset(a, 1, len);
    memset(b, 2, len);
    double *gbs = calloc((size_t)reps, sizeof(*gbs));
    for (int r = 0; r < reps; ++r) {
        uint64_t t = now_ns();
        copy_fn(b, a, len);
        gbs[r] = (double)len / (double)(now_ns() - t);
    }
    qsort(gbs, (size_t)reps, sizeof(*gbs), cmp_double);
    printf("memcpy_gbs min %.2f med %.2f max %.2f (%zu MiB, %d copies, check %d)\n", gbs[0],
           gbs[reps / 2], gbs[reps - 1], mib, reps, b[len / 2]);
    free(gbs);
    free(a);
    free(b);
    return 0;
}

static int run_pingpong(int iters)
{
    volatile uint64_t *flags = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                    -1, 0);
    if (flags == MAP_FAILED || iters < 1) {
        return 1;
    }
    /* ping at 0, pong a cache line away */
    volatile uint64_t *ping = flags, *pong = flags + 8;
    int warm = iters / 10 + 1000;
    pid_t pid = fork();
    if (pid == 0) {
        for (uint64_t seq = 1; seq <= (uint64_t)(warm + iters); ++seq) {
            while (__atomic_load_n(ping, __ATOMIC_ACQUIRE) != seq) {
            }
            __atomic_store_n(pong, seq, __ATOMIC_RELEASE);
        }
        _exit(0);
    }
    double *us = calloc((size_t)iters, sizeof(*us));
    for (uint64_t seq = 1; seq <= (uint64_t)(warm + iters); ++seq) {
        uint64_t t = now_ns();
        __atomic_store_n(ping, seq, __ATOMIC_RELEASE);
        while (__atomic_load_n(pong, __ATOMIC_ACQUIRE) != seq) {
        }
        if (seq > (uint64_t)warm) {
            us[seq - (uint64_t)warm - 1] = (double)(now_ns() - t) / 1000.0;
        }
    }
    waitpid(pid, NULL, 0);
    qsort(us, (size_t)iters, sizeof(*us), cmp_double);
    printf("pingpong_us p50 %.3f p99 %.3f max %.3f (%d round trips)\n", us[iters / 2],
           us[(size_t)((double)iters * 0.99)], us[iters - 1], iters);
    free(us);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: shm_ref_bench memcpy [--mib N] [--reps N] | pingpong [--iters N]\n");
        return 2;
    }
    size_t mib = 256;
    int reps = 5, iters = 200000;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mib") == 0) {
            mib = (size_t)atol(argv[i + 1]);
        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--iters") == 0) {
            iters = atoi(argv[i + 1]);
        }
    }
    if (strcmp(argv[1], "memcpy") == 0) {
        return run_memcpy(mib, reps);
    }
    if (strcmp(argv[1], "pingpong") == 0) {
        return run_pingpong(iters);
    }
    fprintf(stderr, "shm_ref_bench: unknown mode %s\n", argv[1]);
    return 2;
}

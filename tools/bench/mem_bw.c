/*
 * Copy bandwidth of a memory kind through its ops table (ps/gpu/mem.h): the
 * references that staged device traffic is compared to. For CUDA each slot
 * is one cudaMemcpy / cudaMemcpyAsync, so these are cudaMemcpy's figures.
 *
 *   mem_bw KIND [-r REPS] [BYTES...]     KIND: cuda | emu | host
 *
 * For each size (default 4 KiB, 1 MiB, 4 MiB) prints the median over REPS
 * (default 20) of: device to pageable host, device to pinned host, pinned
 * host to device, device to device, and device to pinned host in 4 chunks
 * on 2 streams (what a pipelined stage can reach). Every copy's bytes are
 * checked once. Exit status 0 when every copy succeeded and checked out.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/time.h"
#include "ps/gpu/mem.h"

#define MAX_REPS 200
#define CHUNKS 4

static const ps_mem_ops_t *ops;
static int reps = 20;

static int fail(const char *what, ps_status_t st)
{
    fprintf(stderr, "mem_bw: %s failed: %s\n", what, ps_status_str(st));
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double gbps(size_t bytes, uint64_t *ns, int n)
{
    qsort(ns, (size_t)n, sizeof(*ns), cmp_u64);
    uint64_t med = n % 2 ? ns[n / 2] : (ns[n / 2 - 1] + ns[n / 2]) / 2;
    return med == 0 ? 0 : (double)bytes / (double)med;
}

/* Device to pinned host in CHUNKS pieces over two streams, waited on. */
static ps_status_t chunked_to_host(void *host, const void *dev, size_t len, void *streams[2],
                                   ps_mem_event_h events[2])
{
    size_t chunk = (len + CHUNKS - 1) / CHUNKS;
    ps_status_t st = PS_OK;
    for (size_t off = 0, i = 0; off < len && st == PS_OK; off += chunk, i++) {
        size_t n = len - off < chunk ? len - off : chunk;
        st = ops->copy_async((char *)host + off, (const char *)dev + off, n, streams[i % 2]);
    }
    for (int s = 0; s < 2 && st == PS_OK; s++)
        st = ops->event_record(events[s], streams[s]);
    for (int s = 0; s < 2 && st == PS_OK; s++)
        st = ps_mem_event_wait(events[s], 10000);
    return st;
}

static int measure(size_t len)
{
    ps_status_t st;
    void *dev, *dev2, *pinned, *pageable = malloc(len), *streams[2];
    ps_mem_event_h events[2];
    uint64_t ns[5][MAX_REPS];
    unsigned char *want = malloc(len);
    if (pageable == NULL || want == NULL || posix_memalign(&pinned, 4096, len) != 0)
        return fail("host allocation", PS_ERR_NO_MEMORY);
    for (size_t i = 0; i < len; i++)
        want[i] = (unsigned char)(i * 131 + len);
    memset(pageable, 0, len);
    memset(pinned, 0, len);
    if ((st = ops->alloc(len, 0, &dev)) != PS_OK || (st = ops->alloc(len, 0, &dev2)) != PS_OK)
        return fail("device allocation", st);
    if ((st = ops->register_host(pinned, len)) != PS_OK && st != PS_ERR_UNSUPPORTED)
        return fail("register_host", st);
    for (int s = 0; s < 2; s++) {
        if ((st = ops->stream_create(0, &streams[s])) != PS_OK ||
            (st = ops->event_create(0, &events[s])) != PS_OK)
            return fail("stream or event", st);
    }
    if ((st = ops->copy_from_host(dev, want, len)) != PS_OK)
        return fail("copy_from_host", st);

    for (int r = 0; r < reps; r++) {
        uint64_t t0 = ps_time_now_ns();
        if ((st = ops->copy_to_host(pageable, dev, len)) != PS_OK)
            return fail("copy_to_host (pageable)", st);
        uint64_t t1 = ps_time_now_ns();
        if ((st = ops->copy_to_host(pinned, dev, len)) != PS_OK)
            return fail("copy_to_host (pinned)", st);
        uint64_t t2 = ps_time_now_ns();
        if ((st = ops->copy_from_host(dev2, pinned, len)) != PS_OK)
            return fail("copy_from_host (pinned)", st);
        uint64_t t3 = ps_time_now_ns();
        if ((st = ops->copy(dev2, dev, len)) != PS_OK)
            return fail("copy (device to device)", st);
        uint64_t t4 = ps_time_now_ns();
        if ((st = chunked_to_host(pinned, dev, len, streams, events)) != PS_OK)
            return fail("chunked copy_async", st);
        uint64_t t5 = ps_time_now_ns();
        ns[0][r] = t1 - t0, ns[1][r] = t2 - t1, ns[2][r] = t3 - t2;
        ns[3][r] = t4 - t3, ns[4][r] = t5 - t4;
        if (r == 0) {
            if (memcmp(pageable, want, len) != 0 || memcmp(pinned, want, len) != 0)
                return fail("the copied bytes", PS_ERR_BAD_STATE);
            memset(pageable, 0, len);
            if ((st = ops->copy_to_host(pageable, dev2, len)) != PS_OK ||
                memcmp(pageable, want, len) != 0)
                return fail("the device-to-device bytes", st == PS_OK ? PS_ERR_BAD_STATE : st);
        }
    }
    printf("%9zu bytes: d2h pageable %6.2f  d2h pinned %6.2f  h2d pinned %6.2f  d2d %7.2f  "
           "d2h %d chunks/2 streams %6.2f GB/s\n",
           len, gbps(len, ns[0], reps), gbps(len, ns[1], reps), gbps(len, ns[2], reps),
           gbps(len, ns[3], reps), CHUNKS, gbps(len, ns[4], reps));
    for (int s = 0; s < 2; s++) {
        ops->event_destroy(events[s]);
        ops->stream_destroy(streams[s]);
    }
    ops->unregister_host(pinned);
    ops->free(dev);
    ops->free(dev2);
    free(pinned);
    free(pageable);
    free(want);
    return 0;
}

int main(int argc, char **argv)
{
    ps_mem_kind_t kind;
    size_t sizes[16];
    int nsizes = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: mem_bw cuda|emu|host [-r REPS] [BYTES...]\n");
        return 2;
    }
    if (strcmp(argv[1], "cuda") == 0)
        kind = PS_MEM_CUDA;
    else if (strcmp(argv[1], "emu") == 0)
        kind = PS_MEM_EMU;
    else if (strcmp(argv[1], "host") == 0)
        kind = PS_MEM_HOST;
    else {
        fprintf(stderr, "mem_bw: unknown kind %s\n", argv[1]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > MAX_REPS) {
                fprintf(stderr, "mem_bw: -r takes 1 to %d\n", MAX_REPS);
                return 2;
            }
        } else if (nsizes < 16 && atoll(argv[i]) > 0) {
            sizes[nsizes++] = (size_t)atoll(argv[i]);
        } else {
            fprintf(stderr, "mem_bw: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (nsizes == 0) {
        sizes[0] = 4096, sizes[1] = 1 << 20, sizes[2] = 4 << 20;
        nsizes = 3;
    }
    ops = ps_mem_ops(kind);
    ps_status_t st = ops->init();
    if (st != PS_OK) {
        ps_mem_info_t info;
        ps_mem_describe(kind, &info);
        fprintf(stderr, "mem_bw: the %s kind is not usable: %s\n", argv[1], info.reason);
        return 1;
    }
    printf("mem_bw: %s memory, median of %d copies each\n", argv[1], reps);
    for (int i = 0; i < nsizes; i++) {
        if (measure(sizes[i]) != 0)
            return 1;
    }
    return 0;
}

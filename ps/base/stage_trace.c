/*
 * The stage marks of stage_trace.h (diagnostic builds only).
 */
#include "ps/base/stage_trace.h"

#ifdef PS_STAGE_TRACE

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ps/base/env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/* Marks kept per stage: enough for a latency run of test_benchmark. */
#define STAGE_MAX 100000

static const char *const stage_names[PS_STAGE_COUNT] = {"issue", "posted", "found", "waited",
                                                        "handle"};

static uint64_t marks[PS_STAGE_COUNT][STAGE_MAX];
static atomic_uint counts[PS_STAGE_COUNT];
/* The chain of one traced message (the header's comment). */
static atomic_int arm_post, arm_found;
static _Atomic uint64_t last_found;
static struct timespec start_ts;
static uint64_t start_ticks;

static uint64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
#endif
}

static void mark_at(ps_stage_t s, uint64_t t)
{
    unsigned i = atomic_fetch_add_explicit(&counts[s], 1, memory_order_relaxed);
    if (i < STAGE_MAX)
        marks[s][i] = t;
}

void ps_stage_begin(void)
{
    mark_at(PS_STAGE_ISSUE, ticks());
    atomic_store_explicit(&arm_post, 1, memory_order_relaxed);
}

void ps_stage_posted(void)
{
    if (atomic_exchange_explicit(&arm_post, 0, memory_order_relaxed)) {
        mark_at(PS_STAGE_POSTED, ticks());
        atomic_store_explicit(&arm_found, 1, memory_order_relaxed);
    }
}

void ps_stage_found(void)
{
    uint64_t t = ticks();
    atomic_store_explicit(&last_found, t, memory_order_relaxed);
    if (atomic_exchange_explicit(&arm_found, 0, memory_order_relaxed))
        mark_at(PS_STAGE_FOUND, t);
}

void ps_stage_handle(void)
{
    mark_at(PS_STAGE_HANDLE, atomic_load_explicit(&last_found, memory_order_relaxed));
    atomic_store_explicit(&arm_post, 1, memory_order_relaxed);
}

void ps_stage_waited(void)
{
    mark_at(PS_STAGE_WAITED, ticks());
}

__attribute__((constructor)) static void stage_start(void)
{
    clock_gettime(CLOCK_MONOTONIC, &start_ts);
    start_ticks = ticks();
}

/* Writes "ticks_per_ns R" and a line "stage N t1 t2 ..." per stage. */
__attribute__((destructor)) static void stage_dump(void)
{
    unsigned any = 0;
    for (int s = 0; s < PS_STAGE_COUNT; s++)
        any |= atomic_load(&counts[s]);
    if (!any)
        return;
    struct timespec end_ts;
    clock_gettime(CLOCK_MONOTONIC, &end_ts);
    uint64_t end_ticks = ticks();
    double ns = (double)(end_ts.tv_sec - start_ts.tv_sec) * 1e9 +
                (double)(end_ts.tv_nsec - start_ts.tv_nsec);
    const char *base = ps_env_get("PS_STAGE_TRACE_FILE");
    const char *role = ps_env_get("DMLC_ROLE");
    char path[4096];
    snprintf(path, sizeof(path), "%s.%s.%ld", base ? base : "/tmp/ps-stage",
             role ? role : "node", (long)getpid());
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return;
    fprintf(f, "ticks_per_ns %.6f\n", ns > 0 ? (double)(end_ticks - start_ticks) / ns : 1.0);
    for (int s = 0; s < PS_STAGE_COUNT; s++) {
        unsigned n = atomic_load(&counts[s]);
        n = n < STAGE_MAX ? n : STAGE_MAX;
        fprintf(f, "%s %u", stage_names[s], n);
        for (unsigned i = 0; i < n; i++)
            fprintf(f, " %llu", (unsigned long long)marks[s][i]);
        fputc('\n', f);
    }
    fclose(f);
}

#else
/* Nothing in a normal build (an empty file is not valid C). */
typedef int ps_stage_trace_unused_t;
#endif

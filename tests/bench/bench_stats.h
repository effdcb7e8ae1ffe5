/*
 * Small measurement helpers shared by the benchmark programs: a latency
 * histogram with bounded memory (percentiles of runs of any length), CPU
 * time of the process, and a monotonic clock.
 */
#ifndef PS_TESTS_BENCH_BENCH_STATS_H_
#define PS_TESTS_BENCH_BENCH_STATS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 64 sub-buckets per power of two: a percentile is off by less than 1.6%. */
#define BENCH_HIST_SUB_BITS 6
#define BENCH_HIST_SUB (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_BUCKETS ((64 - BENCH_HIST_SUB_BITS + 1) * BENCH_HIST_SUB)

typedef struct {
    uint64_t count;
    uint64_t sum;
    uint64_t min;
    uint64_t max;
    uint64_t buckets[BENCH_HIST_BUCKETS];
} bench_hist_t;

void bench_hist_reset(bench_hist_t *h);
void bench_hist_add(bench_hist_t *h, uint64_t value);
/* Adds every sample of `from` to `into`. */
void bench_hist_merge(bench_hist_t *into, const bench_hist_t *from);
/* The value below which a fraction q (0..1) of the samples lie; 0 if empty. */
uint64_t bench_hist_quantile(const bench_hist_t *h, double q);
double bench_hist_mean(const bench_hist_t *h);

/* Bucket of a value and a value of a bucket (its midpoint); for tests. */
size_t bench_hist_index(uint64_t value);
uint64_t bench_hist_value(size_t index);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);
/* User + system CPU seconds of this process so far. */
double bench_cpu_seconds(void);

#ifdef __cplusplus
}
#endif

#endif /* PS_TESTS_BENCH_BENCH_STATS_H_ */

#include "tests/bench/bench_stats.h"

#include <string.h>
#include <sys/resource.h>
#include <time.h>

void bench_hist_reset(bench_hist_t *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

size_t bench_hist_index(uint64_t value)
{
    if (value < BENCH_HIST_SUB)
        return (size_t)value;
    int msb = 63 - __builtin_clzll(value);
    int shift = msb - BENCH_HIST_SUB_BITS;
    uint64_t top = value >> shift; /* in [SUB, 2 * SUB) */
    return (size_t)(shift + 1) * BENCH_HIST_SUB + (size_t)(top - BENCH_HIST_SUB);
}

uint64_t bench_hist_value(size_t index)
{
    if (index < BENCH_HIST_SUB)
        return index;
    int shift = (int)(index / BENCH_HIST_SUB) - 1;
    uint64_t top = index % BENCH_HIST_SUB + BENCH_HIST_SUB;
    return (top << shift) + ((1ull << shift) >> 1);
}

void bench_hist_add(bench_hist_t *h, uint64_t value)
{
    h->buckets[bench_hist_index(value)]++;
    h->count++;
    h->sum += value;
    if (value < h->min)
        h->min = value;
    if (value > h->max)
        h->max = value;
}

void bench_hist_merge(bench_hist_t *into, const bench_hist_t *from)
{
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++)
        into->buckets[i] += from->buckets[i];
    into->count += from->count;
    into->sum += from->sum;
    if (from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t bench_hist_quantile(const bench_hist_t *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q <= 0)
        return h->min;
    if (q >= 1)
        return h->max;
    /* The smallest value with at least ceil(q * count) samples at or below. */
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if ((double)rank < q * (double)h->count)
        rank++;
    uint64_t seen = 0;
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t v = bench_hist_value(i);
            /* The midpoint may fall outside what was seen. */
            if (v < h->min)
                v = h->min;
            if (v > h->max)
                v = h->max;
            return v;
        }
    }
    return h->max;
}

double bench_hist_mean(const bench_hist_t *h)
{
    return h->count ? (double)h->sum / (double)h->count : 0.0;
}

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double bench_cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

#include "tests/bench/bench_stats.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace {

std::unique_ptr<bench_hist_t> NewHist()
{
    auto h = std::make_unique<bench_hist_t>();
    bench_hist_reset(h.get());
    return h;
}

TEST(BenchHist, SmallValuesAreExact)
{
    for (uint64_t v = 0; v < BENCH_HIST_SUB; v++) {
        EXPECT_EQ(bench_hist_index(v), v);
        EXPECT_EQ(bench_hist_value(bench_hist_index(v)), v);
    }
}

TEST(BenchHist, BucketsAreMonotonicAndClose)
{
    size_t prev = 0;
    for (uint64_t v = 1; v < (1ull << 40); v = v * 17 / 16 + 1) {
        size_t idx = bench_hist_index(v);
        ASSERT_LT(idx, static_cast<size_t>(BENCH_HIST_BUCKETS));
        EXPECT_GE(idx, prev) << v;
        prev = idx;
        double back = static_cast<double>(bench_hist_value(idx));
        EXPECT_NEAR(back, static_cast<double>(v), static_cast<double>(v) / 60.0 + 1.0) << v;
    }
    EXPECT_LT(bench_hist_index(UINT64_MAX), static_cast<size_t>(BENCH_HIST_BUCKETS));
}

TEST(BenchHist, Quantiles)
{
    auto h = NewHist();
    EXPECT_EQ(bench_hist_quantile(h.get(), 0.5), 0u);
    for (uint64_t v = 1; v <= 1000; v++)
        bench_hist_add(h.get(), v * 1000);
    EXPECT_EQ(h->count, 1000u);
    EXPECT_EQ(h->min, 1000u);
    EXPECT_EQ(h->max, 1000000u);
    EXPECT_DOUBLE_EQ(bench_hist_mean(h.get()), 500500.0);
    EXPECT_NEAR(static_cast<double>(bench_hist_quantile(h.get(), 0.5)), 500000.0, 500000.0 / 60);
    EXPECT_NEAR(static_cast<double>(bench_hist_quantile(h.get(), 0.99)), 990000.0, 990000.0 / 60);
    EXPECT_EQ(bench_hist_quantile(h.get(), 0.0), 1000u);
    EXPECT_EQ(bench_hist_quantile(h.get(), 1.0), 1000000u);
}

TEST(BenchHist, QuantileStaysWithinSeenRange)
{
    auto h = NewHist();
    bench_hist_add(h.get(), 1000001);
    EXPECT_EQ(bench_hist_quantile(h.get(), 0.5), 1000001u);
}

TEST(BenchHist, Merge)
{
    auto a = NewHist();
    auto b = NewHist();
    bench_hist_add(a.get(), 10);
    bench_hist_add(b.get(), 30);
    bench_hist_add(b.get(), 20);
    bench_hist_merge(a.get(), b.get());
    EXPECT_EQ(a->count, 3u);
    EXPECT_EQ(a->min, 10u);
    EXPECT_EQ(a->max, 30u);
    EXPECT_EQ(bench_hist_quantile(a.get(), 0.5), 20u);
}

TEST(BenchClock, Advances)
{
    uint64_t t0 = bench_now_ns();
    volatile uint64_t x = 0;
    for (int i = 0; i < 1000000; i++)
        x += i;
    EXPECT_GE(bench_now_ns(), t0);
    EXPECT_GE(bench_cpu_seconds(), 0.0);
}

}  // namespace

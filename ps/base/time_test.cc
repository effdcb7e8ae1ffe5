#include "ps/base/time.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace {

TEST(Time, MonotonicNeverGoesBack) {
  uint64_t prev = ps_time_now_ns();
  for (int i = 0; i < 10000; ++i) {
    uint64_t now = ps_time_now_ns();
    ASSERT_GE(now, prev);
    prev = now;
  }
  uint64_t ns = ps_time_now_ns();
  uint64_t us = ps_time_now_us();
  uint64_t ms = ps_time_now_ms();
  EXPECT_GE(us, ns / 1000);
  EXPECT_GE(ms, ns / 1000000);
  EXPECT_GE(ms, us / 1000 - 1);
}

TEST(Deadline, Infinite) {
  ps_deadline_t d = ps_deadline_infinite();
  EXPECT_TRUE(ps_deadline_is_infinite(d));
  EXPECT_FALSE(ps_deadline_expired(d));
  EXPECT_EQ(ps_deadline_remaining_ns(d), -1);
  EXPECT_EQ(ps_deadline_remaining_ms(d), -1);
  struct timespec ts = {123, 456};
  EXPECT_EQ(ps_deadline_to_timespec(d, &ts), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ts.tv_sec, 123);  // untouched
  EXPECT_EQ(ps_sleep_until(d), PS_ERR_INVALID_ARG);

  EXPECT_TRUE(ps_deadline_is_infinite(ps_deadline_from_ms(-1)));
  EXPECT_TRUE(ps_deadline_is_infinite(ps_deadline_from_ms(PS_TIMEOUT_INFINITE)));
  EXPECT_TRUE(ps_deadline_is_infinite(ps_deadline_from_ms(INT64_MIN)));
  EXPECT_TRUE(ps_deadline_is_infinite(ps_deadline_from_ns(-5)));
}

TEST(Deadline, ZeroIsAlreadyExpired) {
  ps_deadline_t d = ps_deadline_from_ms(0);
  EXPECT_FALSE(ps_deadline_is_infinite(d));
  EXPECT_TRUE(ps_deadline_expired(d));
  EXPECT_EQ(ps_deadline_remaining_ns(d), 0);
  EXPECT_EQ(ps_deadline_remaining_ms(d), 0);
  EXPECT_EQ(ps_sleep_until(d), PS_OK);
}

TEST(Deadline, FutureDeadline) {
  uint64_t before = ps_time_now_ns();
  ps_deadline_t d = ps_deadline_from_ms(60000);
  uint64_t after = ps_time_now_ns();
  EXPECT_GE(d.at_ns, before + 60000ull * 1000000);
  EXPECT_LE(d.at_ns, after + 60000ull * 1000000);
  EXPECT_FALSE(ps_deadline_expired(d));
  int ms = ps_deadline_remaining_ms(d);
  EXPECT_GE(ms, 1);
  EXPECT_LE(ms, 60000);
  int64_t ns = ps_deadline_remaining_ns(d);
  EXPECT_GT(ns, 0);
  EXPECT_LE(ns, 60000ll * 1000000);

  struct timespec ts;
  ASSERT_EQ(ps_deadline_to_timespec(d, &ts), PS_OK);
  EXPECT_EQ(static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec),
            d.at_ns);
  EXPECT_LT(ts.tv_nsec, 1000000000L);
  EXPECT_EQ(ps_deadline_to_timespec(d, nullptr), PS_ERR_INVALID_ARG);
}

TEST(Deadline, RemainingMsRoundsUp) {
  // One nanosecond left must not become a 0 ms (busy) poll.
  ps_deadline_t d = ps_deadline_at_ns(ps_time_now_ns() + 1000000000ull + 1);
  int ms = ps_deadline_remaining_ms(d);
  EXPECT_GE(ms, 1);
  EXPECT_LE(ms, 1001);
  // A deadline in the past.
  EXPECT_EQ(ps_deadline_remaining_ms(ps_deadline_at_ns(1)), 0);
  EXPECT_TRUE(ps_deadline_expired(ps_deadline_at_ns(0)));
}

TEST(Deadline, HugeTimeoutsSaturate) {
  ps_deadline_t d = ps_deadline_from_ms(INT64_MAX);
  EXPECT_FALSE(ps_deadline_is_infinite(d));
  EXPECT_FALSE(ps_deadline_expired(d));
  EXPECT_EQ(ps_deadline_remaining_ms(d), INT_MAX);
  EXPECT_GT(ps_deadline_remaining_ns(d), 0);

  d = ps_deadline_from_ns(INT64_MAX);
  EXPECT_FALSE(ps_deadline_is_infinite(d));
  EXPECT_EQ(ps_deadline_remaining_ms(d), INT_MAX);

  d = ps_deadline_at_ns(UINT64_MAX);  // finite even at the very end
  EXPECT_FALSE(ps_deadline_is_infinite(d));
  EXPECT_EQ(ps_deadline_remaining_ns(d), INT64_MAX);
}

TEST(Deadline, Min) {
  ps_deadline_t inf = ps_deadline_infinite();
  ps_deadline_t soon = ps_deadline_from_ms(10);
  ps_deadline_t later = ps_deadline_from_ms(20000);
  EXPECT_EQ(ps_deadline_min(inf, soon).at_ns, soon.at_ns);
  EXPECT_EQ(ps_deadline_min(soon, inf).at_ns, soon.at_ns);
  EXPECT_EQ(ps_deadline_min(later, soon).at_ns, soon.at_ns);
  EXPECT_TRUE(ps_deadline_is_infinite(ps_deadline_min(inf, inf)));
}

TEST(Sleep, SleepsAtLeastTheDuration) {
  uint64_t t0 = ps_time_now_ns();
  ps_sleep_ms(10);
  uint64_t t1 = ps_time_now_ns();
  EXPECT_GE(t1 - t0, 10ull * 1000000);
  ps_sleep_ns(0);
  ps_sleep_ns(1000);
  EXPECT_GE(ps_time_now_ns() - t1, 1000u);

  ps_deadline_t d = ps_deadline_from_ms(5);
  EXPECT_EQ(ps_sleep_until(d), PS_OK);
  EXPECT_TRUE(ps_deadline_expired(d));
}

std::atomic<int> g_signals{0};
void OnSignal(int) { g_signals.fetch_add(1); }

// A signal arriving during the sleep must not cut it short.
TEST(Sleep, ResumesAfterSignals) {
  struct sigaction sa = {};
  struct sigaction old = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: clock_nanosleep returns EINTR
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);

  std::atomic<bool> started{false};
  uint64_t slept = 0;
  std::thread sleeper([&] {
    started = true;
    uint64_t t0 = ps_time_now_ns();
    ps_sleep_ms(100);
    slept = ps_time_now_ns() - t0;
  });
  while (!started) {
    std::this_thread::yield();
  }
  for (int i = 0; i < 5; ++i) {
    pthread_kill(sleeper.native_handle(), SIGUSR1);
    ps_sleep_ms(1);
  }
  sleeper.join();
  EXPECT_GE(slept, 100ull * 1000000);
  sigaction(SIGUSR1, &old, nullptr);
}

}  // namespace

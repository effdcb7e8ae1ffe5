#include "ps/base/thread.h"

#include <sched.h>
#include <string.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ps/base/time.h"

namespace {

struct NameProbe {
  char name[PS_THREAD_NAME_MAX];
  int cpu;
  int tid;
};

void *ReportName(void *arg) {
  auto *p = static_cast<NameProbe *>(arg);
  ps_thread_get_name(p->name, sizeof(p->name));
  p->cpu = sched_getcpu();
  p->tid = ps_thread_self_tid();
  return arg;
}

TEST(Thread, NamedThreadRunsAndJoins) {
  NameProbe probe = {};
  ps_thread_t t;
  ASSERT_EQ(ps_thread_create("ps-test", PS_THREAD_NO_CPU, ReportName, &probe, &t), PS_OK);
  void *ret = nullptr;
  ASSERT_EQ(ps_thread_join(&t, &ret), PS_OK);
  EXPECT_EQ(ret, &probe);
  EXPECT_STREQ(probe.name, "ps-test");  // in place before the function ran
  EXPECT_GT(probe.tid, 0);
  EXPECT_NE(probe.tid, ps_thread_self_tid());
  // Joining again, or a thread never started, is a state error, not a crash.
  EXPECT_EQ(ps_thread_join(&t, nullptr), PS_ERR_BAD_STATE);
  ps_thread_t never = {};
  EXPECT_EQ(ps_thread_join(&never, nullptr), PS_ERR_BAD_STATE);
  EXPECT_EQ(ps_thread_join(nullptr, nullptr), PS_ERR_INVALID_ARG);
}

TEST(Thread, LongNamesAreCut) {
  NameProbe probe = {};
  ps_thread_t t;
  ASSERT_EQ(ps_thread_create("a-very-long-thread-name", PS_THREAD_NO_CPU, ReportName, &probe, &t),
            PS_OK);
  ASSERT_EQ(ps_thread_join(&t, nullptr), PS_OK);
  EXPECT_STREQ(probe.name, "a-very-long-thr");  // 15 characters

  // No name at all is fine too.
  ASSERT_EQ(ps_thread_create(nullptr, PS_THREAD_NO_CPU, ReportName, &probe, &t), PS_OK);
  ASSERT_EQ(ps_thread_join(&t, nullptr), PS_OK);
}

TEST(Thread, BadArguments) {
  ps_thread_t t;
  EXPECT_EQ(ps_thread_create("x", PS_THREAD_NO_CPU, nullptr, nullptr, &t), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_thread_create("x", PS_THREAD_NO_CPU, ReportName, nullptr, nullptr),
            PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_thread_create("x", -2, ReportName, nullptr, &t), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_thread_create("x", CPU_SETSIZE, ReportName, nullptr, &t), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_thread_set_name(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_thread_pin_self(-1), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_thread_pin_self(CPU_SETSIZE), PS_ERR_INVALID_ARG);
}

int FirstAllowedCpu() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return -1;
  }
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) {
      return c;
    }
  }
  return -1;
}

TEST(Thread, PinnedThreadRunsOnItsCpu) {
  int cpu = FirstAllowedCpu();
  ASSERT_GE(cpu, 0);
  NameProbe probe = {};
  probe.cpu = -1;
  ps_thread_t t;
  ASSERT_EQ(ps_thread_create("ps-pinned", cpu, ReportName, &probe, &t), PS_OK);
  ASSERT_EQ(ps_thread_join(&t, nullptr), PS_OK);
  EXPECT_EQ(probe.cpu, cpu);
}

TEST(Thread, PinningToAMissingCpuFailsCleanly) {
  // A CPU number no machine running these tests has.
  std::atomic<int> ran{0};
  ps_thread_t t = {};
  auto fn = [](void *arg) -> void * {
    static_cast<std::atomic<int> *>(arg)->fetch_add(1);
    return nullptr;
  };
  EXPECT_EQ(ps_thread_create("ps-nocpu", CPU_SETSIZE - 1, fn, &ran, &t), PS_ERR_INVALID_ARG);
  EXPECT_EQ(t.joinable, 0);
  EXPECT_EQ(ran.load(), 0);
}

TEST(Thread, PinSelfAndSetName) {
  int cpu = FirstAllowedCpu();
  ASSERT_GE(cpu, 0);
  std::thread th([cpu] {
    EXPECT_EQ(ps_thread_pin_self(cpu), PS_OK);
    EXPECT_EQ(sched_getcpu(), cpu);
    EXPECT_EQ(ps_thread_pin_self(CPU_SETSIZE - 1), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_thread_set_name("renamed-thread-long"), PS_OK);
    char name[8];
    ps_thread_get_name(name, sizeof(name));  // cut to the buffer
    EXPECT_STREQ(name, "renamed");
    ps_thread_get_name(nullptr, 4);
  });
  th.join();
  EXPECT_GE(ps_thread_num_cpus(), 1);
}

TEST(Mutex, TrylockSeesOwner) {
  ps_mutex_t m;
  ASSERT_EQ(ps_mutex_init(&m), PS_OK);
  ps_mutex_lock(&m);
  ps_status_t other = PS_OK;
  std::thread th([&] { other = ps_mutex_trylock(&m); });
  th.join();
  EXPECT_EQ(other, PS_ERR_AGAIN);
  ps_mutex_unlock(&m);
  ASSERT_EQ(ps_mutex_trylock(&m), PS_OK);
  ps_mutex_unlock(&m);
  ps_mutex_destroy(&m);
  EXPECT_EQ(ps_mutex_init(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_cond_init(nullptr), PS_ERR_INVALID_ARG);
}

TEST(Cond, TimedWaitEndsAtTheDeadline) {
  ps_mutex_t m;
  ps_cond_t c;
  ASSERT_EQ(ps_mutex_init(&m), PS_OK);
  ASSERT_EQ(ps_cond_init(&c), PS_OK);
  ps_mutex_lock(&m);
  EXPECT_EQ(ps_cond_wait(&c, &m, ps_deadline_from_ms(0)), PS_ERR_TIMED_OUT);
  ps_deadline_t d = ps_deadline_from_ms(20);
  ps_status_t st;
  do {  // spurious wake-ups return PS_OK: loop as callers do
    st = ps_cond_wait(&c, &m, d);
  } while (st == PS_OK);
  EXPECT_EQ(st, PS_ERR_TIMED_OUT);
  EXPECT_TRUE(ps_deadline_expired(d));  // CLOCK_MONOTONIC: never early
  ps_mutex_unlock(&m);
  ps_cond_destroy(&c);
  ps_mutex_destroy(&m);
}

TEST(Cond, SignalWakesAWaiter) {
  ps_mutex_t m;
  ps_cond_t c;
  ASSERT_EQ(ps_mutex_init(&m), PS_OK);
  ASSERT_EQ(ps_cond_init(&c), PS_OK);
  int flag = 0;
  std::thread waiter([&] {
    ps_mutex_lock(&m);
    while (!flag) {
      EXPECT_EQ(ps_cond_wait(&c, &m, ps_deadline_infinite()), PS_OK);
    }
    ps_mutex_unlock(&m);
  });
  ps_mutex_lock(&m);
  flag = 1;
  ps_cond_broadcast(&c);
  ps_mutex_unlock(&m);
  waiter.join();
  ps_cond_signal(&c);  // nobody waiting: harmless
  ps_cond_destroy(&c);
  ps_mutex_destroy(&m);
}

TEST(Event, ManualResetStaysSet) {
  ps_event_t ev;
  ASSERT_EQ(ps_event_init(&ev, 0), PS_OK);
  EXPECT_FALSE(ps_event_is_set(&ev));
  EXPECT_EQ(ps_event_wait(&ev, ps_deadline_from_ms(0)), PS_ERR_TIMED_OUT);
  ps_event_set(&ev);
  EXPECT_TRUE(ps_event_is_set(&ev));
  EXPECT_EQ(ps_event_wait(&ev, ps_deadline_from_ms(0)), PS_OK);
  EXPECT_EQ(ps_event_wait(&ev, ps_deadline_infinite()), PS_OK);
  ps_event_reset(&ev);
  EXPECT_EQ(ps_event_wait(&ev, ps_deadline_from_ms(0)), PS_ERR_TIMED_OUT);
  ps_event_destroy(&ev);
  EXPECT_EQ(ps_event_init(nullptr, 0), PS_ERR_INVALID_ARG);
}

TEST(Event, ManualResetReleasesEveryWaiter) {
  ps_event_t ev;
  ASSERT_EQ(ps_event_init(&ev, 0), PS_OK);
  std::atomic<int> released{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      if (ps_event_wait(&ev, ps_deadline_infinite()) == PS_OK) {
        released.fetch_add(1);
      }
    });
  }
  ps_event_set(&ev);
  for (auto &w : waiters) w.join();
  EXPECT_EQ(released.load(), 4);
  ps_event_destroy(&ev);
}

TEST(Event, AutoResetReleasesOnePerSet) {
  ps_event_t ev;
  ASSERT_EQ(ps_event_init(&ev, 1), PS_OK);
  ps_event_set(&ev);
  EXPECT_EQ(ps_event_wait(&ev, ps_deadline_from_ms(0)), PS_OK);
  EXPECT_EQ(ps_event_wait(&ev, ps_deadline_from_ms(0)), PS_ERR_TIMED_OUT);  // consumed

  constexpr int kWaiters = 4;
  std::atomic<int> released{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      ASSERT_EQ(ps_event_wait(&ev, ps_deadline_infinite()), PS_OK);
      released.fetch_add(1);
    });
  }
  for (int i = 1; i <= kWaiters; ++i) {
    ps_event_set(&ev);
    // Sets do not queue up: wait until this one was taken before the next.
    while (released.load() < i) {
      std::this_thread::yield();
    }
    EXPECT_EQ(released.load(), i);
  }
  for (auto &w : waiters) w.join();
  EXPECT_FALSE(ps_event_is_set(&ev));
  ps_event_destroy(&ev);
}

TEST(Event, WaitTimesOutAtTheDeadline) {
  ps_event_t ev;
  ASSERT_EQ(ps_event_init(&ev, 1), PS_OK);
  ps_deadline_t d = ps_deadline_from_ms(30);
  EXPECT_EQ(ps_event_wait(&ev, d), PS_ERR_TIMED_OUT);
  EXPECT_TRUE(ps_deadline_expired(d));
  ps_event_destroy(&ev);
}

TEST(CpuRelax, Compiles) {
  for (int i = 0; i < 10; ++i) ps_cpu_relax();
}

}  // namespace

#include "ps/base/queue.h"

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ps/base/time.h"

namespace {

void *Item(uintptr_t v) { return reinterpret_cast<void *>(v); }
uintptr_t Value(void *p) { return reinterpret_cast<uintptr_t>(p); }

// ---- blocking queue ----

class QueueTest : public ::testing::TestWithParam<uint64_t> {};  // spin_ns

TEST_P(QueueTest, FifoAndGrowth) {
  ps_queue_t *q;
  ASSERT_EQ(ps_queue_create(GetParam(), &q), PS_OK);
  // Interleave pushes and pops so the ring wraps before it grows.
  uintptr_t next_in = 1, next_out = 1;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 50; ++i) ASSERT_EQ(ps_queue_push(q, Item(next_in++)), PS_OK);
    for (int i = 0; i < 30; ++i) {
      void *it;
      ASSERT_EQ(ps_queue_pop(q, ps_deadline_from_ms(0), &it), PS_OK);
      ASSERT_EQ(Value(it), next_out++);
    }
  }
  EXPECT_EQ(ps_queue_size(q), next_in - next_out);
  void *it;
  while (ps_queue_try_pop(q, &it) == PS_OK) {
    ASSERT_EQ(Value(it), next_out++);
  }
  EXPECT_EQ(next_out, next_in);
  EXPECT_EQ(ps_queue_try_pop(q, &it), PS_ERR_AGAIN);
  // NULL is an item like any other.
  ASSERT_EQ(ps_queue_push(q, nullptr), PS_OK);
  it = Item(1);
  ASSERT_EQ(ps_queue_pop(q, ps_deadline_infinite(), &it), PS_OK);
  EXPECT_EQ(it, nullptr);
  ps_queue_destroy(q);
}

TEST_P(QueueTest, PopTimesOutOnEmpty) {
  ps_queue_t *q;
  ASSERT_EQ(ps_queue_create(GetParam(), &q), PS_OK);
  void *it = Item(7);
  EXPECT_EQ(ps_queue_pop(q, ps_deadline_from_ms(0), &it), PS_ERR_TIMED_OUT);
  ps_deadline_t d = ps_deadline_from_ms(20);
  EXPECT_EQ(ps_queue_pop(q, d, &it), PS_ERR_TIMED_OUT);
  EXPECT_TRUE(ps_deadline_expired(d));
  EXPECT_EQ(it, Item(7));  // untouched
  ps_queue_destroy(q);
}

TEST_P(QueueTest, CloseDrainsThenShutsDown) {
  ps_queue_t *q;
  ASSERT_EQ(ps_queue_create(GetParam(), &q), PS_OK);
  ASSERT_EQ(ps_queue_push(q, Item(1)), PS_OK);
  ASSERT_EQ(ps_queue_push(q, Item(2)), PS_OK);
  EXPECT_FALSE(ps_queue_is_closed(q));
  ps_queue_close(q);
  ps_queue_close(q);  // idempotent
  EXPECT_TRUE(ps_queue_is_closed(q));
  EXPECT_EQ(ps_queue_push(q, Item(3)), PS_ERR_SHUTDOWN);
  void *it;
  ASSERT_EQ(ps_queue_pop(q, ps_deadline_infinite(), &it), PS_OK);
  EXPECT_EQ(Value(it), 1u);
  ASSERT_EQ(ps_queue_try_pop(q, &it), PS_OK);
  EXPECT_EQ(Value(it), 2u);
  EXPECT_EQ(ps_queue_pop(q, ps_deadline_infinite(), &it), PS_ERR_SHUTDOWN);
  EXPECT_EQ(ps_queue_try_pop(q, &it), PS_ERR_SHUTDOWN);
  ps_queue_destroy(q);
}

TEST_P(QueueTest, CloseWakesSleepingConsumers) {
  ps_queue_t *q;
  ASSERT_EQ(ps_queue_create(GetParam(), &q), PS_OK);
  std::atomic<int> shutdown{0};
  std::vector<std::thread> consumers;
  for (int i = 0; i < 3; ++i) {
    consumers.emplace_back([&] {
      void *it;
      if (ps_queue_pop(q, ps_deadline_infinite(), &it) == PS_ERR_SHUTDOWN) shutdown.fetch_add(1);
    });
  }
  ps_queue_close(q);
  for (auto &c : consumers) c.join();
  EXPECT_EQ(shutdown.load(), 3);
  ps_queue_destroy(q);
}

// Several producers and consumers: every item arrives exactly once.
TEST_P(QueueTest, ManyProducersManyConsumers) {
  ps_queue_t *q;
  ASSERT_EQ(ps_queue_create(GetParam(), &q), PS_OK);
  constexpr int kProducers = 3, kConsumers = 3, kPerProducer = 20000;
  std::atomic<uint64_t> sum{0}, count{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      uint64_t local_sum = 0, local_count = 0;
      void *it;
      ps_status_t st;
      while ((st = ps_queue_pop(q, ps_deadline_infinite(), &it)) == PS_OK) {
        local_sum += Value(it);
        ++local_count;
      }
      EXPECT_EQ(st, PS_ERR_SHUTDOWN);
      sum += local_sum;
      count += local_count;
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 1; i <= kPerProducer; ++i) {
        ASSERT_EQ(ps_queue_push(q, Item(static_cast<uintptr_t>(p) * kPerProducer + i)), PS_OK);
      }
    });
  }
  for (auto &p : producers) p.join();
  ps_queue_close(q);
  for (auto &t : threads) t.join();
  const uint64_t n = static_cast<uint64_t>(kProducers) * kPerProducer;
  EXPECT_EQ(count.load(), n);
  EXPECT_EQ(sum.load(), n * (n + 1) / 2);
  ps_queue_destroy(q);
}

// One producer, one consumer: order is kept.
TEST_P(QueueTest, SingleProducerOrder) {
  ps_queue_t *q;
  ASSERT_EQ(ps_queue_create(GetParam(), &q), PS_OK);
  constexpr uintptr_t kItems = 20000;
  std::thread producer([&] {
    for (uintptr_t i = 1; i <= kItems; ++i) ASSERT_EQ(ps_queue_push(q, Item(i)), PS_OK);
  });
  uintptr_t expect = 1;
  void *it;
  while (expect <= kItems && ps_queue_pop(q, ps_deadline_infinite(), &it) == PS_OK) {
    ASSERT_EQ(Value(it), expect);
    ++expect;
  }
  producer.join();
  EXPECT_EQ(expect, kItems + 1);
  ps_queue_destroy(q);
}

INSTANTIATE_TEST_SUITE_P(BlockOrSpin, QueueTest,
                         ::testing::Values(0ull, PS_QUEUE_DEFAULT_SPIN_NS),
                         [](const ::testing::TestParamInfo<uint64_t> &info) {
                           return info.param == 0 ? std::string("block") : std::string("spin");
                         });

TEST(Queue, BadArguments) {
  ps_queue_t *q;
  void *it;
  EXPECT_EQ(ps_queue_create(0, nullptr), PS_ERR_INVALID_ARG);
  ASSERT_EQ(ps_queue_create(0, &q), PS_OK);
  EXPECT_EQ(ps_queue_pop(q, ps_deadline_infinite(), nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_queue_try_pop(q, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_queue_push(nullptr, Item(1)), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_queue_pop(nullptr, ps_deadline_infinite(), &it), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_queue_try_pop(nullptr, &it), PS_ERR_INVALID_ARG);
  ps_queue_close(nullptr);
  ps_queue_destroy(q);
  ps_queue_destroy(nullptr);
}

// ---- SPSC ring ----

TEST(SpscRing, CreateRejectsBadCapacity) {
  ps_spsc_ring_t *r = nullptr;
  EXPECT_EQ(ps_spsc_ring_create(0, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_spsc_ring_create(1, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_spsc_ring_create(3, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_spsc_ring_create(100, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_spsc_ring_create(static_cast<size_t>(1) << 32, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_spsc_ring_create(4, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(r, nullptr);
  ps_spsc_ring_destroy(nullptr);
}

TEST(SpscRing, FullAndEmpty) {
  ps_spsc_ring_t *r;
  ASSERT_EQ(ps_spsc_ring_create(4, &r), PS_OK);
  EXPECT_EQ(ps_spsc_ring_capacity(r), 4u);
  void *it = Item(99);
  EXPECT_EQ(ps_spsc_ring_pop(r, &it), PS_ERR_AGAIN);
  EXPECT_EQ(it, Item(99));
  for (uintptr_t round = 0; round < 3; ++round) {  // wrap around a few times
    for (uintptr_t i = 0; i < 4; ++i) ASSERT_EQ(ps_spsc_ring_push(r, Item(round * 10 + i)), PS_OK);
    EXPECT_EQ(ps_spsc_ring_push(r, Item(5)), PS_ERR_AGAIN);
    EXPECT_EQ(ps_spsc_ring_size(r), 4u);
    for (uintptr_t i = 0; i < 4; ++i) {
      ASSERT_EQ(ps_spsc_ring_pop(r, &it), PS_OK);
      EXPECT_EQ(Value(it), round * 10 + i);
    }
    EXPECT_EQ(ps_spsc_ring_pop(r, &it), PS_ERR_AGAIN);
  }
  ps_spsc_ring_destroy(r);
}

TEST(SpscRing, ProducerConsumerThreads) {
  ps_spsc_ring_t *r;
  ASSERT_EQ(ps_spsc_ring_create(64, &r), PS_OK);
  constexpr uintptr_t kItems = 30000;
  std::thread producer([&] {
    for (uintptr_t i = 1; i <= kItems; ++i) {
      while (ps_spsc_ring_push(r, Item(i)) == PS_ERR_AGAIN) std::this_thread::yield();
    }
  });
  uintptr_t expect = 1;
  uint64_t sum = 0;
  while (expect <= kItems) {
    void *it;
    if (ps_spsc_ring_pop(r, &it) == PS_ERR_AGAIN) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_EQ(Value(it), expect);  // strict FIFO
    sum += Value(it);
    ++expect;
  }
  producer.join();
  EXPECT_EQ(sum, static_cast<uint64_t>(kItems) * (kItems + 1) / 2);
  EXPECT_EQ(ps_spsc_ring_size(r), 0u);
  ps_spsc_ring_destroy(r);
}

// ---- MPMC ring ----

TEST(MpmcRing, CreateRejectsBadCapacity) {
  ps_mpmc_ring_t *r = nullptr;
  EXPECT_EQ(ps_mpmc_ring_create(0, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mpmc_ring_create(6, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mpmc_ring_create(static_cast<size_t>(1) << 32, &r), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mpmc_ring_create(8, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(r, nullptr);
  ps_mpmc_ring_destroy(nullptr);
}

TEST(MpmcRing, FullAndEmpty) {
  ps_mpmc_ring_t *r;
  ASSERT_EQ(ps_mpmc_ring_create(8, &r), PS_OK);
  EXPECT_EQ(ps_mpmc_ring_capacity(r), 8u);
  void *it = Item(5);
  EXPECT_EQ(ps_mpmc_ring_pop(r, &it), PS_ERR_AGAIN);
  EXPECT_EQ(it, Item(5));
  for (uintptr_t round = 0; round < 3; ++round) {
    for (uintptr_t i = 0; i < 8; ++i) ASSERT_EQ(ps_mpmc_ring_push(r, Item(round * 100 + i)), PS_OK);
    EXPECT_EQ(ps_mpmc_ring_push(r, Item(1)), PS_ERR_AGAIN);
    EXPECT_EQ(ps_mpmc_ring_size(r), 8u);
    for (uintptr_t i = 0; i < 8; ++i) {
      ASSERT_EQ(ps_mpmc_ring_pop(r, &it), PS_OK);
      EXPECT_EQ(Value(it), round * 100 + i);
    }
    EXPECT_EQ(ps_mpmc_ring_pop(r, &it), PS_ERR_AGAIN);
  }
  ps_mpmc_ring_destroy(r);
}

// Producers and consumers on a small ring (so it is often full and often
// empty): every item arrives exactly once, and each producer's items
// arrive in its order at any one consumer.
TEST(MpmcRing, ManyProducersManyConsumers) {
  ps_mpmc_ring_t *r;
  ASSERT_EQ(ps_mpmc_ring_create(16, &r), PS_OK);
  constexpr int kProducers = 3, kConsumers = 3;
  constexpr uintptr_t kPerProducer = 8000;
  std::atomic<uint64_t> sum{0}, count{0};
  std::atomic<int> producers_done{0};
  std::vector<int> order_errors(kConsumers, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      uintptr_t last[kProducers] = {};
      uint64_t local_sum = 0, local_count = 0;
      for (;;) {
        void *it;
        if (ps_mpmc_ring_pop(r, &it) == PS_OK) {
          uintptr_t v = Value(it);
          int p = static_cast<int>((v - 1) / kPerProducer);
          if (v <= last[p]) ++order_errors[c];
          last[p] = v;
          local_sum += v;
          ++local_count;
        } else if (producers_done.load() == kProducers) {
          if (ps_mpmc_ring_pop(r, &it) == PS_ERR_AGAIN) break;  // drained
          uintptr_t v = Value(it);
          local_sum += v;
          ++local_count;
          last[(v - 1) / kPerProducer] = v;
        } else {
          std::this_thread::yield();
        }
      }
      sum += local_sum;
      count += local_count;
    });
  }
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (uintptr_t i = 1; i <= kPerProducer; ++i) {
        while (ps_mpmc_ring_push(r, Item(p * kPerProducer + i)) == PS_ERR_AGAIN) {
          std::this_thread::yield();
        }
      }
      producers_done.fetch_add(1);
    });
  }
  for (auto &t : threads) t.join();
  const uint64_t n = kProducers * kPerProducer;
  EXPECT_EQ(count.load(), n);
  EXPECT_EQ(sum.load(), n * (n + 1) / 2);
  for (int c = 0; c < kConsumers; ++c) EXPECT_EQ(order_errors[c], 0);
  EXPECT_EQ(ps_mpmc_ring_size(r), 0u);
  ps_mpmc_ring_destroy(r);
}

}  // namespace

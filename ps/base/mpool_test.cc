#include "ps/base/mpool.h"

#include <stdint.h>
#include <string.h>

#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define PS_TEST_ASAN 1
#endif

namespace {

TEST(Mpool, BadArguments) {
  ps_mpool_t mp;
  EXPECT_EQ(ps_mpool_init(nullptr, "x", 8, 0, 0, 0), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mpool_init(&mp, "x", 0, 0, 0, 0), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mpool_init(&mp, "x", 8, 3, 0, 0), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mpool_init(&mp, "x", 8, 8192, 0, 0), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mpool_init(&mp, "x", SIZE_MAX, 0, 0, 0), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_mpool_init(&mp, "x", 1u << 20, 0, SIZE_MAX / 2, 0), PS_ERR_TOO_LARGE);
  void *e;
  EXPECT_EQ(ps_mpool_get(nullptr, &e), PS_ERR_INVALID_ARG);
  ps_mpool_put(nullptr, &e);
  ps_mpool_cleanup(nullptr);
}

TEST(Mpool, ElementsAreAlignedDistinctAndReused) {
  ps_mpool_t mp;
  ASSERT_EQ(ps_mpool_init(&mp, "desc", 40, 64, 4, 0), PS_OK);
  std::set<void *> seen;
  std::vector<void *> got;
  for (int i = 0; i < 10; ++i) {
    void *e = nullptr;
    ASSERT_EQ(ps_mpool_get(&mp, &e), PS_OK);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(e) % 64, 0u);
    memset(e, i, 40);  // the whole element is ours
    EXPECT_TRUE(seen.insert(e).second);
    got.push_back(e);
  }
  EXPECT_EQ(ps_mpool_in_use(&mp), 10u);
  EXPECT_EQ(ps_mpool_capacity(&mp), 12u);  // three chunks of four
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(static_cast<unsigned char *>(got[i])[39], i);  // no overlap
  }
  ps_mpool_put(&mp, got[3]);
  void *again = nullptr;
  ASSERT_EQ(ps_mpool_get(&mp, &again), PS_OK);
  EXPECT_EQ(again, got[3]);  // the free list is LIFO: warm in cache
  for (void *e : got) ps_mpool_put(&mp, e);
  EXPECT_EQ(ps_mpool_in_use(&mp), 0u);
  EXPECT_EQ(ps_mpool_capacity(&mp), 12u);  // memory stays until cleanup
  ps_mpool_put(&mp, nullptr);
  ps_mpool_cleanup(&mp);
}

TEST(Mpool, TinyElementsStillHoldTheLink) {
  ps_mpool_t mp;
  ASSERT_EQ(ps_mpool_init(&mp, nullptr, 1, 1, 0, 0), PS_OK);
  void *a, *b;
  ASSERT_EQ(ps_mpool_get(&mp, &a), PS_OK);
  ASSERT_EQ(ps_mpool_get(&mp, &b), PS_OK);
  EXPECT_GE(static_cast<char *>(b) - static_cast<char *>(a), static_cast<ptrdiff_t>(sizeof(void *)));
  ps_mpool_put(&mp, a);
  ps_mpool_put(&mp, b);
  ps_mpool_cleanup(&mp);
}

TEST(Mpool, LimitIsEnforced) {
  ps_mpool_t mp;
  ASSERT_EQ(ps_mpool_init(&mp, "limited", 16, 0, 4, 6), PS_OK);
  std::vector<void *> got;
  void *e;
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(ps_mpool_get(&mp, &e), PS_OK) << i;
    got.push_back(e);
  }
  e = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(ps_mpool_get(&mp, &e), PS_ERR_NO_RESOURCE);
  EXPECT_EQ(e, reinterpret_cast<void *>(0x1));
  EXPECT_EQ(ps_mpool_capacity(&mp), 6u);
  ps_mpool_put(&mp, got.back());
  got.pop_back();
  ASSERT_EQ(ps_mpool_get(&mp, &e), PS_OK);
  got.push_back(e);
  for (void *x : got) ps_mpool_put(&mp, x);
  ps_mpool_cleanup(&mp);
}

TEST(Mpool, CleanupWithElementsOutIsSurvivable) {
  ps_mpool_t mp;
  ASSERT_EQ(ps_mpool_init(&mp, "leaky", 32, 0, 0, 0), PS_OK);
  void *e;
  ASSERT_EQ(ps_mpool_get(&mp, &e), PS_OK);
  ps_mpool_cleanup(&mp);  // warns; the chunk is freed all the same (asan: no leak)
}

#ifdef PS_TEST_ASAN
TEST(Mpool, FreeElementsArePoisoned) {
  ps_mpool_t mp;
  ASSERT_EQ(ps_mpool_init(&mp, "poison", 64, 0, 2, 0), PS_OK);
  void *e;
  ASSERT_EQ(ps_mpool_get(&mp, &e), PS_OK);
  char *p = static_cast<char *>(e);
  EXPECT_FALSE(__asan_address_is_poisoned(p + 32));
  ps_mpool_put(&mp, e);
  EXPECT_TRUE(__asan_address_is_poisoned(p + 32));
  ASSERT_EQ(ps_mpool_get(&mp, &e), PS_OK);
  EXPECT_FALSE(__asan_address_is_poisoned(p + 32));
  ps_mpool_put(&mp, e);
  ps_mpool_cleanup(&mp);
}
#endif

// Threads hammer one pool; an element is never handed to two threads at
// once (each stamps its id and checks it before giving it back).
TEST(Mpool, ConcurrentGetPut) {
  ps_mpool_t mp;
  ASSERT_EQ(ps_mpool_init(&mp, "shared", sizeof(uint64_t) * 4, 0, 16, 0), PS_OK);
  constexpr int kThreads = 4, kIters = 5000;
  std::vector<std::thread> threads;
  std::vector<int> errors(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t *> held;
      for (int i = 0; i < kIters; ++i) {
        void *e;
        if (ps_mpool_get(&mp, &e) != PS_OK) {
          ++errors[t];
          continue;
        }
        auto *u = static_cast<uint64_t *>(e);
        for (int k = 0; k < 4; ++k) u[k] = static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(i);
        held.push_back(u);
        if (held.size() > 8 || i == kIters - 1) {
          for (uint64_t *h : held) {
            if (h[3] >> 32 != static_cast<uint64_t>(t) || h[0] != h[3]) ++errors[t];
            ps_mpool_put(&mp, h);
          }
          held.clear();
        }
      }
    });
  }
  for (auto &th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], 0);
  EXPECT_EQ(ps_mpool_in_use(&mp), 0u);
  EXPECT_LE(ps_mpool_capacity(&mp), static_cast<size_t>(kThreads * 16 + 16));
  ps_mpool_cleanup(&mp);
}

}  // namespace

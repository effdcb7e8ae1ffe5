// The pinned staging pool: blocks come back when their slice's last
// reference goes and are handed out again; the cache stays bounded.
#include "ps/gpu/stage_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "ps/gpu/mem.h"

namespace {

ps_stage_pool_stats_t Stats(ps_mem_kind_t kind) {
  ps_stage_pool_stats_t s;
  ps_stage_pool_stats(kind, &s);
  return s;
}

class StagePool : public ::testing::Test {
 protected:
  void SetUp() override { ps_stage_pool_trim(); }
  void TearDown() override { ps_stage_pool_trim(); }
};

TEST_F(StagePool, ABlockComesBackAndIsHandedOutAgain) {
  ps_stage_pool_stats_t before = Stats(PS_MEM_EMU);
  ps_slice_t a;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, 100000, &a), PS_OK);
  EXPECT_EQ(a.len, 100000u);
  EXPECT_TRUE(ps_slice_in_host_mem(&a));
  std::memset(ps_slice_ptr(&a), 0x5a, a.len);  // host memory: writable
  void *first = ps_slice_ptr(&a);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_made, before.blocks_made + 1);
  ps_slice_unref(&a);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_idle, 1u);
  EXPECT_EQ(Stats(PS_MEM_EMU).bytes_idle, (size_t)128 << 10);  // 100000 rounds up

  // Another request of the same class gets the same block back.
  ps_slice_t b;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, 70000, &b), PS_OK);
  EXPECT_EQ(ps_slice_ptr(&b), first);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_reused, before.blocks_reused + 1);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_idle, 0u);
  ps_slice_unref(&b);
}

TEST_F(StagePool, AnotherReferenceKeepsTheBlockOut) {
  ps_slice_t a;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_HOST, 4096, &a), PS_OK);
  ps_slice_t held = ps_slice_ref(&a);  // e.g. a van still sending it
  ps_slice_unref(&a);
  EXPECT_EQ(Stats(PS_MEM_HOST).blocks_idle, 0u);
  ps_slice_t b;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_HOST, 4096, &b), PS_OK);
  EXPECT_NE(ps_slice_ptr(&b), ps_slice_ptr(&held));
  ps_slice_unref(&held);
  ps_slice_unref(&b);
  EXPECT_EQ(Stats(PS_MEM_HOST).blocks_idle, 2u);
}

TEST_F(StagePool, EmptyAndOversizedAndBadKind) {
  ps_slice_t s;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, 0, &s), PS_OK);
  EXPECT_EQ(s.len, 0u);
  EXPECT_EQ(s.buf, nullptr);
  EXPECT_EQ(ps_stage_pool_get(PS_MEM_KIND_COUNT, 16, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_stage_pool_get(PS_MEM_EMU, 16, nullptr), PS_ERR_INVALID_ARG);

  // Over the cache's size: a plain buffer, never kept.
  size_t made = Stats(PS_MEM_EMU).blocks_made;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, PS_STAGE_POOL_MAX_CACHED + 1, &s), PS_OK);
  EXPECT_EQ(s.len, PS_STAGE_POOL_MAX_CACHED + 1);
  ps_slice_unref(&s);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_made, made);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_idle, 0u);
}

TEST_F(StagePool, IdleBytesStayUnderTheCap) {
  // Five blocks of 64 MiB out at once; only four fit the 256 MiB cache.
  std::vector<ps_slice_t> out(5);
  for (auto &s : out) ASSERT_EQ(ps_stage_pool_get(PS_MEM_HOST, (size_t)64 << 20, &s), PS_OK);
  for (auto &s : out) ps_slice_unref(&s);
  EXPECT_EQ(Stats(PS_MEM_HOST).blocks_idle, 4u);
  EXPECT_EQ(Stats(PS_MEM_HOST).bytes_idle, PS_STAGE_POOL_MAX_CACHED);
  ps_stage_pool_trim();
  EXPECT_EQ(Stats(PS_MEM_HOST).blocks_idle, 0u);
  EXPECT_EQ(Stats(PS_MEM_HOST).bytes_idle, 0u);
}

TEST_F(StagePool, ThreadsGetAndReleaseConcurrently) {
  ps_stage_pool_stats_t before = Stats(PS_MEM_EMU);  // counters are the process's
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([t] {
      for (int i = 0; i < 500; i++) {
        ps_slice_t s;
        ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, (size_t)(1 + (i % 3)) << 16, &s), PS_OK);
        static_cast<unsigned char *>(ps_slice_ptr(&s))[s.len - 1] = (unsigned char)t;
        ps_slice_unref(&s);
      }
    });
  }
  for (auto &th : threads) th.join();
  ps_stage_pool_stats_t s = Stats(PS_MEM_EMU);
  size_t made = s.blocks_made - before.blocks_made;
  EXPECT_EQ(made + s.blocks_reused - before.blocks_reused, 2000u);
  EXPECT_LE(made, 12u);  // at most 4 threads x 3 classes out at once
  EXPECT_EQ(s.blocks_idle, made);
}

}  // namespace

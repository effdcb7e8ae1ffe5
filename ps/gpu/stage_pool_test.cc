// The pinned staging pool: blocks come back when their slice's last
// reference goes and are handed out again; the cache stays bounded.
#include "ps/gpu/stage_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "ps/base/shared_block.h"
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

// A provider of shared blocks standing in for the shm van's: it counts
// what it makes, wraps and destroys, and marks its buffers SHM.
struct FakeBlock {
  void *data;
  size_t len;
};
int fake_created, fake_wrapped, fake_destroyed, fake_released;
bool fake_refuse;
struct FakeWrap {
  ps_shared_block_release_func_t fn;
  void *arg;
};

ps_status_t FakeCreate(size_t len, ps_shared_block_t **block_p, void **data_p) {
  if (fake_refuse) return PS_ERR_NO_RESOURCE;
  auto *b = new FakeBlock{std::aligned_alloc(4096, len), len};
  fake_created++;
  *block_p = reinterpret_cast<ps_shared_block_t *>(b);
  *data_p = b->data;
  return PS_OK;
}

void FakeRelease(void *data, size_t len, void *arg) {
  (void)data;
  (void)len;
  auto *w = static_cast<FakeWrap *>(arg);
  fake_released++;
  FakeWrap copy = *w;
  delete w;
  copy.fn(copy.arg);
}

ps_status_t FakeWrapBlock(ps_shared_block_t *block, size_t len,
                          ps_shared_block_release_func_t release, void *arg,
                          ps_buf_t **buf_p) {
  auto *b = reinterpret_cast<FakeBlock *>(block);
  EXPECT_LE(len, b->len);
  fake_wrapped++;
  return ps_buf_wrap_mem(b->data, len, PS_BUF_MEM_SHM, 0, FakeRelease,
                         new FakeWrap{release, arg}, buf_p);
}

void FakeDestroy(ps_shared_block_t *block) {
  auto *b = reinterpret_cast<FakeBlock *>(block);
  fake_destroyed++;
  std::free(b->data);
  delete b;
}

const ps_shared_block_ops_t kFakeBlocks = {
    sizeof(ps_shared_block_ops_t), FakeCreate, FakeWrapBlock, FakeDestroy};

// With a provider installed, new blocks are its shared blocks (a van sends
// them by reference); each get wraps the block anew, and the block comes
// back to the pool when the wrap's last reference goes. Blocks made before
// stay what they were; a provider that cannot make one leaves the pool on
// its own memory.
TEST_F(StagePool, BlocksComeFromTheSharedProvider) {
  fake_created = fake_wrapped = fake_destroyed = fake_released = 0;
  fake_refuse = false;
  ps_slice_t plain;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, 200000, &plain), PS_OK);  // before
  ps_shared_block_provide(&kFakeBlocks);
  ps_stage_pool_stats_t before = Stats(PS_MEM_EMU);

  ps_slice_t a;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, 100000, &a), PS_OK);
  EXPECT_EQ(a.len, 100000u);
  EXPECT_EQ(ps_slice_mem_kind(&a), PS_BUF_MEM_SHM);
  EXPECT_TRUE(ps_slice_in_host_mem(&a));
  EXPECT_EQ(fake_created, 1);
  EXPECT_EQ(fake_wrapped, 1);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_shared, before.blocks_shared + 1);
  std::memset(ps_slice_ptr(&a), 0x5a, a.len);
  void *first = ps_slice_ptr(&a);
  ps_slice_t held = ps_slice_ref(&a);  // a van still sending it
  ps_slice_unref(&a);
  EXPECT_EQ(fake_released, 0);
  ps_slice_unref(&held);
  EXPECT_EQ(fake_released, 1);
  EXPECT_EQ(Stats(PS_MEM_EMU).blocks_idle, 1u);

  ps_slice_t b;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, 70000, &b), PS_OK);
  EXPECT_EQ(ps_slice_ptr(&b), first);
  EXPECT_EQ(ps_slice_mem_kind(&b), PS_BUF_MEM_SHM);
  EXPECT_EQ(fake_created, 1);
  EXPECT_EQ(fake_wrapped, 2);
  ps_slice_unref(&b);

  // The block made before the provider: still the pool's own memory.
  EXPECT_EQ(ps_slice_mem_kind(&plain), PS_BUF_MEM_HOST);
  ps_slice_unref(&plain);

  fake_refuse = true;
  ps_slice_t c;
  ASSERT_EQ(ps_stage_pool_get(PS_MEM_EMU, 1 << 20, &c), PS_OK);
  EXPECT_EQ(ps_slice_mem_kind(&c), PS_BUF_MEM_HOST);
  ps_slice_unref(&c);

  ps_shared_block_provide(nullptr);
  ps_stage_pool_trim();
  EXPECT_EQ(fake_destroyed, 1);
}

}  // namespace

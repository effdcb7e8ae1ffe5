// The registration cache against a fake transport that records what is
// registered: hits, the limit and LRU eviction, pins, buffers that go,
// transfers that fill the cache, failures and the retry after eviction.
#include "ps/rdma/common/mr_cache.h"
#include "ps/rdma/common/rdma_shared.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "ps/base/buffer.h"
#include "ps/base/buffer_internal.h"

namespace {

struct FakeTransport {
    std::map<void *, size_t> live;  // handle -> len
    int regs = 0;
    int deregs = 0;
    int fail_next = 0;              // fail this many registrations
    ps_status_t fail_with = PS_ERR_NO_MEMORY;
    size_t lockable = SIZE_MAX;     // registration fails beyond this many live bytes

    size_t live_bytes() const
    {
        size_t n = 0;
        for (auto &kv : live)
            n += kv.second;
        return n;
    }
};

ps_status_t fake_reg(void *ctx, void *addr, size_t len, ps_buf_mem_t, int, void **handle_p)
{
    auto *t = static_cast<FakeTransport *>(ctx);
    if (t->fail_next > 0) {
        t->fail_next--;
        return t->fail_with;
    }
    if (t->live_bytes() + len > t->lockable)
        return PS_ERR_NO_MEMORY;
    t->regs++;
    void *h = new char[1];
    t->live[h] = len;
    (void)addr;
    *handle_p = h;
    return PS_OK;
}

void fake_dereg(void *ctx, void *handle)
{
    auto *t = static_cast<FakeTransport *>(ctx);
    t->deregs++;
    EXPECT_EQ(t->live.erase(handle), 1u);
    delete[] static_cast<char *>(handle);
}

const ps_rdma_reg_ops_t kOps = {
    .size = sizeof(ps_rdma_reg_ops_t),
    .reg = fake_reg,
    .dereg = fake_dereg,
};

class MrCacheTest : public ::testing::Test {
protected:
    void Open(uint64_t max_bytes)
    {
        ps_rdma_mr_cache_params_t p = {"test", PS_LOG_RDMA, max_bytes};
        ASSERT_EQ(ps_rdma_mr_cache_create(&p, &kOps, &t_, &cache_), PS_OK);
    }
    void TearDown() override
    {
        ps_rdma_mr_cache_destroy(cache_);
        for (auto *b : bufs_)
            ps_buf_unref(b);
        EXPECT_TRUE(t_.live.empty());
    }
    ps_slice_t Slice(size_t len, size_t off = 0, size_t n = 0)
    {
        ps_buf_t *b;
        EXPECT_EQ(ps_buf_alloc(len, 0, &b), PS_OK);
        bufs_.push_back(b);
        ps_slice_t s = {b, off, n ? n : len - off};
        return s;
    }
    ps_rdma_mr_cache_stats_t Stats()
    {
        ps_rdma_mr_cache_stats_t s;
        ps_rdma_mr_cache_stats(cache_, &s);
        return s;
    }
    FakeTransport t_;
    ps_rdma_mr_cache_t *cache_ = nullptr;
    std::vector<ps_buf_t *> bufs_;
};

TEST_F(MrCacheTest, SecondSliceOfABufferIsAHit)
{
    Open(0);
    ps_slice_t a = Slice(8192, 0, 100);
    ps_slice_t b = {a.buf, 4096, 100};
    ps_rdma_mr_t *m1, *m2;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &a, &m1), PS_OK);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &b, &m2), PS_OK);
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(m1->addr, a.buf->data);
    EXPECT_EQ(m1->len, 8192u);
    EXPECT_NE(m1->handle, nullptr);
    EXPECT_EQ(t_.regs, 1);
    auto s = Stats();
    EXPECT_EQ(s.hits, 1u);
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.bytes, 8192u);
    EXPECT_EQ(s.in_use, 1u);
    EXPECT_GE(s.slot, 0);
    ps_rdma_mr_cache_put(cache_, m1);
    ps_rdma_mr_cache_put(cache_, m2);
    EXPECT_EQ(Stats().in_use, 0u);
    // Still registered: the next get is a hit.
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &a, &m1), PS_OK);
    EXPECT_EQ(t_.regs, 1);
    ps_rdma_mr_cache_put(cache_, m1);
}

TEST_F(MrCacheTest, RegistrationGoesWithTheBuffer)
{
    Open(0);
    ps_buf_t *b;
    ASSERT_EQ(ps_buf_alloc(4096, 0, &b), PS_OK);
    ps_slice_t s = {b, 0, 4096};
    ps_rdma_mr_t *m;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    EXPECT_EQ(t_.live.size(), 1u);
    ps_buf_unref(b);  // the last reference: the registration goes now
    EXPECT_TRUE(t_.live.empty());
    auto st = Stats();
    EXPECT_EQ(st.bytes, 0u);
    EXPECT_EQ(st.entries, 0u);
}

TEST_F(MrCacheTest, LimitEvictsLeastRecentlyUsed)
{
    Open(3 * 4096);
    ps_slice_t s[4] = {Slice(4096), Slice(4096), Slice(4096), Slice(4096)};
    ps_rdma_mr_t *m;
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s[i], &m), PS_OK);
        ps_rdma_mr_cache_put(cache_, m);
    }
    // Touch 0 so that 1 is the oldest.
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s[0], &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s[3], &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    auto st = Stats();
    EXPECT_EQ(st.evictions, 1u);
    EXPECT_EQ(st.bytes, 3u * 4096);
    int regs = t_.regs;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s[0], &m), PS_OK);  // kept
    ps_rdma_mr_cache_put(cache_, m);
    EXPECT_EQ(t_.regs, regs);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s[1], &m), PS_OK);  // was evicted
    ps_rdma_mr_cache_put(cache_, m);
    EXPECT_EQ(t_.regs, regs + 1);
}

TEST_F(MrCacheTest, InUseIsNeverEvictedAndAFullCacheSaysSo)
{
    Open(2 * 4096);
    ps_slice_t a = Slice(4096), b = Slice(4096), c = Slice(4096);
    ps_rdma_mr_t *ma, *mb, *mc;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &a, &ma), PS_OK);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &b, &mb), PS_OK);
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &c, &mc), PS_ERR_NO_RESOURCE);
    EXPECT_EQ(Stats().failures, 1u);
    EXPECT_NE(ma->handle, nullptr);
    ps_rdma_mr_cache_put(cache_, mb);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &c, &mc), PS_OK);  // b is evicted now
    EXPECT_EQ(Stats().evictions, 1u);
    ps_rdma_mr_cache_put(cache_, ma);
    ps_rdma_mr_cache_put(cache_, mc);
}

TEST_F(MrCacheTest, BufferLargerThanTheCacheIsRefused)
{
    Open(4096);
    ps_slice_t a = Slice(8192);
    ps_rdma_mr_t *m;
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &a, &m), PS_ERR_NO_RESOURCE);
    EXPECT_EQ(t_.regs, 0);
}

TEST_F(MrCacheTest, PinnedSurvivesEvictionUntilUnpinned)
{
    Open(2 * 4096);
    ps_slice_t a = Slice(4096), b = Slice(4096), c = Slice(4096);
    ASSERT_EQ(ps_rdma_mr_cache_pin(cache_, a.buf), PS_OK);
    ps_rdma_mr_t *m;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &b, &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &c, &m), PS_OK);  // evicts b, not a
    ps_rdma_mr_cache_put(cache_, m);
    EXPECT_EQ(Stats().in_use, 1u);
    int regs = t_.regs;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &a, &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    EXPECT_EQ(t_.regs, regs);
    EXPECT_EQ(ps_rdma_mr_cache_unpin(cache_, a.buf), PS_OK);
    EXPECT_EQ(ps_rdma_mr_cache_unpin(cache_, a.buf), PS_ERR_NOT_FOUND);
    EXPECT_EQ(ps_rdma_mr_cache_unpin(cache_, b.buf), PS_ERR_NOT_FOUND);
    EXPECT_EQ(Stats().in_use, 0u);
}

TEST_F(MrCacheTest, FailedRegistrationIsRetriedAfterEvicting)
{
    Open(0);
    t_.lockable = 2 * 4096;  // like a small `ulimit -l`
    ps_slice_t a = Slice(4096), b = Slice(4096), c = Slice(4096);
    ps_rdma_mr_t *m;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &a, &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &b, &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    // No cache limit, but the transport refuses: idle ones go, then it works.
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &c, &m), PS_OK);
    EXPECT_EQ(Stats().evictions, 2u);
    // With c in use and the lockable memory used up, a failure is reported.
    ps_slice_t d = Slice(2 * 4096);
    ps_rdma_mr_t *md;
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &d, &md), PS_ERR_NO_MEMORY);
    ps_rdma_mr_cache_put(cache_, m);
    t_.fail_next = 1;
    t_.fail_with = PS_ERR_UNSUPPORTED;  // not retried
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &d, &md), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(Stats().failures, 2u);
}

TEST_F(MrCacheTest, BuffersOutliveTheCache)
{
    Open(0);
    ps_buf_t *b;
    ASSERT_EQ(ps_buf_alloc(4096, 0, &b), PS_OK);
    ps_slice_t s = {b, 0, 4096};
    ps_rdma_mr_t *m;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &m), PS_OK);
    ps_rdma_mr_cache_put(cache_, m);
    ps_rdma_mr_cache_destroy(cache_);  // deregisters now
    cache_ = nullptr;
    EXPECT_TRUE(t_.live.empty());
    // A new cache (same slot) finds the old, dead entry and replaces it.
    Open(0);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &m), PS_OK);
    EXPECT_NE(m->handle, nullptr);
    ps_rdma_mr_cache_put(cache_, m);
    ps_buf_unref(b);
    EXPECT_TRUE(t_.live.empty());
}

TEST_F(MrCacheTest, TwoCachesShareABuffer)
{
    Open(0);
    FakeTransport t2;
    ps_rdma_mr_cache_params_t p = {"second", PS_LOG_RDMA, 0};
    ps_rdma_mr_cache_t *c2;
    ASSERT_EQ(ps_rdma_mr_cache_create(&p, &kOps, &t2, &c2), PS_OK);
    ps_slice_t s = Slice(4096);
    ps_rdma_mr_t *m1, *m2;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &m1), PS_OK);
    ASSERT_EQ(ps_rdma_mr_cache_get(c2, &s, &m2), PS_OK);
    EXPECT_NE(m1, m2);
    ps_rdma_mr_cache_stats_t s1, s2;
    ps_rdma_mr_cache_stats(cache_, &s1);
    ps_rdma_mr_cache_stats(c2, &s2);
    EXPECT_NE(s1.slot, s2.slot);
    ps_rdma_mr_cache_put(cache_, m1);
    ps_rdma_mr_cache_put(c2, m2);
    ps_rdma_mr_cache_destroy(c2);
    EXPECT_TRUE(t2.live.empty());
}

TEST_F(MrCacheTest, WithoutASlotEveryUseRegisters)
{
    // Take every slot with other caches.
    FakeTransport others;
    std::vector<ps_rdma_mr_cache_t *> held;
    ps_rdma_mr_cache_params_t p = {"other", PS_LOG_RDMA, 0};
    for (int i = 0; i < PS_BUF_REG_SLOTS; i++) {
        ps_rdma_mr_cache_t *c;
        ASSERT_EQ(ps_rdma_mr_cache_create(&p, &kOps, &others, &c), PS_OK);
        held.push_back(c);
    }
    Open(0);
    EXPECT_EQ(Stats().slot, -1);
    ps_slice_t s = Slice(4096);
    ps_rdma_mr_t *m;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &m), PS_OK);
    EXPECT_EQ(t_.live.size(), 1u);
    ps_rdma_mr_cache_put(cache_, m);
    EXPECT_TRUE(t_.live.empty());
    EXPECT_EQ(ps_rdma_mr_cache_pin(cache_, s.buf), PS_ERR_UNSUPPORTED);
    for (auto *c : held)
        ps_rdma_mr_cache_destroy(c);
}

TEST(MrCacheLimit, DefaultFollowsTheConfigAndMemlock)
{
    // No pinning: no limit unless configured.
    unsetenv("PS_MR_CACHE_BYTES");
    EXPECT_EQ(ps_rdma_mr_cache_default_limit(0), 0u);
    setenv("PS_MR_CACHE_BYTES", "64m", 1);
    EXPECT_EQ(ps_rdma_mr_cache_default_limit(0), 64u << 20);
    EXPECT_EQ(ps_rdma_mr_cache_default_limit(1), 64u << 20);
    unsetenv("PS_MR_CACHE_BYTES");
}

TEST(MrCacheArgs, BadArguments)
{
    ps_rdma_mr_cache_params_t p = {"x", PS_LOG_RDMA, 0};
    ps_rdma_mr_cache_t *c;
    EXPECT_EQ(ps_rdma_mr_cache_create(&p, nullptr, nullptr, &c), PS_ERR_INVALID_ARG);
    ps_rdma_reg_ops_t small = kOps;
    small.size = 1;
    EXPECT_EQ(ps_rdma_mr_cache_create(&p, &small, nullptr, &c), PS_ERR_INVALID_ARG);
    FakeTransport t;
    ASSERT_EQ(ps_rdma_mr_cache_create(&p, &kOps, &t, &c), PS_OK);
    ps_slice_t empty = PS_SLICE_EMPTY_INIT;
    ps_rdma_mr_t *m;
    EXPECT_EQ(ps_rdma_mr_cache_get(c, &empty, &m), PS_ERR_INVALID_ARG);
    ps_rdma_mr_cache_destroy(c);
}

}  // namespace

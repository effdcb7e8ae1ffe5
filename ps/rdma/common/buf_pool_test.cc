// The registered buffer pool: size classes, reuse after the last
// reference goes, registration once per block, the idle bound, blocks
// that outlive the pool.
#include "ps/rdma/common/buf_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace {

struct Regs {
    std::set<void *> live;
    int regs = 0;
    bool fail = false;
};

ps_status_t reg(void *ctx, void *addr, size_t, ps_buf_mem_t, int, void **h)
{
    auto *r = static_cast<Regs *>(ctx);
    if (r->fail)
        return PS_ERR_REGISTRATION;
    r->regs++;
    r->live.insert(addr);
    *h = addr;
    return PS_OK;
}

void dereg(void *ctx, void *h)
{
    auto *r = static_cast<Regs *>(ctx);
    EXPECT_EQ(r->live.erase(h), 1u);
}

const ps_rdma_reg_ops_t kOps = {sizeof(ps_rdma_reg_ops_t), reg, dereg};

TEST(BufPool, ReusesBlocksOfAClass)
{
    Regs r;
    ps_rdma_buf_pool_t *p;
    ASSERT_EQ(ps_rdma_buf_pool_create("test", &kOps, &r, 0, 0, &p), PS_OK);
    ps_slice_t s;
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 5000, &s), PS_OK);
    EXPECT_EQ(s.len, 5000u);
    EXPECT_EQ(ps_buf_length(s.buf), 8192u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ps_slice_ptr(&s)) % 4096, 0u);
    memset(ps_slice_ptr(&s), 0xab, s.len);
    void *mem = ps_slice_ptr(&s);
    EXPECT_EQ(ps_rdma_buf_pool_handle(p, &s), mem);
    ps_slice_unref(&s);
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 8000, &s), PS_OK);  // same class
    EXPECT_EQ(ps_slice_ptr(&s), mem);
    EXPECT_EQ(r.regs, 1);
    ps_slice_t t;
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 100, &t), PS_OK);  // smallest class
    EXPECT_EQ(ps_buf_length(t.buf), 4096u);
    EXPECT_EQ(r.regs, 2);
    ps_rdma_buf_pool_stats_t st;
    ps_rdma_buf_pool_stats(p, &st);
    EXPECT_EQ(st.blocks, 2u);
    EXPECT_EQ(st.gets, 3u);
    EXPECT_EQ(st.reuses, 1u);
    ps_slice_unref(&s);
    ps_slice_unref(&t);
    ps_rdma_buf_pool_destroy(p);
    EXPECT_TRUE(r.live.empty());
}

TEST(BufPool, ForeignSliceHasNoHandle)
{
    Regs r;
    ps_rdma_buf_pool_t *p;
    ASSERT_EQ(ps_rdma_buf_pool_create("test", &kOps, &r, 0, 0, &p), PS_OK);
    ps_slice_t s;
    ASSERT_EQ(ps_slice_alloc(64, 0, &s), PS_OK);
    EXPECT_EQ(ps_rdma_buf_pool_handle(p, &s), nullptr);
    ps_slice_unref(&s);
    ps_rdma_buf_pool_destroy(p);
}

TEST(BufPool, IdleBoundAndOversize)
{
    Regs r;
    ps_rdma_buf_pool_t *p;
    ASSERT_EQ(ps_rdma_buf_pool_create("test", &kOps, &r, 8192, 16384, &p), PS_OK);
    ps_slice_t a, b, big;
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 8192, &a), PS_OK);
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 8192, &b), PS_OK);
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 20000, &big), PS_OK);  // above max_block
    EXPECT_EQ(ps_buf_length(big.buf), 20480u);
    ps_slice_unref(&a);
    ps_slice_unref(&b);  // over the idle bound: freed
    ps_slice_unref(&big);
    ps_rdma_buf_pool_stats_t st;
    ps_rdma_buf_pool_stats(p, &st);
    EXPECT_EQ(st.blocks, 1u);
    EXPECT_EQ(st.idle_bytes, 8192u);
    EXPECT_EQ(r.live.size(), 1u);
    ps_rdma_buf_pool_destroy(p);
    EXPECT_TRUE(r.live.empty());
}

TEST(BufPool, BlocksOutliveThePool)
{
    Regs r;
    ps_rdma_buf_pool_t *p;
    ASSERT_EQ(ps_rdma_buf_pool_create("test", &kOps, &r, 0, 0, &p), PS_OK);
    ps_slice_t s;
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 100, &s), PS_OK);
    ps_rdma_buf_pool_destroy(p);
    EXPECT_TRUE(r.live.empty());  // deregistered while the transport is open
    memset(ps_slice_ptr(&s), 1, s.len);  // the memory is still the holder's
    ps_slice_unref(&s);
}

TEST(BufPool, WithoutOpsAndFailures)
{
    ps_rdma_buf_pool_t *p;
    ASSERT_EQ(ps_rdma_buf_pool_create("test", nullptr, nullptr, 0, 0, &p), PS_OK);
    ps_slice_t s;
    ASSERT_EQ(ps_rdma_buf_pool_get(p, 1, &s), PS_OK);
    EXPECT_EQ(ps_rdma_buf_pool_handle(p, &s), nullptr);
    EXPECT_EQ(ps_rdma_buf_pool_get(p, 0, &s), PS_ERR_INVALID_ARG);
    ps_slice_unref(&s);
    ps_rdma_buf_pool_destroy(p);

    Regs r;
    r.fail = true;
    ASSERT_EQ(ps_rdma_buf_pool_create("test", &kOps, &r, 0, 0, &p), PS_OK);
    EXPECT_EQ(ps_rdma_buf_pool_get(p, 1, &s), PS_ERR_REGISTRATION);
    ps_rdma_buf_pool_destroy(p);
}

}  // namespace

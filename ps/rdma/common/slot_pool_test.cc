// The address pool: ids round-trip, stale ids are refused, a full pool
// says so, drain gives everything back.
#include "ps/rdma/common/slot_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace {

TEST(SlotPool, AllocGetRelease)
{
    ps_rdma_slot_pool_t *p;
    ASSERT_EQ(ps_rdma_slot_pool_create("test", 4, &p), PS_OK);
    int a = 1, b = 2;
    uint32_t ia, ib;
    ASSERT_EQ(ps_rdma_slot_alloc(p, &a, &ia), PS_OK);
    ASSERT_EQ(ps_rdma_slot_alloc(p, &b, &ib), PS_OK);
    EXPECT_NE(ia, PS_RDMA_SLOT_NONE);
    EXPECT_NE(ia, ib);
    EXPECT_EQ(ps_rdma_slot_get(p, ia), &a);
    EXPECT_EQ(ps_rdma_slot_get(p, ib), &b);
    EXPECT_EQ(ps_rdma_slot_in_use(p), 2u);
    EXPECT_EQ(ps_rdma_slot_release(p, ia), &a);
    EXPECT_EQ(ps_rdma_slot_get(p, ia), nullptr);      // freed
    EXPECT_EQ(ps_rdma_slot_release(p, ia), nullptr);  // twice: refused
    // The slot is reused with another generation: the old id stays dead.
    uint32_t ic;
    ASSERT_EQ(ps_rdma_slot_alloc(p, &a, &ic), PS_OK);
    EXPECT_NE(ic, ia);
    EXPECT_EQ(ps_rdma_slot_get(p, ia), nullptr);
    EXPECT_EQ(ps_rdma_slot_get(p, ic), &a);
    EXPECT_EQ(ps_rdma_slot_get(p, 0xFFFFFu), nullptr);  // out of range
    EXPECT_EQ(ps_rdma_slot_get(p, PS_RDMA_SLOT_NONE), nullptr);
    ps_rdma_slot_pool_destroy(p);
}

TEST(SlotPool, FullPoolIsAnError)
{
    ps_rdma_slot_pool_t *p;
    ASSERT_EQ(ps_rdma_slot_pool_create("test", 3, &p), PS_OK);
    int x;
    uint32_t ids[3], extra;
    for (auto &id : ids)
        ASSERT_EQ(ps_rdma_slot_alloc(p, &x, &id), PS_OK);
    EXPECT_EQ(ps_rdma_slot_alloc(p, &x, &extra), PS_ERR_NO_RESOURCE);
    ps_rdma_slot_release(p, ids[1]);
    EXPECT_EQ(ps_rdma_slot_alloc(p, &x, &extra), PS_OK);
    EXPECT_EQ(ps_rdma_slot_capacity(p), 3u);
    ps_rdma_slot_pool_destroy(p);
}

TEST(SlotPool, GenerationsWrapWithoutZero)
{
    ps_rdma_slot_pool_t *p;
    ASSERT_EQ(ps_rdma_slot_pool_create("test", 1, &p), PS_OK);
    int x;
    std::set<uint32_t> seen;
    for (int i = 0; i < 5000; i++) {
        uint32_t id;
        ASSERT_EQ(ps_rdma_slot_alloc(p, &x, &id), PS_OK);
        ASSERT_NE(id, PS_RDMA_SLOT_NONE);
        seen.insert(id);
        ASSERT_EQ(ps_rdma_slot_release(p, id), &x);
    }
    EXPECT_EQ(seen.size(), 4095u);  // every generation 1..4095
    ps_rdma_slot_pool_destroy(p);
}

TEST(SlotPool, DrainMatching)
{
    ps_rdma_slot_pool_t *p;
    ASSERT_EQ(ps_rdma_slot_pool_create("test", 8, &p), PS_OK);
    std::vector<int> v = {1, 2, 3, 4, 5};
    std::vector<uint32_t> ids(v.size());
    for (size_t i = 0; i < v.size(); i++)
        ASSERT_EQ(ps_rdma_slot_alloc(p, &v[i], &ids[i]), PS_OK);
    std::vector<int> got;
    auto even = [](void *, void *ptr) { return *static_cast<int *>(ptr) % 2 == 0 ? 1 : 0; };
    auto collect = [](void *arg, void *ptr) {
        static_cast<std::vector<int> *>(arg)->push_back(*static_cast<int *>(ptr));
    };
    ps_rdma_slot_drain(p, even, collect, &got);
    EXPECT_EQ(got.size(), 2u);
    EXPECT_EQ(ps_rdma_slot_in_use(p), 3u);
    EXPECT_EQ(ps_rdma_slot_get(p, ids[1]), nullptr);
    EXPECT_EQ(ps_rdma_slot_get(p, ids[0]), &v[0]);
    got.clear();
    ps_rdma_slot_drain(p, nullptr, collect, &got);
    EXPECT_EQ(got.size(), 3u);
    EXPECT_EQ(ps_rdma_slot_in_use(p), 0u);
    ps_rdma_slot_pool_destroy(p);
}

TEST(SlotPool, BadArguments)
{
    ps_rdma_slot_pool_t *p;
    EXPECT_EQ(ps_rdma_slot_pool_create("x", 0, &p), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_rdma_slot_pool_create("x", PS_RDMA_SLOT_POOL_MAX + 1, &p), PS_ERR_INVALID_ARG);
    ASSERT_EQ(ps_rdma_slot_pool_create("x", 1, &p), PS_OK);
    uint32_t id;
    EXPECT_EQ(ps_rdma_slot_alloc(p, nullptr, &id), PS_ERR_INVALID_ARG);
    ps_rdma_slot_pool_destroy(p);
}

}  // namespace

// Rendezvous bookkeeping: put/take by request identity, replacement,
// the bound (oldest dropped), a failed peer's entries, teardown.
#include "ps/rdma/common/rdv_table.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

struct Dropped {
    std::vector<int> values;
};

void on_drop(void *arg, const ps_rdma_rdv_key_t *, void *value)
{
    auto *d = static_cast<Dropped *>(arg);
    d->values.push_back(*static_cast<int *>(value));
}

TEST(RdvTable, PutTake)
{
    Dropped d;
    ps_rdma_rdv_table_t *t;
    ASSERT_EQ(ps_rdma_rdv_create(16, on_drop, &d, &t), PS_OK);
    int v1 = 1, v2 = 2;
    ps_rdma_rdv_key_t k1 = {9, 0, 0, 17};
    ps_rdma_rdv_key_t k2 = {9, 0, 0, 18};
    ps_rdma_rdv_key_t k3 = {11, 0, 0, 17};
    ASSERT_EQ(ps_rdma_rdv_put(t, &k1, &v1), PS_OK);
    ASSERT_EQ(ps_rdma_rdv_put(t, &k2, &v2), PS_OK);
    EXPECT_EQ(ps_rdma_rdv_size(t), 2u);
    EXPECT_EQ(ps_rdma_rdv_take(t, &k3), nullptr);
    EXPECT_EQ(ps_rdma_rdv_take(t, &k1), &v1);
    EXPECT_EQ(ps_rdma_rdv_take(t, &k1), nullptr);
    EXPECT_EQ(ps_rdma_rdv_size(t), 1u);
    ps_rdma_rdv_destroy(t);
    ASSERT_EQ(d.values.size(), 1u);  // v2, at destroy
    EXPECT_EQ(d.values[0], 2);
}

TEST(RdvTable, ReplaceDropsTheOld)
{
    Dropped d;
    ps_rdma_rdv_table_t *t;
    ASSERT_EQ(ps_rdma_rdv_create(16, on_drop, &d, &t), PS_OK);
    int v1 = 1, v2 = 2;
    ps_rdma_rdv_key_t k = {9, 1, 2, 3};
    ASSERT_EQ(ps_rdma_rdv_put(t, &k, &v1), PS_OK);
    ASSERT_EQ(ps_rdma_rdv_put(t, &k, &v2), PS_OK);
    ASSERT_EQ(d.values.size(), 1u);
    EXPECT_EQ(d.values[0], 1);
    EXPECT_EQ(ps_rdma_rdv_take(t, &k), &v2);
    ps_rdma_rdv_destroy(t);
}

TEST(RdvTable, BoundDropsOldest)
{
    Dropped d;
    ps_rdma_rdv_table_t *t;
    ASSERT_EQ(ps_rdma_rdv_create(3, on_drop, &d, &t), PS_OK);
    int v[5] = {0, 1, 2, 3, 4};
    for (int i = 0; i < 5; i++) {
        ps_rdma_rdv_key_t k = {9, 0, 0, i};
        ASSERT_EQ(ps_rdma_rdv_put(t, &k, &v[i]), PS_OK);
    }
    EXPECT_EQ(ps_rdma_rdv_size(t), 3u);
    ASSERT_EQ(d.values.size(), 2u);
    EXPECT_EQ(d.values[0], 0);
    EXPECT_EQ(d.values[1], 1);
    ps_rdma_rdv_key_t k4 = {9, 0, 0, 4};
    EXPECT_EQ(ps_rdma_rdv_take(t, &k4), &v[4]);
    ps_rdma_rdv_destroy(t);
}

TEST(RdvTable, DropPeer)
{
    Dropped d;
    ps_rdma_rdv_table_t *t;
    ASSERT_EQ(ps_rdma_rdv_create(100, on_drop, &d, &t), PS_OK);
    std::vector<int> v(40);
    for (int i = 0; i < 40; i++) {
        v[i] = i;
        ps_rdma_rdv_key_t k = {i % 2 ? 9 : 11, 0, 0, i};
        ASSERT_EQ(ps_rdma_rdv_put(t, &k, &v[i]), PS_OK);
    }
    EXPECT_EQ(ps_rdma_rdv_drop_peer(t, 9), 20u);
    EXPECT_EQ(d.values.size(), 20u);
    for (int x : d.values)
        EXPECT_EQ(x % 2, 1);
    EXPECT_EQ(ps_rdma_rdv_size(t), 20u);
    ps_rdma_rdv_key_t k = {11, 0, 0, 2};
    EXPECT_EQ(ps_rdma_rdv_take(t, &k), &v[2]);
    ps_rdma_rdv_destroy(t);
    EXPECT_EQ(d.values.size(), 39u);
}

TEST(RdvTable, BadArguments)
{
    ps_rdma_rdv_table_t *t;
    EXPECT_EQ(ps_rdma_rdv_create(0, on_drop, nullptr, &t), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_rdma_rdv_create(1, nullptr, nullptr, &t), PS_ERR_INVALID_ARG);
    ASSERT_EQ(ps_rdma_rdv_create(1, on_drop, nullptr, &t), PS_OK);
    ps_rdma_rdv_key_t k = {1, 2, 3, 4};
    EXPECT_EQ(ps_rdma_rdv_put(t, &k, nullptr), PS_ERR_INVALID_ARG);
    ps_rdma_rdv_destroy(t);
}

}  // namespace

// ps__vb_cq_plan: the CQ holds every posted receive plus
// BYTEPS_RDMA_MAX_CONCURR_WR signaled sends, within the device's limit.
#include "ps/rdma/verbs/verbs_cq.h"

#include <climits>

#include <gtest/gtest.h>

TEST(VerbsCq, ReceivesPlusTheSendCap)
{
    int size = 0;
    int64_t room = 0;
    ASSERT_EQ(ps__vb_cq_plan(2048, 4224, 0, &size, &room), PS_OK);
    EXPECT_EQ(size, 2048 + 4224);
    EXPECT_EQ(room, 4224);
    ASSERT_EQ(ps__vb_cq_plan(16, 64, 1 << 22, &size, &room), PS_OK);
    EXPECT_EQ(size, 80);
    EXPECT_EQ(room, 64);
}

TEST(VerbsCq, TheDeviceLimitShrinksTheRoomForSends)
{
    int size = 0;
    int64_t room = 0;
    ASSERT_EQ(ps__vb_cq_plan(2048, 8192, 4096, &size, &room), PS_OK);
    EXPECT_EQ(size, 4096);
    EXPECT_EQ(room, 2048);
}

TEST(VerbsCq, RefusesACqWithoutRoomForSends)
{
    int size = -7;
    int64_t room = -7;
    EXPECT_EQ(ps__vb_cq_plan(4090, 8192, 4096, &size, &room), PS_ERR_CONFIG);
    EXPECT_EQ(ps__vb_cq_plan(2048, PS__VB_CQ_MIN_SENDS - 1, 0, &size, &room), PS_ERR_CONFIG);
    EXPECT_EQ(size, -7);
    EXPECT_EQ(room, -7);
    ASSERT_EQ(ps__vb_cq_plan(2048, PS__VB_CQ_MIN_SENDS, 0, &size, &room), PS_OK);
    EXPECT_EQ(room, PS__VB_CQ_MIN_SENDS);
}

TEST(VerbsCq, NeverOverflowsAnInt)
{
    int size = 0;
    int64_t room = 0;
    ASSERT_EQ(ps__vb_cq_plan(UINT32_MAX, UINT32_MAX, 0, &size, &room), PS_ERR_CONFIG);
    ASSERT_EQ(ps__vb_cq_plan(1024, UINT32_MAX, 0, &size, &room), PS_OK);
    EXPECT_EQ(size, INT_MAX);
    EXPECT_EQ(room, (int64_t)INT_MAX - 1024);
}

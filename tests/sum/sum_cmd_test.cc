// BytePS command encoding: Cantor pairing of (request type, data type).
#include <gtest/gtest.h>

#include "ps/app/sum/sum_cmd.h"

namespace {

TEST(SumCmd, PairingRoundTripsAndMatchesBytePS)
{
    // BytePS: GetCommandType(kDefaultPushPull, FLOAT32) == 0, and the
    // pairing of (m, d) is (m + d)(m + d + 1) / 2 + d.
    EXPECT_EQ(0, ps_sum_cmd_encode(PS_SUM_REQ_DEFAULT, PS_BYTEPS_FLOAT32));
    EXPECT_EQ(2, ps_sum_cmd_encode(PS_SUM_REQ_DEFAULT, PS_BYTEPS_FLOAT64));
    EXPECT_EQ(5, ps_sum_cmd_encode(PS_SUM_REQ_DEFAULT, PS_BYTEPS_FLOAT16));
    EXPECT_EQ(1, ps_sum_cmd_encode(PS_SUM_REQ_ROW_SPARSE, PS_BYTEPS_FLOAT32));
    EXPECT_EQ(3, ps_sum_cmd_encode(PS_SUM_REQ_COMPRESSED, PS_BYTEPS_FLOAT32));
    for (int r = 0; r < 40; r++) {
        for (int d = 0; d < 40; d++) {
            int cmd = ps_sum_cmd_encode(r, d), rr, dd;
            ASSERT_GE(cmd, 0);
            ASSERT_EQ(PS_OK, ps_sum_cmd_decode(cmd, &rr, &dd));
            ASSERT_EQ(r, rr);
            ASSERT_EQ(d, dd);
        }
    }
    int r, d;
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_sum_cmd_decode(-1, &r, &d));
    EXPECT_EQ(-1, ps_sum_cmd_encode(-1, 0));
    EXPECT_EQ(-1, ps_sum_cmd_encode(70000, 70000));
    ASSERT_EQ(PS_OK, ps_sum_cmd_decode(2147483647, &r, &d));
    EXPECT_EQ(2147483647, ps_sum_cmd_encode(r, d));
}

TEST(SumCmd, ResolvesTheTypeToSum)
{
    ps_data_type_t t;
    // cmd 0: the request's type, or float32 for untyped bytes (BytePS).
    ASSERT_EQ(PS_OK, ps_sum_cmd_resolve(0, PS_DATA_BFLOAT16, &t));
    EXPECT_EQ(PS_DATA_BFLOAT16, t);
    ASSERT_EQ(PS_OK, ps_sum_cmd_resolve(0, PS_DATA_CHAR, &t));
    EXPECT_EQ(PS_DATA_FLOAT, t);
    // An encoded type, untyped or agreeing.
    int half = ps_sum_cmd_for_type(PS_DATA_FLOAT16);
    ASSERT_EQ(PS_OK, ps_sum_cmd_resolve(half, PS_DATA_CHAR, &t));
    EXPECT_EQ(PS_DATA_FLOAT16, t);
    ASSERT_EQ(PS_OK, ps_sum_cmd_resolve(half, PS_DATA_FLOAT16, &t));
    EXPECT_EQ(PS_DATA_FLOAT16, t);
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_sum_cmd_resolve(half, PS_DATA_FLOAT, &t));
    // Every BytePS type maps both ways.
    for (int d = 0; d < PS_BYTEPS_DTYPE_COUNT; d++) {
        ps_data_type_t pt;
        int back;
        ASSERT_EQ(PS_OK, ps_sum_dtype_from_byteps(d, &pt));
        ASSERT_EQ(PS_OK, ps_sum_dtype_to_byteps(pt, &back));
        EXPECT_EQ(d, back);
        ASSERT_EQ(PS_OK, ps_sum_cmd_resolve(ps_sum_cmd_encode(0, d), PS_DATA_CHAR, &t));
        EXPECT_EQ(pt, t);
    }
    EXPECT_EQ(0, ps_sum_cmd_for_type(PS_DATA_BFLOAT16)); // no BytePS code: cmd 0
    // Not supported: other request types, unknown data types, CHAR sums.
    EXPECT_EQ(PS_ERR_UNSUPPORTED, ps_sum_cmd_resolve(1, PS_DATA_CHAR, &t));
    EXPECT_EQ(PS_ERR_UNSUPPORTED, ps_sum_cmd_resolve(ps_sum_cmd_encode(0, 9), PS_DATA_CHAR, &t));
    // OTHER is untyped like CHAR: cmd 0 means float32.
    ASSERT_EQ(PS_OK, ps_sum_cmd_resolve(0, PS_DATA_OTHER, &t));
    EXPECT_EQ(PS_DATA_FLOAT, t);
}

} // namespace

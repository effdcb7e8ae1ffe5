// The fast meta form: round trips, what it refuses to encode, and what it
// refuses to decode.
#include "ps/net/codec/meta_fast.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ps/net/codec/codec.h"

namespace {

ps_meta_t PlainMeta()
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.head = 3;
    m.app_id = 0;
    m.customer_id = 7;
    m.timestamp = 123456;
    m.sender = 9;
    m.recver = 8;
    m.request = true;
    m.push = true;
    m.num_data_types = 3;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_FLOAT;
    m.data_types[2] = PS_DATA_INT32;
    m.data_size = 1ull << 33;
    m.key = 0xfedcba9876543210ull;
    m.addr = 0x7fff00001000ull;
    m.val_len = 4096;
    m.priority = -5;
    m.src_dev_type = PS_DEV_CPU;
    return m;
}

TEST(MetaFast, RoundTrip)
{
    static const uint8_t body[] = {'h', 'e', 'l', 'l', 'o'};
    ps_meta_t m = PlainMeta();
    m.body = body;
    m.body_len = sizeof(body);
    uint8_t buf[256];
    size_t len = 0;
    ASSERT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(len, ps_meta_fast_size(&m));
    EXPECT_EQ(len, (size_t)PS_META_FAST_FIXED_LEN + 3 + sizeof(body));
    EXPECT_TRUE(ps_meta_is_fast(buf, len));
    ps_meta_t out;
    ASSERT_EQ(ps_meta_fast_decode(buf, len, &out), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &out));
    ASSERT_EQ(out.body_len, sizeof(body));
    EXPECT_EQ(std::memcmp(out.body, body, sizeof(body)), 0);
}

TEST(MetaFast, DefaultMetaRoundTrips)
{
    ps_meta_t m;
    ps_meta_init(&m);
    uint8_t buf[PS_META_FAST_FIXED_LEN];
    size_t len = 0;
    ASSERT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_OK);
    ps_meta_t out;
    ASSERT_EQ(ps_meta_fast_decode(buf, len, &out), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &out));
}

TEST(MetaFast, RefusesWhatItCannotCarry)
{
    uint8_t buf[512];
    size_t len = 0;
    ps_meta_t m = PlainMeta();
    m.control.cmd = PS_CTRL_BARRIER;
    EXPECT_EQ(ps_meta_fast_size(&m), 0u);
    EXPECT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m = PlainMeta();
    m.van_data_len = 1;
    EXPECT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m = PlainMeta();
    m.is_tensor = true;
    EXPECT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m = PlainMeta();
    m.request_trace.start = 1;
    EXPECT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m = PlainMeta();
    std::vector<uint8_t> big(PS_META_FAST_BODY_MAX + 1, 1);
    m.body = big.data();
    m.body_len = big.size();
    EXPECT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m = PlainMeta();
    EXPECT_EQ(ps_meta_fast_encode(&m, buf, PS_META_FAST_FIXED_LEN, &len), PS_ERR_TOO_LARGE);
}

TEST(MetaFast, DecodeRejectsMalformedInput)
{
    ps_meta_t m = PlainMeta();
    uint8_t buf[256];
    size_t len = 0;
    ASSERT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_OK);
    ps_meta_t out;
    // Every truncation and one extra byte.
    for (size_t cut = 0; cut < len; ++cut)
        EXPECT_EQ(ps_meta_fast_decode(buf, cut, &out), PS_ERR_PROTOCOL) << cut;
    EXPECT_EQ(ps_meta_fast_decode(buf, len + 1, &out), PS_ERR_PROTOCOL);
    uint8_t bad[256];
    std::memcpy(bad, buf, len);
    bad[1] = PS_META_FAST_VERSION + 1;
    EXPECT_EQ(ps_meta_fast_decode(bad, len, &out), PS_ERR_PROTOCOL);
    std::memcpy(bad, buf, len);
    bad[2] = 0x10;  // unknown flag
    EXPECT_EQ(ps_meta_fast_decode(bad, len, &out), PS_ERR_PROTOCOL);
    std::memcpy(bad, buf, len);
    bad[PS_META_FAST_FIXED_LEN] = PS_DATA_TYPE_COUNT;  // unknown data type
    EXPECT_EQ(ps_meta_fast_decode(bad, len, &out), PS_ERR_PROTOCOL);
    std::memcpy(bad, buf, len);
    bad[4 + 4 * 6] = PS_DEV_TYPE_COUNT;  // unknown device type
    EXPECT_EQ(ps_meta_fast_decode(bad, len, &out), PS_ERR_PROTOCOL);
    std::memcpy(bad, buf, len);
    bad[88] = 0xff;  // body length beyond the input
    EXPECT_EQ(ps_meta_fast_decode(bad, len, &out), PS_ERR_PROTOCOL);
}

TEST(MetaFast, NeverMistakenForProtobuf)
{
    // A protobuf encoding never starts with 0x00, so the first byte decides.
    ps_meta_t m = PlainMeta();
    uint8_t buf[256];
    size_t len = 0;
    ASSERT_EQ(ps_meta_encode(&m, buf, sizeof(buf), &len), PS_OK);
    ASSERT_GT(len, 0u);
    EXPECT_FALSE(ps_meta_is_fast(buf, len));
    ps_meta_t out;
    const uint8_t fast_start[] = {0, 1};
    EXPECT_NE(ps_meta_decode(fast_start, sizeof(fast_start), &out, nullptr, 0), PS_OK);
}

}  // namespace

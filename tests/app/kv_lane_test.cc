// The KV app's small-lane form (ps/app/kv_lane.h): what is written reads
// back field for field, and anything that is not exactly one well-formed
// payload is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

extern "C" {
#include "ps/app/kv_lane.h"
}

namespace {

struct Sample {
    std::vector<uint64_t> keys{7, 9, 1ull << 60};
    std::vector<uint8_t> vals{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    std::vector<int32_t> lens{1, 1, 1};
    ps__kv_lane_msg_t m{};

    explicit Sample(bool with_lens)
    {
        m.timestamp = -5;
        m.cmd = 0x7fffffff;
        m.val_len = 0xfffffff0u;
        m.request = 1;
        m.push = 1;
        m.pull = 1;
        m.type = PS_DATA_INT32;
        m.num_keys = keys.size();
        m.keys = keys.data();
        m.vals = vals.data();
        m.vals_len = vals.size();
        m.lens = with_lens ? lens.data() : nullptr;
    }
    std::vector<uint8_t> Write() const
    {
        std::vector<uint8_t> buf(ps__kv_lane_size(m.num_keys, m.vals_len, m.lens != nullptr));
        ps__kv_lane_write(buf.data(), &m);
        return buf;
    }
};

TEST(KvLane, WhatIsWrittenReadsBack)
{
    for (bool with_lens : {false, true}) {
        Sample s(with_lens);
        std::vector<uint8_t> buf = s.Write();
        EXPECT_EQ(PS__KV_LANE_FIXED + 3 * 8 + 12 + (with_lens ? 12u : 0u), buf.size());
        ps__kv_lane_msg_t r;
        ASSERT_EQ(PS_OK, ps__kv_lane_read(buf.data(), buf.size(), &r));
        EXPECT_EQ(-5, r.timestamp);
        EXPECT_EQ(0x7fffffff, r.cmd);
        EXPECT_EQ(0xfffffff0u, r.val_len);
        EXPECT_TRUE(r.request && r.push && r.pull);
        EXPECT_EQ(PS_DATA_INT32, r.type);
        ASSERT_EQ(3u, r.num_keys);
        EXPECT_EQ(0, memcmp(r.keys, s.keys.data(), 24));
        ASSERT_EQ(12u, r.vals_len);
        EXPECT_EQ(0, memcmp(r.vals, s.vals.data(), 12));
        if (with_lens) {
            ASSERT_NE(nullptr, r.lens);
            EXPECT_EQ(0, memcmp(r.lens, s.lens.data(), 12));
        } else {
            EXPECT_EQ(nullptr, r.lens);
        }
    }
}

TEST(KvLane, AnEmptyResponseIsJustTheFixedPart)
{
    ps__kv_lane_msg_t m{};
    m.timestamp = 3;
    m.push = 1;
    std::vector<uint8_t> buf(ps__kv_lane_size(0, 0, 0));
    ASSERT_EQ(static_cast<size_t>(PS__KV_LANE_FIXED), buf.size());
    ps__kv_lane_write(buf.data(), &m);
    ps__kv_lane_msg_t r;
    ASSERT_EQ(PS_OK, ps__kv_lane_read(buf.data(), buf.size(), &r));
    EXPECT_EQ(3, r.timestamp);
    EXPECT_FALSE(r.request);
    EXPECT_TRUE(r.push);
    EXPECT_FALSE(r.pull);
    EXPECT_EQ(0u, r.num_keys);
    EXPECT_EQ(0u, r.vals_len);
}

TEST(KvLane, MalformedPayloadsAreRefused)
{
    Sample s(true);
    const std::vector<uint8_t> good = s.Write();
    ps__kv_lane_msg_t r;
    // Shorter than its keys and lengths (and than the fixed part).
    for (size_t len = 0; len < PS__KV_LANE_FIXED + 3 * 12; len++) {
        std::vector<uint8_t> b(good);
        b.resize(len);
        EXPECT_EQ(PS_ERR_PROTOCOL, ps__kv_lane_read(b.data(), b.size(), &r)) << len;
    }
    auto refused = [&](size_t at, uint8_t v) {
        std::vector<uint8_t> b(good);
        b[at] = v;
        return ps__kv_lane_read(b.data(), b.size(), &r) == PS_ERR_PROTOCOL;
    };
    EXPECT_TRUE(refused(0, 0x10));                    // an unknown flag
    EXPECT_TRUE(refused(1, PS_DATA_TYPE_COUNT));      // an unknown type
    EXPECT_TRUE(refused(2, 8));                       // more keys than there is room for
    // The values are what the keys and lengths leave: fewer keys or no
    // lengths read as more value bytes, a consistent (other) message.
    ps__kv_lane_msg_t r2;
    std::vector<uint8_t> b(good);
    b[0] = 0x07; // lens flag cleared
    ASSERT_EQ(PS_OK, ps__kv_lane_read(b.data(), b.size(), &r2));
    EXPECT_EQ(nullptr, r2.lens);
    EXPECT_EQ(12u + 12u, r2.vals_len);
    // Counts the form cannot carry.
    EXPECT_EQ(0u, ps__kv_lane_size(65536, 0, 0));
}

} // namespace

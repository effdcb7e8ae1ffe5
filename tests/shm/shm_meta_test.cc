// The compact meta of the shared-memory van: what it carries comes back
// unchanged, what it cannot carry is left to the codec, and a broken one
// is refused.

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
#include "ps/net/codec/message.h"
#include "ps/net/shm/shm_meta.h"
}

namespace {

ps_meta_t DataMeta()
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.head = -3;
    m.app_id = 2;
    m.customer_id = 7;
    m.timestamp = 12345;
    m.sender = 9;
    m.recver = 8;
    m.request = true;
    m.push = true;
    m.pull = true;
    m.simple_app = false;
    m.num_data_types = 3;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_FLOAT16;
    m.data_types[2] = PS_DATA_INT32;
    m.src_dev_type = PS_DEV_CPU;
    m.src_dev_id = 1;
    m.dst_dev_type = PS_DEV_GPU;
    m.dst_dev_id = 3;
    m.data_size = 1ull << 33;
    m.key = 0xfedcba9876543210ull;
    m.addr = 0x7f0000001000ull;
    m.val_len = 4096000;
    m.option = -5;
    m.sid = 11;
    m.priority = -2;
    return m;
}

TEST(ShmMeta, RoundTrip)
{
    ps_meta_t m = DataMeta();
    const char body[] = "some body";
    m.body = reinterpret_cast<const uint8_t *>(body);
    m.body_len = sizeof(body) - 1;
    size_t len = 0;
    ASSERT_TRUE(ps__shm_meta_fast_size(&m, &len));
    std::vector<uint8_t> buf(len);
    ps__shm_meta_fast_write(&m, buf.data());
    ps_meta_t back;
    ASSERT_EQ(ps__shm_meta_fast_read(buf.data(), buf.size(), &back), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &back));
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(back.body), back.body_len), "some body");
}

// The AF app's tensor messages: dtype and shape (after the body) too.
TEST(ShmMeta, TensorsRoundTrip)
{
    ps_meta_t m = DataMeta();
    const char body[] = "batch 7 of 3";
    m.body = reinterpret_cast<const uint8_t *>(body);
    m.body_len = sizeof(body) - 1;
    m.is_tensor = true;
    m.dtype = 15; // bfloat16
    m.ndim = 3;
    m.shape[0] = 128;
    m.shape[1] = 7168;
    m.shape[2] = -1;
    size_t len = 0;
    ASSERT_TRUE(ps__shm_meta_fast_size(&m, &len));
    std::vector<uint8_t> buf(len);
    ps__shm_meta_fast_write(&m, buf.data());
    ps_meta_t back;
    ASSERT_EQ(ps__shm_meta_fast_read(buf.data(), buf.size(), &back), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &back));
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(back.body), back.body_len), body);
    // A length that leaves out part of the shape is refused.
    EXPECT_EQ(ps__shm_meta_fast_read(buf.data(), buf.size() - 8, &back), PS_ERR_PROTOCOL);
    m.ndim = PS_META_MAX_SHAPE + 1;
    EXPECT_FALSE(ps__shm_meta_fast_size(&m, &len));
}

TEST(ShmMeta, LeavesTheRestToTheCodec)
{
    size_t len;
    ps_meta_t m = DataMeta();
    m.control.cmd = PS_CTRL_BARRIER;
    EXPECT_FALSE(ps__shm_meta_fast_size(&m, &len));
    m = DataMeta();
    m.num_data_types = 5;
    EXPECT_FALSE(ps__shm_meta_fast_size(&m, &len));
    m = DataMeta();
    m.request_trace.start = 1;
    EXPECT_FALSE(ps__shm_meta_fast_size(&m, &len));
    m = DataMeta();
    m.van_data_len = 4;
    EXPECT_FALSE(ps__shm_meta_fast_size(&m, &len));
    m = DataMeta();
    std::vector<uint8_t> big(PS__SHM_FAST_BODY_MAX + 1, 'x');
    m.body = big.data();
    m.body_len = big.size();
    EXPECT_FALSE(ps__shm_meta_fast_size(&m, &len));
}

TEST(ShmMeta, RefusesBrokenInput)
{
    ps_meta_t m = DataMeta();
    size_t len = 0;
    ASSERT_TRUE(ps__shm_meta_fast_size(&m, &len));
    std::vector<uint8_t> buf(len);
    ps__shm_meta_fast_write(&m, buf.data());
    ps_meta_t out;
    EXPECT_EQ(ps__shm_meta_fast_read(buf.data(), buf.size() - 1, &out), PS_ERR_PROTOCOL);
    // Every byte flipped in turn: either refused or read without trouble
    // (the values stay in their ranges).
    for (size_t i = 0; i < buf.size(); ++i) {
        std::vector<uint8_t> bad = buf;
        bad[i] ^= 0xff;
        ps_meta_t o;
        if (ps__shm_meta_fast_read(bad.data(), bad.size(), &o) == PS_OK) {
            EXPECT_LE(o.num_data_types, 4u);
            for (uint32_t k = 0; k < o.num_data_types; ++k) {
                EXPECT_LT(static_cast<unsigned>(o.data_types[k]), static_cast<unsigned>(PS_DATA_TYPE_COUNT));
            }
            EXPECT_LT(static_cast<unsigned>(o.src_dev_type), static_cast<unsigned>(PS_DEV_TYPE_COUNT));
        }
    }
}

} // namespace

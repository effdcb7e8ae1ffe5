// The fast meta form: round trips, what it refuses to encode, and what it
// refuses to decode.
#include "ps/net/codec/meta_fast.h"

#include <gtest/gtest.h>

#include <cstdint>
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

// The wire bytes of a typical data meta, written out by hand from the
// layout in meta_fast.h: every field has a distinct value, so an encoder
// that moves, swaps or drops one changes these bytes.
TEST(MetaFast, EncodingIsPinned)
{
    static const uint8_t body[] = {'h', 'e', 'l', 'l', 'o'};
    ps_meta_t m = PlainMeta();
    m.app_id = 0x0102;
    m.push = false;
    m.pull = true;
    m.simple_app = true;
    m.src_dev_id = 3;
    m.dst_dev_type = PS_DEV_GPU;
    m.dst_dev_id = 5;
    m.option = 0x11223344;
    m.sid = -2;
    m.body = body;
    m.body_len = sizeof(body);
    const uint8_t want[] = {
        0x00, PS_META_FAST_VERSION, 0x0d, 3,  // marker, version, request|pull|simple_app, types
        0x03, 0x00, 0x00, 0x00,               // head
        0x02, 0x01, 0x00, 0x00,               // app_id
        0x07, 0x00, 0x00, 0x00,               // customer_id
        0x40, 0xe2, 0x01, 0x00,               // timestamp 123456
        0x09, 0x00, 0x00, 0x00,               // sender
        0x08, 0x00, 0x00, 0x00,               // recver
        0x01, 0x00, 0x00, 0x00,               // src_dev_type cpu
        0x03, 0x00, 0x00, 0x00,               // src_dev_id
        0x02, 0x00, 0x00, 0x00,               // dst_dev_type gpu
        0x05, 0x00, 0x00, 0x00,               // dst_dev_id
        0x44, 0x33, 0x22, 0x11,               // option
        0xfe, 0xff, 0xff, 0xff,               // sid -2
        0xfb, 0xff, 0xff, 0xff,               // priority -5
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,  // data_size 2^33
        0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe,  // key
        0x00, 0x10, 0x00, 0x00, 0xff, 0x7f, 0x00, 0x00,  // addr
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // val_len 4096
        0x05, 0x00, 0x00, 0x00,                          // body_len
        PS_DATA_UINT64, PS_DATA_FLOAT, PS_DATA_INT32,    // data types
        'h', 'e', 'l', 'l', 'o',
    };
    static_assert(sizeof(want) == PS_META_FAST_FIXED_LEN + 3 + 5, "layout");
    uint8_t buf[256];
    std::memset(buf, 0xa5, sizeof(buf));
    size_t len = 0;
    ASSERT_EQ(ps_meta_fast_size(&m), sizeof(want));
    ASSERT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_OK);
    ASSERT_EQ(len, sizeof(want));
    EXPECT_EQ(std::memcmp(buf, want, sizeof(want)), 0);
    EXPECT_EQ(buf[len], 0xa5);  // nothing written past the end

    // Decoding gives back every field, the rest as ps_meta_init leaves it,
    // even over a meta full of stale values.
    ps_meta_t out;
    std::memset(&out, 0x5a, sizeof(out));
    ASSERT_EQ(ps_meta_fast_decode(want, sizeof(want), &out), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &out));
    EXPECT_EQ(out.body, want + PS_META_FAST_FIXED_LEN + 3);
    ps_meta_t init;
    ps_meta_init(&init);
    for (unsigned i = 3; i < PS_META_MAX_DATA; ++i)
        EXPECT_EQ(out.data_types[i], 0) << i;
    EXPECT_EQ(std::memcmp(&out.control, &init.control, sizeof(init.control)), 0);
    EXPECT_FALSE(out.is_tensor);
    EXPECT_EQ(out.dtype, 0);
    EXPECT_EQ(out.ndim, 0u);
    EXPECT_EQ(std::memcmp(out.shape, init.shape, sizeof(init.shape)), 0);
    EXPECT_EQ(std::memcmp(&out.request_trace, &init.request_trace, sizeof(init.request_trace)), 0);
    EXPECT_EQ(std::memcmp(&out.response_trace, &init.response_trace, sizeof(init.response_trace)),
              0);
    EXPECT_EQ(out.num_slave_qp_counters, 0u);
    EXPECT_EQ(std::memcmp(out.slave_qp_counter, init.slave_qp_counter,
                          sizeof(init.slave_qp_counter)), 0);
    EXPECT_EQ(out.slave_qp_num, 0u);
    EXPECT_EQ(out.van_data_len, 0u);
    EXPECT_EQ(std::memcmp(out.van_data, init.van_data, sizeof(init.van_data)), 0);
}

// Every combination of the four flags, both ways.
TEST(MetaFast, EveryFlagCombination)
{
    for (unsigned f = 0; f < 16; ++f) {
        ps_meta_t m = PlainMeta();
        m.request = (f & 1) != 0;
        m.push = (f & 2) != 0;
        m.pull = (f & 4) != 0;
        m.simple_app = (f & 8) != 0;
        uint8_t buf[256];
        size_t len = 0;
        ASSERT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_OK);
        EXPECT_EQ(buf[2], f);
        ps_meta_t out;
        std::memset(&out, 0xff, sizeof(out));
        ASSERT_EQ(ps_meta_fast_decode(buf, len, &out), PS_OK);
        EXPECT_EQ(out.request, m.request) << f;
        EXPECT_EQ(out.push, m.push) << f;
        EXPECT_EQ(out.pull, m.pull) << f;
        EXPECT_EQ(out.simple_app, m.simple_app) << f;
        uint8_t raw[4];
        std::memcpy(raw, &out.request, 1);
        std::memcpy(raw + 1, &out.push, 1);
        std::memcpy(raw + 2, &out.pull, 1);
        std::memcpy(raw + 3, &out.simple_app, 1);
        for (unsigned b = 0; b < 4; ++b)
            EXPECT_EQ(raw[b], (f >> b) & 1) << f << " " << b;  // canonical bools
        EXPECT_TRUE(ps_meta_equal(&m, &out));
    }
}

// Each field outside the fast form alone makes a meta not plain.
TEST(MetaFast, EveryNonPlainFieldIsSeen)
{
    ps_node_t node;
    ps_node_init(&node);
    static const uint8_t body[] = {1};
    std::vector<void (*)(ps_meta_t *)> edits = {
        [](ps_meta_t *m) { m->control.cmd = PS_CTRL_ACK; },
        [](ps_meta_t *m) { m->control.num_nodes = 1; },
        [](ps_meta_t *m) { m->control.barrier_group = 4; },
        [](ps_meta_t *m) { m->control.msg_sig = 1ull << 63; },
        [](ps_meta_t *m) { m->num_data_types = PS_META_MAX_DATA + 1; },
        [](ps_meta_t *m) { m->body_len = 1; },  // with a NULL body
        [](ps_meta_t *m) { m->is_tensor = true; },
        [](ps_meta_t *m) { m->dtype = -1; },
        [](ps_meta_t *m) { m->ndim = 1; },
        [](ps_meta_t *m) { m->shape[0] = 1; },
        [](ps_meta_t *m) { m->shape[PS_META_MAX_SHAPE - 1] = INT64_MIN; },
        [](ps_meta_t *m) { m->request_trace.pre_start = 1; },
        [](ps_meta_t *m) { m->request_trace.process = 1; },
        [](ps_meta_t *m) { m->response_trace.pre_start = 1; },
        [](ps_meta_t *m) { m->response_trace.process = 1ull << 40; },
        [](ps_meta_t *m) { m->num_slave_qp_counters = 1; },
        [](ps_meta_t *m) { m->slave_qp_num = 1; },
        [](ps_meta_t *m) { m->van_data_len = 1; },
        [](ps_meta_t *m) { m->data_types[2] = (ps_data_type_t)PS_DATA_TYPE_COUNT; },
        [](ps_meta_t *m) { m->data_types[0] = (ps_data_type_t)-1; },
        [](ps_meta_t *m) { m->src_dev_type = (ps_device_type_t)PS_DEV_TYPE_COUNT; },
        [](ps_meta_t *m) { m->dst_dev_type = (ps_device_type_t)-1; },
    };
    uint8_t buf[8192];
    size_t len = 0;
    for (size_t i = 0; i < edits.size(); ++i) {
        ps_meta_t m = PlainMeta();
        ASSERT_NE(ps_meta_fast_size(&m), 0u);
        edits[i](&m);
        EXPECT_EQ(ps_meta_fast_size(&m), 0u) << i;
        EXPECT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED) << i;
    }
    // The largest body still fits; fields past num_data_types are not looked at.
    ps_meta_t m = PlainMeta();
    std::vector<uint8_t> big(PS_META_FAST_BODY_MAX, 7);
    m.body = big.data();
    m.body_len = big.size();
    m.data_types[3] = (ps_data_type_t)PS_DATA_TYPE_COUNT;
    EXPECT_EQ(ps_meta_fast_size(&m), PS_META_FAST_FIXED_LEN + 3 + big.size());
    m.body = body;
    m.body_len = sizeof(body);
    m.num_data_types = PS_META_MAX_DATA;
    for (unsigned k = 0; k < PS_META_MAX_DATA; ++k)
        m.data_types[k] = PS_DATA_BFLOAT16;
    ASSERT_EQ(ps_meta_fast_encode(&m, buf, sizeof(buf), &len), PS_OK);
    ps_meta_t out;
    ASSERT_EQ(ps_meta_fast_decode(buf, len, &out), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &out));
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

// The compact forms: the version-2 meta (meta_fast.h) and the compact frame
// header (frame.h). Round trips over random metas and headers with edge
// values, the same decoded meta as version 1, every truncation, every
// malformed varint and field, pinned bytes of a typical request, and what
// ps_frame_encode_head() now sends for a small message.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ps/net/codec/frame.h"
#include "ps/net/codec/frame_encode.h"
#include "ps/net/codec/message.h"
#include "ps/net/codec/meta_fast.h"

namespace {

typedef std::vector<uint8_t> Bytes;

// A typical KV push-pull request of one 8-byte value: key and value
// segments, as kv_worker.c fills it.
ps_meta_t PushPullRequest()
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.head = 0;
    m.app_id = 0;
    m.customer_id = 0;
    m.timestamp = 1234;
    m.sender = 9;
    m.recver = 8;
    m.request = true;
    m.push = true;
    m.pull = true;
    m.num_data_types = 2;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_FLOAT;
    m.data_size = 16;
    m.key = 3;
    m.addr = 0x7f12345678a0ull;
    m.val_len = 8;
    return m;
}

// m encoded by `encode` into a buffer of `cap` bytes, cut to its length.
Bytes Encoded(ps_status_t (*encode)(const ps_meta_t *, uint8_t *, size_t, size_t *), size_t cap,
              const ps_meta_t &m)
{
    Bytes b(cap);
    size_t len = 0;
    EXPECT_EQ(encode(&m, b.data(), b.size(), &len), PS_OK);
    b.resize(len);
    return b;
}

Bytes Compact(const ps_meta_t &m)
{
    return Encoded(ps_meta_compact_encode,
                   PS_META_COMPACT_MAX_FIXED + PS_META_MAX_DATA + PS_META_FAST_BODY_MAX, m);
}

Bytes V1(const ps_meta_t &m)
{
    return Encoded(ps_meta_fast_encode,
                   PS_META_FAST_FIXED_LEN + PS_META_MAX_DATA + PS_META_FAST_BODY_MAX, m);
}

ps_status_t Decode(const Bytes &b, ps_meta_t *m)
{
    // An exact-size copy, so that ASan sees any read past the end.
    std::vector<uint8_t> *copy = new std::vector<uint8_t>(b);
    ps_status_t st = ps_meta_fast_decode(copy->empty() ? nullptr : copy->data(), copy->size(), m);
    if (st == PS_OK && m->body_len != 0) {
        // Keep the body valid for the caller: point it at b.
        m->body = b.data() + (m->body - copy->data());
    }
    delete copy;
    return st;
}

int32_t EdgeI32(std::mt19937_64 &rng)
{
    static const int32_t edges[] = {0, 1, -1, 63, 64, -64, -65, 127, 128, 8191, 8192,
                                    PS_NODE_EMPTY, INT32_MAX, INT32_MIN, INT32_MIN + 1};
    switch (rng() % 4) {
    case 0:
        return 0;
    case 1:
        return edges[rng() % (sizeof(edges) / sizeof(edges[0]))];
    case 2:
        return (int32_t)(rng() % 300);
    default:
        return (int32_t)(uint32_t)rng();
    }
}

uint64_t EdgeU64(std::mt19937_64 &rng)
{
    static const uint64_t edges[] = {0, 1, 127, 128, 16383, 16384, (1ull << 56) - 1, 1ull << 56,
                                     1ull << 63, UINT64_MAX, 0x7f12345678a0ull};
    switch (rng() % 4) {
    case 0:
        return 0;
    case 1:
        return edges[rng() % (sizeof(edges) / sizeof(edges[0]))];
    case 2:
        return rng() % 5000;
    default:
        return rng() >> (rng() % 64);
    }
}

ps_meta_t RandomPlainMeta(std::mt19937_64 &rng, std::vector<uint8_t> *body)
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.head = EdgeI32(rng);
    m.app_id = EdgeI32(rng);
    m.customer_id = EdgeI32(rng);
    m.timestamp = EdgeI32(rng);
    m.sender = EdgeI32(rng);
    m.recver = EdgeI32(rng);
    m.request = rng() & 1;
    m.push = rng() & 1;
    m.pull = rng() & 1;
    m.simple_app = rng() & 1;
    static const uint32_t ntypes[] = {0, 1, 2, 3, PS_META_MAX_DATA};
    m.num_data_types = ntypes[rng() % 5];
    for (uint32_t i = 0; i < m.num_data_types; i++)
        m.data_types[i] = (ps_data_type_t)(rng() % PS_DATA_TYPE_COUNT);
    m.src_dev_type = (ps_device_type_t)(rng() % PS_DEV_TYPE_COUNT);
    m.src_dev_id = rng() % 2 ? -1 : EdgeI32(rng);
    m.dst_dev_type = (ps_device_type_t)(rng() % PS_DEV_TYPE_COUNT);
    m.dst_dev_id = rng() % 2 ? -1 : EdgeI32(rng);
    m.data_size = EdgeU64(rng);
    m.key = EdgeU64(rng);
    m.addr = EdgeU64(rng);
    m.val_len = EdgeU64(rng);
    m.option = EdgeI32(rng);
    m.sid = EdgeI32(rng);
    m.priority = EdgeI32(rng);
    static const size_t blens[] = {0, 0, 1, 127, 128, PS_META_FAST_BODY_MAX};
    body->resize(blens[rng() % 6]);
    for (auto &c : *body)
        c = (uint8_t)rng();
    m.body_len = body->size();
    m.body = body->empty() ? nullptr : body->data();
    return m;
}

// Both decoders into the same garbage; equal bytes but for the body
// pointer (which points into each input).
void ExpectSameAsV1(const ps_meta_t &m)
{
    Bytes c = Compact(m);
    Bytes v = V1(m);
    ps_meta_t a, b;
    memset(&a, 0xa5, sizeof(a));
    memset(&b, 0xa5, sizeof(b));
    ASSERT_EQ(Decode(c, &a), PS_OK);
    ASSERT_EQ(Decode(v, &b), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&a, &m));
    if (a.body_len != 0) {
        EXPECT_EQ(memcmp(a.body, b.body, a.body_len), 0);
        EXPECT_GE(a.body, c.data());
        EXPECT_LE(a.body + a.body_len, c.data() + c.size());
    }
    a.body = b.body = nullptr;
    EXPECT_EQ(memcmp(&a, &b, sizeof(a)), 0) << "the two versions decode differently";
}

TEST(MetaCompact, RandomRoundTripsDecodeAsVersionOne)
{
    std::mt19937_64 rng(20261122);
    for (int i = 0; i < 3000; i++) {
        std::vector<uint8_t> body;
        ps_meta_t m = RandomPlainMeta(rng, &body);
        ASSERT_NO_FATAL_FAILURE(ExpectSameAsV1(m)) << i;
        Bytes c = Compact(m);
        EXPECT_TRUE(ps_meta_is_fast(c.data(), c.size()));
        EXPECT_LE(c.size(), PS_META_COMPACT_MAX_FIXED + m.num_data_types + m.body_len);
        // Exactly its length: one byte short is refused, and re-encoding
        // the decoded meta gives the same bytes.
        size_t len = 0;
        Bytes shorter(c.size() - 1);
        EXPECT_EQ(ps_meta_compact_encode(&m, shorter.data(), shorter.size(), &len),
                  PS_ERR_TOO_LARGE);
        ps_meta_t d;
        ASSERT_EQ(Decode(c, &d), PS_OK);
        EXPECT_EQ(Compact(d), c);
    }
}

TEST(MetaCompact, DefaultsTakeFiveBytes)
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.head = m.app_id = m.customer_id = m.timestamp = m.sender = m.recver = 0;
    EXPECT_EQ(Compact(m), (Bytes{0x00, 0x02, 0x00, 0x00, 0x00}));
    ExpectSameAsV1(m);
    // ps_meta_init()'s PS_NODE_EMPTY ids are sent.
    ps_meta_init(&m);
    ExpectSameAsV1(m);
}

TEST(MetaCompact, NotPlainIsUnsupported)
{
    ps_meta_t m = PushPullRequest();
    m.control.cmd = PS_CTRL_ACK;
    uint8_t buf[512];
    size_t len = 0;
    EXPECT_EQ(ps_meta_compact_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m = PushPullRequest();
    m.van_data_len = 1;
    EXPECT_EQ(ps_meta_compact_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
}

// The request's bytes, from the layout in meta_fast.h.
TEST(MetaCompact, EncodingIsPinned)
{
    const Bytes want = {
        0x00, 0x02, 0x07,  // marker, version 2, request|push|pull
        0xc7, 0x07,        // bitmap 0x7c7 (u16): ts sender recver data_size key addr val_len ntypes
        0xd2, 0x09,        // timestamp 1234
        0x09, 0x08,        // sender 9, recver 8
        0x10, 0x03,        // data_size 16, key 3
        0xa0, 0xf1, 0xd9, 0xa2, 0xa3, 0xe2, 0x1f,  // addr 0x7f12345678a0
        0x08, 0x02,        // val_len 8, 2 data types
        PS_DATA_UINT64, PS_DATA_FLOAT,
    };
    EXPECT_EQ(Compact(PushPullRequest()), want);
}

TEST(MetaCompact, EveryTruncationAndAnyTrailingByteAreRefused)
{
    std::mt19937_64 rng(7);
    for (int i = 0; i < 200; i++) {
        std::vector<uint8_t> body;
        ps_meta_t m = RandomPlainMeta(rng, &body);
        Bytes c = Compact(m);
        ps_meta_t d;
        for (size_t len = 0; len < c.size(); len++) {
            Bytes cut(c.begin(), c.begin() + len);
            ASSERT_EQ(Decode(cut, &d), PS_ERR_PROTOCOL) << i << " " << len;
        }
        Bytes longer = c;
        longer.push_back(0);
        ASSERT_EQ(Decode(longer, &d), PS_ERR_PROTOCOL) << i;
    }
}

// Tensor messages (bit 12): dtype, ndim and shape round trip, values 0
// and negative included; a bad block is refused; traces stay with the codec.
TEST(MetaCompact, TensorsRoundTrip)
{
    std::mt19937_64 rng(20261127);
    for (int i = 0; i < 2000; i++) {
        std::vector<uint8_t> body;
        ps_meta_t m = RandomPlainMeta(rng, &body);
        m.is_tensor = true;
        m.dtype = static_cast<int8_t>(rng());
        m.ndim = static_cast<uint32_t>(rng() % (PS_META_MAX_SHAPE + 1));
        for (uint32_t d = 0; d < m.ndim; d++)
            m.shape[d] = rng() % 3 == 0 ? static_cast<int64_t>(rng()) : static_cast<int64_t>(rng() % 9000) - 1;
        Bytes c = Compact(m);
        EXPECT_LE(c.size(), PS_META_COMPACT_MAX_FIXED + m.num_data_types + m.body_len);
        ps_meta_t d;
        memset(&d, 0xa5, sizeof(d));
        ASSERT_EQ(Decode(c, &d), PS_OK) << i;
        EXPECT_TRUE(ps_meta_equal(&d, &m)) << i;
        EXPECT_EQ(Compact(d), c) << i;
        for (size_t len = 0; len < c.size(); len += 1 + len / 8) {
            Bytes cut(c.begin(), c.begin() + len);
            ASSERT_EQ(Decode(cut, &d), PS_ERR_PROTOCOL) << i << " " << len;
        }
    }
    ps_meta_t d;
    // timestamp-less, bit 12: dtype 15 (zigzag 30), 2 dimensions, 128 and -1.
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x10, 0x1e, 0x02, 0x80, 0x02, 0x01}, &d), PS_OK);
    EXPECT_TRUE(d.is_tensor);
    EXPECT_EQ(d.dtype, 15);
    ASSERT_EQ(d.ndim, 2u);
    EXPECT_EQ(d.shape[0], 128);
    EXPECT_EQ(d.shape[1], -1);
    EXPECT_EQ(d.shape[2], 0);
    EXPECT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x10, 0x1e, 0x09}, &d), PS_ERR_PROTOCOL);  // 9 dims
    EXPECT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x10, 0x1e, 0x01, 0x80, 0x00}, &d),
              PS_ERR_PROTOCOL);  // overlong
    EXPECT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x10, 0x80, 0x02, 0x00}, &d),
              PS_ERR_PROTOCOL);  // dtype past a byte
    // What the compact form leaves to the codec.
    std::vector<uint8_t> body;
    ps_meta_t m = RandomPlainMeta(rng, &body);
    uint8_t buf[1024];
    size_t len;
    m.ndim = 1; // a shape without is_tensor
    EXPECT_EQ(ps_meta_compact_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m.is_tensor = true;
    m.shape[3] = 5; // past ndim
    EXPECT_EQ(ps_meta_compact_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m.shape[3] = 0;
    m.request_trace.start = 1;
    EXPECT_EQ(ps_meta_compact_encode(&m, buf, sizeof(buf), &len), PS_ERR_UNSUPPORTED);
    m.request_trace.start = 0;
    EXPECT_EQ(ps_meta_compact_encode(&m, buf, sizeof(buf), &len), PS_OK);
}

TEST(MetaCompact, MalformedFieldsAreRefused)
{
    ps_meta_t d;
    auto refused = [&](const Bytes &b) { return Decode(b, &d) == PS_ERR_PROTOCOL; };
    // The base: timestamp 2.
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x01, 0x00, 0x02}, &d), PS_OK);
    EXPECT_EQ(d.timestamp, 2);
    EXPECT_TRUE(refused({0, 2, 0x10, 0x01, 0x00, 0x02}));  // unknown flag
    EXPECT_TRUE(refused({0, 2, 0, 0x01, 0x20, 0x02}));     // bitmap bit 13
    EXPECT_TRUE(refused({0, 2, 0, 0x01, 0x80, 0x02}));     // bitmap bit 15
    EXPECT_TRUE(refused({0, 2, 0, 0x01, 0x00, 0x82, 0x00}));  // overlong field
    EXPECT_TRUE(refused({0, 2, 0, 0x01, 0x00, 0x00}));     // present at its default
    EXPECT_TRUE(refused({0, 2, 0, 0x01, 0x00, 0x82}));     // truncated varint
    EXPECT_TRUE(refused({0, 2, 0, 0x01, 0x00}));           // field missing
    EXPECT_TRUE(refused({0, 2, 0, 0x01}));                 // bitmap cut
    // An i32 field of 2^32: out of range; 2^32 - 1 is -1, and for a zigzag
    // field (head, bit 3) INT32_MIN.
    EXPECT_TRUE(refused({0, 2, 0, 0x01, 0x00, 0x80, 0x80, 0x80, 0x80, 0x10}));
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f}, &d), PS_OK);
    EXPECT_EQ(d.timestamp, -1);
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x08, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f}, &d), PS_OK);
    EXPECT_EQ(d.head, INT32_MIN);
    EXPECT_TRUE(refused({0, 2, 0, 0x08, 0x00, 0x80, 0x80, 0x80, 0x80, 0x10}));
    // A u64 (key, bit 7): ten bytes up to 2^64 - 1, no more.
    Bytes key = {0, 2, 0, 0x80, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    ASSERT_EQ(Decode(key, &d), PS_OK);
    EXPECT_EQ(d.key, UINT64_MAX);
    key[14] = 0x02;
    EXPECT_TRUE(refused(key));
    key[14] = 0x81;
    key.push_back(0x01);
    EXPECT_TRUE(refused(key));
    // Data types (bit 10): at most PS_META_MAX_DATA, each a known type.
    EXPECT_TRUE(refused({0, 2, 0, 0x00, 0x04, 0x01, PS_DATA_TYPE_COUNT}));
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x04, 0x01, PS_DATA_TYPE_COUNT - 1}, &d), PS_OK);
    Bytes types = {0, 2, 0, 0x00, 0x04, PS_META_MAX_DATA + 1};
    types.resize(types.size() + PS_META_MAX_DATA + 1, 0);
    EXPECT_TRUE(refused(types));
    // The rare fields (bit 11): their byte is not 0 and is followed by
    // what it names.
    EXPECT_TRUE(refused({0, 2, 0, 0x00, 0x08, 0x00}));
    EXPECT_TRUE(refused({0, 2, 0, 0x00, 0x08}));
    EXPECT_TRUE(refused({0, 2, 0, 0x00, 0x08, 0x02}));
    // Device types (rare bits 4, 6) below PS_DEV_TYPE_COUNT; device ids
    // (5, 7) are the zigzag of id + 1: 1 is -1 + 1 - 1 = -2, 2 is 0.
    EXPECT_TRUE(refused({0, 2, 0, 0x00, 0x08, 0x10, 0x03}));
    EXPECT_TRUE(refused({0, 2, 0, 0x00, 0x08, 0x40, 0x83, 0x00}));
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x08, 0x10, 0x02}, &d), PS_OK);
    EXPECT_EQ(d.src_dev_type, PS_DEV_GPU);
    EXPECT_EQ(d.src_dev_id, -1);
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x08, 0x20, 0x01}, &d), PS_OK);
    EXPECT_EQ(d.src_dev_id, -2);
    ASSERT_EQ(Decode(Bytes{0, 2, 0, 0x00, 0x08, 0x80, 0x02}, &d), PS_OK);
    EXPECT_EQ(d.dst_dev_id, 0);
    // Body (rare bit 0): at most PS_META_FAST_BODY_MAX bytes.
    Bytes body = {0, 2, 0, 0x00, 0x08, 0x01, 0x81, 0x20};
    body.resize(body.size() + PS_META_FAST_BODY_MAX + 1, 'b');
    EXPECT_TRUE(refused(body));
    body = {0, 2, 0, 0x00, 0x08, 0x01, 0x80, 0x20};
    body.resize(body.size() + PS_META_FAST_BODY_MAX, 'b');
    ASSERT_EQ(Decode(body, &d), PS_OK);
    EXPECT_EQ(d.body_len, (size_t)PS_META_FAST_BODY_MAX);
    // Another version.
    EXPECT_TRUE(refused({0, 3, 0, 0x01, 0x00, 0x02}));
}

// ---- the compact frame header ----

Bytes CompactHeader(uint32_t meta_len, const std::vector<uint64_t> &lens,
                    const ps_frame_limits_t *lim = nullptr)
{
    Bytes b(PS_FRAME_COMPACT_FIXED_LEN + 5 + 10 * lens.size());
    size_t len = 0;
    EXPECT_EQ(ps_frame_header_build_compact(meta_len, lens.data(), (uint16_t)lens.size(), lim,
                                            b.data(), b.size(), &len),
              PS_OK);
    b.resize(len);
    return b;
}

TEST(FrameCompact, RandomHeadersRoundTripAndEveryPrefixNeedsMore)
{
    std::mt19937_64 rng(99);
    ps_frame_limits_t lim = ps_frame_limits_default();
    lim.max_segments = PS_FRAME_MAX_SEGMENTS;
    lim.max_message_bytes = UINT64_MAX;
    for (int i = 0; i < 2000; i++) {
        static const uint32_t metas[] = {0, 1, 127, 128, 16383, 16384, 1u << 20};
        uint32_t meta_len = metas[rng() % 7];
        std::vector<uint64_t> lens(rng() % 4 == 0 ? PS_FRAME_MAX_SEGMENTS : rng() % 5);
        uint64_t budget = UINT64_MAX - 1000 - meta_len - 16 - 10 * lens.size();
        for (auto &l : lens) {
            l = EdgeU64(rng) % (budget + 1);
            budget -= l;
        }
        Bytes h = CompactHeader(meta_len, lens, &lim);
        ps_frame_header_t hdr;
        size_t need = 0;
        ASSERT_EQ(ps_frame_header_parse(h.data(), h.size(), &lim, &hdr, &need), PS_OK) << i;
        EXPECT_EQ(hdr.flags, 0);
        EXPECT_EQ(hdr.header_len, h.size());
        EXPECT_EQ(hdr.meta_len, meta_len);
        ASSERT_EQ(hdr.num_data, lens.size());
        uint64_t total = 0;
        for (size_t j = 0; j < lens.size(); j++) {
            EXPECT_EQ(hdr.data_len[j], lens[j]);
            total += lens[j];
        }
        EXPECT_EQ(hdr.data_total, total);
        EXPECT_EQ(hdr.frame_len, h.size() + meta_len + total);
        for (size_t len = 0; len < h.size(); len++) {
            Bytes cut(h.begin(), h.begin() + len);
            need = 0;
            ASSERT_EQ(ps_frame_header_parse(cut.data(), cut.size(), &lim, &hdr, &need),
                      PS_INPROGRESS)
                << i << " " << len;
            EXPECT_GT(need, len);
            EXPECT_LE(need, h.size()) << "need past the header at " << len;
        }
    }
}

TEST(FrameCompact, HeaderIsPinned)
{
    // 'p' 's', version 1, 2 segments, meta 22 bytes, segments 8 and 8.
    EXPECT_EQ(CompactHeader(22, {8, 8}), (Bytes{'p', 's', 1, 2, 22, 8, 8}));
    EXPECT_EQ(CompactHeader(300, {}), (Bytes{'p', 's', 1, 0, 0xac, 0x02}));
    EXPECT_EQ(CompactHeader(0, {}).size(), (size_t)PS_FRAME_COMPACT_MIN_LEN);
}

TEST(FrameCompact, MalformedHeadersAreRefusedAsSoonAsTheyAreThere)
{
    ps_frame_limits_t lim = ps_frame_limits_default();
    auto parse = [&](const Bytes &b) {
        ps_frame_header_t hdr;
        size_t need = 0;
        return ps_frame_header_parse(b.data(), b.size(), &lim, &hdr, &need);
    };
    EXPECT_EQ(parse({'p'}), PS_INPROGRESS);
    EXPECT_EQ(parse({'p', 'x'}), PS_ERR_PROTOCOL);
    EXPECT_EQ(parse({'p', 's', 2}), PS_ERR_PROTOCOL);
    EXPECT_EQ(parse({'p', 's', 1, (uint8_t)(lim.max_segments + 1)}), PS_ERR_TOO_LARGE);
    EXPECT_EQ(parse({'p', 's', 1, (uint8_t)lim.max_segments}), PS_INPROGRESS);
    EXPECT_EQ(parse({'p', 's', 1, 0, 0x80, 0x00}), PS_ERR_PROTOCOL);        // overlong
    EXPECT_EQ(parse({'p', 's', 1, 0, 0x80, 0x80, 0x80, 0x80, 0x80}), PS_ERR_PROTOCOL);
    EXPECT_EQ(parse({'p', 's', 1, 0, 0x80, 0x80, 0x80, 0x80, 0x10}), PS_ERR_PROTOCOL);
    EXPECT_EQ(parse({'p', 's', 1, 0, 0x80, 0x80, 0x80, 0x80}), PS_INPROGRESS);
    // Meta over its limit, complete or not.
    EXPECT_EQ(parse({'p', 's', 1, 0, 0x81, 0x80, 0x40}), PS_ERR_TOO_LARGE);  // 1 MiB + 1
    EXPECT_EQ(parse({'p', 's', 1, 0, 0x80, 0x80, 0x40}), PS_OK);             // 1 MiB
    // Segment lengths: overlong, past 64 bits, past the frame limit.
    EXPECT_EQ(parse({'p', 's', 1, 1, 0, 0x88, 0x00}), PS_ERR_PROTOCOL);
    Bytes big = {'p', 's', 1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    EXPECT_EQ(parse(big), PS_ERR_PROTOCOL);
    big[14] = 0x01;  // UINT64_MAX: over 4 GiB
    EXPECT_EQ(parse(big), PS_ERR_TOO_LARGE);
    lim.max_message_bytes = 100;
    EXPECT_EQ(parse({'p', 's', 1, 2, 10, 80, 3}), PS_OK);               // 7 + 10 + 83
    EXPECT_EQ(parse({'p', 's', 1, 2, 10, 80, 4}), PS_ERR_TOO_LARGE);    // 101 bytes
    EXPECT_EQ(parse({'p', 's', 1, 2, 10, 84}), PS_INPROGRESS);          // 100 so far
    EXPECT_EQ(parse({'p', 's', 1, 2, 10, 90}), PS_ERR_TOO_LARGE);       // known already
    // Building refuses what parsing refuses.
    const uint64_t lens[2] = {84, 0};
    uint8_t buf[64];
    size_t len = 0;
    EXPECT_EQ(ps_frame_header_build_compact(10, lens, 2, &lim, buf, sizeof(buf), &len),
              PS_ERR_TOO_LARGE);
    EXPECT_EQ(ps_frame_header_build_compact(10, lens, 2, nullptr, buf, 6, &len),
              PS_ERR_TOO_LARGE);
    EXPECT_EQ(ps_frame_header_build_compact(10, nullptr, 2, nullptr, buf, sizeof(buf), &len),
              PS_ERR_INVALID_ARG);
}

TEST(FrameCompact, WholeFrameParsesAndEveryPrefixNeedsMore)
{
    Bytes frame = CompactHeader(3, {2, 0, 4});
    const uint8_t rest[] = {'m', 'm', 'm', 'a', 'a', 'b', 'b', 'b', 'b'};
    frame.insert(frame.end(), rest, rest + sizeof(rest));
    const size_t whole = frame.size();
    frame.push_back(0x70);  // the next frame's first byte
    for (size_t len = 0; len <= frame.size(); len++) {
        ps_frame_view_t view;
        size_t need = 0;
        ps_status_t s = ps_frame_parse(frame.data(), len, nullptr, &view, &need);
        if (len < whole) {
            ASSERT_EQ(s, PS_INPROGRESS) << len;
            EXPECT_GT(need, len);
            EXPECT_LE(need, whole);
            continue;
        }
        ASSERT_EQ(s, PS_OK) << len;
        EXPECT_EQ(view.hdr.frame_len, whole);
        EXPECT_EQ(view.meta, frame.data() + 8);
        EXPECT_EQ(memcmp(view.meta, "mmm", 3), 0);
        EXPECT_EQ(memcmp(view.data[0], "aa", 2), 0);
        EXPECT_EQ(memcmp(view.data[2], "bbbb", 4), 0);
    }
}

// What a van sends ahead of the segments for the 8-byte push-pull request,
// before (version 1) and now; printed for the record.
TEST(FrameCompact, SmallRequestFitsInOneCacheLine)
{
    ps_meta_t m = PushPullRequest();
    const uint64_t lens[2] = {8, 8};
    ps_frame_limits_t lim = ps_frame_limits_default();
    uint8_t buf[512];
    uint8_t *frame = nullptr, *heap = nullptr;
    size_t len = 0;
    ASSERT_EQ(ps_frame_encode_head(&m, lens, 2, &lim, PS_LOG_CODEC, buf, sizeof(buf), &frame,
                                   &len, &heap),
              PS_OK);
    ASSERT_EQ(heap, nullptr);
    size_t before = ps_frame_header_len(2) + ps_meta_fast_size(&m);
    printf("8-byte push-pull request: header+meta %zu bytes (was %zu), with the segments %zu "
           "(was %zu)\n",
           len, before, len + 16, before + 16);
    Bytes want = {'p', 's', 1, 2, 22, 8, 8};
    Bytes meta = Compact(m);
    want.insert(want.end(), meta.begin(), meta.end());
    EXPECT_EQ(Bytes(frame, frame + len), want);
    EXPECT_EQ(len, 29u);
    EXPECT_LE(len + 16, 48u);
    // The response: no push data, the value back.
    m.request = false;
    m.sender = 8;
    m.recver = 9;
    m.num_data_types = 2;
    ASSERT_EQ(ps_frame_encode_head(&m, lens, 2, &lim, PS_LOG_CODEC, buf, sizeof(buf), &frame,
                                   &len, &heap),
              PS_OK);
    EXPECT_LE(len + 16, 48u);
    ps_frame_view_t view;
    size_t need = 0;
    Bytes whole(frame, frame + len);
    whole.resize(len + 16, 'v');
    ASSERT_EQ(ps_frame_parse(whole.data(), whole.size(), &lim, &view, &need), PS_OK);
    ps_meta_t out;
    ASSERT_EQ(ps_meta_fast_decode(view.meta, view.hdr.meta_len, &out), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &out));
}

}  // namespace

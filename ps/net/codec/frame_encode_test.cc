// ps_frame_encode_head: the bytes it produces are what the frame header and
// the meta encoders give separately, on its fast path for plain data metas
// (compact header + compact meta) as on its general path, and it refuses
// what the header builders refuse.
#include "ps/net/codec/frame_encode.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "ps/net/codec/codec.h"
#include "ps/net/codec/meta_fast.h"

namespace {

ps_meta_t DataMeta()
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.head = 1;
    m.app_id = 0;
    m.customer_id = 0;
    m.timestamp = 42;
    m.sender = 9;
    m.recver = 8;
    m.request = true;
    m.push = true;
    m.num_data_types = 3;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_FLOAT;
    m.data_types[2] = PS_DATA_INT32;
    m.data_size = 8 + 8 + 4;
    m.key = 77;
    return m;
}

// What the function gives, built from the public pieces: for a plain meta,
// the compact header and meta when the longest compact meta and 8 bytes
// would fit in cap after a header with a 1-byte meta length, and the frame
// is within limits;
// otherwise the fast (version 1) meta when it fits after a "PSF1" header,
// else the protobuf meta when that fits, else the protobuf meta in a heap
// buffer; then the "PSF1" header.
std::vector<uint8_t> Reference(const ps_meta_t &m, const uint64_t *lens, uint32_t n, size_t cap,
                               const ps_frame_limits_t &lim, ps_status_t *st)
{
    size_t fast = ps_meta_fast_size(&m);
    if (fast != 0) {
        std::vector<uint8_t> meta(PS_META_COMPACT_MAX_FIXED + PS_META_MAX_DATA +
                                  PS_META_FAST_BODY_MAX);
        size_t mlen = 0;
        uint8_t hdr[PS_FRAME_MAX_HEADER_LEN];
        size_t hl = 0;
        EXPECT_EQ(ps_meta_compact_encode(&m, meta.data(), meta.size(), &mlen), PS_OK);
        size_t most = fast - PS_META_FAST_FIXED_LEN + PS_META_COMPACT_MAX_FIXED + 8;
        if (ps_frame_header_build_compact((uint32_t)mlen, lens, (uint16_t)n, &lim, hdr,
                                          sizeof(hdr), &hl) == PS_OK &&
            cap > hl - (mlen >= 0x80) + most) {
            std::vector<uint8_t> out(hdr, hdr + hl);
            out.insert(out.end(), meta.begin(), meta.begin() + mlen);
            *st = PS_OK;
            return out;
        }
    }
    size_t hlen = ps_frame_header_len(n);
    std::vector<uint8_t> out(hlen + (1u << 16));
    size_t mlen = 0;
    *st = PS_ERR_TOO_LARGE;
    if (cap > hlen) {
        *st = ps_meta_fast_encode(&m, out.data() + hlen, cap - hlen, &mlen);
        if (*st != PS_OK)
            *st = ps_meta_encode(&m, out.data() + hlen, cap - hlen, &mlen);
    }
    if (*st == PS_ERR_TOO_LARGE)
        *st = ps_meta_encode(&m, out.data() + hlen, out.size() - hlen, &mlen);
    if (*st != PS_OK)
        return {};
    size_t written = 0;
    *st = ps_frame_header_build(0, (uint32_t)mlen, lens, (uint16_t)n, &lim, out.data(), hlen,
                                &written);
    if (*st != PS_OK)
        return {};
    out.resize(hlen + mlen);
    return out;
}

struct Encoded {
    ps_status_t st;
    std::vector<uint8_t> bytes;
    bool in_buf;  // in the caller's buffer rather than on the heap
};

Encoded Encode(const ps_meta_t &m, const uint64_t *lens, uint32_t n, size_t cap,
               const ps_frame_limits_t *lim)
{
    std::vector<uint8_t> buf(cap + 1, 0xa5);
    uint8_t *frame = nullptr;
    uint8_t *heap = nullptr;
    size_t len = 0;
    Encoded e;
    e.st = ps_frame_encode_head(&m, lens, n, lim, PS_LOG_CODEC, buf.data(), cap, &frame, &len,
                                &heap);
    e.in_buf = false;
    if (e.st == PS_OK) {
        e.bytes.assign(frame, frame + len);
        e.in_buf = frame == buf.data();
        EXPECT_EQ(heap == nullptr, e.in_buf);
        EXPECT_EQ(buf[cap], 0xa5) << "wrote past cap";
        free(heap);
    }
    return e;
}

TEST(FrameEncode, PlainMetaMatchesThePiecesAtEveryCapacity)
{
    const ps_meta_t m = DataMeta();
    const uint64_t lens[3] = {8, 8, 4};
    const ps_frame_limits_t lim = ps_frame_limits_default();
    size_t want_fast = ps_frame_header_len(3) + ps_meta_fast_size(&m);
    // Past this capacity the compact form is always taken.
    size_t want_compact_cap =
        PS_FRAME_COMPACT_FIXED_LEN + 2 + 3 + PS_META_COMPACT_MAX_FIXED + m.num_data_types + 8;
    for (size_t cap = 0; cap <= want_compact_cap + 8; ++cap) {
        ps_status_t ref_st;
        std::vector<uint8_t> ref = Reference(m, lens, 3, cap, lim, &ref_st);
        Encoded e = Encode(m, lens, 3, cap, &lim);
        ASSERT_EQ(e.st, ref_st) << cap;
        EXPECT_EQ(e.bytes, ref) << cap;
        if (cap >= want_fast) {
            EXPECT_TRUE(e.in_buf) << cap;
        }
        if (cap >= want_compact_cap) {
            // 'p' 's' 1 3, meta_len, 8 8 4, then a version-2 meta.
            ASSERT_LT(e.bytes.size(), 32u) << cap;
            EXPECT_EQ(e.bytes[0], 'p');
            EXPECT_EQ(e.bytes[4], e.bytes.size() - 8);
            EXPECT_EQ(e.bytes[9], PS_META_COMPACT_VERSION);
        } else if (cap >= want_fast) {
            ASSERT_EQ(e.bytes.size(), want_fast);
            EXPECT_TRUE(ps_meta_is_fast(e.bytes.data() + ps_frame_header_len(3),
                                        e.bytes.size() - ps_frame_header_len(3)));
        }
    }
}

TEST(FrameEncode, FrameParsesBack)
{
    ps_meta_t m = DataMeta();
    const uint64_t lens[3] = {8, 8, 4};
    const ps_frame_limits_t lim = ps_frame_limits_default();
    Encoded e = Encode(m, lens, 3, 512, &lim);
    ASSERT_EQ(e.st, PS_OK);
    ps_frame_header_t hdr;
    size_t need = 0;
    ASSERT_EQ(ps_frame_header_parse(e.bytes.data(), e.bytes.size(), &lim, &hdr, &need), PS_OK);
    EXPECT_EQ(hdr.num_data, 3);
    EXPECT_EQ(hdr.data_len[0], 8u);
    EXPECT_EQ(hdr.data_len[2], 4u);
    EXPECT_EQ(hdr.data_total, 20u);
    ASSERT_EQ(hdr.header_len + hdr.meta_len, e.bytes.size());
    ps_meta_t out;
    ASSERT_EQ(ps_meta_fast_decode(e.bytes.data() + hdr.header_len, hdr.meta_len, &out), PS_OK);
    EXPECT_TRUE(ps_meta_equal(&m, &out));
}

TEST(FrameEncode, NonPlainAndLimitsTakeTheGeneralPath)
{
    const uint64_t lens[3] = {8, 8, 4};
    ps_frame_limits_t lim = ps_frame_limits_default();
    // A control meta: protobuf.
    ps_meta_t m = DataMeta();
    m.control.cmd = PS_CTRL_ACK;
    ps_status_t ref_st;
    std::vector<uint8_t> ref = Reference(m, lens, 3, 512, lim, &ref_st);
    Encoded e = Encode(m, lens, 3, 512, &lim);
    ASSERT_EQ(ref_st, PS_OK);
    ASSERT_EQ(e.st, PS_OK);
    EXPECT_EQ(e.bytes, ref);
    EXPECT_FALSE(ps_meta_is_fast(e.bytes.data() + ps_frame_header_len(3),
                                 e.bytes.size() - ps_frame_header_len(3)));

    m = DataMeta();
    // The whole frame one byte over the limit, then exactly at it.
    size_t frame = Encode(m, lens, 3, 512, &lim).bytes.size() + 20;
    lim.max_message_bytes = frame - 1;
    EXPECT_EQ(Encode(m, lens, 3, 512, &lim).st, PS_ERR_TOO_LARGE);
    lim.max_message_bytes = frame;
    EXPECT_EQ(Encode(m, lens, 3, 512, &lim).st, PS_OK);
    // A segment length that would overflow the total.
    const uint64_t huge[3] = {8, UINT64_MAX, 4};
    lim = ps_frame_limits_default();
    EXPECT_EQ(Encode(m, huge, 3, 512, &lim).st, PS_ERR_TOO_LARGE);
    // Too many segments for the limits; limits out of range.
    lim.max_segments = 2;
    EXPECT_EQ(Encode(m, lens, 3, 512, &lim).st, PS_ERR_TOO_LARGE);
    lim.max_segments = PS_FRAME_MAX_SEGMENTS + 1;
    EXPECT_EQ(Encode(m, lens, 3, 512, &lim).st, PS_ERR_INVALID_ARG);
    // A meta above max_meta_bytes.
    lim = ps_frame_limits_default();
    lim.max_meta_bytes = (uint32_t)ps_meta_fast_size(&m) - 1;
    Encoded small = Encode(m, lens, 3, 512, &lim);
    ps_status_t small_ref;
    Reference(m, lens, 3, 512, lim, &small_ref);
    EXPECT_EQ(small.st, small_ref);
    // ... and one below the compact meta's length: nothing fits.
    size_t compact_meta = Encode(m, lens, 3, 512, nullptr).bytes.size() - 8;
    lim.max_meta_bytes = (uint32_t)compact_meta - 1;
    EXPECT_EQ(Encode(m, lens, 3, 512, &lim).st, PS_ERR_TOO_LARGE);
    lim.max_meta_bytes = (uint32_t)compact_meta;
    EXPECT_EQ(Encode(m, lens, 3, 512, &lim).st, PS_OK);
    // Segments without their lengths.
    lim = ps_frame_limits_default();
    EXPECT_EQ(Encode(m, nullptr, 3, 512, &lim).st, PS_ERR_INVALID_ARG);
    // No limits: the defaults.
    ref = Reference(m, lens, 3, 512, ps_frame_limits_default(), &ref_st);
    e = Encode(m, lens, 3, 512, nullptr);
    EXPECT_EQ(e.st, ref_st);
    EXPECT_EQ(e.bytes, ref);
}

}  // namespace

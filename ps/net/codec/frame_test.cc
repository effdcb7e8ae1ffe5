#include "ps/net/codec/frame.h"

#include <stdint.h>
#include <string.h>

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"

namespace {

class Frame : public ::testing::Test {
 protected:
  // Rejections are logged as warnings; the random tests make many.
  void SetUp() override { ps_log_set_level(PS_LOG_ERROR); }
  void TearDown() override { ps_log_init_from_env(); }
};

std::vector<uint8_t> Header(uint32_t meta_len, std::vector<uint64_t> lens,
                            const ps_frame_limits_t *limits = nullptr) {
  std::vector<uint8_t> buf(PS_FRAME_MAX_HEADER_LEN);
  size_t len = 0;
  EXPECT_EQ(ps_frame_header_build(0, meta_len, lens.data(), static_cast<uint16_t>(lens.size()),
                                  limits, buf.data(), buf.size(), &len),
            PS_OK);
  buf.resize(len);
  return buf;
}

void PutLe(std::vector<uint8_t> *b, size_t off, uint64_t v, int n) {
  for (int i = 0; i < n; i++) (*b)[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

TEST_F(Frame, SegmentCeilingMatchesTheMessageModel) {
  EXPECT_EQ(PS_FRAME_MAX_SEGMENTS, PS_META_MAX_DATA);
  ps_frame_limits_t d = ps_frame_limits_default();
  EXPECT_EQ(d.max_meta_bytes, 1u << 20);
  EXPECT_EQ(d.max_segments, 16u);
  EXPECT_EQ(d.max_message_bytes, 4ull << 30);
}

TEST_F(Frame, HeaderLayoutIsLittleEndian) {
  const uint8_t want[] = {'P', 'S', 'F', '1',                       // magic
                          1, 0,                                     // version
                          0, 0,                                     // flags
                          0x04, 0x03, 0x02, 0x01,                   // meta_len
                          2, 0,                                     // num_data
                          0, 0,                                     // reserved
                          0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
                          5, 0, 0, 0, 0, 0, 0, 0};
  ps_frame_limits_t big = {UINT32_MAX, PS_FRAME_MAX_SEGMENTS, UINT64_MAX};
  std::vector<uint8_t> h = Header(0x01020304, {0x1122334455667788ull, 5}, &big);
  ASSERT_EQ(h.size(), sizeof(want));
  EXPECT_EQ(memcmp(h.data(), want, sizeof(want)), 0);
  EXPECT_EQ(ps_frame_header_len(2), sizeof(want));

  ps_frame_header_t hdr;
  size_t need = 0;
  ASSERT_EQ(ps_frame_header_parse(h.data(), h.size(), &big, &hdr, &need), PS_OK);
  EXPECT_EQ(hdr.flags, 0);
  EXPECT_EQ(hdr.meta_len, 0x01020304u);
  EXPECT_EQ(hdr.num_data, 2);
  EXPECT_EQ(hdr.data_len[0], 0x1122334455667788ull);
  EXPECT_EQ(hdr.data_len[1], 5u);
  EXPECT_EQ(hdr.header_len, 32u);
  EXPECT_EQ(hdr.data_total, 0x1122334455667788ull + 5);
  EXPECT_EQ(hdr.frame_len, 32 + 0x01020304ull + 0x1122334455667788ull + 5);
}

TEST_F(Frame, EveryPrefixOfAValidHeaderNeedsMore) {
  std::vector<uint8_t> h = Header(100, {1, 2, 3, 4, 5});
  for (size_t len = 0; len < h.size(); len++) {
    std::vector<uint8_t> cut(h.begin(), h.begin() + len);
    ps_frame_header_t hdr;
    size_t need = 0;
    ASSERT_EQ(ps_frame_header_parse(cut.data(), cut.size(), nullptr, &hdr, &need), PS_INPROGRESS)
        << len;
    EXPECT_GT(need, len);
    EXPECT_LE(need, h.size());
    // Nothing at all could still be a (shorter) compact frame.
    EXPECT_EQ(need, len == 0                     ? PS_FRAME_COMPACT_MIN_LEN
                    : len < PS_FRAME_FIXED_LEN ? PS_FRAME_FIXED_LEN
                                               : h.size());
  }
}

TEST_F(Frame, EveryPrefixOfAWholeFrameNeedsMore) {
  std::vector<uint8_t> frame = Header(3, {2, 0, 4});
  const uint8_t body[] = {'m', 'm', 'm', 'a', 'a', 'b', 'b', 'b', 'b'};
  frame.insert(frame.end(), body, body + sizeof(body));
  frame.push_back(0xee);  // the first byte of the next frame
  const size_t whole = frame.size() - 1;
  for (size_t len = 0; len <= frame.size(); len++) {
    ps_frame_view_t view;
    size_t need = 0;
    ps_status_t s = ps_frame_parse(frame.data(), len, nullptr, &view, &need);
    if (len < whole) {
      ASSERT_EQ(s, PS_INPROGRESS) << len;
      EXPECT_GT(need, len);
      if (len >= ps_frame_header_len(3)) {
        EXPECT_EQ(need, whole);
      }
      continue;
    }
    ASSERT_EQ(s, PS_OK) << len;
    EXPECT_EQ(view.hdr.frame_len, whole);
    EXPECT_EQ(memcmp(view.meta, "mmm", 3), 0);
    EXPECT_EQ(memcmp(view.data[0], "aa", 2), 0);
    EXPECT_EQ(view.hdr.data_len[1], 0u);
    EXPECT_EQ(memcmp(view.data[2], "bbbb", 4), 0);
  }
}

// A header that is wrong in one field, and the length from which the parser
// can tell.
struct Bad {
  const char *what;
  size_t off;
  uint64_t value;
  int width;
  size_t decided_at;
  ps_status_t want;
};

TEST_F(Frame, BadHeadersAreRejectedAsSoonAsTheFieldIsThere) {
  const std::vector<Bad> bads = {
      {"magic", 0, 0x31465351, 4, 4, PS_ERR_PROTOCOL},
      {"magic byte 0", 0, 'X', 1, 4, PS_ERR_PROTOCOL},
      {"version 0", 4, 0, 2, 6, PS_ERR_PROTOCOL},
      {"version 2", 4, 2, 2, 6, PS_ERR_PROTOCOL},
      {"flags", 6, 1, 2, 8, PS_ERR_PROTOCOL},
      {"flags high", 6, 0x8000, 2, 8, PS_ERR_PROTOCOL},
      {"meta over 1 MiB", 8, (1u << 20) + 1, 4, 12, PS_ERR_TOO_LARGE},
      {"meta 4 GiB", 8, UINT32_MAX, 4, 12, PS_ERR_TOO_LARGE},
      {"17 segments", 12, 17, 2, 14, PS_ERR_TOO_LARGE},
      {"65535 segments", 12, 65535, 2, 14, PS_ERR_TOO_LARGE},
      {"reserved", 14, 1, 2, 16, PS_ERR_PROTOCOL},
      {"segment 0 over 4 GiB", 16, 4ull << 30, 8, 24, PS_ERR_TOO_LARGE},
      {"segment 1 of 2^64-1", 24, UINT64_MAX, 8, 32, PS_ERR_TOO_LARGE},
      {"segment 2 pushes the total over", 32, (4ull << 30) - 40 - 100 - 2 + 1, 8, 40,
       PS_ERR_TOO_LARGE},
  };
  for (const Bad &b : bads) {
    std::vector<uint8_t> h = Header(100, {1, 1, 1});
    ASSERT_EQ(h.size(), 40u);
    PutLe(&h, b.off, b.value, b.width);
    for (size_t len = 0; len <= h.size(); len++) {
      std::vector<uint8_t> cut(h.begin(), h.begin() + len);
      ps_frame_header_t hdr;
      size_t need = 0;
      ps_status_t s = ps_frame_header_parse(cut.data(), cut.size(), nullptr, &hdr, &need);
      if (len < b.decided_at) {
        EXPECT_EQ(s, PS_INPROGRESS) << b.what << " at " << len;
      } else {
        EXPECT_EQ(s, b.want) << b.what << " at " << len;
      }
    }
  }
}

TEST_F(Frame, TotalLimitIsInclusiveAndOverflowSafe) {
  ps_frame_limits_t lim = {64, 4, 1000};
  ps_frame_header_t hdr;
  size_t need;
  // 16 + 8*2 header + 10 meta + 958 + 0 data = 1000 bytes: allowed.
  std::vector<uint8_t> h = Header(10, {958, 0}, &lim);
  ASSERT_EQ(ps_frame_header_parse(h.data(), h.size(), &lim, &hdr, &need), PS_OK);
  EXPECT_EQ(hdr.frame_len, 1000u);
  PutLe(&h, 16, 959, 8);
  EXPECT_EQ(ps_frame_header_parse(h.data(), h.size(), &lim, &hdr, &need), PS_ERR_TOO_LARGE);

  // Two halves of 2^64 must not wrap around to a small total.
  ps_frame_limits_t huge = {64, 4, UINT64_MAX};
  h = Header(0, {1, 1}, &huge);
  PutLe(&h, 16, 1ull << 63, 8);
  PutLe(&h, 24, 1ull << 63, 8);
  EXPECT_EQ(ps_frame_header_parse(h.data(), h.size(), &huge, &hdr, &need), PS_ERR_TOO_LARGE);
}

TEST_F(Frame, BuildRefusesWhatAReceiverWouldRefuse) {
  uint8_t buf[PS_FRAME_MAX_HEADER_LEN];
  size_t len = 99;
  std::vector<uint64_t> lens(PS_FRAME_MAX_SEGMENTS + 1, 1);
  ps_frame_limits_t lim = {64, 4, 1000};
  EXPECT_EQ(ps_frame_header_build(0, 65, lens.data(), 1, &lim, buf, sizeof(buf), &len),
            PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_frame_header_build(0, 1, lens.data(), 5, &lim, buf, sizeof(buf), &len),
            PS_ERR_TOO_LARGE);
  uint64_t big[1] = {1000};
  EXPECT_EQ(ps_frame_header_build(0, 1, big, 1, &lim, buf, sizeof(buf), &len), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_frame_header_build(0, 1, lens.data(), 2, &lim, buf, 31, &len), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_frame_header_build(1, 1, lens.data(), 2, &lim, buf, sizeof(buf), &len),
            PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_frame_header_build(0, 1, nullptr, 2, &lim, buf, sizeof(buf), &len),
            PS_ERR_INVALID_ARG);
  ps_frame_limits_t too_many = {64, PS_FRAME_MAX_SEGMENTS + 1, 1000};
  EXPECT_EQ(ps_frame_header_build(0, 1, lens.data(), 2, &too_many, buf, sizeof(buf), &len),
            PS_ERR_INVALID_ARG);
  EXPECT_EQ(len, 99u);

  ps_frame_header_t hdr;
  size_t need = 0;
  EXPECT_EQ(ps_frame_header_parse(buf, 0, &too_many, &hdr, &need), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_frame_header_parse(nullptr, 3, nullptr, &hdr, &need), PS_ERR_INVALID_ARG);

  // The maximum everything: 64 segments, each limit met exactly.
  ps_frame_limits_t max = {UINT32_MAX, PS_FRAME_MAX_SEGMENTS, UINT64_MAX};
  ASSERT_EQ(ps_frame_header_build(0, UINT32_MAX, lens.data(), PS_FRAME_MAX_SEGMENTS, &max, buf,
                                  sizeof(buf), &len),
            PS_OK);
  EXPECT_EQ(len, static_cast<size_t>(PS_FRAME_MAX_HEADER_LEN));
  ASSERT_EQ(ps_frame_header_parse(buf, len, &max, &hdr, &need), PS_OK);
  EXPECT_EQ(hdr.num_data, PS_FRAME_MAX_SEGMENTS);
  EXPECT_EQ(hdr.data_total, static_cast<uint64_t>(PS_FRAME_MAX_SEGMENTS));
}

TEST_F(Frame, NoSegmentsAndNoMeta) {
  std::vector<uint8_t> h = Header(0, {});
  ASSERT_EQ(h.size(), static_cast<size_t>(PS_FRAME_FIXED_LEN));
  ps_frame_view_t view;
  size_t need = 0;
  ASSERT_EQ(ps_frame_parse(h.data(), h.size(), nullptr, &view, &need), PS_OK);
  EXPECT_EQ(view.hdr.frame_len, static_cast<uint64_t>(PS_FRAME_FIXED_LEN));
  EXPECT_EQ(view.hdr.num_data, 0);
}

TEST_F(Frame, RandomBytesNeverCrash) {
  std::mt19937_64 rng(99);
  const std::vector<uint8_t> good = Header(20, {5, 6, 7});
  int ok = 0, more = 0, bad = 0;
  for (int iter = 0; iter < 50000; iter++) {
    std::vector<uint8_t> bytes(rng() % 200);
    for (auto &b : bytes) b = static_cast<uint8_t>(rng());
    // Half start with a valid prefix, so the checks past the magic run too.
    if (iter % 2) {
      size_t keep = std::min(bytes.size(), static_cast<size_t>(rng() % (good.size() + 1)));
      if (keep > 0) memcpy(bytes.data(), good.data(), keep);
    }
    ps_frame_view_t view;
    size_t need = 0;
    ps_status_t s = ps_frame_parse(bytes.data(), bytes.size(), nullptr, &view, &need);
    if (s == PS_OK) {
      ok++;
      EXPECT_LE(view.hdr.frame_len, bytes.size());
    } else if (s == PS_INPROGRESS) {
      more++;
      EXPECT_GT(need, bytes.size());
    } else {
      bad++;
      EXPECT_TRUE(s == PS_ERR_PROTOCOL || s == PS_ERR_TOO_LARGE) << s;
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(more, 0);
  EXPECT_GT(bad, 0);
}

}  // namespace

// nanopb: a message generated at build time from deps_probe.proto (through
// //tools:nanopb.bzl) encodes to the protobuf wire format and decodes back;
// bad input fails cleanly.
#include <stdint.h>
#include <string.h>

#include <pb_decode.h>
#include <pb_encode.h>

#include <gtest/gtest.h>

#include "tests/deps/deps_probe.pb.h"

namespace {

ps_tests_DepsProbe sample() {
  ps_tests_DepsProbe m = ps_tests_DepsProbe_init_zero;
  m.id = 150;
  strcpy(m.name, "worker-9");
  m.values_count = 4;
  m.values[0] = -1;
  m.values[1] = 0;
  m.values[2] = 1;
  m.values[3] = INT32_MIN;
  m.blob.size = 5;
  memcpy(m.blob.bytes, "\x00\x01\xfe\xff\x7f", 5);
  m.has_inner = true;
  m.inner.stamp = 0x0123456789abcdefull;
  m.inner.flag = true;
  return m;
}

size_t encode(const ps_tests_DepsProbe &m, uint8_t *buf, size_t cap, bool *ok_p) {
  pb_ostream_t out = pb_ostream_from_buffer(buf, cap);
  *ok_p = pb_encode(&out, ps_tests_DepsProbe_fields, &m);
  return out.bytes_written;
}

// The classic example from the protobuf encoding guide: field 1 = 150.
TEST(Nanopb, WireFormatMatchesProtobuf) {
  ps_tests_DepsProbe m = ps_tests_DepsProbe_init_zero;
  m.id = 150;
  uint8_t buf[16];
  bool ok = false;
  size_t n = encode(m, buf, sizeof(buf), &ok);
  ASSERT_TRUE(ok);
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(buf[0], 0x08);
  EXPECT_EQ(buf[1], 0x96);
  EXPECT_EQ(buf[2], 0x01);
}

TEST(Nanopb, RoundTrip) {
  const ps_tests_DepsProbe in = sample();
  uint8_t buf[ps_tests_DepsProbe_size];
  bool ok = false;
  size_t n = encode(in, buf, sizeof(buf), &ok);
  ASSERT_TRUE(ok);

  // A sizing stream (NULL callback) predicts the same length.
  size_t predicted = 0;
  ASSERT_TRUE(pb_get_encoded_size(&predicted, ps_tests_DepsProbe_fields, &in));
  EXPECT_EQ(predicted, n);

  ps_tests_DepsProbe out = ps_tests_DepsProbe_init_zero;
  pb_istream_t is = pb_istream_from_buffer(buf, n);
  ASSERT_TRUE(pb_decode(&is, ps_tests_DepsProbe_fields, &out)) << PB_GET_ERROR(&is);
  EXPECT_EQ(out.id, in.id);
  EXPECT_STREQ(out.name, in.name);
  ASSERT_EQ(out.values_count, in.values_count);
  for (pb_size_t i = 0; i < in.values_count; ++i) EXPECT_EQ(out.values[i], in.values[i]);
  ASSERT_EQ(out.blob.size, in.blob.size);
  EXPECT_EQ(memcmp(out.blob.bytes, in.blob.bytes, in.blob.size), 0);
  ASSERT_TRUE(out.has_inner);
  EXPECT_EQ(out.inner.stamp, in.inner.stamp);
  EXPECT_TRUE(out.inner.flag);
}

TEST(Nanopb, EncodeIntoTooSmallBufferFails) {
  const ps_tests_DepsProbe in = sample();
  uint8_t buf[8];
  pb_ostream_t out = pb_ostream_from_buffer(buf, sizeof(buf));
  EXPECT_FALSE(pb_encode(&out, ps_tests_DepsProbe_fields, &in));
  EXPECT_STRNE(PB_GET_ERROR(&out), "(none)");
}

TEST(Nanopb, TruncatedOrOversizedInputFails) {
  const ps_tests_DepsProbe in = sample();
  uint8_t buf[ps_tests_DepsProbe_size];
  bool ok = false;
  size_t n = encode(in, buf, sizeof(buf), &ok);
  ASSERT_TRUE(ok);
  for (size_t cut : {n - 1, n / 2, size_t{1}}) {
    ps_tests_DepsProbe out = ps_tests_DepsProbe_init_zero;
    pb_istream_t is = pb_istream_from_buffer(buf, cut);
    EXPECT_FALSE(pb_decode(&is, ps_tests_DepsProbe_fields, &out)) << "cut at " << cut;
  }

  // A name longer than max_size (32) is refused, not written past the array.
  uint8_t evil[64];
  size_t k = 0;
  evil[k++] = 0x12;  // field 2, length-delimited
  evil[k++] = 40;
  for (int i = 0; i < 40; ++i) evil[k++] = 'a';
  ps_tests_DepsProbe out = ps_tests_DepsProbe_init_zero;
  pb_istream_t is = pb_istream_from_buffer(evil, k);
  EXPECT_FALSE(pb_decode(&is, ps_tests_DepsProbe_fields, &out));
}

}  // namespace

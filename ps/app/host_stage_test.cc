// Pipelined staged pulls (host_stage.h) on the emulated device: copies
// start as the van reports progress, delivery copies the tail and waits,
// and the pipe goes (calling back) only once the van let go of its block
// and no copy into the destination is left.
#include "ps/app/host_stage.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "ps/gpu/emu.h"
#include "ps/gpu/mem.h"

namespace {

const ps_mem_ops_t *emu() { return ps_mem_ops(PS_MEM_EMU); }

std::vector<unsigned char> Pattern(size_t len, unsigned seed) {
  std::vector<unsigned char> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = static_cast<unsigned char>(i * 13 + seed + (i >> 12));
  return v;
}

std::vector<unsigned char> DeviceBytes(const ps_slice_t &s) {
  std::vector<unsigned char> v(s.len);
  EXPECT_EQ(emu()->copy_to_host(v.data(), ps_slice_ptr(&s), s.len), PS_OK);
  return v;
}

struct Gone {
  int calls = 0;
  static void Count(void *arg) { static_cast<Gone *>(arg)->calls++; }
};

struct DelayGuard {
  explicit DelayGuard(unsigned us) { ps_mem_emu_set_delay_us(us); }
  ~DelayGuard() { ps_mem_emu_set_delay_us(0); }
};

class Pipe : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(emu()->init(), PS_OK);
    ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 1, kLen, &dest_), PS_OK);
    ASSERT_EQ(emu()->memset(ps_slice_ptr(&dest_), 0, kLen), PS_OK);
  }
  void TearDown() override { ps_slice_unref(&dest_); }

  // Writes bytes [from, to) of want_ into the van's slice and reports them.
  void Arrive(ps_slice_t *recv, size_t from, size_t to) {
    std::memcpy(static_cast<unsigned char *>(ps_slice_ptr(recv)) + from, want_.data() + from,
                to - from);
    ps_slice_filled(recv, to);
  }

  static constexpr size_t kLen = 3 * PS__APP_PIPE_CHUNK + 4096 + 100;
  ps_slice_t dest_ = PS_SLICE_EMPTY_INIT;
  std::vector<unsigned char> want_ = Pattern(kLen, 7);
};

TEST_F(Pipe, CopiesWhileTheRestArrivesAndTheTailOnDelivery) {
  Gone gone;
  ps_slice_t recv;
  ps__app_pipe_t *pipe;
  ASSERT_EQ(ps__app_pipe_open(&dest_, 5000, Gone::Count, &gone, &recv, &pipe), PS_OK);
  ASSERT_EQ(recv.len, kLen);
  EXPECT_TRUE(ps_slice_in_host_mem(&recv));
  EXPECT_TRUE(ps_slice_fill_watched(&recv));
  EXPECT_TRUE(ps__app_pipe_owns(pipe, ps_slice_ptr(&recv)));
  EXPECT_FALSE(ps__app_pipe_owns(pipe, want_.data()));

  // Progress in odd steps: whole chunks go as they complete.
  Arrive(&recv, 0, 700000);
  Arrive(&recv, 700000, PS__APP_PIPE_CHUNK + 5);
  Arrive(&recv, PS__APP_PIPE_CHUNK + 5, 2 * PS__APP_PIPE_CHUNK + 77);
  Arrive(&recv, 2 * PS__APP_PIPE_CHUNK + 77, kLen);  // all in: the tail is delivery's
  uint64_t early = 0;
  ASSERT_EQ(ps__app_pipe_finish(pipe, kLen, &early), PS_OK);
  EXPECT_EQ(early, 2 * PS__APP_PIPE_CHUNK);
  EXPECT_EQ(DeviceBytes(dest_), want_);
  EXPECT_EQ(gone.calls, 0);  // the van still holds the block
  ps_slice_unref(&recv);
  EXPECT_EQ(gone.calls, 1);
}

TEST_F(Pipe, AVanThatNeverReportsLeavesAllToDelivery) {
  Gone gone;
  ps_slice_t recv;
  ps__app_pipe_t *pipe;
  ASSERT_EQ(ps__app_pipe_open(&dest_, 5000, Gone::Count, &gone, &recv, &pipe), PS_OK);
  std::memcpy(ps_slice_ptr(&recv), want_.data(), kLen);
  uint64_t early = 0;
  ASSERT_EQ(ps__app_pipe_finish(pipe, kLen, &early), PS_OK);
  EXPECT_EQ(early, 0u);
  EXPECT_EQ(DeviceBytes(dest_), want_);
  ps_slice_unref(&recv);
  EXPECT_EQ(gone.calls, 1);
}

// The van lets go before any delivery (the request failed, the peer went):
// the copies already queued still write into the destination, so the pipe
// is gone only after them.
TEST_F(Pipe, LettingGoWithoutDeliveryWaitsForQueuedCopies) {
  DelayGuard slow(30000);  // each stream operation starts 30 ms late
  Gone gone;
  ps_slice_t recv;
  ps__app_pipe_t *pipe;
  ASSERT_EQ(ps__app_pipe_open(&dest_, 5000, Gone::Count, &gone, &recv, &pipe), PS_OK);
  Arrive(&recv, 0, 2 * PS__APP_PIPE_CHUNK + 1);
  auto t0 = std::chrono::steady_clock::now();
  ps_slice_unref(&recv);
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(gone.calls, 1);
  EXPECT_GE(waited, std::chrono::milliseconds(25));
  std::vector<unsigned char> got = DeviceBytes(dest_);
  EXPECT_TRUE(std::equal(want_.begin(), want_.begin() + 2 * PS__APP_PIPE_CHUNK, got.begin()));
  EXPECT_EQ(got[2 * PS__APP_PIPE_CHUNK], 0);  // reported, but under a chunk: not copied
}

// Work already queued on the destination device's default stream (a
// kernel still reading the old values) goes first, as a synchronous copy
// would: no copy is queued while the value arrives, and delivery waits.
TEST_F(Pipe, CopiesGoAfterTheDefaultStreamsWork) {
  ps_slice_t dest0;  // on device 0, whose default stream runs host functions
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, kLen, &dest0), PS_OK);
  ASSERT_EQ(emu()->launch_host_func(nullptr, [](void *) {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }, nullptr), PS_OK);
  Gone gone;
  ps_slice_t recv;
  ps__app_pipe_t *pipe;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ps__app_pipe_open(&dest0, 5000, Gone::Count, &gone, &recv, &pipe), PS_OK);
  Arrive(&recv, 0, kLen - 1);
  uint64_t early = 0;
  ASSERT_EQ(ps__app_pipe_finish(pipe, kLen - 1, &early), PS_OK);  // the last byte: not asked
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(early, 0u);
  std::vector<unsigned char> got = DeviceBytes(dest0);
  EXPECT_TRUE(std::equal(want_.begin(), want_.end() - 1, got.begin()));
  ps_slice_unref(&recv);
  EXPECT_EQ(gone.calls, 1);
  ps_slice_unref(&dest0);
}

TEST_F(Pipe, OnlyLargeDeviceDestinations) {
  Gone gone;
  ps_slice_t recv;
  ps__app_pipe_t *pipe;
  ps_slice_t small;
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, 2 * PS__APP_PIPE_CHUNK - 1, &small), PS_OK);
  EXPECT_EQ(ps__app_pipe_open(&small, 5000, Gone::Count, &gone, &recv, &pipe), PS_ERR_UNSUPPORTED);
  ps_slice_unref(&small);
  ps_slice_t host;
  ASSERT_EQ(ps_slice_alloc(4 * PS__APP_PIPE_CHUNK, 0, &host), PS_OK);
  EXPECT_EQ(ps__app_pipe_open(&host, 5000, Gone::Count, &gone, &recv, &pipe), PS_ERR_UNSUPPORTED);
  ps_slice_unref(&host);
  EXPECT_EQ(gone.calls, 0);
}

// A push through a van that sends as written: the slice is handed back at
// once, written chunk by chunk as the stream gets to it; its bytes end
// equal to the device's, and letting go waits for the copies.
TEST_F(Pipe, PushesAreWrittenChunkByChunk) {
  ASSERT_EQ(emu()->copy_from_host(ps_slice_ptr(&dest_), want_.data(), kLen), PS_OK);
  ps_slice_t out;
  {
    DelayGuard slow(20000);  // each chunk's copy starts 20 ms late
    ASSERT_EQ(ps__app_sendable_as_written(&dest_, 5000, &out), PS_OK);
    ASSERT_EQ(out.len, kLen);
    EXPECT_TRUE(ps_slice_in_host_mem(&out));
    EXPECT_TRUE(ps_slice_being_written(&out));
    size_t w = 0;
    ASSERT_EQ(ps_slice_written(&out, 0, 0, &w), PS_OK);
    EXPECT_LT(w, kLen);  // not all of it yet
    size_t have = w;
    int steps = 0;
    while (have < kLen) {
      ASSERT_EQ(ps_slice_written(&out, 1, have, &w), PS_OK);
      ASSERT_GT(w, have);
      EXPECT_EQ(w % PS__APP_PIPE_CHUNK == 0 || w == kLen, true);
      have = w;
      steps++;
    }
    EXPECT_GE(steps, 2);
  }
  EXPECT_EQ(0, std::memcmp(ps_slice_ptr(&out), want_.data(), kLen));
  ps_slice_unref(&out);

  // Letting go before the copies are done waits for them.
  {
    DelayGuard slow(30000);
    ASSERT_EQ(ps__app_sendable_as_written(&dest_, 5000, &out), PS_OK);
    auto t0 = std::chrono::steady_clock::now();
    ps_slice_unref(&out);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25));
  }

  ps_slice_t small;
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, 2 * PS__APP_PIPE_CHUNK - 1, &small), PS_OK);
  EXPECT_EQ(ps__app_sendable_as_written(&small, 5000, &out), PS_ERR_UNSUPPORTED);
  ps_slice_unref(&small);
}

}  // namespace

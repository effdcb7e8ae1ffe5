#include "ps/base/buffer.h"
#include "ps/base/buffer_internal.h"

#include <stdint.h>
#include <string.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

struct ReleaseLog {
  std::atomic<int> calls{0};
  void *data = nullptr;
  size_t length = 0;
  std::string order;  // "r" for registrations, "m" for the memory
};

void RecordRelease(void *data, size_t length, void *arg) {
  auto *log = static_cast<ReleaseLog *>(arg);
  log->data = data;
  log->length = length;
  log->order += "m";
  log->calls.fetch_add(1);
}

TEST(Buffer, AllocIsAlignedAndWritable) {
  ps_buf_t *buf = nullptr;
  ASSERT_EQ(ps_buf_alloc(1000, 0, &buf), PS_OK);
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data) % PS_BUF_DEFAULT_ALIGN, 0u);
  EXPECT_EQ(buf->length, 1000u);
  EXPECT_EQ(ps_buf_refcount(buf), 1u);
  EXPECT_EQ(buf->mem_kind, PS_BUF_MEM_HOST);
  memset(buf->data, 0xab, buf->length);
  ps_buf_unref(buf);

  for (size_t align : {1u, 2u, 8u, 4096u, 65536u}) {
    ASSERT_EQ(ps_buf_alloc(3, align, &buf), PS_OK) << align;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data) % align, 0u) << align;
    memset(buf->data, 1, 3);
    ps_buf_unref(buf);
  }
}

TEST(Buffer, AllocRejectsBadArguments) {
  ps_buf_t *buf = reinterpret_cast<ps_buf_t *>(0x1);
  EXPECT_EQ(ps_buf_alloc(10, 3, &buf), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_buf_alloc(10, 2 * PS_BUF_MAX_ALIGN, &buf), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_buf_alloc(SIZE_MAX, 0, &buf), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_buf_alloc(SIZE_MAX - 100, 0, &buf), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_buf_alloc(10, 0, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(buf, reinterpret_cast<ps_buf_t *>(0x1));  // untouched on failure
  // Empty is fine: a real pointer, no bytes.
  ASSERT_EQ(ps_buf_alloc(0, 0, &buf), PS_OK);
  EXPECT_NE(buf->data, nullptr);
  EXPECT_EQ(buf->length, 0u);
  ps_buf_unref(buf);
  ps_buf_unref(nullptr);
}

TEST(Buffer, WrapReleasesOnceWithTheLastReference) {
  ReleaseLog log;
  char mem[64];
  ps_buf_t *buf;
  ASSERT_EQ(ps_buf_wrap(mem, sizeof(mem), RecordRelease, &log, &buf), PS_OK);
  EXPECT_EQ(buf->data, mem);
  EXPECT_EQ(ps_buf_ref(buf), buf);
  ps_buf_ref(buf);
  EXPECT_EQ(ps_buf_refcount(buf), 3u);
  ps_buf_unref(buf);
  ps_buf_unref(buf);
  EXPECT_EQ(log.calls.load(), 0);
  ps_buf_unref(buf);
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.data, mem);
  EXPECT_EQ(log.length, sizeof(mem));
}

// A header in the caller's storage (a pooled block): used again and again,
// and the release may free the storage that holds the header.
struct Block {
  ps_buf_t hdr;
  char mem[64];
  int releases = 0;
  bool free_on_release = false;
};

void ReleaseBlock(void *data, size_t length, void *arg) {
  auto *b = static_cast<Block *>(arg);
  EXPECT_EQ(data, b->mem);
  EXPECT_EQ(length, sizeof(b->mem));
  b->releases++;
  if (b->free_on_release) {
    delete b;  // with the header in it: ASan catches any later use
  }
}

TEST(Buffer, HeaderInCallerStorageIsReused) {
  Block block;
  for (int round = 1; round <= 3; ++round) {
    ps_buf_init_wrapped(&block.hdr, block.mem, sizeof(block.mem), ReleaseBlock, &block);
    ps_slice_t s = {&block.hdr, 8, 16};
    ps_slice_t sub;
    ASSERT_EQ(ps_slice_sub(&s, 4, 4, &sub), PS_OK);
    EXPECT_EQ(ps_slice_ptr(&sub), block.mem + 12);
    ps_slice_unref(&s);
    EXPECT_EQ(block.releases, round - 1);
    ps_slice_unref(&sub);
    EXPECT_EQ(block.releases, round);
  }
  auto *gone = new Block;
  gone->free_on_release = true;
  ps_buf_init_wrapped(&gone->hdr, gone->mem, sizeof(gone->mem), ReleaseBlock, gone);
  ps_buf_unref(&gone->hdr);  // frees the header's storage inside the release
}

TEST(Buffer, WrapArguments) {
  ps_buf_t *buf;
  char mem[8];
  ASSERT_EQ(ps_buf_wrap(mem, sizeof(mem), nullptr, nullptr, &buf), PS_OK);  // borrowed
  ps_buf_unref(buf);
  ASSERT_EQ(ps_buf_wrap(nullptr, 0, nullptr, nullptr, &buf), PS_OK);
  ps_buf_unref(buf);
  EXPECT_EQ(ps_buf_wrap(nullptr, 1, nullptr, nullptr, &buf), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_buf_wrap(mem, 1, nullptr, nullptr, nullptr), PS_ERR_INVALID_ARG);

  ASSERT_EQ(ps_buf_wrap_mem(mem, sizeof(mem), PS_BUF_MEM_CUDA, 3, nullptr, nullptr, &buf), PS_OK);
  EXPECT_EQ(buf->mem_kind, PS_BUF_MEM_CUDA);
  EXPECT_EQ(buf->device, 3);
  ps_slice_t s;
  ASSERT_EQ(ps_slice_of(buf, 0, 8, &s), PS_OK);
  EXPECT_EQ(ps_slice_mem_kind(&s), PS_BUF_MEM_CUDA);
  char out[8];
  // Device memory is not ours to memcpy.
  EXPECT_EQ(ps_slice_copy_out(&s, 0, out, 8), PS_ERR_UNSUPPORTED);
  EXPECT_EQ(ps_slice_copy_in(&s, 0, out, 8), PS_ERR_UNSUPPORTED);
  ps_slice_unref(&s);
  ps_buf_unref(buf);
}

TEST(Slice, BoundsAreChecked) {
  ps_buf_t *buf;
  ASSERT_EQ(ps_buf_alloc(100, 0, &buf), PS_OK);
  ps_slice_t s = PS_SLICE_EMPTY_INIT;
  EXPECT_EQ(ps_slice_of(buf, 0, 100, &s), PS_OK);
  ps_slice_unref(&s);
  EXPECT_EQ(ps_slice_of(buf, 100, 0, &s), PS_OK);  // empty at the end
  EXPECT_EQ(ps_slice_ptr(&s), static_cast<char *>(buf->data) + 100);
  ps_slice_unref(&s);
  EXPECT_EQ(ps_slice_of(buf, 101, 0, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_of(buf, 1, 100, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_of(buf, 0, 101, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_of(buf, SIZE_MAX, 2, &s), PS_ERR_INVALID_ARG);  // off + len wraps
  EXPECT_EQ(ps_slice_of(buf, 2, SIZE_MAX, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_of(nullptr, 0, 0, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_of(buf, 0, 0, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(s.buf, nullptr);  // failures leave the output alone
  EXPECT_EQ(ps_buf_refcount(buf), 1u);
  ps_buf_unref(buf);
}

TEST(Slice, SubSlicesShareTheBuffer) {
  ps_slice_t whole;
  ASSERT_EQ(ps_slice_alloc(256, 0, &whole), PS_OK);
  EXPECT_EQ(ps_buf_refcount(whole.buf), 1u);  // the slice holds the only reference
  for (int i = 0; i < 256; ++i) {
    static_cast<unsigned char *>(ps_slice_ptr(&whole))[i] = static_cast<unsigned char>(i);
  }
  ps_slice_t mid, inner;
  ASSERT_EQ(ps_slice_sub(&whole, 16, 128, &mid), PS_OK);
  ASSERT_EQ(ps_slice_sub(&mid, 8, 16, &inner), PS_OK);
  EXPECT_EQ(inner.off, 24u);
  EXPECT_EQ(ps_slice_len(&inner), 16u);
  EXPECT_EQ(static_cast<unsigned char *>(ps_slice_ptr(&inner))[0], 24);
  EXPECT_EQ(ps_buf_refcount(whole.buf), 3u);
  EXPECT_EQ(ps_slice_sub(&mid, 120, 9, &inner), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_sub(&mid, 129, 0, &inner), PS_ERR_INVALID_ARG);

  ps_slice_t copy = ps_slice_ref(&inner);
  EXPECT_EQ(copy.buf, inner.buf);
  EXPECT_EQ(ps_buf_refcount(whole.buf), 4u);

  // The buffer outlives the slice it came from.
  ps_buf_t *b = whole.buf;
  ps_slice_unref(&whole);
  EXPECT_EQ(whole.buf, nullptr);
  EXPECT_EQ(whole.len, 0u);
  ps_slice_unref(&mid);
  ps_slice_unref(&inner);
  EXPECT_EQ(ps_buf_refcount(b), 1u);
  unsigned char out[4];
  ASSERT_EQ(ps_slice_copy_out(&copy, 12, out, 4), PS_OK);
  EXPECT_EQ(out[0], 36);
  EXPECT_EQ(out[3], 39);
  ps_slice_unref(&copy);
  ps_slice_unref(nullptr);
}

TEST(Slice, NarrowAndCopies) {
  ps_slice_t s;
  ASSERT_EQ(ps_slice_alloc(10, 0, &s), PS_OK);
  const char text[] = "0123456789";
  ASSERT_EQ(ps_slice_copy_in(&s, 0, text, 10), PS_OK);
  EXPECT_EQ(ps_slice_copy_in(&s, 5, text, 6), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_copy_in(&s, 0, nullptr, 1), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_copy_in(&s, 10, nullptr, 0), PS_OK);
  ASSERT_EQ(ps_slice_narrow(&s, 2, 6), PS_OK);
  EXPECT_EQ(ps_slice_narrow(&s, 1, 6), PS_ERR_INVALID_ARG);
  char out[7] = {};
  ASSERT_EQ(ps_slice_copy_out(&s, 0, out, 6), PS_OK);
  EXPECT_STREQ(out, "234567");
  EXPECT_EQ(ps_slice_copy_out(&s, 1, out, 6), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_copy_out(&s, 0, nullptr, 1), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_narrow(nullptr, 0, 0), PS_ERR_INVALID_ARG);
  ps_slice_unref(&s);
}

TEST(Slice, EmptySlice) {
  ps_slice_t empty = PS_SLICE_EMPTY_INIT;
  EXPECT_EQ(ps_slice_ptr(&empty), nullptr);
  EXPECT_TRUE(ps_slice_is_empty(&empty));
  EXPECT_EQ(ps_slice_mem_kind(&empty), PS_BUF_MEM_HOST);
  ps_slice_t sub;
  EXPECT_EQ(ps_slice_sub(&empty, 0, 0, &sub), PS_OK);
  EXPECT_EQ(sub.buf, nullptr);
  EXPECT_EQ(ps_slice_sub(&empty, 0, 1, &sub), PS_ERR_INVALID_ARG);
  ps_slice_t copy = ps_slice_ref(&empty);
  EXPECT_EQ(copy.buf, nullptr);
  ps_slice_unref(&copy);
  char out;
  EXPECT_EQ(ps_slice_copy_out(&empty, 0, &out, 1), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_copy_out(&empty, 0, &out, 0), PS_OK);
}

TEST(Slice, WrapAsSlice) {
  ReleaseLog log;
  static char mem[32];
  ps_slice_t s;
  ASSERT_EQ(ps_slice_wrap(mem, sizeof(mem), RecordRelease, &log, &s), PS_OK);
  EXPECT_EQ(ps_slice_ptr(&s), mem);
  EXPECT_EQ(ps_slice_len(&s), sizeof(mem));
  EXPECT_EQ(ps_slice_wrap(nullptr, 4, nullptr, nullptr, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_alloc(4, 3, &s), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_slice_alloc(4, 0, nullptr), PS_ERR_INVALID_ARG);
  ps_slice_unref(&s);
  EXPECT_EQ(log.calls.load(), 1);
}

ReleaseLog *g_reg_log;
void RecordDereg(ps_buf_t *buf, unsigned slot, void *reg) {
  g_reg_log->order += "r" + std::to_string(slot) + static_cast<const char *>(reg);
}

TEST(Buffer, RegistrationSlots) {
  ReleaseLog log;
  g_reg_log = &log;
  static char mem[16];
  static char mr_a[] = "a", mr_b[] = "b";
  ps_buf_t *buf;
  ASSERT_EQ(ps_buf_wrap(mem, sizeof(mem), RecordRelease, &log, &buf), PS_OK);
  EXPECT_EQ(ps_buf_reg_get(buf, 0), nullptr);
  EXPECT_EQ(ps_buf_reg_attach(buf, 0, mr_a, RecordDereg), PS_OK);
  EXPECT_EQ(ps_buf_reg_attach(buf, 0, mr_b, RecordDereg), PS_ERR_EXISTS);
  EXPECT_EQ(ps_buf_reg_get(buf, 0), mr_a);
  EXPECT_EQ(ps_buf_reg_attach(buf, 3, mr_b, RecordDereg), PS_OK);
  EXPECT_EQ(ps_buf_reg_attach(buf, PS_BUF_REG_SLOTS, mr_b, RecordDereg), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_buf_reg_attach(buf, 1, nullptr, RecordDereg), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_buf_reg_get(buf, PS_BUF_REG_SLOTS), nullptr);

  // Detached registrations are the caller's to undo.
  void *reg = nullptr;
  EXPECT_EQ(ps_buf_reg_attach(buf, 2, mr_b, RecordDereg), PS_OK);
  EXPECT_EQ(ps_buf_reg_detach(buf, 2, &reg), PS_OK);
  EXPECT_EQ(reg, mr_b);
  EXPECT_EQ(ps_buf_reg_detach(buf, 2, &reg), PS_ERR_NOT_FOUND);
  EXPECT_EQ(ps_buf_reg_detach(buf, 9, &reg), PS_ERR_INVALID_ARG);

  ps_buf_unref(buf);
  // Registrations are undone before the memory goes back.
  EXPECT_EQ(log.order, "r0ar3bm");
  g_reg_log = nullptr;
}

// A proxy shares the memory, kind, device and registrations, releases on
// its own last reference, and leaves undoing the registrations to the real
// buffer.
TEST(Buffer, ProxySharesMemoryAndRegistrationsNotTheirRelease) {
  ReleaseLog real_log, proxy_log;
  g_reg_log = &real_log;
  static char mem[32];
  static char mr[] = "x";
  ps_buf_t *real;
  ASSERT_EQ(ps_buf_wrap_mem(mem, sizeof(mem), PS_BUF_MEM_EMU, 2, RecordRelease, &real_log, &real),
            PS_OK);
  ASSERT_EQ(ps_buf_reg_attach(real, 1, mr, RecordDereg), PS_OK);
  ps_buf_t *proxy;
  ASSERT_EQ(ps_buf_proxy(real, RecordRelease, &proxy_log, &proxy), PS_OK);
  EXPECT_EQ(ps_buf_data(proxy), static_cast<void *>(mem));
  EXPECT_EQ(ps_buf_length(proxy), sizeof(mem));
  EXPECT_EQ(ps_buf_mem_kind(proxy), PS_BUF_MEM_EMU);
  EXPECT_EQ(ps_buf_device(proxy), 2);
  EXPECT_EQ(ps_buf_reg_get(proxy, 1), mr);
  EXPECT_EQ(ps_buf_reg_get(proxy, 0), nullptr);
  EXPECT_EQ(ps_buf_refcount(real), 1u);  // the proxy holds no reference on it

  ps_slice_t s;
  ASSERT_EQ(ps_slice_of(proxy, 4, 8, &s), PS_OK);
  ps_buf_unref(proxy);
  EXPECT_EQ(proxy_log.calls.load(), 0);
  ps_slice_unref(&s);
  EXPECT_EQ(proxy_log.calls.load(), 1);
  EXPECT_EQ(proxy_log.data, static_cast<void *>(mem));
  EXPECT_EQ(real_log.order, "");  // the proxy undid nothing
  ps_buf_unref(real);
  EXPECT_EQ(real_log.order, "r1xm");
  EXPECT_EQ(ps_buf_proxy(nullptr, RecordRelease, nullptr, &proxy), PS_ERR_INVALID_ARG);
  g_reg_log = nullptr;
}

// References taken and dropped on many threads: the memory goes back
// exactly once, after everyone is done (tsan checks the ordering).
TEST(Buffer, ConcurrentReferences) {
  ReleaseLog log;
  std::vector<char> mem(4096);
  ps_buf_t *buf;
  ASSERT_EQ(ps_buf_wrap(mem.data(), mem.size(), RecordRelease, &log, &buf), PS_OK);
  constexpr int kThreads = 4, kIters = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    ps_buf_ref(buf);  // each thread owns one reference
    threads.emplace_back([buf, t] {
      for (int i = 0; i < kIters; ++i) {
        ps_slice_t s, sub;
        ASSERT_EQ(ps_slice_of(buf, static_cast<size_t>(t) * 1024, 1024, &s), PS_OK);
        ASSERT_EQ(ps_slice_sub(&s, static_cast<size_t>(i % 1024), 0, &sub), PS_OK);
        static_cast<char *>(ps_slice_ptr(&s))[i % 1024] = static_cast<char>(i);
        ps_slice_unref(&sub);
        ps_slice_unref(&s);
      }
      ps_buf_unref(buf);
    });
  }
  ps_buf_unref(buf);  // the creator lets go early
  for (auto &th : threads) th.join();
  EXPECT_EQ(log.calls.load(), 1);
}

TEST(Buffer, ConcurrentAttachHasOneWinner) {
  ps_buf_t *buf;
  ASSERT_EQ(ps_buf_alloc(8, 0, &buf), PS_OK);
  static char regs[4];
  std::atomic<int> won{0}, lost{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ps_status_t st = ps_buf_reg_attach(buf, 1, &regs[t], nullptr);
      (st == PS_OK ? won : lost).fetch_add(1);
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(lost.load(), 3);
  EXPECT_NE(ps_buf_reg_get(buf, 1), nullptr);
  ps_buf_unref(buf);
}

// A van's progress reports reach the hook as offsets into the buffer; a
// slice without one ignores them, and a report past the slice is dropped.
TEST(Slice, FillReportsReachTheHook) {
  ps_buf_t *buf;
  ASSERT_EQ(ps_buf_alloc(4096, 0, &buf), PS_OK);
  ps_slice_t whole, tail;
  ASSERT_EQ(ps_slice_of(buf, 0, 4096, &whole), PS_OK);
  ASSERT_EQ(ps_slice_sub(&whole, 1000, 3000, &tail), PS_OK);
  EXPECT_FALSE(ps_slice_fill_watched(&tail));
  ps_slice_filled(&tail, 10);  // nobody watches: nothing happens

  static std::vector<size_t> ends;
  ends.clear();
  ps_buf_set_fill_hook(buf, [](void *arg, size_t end) {
    EXPECT_EQ(arg, &ends);
    ends.push_back(end);
  }, &ends);
  EXPECT_TRUE(ps_slice_fill_watched(&tail));
  ps_slice_filled(&tail, 0);
  ps_slice_filled(&tail, 2000);
  ps_slice_filled(&tail, 3000);
  ps_slice_filled(&tail, 3001);  // past the slice
  EXPECT_EQ(ends, (std::vector<size_t>{1000, 3000, 4000}));
  ps_buf_set_fill_hook(buf, nullptr, nullptr);
  ps_slice_filled(&tail, 3000);
  EXPECT_EQ(ends.size(), 3u);
  ps_slice_t empty = PS_SLICE_EMPTY_INIT;
  ps_slice_filled(&empty, 0);
  EXPECT_FALSE(ps_slice_fill_watched(&empty));
  ps_slice_unref(&tail);
  ps_slice_unref(&whole);
  ps_buf_unref(buf);
}

}  // namespace

// The host memory kind and the registry as seen by a binary without CUDA.
#include "ps/gpu/mem.h"

#include <stdint.h>
#include <string.h>

#include <vector>

#include <gtest/gtest.h>

namespace {

const ps_mem_ops_t *host() { return ps_mem_ops(PS_MEM_HOST); }

// Every slot of a table, so "no NULL slot" is checked slot by slot.
std::vector<const void *> slots(const ps_mem_ops_t *o) {
  return {
      reinterpret_cast<const void *>(o->init),
      reinterpret_cast<const void *>(o->cleanup),
      reinterpret_cast<const void *>(o->describe),
      reinterpret_cast<const void *>(o->device_count),
      reinterpret_cast<const void *>(o->alloc),
      reinterpret_cast<const void *>(o->free),
      reinterpret_cast<const void *>(o->copy_to_host),
      reinterpret_cast<const void *>(o->copy_from_host),
      reinterpret_cast<const void *>(o->copy),
      reinterpret_cast<const void *>(o->memset),
      reinterpret_cast<const void *>(o->is_addr),
      reinterpret_cast<const void *>(o->register_host),
      reinterpret_cast<const void *>(o->unregister_host),
      reinterpret_cast<const void *>(o->ipc_get_handle),
      reinterpret_cast<const void *>(o->ipc_open_handle),
      reinterpret_cast<const void *>(o->ipc_close),
      reinterpret_cast<const void *>(o->addr_range),
      reinterpret_cast<const void *>(o->dmabuf_fd),
      reinterpret_cast<const void *>(o->event_create),
      reinterpret_cast<const void *>(o->event_record),
      reinterpret_cast<const void *>(o->event_query),
      reinterpret_cast<const void *>(o->event_destroy),
  };
}

TEST(MemRegistry, HostTableIsComplete) {
  const ps_mem_ops_t *o = host();
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->size, sizeof(ps_mem_ops_t));
  EXPECT_STREQ(o->name, "host");
  for (const void *slot : slots(o)) {
    EXPECT_NE(slot, nullptr);
  }
  EXPECT_TRUE(ps_mem_kind_linked(PS_MEM_HOST));
  EXPECT_STREQ(ps_mem_kind_name(PS_MEM_HOST), "host");
  EXPECT_STREQ(ps_mem_kind_name(PS_MEM_CUDA), "cuda");
  EXPECT_STREQ(ps_mem_kind_name(PS_MEM_KIND_COUNT), "unknown");
}

// This binary does not link //ps/gpu:cuda: the CUDA kind answers, never NULL.
TEST(MemRegistry, UnlinkedKindIsUnsupportedNotNull) {
  EXPECT_FALSE(ps_mem_kind_linked(PS_MEM_CUDA));
  for (int kind : {static_cast<int>(PS_MEM_CUDA), static_cast<int>(PS_MEM_KIND_COUNT), -1, 1000}) {
    const ps_mem_ops_t *o = ps_mem_ops(static_cast<ps_mem_kind_t>(kind));
    ASSERT_NE(o, nullptr) << kind;
    EXPECT_STREQ(o->name, "unsupported");
    for (const void *slot : slots(o)) {
      EXPECT_NE(slot, nullptr);
    }
    void *ptr = reinterpret_cast<void *>(0x1);
    int n = -7;
    char buf[8] = {};
    ps_mem_ipc_handle_t h;
    ps_mem_event_h ev = nullptr;
    EXPECT_EQ(o->init(), PS_ERR_UNSUPPORTED);
    o->cleanup();
    EXPECT_EQ(o->device_count(&n), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(n, -7);
    EXPECT_EQ(o->alloc(16, 0, &ptr), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(ptr, reinterpret_cast<void *>(0x1));
    EXPECT_EQ(o->free(buf), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(o->copy(buf, buf + 4, 4), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(o->memset(buf, 0, 4), PS_ERR_UNSUPPORTED);
    EXPECT_FALSE(o->is_addr(buf, &n));
    EXPECT_EQ(o->register_host(buf, sizeof(buf)), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(o->ipc_get_handle(buf, &h), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(o->event_create(0, &ev), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(ev, nullptr);
  }
}

TEST(MemRegistry, DescribeUnlinkedKindSaysWhy) {
  ps_mem_info_t info;
  ASSERT_EQ(ps_mem_describe(PS_MEM_CUDA, &info), PS_OK);
  EXPECT_EQ(info.kind, PS_MEM_CUDA);
  EXPECT_STREQ(info.name, "cuda");
  EXPECT_FALSE(info.linked);
  EXPECT_FALSE(info.available);
  EXPECT_EQ(info.device_count, 0);
  EXPECT_NE(strstr(info.reason, "not linked"), nullptr) << info.reason;

  EXPECT_EQ(ps_mem_describe(PS_MEM_KIND_COUNT, &info), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mem_describe(PS_MEM_HOST, nullptr), PS_ERR_INVALID_ARG);
}

TEST(MemHost, InitDescribeCount) {
  EXPECT_EQ(host()->init(), PS_OK);
  EXPECT_EQ(host()->init(), PS_OK);  // idempotent
  ps_mem_info_t info;
  ASSERT_EQ(ps_mem_describe(PS_MEM_HOST, &info), PS_OK);
  EXPECT_TRUE(info.linked);
  EXPECT_TRUE(info.available);
  EXPECT_EQ(info.device_count, 1);
  EXPECT_STREQ(info.reason, "");
  int n = 0;
  ASSERT_EQ(host()->device_count(&n), PS_OK);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(host()->device_count(nullptr), PS_ERR_INVALID_ARG);
  host()->cleanup();
}

TEST(MemHost, AllocIsAlignedAndWritable) {
  for (size_t len : {size_t{1}, size_t{63}, size_t{64}, size_t{4096}, size_t{1} << 20}) {
    void *p = nullptr;
    ASSERT_EQ(host()->alloc(len, 0, &p), PS_OK) << len;
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << len;
    memset(p, 0xab, len);
    EXPECT_EQ(static_cast<unsigned char *>(p)[len - 1], 0xab);
    EXPECT_EQ(host()->free(p), PS_OK);
  }
}

TEST(MemHost, AllocRejectsBadArgumentsWithoutTouchingOutput) {
  void *p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(host()->alloc(0, 0, &p), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->alloc(16, 1, &p), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->alloc(16, -1, &p), PS_ERR_INVALID_ARG);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));
  EXPECT_EQ(host()->alloc(16, 0, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->free(nullptr), PS_OK);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// The ASan and TSan allocators report an impossible size instead of failing.
TEST(MemHost, AllocFailureIsNoMemory) {
  void *p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(host()->alloc(SIZE_MAX - 4096, 0, &p), PS_ERR_NO_MEMORY);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));
}
#endif

TEST(MemHost, CopiesRoundTrip) {
  std::vector<unsigned char> src(1000), mid(1000), dst(1000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  ASSERT_EQ(host()->copy_from_host(mid.data(), src.data(), src.size()), PS_OK);
  ASSERT_EQ(host()->copy(dst.data(), mid.data(), 500), PS_OK);
  ASSERT_EQ(host()->copy_to_host(dst.data() + 500, mid.data() + 500, 500), PS_OK);
  EXPECT_EQ(src, dst);
}

TEST(MemHost, CopyArgumentChecks) {
  unsigned char buf[64] = {};
  EXPECT_EQ(host()->copy(nullptr, nullptr, 0), PS_OK);
  EXPECT_EQ(host()->copy(nullptr, buf, 1), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->copy_to_host(buf, nullptr, 1), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->copy_from_host(nullptr, buf, 1), PS_ERR_INVALID_ARG);
  // Overlap is a caller bug; memcpy would corrupt silently.
  EXPECT_EQ(host()->copy(buf + 1, buf, 8), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->copy(buf, buf + 7, 8), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->copy(buf, buf + 8, 8), PS_OK);  // adjacent is fine
  EXPECT_EQ(host()->copy(buf + 8, buf, 8), PS_OK);
  EXPECT_EQ(host()->copy(buf, buf, 8), PS_OK);
}

TEST(MemHost, Memset) {
  unsigned char buf[32];
  memset(buf, 0, sizeof(buf));
  ASSERT_EQ(host()->memset(buf + 4, 0x5a, 8), PS_OK);
  for (size_t i = 0; i < sizeof(buf); ++i) {
    EXPECT_EQ(buf[i], (i >= 4 && i < 12) ? 0x5a : 0) << i;
  }
  EXPECT_EQ(host()->memset(nullptr, 0, 0), PS_OK);
  EXPECT_EQ(host()->memset(nullptr, 0, 1), PS_ERR_INVALID_ARG);
}

TEST(MemHost, ClaimsEveryPointer) {
  int on_stack = 0;
  int device = -1;
  EXPECT_TRUE(host()->is_addr(&on_stack, &device));
  EXPECT_EQ(device, 0);
  EXPECT_FALSE(host()->is_addr(nullptr, &device));

  std::vector<char> heap(10);
  ps_mem_kind_t kind = PS_MEM_KIND_COUNT;
  device = -1;
  ASSERT_EQ(ps_mem_kind_of(heap.data(), &kind, &device), PS_OK);
  EXPECT_EQ(kind, PS_MEM_HOST);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(ps_mem_kind_of(nullptr, &kind, &device), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mem_kind_of(heap.data(), nullptr, &device), PS_ERR_INVALID_ARG);
}

TEST(MemHost, RegisterIsANoOpThatChecksArguments) {
  std::vector<char> buf(4096);
  EXPECT_EQ(host()->register_host(buf.data(), buf.size()), PS_OK);
  EXPECT_EQ(host()->unregister_host(buf.data()), PS_OK);
  EXPECT_EQ(host()->register_host(nullptr, 10), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->register_host(buf.data(), 0), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->unregister_host(nullptr), PS_ERR_INVALID_ARG);
}

TEST(MemHost, IpcIsUnsupported) {
  char buf[16];
  ps_mem_ipc_handle_t h;
  memset(&h, 0x77, sizeof(h));
  void *p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(host()->ipc_get_handle(buf, &h), PS_ERR_UNSUPPORTED);
  EXPECT_EQ(h.bytes[0], 0x77);
  EXPECT_EQ(host()->ipc_open_handle(&h, 0, &p), PS_ERR_UNSUPPORTED);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));
  EXPECT_EQ(host()->ipc_close(buf), PS_ERR_UNSUPPORTED);
}

TEST(MemHost, EventsAreReadyOnceRecorded) {
  ps_mem_event_h ev = nullptr;
  ASSERT_EQ(host()->event_create(0, &ev), PS_OK);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(host()->event_query(ev), PS_OK);  // nothing recorded yet
  EXPECT_EQ(host()->event_record(ev, nullptr), PS_OK);
  EXPECT_EQ(host()->event_query(ev), PS_OK);
  // The generic calls dispatch on the event's own kind.
  EXPECT_EQ(ps_mem_event_record(ev, nullptr), PS_OK);
  EXPECT_EQ(ps_mem_event_query(ev), PS_OK);
  EXPECT_EQ(ps_mem_event_destroy(ev), PS_OK);
}

TEST(MemHost, EventArgumentChecks) {
  ps_mem_event_h ev = reinterpret_cast<ps_mem_event_h>(0x1);
  EXPECT_EQ(host()->event_create(1, &ev), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ev, reinterpret_cast<ps_mem_event_h>(0x1));
  EXPECT_EQ(host()->event_create(0, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->event_record(nullptr, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->event_query(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(host()->event_destroy(nullptr), PS_OK);
  EXPECT_EQ(ps_mem_event_record(nullptr, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mem_event_query(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_mem_event_destroy(nullptr), PS_OK);
}

}  // namespace

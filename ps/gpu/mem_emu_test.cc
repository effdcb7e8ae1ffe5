// The emulated device kind (emu.h): memory host code cannot touch, copies
// only through the kind, stream work that completes later and in order,
// events, IPC handles between processes (interior pointers included).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "ps/gpu/emu.h"
#include "ps/gpu/mem.h"

namespace {

const ps_mem_ops_t *emu() { return ps_mem_ops(PS_MEM_EMU); }

std::vector<unsigned char> pattern(size_t len, unsigned seed) {
  std::vector<unsigned char> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = static_cast<unsigned char>(i * 31 + seed + (i >> 8));
  return v;
}

struct DelayGuard {
  explicit DelayGuard(unsigned us) { ps_mem_emu_set_delay_us(us); }
  ~DelayGuard() { ps_mem_emu_set_delay_us(0); }
};

TEST(MemEmu, IsLinkedAndDescribesItself) {
  ASSERT_TRUE(ps_mem_kind_linked(PS_MEM_EMU));
  EXPECT_STREQ(ps_mem_kind_name(PS_MEM_EMU), "emu");
  ps_mem_info_t info;
  ASSERT_EQ(ps_mem_describe(PS_MEM_EMU, &info), PS_OK);
  EXPECT_TRUE(info.available);
  EXPECT_EQ(info.device_count, PS_MEM_EMU_DEVICES);
  EXPECT_EQ(emu()->init(), PS_OK);
}

TEST(MemEmu, CopiesRoundTripEveryByteOnEveryDevice) {
  for (int dev = 0; dev < PS_MEM_EMU_DEVICES; ++dev) {
    for (size_t len : {size_t{1}, size_t{4097}, size_t{1} << 20}) {
      void *a = nullptr;
      void *b = nullptr;
      ASSERT_EQ(emu()->alloc(len, dev, &a), PS_OK);
      ASSERT_EQ(emu()->alloc(len, dev, &b), PS_OK);
      auto in = pattern(len, static_cast<unsigned>(dev + len));
      std::vector<unsigned char> out(len, 0);
      ASSERT_EQ(emu()->copy_from_host(a, in.data(), len), PS_OK);
      ASSERT_EQ(emu()->copy(b, a, len), PS_OK);
      ASSERT_EQ(emu()->copy_to_host(out.data(), b, len), PS_OK);
      EXPECT_EQ(out, in) << "device " << dev << ", " << len << " bytes";

      ps_mem_kind_t kind = PS_MEM_HOST;
      int device = -1;
      ASSERT_EQ(ps_mem_kind_of(static_cast<char *>(b) + len - 1, &kind, &device), PS_OK);
      EXPECT_EQ(kind, PS_MEM_EMU);
      EXPECT_EQ(device, dev);
      EXPECT_EQ(emu()->free(a), PS_OK);
      EXPECT_EQ(emu()->free(b), PS_OK);
    }
  }
  ps_mem_kind_t kind = PS_MEM_EMU;
  int device = -1;
  int on_stack = 0;
  ASSERT_EQ(ps_mem_kind_of(&on_stack, &kind, &device), PS_OK);
  EXPECT_EQ(kind, PS_MEM_HOST);
}

TEST(MemEmu, InteriorPointersAndMemset) {
  const size_t len = 10000;
  void *d = nullptr;
  ASSERT_EQ(emu()->alloc(len, 1, &d), PS_OK);
  char *p = static_cast<char *>(d);
  ASSERT_EQ(emu()->memset(p, 0x11, len), PS_OK);
  ASSERT_EQ(emu()->memset(p + 100, 0x22, 50), PS_OK);
  std::vector<unsigned char> out(len);
  ASSERT_EQ(emu()->copy_to_host(out.data(), p, len), PS_OK);
  for (size_t i = 0; i < len; ++i) {
    ASSERT_EQ(out[i], (i >= 100 && i < 150) ? 0x22 : 0x11) << "byte " << i;
  }
  EXPECT_EQ(emu()->free(d), PS_OK);
}

TEST(MemEmu, RefusesWhatADeviceWould) {
  void *d = nullptr;
  char host[64];
  EXPECT_EQ(emu()->alloc(0, 0, &d), PS_ERR_INVALID_ARG);
  EXPECT_EQ(emu()->alloc(64, PS_MEM_EMU_DEVICES, &d), PS_ERR_INVALID_ARG);
  EXPECT_EQ(emu()->alloc(64, -1, &d), PS_ERR_INVALID_ARG);
  ASSERT_EQ(emu()->alloc(64, 0, &d), PS_OK);
  // A copy that runs past the end of the allocation.
  EXPECT_EQ(emu()->copy_to_host(host, static_cast<char *>(d) + 1, 64), PS_ERR_INVALID_ARG);
  // Only the start of an allocation can be freed, and only once.
  EXPECT_EQ(emu()->free(static_cast<char *>(d) + 8), PS_ERR_INVALID_ARG);
  EXPECT_EQ(emu()->free(d), PS_OK);
  EXPECT_EQ(emu()->free(d), PS_ERR_INVALID_ARG);
  EXPECT_EQ(emu()->ipc_close(host), PS_ERR_INVALID_ARG);
}

// The point of the kind: host code that touches device memory dies, as it
// would with a GPU's memory.
TEST(MemEmuDeathTest, HostCodeCannotReadOrWriteIt) {
  void *d = nullptr;
  ASSERT_EQ(emu()->alloc(4096, 0, &d), PS_OK);
  volatile unsigned char *p = static_cast<unsigned char *>(d);
  // Each statement exits 0 if the access went through; a crash (SIGSEGV, or
  // a sanitizer's report of it) is the death expected.
  EXPECT_DEATH({ unsigned char c = p[0]; (void)c; _exit(0); }, "");
  EXPECT_DEATH({ p[4095] = 1; _exit(0); }, "");
  char host[16] = {};
  EXPECT_DEATH(
      {
        memcpy(host, d, sizeof(host));
        volatile char sink = host[5];
        (void)sink;
        _exit(0);
      },
      "");
  EXPECT_EQ(emu()->free(d), PS_OK);
}

TEST(MemEmu, StreamWorkCompletesLaterAndInOrder) {
  const size_t len = 1 << 16;
  void *stream = nullptr;
  void *d = nullptr;
  ps_mem_event_h ev = nullptr;
  ASSERT_EQ(emu()->stream_create(0, &stream), PS_OK);
  ASSERT_EQ(emu()->alloc(len, 0, &d), PS_OK);
  ASSERT_EQ(emu()->event_create(0, &ev), PS_OK);
  EXPECT_EQ(ps_mem_event_query(ev), PS_OK);  // nothing recorded yet

  auto in = pattern(len, 7);
  std::vector<unsigned char> out(len, 0);
  {
    DelayGuard slow(20000);  // every queued op waits 20 ms
    ASSERT_EQ(emu()->memset_async(d, 0x5a, len, stream), PS_OK);
    ASSERT_EQ(emu()->copy_async(d, in.data(), len / 2, stream), PS_OK);
    ASSERT_EQ(emu()->copy_async(out.data(), d, len, stream), PS_OK);
    ASSERT_EQ(ps_mem_event_record(ev, stream), PS_OK);
    EXPECT_EQ(ps_mem_event_query(ev), PS_INPROGRESS);
    EXPECT_EQ(out[0], 0) << "the copy back ran before the call returned";
    ASSERT_EQ(ps_mem_event_wait(ev, 10000), PS_OK);
  }
  for (size_t i = 0; i < len; ++i) {
    ASSERT_EQ(out[i], i < len / 2 ? in[i] : 0x5a) << "byte " << i;
  }
  EXPECT_EQ(ps_mem_event_destroy(ev), PS_OK);
  EXPECT_EQ(emu()->stream_destroy(stream), PS_OK);
  EXPECT_EQ(emu()->free(d), PS_OK);
}

// A readiness event that completes late: a host function that sleeps, then
// a memset, then the event; only once it is done does the pattern show.
TEST(MemEmu, LateEventThroughAHostFunction) {
  const size_t len = 4096;
  void *d = nullptr;
  ps_mem_event_h ev = nullptr;
  ASSERT_EQ(emu()->alloc(len, 1, &d), PS_OK);
  ASSERT_EQ(emu()->memset(d, 0, len), PS_OK);
  ASSERT_EQ(emu()->event_create(1, &ev), PS_OK);
  static std::atomic<int> ran{0};
  ran = 0;
  auto sleepy = [](void *) {
    usleep(50000);
    ran = 1;
  };
  ASSERT_EQ(emu()->launch_host_func(nullptr, sleepy, nullptr), PS_OK);  // device 0's default
  void *stream = nullptr;
  ASSERT_EQ(emu()->stream_create(1, &stream), PS_OK);
  ASSERT_EQ(emu()->launch_host_func(stream, sleepy, nullptr), PS_OK);
  ASSERT_EQ(emu()->memset_async(d, 0x77, len, stream), PS_OK);
  ASSERT_EQ(ps_mem_event_record(ev, stream), PS_OK);
  EXPECT_EQ(ps_mem_event_wait(ev, 1), PS_ERR_TIMED_OUT);
  ASSERT_EQ(ps_mem_event_wait(ev, 10000), PS_OK);
  EXPECT_EQ(ran.load(), 1);
  std::vector<unsigned char> out(len);
  ASSERT_EQ(emu()->copy_to_host(out.data(), d, len), PS_OK);
  EXPECT_EQ(out, std::vector<unsigned char>(len, 0x77));
  EXPECT_EQ(ps_mem_event_destroy(ev), PS_OK);
  EXPECT_EQ(emu()->stream_destroy(stream), PS_OK);
  EXPECT_EQ(emu()->free(d), PS_OK);
}

// Destroying a stream with work queued: the work still runs, and an event
// recorded on it still answers.
TEST(MemEmu, DestroyedStreamFinishesItsWork) {
  void *stream = nullptr;
  void *d = nullptr;
  ps_mem_event_h ev = nullptr;
  ASSERT_EQ(emu()->stream_create(0, &stream), PS_OK);
  ASSERT_EQ(emu()->alloc(256, 0, &d), PS_OK);
  ASSERT_EQ(emu()->event_create(0, &ev), PS_OK);
  {
    DelayGuard slow(10000);
    ASSERT_EQ(emu()->memset_async(d, 0x33, 256, stream), PS_OK);
    ASSERT_EQ(ps_mem_event_record(ev, stream), PS_OK);
    ASSERT_EQ(emu()->stream_destroy(stream), PS_OK);
  }
  ASSERT_EQ(ps_mem_event_wait(ev, 10000), PS_OK);
  unsigned char out[256];
  ASSERT_EQ(emu()->copy_to_host(out, d, sizeof(out)), PS_OK);
  EXPECT_EQ(out[0], 0x33);
  EXPECT_EQ(out[255], 0x33);
  EXPECT_EQ(ps_mem_event_destroy(ev), PS_OK);
  EXPECT_EQ(emu()->free(d), PS_OK);
}

// A handle of an interior pointer names its allocation: another process
// opens the allocation's start and, at the offset addr_range gives, reads
// the exporter's bytes and writes back.
TEST(MemEmu, IpcHandleBetweenProcesses) {
  const size_t len = 3 * 4096 + 100;
  const size_t off = 4096 + 17;
  void *d = nullptr;
  ASSERT_EQ(emu()->alloc(len, 1, &d), PS_OK);
  auto in = pattern(len, 3);
  ASSERT_EQ(emu()->copy_from_host(d, in.data(), len), PS_OK);
  ps_mem_ipc_handle_t h;
  char *interior = static_cast<char *>(d) + off;
  ASSERT_EQ(emu()->ipc_get_handle(interior, &h), PS_OK);
  void *base = nullptr;
  size_t base_len = 0;
  ASSERT_EQ(emu()->addr_range(interior, &base, &base_len), PS_OK);
  EXPECT_EQ(base, d);
  EXPECT_EQ(base_len, len);
  ps_mem_ipc_handle_t h_base;
  ASSERT_EQ(emu()->ipc_get_handle(d, &h_base), PS_OK);
  EXPECT_EQ(memcmp(&h, &h_base, sizeof(h)), 0) << "an interior pointer names its allocation";
  void *same = nullptr;
  EXPECT_EQ(emu()->ipc_open_handle(&h, 0, &same), PS_ERR_INVALID_ARG)
      << "opening a handle in its own process must be refused";

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    void *p = nullptr;
    if (emu()->ipc_open_handle(&h, 0, &p) != PS_OK) _exit(10);
    int dev = -1;
    if (!emu()->is_addr(p, &dev) || dev != 1) _exit(11);
    char *at = static_cast<char *>(p) + off;
    std::vector<unsigned char> got(len - off);
    if (emu()->copy_to_host(got.data(), at, got.size()) != PS_OK) _exit(12);
    if (memcmp(got.data(), in.data() + off, got.size()) != 0) _exit(13);
    if (emu()->memset(at, 0xee, 10) != PS_OK) _exit(14);
    if (emu()->ipc_close(at) != PS_ERR_INVALID_ARG) _exit(16);  // close takes the start
    if (emu()->ipc_close(p) != PS_OK) _exit(15);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child step that failed: " << WEXITSTATUS(status);
  std::vector<unsigned char> out(len);
  ASSERT_EQ(emu()->copy_to_host(out.data(), d, len), PS_OK);
  for (size_t i = 0; i < len; ++i) {
    ASSERT_EQ(out[i], (i >= off && i < off + 10) ? 0xee : in[i]) << "byte " << i;
  }

  // Once freed, the handle names nothing.
  ASSERT_EQ(emu()->free(d), PS_OK);
  child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    void *p = nullptr;
    _exit(emu()->ipc_open_handle(&h, 0, &p) == PS_ERR_NOT_FOUND ? 0 : 1);
  }
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(MemEmu, ForeignHandleRefused) {
  ps_mem_ipc_handle_t h;
  memset(&h, 0xab, sizeof(h));
  void *p = nullptr;
  EXPECT_EQ(emu()->ipc_open_handle(&h, 0, &p), PS_ERR_INVALID_ARG);
}

// The host kind's stream slots do the work in the call.
TEST(MemHostStreams, WorkIsDoneInTheCall) {
  const ps_mem_ops_t *host = ps_mem_ops(PS_MEM_HOST);
  void *stream = nullptr;
  ASSERT_EQ(host->stream_create(0, &stream), PS_OK);
  char a[8] = "abcdefg";
  char b[8] = {};
  ASSERT_EQ(host->copy_async(b, a, sizeof(a), stream), PS_OK);
  EXPECT_STREQ(b, "abcdefg");
  ASSERT_EQ(host->memset_async(b, 'x', 3, stream), PS_OK);
  EXPECT_STREQ(b, "xxxdefg");
  static int called;
  called = 0;
  ASSERT_EQ(host->launch_host_func(stream, [](void *) { called = 1; }, nullptr), PS_OK);
  EXPECT_EQ(called, 1);
  EXPECT_EQ(host->stream_destroy(stream), PS_OK);
}

}  // namespace

// ps_mem_slice_alloc: device memory as a slice of its kind, given back to
// the kind with the last reference; host memory as a plain slice.
TEST(MemEmu, SliceAllocGivesMemoryBackWithTheLastReference) {
    ASSERT_EQ(PS_OK, ps_mem_ops(PS_MEM_EMU)->init());
    ps_slice_t s;
    ASSERT_EQ(PS_OK, ps_mem_slice_alloc(PS_MEM_EMU, 1, 4096, &s));
    EXPECT_EQ(PS_BUF_MEM_EMU, ps_slice_mem_kind(&s));
    EXPECT_EQ(1, ps_slice_device(&s));
    EXPECT_EQ(4096u, s.len);
    void *ptr = ps_slice_ptr(&s);
    int device = -1;
    EXPECT_TRUE(ps_mem_ops(PS_MEM_EMU)->is_addr(ptr, &device));
    EXPECT_EQ(1, device);
    ps_slice_t more = ps_slice_ref(&s);
    ps_slice_unref(&s);
    EXPECT_TRUE(ps_mem_ops(PS_MEM_EMU)->is_addr(ptr, &device)) << "freed with a reference left";
    ps_slice_unref(&more);
    EXPECT_FALSE(ps_mem_ops(PS_MEM_EMU)->is_addr(ptr, &device)) << "not given back";
    ASSERT_EQ(PS_OK, ps_mem_slice_alloc(PS_MEM_HOST, 0, 64, &s));
    EXPECT_TRUE(ps_slice_in_host_mem(&s));
    ps_slice_unref(&s);
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_mem_slice_alloc(PS_MEM_KIND_COUNT, 0, 64, &s));
}

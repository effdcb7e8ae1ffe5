// KV pushes and pulls as IPC handles (ps/app/kv_ipc.h) on the emulated
// device: a child process exports device allocations, this process opens
// them the way a server does, reads pushed values out of them and writes
// pulled values into them (every byte checked, inside and around the
// destination), and every descriptor a hostile worker could send fails
// alone.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

extern "C" {
#include "ps/app/kv_ipc.h"
#include "ps/base/buffer.h"
#include "ps/gpu/emu.h"
#include "ps/gpu/mem.h"
}

namespace {

constexpr int kAllocs = PS__KV_IPC_CACHE + 4;
constexpr size_t kLen = 3 * 4096 + 100;
constexpr size_t kOffset = 4096 + 17;  // the share a worker pushes starts here

const ps_mem_ops_t *Emu() { return ps_mem_ops(PS_MEM_EMU); }

unsigned char Pattern(int alloc, size_t i) { return (unsigned char)(i * 7 + alloc * 13); }

bool WriteAll(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool ReadAll(int fd, void *p, size_t n) {
  char *c = static_cast<char *>(p);
  while (n > 0) {
    ssize_t k = read(fd, c, n);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// The exporting worker: kAllocs allocations, each described from an
// interior slice, then waits until the parent closes its pipe.
int RunExporter(int out, int hold) {
  if (Emu()->init() != PS_OK) return 10;
  std::vector<ps__kv_ipc_desc_t> descs(kAllocs);
  for (int a = 0; a < kAllocs; a++) {
    void *dev;
    if (Emu()->alloc(kLen, 0, &dev) != PS_OK) return 11;
    std::vector<unsigned char> bytes(kLen);
    for (size_t i = 0; i < kLen; i++) bytes[i] = Pattern(a, i);
    if (Emu()->copy_from_host(dev, bytes.data(), kLen) != PS_OK) return 12;
    ps_buf_t *buf;
    ps_slice_t slice;
    if (ps_buf_wrap_mem(dev, kLen, (ps_buf_mem_t)PS_MEM_EMU, 0, nullptr, nullptr, &buf) !=
            PS_OK ||
        ps_slice_of(buf, kOffset, kLen - kOffset, &slice) != PS_OK)
      return 13;
    ps_buf_unref(buf);
    if (ps__kv_ipc_describe(&slice, &descs[a]) != PS_OK) return 14;
    ps_slice_unref(&slice);
  }
  if (!WriteAll(out, descs.data(), descs.size() * sizeof(descs[0]))) return 15;
  char c;
  (void)read(hold, &c, 1);  // until the parent is done
  return 0;
}

class KvIpc : public ::testing::Test {
 protected:
  void SetUp() override {
    int up[2], down[2];
    ASSERT_EQ(pipe(up), 0);
    ASSERT_EQ(pipe(down), 0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(up[0]);
      close(down[1]);
      _exit(RunExporter(up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    hold_ = down[1];
    descs_.resize(kAllocs);
    ASSERT_TRUE(ReadAll(up[0], descs_.data(), descs_.size() * sizeof(descs_[0])))
        << "the exporter failed";
    close(up[0]);
    ASSERT_EQ(Emu()->init(), PS_OK);
    ASSERT_EQ(ps__kv_ipc_cache_create(&cache_), PS_OK);
  }
  void TearDown() override {
    ps__kv_ipc_cache_destroy(cache_);
    if (hold_ >= 0) close(hold_);
    int status = 0;
    if (child_ > 0) {
      ASSERT_EQ(waitpid(child_, &status, 0), child_);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exporter status " << status;
    }
  }
  // Fetches and checks every byte against allocation `a`'s pattern.
  void FetchAndCheck(int sender, const ps__kv_ipc_desc_t &d, int a) {
    ps_slice_t vals;
    ASSERT_EQ(ps__kv_ipc_fetch(cache_, sender, &d, &vals), PS_OK);
    ASSERT_EQ(vals.len, kLen - kOffset);
    ASSERT_TRUE(ps_slice_in_host_mem(&vals));
    const unsigned char *p = static_cast<const unsigned char *>(ps_slice_ptr(&vals));
    for (size_t i = 0; i < vals.len; i++) ASSERT_EQ(p[i], Pattern(a, kOffset + i)) << i;
    ps_slice_unref(&vals);
  }

  pid_t child_ = -1;
  int hold_ = -1;
  std::vector<ps__kv_ipc_desc_t> descs_;
  ps__kv_ipc_cache_t *cache_ = nullptr;
};

TEST_F(KvIpc, DescriptorNamesTheShareInsideItsAllocation) {
  const ps__kv_ipc_desc_t &d = descs_[0];
  EXPECT_EQ(d.magic, PS__KV_IPC_MAGIC);
  EXPECT_EQ(d.kind, (uint32_t)PS_MEM_EMU);
  EXPECT_EQ(d.offset, kOffset);
  EXPECT_EQ(d.len, kLen - kOffset);
  ps__kv_ipc_desc_t parsed;
  EXPECT_EQ(ps__kv_ipc_parse(&d, sizeof(d), &parsed), 1);
  EXPECT_EQ(memcmp(&parsed, &d, sizeof(d)), 0);
  EXPECT_EQ(ps__kv_ipc_parse(&d, sizeof(d) - 1, &parsed), 0);
  EXPECT_EQ(ps__kv_ipc_parse(nullptr, 0, &parsed), 0);
  ps__kv_ipc_desc_t other = d;
  other.magic ^= 1;
  EXPECT_EQ(ps__kv_ipc_parse(&other, sizeof(other), &parsed), 0);

  // Host memory has no handles: the worker stages it instead.
  std::vector<unsigned char> host(64);
  ps_slice_t slice;
  ASSERT_EQ(ps_slice_wrap(host.data(), host.size(), nullptr, nullptr, &slice), PS_OK);
  ps__kv_ipc_desc_t none;
  EXPECT_EQ(ps__kv_ipc_describe(&slice, &none), PS_ERR_UNSUPPORTED);
  ps_slice_unref(&slice);
}

TEST_F(KvIpc, EachAllocationIsOpenedOncePerSender) {
  FetchAndCheck(9, descs_[0], 0);
  FetchAndCheck(9, descs_[0], 0);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 1);
  FetchAndCheck(9, descs_[1], 1);
  FetchAndCheck(11, descs_[1], 1);  // another worker's entry of its own
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 3);
}

TEST_F(KvIpc, HostileDescriptorsFailTheirRequestOnly) {
  ps_slice_t vals;
  ps__kv_ipc_desc_t d = descs_[2];
  d.offset = kLen;  // past the allocation
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_ERR_INVALID_ARG);
  d = descs_[2];
  d.len = kLen;  // runs over the end
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_ERR_INVALID_ARG);
  d = descs_[2];
  d.len = (uint64_t)1 << 50;  // no host buffer of that size is made
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_ERR_INVALID_ARG);
  d = descs_[2];
  d.offset = UINT64_MAX - 10;  // wraps
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_ERR_INVALID_ARG);
  d = descs_[2];
  d.kind = PS_MEM_HOST;
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_ERR_UNSUPPORTED);
  d.kind = 99;
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_ERR_UNSUPPORTED);
  d = descs_[2];
  memset(&d.handle, 0x5a, sizeof(d.handle));  // not a handle of this kind
  EXPECT_NE(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_OK);
  d = descs_[2];
  d.device = 1000;
  EXPECT_NE(ps__kv_ipc_fetch(cache_, 9, &d, &vals), PS_OK);
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 0, &descs_[2], &vals), PS_ERR_UNSUPPORTED);
  // The allocation itself still opens and reads right.
  FetchAndCheck(9, descs_[2], 2);
}

// Fetches on several threads at once, over more allocations than the cache
// holds: copies run outside the cache's lock while other fetches open and
// evict allocations (never one being copied from: it is pinned); every
// byte is checked, and when all are done the cache holds its full count.
TEST_F(KvIpc, ConcurrentFetchesReadRightWhileTheCacheEvicts) {
  constexpr int kThreads = 4, kFetches = 300;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([this, t, &bad] {
      for (int i = 0; i < kFetches; i++) {
        int a = (i * 7 + t * 3) % kAllocs;
        ps_slice_t vals;
        if (ps__kv_ipc_fetch(cache_, 9 + 2 * (i % 2), &descs_[a], &vals) != PS_OK) {
          bad++;
          continue;
        }
        const unsigned char *p = static_cast<const unsigned char *>(ps_slice_ptr(&vals));
        for (size_t k = 0; k < vals.len; k++) {
          if (p[k] != Pattern(a, kOffset + k)) {
            bad++;
            break;
          }
        }
        ps_slice_unref(&vals);
      }
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), PS__KV_IPC_CACHE);
}

TEST_F(KvIpc, TheLeastRecentlyUsedIsClosedBeyondTheCache) {
  for (int a = 0; a < kAllocs; a++) FetchAndCheck(9, descs_[a], a);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), PS__KV_IPC_CACHE);
  // The first ones were closed; they open again and read right.
  FetchAndCheck(9, descs_[0], 0);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), PS__KV_IPC_CACHE);
}

// A worker that is gone: its allocations are closed, another worker's
// stay, and a descriptor of the same sender opens anew.
TEST_F(KvIpc, ForgettingASenderClosesItsAllocationsOnly) {
  FetchAndCheck(9, descs_[0], 0);
  FetchAndCheck(9, descs_[1], 1);
  FetchAndCheck(11, descs_[2], 2);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 3);
  ps__kv_ipc_forget(cache_, 9);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 1);
  ps__kv_ipc_forget(cache_, 13);  // never sent anything
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 1);
  FetchAndCheck(9, descs_[0], 0);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 2);
}

// Values copied into device memory of the server's (a registered receive
// buffer): one device-to-device copy, every byte checked; host memory and
// a buffer of another length are refused (the caller then fetches into
// the pinned pool).
TEST_F(KvIpc, FetchIntoDeviceMemoryOfTheSameKind) {
  const ps__kv_ipc_desc_t &d = descs_[3];
  ps_slice_t dst, host;
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, d.len + 64, &dst), PS_OK);
  ASSERT_EQ(ps_slice_narrow(&dst, 64, d.len), PS_OK);
  int may_land = -1;
  ASSERT_EQ(ps__kv_ipc_fetch_into(cache_, 9, &d, &dst, 5000, &may_land), PS_OK);
  EXPECT_EQ(may_land, 0);
  std::vector<unsigned char> got(d.len);
  ASSERT_EQ(Emu()->copy_to_host(got.data(), ps_slice_ptr(&dst), d.len), PS_OK);
  for (size_t i = 0; i < d.len; i++) ASSERT_EQ(got[i], Pattern(3, kOffset + i)) << i;
  ASSERT_EQ(ps_slice_alloc(d.len, 64, &host), PS_OK);
  EXPECT_EQ(ps__kv_ipc_fetch_into(cache_, 9, &d, &host, 5000, &may_land), PS_ERR_UNSUPPORTED);
  ASSERT_EQ(ps_slice_narrow(&dst, 0, d.len - 1), PS_OK);
  EXPECT_EQ(ps__kv_ipc_fetch_into(cache_, 9, &d, &dst, 5000, &may_land), PS_ERR_INVALID_ARG);
  ps_slice_unref(&host);
  ps_slice_unref(&dst);
}

// ---- pulls: the server writes into the worker's allocation ----

// A pull descriptor of `len` bytes at `offset` of allocation `a`.
ps__kv_ipc_desc_t PullDesc(const ps__kv_ipc_desc_t &d, uint64_t offset, uint64_t len) {
  ps__kv_ipc_desc_t p = d;
  p.magic = PS__KV_IPC_PULL_MAGIC;
  p.offset = offset;
  p.len = len;
  return p;
}

unsigned char Answer(int round, size_t i) { return (unsigned char)(i * 11 + round * 5 + 1); }

class KvIpcPull : public KvIpc {
 protected:
  int may_land = -1;  // ps__kv_ipc_put's word on a copy still under way

  // The whole of allocation `a` as it is now, read through the cache.
  std::vector<unsigned char> ReadAll(int a) {
    ps__kv_ipc_desc_t whole = descs_[a];
    whole.offset = 0;
    whole.len = kLen;
    ps_slice_t vals;
    EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &whole, &vals), PS_OK);
    std::vector<unsigned char> out(kLen);
    if (vals.len == kLen) memcpy(out.data(), ps_slice_ptr(&vals), kLen);
    ps_slice_unref(&vals);
    return out;
  }
  // Every byte of allocation `a`: `round`'s answer in [off, off + len),
  // the allocation's pattern elsewhere.
  void CheckAllocation(int a, size_t off, size_t len, int round) {
    std::vector<unsigned char> got = ReadAll(a);
    for (size_t i = 0; i < kLen; i++) {
      unsigned char want = i >= off && i < off + len ? Answer(round, i - off) : Pattern(a, i);
      ASSERT_EQ(got[i], want) << "allocation " << a << " byte " << i;
    }
  }
  // Host values of `round`'s answer.
  static std::vector<unsigned char> Values(int round, size_t len) {
    std::vector<unsigned char> v(len);
    for (size_t i = 0; i < len; i++) v[i] = Answer(round, i);
    return v;
  }
};

TEST_F(KvIpcPull, RequestBodiesAndWrittenMarksParse) {
  ps__kv_ipc_desc_t push = descs_[0], pull = PullDesc(descs_[1], 8, 16), a, b;
  int has_push, has_pull;
  EXPECT_EQ(ps__kv_ipc_parse_request(&push, sizeof(push), &a, &has_push, &b, &has_pull), 1);
  EXPECT_TRUE(has_push && !has_pull);
  EXPECT_EQ(memcmp(&a, &push, sizeof(a)), 0);
  EXPECT_EQ(ps__kv_ipc_parse_request(&pull, sizeof(pull), &a, &has_push, &b, &has_pull), 1);
  EXPECT_TRUE(!has_push && has_pull);
  EXPECT_EQ(memcmp(&b, &pull, sizeof(b)), 0);
  ps__kv_ipc_desc_t both[2] = {push, pull};
  EXPECT_EQ(ps__kv_ipc_parse_request(both, sizeof(both), &a, &has_push, &b, &has_pull), 1);
  EXPECT_TRUE(has_push && has_pull);
  // A pull descriptor is no push descriptor.
  EXPECT_EQ(ps__kv_ipc_parse(&pull, sizeof(pull), &a), 0);
  // Malformed: the wrong order, twice the same kind, a bad magic, a short
  // or long body; none sets a flag.
  ps__kv_ipc_desc_t swapped[2] = {pull, push}, two_push[2] = {push, push};
  ps__kv_ipc_desc_t bad = pull;
  bad.magic = 0x12345678u;
  std::vector<unsigned char> longer(sizeof(both) + 1);
  struct {
    const void *body;
    size_t len;
  } cases[] = {{swapped, sizeof(swapped)}, {two_push, sizeof(two_push)}, {&bad, sizeof(bad)},
               {&pull, sizeof(pull) - 1}, {longer.data(), longer.size()}, {nullptr, 0}};
  for (const auto &c : cases) {
    has_push = has_pull = 7;
    EXPECT_EQ(ps__kv_ipc_parse_request(c.body, c.len, &a, &has_push, &b, &has_pull), 0);
    EXPECT_EQ(has_push, 0);
    EXPECT_EQ(has_pull, 0);
  }

  ps__kv_ipc_written_t w = {PS__KV_IPC_WRITTEN_MAGIC, 0, 12345};
  uint64_t len = 0;
  EXPECT_EQ(ps__kv_ipc_written_parse(&w, sizeof(w), &len), 1);
  EXPECT_EQ(len, 12345u);
  EXPECT_EQ(ps__kv_ipc_written_parse(&w, sizeof(w) - 1, &len), 0);
  w.reserved = 1;
  EXPECT_EQ(ps__kv_ipc_written_parse(&w, sizeof(w), &len), 0);
  w.reserved = 0;
  w.magic = PS__KV_IPC_MAGIC;
  EXPECT_EQ(ps__kv_ipc_written_parse(&w, sizeof(w), &len), 0);
}

// Host values written at interior offsets of several sizes: each lands
// exactly in its range, every other byte of the allocation untouched.
TEST_F(KvIpcPull, WritesHostValuesIntoInteriorRangesOfSeveralSizes) {
  const struct {
    size_t off, len;
  } cases[] = {{kOffset, 1}, {kOffset, 7}, {kOffset + 3, 4096}, {1, kLen - 2},
               {kOffset, kLen - kOffset}, {0, kLen}, {kLen - 5, 5}};
  int a = 0;
  for (const auto &c : cases) {
    std::vector<unsigned char> v = Values(a, c.len);
    ps_slice_t vals;
    ASSERT_EQ(ps_slice_wrap(v.data(), v.size(), nullptr, nullptr, &vals), PS_OK);
    ps__kv_ipc_desc_t d = PullDesc(descs_[a], c.off, c.len);
    EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_OK)
        << c.off << " " << c.len;
    EXPECT_EQ(may_land, 0);
    ps_slice_unref(&vals);
    CheckAllocation(a, c.off, c.len, a);
    a++;
  }
}

// Values in device memory of the same kind: one device-to-device copy.
TEST_F(KvIpcPull, WritesDeviceValuesOfTheSameKind) {
  const size_t len = 2 * 4096 + 3;
  ps_slice_t vals;
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, len + 64, &vals), PS_OK);
  ASSERT_EQ(ps_slice_narrow(&vals, 64, len), PS_OK);  // an interior source too
  std::vector<unsigned char> v = Values(3, len);
  ASSERT_EQ(Emu()->copy_from_host(ps_slice_ptr(&vals), v.data(), len), PS_OK);
  ps__kv_ipc_desc_t d = PullDesc(descs_[4], kOffset - 17, len);
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_OK);
  ps_slice_unref(&vals);
  CheckAllocation(4, kOffset - 17, len, 3);
}

// Every descriptor that does not name exactly the answer's bytes inside the
// allocation fails alone, writing nothing; the allocation then takes a
// good write.
TEST_F(KvIpcPull, BadDestinationsWriteNothing) {
  const size_t len = 1000;
  std::vector<unsigned char> v = Values(6, len);
  ps_slice_t vals;
  ASSERT_EQ(ps_slice_wrap(v.data(), v.size(), nullptr, nullptr, &vals), PS_OK);
  const ps__kv_ipc_desc_t good = PullDesc(descs_[5], kOffset, len);
  ps__kv_ipc_desc_t d = good;
  d.len = len - 1;  // too small for the answer
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_ERR_INVALID_ARG);
  d = good;
  d.len = len + 1;  // not the answer's size either
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_ERR_INVALID_ARG);
  d = good;
  d.offset = kLen - len + 1;  // runs over the end
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_ERR_INVALID_ARG);
  d = good;
  d.offset = UINT64_MAX - 10;  // wraps
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_ERR_INVALID_ARG);
  d = good;
  d.magic = PS__KV_IPC_MAGIC;  // a push's descriptor: the server reads, never writes it
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_ERR_INVALID_ARG);
  d = good;
  d.kind = PS_MEM_HOST;
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_ERR_UNSUPPORTED);
  d.kind = 99;
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_ERR_UNSUPPORTED);
  d = good;
  memset(&d.handle, 0x5a, sizeof(d.handle));
  EXPECT_NE(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_OK);
  d = good;
  d.device = 1000;
  EXPECT_NE(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_OK);
  EXPECT_EQ(ps__kv_ipc_put(cache_, 0, &good, &vals, 5000, &may_land), PS_ERR_UNSUPPORTED);
  EXPECT_EQ(may_land, 0);  // none of them queued a copy
  // A pull descriptor is not read from either.
  ps_slice_t out;
  EXPECT_EQ(ps__kv_ipc_fetch(cache_, 9, &good, &out), PS_ERR_INVALID_ARG);
  CheckAllocation(5, 0, 0, 0);  // untouched
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &good, &vals, 5000, &may_land), PS_OK);
  ps_slice_unref(&vals);
  CheckAllocation(5, kOffset, len, 6);
}

// A copy slower than its deadline: PS_ERR_TIMED_OUT and *may_land_p (the
// server then does not answer), its source kept (the caller drops its own
// reference at once) until the copy is done; it still lands, and later
// writes work.
TEST_F(KvIpcPull, ALateWriteKeepsItsSourceUntilDone) {
  const size_t len = 3000;
  ps_slice_t vals;
  ASSERT_EQ(ps_slice_alloc(len, 0, &vals), PS_OK);
  std::vector<unsigned char> v = Values(8, len);
  memcpy(ps_slice_ptr(&vals), v.data(), len);
  ps__kv_ipc_desc_t d = PullDesc(descs_[7], kOffset, len);
  ps_mem_emu_set_delay_us(300 * 1000);
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 10, &may_land), PS_ERR_TIMED_OUT);
  EXPECT_EQ(may_land, 1);
  ps_mem_emu_set_delay_us(0);
  ps_slice_unref(&vals);  // the late copy holds its own reference
  usleep(600 * 1000);
  CheckAllocation(7, kOffset, len, 8);
  std::vector<unsigned char> w = Values(9, 10);
  ASSERT_EQ(ps_slice_wrap(w.data(), w.size(), nullptr, nullptr, &vals), PS_OK);
  d = PullDesc(descs_[7], kOffset, 10);
  EXPECT_EQ(ps__kv_ipc_put(cache_, 9, &d, &vals, 5000, &may_land), PS_OK);
  ps_slice_unref(&vals);
  std::vector<unsigned char> got = ReadAll(7);
  for (size_t i = 0; i < 10; i++) ASSERT_EQ(got[kOffset + i], Answer(9, i)) << i;
  for (size_t i = 10; i < len; i++) ASSERT_EQ(got[kOffset + i], Answer(8, i)) << i;
}

// A worker gone while a write into its allocation is still under way: the
// allocation stays open until the write is done, then closes.
TEST_F(KvIpcPull, AGoneSendersAllocationClosesOnceItsLateWriteIsDone) {
  const size_t len = 500;
  std::vector<unsigned char> v = Values(3, len);
  ps_slice_t vals;
  ASSERT_EQ(ps_slice_wrap(v.data(), len, nullptr, nullptr, &vals), PS_OK);
  ps__kv_ipc_desc_t d = PullDesc(descs_[5], kOffset, len);
  ps_mem_emu_set_delay_us(300 * 1000);
  EXPECT_EQ(ps__kv_ipc_put(cache_, 13, &d, &vals, 10, &may_land), PS_ERR_TIMED_OUT);
  ps_mem_emu_set_delay_us(0);
  ps__kv_ipc_forget(cache_, 13);
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 1);  // the write still uses it
  usleep(600 * 1000);
  ps__kv_ipc_forget(cache_, 11);  // prunes the late write, which closes it
  EXPECT_EQ(ps__kv_ipc_open_count(cache_), 0);
  ps_slice_unref(&vals);
  CheckAllocation(5, kOffset, len, 3);  // landed all the same
}

}  // namespace

// KV pulls into device memory through IPC handles (PS_DEVICE_IPC=1, the shm
// van, ps/app/kv_ipc.h) on the emulated device, end to end: the server runs
// in a child process (an emulated handle does not open in the process that
// made it), the scheduler and the worker here. Every byte of each
// destination allocation is checked, inside the pulled range and around
// it; answers the server cannot write in place go as bytes; a cancelled
// pull's destination stays held until its server answered, and one whose
// write outlasted the server's deadline (not answered) stays held. Pushes
// as IPC handles land in the server's registered receive buffers of device
// memory (one device-to-device copy), or in a pinned host buffer when
// there is none that fits.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/gpu/emu.h"
#include "ps/gpu/mem.h"
#include "ps/net/postoffice.h"
#include "tests/lib/free_port.h"
#include "tests/lib/small_job.h"
}

namespace {

// What the server's handler does with a pull, by cmd.
enum {
  kAnswer = 0,      // host values of the size asked
  kFromDevice = 1,  // the values in emulated device memory of the server's
  kLate = 2,        // answered 400 ms later, from another thread
  kShort = 3,       // 4 bytes fewer than asked: cannot be written in place
  kSlowWrite = 4,   // the write into the worker's memory outlasts the server's deadline
  kArmDelay = 5,    // a push: the server's device work queued from now on waits kSlowWriteMs
  kDisarm = 6,      // a push: no more waiting
};

// Receive buffers the server registers for the worker (rank 0), by the
// first key of a push.
constexpr uint64_t kKeyDevice = 500;   // 2 MiB of device memory, 4 KiB into its allocation
constexpr uint64_t kKeySmall = 600;    // 4 KiB of device memory: an 8 KiB push does not fit
constexpr uint64_t kKeyHost = 700;     // 64 KiB of host memory: passed over
constexpr uint64_t kKeySlow = 800;     // 64 KiB of device memory, for a copy that outlasts the deadline
constexpr size_t kDeviceBufLen = 2 << 20, kSmallBufLen = 4096, kHostBufLen = 65536,
                 kSlowBufLen = 65536;

constexpr int kLateMs = 400;
constexpr int kServerRequestMs = 1500;  // the server's PS_REQUEST_TIMEOUT_MS
constexpr int kSlowWriteMs = 2500;      // how long the emulated device holds that write

const ps_mem_ops_t *Emu() { return ps_mem_ops(PS_MEM_EMU); }

unsigned char PullByte(uint64_t key, size_t i) { return (unsigned char)(key * 31 + i * 7 + 1); }
unsigned char PushByte(uint64_t key, size_t i) { return (unsigned char)(key * 13 + i * 3 + 5); }

ps_start_params_t Params(ps_role_t role, int port) {
  ps_start_params_t p;
  small_job_node_params(role, "shm", port, &p);
  p.start_timeout_ms = 20000;
  p.finalize_timeout_ms = 20000;
  return p;
}

// ---- the server (child process) ----

std::atomic<int> g_server_bad{0};
ps_slice_t g_regs[4];  // the registered buffers, in the order of the keys above

// Where the values of a push whose first key is `key` must be: in its
// registered device buffer when they fit, else (a host buffer among them)
// in a host buffer of the pinned pool.
bool Landed(uint64_t key, const ps_slice_t &vals) {
  const uint64_t keys[4] = {kKeyDevice, kKeySmall, kKeyHost, kKeySlow};
  for (size_t i = 0; i < 4; i++) {
    if (key == keys[i] && vals.len <= g_regs[i].len && !ps_slice_in_host_mem(&g_regs[i]))
      return ps_slice_ptr(&vals) == ps_slice_ptr(&g_regs[i]) && !ps_slice_in_host_mem(&vals);
  }
  for (const ps_slice_t &r : g_regs)
    if (ps_slice_ptr(&vals) == ps_slice_ptr(&r)) return false;
  return ps_slice_in_host_mem(&vals);
}

// The pushed values, read out of host or device memory.
bool PushedBytesOk(const ps_slice_t &vals, const std::vector<uint64_t> &keys) {
  size_t nk = keys.size(), per = nk ? vals.len / nk : 0;
  std::vector<unsigned char> v(vals.len);
  if (ps_slice_in_host_mem(&vals))
    memcpy(v.data(), ps_slice_ptr(&vals), vals.len);
  else if (Emu()->copy_to_host(v.data(), ps_slice_ptr(&vals), vals.len) != PS_OK)
    return false;
  for (size_t k = 0; k < nk; k++)
    for (size_t i = 0; i < per; i++)
      if (v[k * per + i] != PushByte(keys[k], i)) return false;
  return true;
}

ps_status_t RegisterBuffers(ps_kv_server_t *server) {
  const struct {
    uint64_t key;
    size_t len, off;
    bool device;
  } regs[] = {{kKeyDevice, kDeviceBufLen, 4096, true},
              {kKeySmall, kSmallBufLen, 0, true},
              {kKeyHost, kHostBufLen, 0, false},
              {kKeySlow, kSlowBufLen, 128, true}};
  for (size_t i = 0; i < 4; i++) {
    ps_slice_t whole;
    ps_status_t st = regs[i].device
                         ? ps_mem_slice_alloc(PS_MEM_EMU, 0, regs[i].off + regs[i].len, &whole)
                         : ps_slice_alloc(regs[i].len, 64, &whole);
    if (st == PS_OK) st = ps_slice_sub(&whole, regs[i].off, regs[i].len, &g_regs[i]);
    ps_slice_unref(&whole);
    if (st == PS_OK) st = ps_kv_server_register_recv_buffer(server, 0, regs[i].key, &g_regs[i]);
    if (st != PS_OK) return st;
  }
  return PS_OK;
}

void Respond(ps_kv_server_t *server, const ps_kv_meta_t *meta, const ps_slice_t &keys,
             const ps_slice_t &vals) {
  ps_kv_pairs_t res = {keys, vals, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
  if (ps_kv_server_respond(server, meta, &res) != PS_OK) g_server_bad++;
}

void Handler(void *, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
             ps_kv_server_t *server) {
  size_t nk = req->keys.len / sizeof(uint64_t);
  std::vector<uint64_t> keys(nk);
  memcpy(keys.data(), ps_slice_ptr(&req->keys), req->keys.len);
  if (meta->push && (meta->cmd == kArmDelay || meta->cmd == kDisarm)) {
    ps_mem_emu_set_delay_us(meta->cmd == kArmDelay ? kSlowWriteMs * 1000 : 0);
    Respond(server, meta, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT);
    return;
  }
  if (meta->push) {
    // The pushed values (a push-pull's), read out of the worker's memory,
    // where they must have landed.
    if (!Landed(meta->key, req->vals)) {
      (void)ps_kv_server_respond_error(server, meta, PS_ERR_PROTOCOL);
      return;
    }
    if (!PushedBytesOk(req->vals, keys)) {
      (void)ps_kv_server_respond_error(server, meta, PS_ERR_INVALID_ARG);
      return;
    }
    if (!meta->pull) {
      Respond(server, meta, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT);
      return;
    }
  }
  size_t len = meta->val_len, per = nk ? len / nk : 0;
  if (meta->cmd == kShort) len -= 4;
  ps_slice_t vals;
  if (ps_slice_alloc(len, 0, &vals) != PS_OK) {
    g_server_bad++;
    return;
  }
  unsigned char *v = static_cast<unsigned char *>(ps_slice_ptr(&vals));
  for (size_t j = 0; j < len; j++) v[j] = PullByte(keys[j / per], j % per);
  if (meta->cmd == kFromDevice) {
    ps_slice_t dev;
    if (ps_mem_slice_alloc(PS_MEM_EMU, 0, len + 64, &dev) != PS_OK ||
        ps_slice_narrow(&dev, 64, len) != PS_OK ||
        Emu()->copy_from_host(ps_slice_ptr(&dev), v, len) != PS_OK) {
      g_server_bad++;
      return;
    }
    ps_slice_unref(&vals);
    vals = dev;
  }
  if (meta->cmd == kLate) {
    ps_kv_meta_t copy = *meta;
    ps_slice_t k = ps_slice_ref(&req->keys);
    std::thread([server, copy, k, vals]() mutable {
      usleep(kLateMs * 1000);
      Respond(server, &copy, k, vals);
      ps_slice_unref(&k);
      ps_slice_unref(&vals);
    }).detach();
    return;
  }
  if (meta->cmd == kSlowWrite) {
    // Every operation queued from now on waits: the server's write among
    // them. The server gives up after its deadline and does not answer.
    ps_mem_emu_set_delay_us(kSlowWriteMs * 1000);
    ps_kv_pairs_t res = {req->keys, vals, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
    if (ps_kv_server_respond(server, meta, &res) != PS_ERR_TIMED_OUT) g_server_bad++;
    ps_mem_emu_set_delay_us(0);
    ps_slice_unref(&vals);
    return;
  }
  Respond(server, meta, req->keys, vals);
  ps_slice_unref(&vals);
}

int RunServer(int port) {
  if (Emu()->init() != PS_OK) return 10;
  ps_start_params_t p = Params(PS_ROLE_SERVER, port);
  p.request_timeout_ms = kServerRequestMs;
  ps_postoffice_t *po;
  if (ps_postoffice_start(&p, 1, &po) != PS_OK) return 11;
  ps_kv_server_t *server;
  if (ps_kv_server_create(po, 0, Handler, nullptr, &server) != PS_OK) return 12;
  if (RegisterBuffers(server) != PS_OK) return 16;
  if (ps_postoffice_barrier(po, PS_GROUP_ALL, 60000) != PS_OK) return 13;
  usleep((kLateMs + 100) * 1000);  // a late answer still on its way
  ps_kv_server_destroy(server);
  for (ps_slice_t &r : g_regs) ps_slice_unref(&r);
  if (ps_postoffice_finalize(po, 1) != PS_OK) return 14;
  return g_server_bad.load() == 0 ? 0 : 15;
}

// ---- the worker and the scheduler (this process) ----

// One job for the whole suite: the server is forked before this process
// has any thread (TSan refuses a fork after), and each test counts from the
// worker's counters as it found them.
class KvIpcPull : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(Emu()->init(), PS_OK);
    int port = test_free_port(0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) _exit(RunServer(port));
    ps_start_params_t sp = Params(PS_ROLE_SCHEDULER, port), wp = Params(PS_ROLE_WORKER, port);
    ps_status_t sst = PS_INPROGRESS, wst = PS_INPROGRESS;
    std::thread sched([&] { sst = ps_postoffice_start(&sp, 1, &sched_); });
    wst = ps_postoffice_start(&wp, 1, &po_);
    sched.join();
    ASSERT_EQ(sst, PS_OK);
    ASSERT_EQ(wst, PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_PS_DEVICE_IPC, "1"), PS_OK);
    ASSERT_EQ(ps_kv_worker_create(po_, 0, 0, &w_), PS_OK);
    // A second worker without IPC, for comparison.
    ASSERT_EQ(ps_config_set(PS_CFG_PS_DEVICE_IPC, "0"), PS_OK);
    ASSERT_EQ(ps_kv_worker_create(po_, 0, 1, &plain_), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_PS_DEVICE_IPC, nullptr), PS_OK);
  }
  static void TearDownTestSuite() {
    ps_kv_worker_destroy(w_);
    ps_kv_worker_destroy(plain_);
    if (po_ != nullptr) {
      std::thread sched([&] {
        if (sched_) (void)ps_postoffice_barrier(sched_, PS_GROUP_ALL, 60000);
      });
      EXPECT_EQ(ps_postoffice_barrier(po_, PS_GROUP_ALL, 60000), PS_OK);
      sched.join();
      std::thread fin([&] {
        if (sched_) (void)ps_postoffice_finalize(sched_, 1);
      });
      EXPECT_EQ(ps_postoffice_finalize(po_, 1), PS_OK);
      fin.join();
    }
    int status = 0;
    if (child_ > 0) {
      ASSERT_EQ(waitpid(child_, &status, 0), child_);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "server status " << status;
    }
  }
  void SetUp() override {
    ASSERT_NE(w_, nullptr);
    ASSERT_NE(plain_, nullptr);
    base_ = Stats(w_);
    plain_base_ = Stats(plain_);
  }

  // An allocation of `alloc` bytes, every byte 0xa5, and a slice of `len`
  // bytes at `off` inside it.
  struct Dest {
    ps_slice_t whole = PS_SLICE_EMPTY_INIT, inner = PS_SLICE_EMPTY_INIT;
    size_t off = 0, len = 0;
    Dest(size_t alloc, size_t o, size_t l) : off(o), len(l) {
      EXPECT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, alloc, &whole), PS_OK);
      EXPECT_EQ(Emu()->memset(ps_slice_ptr(&whole), 0xa5, alloc), PS_OK);
      EXPECT_EQ(ps_slice_sub(&whole, o, l, &inner), PS_OK);
    }
    ~Dest() {
      ps_slice_unref(&inner);
      ps_slice_unref(&whole);
    }
    std::vector<unsigned char> Read() const {
      std::vector<unsigned char> v(whole.len);
      EXPECT_EQ(Emu()->copy_to_host(v.data(), ps_slice_ptr(&whole), whole.len), PS_OK);
      return v;
    }
  };

  // Every byte of d's allocation: the keys' values in the pulled range
  // (`per` bytes per key), 0xa5 around it.
  static void CheckDest(const Dest &d, const std::vector<uint64_t> &keys, size_t per) {
    std::vector<unsigned char> got = d.Read();
    for (size_t i = 0; i < got.size(); i++) {
      unsigned char want = 0xa5;
      if (i >= d.off && i < d.off + d.len)
        want = PullByte(keys[(i - d.off) / per], (i - d.off) % per);
      ASSERT_EQ(got[i], want) << "byte " << i << " of " << got.size();
    }
  }

  ps_status_t Pull(ps_kv_worker_t *w, const std::vector<uint64_t> &keys, const Dest &d, int cmd,
                   int *ts_p, int wait_ms = 20000) {
    ps_slice_t ks;
    EXPECT_EQ(ps_slice_wrap(const_cast<uint64_t *>(keys.data()), keys.size() * 8, nullptr,
                            nullptr, &ks),
              PS_OK);
    ps_kv_pairs_t out = {ks, d.inner, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
    ps_status_t st = ps_kv_zpull(w, &out, cmd, nullptr, nullptr, ts_p);
    ps_slice_unref(&ks);
    return st != PS_OK ? st : ps_kv_wait(w, *ts_p, wait_ms);
  }

  // A push of `per` bytes a key from emulated device memory `off` bytes
  // into its allocation (host memory with host_vals), every byte
  // PushByte's; the status it ended with. With drop_first the caller's
  // reference goes before the wait (the worker must hold the values).
  ps_status_t Push(const std::vector<uint64_t> &keys, size_t per, size_t off, int cmd,
                   bool host_vals = false, bool drop_first = false) {
    size_t len = keys.size() * per;
    std::vector<unsigned char> host(len);
    for (size_t j = 0; j < len; j++) host[j] = PushByte(keys[j / per], j % per);
    ps_slice_t src, ks;
    if (host_vals) {
      EXPECT_EQ(ps_slice_alloc(len, 0, &src), PS_OK);
      memcpy(ps_slice_ptr(&src), host.data(), len);
    } else {
      EXPECT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, off + len, &src), PS_OK);
      EXPECT_EQ(ps_slice_narrow(&src, off, len), PS_OK);
      EXPECT_EQ(Emu()->copy_from_host(ps_slice_ptr(&src), host.data(), len), PS_OK);
    }
    EXPECT_EQ(ps_slice_wrap(const_cast<uint64_t *>(keys.data()), keys.size() * 8, nullptr,
                            nullptr, &ks),
              PS_OK);
    ps_kv_pairs_t kv = {ks, src, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
    int ts;
    ps_status_t st = ps_kv_zpush(w_, &kv, cmd, nullptr, nullptr, &ts);
    if (drop_first) ps_slice_unref(&src);
    if (st == PS_OK) st = ps_kv_wait(w_, ts, 20000);
    ps_slice_unref(&ks);
    if (!drop_first) ps_slice_unref(&src);
    return st;
  }

  static ps_kv_worker_stats_t Stats(ps_kv_worker_t *w) {
    ps_kv_worker_stats_t s;
    ps_kv_worker_stats(w, &s);
    return s;
  }

  // Bytes pulled through IPC handles by the IPC worker since the test began.
  uint64_t IpcPulled() const { return Stats(w_).pull_bytes_ipc - base_.pull_bytes_ipc; }

  static pid_t child_;
  static ps_postoffice_t *sched_, *po_;
  static ps_kv_worker_t *w_, *plain_;
  ps_kv_worker_stats_t base_, plain_base_;
};

pid_t KvIpcPull::child_ = -1;
ps_postoffice_t *KvIpcPull::sched_ = nullptr;
ps_postoffice_t *KvIpcPull::po_ = nullptr;
ps_kv_worker_t *KvIpcPull::w_ = nullptr;
ps_kv_worker_t *KvIpcPull::plain_ = nullptr;

// Interior destinations of several sizes (one key to several, 1 byte to
// 4 MiB): written in place by the server, every byte of the allocation
// checked, the bytes counted as pulled through IPC and no other way.
TEST_F(KvIpcPull, InteriorDestinationsOfSeveralSizesAreWrittenInPlace) {
  const struct {
    size_t keys, per, off;
  } cases[] = {{1, 1, 3}, {1, 4096, 0}, {3, 1000, 17}, {4, 65536, 4096 + 5}, {2, 2 << 20, 64}};
  uint64_t total = 0;
  uint64_t first = 100;
  for (const auto &c : cases) {
    std::vector<uint64_t> keys;
    for (size_t k = 0; k < c.keys; k++) keys.push_back(first + k);
    first += 10;
    Dest d(c.off + c.keys * c.per + 29, c.off, c.keys * c.per);
    int ts;
    ASSERT_EQ(Pull(w_, keys, d, kAnswer, &ts), PS_OK) << c.keys << " x " << c.per;
    CheckDest(d, keys, c.per);
    total += c.keys * c.per;
  }
  ps_kv_worker_stats_t s = Stats(w_);
  EXPECT_EQ(s.pull_bytes_ipc - base_.pull_bytes_ipc, total);
  EXPECT_EQ(s.pull_bytes_copied + s.pull_bytes_in_place + s.pull_bytes_small,
            base_.pull_bytes_copied + base_.pull_bytes_in_place + base_.pull_bytes_small);
}

// The server's answer in device memory of the same kind: one device to
// device copy into the worker's allocation.
TEST_F(KvIpcPull, AnAnswerInDeviceMemoryIsCopiedDeviceToDevice) {
  std::vector<uint64_t> keys = {7, 8};
  Dest d(3 * 8192, 8192 + 1, 2 * 4000);
  int ts;
  ASSERT_EQ(Pull(w_, keys, d, kFromDevice, &ts), PS_OK);
  CheckDest(d, keys, 4000);
  EXPECT_EQ(IpcPulled(), 8000u);
}

// A push-pull from and into device memory: the push goes as its handle,
// the answer is written in place.
TEST_F(KvIpcPull, PushPullBothWaysThroughHandles) {
  std::vector<uint64_t> keys = {40, 41, 42};
  const size_t per = 3000;
  ps_slice_t src, ks;
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, keys.size() * per + 100, &src), PS_OK);
  ASSERT_EQ(ps_slice_narrow(&src, 100, keys.size() * per), PS_OK);
  std::vector<unsigned char> host(keys.size() * per);
  for (size_t j = 0; j < host.size(); j++) host[j] = PushByte(keys[j / per], j % per);
  ASSERT_EQ(Emu()->copy_from_host(ps_slice_ptr(&src), host.data(), host.size()), PS_OK);
  Dest d(keys.size() * per + 300, 150, keys.size() * per);
  ASSERT_EQ(ps_slice_wrap(keys.data(), keys.size() * 8, nullptr, nullptr, &ks), PS_OK);
  ps_kv_pairs_t push = {ks, src, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
  ps_kv_pairs_t out = {ks, d.inner, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
  int ts;
  ASSERT_EQ(ps_kv_zpushpull(w_, &push, &out, kAnswer, nullptr, nullptr, &ts), PS_OK);
  ASSERT_EQ(ps_kv_wait(w_, ts, 20000), PS_OK);  // the server checked the pushed bytes
  CheckDest(d, keys, per);
  ps_kv_worker_stats_t s = Stats(w_);
  EXPECT_EQ(s.push_bytes_ipc - base_.push_bytes_ipc, keys.size() * per);
  EXPECT_EQ(s.pull_bytes_ipc - base_.pull_bytes_ipc, keys.size() * per);
  ps_slice_unref(&ks);
  ps_slice_unref(&src);
}

// An answer that does not fit the destination is not written in place: it
// goes as bytes, the worker refuses it (PS_ERR_PROTOCOL) with the
// destination untouched, and the server goes on answering.
TEST_F(KvIpcPull, AnAnswerOfTheWrongSizeIsNotWrittenInPlace) {
  std::vector<uint64_t> keys = {60};
  Dest d(10000, 100, 5000);
  int ts;
  EXPECT_EQ(Pull(w_, keys, d, kShort, &ts), PS_ERR_PROTOCOL);
  std::vector<unsigned char> got = d.Read();
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], 0xa5) << i;
  EXPECT_EQ(IpcPulled(), 0u);
  ASSERT_EQ(Pull(w_, keys, d, kAnswer, &ts), PS_OK);
  CheckDest(d, keys, 5000);
  EXPECT_EQ(IpcPulled(), 5000u);
}

// A pull given up before its server answered: its destination stays held
// (ps_kv_cancel says PS_ERR_TIMED_OUT) until the server answered, since
// the server writes into it until then; then it is the caller's again.
TEST_F(KvIpcPull, ACancelledPullsDestinationIsHeldUntilItsServerAnswered) {
  std::vector<uint64_t> keys = {80, 81};
  Dest d(9000, 500, 8000);
  int ts;
  EXPECT_EQ(Pull(w_, keys, d, kLate, &ts, 50), PS_ERR_TIMED_OUT);
  EXPECT_EQ(ps_kv_cancel(w_, ts, 10), PS_ERR_TIMED_OUT);
  EXPECT_EQ(ps_kv_cancel(w_, ts, 10000), PS_OK);
  CheckDest(d, keys, 4000);  // what the late answer wrote
  // Nothing was counted: the pull had failed.
  EXPECT_EQ(IpcPulled(), 0u);
  ASSERT_EQ(Pull(w_, keys, d, kAnswer, &ts), PS_OK);
  EXPECT_EQ(IpcPulled(), 8000u);
}

// A write into the worker's memory that outlasts the server's deadline: the
// server does not answer (its copy may still land), so the pull times out
// and its destination stays held; the write lands later all the same.
TEST_F(KvIpcPull, AWriteThatOutlastsTheServersDeadlineIsNotAnswered) {
  std::vector<uint64_t> keys = {70};
  Dest d(6000, 1000, 4096);
  int ts;
  EXPECT_EQ(Pull(w_, keys, d, kSlowWrite, &ts, kServerRequestMs + 1000), PS_ERR_TIMED_OUT);
  EXPECT_EQ(ps_kv_cancel(w_, ts, 10), PS_ERR_TIMED_OUT);
  usleep((kSlowWriteMs + 500) * 1000);
  CheckDest(d, keys, 4096);  // landed, after the server gave up
  EXPECT_EQ(ps_kv_cancel(w_, ts, 10), PS_ERR_TIMED_OUT);  // never answered: still held
  EXPECT_EQ(IpcPulled(), 0u);
  // The server goes on answering.
  Dest d2(5000, 7, 4096);
  ASSERT_EQ(Pull(w_, keys, d2, kAnswer, &ts), PS_OK);
  CheckDest(d2, keys, 4096);
}

// A push as an IPC handle whose first key has a registered receive buffer
// in device memory lands there, one device-to-device copy by the server
// (one key and several, from interior offsets). The handler checks where
// the values are and every byte.
TEST_F(KvIpcPull, PushesLandInTheServersRegisteredDeviceBuffers) {
  ASSERT_EQ(Push({kKeyDevice}, kDeviceBufLen, 4096 + 3, kAnswer), PS_OK);
  ASSERT_EQ(Push({kKeyDevice, kKeyDevice + 1}, 300000, 0, kAnswer), PS_OK);
  ASSERT_EQ(Push({kKeyDevice}, 1, 77, kAnswer), PS_OK);
  EXPECT_EQ(Stats(w_).push_bytes_ipc - base_.push_bytes_ipc, kDeviceBufLen + 600000 + 1);
}

// The caller may drop its values right after the call: the worker keeps
// them until the request is done, since the server reads them through
// their handle after the send.
TEST_F(KvIpcPull, APushsValuesAreHeldWhileTheServerReadsThem) {
  ps_mem_emu_set_delay_us(20000);  // the worker's wait for its default stream, held back
  ps_status_t st = Push({kKeyDevice}, 65536, 0, kAnswer, false, true);
  ps_mem_emu_set_delay_us(0);
  ASSERT_EQ(st, PS_OK);
  ASSERT_EQ(Push({kKeyDevice + 3}, 4096, 8, kAnswer, false, true), PS_OK);
}

// Values larger than the registered buffer, a buffer in host memory (a
// copy into pageable memory would be the slow one) and a key without a
// buffer: the values come through the pinned pool as before.
TEST_F(KvIpcPull, OtherPushesGoThroughThePinnedPool) {
  ASSERT_EQ(Push({kKeySmall}, 2 * kSmallBufLen, 5, kAnswer), PS_OK);
  ASSERT_EQ(Push({kKeyDevice}, kDeviceBufLen + 1, 0, kAnswer), PS_OK);
  ASSERT_EQ(Push({kKeyHost}, kHostBufLen, 512, kAnswer), PS_OK);
  ASSERT_EQ(Push({kKeyDevice + 7}, 4096, 0, kAnswer), PS_OK);  // no buffer for this key
}

// A copy into a registered buffer that outlasts the server's deadline fails
// the push with PS_ERR_TIMED_OUT (the handler never sees it); once the copy
// is done the buffer takes the next push.
TEST_F(KvIpcPull, ACopyIntoABufferThatOutlastsTheDeadlineFailsThePush) {
  ASSERT_EQ(Push({990}, 64, 0, kArmDelay, true), PS_OK);
  EXPECT_EQ(Push({kKeySlow}, kSlowBufLen, 0, kAnswer), PS_ERR_TIMED_OUT);
  ASSERT_EQ(Push({990}, 64, 0, kDisarm, true), PS_OK);
  usleep((kSlowWriteMs - kServerRequestMs + 500) * 1000);
  ASSERT_EQ(Push({kKeySlow}, kSlowBufLen, 64, kAnswer), PS_OK);
}

// Without PS_DEVICE_IPC the same pulls are received as bytes and copied
// in: nothing counted as pulled through IPC.
TEST_F(KvIpcPull, WithoutIpcPullsAreCopiedIn) {
  std::vector<uint64_t> keys = {90, 91};
  Dest d(70000, 33, 2 * 32768);
  int ts;
  ASSERT_EQ(Pull(plain_, keys, d, kAnswer, &ts), PS_OK);
  CheckDest(d, keys, 32768);
  ps_kv_worker_stats_t s = Stats(plain_);
  EXPECT_EQ(s.pull_bytes_ipc, 0u);
  EXPECT_EQ(s.pull_bytes_copied - plain_base_.pull_bytes_copied, 2u * 32768);
}

}  // namespace

// IPC handles (PS_DEVICE_IPC=1, the shm van, ps/app/kv_ipc.h) and peers
// that die, on the emulated device; each case is its own binary (a filter
// in tests/app/BUILD) and its own job, since the peer to kill is a child
// process forked before this one has any thread (an emulated handle does
// not open in the process that made it).
//   - A pull that gave its destination's handle to a server which then
//     dies without answering: the destination stays held while the server
//     might still write into it (ps_kv_cancel says so), and is let go once
//     the scheduler has declared that server dead.
//   - A worker whose pushes a server opened by their handles, then killed:
//     the server closes those allocations once the worker is declared
//     dead.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

const ps_mem_ops_t *Emu() { return ps_mem_ops(PS_MEM_EMU); }

ps_start_params_t Params(ps_role_t role, int port) {
  ps_start_params_t p;
  small_job_node_params(role, "shm", port, &p);
  p.start_timeout_ms = 20000;
  p.finalize_timeout_ms = 10000;
  return p;
}

// The server: takes every request and answers none.
void Silent(void *, const ps_kv_meta_t *, const ps_kv_pairs_t *, ps_kv_server_t *) {}

int RunServer(int port) {
  if (Emu()->init() != PS_OK) return 10;
  ps_start_params_t p = Params(PS_ROLE_SERVER, port);
  ps_postoffice_t *po;
  if (ps_postoffice_start(&p, 1, &po) != PS_OK) return 11;
  ps_kv_server_t *server;
  if (ps_kv_server_create(po, 0, Silent, nullptr, &server) != PS_OK) return 12;
  for (;;) pause();  // until killed
}

template <typename F>
bool Eventually(F f, int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return f();
}

TEST(KvIpcDeadServer, AHeldDestinationIsLetGoOnceItsServerIsDeclaredDead) {
  ASSERT_EQ(Emu()->init(), PS_OK);
  int port = test_free_port(0);
  pid_t child = fork();  // before this process has any thread
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RunServer(port));
  ps_start_params_t params[2] = {Params(PS_ROLE_SCHEDULER, port), Params(PS_ROLE_WORKER, port)};
  ps_postoffice_t *nodes[2];
  ASSERT_EQ(small_job_start_nodes(params, 2, nodes), PS_OK);
  ps_postoffice_t *sched = nodes[0], *po = nodes[1];
  ASSERT_EQ(ps_config_set(PS_CFG_PS_DEVICE_IPC, "1"), PS_OK);
  ps_kv_worker_t *w;
  ASSERT_EQ(ps_kv_worker_create(po, 0, 0, &w), PS_OK);
  ASSERT_EQ(ps_config_set(PS_CFG_PS_DEVICE_IPC, nullptr), PS_OK);

  uint64_t key = 7;
  ps_slice_t keys, dest;
  ASSERT_EQ(ps_slice_wrap(&key, sizeof(key), nullptr, nullptr, &keys), PS_OK);
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, 4096, &dest), PS_OK);
  ps_kv_pairs_t out = {keys, dest, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
  int ts;
  ASSERT_EQ(ps_kv_zpull(w, &out, 0, nullptr, nullptr, &ts), PS_OK);
  EXPECT_EQ(ps_kv_wait(w, ts, 300), PS_ERR_TIMED_OUT);
  // The server has the handle and has not answered: it may still write.
  EXPECT_EQ(ps_kv_cancel(w, ts, 100), PS_ERR_TIMED_OUT);
  EXPECT_EQ(ps_kv_cancel(w, ts, 100), PS_ERR_TIMED_OUT);

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  int dead[4] = {0};
  ASSERT_TRUE(Eventually([&] { return ps_postoffice_dead_nodes(po, dead, 4) == 1; }, 30000))
      << "the scheduler never declared the killed server dead";
  EXPECT_EQ(dead[0], 8);
  EXPECT_EQ(ps_kv_cancel(w, ts, 5000), PS_OK);

  ps_kv_worker_destroy(w);
  ps_slice_unref(&dest);
  ps_slice_unref(&keys);
  // Without the server the job cannot end together: each side returns.
  std::thread fin([&] { (void)ps_postoffice_finalize(sched, 0); });
  (void)ps_postoffice_finalize(po, 0);
  fin.join();
}

// ---- a worker that dies ----

constexpr int kPushes = 3;

// The worker: pushes kPushes allocations of device memory as IPC handles,
// says so on `done`, then waits to be killed.
int RunWorker(int port, int done) {
  if (Emu()->init() != PS_OK) return 10;
  ps_start_params_t p = Params(PS_ROLE_WORKER, port);
  ps_postoffice_t *po;
  if (ps_postoffice_start(&p, 1, &po) != PS_OK) return 11;
  if (ps_config_set(PS_CFG_PS_DEVICE_IPC, "1") != PS_OK) return 12;
  ps_kv_worker_t *w;
  if (ps_kv_worker_create(po, 0, 0, &w) != PS_OK) return 13;
  for (int i = 0; i < kPushes; i++) {
    uint64_t key = 20 + (uint64_t)i;
    ps_slice_t keys, vals;
    if (ps_slice_wrap(&key, sizeof(key), nullptr, nullptr, &keys) != PS_OK ||
        ps_mem_slice_alloc(PS_MEM_EMU, 0, 4096, &vals) != PS_OK ||
        Emu()->memset(ps_slice_ptr(&vals), i, 4096) != PS_OK)
      return 14;
    ps_kv_pairs_t kv = {keys, vals, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
    int ts;
    if (ps_kv_zpush(w, &kv, 0, nullptr, nullptr, &ts) != PS_OK ||
        ps_kv_wait(w, ts, 20000) != PS_OK)
      return 15;
    // The allocation stays: the worker keeps it until it is killed.
  }
  ps_kv_worker_stats_t stats;
  ps_kv_worker_stats(w, &stats);
  if (stats.push_bytes_ipc != kPushes * 4096u) return 16;
  char c = 1;
  if (write(done, &c, 1) != 1) return 17;
  for (;;) pause();  // until killed
}

// Answers every push.
void Ack(void *, const ps_kv_meta_t *meta, const ps_kv_pairs_t *, ps_kv_server_t *server) {
  (void)ps_kv_server_respond(server, meta, nullptr);
}

TEST(KvIpcDeadWorker, TheServerClosesADeadWorkersAllocations) {
  ASSERT_EQ(Emu()->init(), PS_OK);
  int port = test_free_port(0);
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();  // before this process has any thread
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(done[0]);
    _exit(RunWorker(port, done[1]));
  }
  close(done[1]);
  ps_start_params_t params[2] = {Params(PS_ROLE_SCHEDULER, port), Params(PS_ROLE_SERVER, port)};
  ps_postoffice_t *nodes[2];
  ASSERT_EQ(small_job_start_nodes(params, 2, nodes), PS_OK);
  ps_postoffice_t *sched = nodes[0], *po = nodes[1];
  ps_kv_server_t *server;
  ASSERT_EQ(ps_kv_server_create(po, 0, Ack, nullptr, &server), PS_OK);

  char c = 0;
  ASSERT_EQ(read(done[0], &c, 1), 1) << "the worker failed before its pushes were answered";
  EXPECT_EQ(ps_mem_emu_open_handles(), kPushes);  // one per allocation, kept open

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  int dead[4] = {0};
  ASSERT_TRUE(Eventually([&] { return ps_postoffice_dead_nodes(po, dead, 4) == 1; }, 30000))
      << "the scheduler never declared the killed worker dead";
  EXPECT_EQ(dead[0], 9);
  EXPECT_TRUE(Eventually([] { return ps_mem_emu_open_handles() == 0; }, 5000))
      << ps_mem_emu_open_handles() << " of the dead worker's allocations still open";

  ps_kv_server_destroy(server);
  close(done[0]);
  std::thread fin([&] { (void)ps_postoffice_finalize(sched, 0); });
  (void)ps_postoffice_finalize(po, 0);
  fin.join();
}

}  // namespace

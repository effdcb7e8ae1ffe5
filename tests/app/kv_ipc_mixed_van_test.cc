// Device values as IPC handles over the composed van (BYTEPS_ENABLE_IPC's
// "ipc": shared memory to peers on this host, the network to the others):
// a worker on the ipc van with PS_DEVICE_IPC=1 pushes to and pulls from two
// servers, one on the ipc van (reached through shared memory: its share
// goes as handles) and one on the tcp van (reached through the network: its
// share is staged through host memory), in one request. Every byte pulled
// back is checked, and the worker's counters say which way each share went.
// The servers are child processes (an emulated handle does not open in the
// process that made it), forked before this process has any thread.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/ids.h"
#include "ps/gpu/emu.h"
#include "ps/gpu/mem.h"
#include "ps/net/postoffice.h"
#include "tests/lib/free_port.h"
#include "tests/lib/small_job.h"
}

namespace {

constexpr size_t kPer = 256 * 1024;  // value bytes per key

const ps_mem_ops_t *Emu() { return ps_mem_ops(PS_MEM_EMU); }

ps_start_params_t Params(ps_role_t role, const char *van, int port) {
  ps_start_params_t p;
  small_job_node_params(role, van, port, &p);
  p.num_servers = 2;
  p.start_timeout_ms = 20000;
  p.finalize_timeout_ms = 20000;
  return p;
}

// A server with the default store over `van`, until the job ends.
int RunServer(const char *van, int port) {
  if (Emu()->init() != PS_OK) return 10;
  ps_start_params_t p = Params(PS_ROLE_SERVER, van, port);
  ps_postoffice_t *po;
  if (ps_postoffice_start(&p, 1, &po) != PS_OK) return 11;
  ps_kv_store_t *store;
  ps_kv_server_t *server;
  if (ps_kv_store_create(&store) != PS_OK ||
      ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server) != PS_OK)
    return 12;
  if (ps_postoffice_barrier(po, PS_GROUP_ALL, 60000) != PS_OK) return 13;
  ps_kv_server_destroy(server);
  ps_kv_store_destroy(store);
  return ps_postoffice_finalize(po, 1) == PS_OK ? 0 : 14;
}

unsigned char Byte(size_t i) { return (unsigned char)(i * 7 + 3); }

TEST(KvIpcMixedVan, SameHostSharesGoAsHandlesTheOthersAreStaged) {
  ASSERT_EQ(Emu()->init(), PS_OK);
  int port = test_free_port(0);
  pid_t children[2];
  const char *vans[2] = {"ipc", "tcp"};
  for (int i = 0; i < 2; i++) {
    children[i] = fork();
    ASSERT_GE(children[i], 0);
    if (children[i] == 0) _exit(RunServer(vans[i], port));
  }
  ps_start_params_t params[2] = {Params(PS_ROLE_SCHEDULER, "tcp", port),
                                 Params(PS_ROLE_WORKER, "ipc", port)};
  ps_postoffice_t *nodes[2];
  ASSERT_EQ(small_job_start_nodes(params, 2, nodes), PS_OK);
  ps_postoffice_t *sched = nodes[0], *po = nodes[1];
  ASSERT_EQ(ps_config_set(PS_CFG_PS_DEVICE_IPC, "1"), PS_OK);
  ps_kv_worker_t *w;
  ASSERT_EQ(ps_kv_worker_create(po, 0, 0, &w), PS_OK);
  ASSERT_EQ(ps_config_set(PS_CFG_PS_DEVICE_IPC, nullptr), PS_OK);

  // One key in each server's range; which server shares this host.
  std::vector<uint64_t> keys;
  int same_host[2] = {0, 0};
  for (int rank = 0; rank < 2; rank++) {
    uint64_t begin, end;
    ASSERT_EQ(ps_postoffice_server_key_range(po, rank, &begin, &end), PS_OK);
    keys.push_back(begin + 5);
    same_host[rank] = ps_postoffice_peer_same_host(po, ps_server_rank_to_id(rank));
  }
  ASSERT_EQ(same_host[0] + same_host[1], 1) << "exactly one server is reached through shm";

  std::vector<unsigned char> host(2 * kPer);
  for (size_t i = 0; i < host.size(); i++) host[i] = Byte(i);
  ps_slice_t ks, src, dst;
  ASSERT_EQ(ps_slice_wrap(keys.data(), keys.size() * 8, nullptr, nullptr, &ks), PS_OK);
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, host.size(), &src), PS_OK);
  ASSERT_EQ(Emu()->copy_from_host(ps_slice_ptr(&src), host.data(), host.size()), PS_OK);
  ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, host.size(), &dst), PS_OK);
  ASSERT_EQ(Emu()->memset(ps_slice_ptr(&dst), 0, host.size()), PS_OK);

  ps_kv_pairs_t push = {ks, src, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
  ps_kv_pairs_t pull = {ks, dst, PS_SLICE_EMPTY_INIT, PS_DATA_CHAR};
  int ts;
  ASSERT_EQ(ps_kv_zpush(w, &push, 0, nullptr, nullptr, &ts), PS_OK);
  ASSERT_EQ(ps_kv_wait(w, ts, 20000), PS_OK);
  ASSERT_EQ(ps_kv_zpull(w, &pull, 0, nullptr, nullptr, &ts), PS_OK);
  ASSERT_EQ(ps_kv_wait(w, ts, 20000), PS_OK);
  std::vector<unsigned char> got(host.size());
  ASSERT_EQ(Emu()->copy_to_host(got.data(), ps_slice_ptr(&dst), got.size()), PS_OK);
  EXPECT_EQ(got, host);

  ps_kv_worker_stats_t s;
  ps_kv_worker_stats(w, &s);
  EXPECT_EQ(s.push_bytes_ipc, kPer);
  EXPECT_EQ(s.push_bytes_staged, kPer);
  EXPECT_EQ(s.pull_bytes_ipc, kPer);
  EXPECT_EQ(s.pull_bytes_staged, kPer);

  ps_kv_worker_destroy(w);
  ps_slice_unref(&ks);
  ps_slice_unref(&src);
  ps_slice_unref(&dst);
  std::thread sb([&] { (void)ps_postoffice_barrier(sched, PS_GROUP_ALL, 60000); });
  EXPECT_EQ(ps_postoffice_barrier(po, PS_GROUP_ALL, 60000), PS_OK);
  sb.join();
  std::thread fin([&] { (void)ps_postoffice_finalize(sched, 1); });
  EXPECT_EQ(ps_postoffice_finalize(po, 1), PS_OK);
  fin.join();
  for (pid_t c : children) {
    int status = 0;
    ASSERT_EQ(waitpid(c, &status, 0), c);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "server status " << status;
  }
}

}  // namespace

// Real CUDA device memory (tag requires-gpu): alloc, copies, memset, pinned
// staging, readiness events, and IPC into a second process. Without a device
// every test skips with the runtime's reason.
//
// CUDA IPC cannot open a handle in the process that made it, and a child may
// not use CUDA that its parent initialised before fork(). So main() forks an
// IPC peer before anything touches CUDA; the peer opens handles it is sent
// over a pipe and answers with a checksum of the bytes it sees.
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include <gtest/gtest.h>

#include "ps/base/device_probe.h"
#include "ps/gpu/mem.h"

namespace {

struct IpcRequest {
  ps_mem_ipc_handle_t handle;
  uint64_t offset;  // of the bytes to read from the allocation's start
  uint64_t len;
};

struct IpcReply {
  int32_t status;
  uint64_t sum;
};

int to_peer = -1;
int from_peer = -1;
pid_t peer_pid = -1;

uint64_t checksum(const unsigned char *p, size_t len) {
  uint64_t sum = 0;
  for (size_t i = 0; i < len; ++i) sum = sum * 31 + p[i];
  return sum;
}

bool read_full(int fd, void *buf, size_t len) {
  char *p = static_cast<char *>(buf);
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool write_full(int fd, const void *buf, size_t len) {
  const char *p = static_cast<const char *>(buf);
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// The peer: serves requests until the parent closes its end.
int run_ipc_peer(int in, int out) {
  const ps_mem_ops_t *cuda = ps_mem_ops(PS_MEM_CUDA);
  IpcRequest req;
  while (read_full(in, &req, sizeof(req))) {
    IpcReply reply = {PS_OK, 0};
    void *dev = nullptr;
    std::vector<unsigned char> host(req.len);
    ps_status_t s = cuda->init();
    if (s == PS_OK) s = cuda->ipc_open_handle(&req.handle, 0, &dev);
    if (s == PS_OK) {
      s = cuda->copy_to_host(host.data(), static_cast<char *>(dev) + req.offset, host.size());
      ps_status_t c = cuda->ipc_close(dev);
      if (s == PS_OK) s = c;
    }
    reply.status = s;
    if (s == PS_OK) reply.sum = checksum(host.data(), host.size());
    if (!write_full(out, &reply, sizeof(reply))) break;
  }
  return 0;
}

const ps_mem_ops_t *cuda() { return ps_mem_ops(PS_MEM_CUDA); }

class MemCudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ps_mem_info_t info;
    ASSERT_EQ(ps_mem_describe(PS_MEM_CUDA, &info), PS_OK);
    if (!info.available) {
      GTEST_SKIP() << info.reason;
    }
    ASSERT_EQ(cuda()->init(), PS_OK);
  }
};

TEST_F(MemCudaDevice, AllocCopyMemsetRoundTrip) {
  const size_t len = 1 << 20;
  std::vector<unsigned char> src(len), back(len, 0);
  for (size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i * 13 + 1);
  void *a = nullptr;
  void *b = nullptr;
  ASSERT_EQ(cuda()->alloc(len, 0, &a), PS_OK);
  ASSERT_EQ(cuda()->alloc(len, 0, &b), PS_OK);
  ASSERT_EQ(cuda()->copy_from_host(a, src.data(), len), PS_OK);
  ASSERT_EQ(cuda()->copy(b, a, len), PS_OK);
  ASSERT_EQ(cuda()->copy_to_host(back.data(), b, len), PS_OK);
  EXPECT_EQ(src, back);

  ASSERT_EQ(cuda()->memset(b, 0x3c, 100), PS_OK);
  ASSERT_EQ(cuda()->copy_to_host(back.data(), b, len), PS_OK);
  EXPECT_EQ(back[0], 0x3c);
  EXPECT_EQ(back[99], 0x3c);
  EXPECT_EQ(back[100], src[100]);

  int device = -1;
  EXPECT_TRUE(cuda()->is_addr(a, &device));
  EXPECT_EQ(device, 0);
  ps_mem_kind_t kind = PS_MEM_HOST;
  ASSERT_EQ(ps_mem_kind_of(b, &kind, &device), PS_OK);
  EXPECT_EQ(kind, PS_MEM_CUDA);
  EXPECT_FALSE(cuda()->is_addr(src.data(), &device));

  EXPECT_EQ(cuda()->free(a), PS_OK);
  EXPECT_EQ(cuda()->free(b), PS_OK);
}

// Once the process has used the device (an allocation made its primary
// context), the kind says so, and a transport's probe gets a buffer of it.
TEST_F(MemCudaDevice, InUseOnceItsContextIsActive) {
  void *a = nullptr;
  ASSERT_EQ(cuda()->alloc(4096, 0, &a), PS_OK);
  int device = -1;
  ASSERT_EQ(cuda()->in_use(&device), PS_OK);
  EXPECT_EQ(device, 0);
  void *probe = nullptr;
  ASSERT_EQ(ps_device_probe_alloc(PS_MEM_CUDA, 65536, &probe, &device), PS_OK);
  int on = -1;
  EXPECT_TRUE(cuda()->is_addr(probe, &on));
  EXPECT_EQ(on, device);
  ps_device_probe_free(PS_MEM_CUDA, probe);
  // Its PCI address, as sysfs names it (DMLC_INTERFACE=auto looks it up).
  char bus_id[32] = "";
  ASSERT_EQ(ps_device_probe_pci_bus_id(PS_MEM_CUDA, device, bus_id, sizeof(bus_id)), PS_OK);
  unsigned dom, bus, dev, fn;
  EXPECT_EQ(sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn), 4) << bus_id;
  EXPECT_EQ(strspn(bus_id, "0123456789abcdef:."), strlen(bus_id)) << bus_id;
  EXPECT_EQ(cuda()->free(a), PS_OK);
}

TEST_F(MemCudaDevice, AllocOnMissingDeviceIsInvalidArg) {
  int n = 0;
  ASSERT_EQ(cuda()->device_count(&n), PS_OK);
  void *p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(cuda()->alloc(64, n, &p), PS_ERR_INVALID_ARG);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));
}

TEST_F(MemCudaDevice, PinnedStaging) {
  std::vector<unsigned char> staging(1 << 16, 7);
  ASSERT_EQ(cuda()->register_host(staging.data(), staging.size()), PS_OK);
  EXPECT_EQ(cuda()->register_host(staging.data(), staging.size()), PS_ERR_EXISTS);
  void *dev = nullptr;
  ASSERT_EQ(cuda()->alloc(staging.size(), 0, &dev), PS_OK);
  EXPECT_EQ(cuda()->copy_from_host(dev, staging.data(), staging.size()), PS_OK);
  EXPECT_EQ(cuda()->free(dev), PS_OK);
  EXPECT_EQ(cuda()->unregister_host(staging.data()), PS_OK);
  EXPECT_EQ(cuda()->unregister_host(staging.data()), PS_ERR_NOT_FOUND);
}

TEST_F(MemCudaDevice, EventBecomesReady) {
  ps_mem_event_h ev = nullptr;
  void *dev = nullptr;
  ASSERT_EQ(cuda()->event_create(0, &ev), PS_OK);
  ASSERT_EQ(cuda()->alloc(1 << 20, 0, &dev), PS_OK);
  ASSERT_EQ(cuda()->memset(dev, 1, 1 << 20), PS_OK);
  ASSERT_EQ(ps_mem_event_record(ev, nullptr), PS_OK);
  // Bounded wait: a hang guard, not a timing threshold.
  ps_status_t s = PS_INPROGRESS;
  for (int i = 0; i < 100000 && s == PS_INPROGRESS; ++i) {
    s = ps_mem_event_query(ev);
    if (s == PS_INPROGRESS) usleep(100);
  }
  EXPECT_EQ(s, PS_OK);
  EXPECT_EQ(ps_mem_event_destroy(ev), PS_OK);
  EXPECT_EQ(cuda()->free(dev), PS_OK);
}

TEST_F(MemCudaDevice, IpcHandleOpensInAnotherProcess) {
  ASSERT_GE(peer_pid, 0) << "the ipc peer did not start";
  const size_t len = 256 * 1024;
  std::vector<unsigned char> src(len);
  for (size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i ^ (i >> 8));
  void *dev = nullptr;
  ASSERT_EQ(cuda()->alloc(len, 0, &dev), PS_OK);
  ASSERT_EQ(cuda()->copy_from_host(dev, src.data(), len), PS_OK);

  // The whole allocation, then an interior pointer (as a caching
  // allocator hands out): its handle names the allocation, and the peer
  // reads at the offset addr_range gives.
  const size_t offsets[] = {0, 4096 + 100};
  for (size_t off : offsets) {
    void *at = static_cast<char *>(dev) + off;
    IpcRequest req;
    memset(&req, 0, sizeof(req));
    ASSERT_EQ(cuda()->ipc_get_handle(at, &req.handle), PS_OK);
    void *base = nullptr;
    size_t base_len = 0;
    ASSERT_EQ(cuda()->addr_range(at, &base, &base_len), PS_OK);
    EXPECT_EQ(base, dev);
    EXPECT_GE(base_len, len);
    req.offset = static_cast<uint64_t>(static_cast<char *>(at) - static_cast<char *>(base));
    EXPECT_EQ(req.offset, off);
    req.len = len - off;
    ASSERT_TRUE(write_full(to_peer, &req, sizeof(req)));

    struct pollfd pfd = {from_peer, POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 60 * 1000), 1) << "ipc peer did not answer within 60 s";
    IpcReply reply;
    ASSERT_TRUE(read_full(from_peer, &reply, sizeof(reply)));
    EXPECT_EQ(reply.status, PS_OK) << ps_status_str(static_cast<ps_status_t>(reply.status));
    EXPECT_EQ(reply.sum, checksum(src.data() + off, len - off)) << "offset " << off;
  }
  EXPECT_EQ(cuda()->free(dev), PS_OK);
}

// Starts the IPC peer; leaves peer_pid at -1 if it cannot.
void start_ipc_peer() {
  int down[2];
  int up[2];
  if (pipe(down) != 0) return;
  if (pipe(up) != 0) {
    close(down[0]);
    close(down[1]);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    _exit(run_ipc_peer(down[0], up[1]));
  }
  close(down[0]);
  close(up[1]);
  if (pid < 0) {
    close(down[1]);
    close(up[0]);
    return;
  }
  peer_pid = pid;
  to_peer = down[1];
  from_peer = up[0];
}

}  // namespace

int main(int argc, char **argv) {
  // Fork before anything initialises CUDA (linking the kind only registers a
  // table), so the peer gets a fresh CUDA context of its own.
  start_ipc_peer();
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  if (peer_pid > 0) {
    close(to_peer);  // the peer sees EOF and exits
    int wstatus = 0;
    waitpid(peer_pid, &wstatus, 0);
    close(from_peer);
  }
  return rc;
}

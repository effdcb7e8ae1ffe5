// The CUDA kind as linked into a binary. Runs everywhere: without a usable GPU
// it checks the clean "no cuda device" path; with one, that init succeeds.
// Real device work is in mem_cuda_device_test (requires-gpu).
#include <stdio.h>
#include <string.h>

#include <gtest/gtest.h>

#include "ps/base/device_probe.h"
#include "ps/gpu/mem.h"

namespace {

const ps_mem_ops_t *cuda() { return ps_mem_ops(PS_MEM_CUDA); }

bool have_device() {
  ps_mem_info_t info;
  return ps_mem_describe(PS_MEM_CUDA, &info) == PS_OK && info.available;
}

TEST(MemCuda, RegisteredByLinking) {
  // This binary names no symbol of cuda.c (it does not even include
  // ps/gpu/cuda.h): the constructor that alwayslink keeps registered the kind.
  EXPECT_TRUE(ps_mem_kind_linked(PS_MEM_CUDA));
  const ps_mem_ops_t *o = cuda();
  EXPECT_STREQ(o->name, "cuda");
  EXPECT_EQ(o->size, sizeof(ps_mem_ops_t));
}

TEST(MemCuda, DescribeGivesVersionsAndAReason) {
  ps_mem_info_t info;
  ASSERT_EQ(ps_mem_describe(PS_MEM_CUDA, &info), PS_OK);
  EXPECT_EQ(info.kind, PS_MEM_CUDA);
  EXPECT_STREQ(info.name, "cuda");
  EXPECT_TRUE(info.linked);
  EXPECT_GE(info.runtime_version, 1000);  // cudart is linked, so it has a version
  if (info.available) {
    EXPECT_GE(info.device_count, 1);
    EXPECT_STREQ(info.reason, "");
    EXPECT_GT(info.driver_version, 0);
    EXPECT_EQ(cuda()->init(), PS_OK);
  } else {
    printf("cuda runtime %d, driver %d: %s\n", info.runtime_version, info.driver_version,
           info.reason);
    EXPECT_EQ(info.device_count, 0);
    EXPECT_EQ(strncmp(info.reason, "no cuda device: ", 16), 0) << info.reason;
    EXPECT_GT(strlen(info.reason), 16u) << "the reason names the runtime's error";
  }
}

TEST(MemCuda, NoDeviceIsACleanStatusEverywhere) {
  if (have_device()) {
    GTEST_SKIP() << "a cuda device is present; covered by mem_cuda_device_test";
  }
  EXPECT_EQ(cuda()->init(), PS_ERR_DEVICE);
  EXPECT_EQ(cuda()->init(), PS_ERR_DEVICE);  // decided once, same answer

  int n = -7;
  EXPECT_EQ(cuda()->device_count(&n), PS_ERR_DEVICE);
  EXPECT_EQ(n, -7);

  void *p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(cuda()->alloc(64, 0, &p), PS_ERR_DEVICE);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));

  char host_buf[64] = {};
  char other[64] = {};
  EXPECT_EQ(cuda()->copy_to_host(host_buf, other, sizeof(host_buf)), PS_ERR_DEVICE);
  EXPECT_EQ(cuda()->copy_from_host(other, host_buf, sizeof(host_buf)), PS_ERR_DEVICE);
  EXPECT_EQ(cuda()->copy(other, host_buf, sizeof(host_buf)), PS_ERR_DEVICE);
  EXPECT_EQ(cuda()->memset(other, 0, sizeof(other)), PS_ERR_DEVICE);
  EXPECT_EQ(cuda()->free(other), PS_ERR_DEVICE);
  EXPECT_EQ(cuda()->register_host(host_buf, sizeof(host_buf)), PS_ERR_DEVICE);
  EXPECT_EQ(cuda()->unregister_host(host_buf), PS_ERR_DEVICE);

  int device = -7;
  EXPECT_EQ(cuda()->in_use(&device), PS_ERR_DEVICE);
  EXPECT_EQ(device, -7);
  char bus_id[32] = "unset";
  EXPECT_EQ(cuda()->pci_bus_id(0, bus_id, sizeof(bus_id)), PS_ERR_DEVICE);
  EXPECT_STREQ(bus_id, "unset");
  EXPECT_EQ(ps_device_probe_pci_bus_id(PS_MEM_CUDA, 0, bus_id, sizeof(bus_id)), PS_ERR_DEVICE);
  // A transport's probe (ps/base/device_probe.h) gets the same answer and
  // allocates nothing.
  p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(ps_device_probe_alloc(PS_MEM_CUDA, 4096, &p, &device), PS_ERR_DEVICE);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));

  ps_mem_ipc_handle_t h;
  memset(&h, 0x11, sizeof(h));
  EXPECT_EQ(cuda()->ipc_get_handle(other, &h), PS_ERR_DEVICE);
  EXPECT_EQ(h.bytes[63], 0x11);
  EXPECT_EQ(cuda()->ipc_open_handle(&h, 0, &p), PS_ERR_DEVICE);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));
  EXPECT_EQ(cuda()->ipc_close(other), PS_ERR_DEVICE);

  ps_mem_event_h ev = nullptr;
  EXPECT_EQ(cuda()->event_create(0, &ev), PS_ERR_DEVICE);
  EXPECT_EQ(ev, nullptr);
  cuda()->cleanup();
}

TEST(MemCuda, BadArgumentsWinOverDeviceState) {
  void *p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(cuda()->alloc(0, 0, &p), PS_ERR_INVALID_ARG);
  EXPECT_EQ(cuda()->alloc(8, 0, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(cuda()->device_count(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(cuda()->copy(nullptr, nullptr, 0), PS_OK);
  EXPECT_EQ(cuda()->copy(nullptr, &p, 8), PS_ERR_INVALID_ARG);
  EXPECT_EQ(cuda()->free(nullptr), PS_OK);
  EXPECT_EQ(cuda()->register_host(nullptr, 8), PS_ERR_INVALID_ARG);
  EXPECT_EQ(cuda()->event_create(0, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(cuda()->event_query(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(cuda()->event_destroy(nullptr), PS_OK);
  EXPECT_EQ(p, reinterpret_cast<void *>(0x1));
}

TEST(MemCuda, HostPointersStayHost) {
  char buf[32];
  int device = -1;
  EXPECT_FALSE(cuda()->is_addr(buf, &device));
  EXPECT_EQ(device, -1);
  EXPECT_FALSE(cuda()->is_addr(nullptr, &device));
  ps_mem_kind_t kind = PS_MEM_KIND_COUNT;
  ASSERT_EQ(ps_mem_kind_of(buf, &kind, &device), PS_OK);
  EXPECT_EQ(kind, PS_MEM_HOST);
  EXPECT_EQ(device, 0);
}

}  // namespace

// The registry with a fake device kind in the CUDA slot: what a real device
// kind relies on (registration checks, kind_of lookup, event dispatch).
#include <stddef.h>
#include <string.h>

#include <vector>

#include <gtest/gtest.h>

#include "ps/base/device_probe.h"
#include "ps/gpu/mem.h"
#include "ps/gpu/mem_internal.h"

namespace {

// The fake kind owns this arena and says every address in it is on device 3.
unsigned char arena[4096];
int fake_queries;

bool fake_is_addr(const void *ptr, int *device_p) {
  const unsigned char *p = static_cast<const unsigned char *>(ptr);
  if (p < arena || p >= arena + sizeof(arena)) return false;
  *device_p = 3;
  return true;
}

ps_status_t fake_describe(ps_mem_info_t *info_p) {
  memset(info_p, 0, sizeof(*info_p));
  info_p->kind = PS_MEM_CUDA;
  info_p->name = "fake";
  info_p->linked = true;
  info_p->device_count = 4;
  return PS_OK;
}

// In use on device 3; its probe buffers come from the arena.
ps_status_t fake_in_use(int *device_p) {
  *device_p = 3;
  return PS_OK;
}

ps_status_t fake_alloc(size_t len, int device, void **ptr_p) {
  if (device != 3 || len > sizeof(arena)) return PS_ERR_INVALID_ARG;
  *ptr_p = arena;
  return PS_OK;
}

ps_status_t fake_event_query(ps_mem_event_h) {
  ++fake_queries;
  return PS_INPROGRESS;
}

ps_mem_ops_t fake_ops() {
  ps_mem_ops_t o;
  o.size = sizeof(ps_mem_ops_t);
  o.name = "fake";
  o.init = ps__mem_unsup_init;
  o.cleanup = ps__mem_unsup_cleanup;
  o.describe = fake_describe;
  o.device_count = ps__mem_unsup_device_count;
  o.alloc = fake_alloc;
  o.free = ps__mem_unsup_free;
  o.copy_to_host = ps__mem_unsup_copy;
  o.copy_from_host = ps__mem_unsup_copy;
  o.copy = ps__mem_unsup_copy;
  o.memset = ps__mem_unsup_memset;
  o.is_addr = fake_is_addr;
  o.register_host = ps__mem_unsup_register_host;
  o.unregister_host = ps__mem_unsup_unregister_host;
  o.ipc_get_handle = ps__mem_unsup_ipc_get_handle;
  o.ipc_open_handle = ps__mem_unsup_ipc_open_handle;
  o.ipc_close = ps__mem_unsup_ipc_close;
  o.event_create = ps__mem_unsup_event_create;
  o.event_record = ps__mem_unsup_event_record;
  o.event_query = fake_event_query;
  o.event_destroy = ps__mem_unsup_event_destroy;
  o.stream_create = ps__mem_unsup_stream_create;
  o.stream_destroy = ps__mem_unsup_stream_destroy;
  o.copy_async = ps__mem_unsup_copy_async;
  o.memset_async = ps__mem_unsup_memset_async;
  o.launch_host_func = ps__mem_unsup_launch_host_func;
  o.addr_range = ps__mem_unsup_addr_range;
  o.dmabuf_fd = ps__mem_unsup_dmabuf_fd;
  o.in_use = fake_in_use;
  return o;
}

TEST(MemRegistry, RejectsIncompleteTables) {
  ps_mem_ops_t o = fake_ops();
  EXPECT_TRUE(ps__mem_ops_complete(&o));

  ps_mem_ops_t hole = o;
  hole.ipc_close = nullptr;
  EXPECT_FALSE(ps__mem_ops_complete(&hole));
  EXPECT_EQ(ps__mem_register(PS_MEM_CUDA, &hole), PS_ERR_INVALID_ARG);
  hole = o;
  hole.launch_host_func = nullptr;
  EXPECT_FALSE(ps__mem_ops_complete(&hole));
  hole = o;
  hole.addr_range = nullptr;
  EXPECT_FALSE(ps__mem_ops_complete(&hole));
  hole = o;
  hole.dmabuf_fd = nullptr;
  EXPECT_FALSE(ps__mem_ops_complete(&hole));
  hole = o;
  hole.in_use = nullptr;
  EXPECT_FALSE(ps__mem_ops_complete(&hole));

  ps_mem_ops_t small = o;
  small.size = offsetof(ps_mem_ops_t, event_destroy);  // built against an older header
  EXPECT_EQ(ps__mem_register(PS_MEM_CUDA, &small), PS_ERR_INVALID_ARG);

  ps_mem_ops_t unnamed = o;
  unnamed.name = nullptr;
  EXPECT_EQ(ps__mem_register(PS_MEM_CUDA, &unnamed), PS_ERR_INVALID_ARG);

  EXPECT_EQ(ps__mem_register(PS_MEM_KIND_COUNT, &o), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps__mem_register(PS_MEM_CUDA, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_FALSE(ps_mem_kind_linked(PS_MEM_CUDA));
}

// Registration is for the life of the process, so the rest is one test.
TEST(MemRegistry, RegisteredKindIsUsedEverywhere) {
  static const ps_mem_ops_t fake = fake_ops();
  static const ps_mem_ops_t other = fake_ops();

  ASSERT_EQ(ps__mem_register(PS_MEM_CUDA, &fake), PS_OK);
  EXPECT_TRUE(ps_mem_kind_linked(PS_MEM_CUDA));
  EXPECT_EQ(ps_mem_ops(PS_MEM_CUDA), &fake);
  EXPECT_EQ(ps__mem_register(PS_MEM_CUDA, &fake), PS_OK);  // idempotent
  EXPECT_EQ(ps__mem_register(PS_MEM_CUDA, &other), PS_ERR_EXISTS);
  EXPECT_EQ(ps__mem_register(PS_MEM_HOST, &other), PS_ERR_EXISTS);
  EXPECT_EQ(ps_mem_ops(PS_MEM_CUDA), &fake);
  EXPECT_STREQ(ps_mem_ops(PS_MEM_HOST)->name, "host");

  // Device kinds are asked before host, which claims everything else.
  ps_mem_kind_t kind = PS_MEM_KIND_COUNT;
  int device = -1;
  ASSERT_EQ(ps_mem_kind_of(arena + 100, &kind, &device), PS_OK);
  EXPECT_EQ(kind, PS_MEM_CUDA);
  EXPECT_EQ(device, 3);
  std::vector<char> heap(8);
  ASSERT_EQ(ps_mem_kind_of(heap.data(), &kind, &device), PS_OK);
  EXPECT_EQ(kind, PS_MEM_HOST);
  EXPECT_EQ(device, 0);

  // Registering installed the kind's probe for transports (ps/base).
  void *probe = nullptr;
  device = -1;
  ASSERT_EQ(ps_device_probe_alloc(PS_MEM_CUDA, 64, &probe, &device), PS_OK);
  EXPECT_EQ(probe, static_cast<void *>(arena));
  EXPECT_EQ(device, 3);
  ps_device_probe_free(PS_MEM_CUDA, probe);
  EXPECT_EQ(ps_device_probe_alloc(PS_MEM_EMU, 64, &probe, &device), PS_ERR_UNSUPPORTED)
      << "no kind registered for emu in this test";

  ps_mem_info_t info;
  ASSERT_EQ(ps_mem_describe(PS_MEM_CUDA, &info), PS_OK);
  EXPECT_STREQ(info.name, "fake");
  EXPECT_EQ(info.device_count, 4);

  // Generic event calls go to the kind recorded in the event.
  struct ps_mem_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.kind = PS_MEM_CUDA;
  EXPECT_EQ(ps_mem_event_query(&ev), PS_INPROGRESS);
  EXPECT_EQ(fake_queries, 1);
  EXPECT_EQ(ps_mem_event_record(&ev, nullptr), PS_ERR_UNSUPPORTED);
}

}  // namespace

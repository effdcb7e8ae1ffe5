// libibverbs links and enumerates devices; with no RDMA device (this machine:
// no /sys/class/infiniband) the list call fails or is empty, with a reason.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <gtest/gtest.h>

namespace {

bool sysfs_has_devices() { return access("/sys/class/infiniband", F_OK) == 0; }

TEST(Ibverbs, DeviceListIsCleanWithOrWithoutDevices) {
  int n = -1;
  errno = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == nullptr) {
    int err = errno;
    // NULL must come with a reason (ENOSYS here: no kernel support).
    EXPECT_NE(err, 0);
    printf("no ibverbs devices: ibv_get_device_list: %s\n", strerror(err));
    return;
  }
  ASSERT_GE(n, 0);
  EXPECT_EQ(list[n], nullptr) << "the list is NULL-terminated";
  if (!sysfs_has_devices()) {
    EXPECT_EQ(n, 0) << "devices listed without /sys/class/infiniband";
  }
  printf("ibverbs devices: %d\n", n);
  for (int i = 0; i < n; ++i) {
    const char *name = ibv_get_device_name(list[i]);
    ASSERT_NE(name, nullptr);
    EXPECT_GT(strlen(name), 0u);
    printf("  %s (%s)\n", name, ibv_node_type_str(list[i]->node_type));
  }
  ibv_free_device_list(list);
}

// The num_devices argument is optional.
TEST(Ibverbs, CountIsOptional) {
  struct ibv_device **list = ibv_get_device_list(nullptr);
  if (list != nullptr) ibv_free_device_list(list);
  SUCCEED();
}

// Only with a device: open it and read its attributes.
TEST(Ibverbs, OpenFirstDevice) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    int err = errno;
    if (list != nullptr) ibv_free_device_list(list);
    GTEST_SKIP() << "no ibverbs device: " << (err ? strerror(err) : "0 devices");
  }
  struct ibv_context *ctx = ibv_open_device(list[0]);
  ASSERT_NE(ctx, nullptr) << strerror(errno);
  struct ibv_device_attr attr;
  EXPECT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_GE(attr.phys_port_cnt, 1);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  ibv_free_device_list(list);
}

}  // namespace

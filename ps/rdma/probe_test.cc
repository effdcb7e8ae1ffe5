// The probes on this machine: software providers and transports are found,
// RDMA hardware is absent with a reason. Also holds on a machine with RDMA.
#include "ps/rdma/probe.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include <rdma/fabric.h>

#include <gtest/gtest.h>

namespace {

bool exists(const char *path) { return access(path, F_OK) == 0; }

TEST(Probe, NullIsInvalidArgument) {
  EXPECT_EQ(ps_probe_ibverbs(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_probe_rdmacm(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_probe_fabric(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_probe_ucx(nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_probe_fabric_find(nullptr, "tcp"), nullptr);
  EXPECT_EQ(ps_probe_ucx_find(nullptr, "tcp"), nullptr);
}

TEST(Probe, Ibverbs) {
  auto info = std::make_unique<ps_probe_ibverbs_t>();
  ASSERT_EQ(ps_probe_ibverbs(info.get()), PS_OK);
  if (!exists("/sys/class/infiniband")) {
    EXPECT_FALSE(info->available);
    EXPECT_EQ(info->device_count, 0);
    EXPECT_EQ(strncmp(info->reason, "no ibverbs devices: ", 20), 0) << info->reason;
    EXPECT_GT(strlen(info->reason), 20u);
    printf("ibverbs: %s\n", info->reason);
    return;
  }
  ASSERT_TRUE(info->available) << info->reason;
  ASSERT_GE(info->device_count, 1);
  for (int i = 0; i < info->device_count; ++i) {
    const ps_probe_ib_device_t &d = info->devices[i];
    EXPECT_GT(strlen(d.name), 0u);
    if (!d.opened) {
      EXPECT_GT(strlen(d.reason), 0u) << d.name;
      continue;
    }
    EXPECT_GE(d.port_count, 1) << d.name;
    EXPECT_EQ(d.ports_listed, std::min(d.port_count, PS_PROBE_IB_MAX_PORTS));
    for (int p = 0; p < d.ports_listed; ++p) {
      EXPECT_EQ(d.ports[p].port_num, p + 1);
      EXPECT_LE(d.ports[p].gid_count, d.ports[p].gid_table_len);
    }
  }
}

TEST(Probe, Rdmacm) {
  ps_probe_rdmacm_t info;
  memset(&info, 0x5a, sizeof(info));
  ASSERT_EQ(ps_probe_rdmacm(&info), PS_OK);
  if (!exists("/dev/infiniband/rdma_cm")) {
    EXPECT_FALSE(info.available);
    EXPECT_NE(strstr(info.reason, "rdma_create_event_channel: "), nullptr) << info.reason;
    printf("rdma_cm: %s\n", info.reason);
  } else if (info.available) {
    EXPECT_STREQ(info.reason, "");
  } else {
    EXPECT_GT(strlen(info.reason), 0u);
  }
}

TEST(Probe, FabricFindsSoftwareProviders) {
  auto info = std::make_unique<ps_probe_fabric_t>();
  ASSERT_EQ(ps_probe_fabric(info.get()), PS_OK);
  ASSERT_TRUE(info->available) << info->reason;
  EXPECT_GE(info->version, FI_VERSION(1, 17));
  ASSERT_GT(info->entry_count, 0);
  EXPECT_LE(info->entry_count, PS_PROBE_FABRIC_MAX);

  // One entry per (provider, fabric) pair.
  std::set<std::pair<std::string, std::string>> seen;
  for (int i = 0; i < info->entry_count; ++i) {
    const ps_probe_fabric_entry_t &e = info->entries[i];
    EXPECT_GT(strlen(e.provider), 0u);
    EXPECT_GT(strlen(e.fabric), 0u);
    EXPECT_TRUE(e.ep_msg || e.ep_rdm || e.ep_dgram) << e.provider;
    EXPECT_TRUE(seen.insert({e.provider, e.fabric}).second) << e.provider << " " << e.fabric;
    printf("fabric: %-16s %-16s %s%s%s%s%s%s\n", e.provider, e.fabric, e.ep_msg ? " msg" : "",
           e.ep_rdm ? " rdm" : "", e.ep_dgram ? " dgram" : "", e.rma ? " rma" : "",
           e.tagged ? " tagged" : "", e.hmem ? " hmem" : "");
  }

  const ps_probe_fabric_entry_t *tcp = ps_probe_fabric_find(info.get(), "tcp");
  ASSERT_NE(tcp, nullptr);
  EXPECT_TRUE(tcp->ep_msg);
  EXPECT_TRUE(tcp->rma);

  const ps_probe_fabric_entry_t *rxm = ps_probe_fabric_find(info.get(), "tcp;ofi_rxm");
  ASSERT_NE(rxm, nullptr);
  EXPECT_TRUE(rxm->ep_rdm);
  EXPECT_TRUE(rxm->tagged);
  EXPECT_TRUE(rxm->rma);

  const ps_probe_fabric_entry_t *shm = ps_probe_fabric_find(info.get(), "shm");
  ASSERT_NE(shm, nullptr);
  EXPECT_STREQ(shm->fabric, "shm");
  EXPECT_TRUE(shm->ep_rdm);
  EXPECT_TRUE(shm->tagged);

  EXPECT_EQ(ps_probe_fabric_find(info.get(), "no-such-provider"), nullptr);
  if (!exists("/sys/class/infiniband")) {
    EXPECT_EQ(ps_probe_fabric_find(info.get(), "verbs"), nullptr);
    EXPECT_EQ(ps_probe_fabric_find(info.get(), "efa"), nullptr);
  }
}

TEST(Probe, UcxFindsSoftwareTransports) {
  auto info = std::make_unique<ps_probe_ucx_t>();
  ASSERT_EQ(ps_probe_ucx(info.get()), PS_OK);
  printf("ucx %s\n", info->version);
  EXPECT_TRUE(info->major > 1 || (info->major == 1 && info->minor >= 13));
  char expect[32];
  snprintf(expect, sizeof(expect), "%u.%u.%u", info->major, info->minor, info->release);
  EXPECT_EQ(strncmp(info->version, expect, strlen(expect)), 0) << info->version;
  ASSERT_TRUE(info->available) << info->reason;

  std::set<std::string> components;
  for (int c = 0; c < info->component_count; ++c) components.insert(info->components[c]);
  EXPECT_TRUE(components.count("tcp"));
  EXPECT_TRUE(components.count("posix"));

  for (int i = 0; i < info->resource_count; ++i) {
    const ps_probe_ucx_resource_t &r = info->resources[i];
    EXPECT_TRUE(components.count(r.component)) << r.component;
    printf("ucx: %-8s %-8s %-10s %-12s %s\n", r.component, r.md, r.transport, r.device,
           r.device_type);
  }
  const ps_probe_ucx_resource_t *tcp = ps_probe_ucx_find(info.get(), "tcp");
  ASSERT_NE(tcp, nullptr);
  EXPECT_STREQ(tcp->device_type, "net");
  const ps_probe_ucx_resource_t *posix = ps_probe_ucx_find(info.get(), "posix");
  ASSERT_NE(posix, nullptr);
  EXPECT_STREQ(posix->device_type, "shm");
  const ps_probe_ucx_resource_t *self = ps_probe_ucx_find(info.get(), "self");
  ASSERT_NE(self, nullptr);
  EXPECT_STREQ(self->device_type, "self");

  if (!exists("/sys/class/infiniband")) {
    for (int i = 0; i < info->resource_count; ++i) {
      EXPECT_STRNE(info->resources[i].component, "ib");
    }
  }
}

}  // namespace

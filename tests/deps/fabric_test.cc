// libfabric links, is at least 1.17, and finds the software providers this
// machine runs real transfers on: tcp (msg, and rdm through ofi_rxm) and shm.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <gtest/gtest.h>

namespace {

constexpr uint32_t kApi = FI_VERSION(1, 17);

// fi_getinfo for one provider name and endpoint type (0: any).
struct Query {
  struct fi_info *info = nullptr;
  int rc = 0;

  Query(const char *prov, enum fi_ep_type ep) {
    struct fi_info *hints = fi_allocinfo();
    EXPECT_NE(hints, nullptr);
    if (hints == nullptr) return;
    hints->fabric_attr->prov_name = strdup(prov);
    if (ep != FI_EP_UNSPEC) hints->ep_attr->type = ep;
    rc = fi_getinfo(kApi, nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);  // frees prov_name too
  }
  ~Query() { fi_freeinfo(info); }
  Query(const Query &) = delete;
  Query &operator=(const Query &) = delete;
};

TEST(Fabric, VersionIsAtLeast117) {
  uint32_t v = fi_version();
  printf("libfabric %u.%u\n", FI_MAJOR(v), FI_MINOR(v));
  EXPECT_GE(v, kApi);
}

TEST(Fabric, TcpProviderIsFound) {
  Query q("tcp", FI_EP_MSG);
  ASSERT_EQ(q.rc, 0) << fi_strerror(-q.rc);
  ASSERT_NE(q.info, nullptr);
  bool core = false;
  for (struct fi_info *i = q.info; i != nullptr; i = i->next) {
    EXPECT_EQ(strncmp(i->fabric_attr->prov_name, "tcp", 3), 0) << i->fabric_attr->prov_name;
    EXPECT_EQ(i->ep_attr->type, FI_EP_MSG);
    core = core || strcmp(i->fabric_attr->prov_name, "tcp") == 0;
  }
  EXPECT_TRUE(core);
}

// The reliable-datagram flavour the libfabric van uses without RDMA hardware.
TEST(Fabric, TcpRxmRdmIsFound) {
  Query q("tcp;ofi_rxm", FI_EP_RDM);
  ASSERT_EQ(q.rc, 0) << fi_strerror(-q.rc);
  ASSERT_NE(q.info, nullptr);
  EXPECT_STREQ(q.info->fabric_attr->prov_name, "tcp;ofi_rxm");
  EXPECT_EQ(q.info->ep_attr->type, FI_EP_RDM);
  EXPECT_TRUE(q.info->caps & FI_TAGGED);
  EXPECT_TRUE(q.info->caps & FI_RMA);
}

TEST(Fabric, ShmProviderIsFound) {
  Query q("shm", FI_EP_UNSPEC);
  ASSERT_EQ(q.rc, 0) << fi_strerror(-q.rc);
  ASSERT_NE(q.info, nullptr);
  EXPECT_STREQ(q.info->fabric_attr->prov_name, "shm");
  EXPECT_EQ(q.info->ep_attr->type, FI_EP_RDM);
}

TEST(Fabric, UnknownProviderIsNoData) {
  Query q("no-such-provider", FI_EP_UNSPEC);
  EXPECT_EQ(q.rc, -FI_ENODATA);
  EXPECT_EQ(q.info, nullptr);
}

// Opening a fabric and a domain works for both software providers.
TEST(Fabric, OpenFabricAndDomain) {
  for (const char *prov : {"tcp", "shm"}) {
    Query q(prov, FI_EP_UNSPEC);
    ASSERT_EQ(q.rc, 0) << prov << ": " << fi_strerror(-q.rc);
    struct fid_fabric *fabric = nullptr;
    struct fid_domain *domain = nullptr;
    int rc = fi_fabric(q.info->fabric_attr, &fabric, nullptr);
    ASSERT_EQ(rc, 0) << prov << ": fi_fabric: " << fi_strerror(-rc);
    rc = fi_domain(fabric, q.info, &domain, nullptr);
    EXPECT_EQ(rc, 0) << prov << ": fi_domain: " << fi_strerror(-rc);
    if (rc == 0) {
      EXPECT_EQ(fi_close(&domain->fid), 0);
    }
    EXPECT_EQ(fi_close(&fabric->fid), 0);
  }
}

}  // namespace

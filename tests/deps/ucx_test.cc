// UCX links, is at least 1.13, and brings up a context and a worker on the
// transports this machine has (tcp, shared memory); an RDMA transport reports
// "no device" cleanly.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <gtest/gtest.h>

namespace {

// ucp_init with UCX_TLS set to tls (through the config, not the environment).
ucs_status_t bring_up(const char *tls, size_t *address_len_p) {
  ucp_config_t *config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return st;
  st = ucp_config_modify(config, "TLS", tls);
  if (st != UCS_OK) {
    ucp_config_release(config);
    return st;
  }
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
  ucp_context_h context = nullptr;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) return st;

  ucp_worker_params_t wparams;
  memset(&wparams, 0, sizeof(wparams));
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  st = ucp_worker_create(context, &wparams, &worker);
  if (st == UCS_OK) {
    ucp_address_t *address = nullptr;
    size_t len = 0;
    st = ucp_worker_get_address(worker, &address, &len);
    if (st == UCS_OK) {
      *address_len_p = len;
      ucp_worker_release_address(worker, address);
    }
    ucp_worker_destroy(worker);
  }
  ucp_cleanup(context);
  return st;
}

TEST(Ucx, VersionIsAtLeast113) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  printf("ucx %s\n", ucp_get_version_string());
  EXPECT_TRUE(major > 1 || (major == 1 && minor >= 13)) << major << "." << minor;
  char expect[32];
  snprintf(expect, sizeof(expect), "%u.%u.%u", major, minor, release);
  EXPECT_EQ(strncmp(ucp_get_version_string(), expect, strlen(expect)), 0);
}

class UcxTransport : public ::testing::TestWithParam<const char *> {};

TEST_P(UcxTransport, ContextAndWorker) {
  size_t len = 0;
  ucs_status_t st = bring_up(GetParam(), &len);
  ASSERT_EQ(st, UCS_OK) << GetParam() << ": " << ucs_status_string(st);
  EXPECT_GT(len, 0u) << "a worker address to send to peers";
}

INSTANTIATE_TEST_SUITE_P(Software, UcxTransport,
                         ::testing::Values("tcp", "posix,sysv,self", "sm", "tcp,sm"));

TEST(Ucx, RdmaTransportWithoutDeviceIsNoDevice) {
  if (access("/sys/class/infiniband", F_OK) == 0) {
    GTEST_SKIP() << "this machine has RDMA devices";
  }
  size_t len = 0;
  ucs_status_t st = bring_up("rc", &len);
  EXPECT_EQ(st, UCS_ERR_NO_DEVICE) << ucs_status_string(st);
  printf("ucx rc without a device: %s\n", ucs_status_string(st));
}

}  // namespace

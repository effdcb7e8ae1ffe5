// The van conformance suite (//tests/van:van_conformance) on the ibverbs
// van, over a real or soft-RoCE device at the address of an RDMA interface
// (rdma_host.h), with 1 and 2 queue pairs per peer. Tagged requires-rdma;
// without a device every case skips with the reason.
#include <string>

#include "gtest/gtest.h"
#include "tests/van/van_conformance.h"

extern "C" {
#include "ps/base/config.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/net/caps.h"
#include "tests/rdma/verbs/rdma_host.h"
}

namespace {

using ps_van_test::VanConfig;
using ps_van_test::VanConfigName;
using ps_van_test::VanConformance;

bool RdmaHostOf(std::string *host, std::string *why)
{
    char h[PS_SOCKADDR_STRLEN], reason[512];
    if (!ps_test_rdma_host(h, sizeof(h), reason, sizeof(reason))) {
        *why = reason;
        return false;
    }
    *host = h;
    return true;
}

VanConfig VerbsConfig(const char *name, const char *qps)
{
    VanConfig c;
    c.name = name;
    c.van = "ibverbs";
    c.host_of = RdmaHostOf;
    c.env_name = "STEPMESH_QP_NUM";
    c.env_value = qps;
    // The hello is the rdma_cm private data, not a message.
    c.inband_hello = false;
    c.device_memory_possible = true; /* with nvidia-peermem */
    c.caps_set = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_REMOTE_WRITE |
                 PS_CAP_MEM_REGISTRATION | PS_CAP_BUSY_POLL;
    c.caps_clear = PS_CAP_SAME_HOST_ONLY;
    c.num_streams = qps[0] - '0';
    // connect() returns once rdma_cm established the connection, retrying
    // a refused one until the connect timeout.
    c.connect_completes_in_call = true;
    c.connect_retries_in_call = true;
    // It registers buffers (the registration cache).
    c.register_null_status = PS_ERR_INVALID_ARG;
    return c;
}

INSTANTIATE_TEST_SUITE_P(Verbs, VanConformance,
                         ::testing::Values(VerbsConfig("qp1", "1"), VerbsConfig("qp2", "2")),
                         VanConfigName);

} // namespace

// The van conformance suite on the composed van "ipc" (BYTEPS_ENABLE_IPC=1:
// same-host peers through the shm van, the others through the network van,
// here tcp). Every peer of these tests shares the host, so the data goes
// through shared memory; a peer nobody listens for at connect() goes to
// the network van, which retries until it listens.

#include "tests/van/van_conformance.h"
#include "gtest/gtest.h"

extern "C" {
#include "ps/base/status.h"
#include "ps/net/van/van.h"
}

namespace {

using ps_van_test::VanConfig;
using ps_van_test::VanConfigName;
using ps_van_test::VanConformance;

VanConfig IpcConfig()
{
    VanConfig c;
    c.name = "ipc";
    c.van = "ipc";
    // The network van is the one the job would use without IPC: tcp.
    c.env_name = "DMLC_PS_VAN_TYPE";
    c.env_value = "tcp";
    // Same-host peers are found by job id, host and port: each test a job
    // of its own.
    c.unique_env_name = "PS_JOB_ID";
    // A peer's van going away closes its channel (or its sockets).
    c.peer_close_statuses = {PS_ERR_PEER_GONE};
    // Between processes of one host the hello travels on the shm van's
    // rendezvous socket, never as a message.
    c.inband_hello = false;
    return c;
}

INSTANTIATE_TEST_SUITE_P(Ipc, VanConformance, ::testing::Values(IpcConfig()), VanConfigName);

} // namespace

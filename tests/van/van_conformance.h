// The van conformance suite: the tests every van must pass the same way
// (every message shape arrives intact and in order, replies, receive into
// the caller's buffer, busy polling, queued sends, peers that close or
// never listen, the scheduler's handshake with an unassigned node, bind).
//
// The suite is value-parametrised over VanConfig; a van's test file
// instantiates it for its own configurations:
//
//   INSTANTIATE_TEST_SUITE_P(Tcp, VanConformance, ::testing::Values(...),
//                            VanConfigName);
//
// and links //tests/van:van_conformance, so each van's test target still
// runs its own van only. Where vans legitimately differ, VanConfig says so
// (with the reason next to the value in the van's test file).
#ifndef PS_TESTS_VAN_VAN_CONFORMANCE_H_
#define PS_TESTS_VAN_VAN_CONFORMANCE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/van/van_harness.h"

extern "C" {
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/van/van.h"
}

namespace ps_van_test {

struct VanConfig {
    // The instance's name in the tests' names (letters, digits, '_').
    std::string name;
    // The van's name in the registry.
    const char *van = nullptr;
    // The loopback address the vans bind and dial; a test is skipped when
    // the host cannot bind it (no IPv6 loopback).
    const char *host = "127.0.0.1";
    // An environment variable set for each test's duration (UCX_TLS for
    // the ucx van), restored afterwards; nullptr: none.
    const char *env_name = nullptr;
    const char *env_value = nullptr;

    // The statuses a peer that closed its van may be reported with.
    std::vector<ps_status_t> peer_close_statuses = {PS_ERR_PEER_GONE};
    // van_data of the van's own hello (tag and length), which send() must
    // refuse from a caller.
    std::string hello_tag;
    uint32_t hello_len = 0;
    // stats() counts sent bytes once the peer took them (not when they were
    // handed to the van): a stalled peer then leaves some uncounted.
    bool sent_counts_taken_bytes = false;
    // Capability flags the van must and must not advertise; the number of
    // streams it reports by default (0: at least one).
    uint64_t caps_set = 0;
    uint64_t caps_clear = 0;
    uint32_t num_streams = 0;
};

// The instance's name for INSTANTIATE_TEST_SUITE_P.
std::string VanConfigName(const ::testing::TestParamInfo<VanConfig> &info);

// What gtest prints for a parameter.
void PrintTo(const VanConfig &c, std::ostream *os);

// `threads` threads each send `per_thread` messages from `worker` to node
// 8 (`server`), message i of thread t with key t << 32 | i and segments
// {8, len_of(i)}; checks every send succeeded and that the server got them
// all intact, each thread's in its order.
void SendConcurrentlyAndCheckOrder(VanBase &worker, VanBase &server, int threads,
                                   int per_thread, size_t (*len_of)(int i));

class VanConformance : public ::testing::TestWithParam<VanConfig> {
  protected:
    void SetUp() override;
    void TearDown() override;

    const VanConfig &Cfg() const { return GetParam(); }
    // Opens `v` as this configuration's van, bound to the host as node `id`.
    ps_status_t Open(VanBase &v, int id, ps_van_params_t params = DefaultParams(),
                     int port = 0) const;
    // Opens `server` as node 8 and `worker` as node 9, the worker
    // connected to the server (wrap in ASSERT_NO_FATAL_FAILURE).
    void OpenPair(VanBase &server, VanBase &worker, ps_van_params_t params = DefaultParams()) const;
    // Sends message `seq` to node `to` with segments of `sizes` (OutMsg).
    static ps_status_t Send(VanBase &from, int to, uint64_t seq, const std::vector<size_t> &sizes);
    // Opens `worker` as node 9 and connects it to node 8 at a port a van
    // just had and let go (nobody listens there), returned in *port_p.
    void OpenAndDialNobody(VanBase &worker, int *port_p,
                           ps_van_params_t params = DefaultParams()) const;

  private:
    bool env_set_ = false;
    bool env_had_ = false;
    std::string env_old_;
};

} // namespace ps_van_test

#endif // PS_TESTS_VAN_VAN_CONFORMANCE_H_

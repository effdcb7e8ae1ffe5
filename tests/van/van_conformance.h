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
#include <map>
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
    // Where the address is found at run time instead (an RDMA interface's):
    // fills *host, or returns false with why the suite cannot run here.
    bool (*host_of)(std::string *host, std::string *why) = nullptr;
    // An environment variable set for each test's duration (UCX_TLS for
    // the ucx van), restored afterwards; nullptr: none.
    const char *env_name = nullptr;
    const char *env_value = nullptr;
    // An environment variable set to a value unique to each test (the shm
    // van's PS_JOB_ID: its peers' names live in a job's namespace, which
    // must meet no other test's), restored afterwards; nullptr: none.
    const char *unique_env_name = nullptr;
    // Called after each van of a test opened and bound (nullptr: nothing);
    // its status is Open()'s. `id` is the node id it was bound as.
    ps_status_t (*after_open)(VanBase &v, int id) = nullptr;

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
    // The van may advertise PS_CAP_DEVICE_MEMORY on some machines (ibverbs
    // with nvidia-peermem, UCX with its cuda transports): not checked then.
    bool device_memory_possible = false;
    // What register_mem(NULL) returns: unsupported by a van that registers
    // nothing, an invalid argument for one that does.
    ps_status_t register_null_status = PS_ERR_UNSUPPORTED;
    // A node answers only nodes it connected to (it learns their addresses
    // from connect() alone): OpenPair connects the server back too, and a
    // reply to a node never connected to must fail as unreachable.
    bool replies_need_connect = false;
    // The scheduler's van is opened with is_scheduler set, as the
    // postoffice opens it (a van whose scheduler speaks another transport).
    bool scheduler_flagged = false;
    // A peer that closed its van is noticed only when a send to it fails
    // (no connection whose end says so): the test sends to it.
    bool peer_close_seen_on_send = false;
    // disconnect() tells the peer (which then reports this node failed).
    bool disconnect_tells_peer = true;
    // The van's own hello travels as a message whose van_data send() must
    // refuse from a caller (hello_tag, hello_len).
    bool inband_hello = true;
    // connect() completes the handshake in the call: a peer nobody
    // listens for is PS_ERR_UNREACHABLE from connect() itself (nothing is
    // retried, queued or reported later).
    bool connect_completes_in_call = false;
    // With connect_completes_in_call: the call retries until the connect
    // timeout, so a peer that starts listening meanwhile is reached by it.
    bool connect_retries_in_call = false;
    // Under busy polling a waiting thread runs the van's loop through the
    // progress op; false: the van's own thread keeps it (a van whose
    // provider calls may never return lets no other thread into them) and
    // has no progress op.
    bool waiters_drive = true;
    // Tests that do not apply to this van (name without the instance):
    // the reason is the skip message.
    std::map<std::string, std::string> not_applicable;
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
    // The address the test's vans bind and dial (VanConfig host or host_of).
    const char *Host() const { return host_.c_str(); }
    // Opens `v` as this configuration's van, bound to the host as node `id`.
    ps_status_t Open(VanBase &v, int id, ps_van_params_t params = DefaultParams(),
                     int port = 0) const;
    // Opens `server` as node 8 and `worker` as node 9, the worker
    // connected to the server (wrap in ASSERT_NO_FATAL_FAILURE).
    void OpenPair(VanBase &server, VanBase &worker, ps_van_params_t params = DefaultParams()) const;
    // Sends message `seq` to node `to` with segments of `sizes` (OutMsg).
    static ps_status_t Send(VanBase &from, int to, uint64_t seq, const std::vector<size_t> &sizes);
    // Sends lane message `seq` of `len` bytes (LaneBytes) with the van's
    // send_lane op, which it must have.
    static ps_status_t SendLane(VanBase &from, int to, uint64_t seq, size_t len);
    // Node `id` at Host():port, as the postoffice names a peer to connect().
    ps_node_t NodeAt(int id, int port) const;
    // Opens `worker` as node 9 and connects it to node 8 at a port a van
    // just had and let go (nobody listens there), returned in *port_p
    // (connect_completes_in_call: checks that connect() refused it).
    void OpenAndDialNobody(VanBase &worker, int *port_p,
                           ps_van_params_t params = DefaultParams()) const;

  private:
    // One environment variable set for the test's duration, restored in
    // TearDown.
    struct EnvSetting {
        const char *name = nullptr;
        bool had = false;
        std::string old;
    };
    void SetEnv(const char *name, const char *value);
    std::vector<EnvSetting> env_;
    std::string host_;
};

} // namespace ps_van_test

#endif // PS_TESTS_VAN_VAN_CONFORMANCE_H_

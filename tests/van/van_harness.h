// The scaffolding of the van-level tests (tcp, ucx, fabric, verbs): an
// inbox that records what a van delivers, a van opened through the
// registry and driven through its ops table exactly as the postoffice
// drives it, and messages filled with a pattern that the receiving side
// checks byte by byte.
//
// No timing thresholds: every wait has a generous deadline (kWait) that
// only ends a test that would otherwise hang.
#ifndef PS_TESTS_VAN_VAN_HARNESS_H_
#define PS_TESTS_VAN_VAN_HARNESS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/van.h"
}

namespace ps_van_test {

constexpr auto kWait = std::chrono::seconds(60);

// The byte at position i of segment `seg` of message `seq`.
uint8_t Pattern(uint64_t seq, unsigned seg, size_t i);

struct Received {
    // A lane message (deliver_lane): meta is zero but for sender, and
    // data[0] holds its bytes, header included.
    bool lane = false;
    ps_meta_t meta;
    std::vector<std::string> data;
    std::vector<const void *> ptrs; // where each segment landed
    std::string body;
    std::vector<ps_node_t> nodes;
};

// Everything one van delivers, plus knobs the tests turn.
struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Received> msgs;
    std::vector<std::pair<int, ps_status_t>> failures;
    // recv_buffer(): returns a slice from here for (key, index) if present.
    std::map<std::pair<uint64_t, unsigned>, ps_slice_t> dest;
    std::atomic<int> recv_buffer_calls{0};
    // deliver() waits while the gate is closed (a peer that does not read).
    bool gate_closed = false;
    std::atomic<bool> in_gate{false};
    // Called inline on the progress thread after recording (may send).
    // Set it before the van opens, or with SetOnMsg: over RDMA the only
    // order between a test's thread and the van's is the device's, which
    // TSan cannot see.
    std::function<void(const ps_msg_t *)> on_msg;
    void SetOnMsg(std::function<void(const ps_msg_t *)> fn);

    ~Inbox();
    bool WaitMsgs(size_t n);
    bool WaitFailure(size_t n);
    void OpenGate();
    size_t Count();
};

// The van callbacks, with an Inbox as their argument.
ps_status_t RecvBuffer(void *arg, const ps_meta_t *meta, unsigned index, uint64_t len,
                       ps_slice_t *slice_p);
void Deliver(void *arg, ps_msg_t *msg);
void PeerFailed(void *arg, int node_id, ps_status_t why);
void DeliverLane(void *arg, int sender, const uint8_t *bytes, size_t len);

// The ops of the van registered as `name` (a test failure when missing).
const ps_van_ops_t *VanOps(const char *name);

// A worker's parameters with a 20 s connect timeout.
ps_van_params_t DefaultParams();

// One van of type `name` with its inbox.
struct VanBase {
    Inbox inbox;
    ps_van_t *van = nullptr;
    ps_node_t node;
    const ps_van_ops_t *ops = nullptr;
    // Called by Close() just before the van closes (nullptr: nothing): a
    // van whose provider needs the process's other vans quiet first.
    std::function<void(VanBase &)> before_close;

    // Opens it and binds node `id` to host:port (port 0: the van picks).
    ps_status_t OpenAs(const char *name, int id, const char *host, ps_van_params_t params,
                       int port);
    int Port() const { return node.ports[0]; }
    ps_status_t ConnectTo(const VanBase &peer, int my_id)
    {
        return ops->connect(van, &peer.node, my_id);
    }
    void Close();
    ~VanBase() { Close(); }
};

// A message to `recver` with segments of the given sizes, filled with the
// pattern of `seq`.
struct OutMsg {
    ps_msg_t msg;
    // Each segment starts `offset` bytes into its own buffer (alignment:
    // the buffer's data is 64-byte aligned).
    OutMsg(int recver, uint64_t seq, const std::vector<size_t> &sizes, size_t offset = 0);
    ~OutMsg() { ps_msg_release(&msg); }
};

// Whether `r` is message `seq` from `sender` with segments of `sizes`,
// every byte as the pattern says.
::testing::AssertionResult CheckMsg(const Received &r, int sender, uint64_t seq,
                                    const std::vector<size_t> &sizes);

} // namespace ps_van_test

#endif // PS_TESTS_VAN_VAN_HARNESS_H_

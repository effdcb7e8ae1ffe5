// Van-level tests of the TCP van: two or three vans in one process over
// loopback (IPv4 and IPv6), driven through the registry and the ops table
// exactly as the postoffice drives them.
//
// No timing thresholds: every wait has a generous deadline that only ends
// a test that would otherwise hang.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/van/van_harness.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/net/caps.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/van.h"
}

namespace {

using namespace ps_van_test;

// One TCP van with its inbox, bound to `host`.
struct Van : VanBase {
    ps_status_t Open(int id, const char *host, ps_van_params_t params = DefaultParams(),
                     int port = 0)
    {
        return OpenAs("tcp", id, host, params, port);
    }
};

// Skips the test when the host cannot bind `host` (no IPv6 loopback).
bool HostUsable(const char *host)
{
    ps_sockaddr_t a;
    if (ps_sockaddr_parse(host, 0, &a) != PS_OK) {
        return false;
    }
    int fd = socket(ps_sockaddr_family(&a), SOCK_STREAM, 0);
    if (fd < 0) {
        return false;
    }
    bool ok = bind(fd, ps_sockaddr_sa(&a), a.len) == 0;
    close(fd);
    return ok;
}

class TcpVanHosts : public ::testing::TestWithParam<const char *> {
  protected:
    void SetUp() override
    {
        if (!HostUsable(GetParam())) {
            GTEST_SKIP() << "cannot bind " << GetParam() << " on this host";
        }
    }
};

// ---- registry ----

TEST(VanRegistry, FindsTcpByNameAndAliases)
{
    const ps_van_component_t *a = nullptr, *b = nullptr, *c = nullptr;
    ASSERT_EQ(ps_van_find("tcp", &a), PS_OK);
    ASSERT_EQ(ps_van_find("zmq", &b), PS_OK);
    ASSERT_EQ(ps_van_find("0", &c), PS_OK);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
    EXPECT_STREQ(a->name, "tcp");
    EXPECT_EQ(a->ops->size, sizeof(ps_van_ops_t));
    const ps_van_component_t *list[16];
    size_t n = ps_van_list(list, 16);
    bool found = false;
    for (size_t i = 0; i < n && i < 16; ++i) {
        found = found || list[i] == a;
    }
    EXPECT_TRUE(found);
}

TEST(VanRegistry, UnknownVanIsNotFound)
{
    const ps_van_component_t *c = nullptr;
    EXPECT_EQ(ps_van_find("nosuchvan", &c), PS_ERR_NOT_FOUND);
    EXPECT_EQ(c, nullptr);
    // Not compiled into this test binary.
    EXPECT_EQ(ps_van_find("ibverbs", &c), PS_ERR_NOT_FOUND);
    EXPECT_EQ(ps_van_find(nullptr, &c), PS_ERR_INVALID_ARG);
}

TEST(VanRegistry, SelectsByUpstreamVariables)
{
    ps_config_clear_overrides();
    const char *name = nullptr;
    auto select = [&]() {
        name = nullptr;
        EXPECT_EQ(ps_van_select_name(&name), PS_OK);
        return std::string(name != nullptr ? name : "(null)");
    };
    // Defaults: DMLC_PS_VAN_TYPE=zmq means the TCP van.
    unsetenv("DMLC_ENABLE_RDMA");
    unsetenv("DMLC_ENABLE_UCX");
    unsetenv("DMLC_PS_VAN_TYPE");
    EXPECT_EQ(select(), "tcp");
    const struct {
        const char *rdma;
        const char *want;
    } cases[] = {{"zmq", "tcp"},       {"0", "tcp"},         {"tcp", "tcp"},
                 {"ibverbs", "ibverbs"}, {"1", "ibverbs"},   {"fabric", "fabric"},
                 {"shm", "shm"},       {"ucx", "ucx"},       {"weird", "weird"}};
    for (const auto &c : cases) {
        ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_RDMA, c.rdma), PS_OK);
        EXPECT_EQ(select(), c.want) << "DMLC_ENABLE_RDMA=" << c.rdma;
    }
    // DMLC_ENABLE_UCX wins over DMLC_ENABLE_RDMA.
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_UCX, "1"), PS_OK);
    EXPECT_EQ(select(), "ucx");
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_UCX, nullptr), PS_OK);
    // Without DMLC_ENABLE_RDMA, DMLC_PS_VAN_TYPE decides.
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_RDMA, nullptr), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_PS_VAN_TYPE, "shm"), PS_OK);
    EXPECT_EQ(select(), "shm");
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_PS_VAN_TYPE, "zmq"), PS_OK);
    EXPECT_EQ(select(), "tcp");
    ps_config_clear_overrides();
    // The name of a van that is not compiled in fails cleanly in find().
    const ps_van_component_t *c = nullptr;
    EXPECT_EQ(ps_van_find("weird", &c), PS_ERR_NOT_FOUND);
}

TEST(VanRegistry, TcpAdvertisesItsCapabilities)
{
    Van v;
    ASSERT_EQ(v.Open(9, "127.0.0.1"), PS_OK);
    ps_van_attr_t attr;
    ASSERT_EQ(v.ops->query(v.van, &attr), PS_OK);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_ZCOPY_SEND);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_RECV_INTO_DEST);
    EXPECT_FALSE(attr.cap_flags & PS_CAP_REMOTE_WRITE);
    EXPECT_FALSE(attr.cap_flags & PS_CAP_DEVICE_MEMORY);
    EXPECT_EQ(attr.max_data_segments, static_cast<uint32_t>(PS_MSG_MAX_DATA));
    EXPECT_GE(attr.max_message_bytes, 1ull << 30);
    EXPECT_GE(attr.num_streams, 1u);
    EXPECT_EQ(v.ops->register_mem(v.van, nullptr), PS_ERR_UNSUPPORTED);
}

// ---- data path ----

TEST_P(TcpVanHosts, SegmentsOfEverySizeArriveIntactAndInOrder)
{
    const char *host = GetParam();
    Van server, worker;
    ASSERT_EQ(server.Open(8, host), PS_OK);
    ASSERT_EQ(worker.Open(9, host), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);

    const std::vector<std::vector<size_t>> shapes = {
        {},           {0},        {1},       {4096},          {4u << 20},
        {8, 4096},    {0, 1, 0},  {13, 12345, 65537, 3},      {1, 1, 1, 1},
        {4u << 20, 0, 7, 4096 + 1}, {1u << 20, 3u << 20},    {100000, 99999, 1, 0},
    };
    uint64_t seq = 0;
    for (int round = 0; round < 3; ++round) {
        for (const auto &sizes : shapes) {
            OutMsg m(8, seq++, sizes);
            ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
        }
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(seq));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    ASSERT_EQ(server.inbox.msgs.size(), seq);
    for (uint64_t i = 0; i < seq; ++i) {
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, i, shapes[i % shapes.size()]));
        EXPECT_EQ(server.inbox.msgs[i].meta.recver, 8);
        EXPECT_TRUE(server.inbox.msgs[i].meta.request);
    }
    uint64_t sent = 0, recv = 0;
    worker.ops->stats(worker.van, &sent, nullptr);
    server.ops->stats(server.van, nullptr, &recv);
    EXPECT_GT(sent, 3u * (12u << 20));
    EXPECT_EQ(sent, recv);
}

TEST_P(TcpVanHosts, RepliesTravelBackWithAndWithoutOwnConnection)
{
    const char *host = GetParam();
    Van server, worker;
    ASSERT_EQ(server.Open(8, host), PS_OK);
    ASSERT_EQ(worker.Open(9, host), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        OutMsg m(8, 1, {16});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    // The server never connected to the worker: the reply rides the
    // worker's connection.
    {
        OutMsg m(9, 2, {4096, 3});
        ASSERT_EQ(server.ops->send(server.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(worker.inbox.WaitMsgs(1));
    // Now with its own connection.
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK); // idempotent
    {
        OutMsg m(9, 3, {5});
        ASSERT_EQ(server.ops->send(server.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(worker.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(worker.inbox.mu);
    EXPECT_TRUE(CheckMsg(worker.inbox.msgs[0], 8, 2, {4096, 3}));
    EXPECT_TRUE(CheckMsg(worker.inbox.msgs[1], 8, 3, {5}));
}

TEST_P(TcpVanHosts, BusyPollDeliversToo)
{
    const char *host = GetParam();
    ps_van_params_t p = DefaultParams();
    p.busy_poll = 1;
    Van a, b;
    ASSERT_EQ(a.Open(8, host, p), PS_OK);
    ASSERT_EQ(b.Open(9, host, p), PS_OK);
    ASSERT_EQ(b.ConnectTo(a, 9), PS_OK);
    // Ping-pong driven from the progress threads.
    std::atomic<int> rounds{0};
    a.inbox.on_msg = [&](const ps_msg_t *in) {
        OutMsg m(9, in->meta.key + 1, {8});
        EXPECT_EQ(a.ops->send(a.van, &m.msg), PS_OK);
    };
    b.inbox.on_msg = [&](const ps_msg_t *in) {
        if (++rounds < 200) {
            OutMsg m(8, in->meta.key + 1, {8});
            EXPECT_EQ(b.ops->send(b.van, &m.msg), PS_OK);
        }
    };
    OutMsg first(8, 0, {8});
    ASSERT_EQ(b.ops->send(b.van, &first.msg), PS_OK);
    ASSERT_TRUE(b.inbox.WaitMsgs(200));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (int i = 0; i < 200; ++i) {
        EXPECT_TRUE(CheckMsg(b.inbox.msgs[i], 8, 2 * i + 1, {8}));
    }
}

INSTANTIATE_TEST_SUITE_P(Loopback, TcpVanHosts, ::testing::Values("127.0.0.1", "::1"));

TEST(TcpVan, ThreeVansRouteEveryReplyToItsRequester)
{
    // One server, two workers; each worker pushes, the server answers every
    // request to whoever sent it (meta.sender, as the connection proved).
    Van server, w1, w2;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(w1.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(w2.Open(11, "127.0.0.1"), PS_OK);
    ASSERT_EQ(w1.ConnectTo(server, 9), PS_OK);
    ASSERT_EQ(w2.ConnectTo(server, 11), PS_OK);
    ASSERT_EQ(server.ConnectTo(w1, 8), PS_OK);
    ASSERT_EQ(server.ConnectTo(w2, 8), PS_OK);
    server.inbox.on_msg = [&](const ps_msg_t *in) {
        // Echo segment 0 back, zero-copy, as a response.
        OutMsg m(in->meta.sender, in->meta.key, {});
        m.msg.meta.request = false;
        EXPECT_EQ(ps_msg_add_data(&m.msg, &in->data[0], PS_DATA_UINT8), PS_OK);
        EXPECT_EQ(server.ops->send(server.van, &m.msg), PS_OK);
    };
    const int kMsgs = 100;
    std::thread t1([&] {
        for (int i = 0; i < kMsgs; ++i) {
            OutMsg m(8, 1000 + i, {static_cast<size_t>(1 + i * 97)});
            EXPECT_EQ(w1.ops->send(w1.van, &m.msg), PS_OK);
        }
    });
    std::thread t2([&] {
        for (int i = 0; i < kMsgs; ++i) {
            OutMsg m(8, 2000 + i, {static_cast<size_t>(1 + i * 89)});
            EXPECT_EQ(w2.ops->send(w2.van, &m.msg), PS_OK);
        }
    });
    t1.join();
    t2.join();
    ASSERT_TRUE(w1.inbox.WaitMsgs(kMsgs));
    ASSERT_TRUE(w2.inbox.WaitMsgs(kMsgs));
    ASSERT_TRUE(server.inbox.WaitMsgs(2 * kMsgs));
    {
        std::lock_guard<std::mutex> lk(w1.inbox.mu);
        for (int i = 0; i < kMsgs; ++i) {
            EXPECT_TRUE(CheckMsg(w1.inbox.msgs[i], 8, 1000 + i, {static_cast<size_t>(1 + i * 97)}));
            EXPECT_FALSE(w1.inbox.msgs[i].meta.request);
        }
    }
    {
        std::lock_guard<std::mutex> lk(w2.inbox.mu);
        for (int i = 0; i < kMsgs; ++i) {
            EXPECT_TRUE(CheckMsg(w2.inbox.msgs[i], 8, 2000 + i, {static_cast<size_t>(1 + i * 89)}));
        }
    }
    server.inbox.on_msg = nullptr;
}

TEST(TcpVan, RecvBufferSteersDataIntoTheCallersBuffer)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);

    // The worker names where segment 1 of the response with key 77 goes:
    // 1 MB + 5 bytes at offset 64 of its own buffer.
    const size_t len = (1u << 20) + 5;
    std::vector<uint8_t> user(len + 128, 0xee);
    ps_slice_t dst;
    ASSERT_EQ(ps_slice_wrap(user.data(), user.size(), nullptr, nullptr, &dst), PS_OK);
    ASSERT_EQ(ps_slice_narrow(&dst, 64, len + 32), PS_OK);
    {
        std::lock_guard<std::mutex> lk(worker.inbox.mu);
        worker.inbox.dest[{77, 1}] = dst;
    }
    // A destination that is too small is not used (the van's own buffer is).
    ps_slice_t small;
    ASSERT_EQ(ps_slice_alloc(10, 0, &small), PS_OK);
    {
        std::lock_guard<std::mutex> lk(worker.inbox.mu);
        worker.inbox.dest[{78, 1}] = small;
    }
    {
        OutMsg m(9, 77, {8, len});
        ASSERT_EQ(server.ops->send(server.van, &m.msg), PS_OK);
        OutMsg m2(9, 78, {8, 4096});
        ASSERT_EQ(server.ops->send(server.van, &m2.msg), PS_OK);
    }
    ASSERT_TRUE(worker.inbox.WaitMsgs(2));
    {
        std::lock_guard<std::mutex> lk(worker.inbox.mu);
        const Received &r = worker.inbox.msgs[0];
        EXPECT_TRUE(CheckMsg(r, 8, 77, {8, len}));
        // Zero copy: the delivered slice is the caller's memory.
        EXPECT_EQ(r.ptrs[1], user.data() + 64);
        EXPECT_NE(r.ptrs[0], user.data() + 64);
        EXPECT_TRUE(CheckMsg(worker.inbox.msgs[1], 8, 78, {8, 4096}));
    }
    for (size_t i = 0; i < len; ++i) {
        ASSERT_EQ(user[64 + i], Pattern(77, 1, i)) << i;
    }
    // Around it nothing was touched.
    for (size_t i = 0; i < 64; ++i) {
        ASSERT_EQ(user[i], 0xee);
    }
    for (size_t i = 64 + len; i < user.size(); ++i) {
        ASSERT_EQ(user[i], 0xee);
    }
    EXPECT_GE(worker.inbox.recv_buffer_calls.load(), 4);
    worker.Close(); // before `user` goes away
}

TEST(TcpVan, ManyConcurrentSendersKeepPerThreadOrder)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    const int kThreads = 8, kPerThread = 150;
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                uint64_t seq = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(i);
                size_t len = (i % 5 == 0) ? 70000 : static_cast<size_t>(1 + (i * 37) % 3000);
                OutMsg m(8, seq, {8, len});
                if (worker.ops->send(worker.van, &m.msg) != PS_OK) {
                    errors++;
                }
            }
        });
    }
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(errors.load(), 0);
    ASSERT_TRUE(server.inbox.WaitMsgs(kThreads * kPerThread));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    std::vector<int> next(kThreads, 0);
    for (const Received &r : server.inbox.msgs) {
        int t = static_cast<int>(r.meta.key >> 32);
        int i = static_cast<int>(r.meta.key & 0xffffffffu);
        ASSERT_GE(t, 0);
        ASSERT_LT(t, kThreads);
        EXPECT_EQ(i, next[t]) << "thread " << t << " out of order";
        next[t] = i + 1;
        size_t len = (i % 5 == 0) ? 70000 : static_cast<size_t>(1 + (i * 37) % 3000);
        EXPECT_TRUE(CheckMsg(r, 9, r.meta.key, {8, len}));
    }
}

TEST(TcpVan, QueuedSendsCompleteWhenThePeerReadsAgain)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        server.inbox.gate_closed = true;
    }
    // The server's progress thread stops in deliver() on the first message
    // and reads nothing more; the worker sends far more than the socket
    // buffers hold. send() must return at once every time (the rest is
    // queued), or this test never reaches OpenGate().
    const int kMsgs = 24;
    const size_t kLen = 4u << 20;
    {
        OutMsg first(8, 0, {8});
        ASSERT_EQ(worker.ops->send(worker.van, &first.msg), PS_OK);
    }
    {
        std::unique_lock<std::mutex> lk(server.inbox.mu);
        ASSERT_TRUE(server.inbox.cv.wait_for(lk, kWait, [&] { return server.inbox.in_gate.load(); }));
    }
    for (int i = 1; i <= kMsgs; ++i) {
        OutMsg m(8, static_cast<uint64_t>(i), {8, kLen});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    // The slices are released by OutMsg; the van holds its own references.
    uint64_t sent_before = 0;
    worker.ops->stats(worker.van, &sent_before, nullptr);
    EXPECT_LT(sent_before, static_cast<uint64_t>(kMsgs) * kLen); // some really is queued
    server.inbox.OpenGate();
    ASSERT_TRUE(server.inbox.WaitMsgs(kMsgs + 1));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    for (int i = 1; i <= kMsgs; ++i) {
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, static_cast<uint64_t>(i), {8, kLen}));
    }
}

TEST(TcpVan, PeerClosingIsReported)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    // One step after the other, so that the server knows both connections
    // as node 9's before the worker goes: the worker's message can only
    // travel on its own connection (which the server then has identified by
    // its hello), the server's on the server's. Connecting both at once let
    // the worker's hello still be unread when the server's own connection
    // failed; its connection then failed as a second, later-identified one,
    // a second report this test is not about.
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        OutMsg m(8, 1, {1});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    {
        OutMsg m2(9, 2, {1});
        ASSERT_EQ(server.ops->send(server.van, &m2.msg), PS_OK);
    }
    ASSERT_TRUE(worker.inbox.WaitMsgs(1));
    worker.Close();
    ASSERT_TRUE(server.inbox.WaitFailure(1));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        EXPECT_EQ(server.inbox.failures[0].first, 9);
        EXPECT_EQ(server.inbox.failures[0].second, PS_ERR_PEER_GONE);
    }
    // Once: both connections to node 9 went, one report.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        EXPECT_EQ(server.inbox.failures.size(), 1u);
    }
    // Sending to it now fails cleanly.
    OutMsg m(9, 3, {1});
    EXPECT_NE(server.ops->send(server.van, &m.msg), PS_OK);
}

TEST(TcpVan, DisconnectIsQuietLocallyAndSendsThenFail)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        OutMsg m(8, 1, {1});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    worker.ops->disconnect(worker.van, 8);
    OutMsg m(8, 2, {1});
    EXPECT_EQ(worker.ops->send(worker.van, &m.msg), PS_ERR_UNREACHABLE);
    // The server sees node 9 leave.
    ASSERT_TRUE(server.inbox.WaitFailure(1));
    std::lock_guard<std::mutex> lk(worker.inbox.mu);
    EXPECT_TRUE(worker.inbox.failures.empty());
}

TEST(TcpVan, UnassignedNodeGetsAnsweredAndThenAnnouncesItsId)
{
    // The scheduler flow: a node without an id registers; the scheduler
    // connects back to the address it gave and answers; the node learns its
    // id and re-announces itself.
    Van sched, node;
    ASSERT_EQ(sched.Open(PS_SCHEDULER_ID, "127.0.0.1"), PS_OK);
    ASSERT_EQ(node.Open(PS_NODE_EMPTY, "127.0.0.1"), PS_OK);
    ASSERT_EQ(node.ConnectTo(sched, PS_NODE_EMPTY), PS_OK);
    {
        OutMsg m(PS_SCHEDULER_ID, 1, {});
        m.msg.meta.control.cmd = PS_CTRL_ADD_NODE;
        ps_node_t me = node.node;
        me.role = PS_ROLE_WORKER;
        m.msg.meta.control.nodes = &me;
        m.msg.meta.control.num_nodes = 1;
        const char body[] = "hello body";
        m.msg.meta.body = reinterpret_cast<const uint8_t *>(body);
        m.msg.meta.body_len = sizeof(body);
        ASSERT_EQ(node.ops->send(node.van, &m.msg), PS_OK);
        m.msg.meta.control.nodes = nullptr;
        m.msg.meta.control.num_nodes = 0;
        m.msg.meta.body = nullptr;
        m.msg.meta.body_len = 0;
    }
    ASSERT_TRUE(sched.inbox.WaitMsgs(1));
    ps_node_t assigned;
    {
        std::lock_guard<std::mutex> lk(sched.inbox.mu);
        const Received &r = sched.inbox.msgs[0];
        EXPECT_EQ(r.meta.sender, PS_NODE_EMPTY);
        EXPECT_EQ(r.meta.control.cmd, PS_CTRL_ADD_NODE);
        ASSERT_EQ(r.nodes.size(), 1u);
        EXPECT_EQ(r.body, std::string("hello body", sizeof("hello body")));
        assigned = r.nodes[0];
    }
    assigned.id = 9;
    ASSERT_EQ(sched.ops->connect(sched.van, &assigned, PS_SCHEDULER_ID), PS_OK);
    {
        OutMsg m(9, 2, {4});
        m.msg.meta.control.cmd = PS_CTRL_ADD_NODE;
        ASSERT_EQ(sched.ops->send(sched.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(node.inbox.WaitMsgs(1));
    {
        std::lock_guard<std::mutex> lk(node.inbox.mu);
        EXPECT_EQ(node.inbox.msgs[0].meta.sender, PS_SCHEDULER_ID);
        EXPECT_EQ(node.inbox.msgs[0].meta.control.cmd, PS_CTRL_ADD_NODE);
    }
    ASSERT_EQ(node.ops->set_node_id(node.van, 9), PS_OK);
    {
        OutMsg m(PS_SCHEDULER_ID, 3, {2});
        ASSERT_EQ(node.ops->send(node.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(sched.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(sched.inbox.mu);
    EXPECT_TRUE(CheckMsg(sched.inbox.msgs[1], 9, 3, {2}));
}

TEST(TcpVan, ControlMessageWithManyNodesArrivesWhole)
{
    Van sched, node;
    ASSERT_EQ(sched.Open(PS_SCHEDULER_ID, "127.0.0.1"), PS_OK);
    ASSERT_EQ(node.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(sched.ConnectTo(node, PS_SCHEDULER_ID), PS_OK);
    // More nodes than the van's first scratch array holds.
    std::vector<ps_node_t> nodes(300);
    for (size_t i = 0; i < nodes.size(); ++i) {
        ps_node_init(&nodes[i]);
        nodes[i].id = static_cast<int32_t>(8 + i);
        nodes[i].role = (i % 2) ? PS_ROLE_WORKER : PS_ROLE_SERVER;
        snprintf(nodes[i].hostname, sizeof(nodes[i].hostname), "10.0.%zu.%zu", i / 256, i % 256);
        nodes[i].num_ports = 1;
        nodes[i].ports[0] = static_cast<int32_t>(20000 + i);
        nodes[i].dev_types[0] = PS_DEV_CPU;
    }
    {
        ps_msg_t m;
        ps_msg_init(&m);
        m.meta.recver = 9;
        m.meta.control.cmd = PS_CTRL_ADD_NODE;
        // The node list may ride in the message rather than the meta.
        m.nodes = nodes.data();
        m.num_nodes = static_cast<uint32_t>(nodes.size());
        ASSERT_EQ(sched.ops->send(sched.van, &m), PS_OK);
        m.nodes = nullptr;
        m.num_nodes = 0;
        ps_msg_release(&m);
    }
    ASSERT_TRUE(node.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(node.inbox.mu);
    const Received &r = node.inbox.msgs[0];
    EXPECT_EQ(r.meta.sender, PS_SCHEDULER_ID);
    ASSERT_EQ(r.nodes.size(), nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
        EXPECT_TRUE(ps_node_equal(&r.nodes[i], &nodes[i])) << i;
    }
}

TEST(TcpVan, ConnectRetriesUntilThePeerListens)
{
    // Find a free port, then connect before anyone listens on it.
    int port;
    {
        Van probe;
        ASSERT_EQ(probe.Open(8, "127.0.0.1"), PS_OK);
        port = probe.Port();
    }
    Van worker;
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ps_node_t target;
    ps_node_init(&target);
    target.id = 8;
    snprintf(target.hostname, sizeof(target.hostname), "127.0.0.1");
    target.num_ports = 1;
    target.ports[0] = port;
    ASSERT_EQ(worker.ops->connect(worker.van, &target, 9), PS_OK);
    {
        // Queued behind the connection attempt.
        OutMsg m(8, 5, {3000});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Van server;
    ASSERT_EQ(server.Open(8, "127.0.0.1", DefaultParams(), port), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    EXPECT_TRUE(CheckMsg(server.inbox.msgs[0], 9, 5, {3000}));
}

TEST(TcpVan, ConnectGivesUpAfterItsTimeout)
{
    int port;
    {
        Van probe;
        ASSERT_EQ(probe.Open(8, "127.0.0.1"), PS_OK);
        port = probe.Port();
    }
    ps_van_params_t p = DefaultParams();
    p.connect_timeout_ms = 300;
    Van worker;
    ASSERT_EQ(worker.Open(9, "127.0.0.1", p), PS_OK);
    ps_node_t target;
    ps_node_init(&target);
    target.id = 8;
    snprintf(target.hostname, sizeof(target.hostname), "127.0.0.1");
    target.num_ports = 1;
    target.ports[0] = port;
    ASSERT_EQ(worker.ops->connect(worker.van, &target, 9), PS_OK);
    ASSERT_TRUE(worker.inbox.WaitFailure(1));
    std::lock_guard<std::mutex> lk(worker.inbox.mu);
    EXPECT_EQ(worker.inbox.failures[0].first, 8);
    EXPECT_EQ(worker.inbox.failures[0].second, PS_ERR_UNREACHABLE);
}

// ---- hostile input ----

int RawConnect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    timeval tv{30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

// True once the van closed the raw connection (recv sees EOF or a reset).
bool ClosedByPeer(int fd)
{
    char buf[64];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            return true;
        }
        if (n < 0) {
            return false; // timed out: still open
        }
    }
}

void SendAll(int fd, const void *p, size_t len)
{
    const char *c = static_cast<const char *>(p);
    while (len > 0) {
        ssize_t n = send(fd, c, len, MSG_NOSIGNAL);
        if (n <= 0) {
            return; // the van may close on us halfway: fine
        }
        c += n;
        len -= static_cast<size_t>(n);
    }
}

TEST(TcpVan, GarbageClosesThatConnectionOnly)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);

    // Plain garbage.
    int fd = RawConnect(server.Port());
    ASSERT_GE(fd, 0);
    const char junk[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
    SendAll(fd, junk, sizeof(junk));
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);

    // A well-formed header whose meta length breaks the limit.
    fd = RawConnect(server.Port());
    ASSERT_GE(fd, 0);
    uint8_t hdr[16] = {'P', 'S', 'F', '1', 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
    SendAll(fd, hdr, sizeof(hdr));
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);

    // A valid frame that is not a hello.
    fd = RawConnect(server.Port());
    ASSERT_GE(fd, 0);
    {
        ps_meta_t meta;
        ps_meta_init(&meta);
        meta.sender = 1; // claims to be the scheduler
        meta.recver = 8;
        uint8_t buf[512];
        size_t mlen = 0, hlen = 0;
        ASSERT_EQ(ps_meta_encode(&meta, buf + 16, sizeof(buf) - 16, &mlen), PS_OK);
        ASSERT_EQ(ps_frame_header_build(0, static_cast<uint32_t>(mlen), nullptr, 0, nullptr, buf,
                                        16, &hlen),
                  PS_OK);
        SendAll(fd, buf, hlen + mlen);
    }
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);

    // A data frame whose segment is larger than the limit.
    fd = RawConnect(server.Port());
    ASSERT_GE(fd, 0);
    uint8_t big[24] = {'P', 'S', 'F', '1', 1, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0,
                       0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    SendAll(fd, big, sizeof(big));
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);

    // None of it reached the postoffice, nobody identified was reported,
    // and the real peer still gets through.
    {
        OutMsg m(8, 42, {4096, 1});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    EXPECT_EQ(server.inbox.msgs.size(), 1u);
    EXPECT_TRUE(CheckMsg(server.inbox.msgs[0], 9, 42, {4096, 1}));
    EXPECT_TRUE(server.inbox.failures.empty());
}

TEST(TcpVan, ForgedHelloTagIsRefusedOnSend)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    OutMsg m(8, 1, {1});
    memcpy(m.msg.meta.van_data, "PSTCPH", 6);
    m.msg.meta.van_data_len = 18;
    EXPECT_EQ(worker.ops->send(worker.van, &m.msg), PS_ERR_INVALID_ARG);
    OutMsg nobody(PS_NODE_EMPTY, 2, {1});
    EXPECT_EQ(worker.ops->send(worker.van, &nobody.msg), PS_ERR_INVALID_ARG);
    OutMsg stranger(12345, 3, {1});
    EXPECT_EQ(worker.ops->send(worker.van, &stranger.msg), PS_ERR_UNREACHABLE);
}

// ---- bind ----

TEST(TcpVan, PortAlreadyTakenIsAddressInUse)
{
    Van a;
    ASSERT_EQ(a.Open(8, "127.0.0.1"), PS_OK);
    Van b;
    EXPECT_EQ(b.Open(9, "127.0.0.1", DefaultParams(), a.Port()), PS_ERR_ADDRESS_IN_USE);
    // A second bind on a listening van is refused.
    ps_node_t again = a.node;
    EXPECT_EQ(a.ops->bind(a.van, &again, 0), PS_ERR_BAD_STATE);
}

TEST(TcpVan, RandomPortsAreInUpstreamRange)
{
    Van a;
    ASSERT_EQ(a.Open(8, "127.0.0.1"), PS_OK);
    EXPECT_GE(a.Port(), 10000);
    EXPECT_LT(a.Port(), 50000);
    EXPECT_EQ(a.node.num_ports, 1u);
}

TEST(TcpVan, BindAnyListensOnTheWildcard)
{
    ps_van_params_t p = DefaultParams();
    p.bind_any = 1;
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", p), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    OutMsg m(8, 1, {10});
    ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
}

TEST(TcpVan, CloseWithQueuedDataAndUnreachablePeerIsBounded)
{
    int port;
    {
        Van probe;
        ASSERT_EQ(probe.Open(8, "127.0.0.1"), PS_OK);
        port = probe.Port();
    }
    Van worker;
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ps_node_t target;
    ps_node_init(&target);
    target.id = 8;
    snprintf(target.hostname, sizeof(target.hostname), "127.0.0.1");
    target.num_ports = 1;
    target.ports[0] = port;
    ASSERT_EQ(worker.ops->connect(worker.van, &target, 9), PS_OK);
    for (int i = 0; i < 10; ++i) {
        OutMsg m(8, static_cast<uint64_t>(i), {1000});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    worker.Close(); // returns; queued slices are released (asan checks leaks)
}


// ---- several connections per peer (PS_TCP_CONNS_PER_PEER) ----

ps_van_params_t StreamsParams(int n)
{
    ps_van_params_t p = DefaultParams();
    p.conns_per_peer = n;
    return p;
}

class TcpVanStreams : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Streams, TcpVanStreams, ::testing::Values(2, 3, 4, 8));

TEST_P(TcpVanStreams, StripedAndPlainFramesArriveIntactAndInOrder)
{
    const int n = GetParam();
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1", StreamsParams(n)), PS_OK);
    ps_van_attr_t attr;
    ASSERT_EQ(worker.ops->query(worker.van, &attr), PS_OK);
    EXPECT_EQ(attr.num_streams, static_cast<uint32_t>(n));
    EXPECT_NE(attr.cap_flags & PS_CAP_MULTI_STREAM, 0u);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);

    // Around the striping threshold (256 KiB), segment boundaries inside
    // and across chunks, empty segments, small frames in between.
    const std::vector<std::vector<size_t>> shapes = {
        {4u << 20},          {8},          {(256u << 10) - 1},    {256u << 10},
        {(256u << 10) + 1},  {},           {0, 1, 0},             {1u << 20, 3u << 20},
        {100000, 300000, 1, 0}, {8, (4u << 20) + 1}, {3, 5, 7, 600000}, {1, 1, 1, 1},
        {(1u << 20) + 4095, 4097},
    };
    uint64_t seq = 0;
    for (int round = 0; round < 3; ++round) {
        for (const auto &sizes : shapes) {
            OutMsg m(8, seq++, sizes);
            ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
        }
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(seq));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    ASSERT_EQ(server.inbox.msgs.size(), seq);
    for (uint64_t i = 0; i < seq; ++i) {
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, i, shapes[i % shapes.size()]));
    }
    uint64_t sent = 0, recv = 0;
    worker.ops->stats(worker.van, &sent, nullptr);
    server.ops->stats(server.van, nullptr, &recv);
    EXPECT_EQ(sent, recv);
}

TEST_P(TcpVanStreams, ConcurrentSendersKeepPerThreadOrder)
{
    const int n = GetParam();
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    const int kThreads = 4, kPerThread = 40;
    auto len_of = [](int i) -> size_t {
        return i % 3 == 0 ? (300000 + 4096 * static_cast<size_t>(i)) : 1 + 37 * static_cast<size_t>(i);
    };
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                uint64_t seq = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(i);
                OutMsg m(8, seq, {8, len_of(i)});
                if (worker.ops->send(worker.van, &m.msg) != PS_OK) {
                    errors++;
                }
            }
        });
    }
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(errors.load(), 0);
    ASSERT_TRUE(server.inbox.WaitMsgs(kThreads * kPerThread));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    std::vector<int> next(kThreads, 0);
    for (const Received &r : server.inbox.msgs) {
        int t = static_cast<int>(r.meta.key >> 32);
        int i = static_cast<int>(r.meta.key & 0xffffffffu);
        ASSERT_GE(t, 0);
        ASSERT_LT(t, kThreads);
        EXPECT_EQ(i, next[t]) << "thread " << t << " out of order";
        next[t] = i + 1;
        EXPECT_TRUE(CheckMsg(r, 9, r.meta.key, {8, len_of(i)}));
    }
}

TEST_P(TcpVanStreams, StripedDataLandsInTheCallersBuffer)
{
    const int n = GetParam();
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    const size_t len = (3u << 20) + 5;
    std::vector<uint8_t> user(len + 128, 0xee);
    ps_slice_t dst;
    ASSERT_EQ(ps_slice_wrap(user.data(), user.size(), nullptr, nullptr, &dst), PS_OK);
    ASSERT_EQ(ps_slice_narrow(&dst, 64, len), PS_OK);
    {
        std::lock_guard<std::mutex> lk(worker.inbox.mu);
        worker.inbox.dest[{77, 1}] = dst;
    }
    {
        OutMsg m(9, 77, {8, len});
        ASSERT_EQ(server.ops->send(server.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(worker.inbox.WaitMsgs(1));
    {
        std::lock_guard<std::mutex> lk(worker.inbox.mu);
        EXPECT_TRUE(CheckMsg(worker.inbox.msgs[0], 8, 77, {8, len}));
        EXPECT_EQ(worker.inbox.msgs[0].ptrs[1], user.data() + 64);
    }
    for (size_t i = 0; i < 64; ++i) {
        ASSERT_EQ(user[i], 0xee);
    }
    for (size_t i = 64 + len; i < user.size(); ++i) {
        ASSERT_EQ(user[i], 0xee);
    }
    worker.Close(); // before `user` goes away
}

TEST_P(TcpVanStreams, PeerLeavingDeliversWhatItSentThenFailsOnce)
{
    const int n = GetParam();
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        server.inbox.gate_closed = true;
    }
    {
        OutMsg first(8, 0, {8});
        ASSERT_EQ(worker.ops->send(worker.van, &first.msg), PS_OK);
    }
    {
        std::unique_lock<std::mutex> lk(server.inbox.mu);
        ASSERT_TRUE(server.inbox.cv.wait_for(lk, kWait, [&] { return server.inbox.in_gate.load(); }));
    }
    // While the server is stuck, the worker sends more and leaves: every
    // stream ends with EOF, stream 0 with messages still unread before it.
    // Whichever EOF the server sees first, it reads the others dry before
    // it reports the peer.
    const int kMsgs = 10;
    for (int i = 1; i <= kMsgs; ++i) {
        OutMsg m(8, static_cast<uint64_t>(i), {8, static_cast<size_t>(100 * i)});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    worker.Close();
    server.inbox.OpenGate();
    ASSERT_TRUE(server.inbox.WaitFailure(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    ASSERT_EQ(server.inbox.msgs.size(), static_cast<size_t>(kMsgs + 1));
    for (int i = 1; i <= kMsgs; ++i) {
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, static_cast<uint64_t>(i),
                             {8, static_cast<size_t>(100 * i)}));
    }
    ASSERT_EQ(server.inbox.failures.size(), 1u);
    EXPECT_EQ(server.inbox.failures[0].first, 9);
    EXPECT_EQ(server.inbox.failures[0].second, PS_ERR_PEER_GONE);
    OutMsg m(9, 99, {1});
    EXPECT_NE(server.ops->send(server.van, &m.msg), PS_OK);
}

TEST_P(TcpVanStreams, PeerDyingMidStripedFrameFailsCleanly)
{
    const int n = GetParam();
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1", StreamsParams(n)), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        OutMsg first(8, 0, {8});
        ASSERT_EQ(worker.ops->send(worker.van, &first.msg), PS_OK);
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    // Far more than the sockets hold, then the worker goes at once: some
    // striped frame is cut. The server reports the peer once and never
    // hangs; what it delivered is intact.
    const size_t kLen = 8u << 20;
    for (int i = 1; i <= 8; ++i) {
        OutMsg m(8, static_cast<uint64_t>(i), {kLen});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    worker.Close();
    ASSERT_TRUE(server.inbox.WaitFailure(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    EXPECT_EQ(server.inbox.failures.size(), 1u);
    for (size_t i = 1; i < server.inbox.msgs.size(); ++i) {
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, i, {kLen}));
    }
}

TEST(TcpVanStreamsMixed, DifferentStreamCountsStillTalk)
{
    // One van asks for 2 streams, the other for 1: both sides still talk
    // (striping follows the sender's own group).
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", StreamsParams(1)), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1", StreamsParams(2)), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    {
        OutMsg a(8, 1, {1u << 20});
        ASSERT_EQ(worker.ops->send(worker.van, &a.msg), PS_OK);
        OutMsg b(9, 2, {1u << 20});
        ASSERT_EQ(server.ops->send(server.van, &b.msg), PS_OK);
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    ASSERT_TRUE(worker.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    EXPECT_TRUE(CheckMsg(server.inbox.msgs[0], 9, 1, {1u << 20}));
    std::lock_guard<std::mutex> lk2(worker.inbox.mu);
    EXPECT_TRUE(CheckMsg(worker.inbox.msgs[0], 8, 2, {1u << 20}));
}

// ---- busy polling: a waiting thread drives the van (progress op) ----

TEST(TcpVanProgress, AWaiterDrivesTheLoopAndHandsItBack)
{
    ps_van_params_t p = DefaultParams();
    p.busy_poll = 1;
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1", p), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1", p), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    int (*progress)(ps_van_t *, unsigned) = ps_van_progress_op(server.van);
    ASSERT_NE(progress, nullptr);
    // Deliveries run on the driving thread once the progress thread stood
    // back: this thread sends and drives until it handled events itself.
    std::atomic<bool> driver_delivered{false};
    std::thread::id me = std::this_thread::get_id();
    server.inbox.on_msg = [&](const ps_msg_t *) {
        if (std::this_thread::get_id() == me) {
            driver_delivered = true;
        }
    };
    auto deadline = std::chrono::steady_clock::now() + kWait;
    uint64_t seq = 0;
    int handled = 0;
    while (!driver_delivered && std::chrono::steady_clock::now() < deadline) {
        OutMsg m(8, seq++, {16});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
        for (int i = 0; i < 1000 && server.inbox.Count() < seq; ++i) {
            int r = progress(server.van, 16);
            ASSERT_GE(r, 0);
            handled += r;
        }
    }
    EXPECT_TRUE(driver_delivered.load());
    EXPECT_GT(handled, 0);
    // Hand the loop back; the van's own thread delivers again.
    EXPECT_EQ(progress(server.van, 0), 0);
    server.inbox.on_msg = nullptr;
    size_t before = server.inbox.Count();
    for (int i = 0; i < 5; ++i) {
        OutMsg m(8, seq++, {16, 300000});
        ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(before + 5));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    for (uint64_t i = 0; i < seq; ++i) {
        EXPECT_EQ(server.inbox.msgs[i].meta.key, i);
    }
}

TEST(TcpVanProgress, OtherVansGetTheNoOp)
{
    ps_van_ops_t ops;
    memset(&ops, 0, sizeof(ops));
    ops.size = offsetof(ps_van_ops_t, progress); // built before the op existed
    ps_van_t v = {&ops, "old"};
    EXPECT_EQ(ps_van_progress_op(&v), nullptr);
    ops.size = sizeof(ops);
    ops.progress = ps_van_no_progress;
    EXPECT_EQ(ps_van_progress_op(&v), nullptr);
    EXPECT_EQ(ps_van_no_progress(&v, 16), 0);
}

}  // namespace

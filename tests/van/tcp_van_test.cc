// Van-level tests of the TCP van: two or three vans in one process over
// loopback (IPv4 and IPv6), driven through the registry and the ops table
// exactly as the postoffice drives them. The tests every van passes the
// same way are the conformance suite (tests/van/van_conformance.h),
// instantiated here for the tcp van; this file holds the rest (registry,
// control messages, hostile input, several streams per peer).
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
#include "tests/van/van_conformance.h"
#include "tests/van/van_harness.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/config.h"
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

// ---- the conformance suite ----

VanConfig TcpConfig(const char *name, const char *host)
{
    VanConfig c;
    c.name = name;
    c.van = "tcp";
    c.host = host;
    // A closed peer is EOF on its sockets: always "gone", never a link error.
    c.peer_close_statuses = {PS_ERR_PEER_GONE};
    // The hello's van_data (tcp_wire.c): "PSTCPH" and 12 bytes more.
    c.hello_tag = "PSTCPH";
    c.hello_len = 18;
    // Bytes count as sent once the socket took them.
    c.sent_counts_taken_bytes = true;
    // Sockets carry no one-sided writes; streams per peer are configurable
    // (PS_TCP_CONNS_PER_PEER), so any count of at least one will do.
    c.caps_clear = PS_CAP_REMOTE_WRITE;
    return c;
}

INSTANTIATE_TEST_SUITE_P(Tcp, VanConformance,
                         ::testing::Values(TcpConfig("ipv4", "127.0.0.1"), TcpConfig("ipv6", "::1")),
                         VanConfigName);

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

// Listed in name order, whatever order they registered in (constructors
// run in link order, which link-time optimisation changes).
TEST(VanRegistry, ListedInNameOrder)
{
    static const ps_van_ops_t none = {};
    static const ps_van_component_t late = {"zz-test", nullptr, &none, nullptr};
    static const ps_van_component_t early = {"aa-test", nullptr, &none, nullptr};
    ps_van_register(&late);
    ps_van_register(&early);
    const ps_van_component_t *list[16];
    size_t n = ps_van_list(list, 16);
    ASSERT_GE(n, 3u); // tcp and the two
    EXPECT_EQ(&early, list[0]);
    EXPECT_EQ(&late, list[n - 1]);
    for (size_t i = 1; i < n && i < 16; ++i)
        EXPECT_LT(strcmp(list[i - 1]->name, list[i]->name), 0)
            << list[i - 1]->name << " before " << list[i]->name;
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

// ---- control messages ----

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
    // and across chunks, empty segments, small frames in between; in the
    // second round every segment starts 16 bytes past a 64-byte boundary
    // (the large ones leave as they are or from an aligned copy).
    const std::vector<std::vector<size_t>> shapes = {
        {4u << 20},          {8},          {(256u << 10) - 1},    {256u << 10},
        {(256u << 10) + 1},  {},           {0, 1, 0},             {1u << 20, 3u << 20},
        {100000, 300000, 1, 0}, {8, (4u << 20) + 1}, {3, 5, 7, 600000}, {1, 1, 1, 1},
        {(1u << 20) + 4095, 4097},
    };
    uint64_t seq = 0;
    for (int round = 0; round < 3; ++round) {
        for (const auto &sizes : shapes) {
            OutMsg m(8, seq++, sizes, round == 1 ? 16 : 0);
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
    // Every third message big enough to be striped.
    SendConcurrentlyAndCheckOrder(worker, server, 4, 40, [](int i) -> size_t {
        return i % 3 == 0 ? (300000 + 4096 * static_cast<size_t>(i)) : 1 + 37 * static_cast<size_t>(i);
    });
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

// ---- segments still being written (PS_CAP_SEND_AS_WRITTEN) ----

// A producer writing segment `seg` of a message's buffer piece by piece on
// a thread of its own (the copy out of a device, in the apps), the pattern
// of `seq` replacing junk; it fails after `fail_at` bytes when set.
struct Producer {
    ps_slice_t slice;
    std::vector<uint8_t> want;
    std::atomic<size_t> written{0};
    std::atomic<bool> failed{false};
    std::atomic<int> waits{0};
    size_t fail_at = SIZE_MAX;
    std::function<void()> before_last; // runs before the last piece is written
    std::thread thread;

    Producer(OutMsg &m, uint64_t seq, unsigned seg)
    {
        // On a page of its own, as a staging block is (an unaligned one
        // would be waited for whole: the van may send it from an aligned
        // copy).
        EXPECT_EQ(ps_slice_alloc(m.msg.data[seg].len, 4096, &slice), PS_OK);
        ps_slice_unref(&m.msg.data[seg]);
        m.msg.data[seg] = ps_slice_ref(&slice);
        uint8_t *p = static_cast<uint8_t *>(ps_slice_ptr(&slice));
        for (size_t i = 0; i < slice.len; ++i) {
            want.push_back(Pattern(seq, seg, i));
            p[i] = 0xee;
        }
        ps_buf_set_written_hook(slice.buf, Written, this);
    }
    void Start(size_t piece, int pause_us)
    {
        thread = std::thread([this, piece, pause_us] {
            uint8_t *p = static_cast<uint8_t *>(ps_slice_ptr(&slice));
            for (size_t off = 0; off < slice.len; off += piece) {
                std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
                size_t n = std::min(piece, slice.len - off);
                if (off + n == slice.len && before_last)
                    before_last();
                if (off + n > fail_at) {
                    failed = true;
                    return;
                }
                memcpy(p + off, want.data() + off, n);
                written.store(off + n, std::memory_order_release);
            }
        });
    }
    ~Producer()
    {
        if (thread.joinable())
            thread.join();
        ps_slice_unref(&slice);
    }
    static ps_status_t Written(void *arg, int wait, size_t beyond, size_t *end_p)
    {
        auto *pr = static_cast<Producer *>(arg);
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (;;) {
            size_t end = pr->slice.off + pr->written.load(std::memory_order_acquire);
            *end_p = end;
            if (pr->failed)
                return PS_ERR_DEVICE;
            if (!wait || end > beyond || end == pr->slice.off + pr->slice.len)
                return PS_OK;
            if (std::chrono::steady_clock::now() > until)
                return PS_ERR_TIMED_OUT;
            pr->waits++;
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }
};

// Written pieces go out while the rest is written: the frame arrives whole
// and right although its buffer held junk when the send began (the van
// sent nothing past what the producer had written), and the sender waited
// for the producer.
TEST(TcpVanAsWritten, SegmentsGoOutAsTheyAreWritten)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ps_van_attr_t attr;
    ASSERT_EQ(worker.ops->query(worker.van, &attr), PS_OK);
    EXPECT_NE(attr.cap_flags & PS_CAP_SEND_AS_WRITTEN, 0u);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        OutMsg first(8, 0, {8});
        ASSERT_EQ(worker.ops->send(worker.van, &first.msg), PS_OK);
        ASSERT_TRUE(server.inbox.WaitMsgs(1));
    }

    const std::vector<size_t> sizes = {16, (3u << 20) + 5, 100};
    OutMsg m(8, 1, sizes);
    Producer pr(m, 1, 1);
    uint64_t midway = 0;
    pr.before_last = [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        server.ops->stats(server.van, nullptr, &midway);
    };
    pr.Start(256u << 10, 2000);
    ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    EXPECT_GT(pr.waits.load(), 0);
    EXPECT_GT(midway, 2u << 20); // the front had arrived before the end was written
    OutMsg after(8, 2, {1000});
    ASSERT_EQ(worker.ops->send(worker.van, &after.msg), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(3));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    EXPECT_TRUE(CheckMsg(server.inbox.msgs[1], 9, 1, sizes));
    EXPECT_TRUE(CheckMsg(server.inbox.msgs[2], 9, 2, {1000}));
}

// A peer that does not read: the socket fills before the segment is
// written, and the rest is queued once the producer is done.
TEST(TcpVanAsWritten, FullSocketQueuesTheRestOnceWritten)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    server.inbox.gate_closed = true;
    OutMsg first(8, 1, {100});
    ASSERT_EQ(worker.ops->send(worker.van, &first.msg), PS_OK);
    const std::vector<size_t> sizes = {32u << 20};
    OutMsg m(8, 2, sizes);
    Producer pr(m, 2, 0);
    pr.Start(1u << 20, 500);
    ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
    EXPECT_EQ(pr.written.load(), sizes[0]); // queued only once all was written
    server.inbox.OpenGate();
    ASSERT_TRUE(server.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    EXPECT_TRUE(CheckMsg(server.inbox.msgs[1], 9, 2, sizes));
}

// A producer that fails half-way: the send fails, and with part of the
// frame out the connection goes (the server sees it end mid-frame and
// reports the worker), never a frame of junk delivered.
TEST(TcpVanAsWritten, AProducerFailingHalfWayClosesTheConnection)
{
    Van server, worker;
    ASSERT_EQ(server.Open(8, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.Open(9, "127.0.0.1"), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    {
        OutMsg first(8, 0, {8}); // the connection is up: the frame goes as written
        ASSERT_EQ(worker.ops->send(worker.van, &first.msg), PS_OK);
        ASSERT_TRUE(server.inbox.WaitMsgs(1));
    }
    OutMsg m(8, 1, {4u << 20});
    Producer pr(m, 1, 0);
    pr.fail_at = 2u << 20;
    pr.Start(256u << 10, 1000);
    EXPECT_EQ(worker.ops->send(worker.van, &m.msg), PS_ERR_DEVICE);
    EXPECT_TRUE(server.inbox.WaitFailure(1));
    EXPECT_EQ(server.inbox.Count(), 1u);
}

// ---- busy polling: vans without a progress op ----

TEST(TcpVanProgress, OtherVansGetTheNoOp)
{
    ps_van_ops_t ops;
    memset(&ops, 0, sizeof(ops));
    ops.size = offsetof(ps_van_ops_t, progress); // built before the op existed
    ps_van_t v = {&ops, "old", nullptr};
    EXPECT_EQ(ps_van_progress_op(&v), nullptr);
    ops.size = sizeof(ops);
    ops.progress = ps_van_no_progress;
    EXPECT_EQ(ps_van_progress_op(&v), nullptr);
    EXPECT_EQ(ps_van_no_progress(&v, 16), 0);
}

}  // namespace

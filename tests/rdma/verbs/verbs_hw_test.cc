// The ibverbs van on a real RDMA device (RoCE, InfiniBand or soft-RoCE):
// vans in one process connected through rdma_cm on the RDMA interface,
// driven through the ops table as the postoffice drives them. Every message
// shape (control with a node list, no data, inline, eager, rendezvous,
// split across QPs, four segments with an empty one), grant reuse, pull
// responses written straight into the named buffer, order under mixed
// sizes, concurrent senders, and failures (nobody listening, a peer that
// goes away). Runs with 1 and 2 queue pairs per peer.
//
// Tagged requires-rdma; without a device every test skips with the reason.
// Address: rdma_host.h (PS_TEST_RDMA_HOST, else the first RDMA interface).
#include <arpa/inet.h>
#include <sys/socket.h>

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
#include "ps/net/auth.h"
#include "ps/net/caps.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/van.h"
#include "ps/rdma/verbs/verbs_testing.h"
#include "tests/rdma/verbs/rdma_host.h"
}

namespace {

// The inbox, callbacks and byte pattern every van test shares.
using ps_van_test::Deliver;
using ps_van_test::Inbox;
using ps_van_test::Pattern;
using ps_van_test::PeerFailed;
using ps_van_test::Received;
using ps_van_test::RecvBuffer;

// "" and a reason when the test cannot run here.
std::string RdmaHost(std::string *why)
{
    char host[PS_SOCKADDR_STRLEN], reason[512];
    if (!ps_test_rdma_host(host, sizeof(host), reason, sizeof(reason))) {
        *why = reason;
        return "";
    }
    return host;
}

struct Van {
    Inbox inbox;
    ps_van_t *van = nullptr;
    ps_node_t node;
    const ps_van_ops_t *ops = nullptr;
    int id = 0;

    // `secret`: the job secret this van holds (nullptr: none).
    ps_status_t Open(int node_id, const std::string &host, const char *secret = nullptr)
    {
        const ps_van_component_t *c = nullptr;
        ps_status_t st = ps_van_find("ibverbs", &c);
        if (st != PS_OK)
            return st;
        ops = c->ops;
        ps_van_params_t p;
        memset(&p, 0, sizeof(p));
        p.role = node_id % 2 ? PS_ROLE_WORKER : PS_ROLE_SERVER;
        p.connect_timeout_ms = 20000;
        if (secret != nullptr) {
            p.auth_enabled = 1;
            if ((st = ps_auth_key_from_secret(secret, strlen(secret), &p.auth_key)) != PS_OK)
                return st;
        }
        ps_van_callbacks_t cb{};
        cb.arg = &inbox;
        cb.recv_buffer = RecvBuffer;
        cb.deliver = Deliver;
        cb.peer_failed = PeerFailed;
        if ((st = ops->open(&p, &cb, &van)) != PS_OK)
            return st;
        ps_node_init(&node);
        node.role = p.role;
        node.id = node_id;
        id = node_id;
        snprintf(node.hostname, sizeof(node.hostname), "%s", host.c_str());
        node.num_ports = 1;
        if ((st = ops->bind(van, &node, 20)) != PS_OK)
            return st;
        return ops->set_node_id(van, node_id);
    }
    ps_status_t Connect(const Van &peer)
    {
        return ops->connect(van, &peer.node, id);
    }
    void Close()
    {
        if (van != nullptr)
            ops->close(van);
        van = nullptr;
    }
    ~Van() { Close(); }
};

ps_slice_t Filled(uint64_t seq, unsigned seg, size_t len)
{
    ps_slice_t s;
    EXPECT_EQ(ps_slice_alloc(len, 64, &s), PS_OK);
    for (size_t i = 0; i < len; i++)
        static_cast<uint8_t *>(ps_slice_ptr(&s))[i] = Pattern(seq, seg, i);
    return s;
}

bool Matches(const std::string &got, uint64_t seq, unsigned seg, size_t len)
{
    if (got.size() != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (static_cast<uint8_t>(got[i]) != Pattern(seq, seg, i))
            return false;
    return true;
}

// A data message to `to` with segments of the given sizes, key `key`.
ps_status_t SendData(Van &from, int to, uint64_t seq, uint64_t key,
                     const std::vector<size_t> &sizes, bool request = true, bool push = true)
{
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.app_id = 0;
    msg.meta.customer_id = 0;
    msg.meta.timestamp = static_cast<int32_t>(seq);
    msg.meta.request = request;
    msg.meta.push = push;
    msg.meta.recver = to;
    msg.meta.key = key;
    for (unsigned s = 0; s < sizes.size(); s++) {
        ps_slice_t d = Filled(seq, s, sizes[s]);
        EXPECT_EQ(ps_msg_add_data(&msg, &d, PS_DATA_UINT8), PS_OK);
        ps_slice_unref(&d);
    }
    ps_status_t st = from.ops->send(from.van, &msg);
    ps_msg_release(&msg);
    return st;
}

class VerbsHw : public ::testing::TestWithParam<int> {
  protected:
    std::string host_;

    void SetUp() override
    {
        std::string why;
        host_ = RdmaHost(&why);
        if (host_.empty())
            GTEST_SKIP() << why;
        ASSERT_EQ(ps_config_find("STEPMESH_QP_NUM", &qp_num_), PS_OK) << "the van's own table";
        ps_config_set(qp_num_, std::to_string(GetParam()).c_str());
    }
    void TearDown() override
    {
        if (!host_.empty())
            ps_config_set(qp_num_, nullptr);
    }
    ps_config_id_t qp_num_{};

    // a (worker 9) connected to b (server 8) both ways, as the postoffice does.
    void Pair(Van &a, Van &b)
    {
        ASSERT_EQ(b.Open(8, host_), PS_OK);
        ASSERT_EQ(a.Open(9, host_), PS_OK);
        ASSERT_EQ(a.Connect(b), PS_OK);
        ASSERT_EQ(b.Connect(a), PS_OK);
    }
};

TEST_P(VerbsHw, QueryAdvertisesRdmaCapabilities)
{
    Van a;
    ASSERT_EQ(a.Open(9, host_), PS_OK);
    ps_van_attr_t attr;
    ASSERT_EQ(a.ops->query(a.van, &attr), PS_OK);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_REMOTE_WRITE);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_RECV_INTO_DEST);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_MEM_REGISTRATION);
    EXPECT_EQ(attr.num_streams, (uint32_t)GetParam());
    EXPECT_GT(a.node.ports[0], 0);
}

TEST_P(VerbsHw, EveryMessageShape)
{
    Van a, b;
    Pair(a, b);

    // A control message with a node list and a body.
    ps_node_t nodes[3];
    for (int i = 0; i < 3; i++) {
        ps_node_init(&nodes[i]);
        nodes[i].id = 8 + i;
        nodes[i].num_ports = 1;
        nodes[i].ports[0] = 1000 + i;
        snprintf(nodes[i].hostname, sizeof(nodes[i].hostname), "10.0.0.%d", i + 1);
    }
    ps_msg_t ctl;
    ps_msg_init(&ctl);
    ctl.meta.recver = 8;
    ctl.meta.control.cmd = PS_CTRL_ADD_NODE;
    ctl.meta.control.nodes = nodes;
    ctl.meta.control.num_nodes = 3;
    static const char body[] = "registration";
    ctl.meta.body = reinterpret_cast<const uint8_t *>(body);
    ctl.meta.body_len = sizeof(body) - 1;
    ASSERT_EQ(a.ops->send(a.van, &ctl), PS_OK);

    const std::vector<std::vector<size_t>> shapes = {
        {},                         // no data
        {8, 100},                   // inline
        {8, 2000},                  // eager, not inline
        {8, 64 << 10},              // rendezvous
        {8, 1 << 20, 4096},         // rendezvous, three segments
        {8, 16 << 20},              // split across QPs when there are several
        {8, 0, 300 << 10, 17},      // four segments, one empty
    };
    for (size_t i = 0; i < shapes.size(); i++)
        ASSERT_EQ(SendData(a, 8, 100 + i, 7, shapes[i]), PS_OK) << "shape " << i;

    ASSERT_TRUE(b.inbox.WaitMsgs(1 + shapes.size()));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    const Received &c = b.inbox.msgs[0];
    EXPECT_EQ(c.meta.control.cmd, PS_CTRL_ADD_NODE);
    EXPECT_EQ(c.meta.sender, 9) << "the sender is who the connection proved";
    ASSERT_EQ(c.nodes.size(), 3u);
    EXPECT_STREQ(c.nodes[2].hostname, "10.0.0.3");
    EXPECT_EQ(c.nodes[1].ports[0], 1001);
    EXPECT_EQ(c.body, "registration");
    for (size_t i = 0; i < shapes.size(); i++) {
        const Received &r = b.inbox.msgs[1 + i];
        EXPECT_EQ(r.meta.timestamp, (int)(100 + i)) << "order";
        ASSERT_EQ(r.data.size(), shapes[i].size()) << "shape " << i;
        for (unsigned s = 0; s < shapes[i].size(); s++)
            EXPECT_TRUE(Matches(r.data[s], 100 + i, s, shapes[i][s]))
                << "shape " << i << " segment " << s;
    }
}

TEST_P(VerbsHw, RepeatedKeyReusesGrantsWithoutMixingData)
{
    // The receiver holds every message's data until the end: a grant must
    // never be reused while its data is held. (Declared before the vans,
    // which outlive nothing they call.)
    std::vector<ps_slice_t> held;
    std::mutex held_mu;
    Van a, b;
    Pair(a, b);
    b.inbox.SetOnMsg([&](const ps_msg_t *m) {
        if (m->num_data > 1) {
            std::lock_guard<std::mutex> lk(held_mu);
            held.push_back(ps_slice_ref(&m->data[1]));
        }
    });
    const int n = 40;
    for (int i = 0; i < n; i++)
        ASSERT_EQ(SendData(a, 8, i, 42, {8, 256 << 10}), PS_OK);
    ASSERT_TRUE(b.inbox.WaitMsgs(n));
    // The inbox records a message before its on_msg runs: wait for the
    // last reference too.
    auto deadline = std::chrono::steady_clock::now() + ps_van_test::kWait;
    for (;;) {
        {
            std::lock_guard<std::mutex> lk(held_mu);
            if (held.size() == static_cast<size_t>(n))
                break;
        }
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "on_msg did not run for all";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    {
        std::lock_guard<std::mutex> lk(held_mu);
        for (int i = 0; i < n; i++)
            EXPECT_TRUE(Matches(std::string(static_cast<const char *>(ps_slice_ptr(&held[i])),
                                            held[i].len),
                                i, 1, 256 << 10))
                << "message " << i << " was overwritten";
        for (auto &s : held)
            ps_slice_unref(&s);
        held.clear();
    }
    // Released now: later messages can reuse the grants.
    b.inbox.SetOnMsg(nullptr);
    for (int i = n; i < 2 * n; i++)
        ASSERT_EQ(SendData(a, 8, i, 42, {8, 256 << 10}), PS_OK);
    ASSERT_TRUE(b.inbox.WaitMsgs(2 * n));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (int i = 0; i < 2 * n; i++) {
        EXPECT_EQ(b.inbox.msgs[i].meta.timestamp, i);
        EXPECT_TRUE(Matches(b.inbox.msgs[i].data[1], i, 1, 256 << 10)) << i;
    }
}

TEST_P(VerbsHw, PullResponseIsWrittenIntoTheNamedBuffer)
{
    Van w, s;
    ASSERT_EQ(s.Open(8, host_), PS_OK);
    ASSERT_EQ(w.Open(9, host_), PS_OK);
    ASSERT_EQ(w.Connect(s), PS_OK);
    ASSERT_EQ(s.Connect(w), PS_OK);
    for (size_t len : {size_t(64), size_t(8 << 10), size_t(4 << 20)}) {
        SCOPED_TRACE(len);
        const uint64_t key = 1000 + len;
        ps_slice_t dest;
        ASSERT_EQ(ps_slice_alloc(len, 4096, &dest), PS_OK);
        memset(ps_slice_ptr(&dest), 0, len);
        {
            std::lock_guard<std::mutex> lk(w.inbox.mu);
            w.inbox.dest[{key, 1}] = ps_slice_ref(&dest);
        }
        // The server answers every pull request with `len` bytes.
        s.inbox.SetOnMsg([&](const ps_msg_t *m) {
            if (!m->meta.request || !m->meta.pull)
                return;
            ps_msg_t r;
            ps_msg_init(&r);
            r.meta.app_id = m->meta.app_id;
            r.meta.customer_id = m->meta.customer_id;
            r.meta.timestamp = m->meta.timestamp;
            r.meta.pull = true;
            r.meta.recver = m->meta.sender;
            r.meta.key = m->meta.key;
            ps_slice_t k = Filled(0, 0, 8);
            ps_slice_t v = Filled(m->meta.key, 1, m->meta.val_len);
            ps_msg_add_data(&r, &k, PS_DATA_UINT64);
            ps_msg_add_data(&r, &v, PS_DATA_UINT8);
            ps_slice_unref(&k);
            ps_slice_unref(&v);
            EXPECT_EQ(s.ops->send(s.van, &r), PS_OK);
            ps_msg_release(&r);
        });
        size_t before = w.inbox.Count();
        ps_msg_t req;
        ps_msg_init(&req);
        req.meta.timestamp = static_cast<int32_t>(len);
        req.meta.request = true;
        req.meta.pull = true;
        req.meta.recver = 8;
        req.meta.key = key;
        req.meta.addr = (uint64_t)(uintptr_t)ps_slice_ptr(&dest);
        req.meta.val_len = len;
        ps_slice_t k = Filled(0, 0, 8);
        ps_msg_add_data(&req, &k, PS_DATA_UINT64);
        ps_slice_unref(&k);
        ASSERT_EQ(w.ops->send(w.van, &req), PS_OK);
        ps_msg_release(&req);
        ASSERT_TRUE(w.inbox.WaitMsgs(before + 1));
        std::lock_guard<std::mutex> lk(w.inbox.mu);
        const Received &r = w.inbox.msgs[before];
        ASSERT_EQ(r.data.size(), 2u);
        EXPECT_EQ(r.ptrs[1], ps_slice_ptr(&dest)) << "written in place, not copied";
        EXPECT_TRUE(Matches(r.data[1], key, 1, len));
        ps_slice_unref(&dest);
    }
}

TEST_P(VerbsHw, PushIsWrittenIntoTheRegisteredBuffer)
{
    // A server's registered receive buffer (recv_buffer names it for the
    // key's values): the rendezvous grant carries it, and the NIC writes
    // the values there, no copy; later pushes of the key reuse the grant.
    // Registered anew, the next push is moved to the new buffer and the
    // one after is written there directly.
    Van w, s;
    Pair(w, s);
    const uint64_t key = 31;
    const size_t len = 256 << 10;
    ps_slice_t first, second;
    ASSERT_EQ(ps_slice_alloc(len, 4096, &first), PS_OK);
    ASSERT_EQ(ps_slice_alloc(len, 4096, &second), PS_OK);
    {
        std::lock_guard<std::mutex> lk(s.inbox.mu);
        s.inbox.dest[{key, 1}] = ps_slice_ref(&first);
    }
    auto push = [&](uint64_t seq) {
        size_t before = s.inbox.Count();
        EXPECT_EQ(SendData(w, 8, seq, key, {8, len, 24}), PS_OK);
        EXPECT_TRUE(s.inbox.WaitMsgs(before + 1));
        std::lock_guard<std::mutex> lk(s.inbox.mu);
        const Received &r = s.inbox.msgs[before];
        EXPECT_TRUE(Matches(r.data[0], seq, 0, 8));
        EXPECT_TRUE(Matches(r.data[1], seq, 1, len));
        EXPECT_TRUE(Matches(r.data[2], seq, 2, 24));
        return r.ptrs[1];
    };
    const int n = 6;
    for (int i = 0; i < n; i++)
        EXPECT_EQ(push(i), ps_slice_ptr(&first)) << "push " << i;
    EXPECT_EQ(ps__vb_test_received_in_place(s.van), (unsigned long)n)
        << "every push written in place, none copied";

    {
        std::lock_guard<std::mutex> lk(s.inbox.mu);
        ps_slice_unref(&s.inbox.dest[{key, 1}]);
        s.inbox.dest[{key, 1}] = ps_slice_ref(&second);
    }
    for (int i = n; i < n + 3; i++)
        EXPECT_EQ(push(i), ps_slice_ptr(&second)) << "push " << i;
    EXPECT_GT(ps__vb_test_received_in_place(s.van), (unsigned long)n)
        << "the new buffer is granted in its turn";
    EXPECT_TRUE(Matches(std::string(static_cast<const char *>(ps_slice_ptr(&second)), len),
                        n + 2, 1, len));

    // A response is never steered (its destination is claimed per
    // request): named a buffer, it is copied there.
    {
        std::lock_guard<std::mutex> lk(w.inbox.mu);
        w.inbox.dest[{key, 1}] = ps_slice_ref(&first);
    }
    ASSERT_EQ(SendData(s, 9, 100, key, {8, len}, false), PS_OK);
    ASSERT_TRUE(w.inbox.WaitMsgs(1));
    {
        std::lock_guard<std::mutex> lk(w.inbox.mu);
        EXPECT_EQ(w.inbox.msgs[0].ptrs[1], ps_slice_ptr(&first));
        EXPECT_TRUE(Matches(w.inbox.msgs[0].data[1], 100, 1, len));
    }
    EXPECT_EQ(ps__vb_test_received_in_place(w.van), 0ul);
    ps_slice_unref(&first);
    ps_slice_unref(&second);
}

TEST_P(VerbsHw, MixedSizesKeepOrderBothWays)
{
    Van a, b;
    Pair(a, b);
    const int n = 300;
    std::thread t([&] {
        for (int i = 0; i < n; i++)
            EXPECT_EQ(SendData(b, 9, i, i % 5, {8, (size_t)((i * 7919) % (300 << 10))}, false),
                      PS_OK);
    });
    for (int i = 0; i < n; i++)
        ASSERT_EQ(SendData(a, 8, i, i % 7, {8, (size_t)((i * 104729) % (500 << 10))}), PS_OK);
    t.join();
    ASSERT_TRUE(b.inbox.WaitMsgs(n));
    ASSERT_TRUE(a.inbox.WaitMsgs(n));
    for (int i = 0; i < n; i++) {
        EXPECT_EQ(b.inbox.msgs[i].meta.timestamp, i);
        EXPECT_TRUE(Matches(b.inbox.msgs[i].data[1], i, 1, (i * 104729) % (500 << 10))) << i;
        EXPECT_EQ(a.inbox.msgs[i].meta.timestamp, i);
        EXPECT_TRUE(Matches(a.inbox.msgs[i].data[1], i, 1, (i * 7919) % (300 << 10))) << i;
    }
}

TEST_P(VerbsHw, ConcurrentSendersToOnePeer)
{
    Van a, b, c;
    ASSERT_EQ(b.Open(8, host_), PS_OK);
    ASSERT_EQ(a.Open(9, host_), PS_OK);
    ASSERT_EQ(c.Open(11, host_), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    ASSERT_EQ(c.Connect(b), PS_OK);
    const int n = 200;
    auto run = [&](Van *v) {
        for (int i = 0; i < n; i++)
            EXPECT_EQ(SendData(*v, 8, i, 3, {8, (size_t)(i % 3 ? 1000 : 200 << 10)}), PS_OK);
    };
    std::thread t1(run, &a), t2(run, &c);
    t1.join();
    t2.join();
    ASSERT_TRUE(b.inbox.WaitMsgs(2 * n));
    std::map<int, int> next;
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (const Received &r : b.inbox.msgs) {
        EXPECT_EQ(r.meta.timestamp, next[r.meta.sender]++) << "per-sender order";
        EXPECT_TRUE(Matches(r.data[1], r.meta.timestamp, 1, r.meta.timestamp % 3 ? 1000 : 200 << 10));
    }
    EXPECT_EQ(next[9], n);
    EXPECT_EQ(next[11], n);
}

TEST_P(VerbsHw, ConnectingToNobodyIsAStatus)
{
    Van a;
    ps_config_set(PS_CFG_PS_CONNECT_TIMEOUT_MS, "1500");
    ASSERT_EQ(a.Open(9, host_), PS_OK);
    ps_config_set(PS_CFG_PS_CONNECT_TIMEOUT_MS, nullptr);
    ps_node_t nobody;
    ps_node_init(&nobody);
    nobody.id = 8;
    nobody.num_ports = 1;
    nobody.ports[0] = a.node.ports[0] == 65000 ? 65001 : 65000;
    snprintf(nobody.hostname, sizeof(nobody.hostname), "%s", host_.c_str());
    auto t0 = std::chrono::steady_clock::now();
    ps_status_t st = a.ops->connect(a.van, &nobody, 9);
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(st, PS_ERR_UNREACHABLE);
    printf("connect to nobody: %s after %lld ms\n", ps_status_str(st),
           (long long)std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
    EXPECT_EQ(SendData(a, 8, 0, 0, {8}), PS_ERR_UNREACHABLE) << "nothing to send on";
}

TEST_P(VerbsHw, PeerGoingAwayIsReported)
{
    Van a, b;
    Pair(a, b);
    ASSERT_EQ(SendData(a, 8, 0, 1, {8, 100}), PS_OK);
    ASSERT_TRUE(b.inbox.WaitMsgs(1));
    a.Close();
    ASSERT_TRUE(b.inbox.WaitFailure(1)) << "the postoffice hears of it";
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    EXPECT_EQ(b.inbox.failures[0].first, 9);
    EXPECT_TRUE(b.inbox.failures[0].second == PS_ERR_PEER_GONE ||
                b.inbox.failures[0].second == PS_ERR_LINK_FAILED)
        << ps_status_str(b.inbox.failures[0].second);
    EXPECT_EQ(b.inbox.failures.size(), 1u) << "once per peer";
}

TEST_P(VerbsHw, UnassignedNodeAnnouncesItsIdLater)
{
    // As a node registering with the scheduler: it connects before it has
    // an id, then learns one.
    Van sched, node;
    ASSERT_EQ(sched.Open(1, host_), PS_OK);
    const ps_van_component_t *c = nullptr;
    ASSERT_EQ(ps_van_find("ibverbs", &c), PS_OK);
    node.ops = c->ops;
    ps_van_params_t p;
    memset(&p, 0, sizeof(p));
    p.role = PS_ROLE_WORKER;
    ps_van_callbacks_t cb{};
    cb.arg = &node.inbox;
    cb.recv_buffer = RecvBuffer;
    cb.deliver = Deliver;
    cb.peer_failed = PeerFailed;
    ASSERT_EQ(node.ops->open(&p, &cb, &node.van), PS_OK);
    ps_node_init(&node.node);
    snprintf(node.node.hostname, sizeof(node.node.hostname), "%s", host_.c_str());
    node.node.num_ports = 1;
    ASSERT_EQ(node.ops->bind(node.van, &node.node, 20), PS_OK);
    ASSERT_EQ(node.ops->connect(node.van, &sched.node, PS_NODE_EMPTY), PS_OK);
    ASSERT_EQ(SendData(node, 1, 0, 0, {8}), PS_OK);
    ASSERT_TRUE(sched.inbox.WaitMsgs(1));
    {
        // Under the inbox's lock: the van may be recording more meanwhile.
        std::lock_guard<std::mutex> lk(sched.inbox.mu);
        EXPECT_EQ(sched.inbox.msgs[0].meta.sender, PS_NODE_EMPTY);
    }
    node.id = 13;
    ASSERT_EQ(node.ops->set_node_id(node.van, 13), PS_OK);
    ASSERT_EQ(SendData(node, 1, 1, 0, {8}), PS_OK);
    ASSERT_TRUE(sched.inbox.WaitMsgs(2));
    {
        std::lock_guard<std::mutex> lk(sched.inbox.mu);
        EXPECT_EQ(sched.inbox.msgs[1].meta.sender, 13);
    }
    // The scheduler can now answer on that connection.
    ASSERT_EQ(SendData(sched, 13, 2, 0, {8, 10}, false), PS_OK);
    ASSERT_TRUE(node.inbox.WaitMsgs(1));
}

TEST_P(VerbsHw, JobSecretHeldByBothConnects)
{
    // The handshake on every QP, the proof first on QP 0, then traffic
    // both ways as without a secret (eager, rendezvous, split).
    Van a, b;
    ASSERT_EQ(b.Open(8, host_, "correct horse battery staple"), PS_OK);
    ASSERT_EQ(a.Open(9, host_, "correct horse battery staple"), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    ASSERT_EQ(b.Connect(a), PS_OK);
    ASSERT_EQ(SendData(a, 8, 0, 1, {8, 100}), PS_OK);
    ASSERT_EQ(SendData(a, 8, 1, 2, {8, 1 << 20}), PS_OK);
    ASSERT_EQ(SendData(b, 9, 2, 3, {8, 5000}, false), PS_OK);
    ASSERT_TRUE(b.inbox.WaitMsgs(2));
    ASSERT_TRUE(a.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    EXPECT_EQ(b.inbox.msgs[0].meta.sender, 9);
    EXPECT_TRUE(b.inbox.failures.empty());
}

TEST_P(VerbsHw, JobSecretWrongOrMissingIsRefused)
{
    // A stranger with a wrong secret, one with none, and a node with the
    // secret reaching a node without one: each connect() ends in
    // PS_ERR_AUTH (no retries until the deadline), nothing is delivered and
    // the refused peer is in nobody's table (no failure reported for it,
    // nothing can be sent to it).
    struct Case {
        const char *listener, *connector;
    } cases[] = {
        {"correct horse battery staple", "not the secret"},
        {"correct horse battery staple", nullptr},
        {nullptr, "correct horse battery staple"},
    };
    for (const Case &c : cases) {
        Van b, a;
        ASSERT_EQ(b.Open(8, host_, c.listener), PS_OK);
        ASSERT_EQ(a.Open(9, host_, c.connector), PS_OK);
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(a.Connect(b), PS_ERR_AUTH)
            << (c.listener ? "listener has a secret" : "listener has none") << ", connector "
            << (c.connector ? c.connector : "has none");
        auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
        EXPECT_LT(took, 15000) << "refused, not timed out (deadline 20 s)";
        EXPECT_EQ(SendData(b, 9, 0, 0, {8}), PS_ERR_UNREACHABLE);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::lock_guard<std::mutex> lk(b.inbox.mu);
        EXPECT_TRUE(b.inbox.msgs.empty());
        EXPECT_TRUE(b.inbox.failures.empty());
    }
}

INSTANTIATE_TEST_SUITE_P(QueuePairs, VerbsHw, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int> &i) {
                             return std::to_string(i.param) + "qp";
                         });

} // namespace

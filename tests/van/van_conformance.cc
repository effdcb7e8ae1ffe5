// The van conformance suite (van_conformance.h): each test runs once per
// configuration a van's test file instantiates.
//
// No timing thresholds: every wait has a generous deadline (kWait) that
// only ends a test that would otherwise hang.
#include "tests/van/van_conformance.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/endian.h"
#include "ps/base/sockaddr.h"
#include "ps/gpu/mem.h"
#include "ps/net/caps.h"
#include "ps/net/codec/lane.h"
#include "ps/net/message.h"
}

namespace ps_van_test {

std::string VanConfigName(const ::testing::TestParamInfo<VanConfig> &info)
{
    return info.param.name;
}

void PrintTo(const VanConfig &c, std::ostream *os)
{
    *os << c.name << " (" << c.van << " on "
        << (c.host_of != nullptr ? "an address found at run time" : c.host);
    if (c.env_name != nullptr) {
        *os << ", " << c.env_name << "=" << (c.env_value != nullptr ? c.env_value : "(unset)");
    }
    *os << ")";
}

namespace {

// Whether this host can bind `host` (there may be no IPv6 loopback).
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

} // namespace

void VanConformance::SetEnv(const char *name, const char *value)
{
    EnvSetting e;
    e.name = name;
    const char *old = getenv(name);
    e.had = old != nullptr;
    if (e.had) {
        e.old = old;
    }
    if (value != nullptr) {
        setenv(name, value, 1);
    } else {
        unsetenv(name);
    }
    env_.push_back(e);
}

void VanConformance::SetUp()
{
    const VanConfig &c = Cfg();
    // Before any van of the test opens (the ucx van reads UCX_TLS at every
    // open).
    if (c.env_name != nullptr) {
        SetEnv(c.env_name, c.env_value);
    }
    if (c.unique_env_name != nullptr) {
        // Unique across tests and processes (in a sandbox the pid may be
        // the same in another run).
        static std::atomic<int> seq{0};
        std::random_device rd;
        char v[80];
        snprintf(v, sizeof(v), "conf-%08x%08x-%d", rd(), rd(), seq++);
        SetEnv(c.unique_env_name, v);
    }
    host_ = c.host;
    if (c.host_of != nullptr) {
        std::string why;
        if (!c.host_of(&host_, &why)) {
            GTEST_SKIP() << why;
        }
    }
    if (!HostUsable(Host())) {
        GTEST_SKIP() << "cannot bind " << Host() << " on this host";
    }
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    auto na = c.not_applicable.find(test.substr(0, test.find('/')));
    if (na != c.not_applicable.end()) {
        GTEST_SKIP() << c.name << ": " << na->second;
    }
}

void VanConformance::TearDown()
{
    for (auto it = env_.rbegin(); it != env_.rend(); ++it) {
        if (it->had) {
            setenv(it->name, it->old.c_str(), 1);
        } else {
            unsetenv(it->name);
        }
    }
    env_.clear();
}

ps_status_t VanConformance::Open(VanBase &v, int id, ps_van_params_t params, int port) const
{
    ps_status_t st = v.OpenAs(Cfg().van, id, Host(), params, port);
    if (st == PS_OK && Cfg().after_open != nullptr) {
        st = Cfg().after_open(v, id);
    }
    return st;
}

void VanConformance::OpenPair(VanBase &server, VanBase &worker, ps_van_params_t params) const
{
    ASSERT_EQ(Open(server, 8, params), PS_OK);
    ASSERT_EQ(Open(worker, 9, params), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    if (Cfg().replies_need_connect) {
        ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    }
}

ps_status_t VanConformance::Send(VanBase &from, int to, uint64_t seq,
                                 const std::vector<size_t> &sizes)
{
    OutMsg m(to, seq, sizes);
    return from.ops->send(from.van, &m.msg);
}

// Lane message `seq`: the lane header, seq, then the pattern (len >= 16).
static std::string LaneBytes(uint64_t seq, size_t len)
{
    std::string b(len, '\0');
    uint8_t *p = reinterpret_cast<uint8_t *>(&b[0]);
    ps_lane_hdr_write(p, 0, 0);
    ps_put_le64(p + PS_LANE_HDR_LEN, seq);
    for (size_t i = PS_LANE_HDR_LEN + 8; i < len; ++i) {
        p[i] = Pattern(seq, 0, i);
    }
    return b;
}

ps_status_t VanConformance::SendLane(VanBase &from, int to, uint64_t seq, size_t len)
{
    alignas(8) uint8_t buf[PS_LANE_VAN_HEADROOM + PS_LANE_MAX_BYTES];
    std::string b = LaneBytes(seq, len);
    memcpy(buf + PS_LANE_VAN_HEADROOM, b.data(), len);
    return ps_van_send_lane_op(from.van)(from.van, to, buf + PS_LANE_VAN_HEADROOM, len);
}

ps_node_t VanConformance::NodeAt(int id, int port) const
{
    ps_node_t n;
    ps_node_init(&n);
    n.id = id;
    snprintf(n.hostname, sizeof(n.hostname), "%s", Host());
    n.num_ports = 1;
    n.ports[0] = port;
    return n;
}

void VanConformance::OpenAndDialNobody(VanBase &worker, int *port_p, ps_van_params_t params) const
{
    int port;
    {
        VanBase probe;
        ASSERT_EQ(Open(probe, 8), PS_OK);
        port = probe.Port();
    }
    ASSERT_EQ(Open(worker, 9, params), PS_OK);
    ps_node_t target = NodeAt(8, port);
    ASSERT_EQ(worker.ops->connect(worker.van, &target, 9),
              Cfg().connect_completes_in_call ? PS_ERR_UNREACHABLE : PS_OK);
    *port_p = port;
}

void SendConcurrentlyAndCheckOrder(VanBase &worker, VanBase &server, int threads,
                                   int per_thread, size_t (*len_of)(int i))
{
    std::vector<std::thread> senders;
    std::atomic<int> errors{0};
    for (int t = 0; t < threads; ++t) {
        senders.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                uint64_t seq = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(i);
                OutMsg m(8, seq, {8, len_of(i)});
                if (worker.ops->send(worker.van, &m.msg) != PS_OK) {
                    errors++;
                }
            }
        });
    }
    for (auto &th : senders) {
        th.join();
    }
    EXPECT_EQ(errors.load(), 0);
    ASSERT_TRUE(server.inbox.WaitMsgs(static_cast<size_t>(threads * per_thread)));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    std::vector<int> next(threads, 0);
    for (const Received &r : server.inbox.msgs) {
        int t = static_cast<int>(r.meta.key >> 32);
        int i = static_cast<int>(r.meta.key & 0xffffffffu);
        ASSERT_GE(t, 0);
        ASSERT_LT(t, threads);
        EXPECT_EQ(i, next[t]) << "thread " << t << " out of order";
        next[t] = i + 1;
        EXPECT_TRUE(CheckMsg(r, 9, r.meta.key, {8, len_of(i)}));
    }
}

// ---- capabilities ----

TEST_P(VanConformance, AdvertisesItsCapabilities)
{
    VanBase v;
    ASSERT_EQ(Open(v, 9), PS_OK);
    ps_van_attr_t attr;
    ASSERT_EQ(v.ops->query(v.van, &attr), PS_OK);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_ZCOPY_SEND);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_RECV_INTO_DEST);
    // Device memory is the machine's to allow (nvidia-peermem for ibverbs,
    // a UCX with its cuda transports): the config says whether it may be
    // advertised here; DeviceMemoryIsRefusedUnlessTheVanMovesIt checks the
    // vans that do not.
    if (!Cfg().device_memory_possible) {
        EXPECT_FALSE(attr.cap_flags & PS_CAP_DEVICE_MEMORY);
    }
    EXPECT_EQ(attr.cap_flags & Cfg().caps_set, Cfg().caps_set);
    EXPECT_EQ(attr.cap_flags & Cfg().caps_clear, 0u);
    EXPECT_EQ(attr.max_data_segments, static_cast<uint32_t>(PS_MSG_MAX_DATA));
    EXPECT_GE(attr.max_message_bytes, 1ull << 30);
    if (Cfg().num_streams != 0) {
        EXPECT_EQ(attr.num_streams, Cfg().num_streams);
    } else {
        EXPECT_GE(attr.num_streams, 1u);
    }
    EXPECT_EQ(v.ops->register_mem(v.van, nullptr), Cfg().register_null_status);
}

// ---- data path ----

TEST_P(VanConformance, SegmentsOfEverySizeArriveIntactAndInOrder)
{
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));

    // Empty messages and segments, around 4096 (the ucx van's inline
    // threshold), inline and separate segments mixed, rendezvous sizes.
    const std::vector<std::vector<size_t>> shapes = {
        {},           {0},        {1},       {4096},          {4097},      {4u << 20},
        {8, 4096},    {0, 1, 0},  {13, 12345, 65537, 3},      {1, 1, 1, 1},
        {4u << 20, 0, 7, 4096 + 1}, {1u << 20, 3u << 20},    {100000, 99999, 1, 0},
        {4095, 4096, 4097, 8},
    };
    uint64_t seq = 0;
    for (int round = 0; round < 3; ++round) {
        for (const auto &sizes : shapes) {
            ASSERT_EQ(Send(worker, 8, seq++, sizes), PS_OK);
        }
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(seq));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        ASSERT_EQ(server.inbox.msgs.size(), seq);
        for (uint64_t i = 0; i < seq; ++i) {
            EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, i, shapes[i % shapes.size()]));
            EXPECT_EQ(server.inbox.msgs[i].meta.recver, 8);
            EXPECT_TRUE(server.inbox.msgs[i].meta.request);
        }
    }
    uint64_t sent = 0, recv = 0;
    worker.ops->stats(worker.van, &sent, nullptr);
    server.ops->stats(server.van, nullptr, &recv);
    EXPECT_GT(sent, 3u * (12u << 20));
    EXPECT_EQ(sent, recv);
}

// Large segments that start 16 bytes past an aligned address (numpy's
// arrays), and small ones beside them: every byte arrives (the tcp van
// sends the large ones as they are or from an aligned copy, and takes both
// ways in turn while it measures which is cheaper).
TEST_P(VanConformance, MisalignedSegmentsArriveIntact)
{
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    const std::vector<std::vector<size_t>> shapes = {
        {4u << 20}, {1u << 20, 5}, {3, (2u << 20) + 1, 4096}, {(1u << 20) - 1},
    };
    uint64_t seq = 0;
    for (int round = 0; round < 2; ++round) {
        for (const auto &sizes : shapes) {
            OutMsg m(8, seq++, sizes, 16);
            ASSERT_EQ(worker.ops->send(worker.van, &m.msg), PS_OK);
        }
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(seq));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    ASSERT_EQ(server.inbox.msgs.size(), seq);
    for (uint64_t i = 0; i < seq; ++i)
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, i, shapes[i % shapes.size()]));
}

TEST_P(VanConformance, RepliesTravelBackWithAndWithoutOwnConnection)
{
    VanBase server, worker;
    ASSERT_EQ(Open(server, 8), PS_OK);
    ASSERT_EQ(Open(worker, 9), PS_OK);
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    ASSERT_EQ(Send(worker, 8, 1, {16}), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    if (Cfg().replies_need_connect) {
        // The server never connected to the worker: nowhere to send to.
        EXPECT_EQ(Send(server, 9, 2, {4096, 3, 1u << 20}), PS_ERR_UNREACHABLE);
        ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    }
    // The server never connected to the worker: the reply rides the
    // worker's connection (replies_need_connect: the server's, just made).
    ASSERT_EQ(Send(server, 9, 2, {4096, 3, 1u << 20}), PS_OK);
    ASSERT_TRUE(worker.inbox.WaitMsgs(1));
    // Now with its own connection.
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK); // idempotent
    ASSERT_EQ(Send(server, 9, 3, {5}), PS_OK);
    ASSERT_TRUE(worker.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(worker.inbox.mu);
    EXPECT_TRUE(CheckMsg(worker.inbox.msgs[0], 8, 2, {4096, 3, 1u << 20}));
    EXPECT_TRUE(CheckMsg(worker.inbox.msgs[1], 8, 3, {5}));
}

TEST_P(VanConformance, RecvBufferSteersDataIntoTheCallersBuffer)
{
    VanBase server, worker;
    ASSERT_EQ(Open(server, 8), PS_OK);
    ASSERT_EQ(Open(worker, 9), PS_OK);
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);

    // The worker names where segment 1 of the responses with key 77 (1 MB
    // + 5 bytes at offset 64 of its own buffer) and key 79 (100 bytes at
    // offset 16 of another) go. Destinations that are too small (keys 78
    // and 80) are not used: the van's own buffers are.
    const size_t len = (1u << 20) + 5;
    std::vector<uint8_t> user(len + 128, 0xee);
    std::vector<uint8_t> small_user(200, 0xee);
    ps_slice_t dst, sdst, small78, small80;
    ASSERT_EQ(ps_slice_wrap(user.data(), user.size(), nullptr, nullptr, &dst), PS_OK);
    ASSERT_EQ(ps_slice_narrow(&dst, 64, len + 32), PS_OK);
    ASSERT_EQ(ps_slice_wrap(small_user.data(), small_user.size(), nullptr, nullptr, &sdst), PS_OK);
    ASSERT_EQ(ps_slice_narrow(&sdst, 16, 100), PS_OK);
    ASSERT_EQ(ps_slice_alloc(10, 0, &small78), PS_OK);
    ASSERT_EQ(ps_slice_alloc(10, 0, &small80), PS_OK);
    {
        std::lock_guard<std::mutex> lk(worker.inbox.mu);
        worker.inbox.dest[{77, 1}] = dst;
        worker.inbox.dest[{79, 1}] = sdst;
        worker.inbox.dest[{78, 1}] = small78;
        worker.inbox.dest[{80, 1}] = small80;
    }
    ASSERT_EQ(Send(server, 9, 77, {8, len}), PS_OK);
    ASSERT_EQ(Send(server, 9, 78, {8, 4096}), PS_OK);
    ASSERT_EQ(Send(server, 9, 79, {8, 100}), PS_OK);
    ASSERT_EQ(Send(server, 9, 80, {8, 40960}), PS_OK);
    ASSERT_TRUE(worker.inbox.WaitMsgs(4));
    {
        std::lock_guard<std::mutex> lk(worker.inbox.mu);
        const Received &r = worker.inbox.msgs[0];
        EXPECT_TRUE(CheckMsg(r, 8, 77, {8, len}));
        // Zero copy: the delivered slice is the caller's memory.
        EXPECT_EQ(r.ptrs[1], user.data() + 64);
        EXPECT_NE(r.ptrs[0], user.data() + 64);
        EXPECT_TRUE(CheckMsg(worker.inbox.msgs[1], 8, 78, {8, 4096}));
        EXPECT_TRUE(CheckMsg(worker.inbox.msgs[2], 8, 79, {8, 100}));
        EXPECT_EQ(worker.inbox.msgs[2].ptrs[1], small_user.data() + 16);
        EXPECT_TRUE(CheckMsg(worker.inbox.msgs[3], 8, 80, {8, 40960}));
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
    for (size_t i = 0; i < 100; ++i) {
        ASSERT_EQ(small_user[16 + i], Pattern(79, 1, i)) << i;
    }
    EXPECT_EQ(small_user[15], 0xee);
    EXPECT_EQ(small_user[116], 0xee);
    EXPECT_GE(worker.inbox.recv_buffer_calls.load(), 8);
    worker.Close(); // before `user` goes away
}

// Handlers are set before the vans open, here and below: what the ucx van
// moves between progress threads is no synchronisation TSan can see.
TEST_P(VanConformance, BusyPollDeliversToo)
{
    ps_van_params_t p = DefaultParams();
    p.busy_poll = 1;
    VanBase a, b;
    // Ping-pong driven from the progress threads.
    std::atomic<int> rounds{0};
    a.inbox.on_msg = [&](const ps_msg_t *in) { EXPECT_EQ(Send(a, 9, in->meta.key + 1, {8}), PS_OK); };
    b.inbox.on_msg = [&](const ps_msg_t *in) {
        if (++rounds < 200) {
            EXPECT_EQ(Send(b, 8, in->meta.key + 1, {8}), PS_OK);
        }
    };
    ASSERT_NO_FATAL_FAILURE(OpenPair(a, b, p));
    ASSERT_EQ(Send(b, 8, 0, {8}), PS_OK);
    ASSERT_TRUE(b.inbox.WaitMsgs(200));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (int i = 0; i < 200; ++i) {
        EXPECT_TRUE(CheckMsg(b.inbox.msgs[i], 8, 2 * i + 1, {8}));
    }
}

// Busy polling: a thread waiting for something runs the van's loop itself
// through the progress op (the progress thread stands back), and after the
// hand-back (budget 0) the progress thread carries on alone. A van whose
// waiters do not drive (waiters_drive) has no progress op and answers on
// its own thread.
TEST_P(VanConformance, WaitingThreadDrivesTheLoopAndHandsItBack)
{
    ps_van_params_t p = DefaultParams();
    p.busy_poll = 1;
    VanBase a, b;
    const std::thread::id me = std::this_thread::get_id();
    std::atomic<int> on_me{0};
    // `a` answers every request with one of the same shape, key + 1.
    a.inbox.on_msg = [&](const ps_msg_t *in) {
        std::vector<size_t> sizes;
        for (uint32_t i = 0; i < in->num_data; ++i) {
            sizes.push_back(in->data[i].len);
        }
        EXPECT_EQ(Send(a, 9, in->meta.key + 1, sizes), PS_OK);
    };
    b.inbox.on_msg = [&](const ps_msg_t *) {
        if (std::this_thread::get_id() == me) {
            on_me++;
        }
    };
    ASSERT_NO_FATAL_FAILURE(OpenPair(a, b, p));
    int (*progress)(ps_van_t *, unsigned) = ps_van_progress_op(b.van);
    if (!Cfg().waiters_drive) {
        // Nothing to drive: waiters wait, the van's thread answers.
        EXPECT_EQ(progress, nullptr);
        for (int i = 0; i < 20; ++i) {
            ASSERT_EQ(Send(b, 8, 2 * i, {8, 64}), PS_OK);
            ASSERT_TRUE(b.inbox.WaitMsgs(static_cast<size_t>(i + 1))) << "answer " << i;
        }
        EXPECT_EQ(on_me.load(), 0);
        return;
    }
    ASSERT_NE(progress, nullptr);
    ASSERT_EQ(progress, b.ops->progress);
    // Driven: one request at a time, each answer awaited by driving, at
    // least `driven` of them and until an answer came on this thread (the
    // progress thread may deliver the first few before it stands back).
    const int driven = 100;
    auto deadline = std::chrono::steady_clock::now() + kWait;
    int n = 0, handled = 0;
    while (n < driven || on_me.load() == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "answer " << n;
        ASSERT_EQ(Send(b, 8, 2 * n, {8, 64}), PS_OK);
        ++n;
        while (b.inbox.Count() < static_cast<size_t>(n)) {
            ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "answer " << n - 1;
            int r = progress(b.van, 16);
            ASSERT_GE(r, 0);
            handled += r;
        }
    }
    EXPECT_EQ(progress(b.van, 0), 0);
    // Somebody's answers came on this thread: it ran the loop.
    EXPECT_GT(on_me.load(), 0);
    EXPECT_GT(handled, 0);
    // Handed back: the progress thread delivers without help, large
    // segments too.
    const int kAfter = 5;
    for (int i = 0; i < kAfter; ++i) {
        ASSERT_EQ(Send(b, 8, 2 * (n + i), {16, 300000}), PS_OK);
    }
    const int total = n + kAfter;
    ASSERT_TRUE(b.inbox.WaitMsgs(total));
    ASSERT_TRUE(a.inbox.WaitMsgs(total));
    auto shape = [&](int i) {
        return i < n ? std::vector<size_t>{8, 64} : std::vector<size_t>{16, 300000};
    };
    {
        std::lock_guard<std::mutex> lk(a.inbox.mu);
        for (int i = 0; i < total; ++i) {
            EXPECT_TRUE(CheckMsg(a.inbox.msgs[i], 9, 2 * i, shape(i)));
        }
    }
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (int i = 0; i < total; ++i) {
        EXPECT_TRUE(CheckMsg(b.inbox.msgs[i], 8, 2 * i + 1, shape(i)));
    }
}

TEST_P(VanConformance, ManyConcurrentSendersKeepPerThreadOrder)
{
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    // Small, medium (both sides of 4096) and 70000-byte segments.
    SendConcurrentlyAndCheckOrder(worker, server, 8, 150, [](int i) -> size_t {
        return (i % 5 == 0) ? 70000 : static_cast<size_t>(1 + (i * 37) % 6000);
    });
}

TEST_P(VanConformance, QueuedSendsCompleteWhenThePeerReadsAgain)
{
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        server.inbox.gate_closed = true;
    }
    // The server's progress thread stops in deliver() on the first message
    // and reads nothing more; the worker sends far more than the transport
    // buffers hold. send() must return at once every time (the rest is
    // queued), or this test never reaches OpenGate().
    const int kMsgs = 24;
    const size_t kLen = 4u << 20;
    ASSERT_EQ(Send(worker, 8, 0, {8}), PS_OK);
    {
        std::unique_lock<std::mutex> lk(server.inbox.mu);
        ASSERT_TRUE(server.inbox.cv.wait_for(lk, kWait, [&] { return server.inbox.in_gate.load(); }));
    }
    for (int i = 1; i <= kMsgs; ++i) {
        ASSERT_EQ(Send(worker, 8, static_cast<uint64_t>(i), {8, kLen, 100}), PS_OK);
    }
    // Send() released its slices; the van holds its own references.
    if (Cfg().sent_counts_taken_bytes) {
        uint64_t sent_before = 0;
        worker.ops->stats(worker.van, &sent_before, nullptr);
        EXPECT_LT(sent_before, static_cast<uint64_t>(kMsgs) * kLen); // some really is queued
    }
    server.inbox.OpenGate();
    ASSERT_TRUE(server.inbox.WaitMsgs(kMsgs + 1));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    for (int i = 1; i <= kMsgs; ++i) {
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, static_cast<uint64_t>(i), {8, kLen, 100}));
    }
}

TEST_P(VanConformance, SmallSendsBehindAStoppedReaderKeepTheirOrder)
{
    // Many small messages to a reader that stopped: the transport's buffers
    // fill, and sends go on queueing (for the UCX van: a small message UCX
    // cannot take at once becomes an op behind the ones it could). Every
    // 50th is larger than the vans' inline limits, so queued small and large
    // messages interleave too. All arrive, in order, bytes intact.
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    const int kMsgs = 2000;
    auto shape = [](int i) -> std::vector<size_t> {
        return i % 50 == 0 ? std::vector<size_t>{8, 9000}
                           : std::vector<size_t>{8, static_cast<size_t>(1 + i % 97)};
    };
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        server.inbox.gate_closed = true;
    }
    ASSERT_EQ(Send(worker, 8, 0, {8}), PS_OK);
    {
        std::unique_lock<std::mutex> lk(server.inbox.mu);
        ASSERT_TRUE(server.inbox.cv.wait_for(lk, kWait, [&] { return server.inbox.in_gate.load(); }));
    }
    for (int i = 1; i < kMsgs; ++i) {
        ASSERT_EQ(Send(worker, 8, static_cast<uint64_t>(i), shape(i)), PS_OK);
    }
    server.inbox.OpenGate();
    ASSERT_TRUE(server.inbox.WaitMsgs(kMsgs));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    for (int i = 1; i < kMsgs; ++i) {
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[i], 9, static_cast<uint64_t>(i), shape(i)))
            << "message " << i;
    }
}

TEST_P(VanConformance, LaneMessagesKeepTheirPlaceAmongOthers)
{
    // For a van with a send_lane op: lane messages of every length between
    // other messages (small ones, inline and separate segments, and large
    // ones whose receives are still in flight when the next lane message
    // arrives), first to a reader that keeps up, then to one that stopped
    // (the transport's buffers fill, sends queue). Every message arrives
    // once, in order, bytes intact; lane ones through deliver_lane.
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    if (ps_van_send_lane_op(worker.van) == nullptr) {
        GTEST_SKIP() << "the van has no send_lane op";
    }
    const size_t kLaneRange = PS_LANE_MAX_BYTES - 16 + 1;
    auto lane_len = [&](int i) { return 16 + static_cast<size_t>(i) * 37 % kLaneRange; };
    auto shape = [](int i) -> std::vector<size_t> {
        return i % 50 == 0 ? std::vector<size_t>{8, 70000}
                           : i % 11 == 0 ? std::vector<size_t>{8, 9000}
                                         : std::vector<size_t>{8, static_cast<size_t>(1 + i % 97)};
    };
    auto send = [&](int i) {
        return i % 3 != 0 ? SendLane(worker, 8, static_cast<uint64_t>(i), lane_len(i))
                          : Send(worker, 8, static_cast<uint64_t>(i), shape(i));
    };
    auto check = [&](int from, int to) {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        for (int i = from; i < to; ++i) {
            const Received &r = server.inbox.msgs[i];
            if (i % 3 != 0) {
                EXPECT_TRUE(r.lane && r.meta.sender == 9 && r.data.size() == 1 &&
                            r.data[0] == LaneBytes(static_cast<uint64_t>(i), lane_len(i)))
                    << "lane message " << i;
            } else {
                EXPECT_FALSE(r.lane) << "message " << i;
                EXPECT_TRUE(CheckMsg(r, 9, static_cast<uint64_t>(i), shape(i))) << "message " << i;
            }
        }
    };
    const int kRunning = 600, kMsgs = 2400;
    for (int i = 0; i < kRunning; ++i) {
        ASSERT_EQ(send(i), PS_OK) << i;
    }
    ASSERT_TRUE(server.inbox.WaitMsgs(kRunning));
    check(0, kRunning);
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        server.inbox.gate_closed = true;
    }
    ASSERT_EQ(send(kRunning), PS_OK);
    {
        std::unique_lock<std::mutex> lk(server.inbox.mu);
        ASSERT_TRUE(server.inbox.cv.wait_for(lk, kWait, [&] { return server.inbox.in_gate.load(); }));
    }
    for (int i = kRunning + 1; i < kMsgs; ++i) {
        ASSERT_EQ(send(i), PS_OK) << i;
    }
    server.inbox.OpenGate();
    ASSERT_TRUE(server.inbox.WaitMsgs(kMsgs));
    check(kRunning, kMsgs);
    EXPECT_EQ(server.inbox.Count(), static_cast<size_t>(kMsgs));
}

TEST_P(VanConformance, ThreeVansRouteEveryReplyToItsRequester)
{
    // One server, two workers; each worker pushes, the server answers every
    // request to whoever sent it (meta.sender, as the connection proved).
    VanBase server, w1, w2;
    server.inbox.on_msg = [&](const ps_msg_t *in) {
        // Echo segment 0 back, zero-copy, as a response.
        OutMsg m(in->meta.sender, in->meta.key, {});
        m.msg.meta.request = false;
        EXPECT_EQ(ps_msg_add_data(&m.msg, &in->data[0], PS_DATA_UINT8), PS_OK);
        EXPECT_EQ(server.ops->send(server.van, &m.msg), PS_OK);
    };
    ASSERT_EQ(Open(server, 8), PS_OK);
    ASSERT_EQ(Open(w1, 9), PS_OK);
    ASSERT_EQ(Open(w2, 11), PS_OK);
    ASSERT_EQ(w1.ConnectTo(server, 9), PS_OK);
    ASSERT_EQ(w2.ConnectTo(server, 11), PS_OK);
    ASSERT_EQ(server.ConnectTo(w1, 8), PS_OK);
    ASSERT_EQ(server.ConnectTo(w2, 8), PS_OK);
    const int kMsgs = 100;
    auto run = [&](VanBase &w, uint64_t base, size_t step) {
        for (int i = 0; i < kMsgs; ++i) {
            EXPECT_EQ(Send(w, 8, base + i, {static_cast<size_t>(1 + i * step)}), PS_OK);
        }
    };
    std::thread t1([&] { run(w1, 1000, 97); });
    std::thread t2([&] { run(w2, 2000, 89); });
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
            EXPECT_FALSE(w2.inbox.msgs[i].meta.request);
        }
    }
    server.Close(); // before the handler's captures go
}

// ---- peers ----

TEST_P(VanConformance, PeerClosingIsReportedOnce)
{
    VanBase server, worker;
    ASSERT_EQ(Open(server, 8), PS_OK);
    ASSERT_EQ(Open(worker, 9), PS_OK);
    // One step after the other, so that the server knows both connections
    // as node 9's before the worker goes: the worker's message can only
    // travel on its own connection (which the server then has identified by
    // its hello), the server's on the server's. Connecting both at once let
    // the worker's hello still be unread when the server's own connection
    // failed; its connection then failed as a second, later-identified one,
    // a second report this test is not about.
    ASSERT_EQ(worker.ConnectTo(server, 9), PS_OK);
    ASSERT_EQ(Send(worker, 8, 1, {1}), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    ASSERT_EQ(server.ConnectTo(worker, 8), PS_OK);
    ASSERT_EQ(Send(server, 9, 2, {1}), PS_OK);
    ASSERT_TRUE(worker.inbox.WaitMsgs(1));
    worker.Close();
    if (Cfg().peer_close_seen_on_send) {
        // Refused at once or failed later: either way it must be reported.
        for (uint64_t i = 10; i < 13; ++i) {
            if (Send(server, 9, i, {8, 100000}) != PS_OK) {
                break;
            }
        }
    }
    ASSERT_TRUE(server.inbox.WaitFailure(1));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        EXPECT_EQ(server.inbox.failures[0].first, 9);
        ps_status_t why = server.inbox.failures[0].second;
        const std::vector<ps_status_t> &ok = Cfg().peer_close_statuses;
        EXPECT_NE(std::find(ok.begin(), ok.end(), why), ok.end()) << ps_status_str(why);
    }
    // Once: both connections to node 9 went, one report.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        EXPECT_EQ(server.inbox.failures.size(), 1u);
    }
    // Sending to it now fails with what the report said: the postoffice
    // may not have heard the report yet when a request goes out, and the
    // request must fail the way the requests the report fails do.
    ps_status_t reported;
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        reported = server.inbox.failures[0].second;
    }
    EXPECT_EQ(Send(server, 9, 3, {1}), reported);
}

TEST_P(VanConformance, UnassignedNodeGetsAnsweredAndThenAnnouncesItsId)
{
    // The scheduler flow: a node without an id registers; the scheduler
    // connects back to the address it gave and answers; the node learns its
    // id and re-announces itself.
    VanBase sched, node;
    ps_van_params_t sp = DefaultParams();
    if (Cfg().scheduler_flagged) {
        sp.role = PS_ROLE_SCHEDULER;
        sp.is_scheduler = 1;
    }
    ASSERT_EQ(Open(sched, PS_SCHEDULER_ID, sp), PS_OK);
    ASSERT_EQ(Open(node, PS_NODE_EMPTY), PS_OK);
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
    ASSERT_EQ(Send(node, PS_SCHEDULER_ID, 3, {2}), PS_OK);
    ASSERT_TRUE(sched.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(sched.inbox.mu);
    EXPECT_TRUE(CheckMsg(sched.inbox.msgs[1], 9, 3, {2}));
}

TEST_P(VanConformance, DisconnectIsQuietLocallyAndSendsThenFail)
{
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    ASSERT_EQ(Send(worker, 8, 1, {1}), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    worker.ops->disconnect(worker.van, 8);
    EXPECT_EQ(Send(worker, 8, 2, {1}), PS_ERR_UNREACHABLE);
    // The server sees node 9 leave.
    if (Cfg().disconnect_tells_peer) {
        ASSERT_TRUE(server.inbox.WaitFailure(1));
    }
    std::lock_guard<std::mutex> lk(worker.inbox.mu);
    EXPECT_TRUE(worker.inbox.failures.empty());
}

TEST_P(VanConformance, ConnectRetriesUntilThePeerListens)
{
    if (Cfg().connect_retries_in_call) {
        // connect() waits in its call while nobody listens at the port.
        VanBase worker, server;
        int port;
        {
            VanBase probe;
            ASSERT_EQ(Open(probe, 8), PS_OK);
            port = probe.Port();
        }
        ASSERT_EQ(Open(worker, 9), PS_OK);
        ps_node_t target = NodeAt(8, port);
        std::atomic<int> connected{1};
        std::thread dial([&] { connected = worker.ops->connect(worker.van, &target, 9); });
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ps_status_t opened = Open(server, 8, DefaultParams(), port);
        dial.join();
        ASSERT_EQ(opened, PS_OK);
        ASSERT_EQ(connected.load(), PS_OK);
        ASSERT_EQ(Send(worker, 8, 5, {3000, 50000}), PS_OK);
        ASSERT_TRUE(server.inbox.WaitMsgs(1));
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        EXPECT_TRUE(CheckMsg(server.inbox.msgs[0], 9, 5, {3000, 50000}));
        return;
    }
    // Dial a free port before anyone listens on it.
    VanBase worker;
    int port = 0;
    ASSERT_NO_FATAL_FAILURE(OpenAndDialNobody(worker, &port));
    // Queued behind the connection attempt.
    ASSERT_EQ(Send(worker, 8, 5, {3000, 50000}), PS_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    VanBase server;
    ASSERT_EQ(Open(server, 8, DefaultParams(), port), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    EXPECT_TRUE(CheckMsg(server.inbox.msgs[0], 9, 5, {3000, 50000}));
}

TEST_P(VanConformance, ConnectGivesUpAfterItsTimeout)
{
    ps_van_params_t p = DefaultParams();
    p.connect_timeout_ms = 300;
    VanBase worker;
    int port = 0;
    ASSERT_NO_FATAL_FAILURE(OpenAndDialNobody(worker, &port, p));
    if (Cfg().connect_completes_in_call) {
        return; // connect() gave up itself
    }
    ASSERT_TRUE(worker.inbox.WaitFailure(1));
    std::lock_guard<std::mutex> lk(worker.inbox.mu);
    EXPECT_EQ(worker.inbox.failures[0].first, 8);
    EXPECT_EQ(worker.inbox.failures[0].second, PS_ERR_UNREACHABLE);
}

TEST_P(VanConformance, ForgedHelloTagIsRefusedOnSend)
{
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    OutMsg m(8, 1, {1});
    const std::string &tag = Cfg().hello_tag;
    if (Cfg().inband_hello) {
        ASSERT_FALSE(tag.empty());
        ASSERT_LE(tag.size(), sizeof(m.msg.meta.van_data));
        ASSERT_LE(Cfg().hello_len, sizeof(m.msg.meta.van_data));
        memcpy(m.msg.meta.van_data, tag.data(), tag.size());
        m.msg.meta.van_data_len = Cfg().hello_len;
        EXPECT_EQ(worker.ops->send(worker.van, &m.msg), PS_ERR_INVALID_ARG);
    }
    EXPECT_EQ(Send(worker, PS_NODE_EMPTY, 2, {1}), PS_ERR_INVALID_ARG);
    EXPECT_EQ(Send(worker, 12345, 3, {1}), PS_ERR_UNREACHABLE);
}

TEST_P(VanConformance, DeviceMemoryIsRefusedUnlessTheVanMovesIt)
{
    // A van that does not advertise device memory never lets the CPU read
    // a device segment: the emulated kind's pages fault on any host access,
    // so a van that copied, gathered or inlined it would crash here. It
    // refuses the message (PS_ERR_UNSUPPORTED now, or drops it) and the
    // connection carries on.
    VanBase server, worker;
    ASSERT_NO_FATAL_FAILURE(OpenPair(server, worker));
    ps_van_attr_t attr;
    ASSERT_EQ(worker.ops->query(worker.van, &attr), PS_OK);
    if (attr.cap_flags & PS_CAP_DEVICE_MEMORY)
        GTEST_SKIP() << "this van moves device memory itself";
    ASSERT_EQ(ps_mem_ops(PS_MEM_EMU)->init(), PS_OK);
    for (size_t len : {size_t(16), size_t(8 << 10), size_t(1 << 20)}) {
        ps_slice_t dev;
        ASSERT_EQ(ps_mem_slice_alloc(PS_MEM_EMU, 0, len, &dev), PS_OK);
        OutMsg m(8, 1, {8});
        ASSERT_EQ(ps_msg_add_data(&m.msg, &dev, PS_DATA_UINT8), PS_OK);
        ps_slice_unref(&dev);
        ps_status_t st = worker.ops->send(worker.van, &m.msg);
        EXPECT_TRUE(st == PS_ERR_UNSUPPORTED || st == PS_OK) << len << ": " << ps_status_str(st);
    }
    ASSERT_EQ(Send(worker, 8, 2, {64, 100 << 10}), PS_OK);
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(server.inbox.mu);
    const Received &last = server.inbox.msgs.back();
    EXPECT_TRUE(CheckMsg(last, 9, 2, {64, 100 << 10})) << "the connection still carries data";
    for (const Received &r : server.inbox.msgs)
        EXPECT_EQ(r.meta.timestamp, 2) << "no device message was delivered";
}

// ---- bind and close ----

TEST_P(VanConformance, PortAlreadyTakenIsAddressInUse)
{
    VanBase a;
    ASSERT_EQ(Open(a, 8), PS_OK);
    VanBase b;
    EXPECT_EQ(Open(b, 9, DefaultParams(), a.Port()), PS_ERR_ADDRESS_IN_USE);
    // A second bind on a listening van is refused.
    ps_node_t again = a.node;
    EXPECT_EQ(a.ops->bind(a.van, &again, 0), PS_ERR_BAD_STATE);
}

TEST_P(VanConformance, RandomPortsAreInUpstreamRange)
{
    VanBase a;
    ASSERT_EQ(Open(a, 8), PS_OK);
    EXPECT_GE(a.Port(), 10000);
    EXPECT_LT(a.Port(), 50000);
    EXPECT_EQ(a.node.num_ports, 1u);
}

TEST_P(VanConformance, CloseWithQueuedDataAndUnreachablePeerIsBounded)
{
    VanBase worker;
    int port = 0;
    ASSERT_NO_FATAL_FAILURE(OpenAndDialNobody(worker, &port));
    // (connect_completes_in_call: nothing to queue behind, sends refused.)
    const ps_status_t want = Cfg().connect_completes_in_call ? PS_ERR_UNREACHABLE : PS_OK;
    for (int i = 0; i < 10; ++i) {
        ASSERT_EQ(Send(worker, 8, static_cast<uint64_t>(i), {1000, 100000}), want);
    }
    worker.Close(); // returns; queued slices are released (asan checks leaks)
}

} // namespace ps_van_test

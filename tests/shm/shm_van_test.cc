// Van-level tests of the shared-memory van ("shm") and the composed van
// ("ipc"): vans in this process (and a peer process, tests/shm/shm_peer)
// driven through the registry and the ops table as the postoffice drives
// them. Every way a value can travel (inline, read by the peer, staged,
// shared buffer in place, streamed through the ring) is exercised by
// turning the others off. The tests every van passes the same way are the
// conformance suite (tests/van/van_conformance.h), instantiated here.
//
// No timing thresholds: every wait has a generous deadline that only ends a
// test that would otherwise hang.

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/van/van_conformance.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/shared_block.h"
#include "ps/base/status.h"
#include "ps/net/auth.h"
#include "ps/net/caps.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/shm/shm_job.h"
#include "ps/net/shm/shm_van.h"
#include "ps/net/shm_alloc.h"
#include "ps/net/van/van.h"
}

extern char **environ;

namespace {

constexpr auto kWait = std::chrono::seconds(60);

uint8_t Pattern(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + i;
    x ^= x >> 29;
    return static_cast<uint8_t>(x * 0xbf58476d1ce4e5b9ull >> 56);
}

ps_slice_t Filled(size_t len, uint64_t seed, bool shared = false)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    if (len == 0) {
        return s;
    }
    ps_status_t st = shared ? ps_shm_slice_alloc(len, &s) : ps_slice_alloc(len, 64, &s);
    EXPECT_EQ(st, PS_OK);
    uint8_t *p = static_cast<uint8_t *>(ps_slice_ptr(&s));
    for (size_t i = 0; i < len; ++i) {
        p[i] = Pattern(seed, i);
    }
    return s;
}

bool Matches(const std::string &got, size_t len, uint64_t seed)
{
    if (got.size() != len) {
        return false;
    }
    for (size_t i = 0; i < len; ++i) {
        if (static_cast<uint8_t>(got[i]) != Pattern(seed, i)) {
            return false;
        }
    }
    return true;
}

struct Received {
    ps_meta_t meta;
    std::vector<std::string> data;
    std::vector<const void *> ptrs;
    std::vector<int> kinds;
    std::string body;
    std::vector<ps_node_t> nodes;
};

struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Received> msgs;
    std::vector<std::pair<int, ps_status_t>> failures;
    std::map<std::pair<uint64_t, unsigned>, ps_slice_t> dest; // (key, index) -> where
    bool keep = false;           // keep delivered messages (their references)
    std::vector<ps_msg_t> kept;
    bool gate_closed = false;    // deliver() waits while closed
    std::function<void(const ps_msg_t *)> on_msg;

    ~Inbox() { Release(); }
    void Release()
    {
        std::lock_guard<std::mutex> lk(mu);
        for (auto &kv : dest) {
            ps_slice_unref(&kv.second);
        }
        dest.clear();
        for (auto &m : kept) {
            ps_msg_release(&m);
        }
        kept.clear();
    }
    bool WaitMsgs(size_t n)
    {
        std::unique_lock<std::mutex> lk(mu);
        return cv.wait_for(lk, kWait, [&] { return msgs.size() >= n; });
    }
    bool WaitFailure(size_t n)
    {
        std::unique_lock<std::mutex> lk(mu);
        return cv.wait_for(lk, kWait, [&] { return failures.size() >= n; });
    }
    void SetKeep()
    {
        std::lock_guard<std::mutex> lk(mu);
        keep = true;
    }
    void OpenGate()
    {
        std::lock_guard<std::mutex> lk(mu);
        gate_closed = false;
        cv.notify_all();
    }
};

ps_status_t RecvBuffer(void *arg, const ps_meta_t *meta, unsigned index, uint64_t len,
                       ps_slice_t *slice_p)
{
    Inbox *in = static_cast<Inbox *>(arg);
    std::lock_guard<std::mutex> lk(in->mu);
    auto it = in->dest.find({meta->key, index});
    if (it == in->dest.end() || it->second.len < len) {
        return PS_ERR_NOT_FOUND;
    }
    *slice_p = ps_slice_ref(&it->second);
    return PS_OK;
}

void Deliver(void *arg, ps_msg_t *msg)
{
    Inbox *in = static_cast<Inbox *>(arg);
    Received r;
    r.meta = msg->meta;
    r.meta.body = nullptr;
    r.meta.control.nodes = nullptr;
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        const char *p = static_cast<const char *>(ps_slice_ptr(&msg->data[i]));
        r.data.emplace_back(p == nullptr ? std::string() : std::string(p, msg->data[i].len));
        r.ptrs.push_back(p);
        r.kinds.push_back(static_cast<int>(ps_slice_mem_kind(&msg->data[i])));
    }
    if (msg->meta.body_len != 0) {
        r.body.assign(reinterpret_cast<const char *>(msg->meta.body), msg->meta.body_len);
    }
    for (uint32_t i = 0; i < msg->meta.control.num_nodes; ++i) {
        r.nodes.push_back(msg->meta.control.nodes[i]);
    }
    bool keep;
    {
        // Kept (with its references) before anyone is told it arrived.
        std::unique_lock<std::mutex> lk(in->mu);
        in->cv.wait(lk, [&] { return !in->gate_closed; });
        in->msgs.push_back(std::move(r));
        keep = in->keep;
        if (keep) {
            in->kept.push_back(*msg);
        }
        in->cv.notify_all();
    }
    if (in->on_msg) {
        in->on_msg(msg);
    }
    if (!keep) {
        ps_msg_release(msg);
    }
}

void PeerFailed(void *arg, int node_id, ps_status_t why)
{
    Inbox *in = static_cast<Inbox *>(arg);
    std::lock_guard<std::mutex> lk(in->mu);
    in->failures.emplace_back(node_id, why);
    in->cv.notify_all();
}

// How values may travel in a test.
struct Mode {
    const char *name;
    int cma, seg, stage, busy;
};

const Mode kModes[] = {
    {"all", 1, 1, 1, 0},
    {"busy", 1, 1, 1, 1},
    {"cma_only", 1, 0, 0, 0},
    {"stage_only", 0, 0, 1, 0},
    {"stream_only", 0, 0, 0, 0},
};

struct Van {
    Inbox inbox;
    ps_van_t *van = nullptr;
    const ps_van_ops_t *ops = nullptr;
    ps_node_t node;

    // With a job secret set, every channel runs the handshake first.
    const char *secret = nullptr;
    int connect_timeout_ms = 20000;

    ps_status_t Open(const char *name = "shm", const Mode &m = kModes[0])
    {
        const ps_van_component_t *c = nullptr;
        ps_status_t st = ps_van_find(name, &c);
        if (st != PS_OK) {
            return st;
        }
        ops = c->ops;
        ps_van_params_t p;
        memset(&p, 0, sizeof(p));
        p.role = PS_ROLE_WORKER;
        p.busy_poll = m.busy;
        p.connect_timeout_ms = connect_timeout_ms;
        if (secret != nullptr) {
            p.auth_enabled = 1;
            ps_status_t kst = ps_auth_key_from_secret(secret, strlen(secret), &p.auth_key);
            if (kst != PS_OK) {
                return kst;
            }
        }
        ps_van_callbacks_t cb{};
        cb.arg = &inbox;
        cb.recv_buffer = RecvBuffer;
        cb.deliver = Deliver;
        cb.peer_failed = PeerFailed;
        st = ops->open(&p, &cb, &van);
        if (st == PS_OK && strcmp(name, "shm") == 0) {
            ps__shm_test_options(van, m.cma, m.seg, m.stage);
        }
        ps_node_init(&node);
        return st;
    }
    ps_status_t Bind(int id, const char *host = "127.0.0.1", int port = 0)
    {
        snprintf(node.hostname, sizeof(node.hostname), "%s", host);
        node.id = id;
        node.num_ports = 1;
        node.ports[0] = port;
        ps_status_t st = ops->bind(van, &node, 40);
        if (st == PS_OK) {
            st = ops->set_node_id(van, id);
        }
        return st;
    }
    ps_status_t Connect(const Van &peer, int my_id = PS_NODE_EMPTY)
    {
        return ops->connect(van, &peer.node, my_id == PS_NODE_EMPTY ? node.id : my_id);
    }
    ps_status_t Send(ps_msg_t *msg) { return ops->send(van, msg); }
    void Close()
    {
        if (van != nullptr) {
            ops->close(van);
            van = nullptr;
        }
    }
    ~Van() { Close(); }
};

// Files in /dev/shm and open descriptors of this process, to find leaks.
// Other programs on the host (other tests running meanwhile) come and go in
// /dev/shm too: a leak is a new file naming one of our processes or ps.
std::set<std::string> DevShm()
{
    std::set<std::string> names;
    DIR *d = opendir("/dev/shm");
    if (d == nullptr) {
        return names;
    }
    while (struct dirent *e = readdir(d)) {
        names.insert(e->d_name);
    }
    closedir(d);
    return names;
}

// New files in /dev/shm since `before` that belong to us: named after one
// of `pids`, or after ps.
std::vector<std::string> Leaked(const std::set<std::string> &before, std::vector<pid_t> pids)
{
    pids.push_back(getpid());
    std::vector<std::string> out;
    for (const auto &name : DevShm()) {
        if (before.count(name) != 0) {
            continue;
        }
        // libfabric shm's region of a fabric van ("PID:psRANDOM"): another
        // test's (this test opens none), whose sandbox may give it our pid.
        size_t digits = name.find_first_not_of("0123456789");
        if (digits != 0 && digits != std::string::npos && name.compare(digits, 3, ":ps") == 0) {
            continue;
        }
        bool ours = name.rfind("ps", 0) == 0 || name.find("ps-shm") != std::string::npos;
        for (pid_t p : pids) {
            std::string id = std::to_string(p);
            for (size_t at = name.find(id); at != std::string::npos; at = name.find(id, at + 1)) {
                bool left = at == 0 || !isdigit(static_cast<unsigned char>(name[at - 1]));
                size_t end = at + id.size();
                bool right = end == name.size() || !isdigit(static_cast<unsigned char>(name[end]));
                ours = ours || (left && right);
            }
        }
        if (ours) {
            out.push_back(name);
        }
    }
    return out;
}

// Mappings of /dev/shm files in this process (ps never makes any).
int DevShmMappings()
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == nullptr) {
        return -1;
    }
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f) != nullptr) {
        n += strstr(line, " /dev/shm/") != nullptr;
    }
    fclose(f);
    return n;
}

// "fd -> target" of every open descriptor (the directory's own aside).
std::set<std::string> OpenFds()
{
    std::set<std::string> fds;
    DIR *d = opendir("/proc/self/fd");
    if (d == nullptr) {
        return fds;
    }
    int self = dirfd(d);
    while (struct dirent *e = readdir(d)) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == self) {
            continue;
        }
        char path[300], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        target[n > 0 ? n : 0] = '\0';
        // Only what a van opens (sockets, memfds, epoll, eventfd): a
        // sanitizer's runtime may read /proc or use pipes meanwhile.
        if (strncmp(target, "socket:", 7) == 0 || strncmp(target, "anon_inode:", 11) == 0 ||
            strstr(target, "memfd:") != nullptr) {
            fds.insert(std::string(e->d_name) + " -> " + target);
        }
    }
    closedir(d);
    return fds;
}

// Each test its own job id: names never meet those of another test (nor
// of another run of this one: in a sandbox the pid may be the same).
void UniqueJob()
{
    static std::atomic<int> seq{0};
    std::random_device rd;
    char job[64];
    snprintf(job, sizeof(job), "vantest-%08x%08x-%d", rd(), rd(), seq++);
    ASSERT_EQ(ps_config_set(PS_CFG_PS_JOB_ID, job), PS_OK);
}

// One data message: keys, values, lengths as the KV app sends them.
void MakeMsg(ps_msg_t *msg, int recver, uint64_t key, const std::vector<ps_slice_t> &segs)
{
    ps_msg_init(msg);
    msg->meta.recver = recver;
    msg->meta.key = key;
    msg->meta.app_id = 3;
    msg->meta.customer_id = 1;
    msg->meta.timestamp = static_cast<int>(key);
    msg->meta.request = true;
    msg->meta.push = true;
    for (const auto &s : segs) {
        ps_msg_add_data(msg, &s, PS_DATA_CHAR);
    }
}

// Segments the van sent by how they travelled (see ps__shm_test_counters).
enum { kStaged = 0, kInline = 1, kCma = 2, kShared = 3, kStream = 4, kPlaced = 5 };
std::vector<uint64_t> Counts(ps_van_t *van)
{
    uint64_t c[PS__SHM_TEST_KINDS];
    ps__shm_test_counters(van, c);
    return std::vector<uint64_t>(c, c + PS__SHM_TEST_KINDS);
}

// ---- the conformance suite ----

using ps_van_test::VanConfig;
using ps_van_test::VanConfigName;
using ps_van_test::VanConformance;

VanConfig ShmConfig()
{
    VanConfig c;
    c.name = "shm";
    c.van = "shm";
    // Peers are found by job id, host and port: each test a job of its own.
    c.unique_env_name = "PS_JOB_ID";
    // A peer's process (here: its van) going away closes the channel.
    c.peer_close_statuses = {PS_ERR_PEER_GONE};
    // The hello travels on the rendezvous socket, never as a message.
    c.inband_hello = false;
    // connect() runs the handshake on the rendezvous socket in the call.
    c.connect_completes_in_call = true;
    c.not_applicable["ConnectRetriesUntilThePeerListens"] =
        "connect() does not wait for a peer to listen: nobody listening is unreachable at once";
    c.caps_set = PS_CAP_SAME_HOST_ONLY | PS_CAP_BUSY_POLL;
    return c;
}

INSTANTIATE_TEST_SUITE_P(Shm, VanConformance, ::testing::Values(ShmConfig()), VanConfigName);

class ShmVanModes : public ::testing::TestWithParam<Mode> {
protected:
    void SetUp() override { UniqueJob(); }
};

// Every size class of a segment, in every mode, arrives intact with its
// meta; several segments per message; empty segments stay empty.
TEST_P(ShmVanModes, MessageShapesAndBytes)
{
    const Mode &m = GetParam();
    Van a, b;
    ASSERT_EQ(a.Open("shm", m), PS_OK);
    ASSERT_EQ(b.Open("shm", m), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ASSERT_EQ(b.Bind(8), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK); // idempotent

    const size_t sizes[] = {0, 1, 8, 100, 16384, 16385, 65536, 1 << 20, (4 << 20) + 123};
    uint64_t key = 1;
    for (size_t len : sizes) {
        ps_slice_t k = Filled(8, key * 10 + 0);
        ps_slice_t v = Filled(len, key * 10 + 1);
        ps_slice_t l = Filled(4, key * 10 + 2);
        ps_msg_t msg;
        MakeMsg(&msg, 8, key, {k, v, l});
        ASSERT_EQ(a.Send(&msg), PS_OK) << "size " << len;
        ps_msg_release(&msg);
        ps_slice_unref(&k);
        ps_slice_unref(&v);
        ps_slice_unref(&l);
        ++key;
    }
    ASSERT_TRUE(b.inbox.WaitMsgs(key - 1));
    // Four values are over the inline size: requests are staged when
    // allowed, else read by the peer, else streamed.
    std::vector<uint64_t> want(PS__SHM_TEST_KINDS, 0);
    want[kInline] = 9 * 3 - 4;
    want[m.stage ? kStaged : m.cma ? kCma : kStream] = 4;
    EXPECT_EQ(Counts(a.van), want);
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (size_t i = 0; i < key - 1; ++i) {
        const Received &r = b.inbox.msgs[i];
        uint64_t k = i + 1;
        EXPECT_EQ(r.meta.key, k);
        EXPECT_EQ(r.meta.sender, 9);
        EXPECT_EQ(r.meta.app_id, 3);
        EXPECT_EQ(r.meta.timestamp, static_cast<int>(k));
        EXPECT_TRUE(r.meta.request && r.meta.push);
        ASSERT_EQ(r.data.size(), 3u);
        EXPECT_TRUE(Matches(r.data[0], 8, k * 10 + 0));
        EXPECT_TRUE(Matches(r.data[1], sizes[i], k * 10 + 1)) << "size " << sizes[i];
        EXPECT_TRUE(Matches(r.data[2], 4, k * 10 + 2));
        EXPECT_EQ(r.meta.data_size, 12 + sizes[i]);
    }
}

// Control messages: a node list and a body, and one whose meta is too big
// for a record (streamed).
TEST_P(ShmVanModes, ControlMessagesSmallAndHuge)
{
    const Mode &m = GetParam();
    Van a, b;
    ASSERT_EQ(a.Open("shm", m), PS_OK);
    ASSERT_EQ(b.Open("shm", m), PS_OK);
    ASSERT_EQ(a.Bind(1), PS_OK);
    ASSERT_EQ(b.Bind(9), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);

    for (size_t n : {size_t(3), size_t(1500)}) {
        std::vector<ps_node_t> nodes(n);
        for (size_t i = 0; i < n; ++i) {
            ps_node_init(&nodes[i]);
            nodes[i].id = static_cast<int>(8 + i);
            nodes[i].role = PS_ROLE_SERVER;
            std::string host(200, 'h');
            host += std::to_string(i);
            snprintf(nodes[i].hostname, sizeof(nodes[i].hostname), "%s", host.c_str());
            nodes[i].num_ports = 1;
            nodes[i].ports[0] = static_cast<int>(1000 + i);
        }
        ps_msg_t msg;
        ps_msg_init(&msg);
        msg.meta.recver = 9;
        msg.meta.control.cmd = PS_CTRL_ADD_NODE;
        msg.meta.control.nodes = nodes.data();
        msg.meta.control.num_nodes = static_cast<uint32_t>(n);
        const char body[] = "the table";
        msg.meta.body = reinterpret_cast<const uint8_t *>(body);
        msg.meta.body_len = sizeof(body) - 1;
        ASSERT_EQ(a.Send(&msg), PS_OK);
    }
    ASSERT_TRUE(b.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (size_t k = 0; k < 2; ++k) {
        const Received &r = b.inbox.msgs[k];
        size_t n = k == 0 ? 3 : 1500;
        EXPECT_EQ(r.meta.control.cmd, PS_CTRL_ADD_NODE);
        EXPECT_EQ(r.meta.sender, 1);
        EXPECT_EQ(r.body, "the table");
        ASSERT_EQ(r.nodes.size(), n);
        EXPECT_EQ(r.nodes[n - 1].ports[0], static_cast<int>(1000 + n - 1));
        EXPECT_EQ(std::string(r.nodes[n - 1].hostname), std::string(200, 'h') + std::to_string(n - 1));
    }
}

// recv_buffer(): every kind of segment lands in the buffer named for it.
TEST_P(ShmVanModes, ReceivesIntoTheNamedBuffer)
{
    const Mode &m = GetParam();
    Van a, b;
    ASSERT_EQ(a.Open("shm", m), PS_OK);
    ASSERT_EQ(b.Open("shm", m), PS_OK);
    ASSERT_EQ(a.Bind(8), PS_OK);
    ASSERT_EQ(b.Bind(9), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);

    const size_t sizes[] = {8, 16384, 100000, 3 << 20};
    std::vector<const void *> where;
    for (size_t i = 0; i < 4; ++i) {
        ps_slice_t d;
        ASSERT_EQ(ps_slice_alloc(sizes[i] + 64, 64, &d), PS_OK);
        where.push_back(ps_slice_ptr(&d));
        std::lock_guard<std::mutex> lk(b.inbox.mu);
        b.inbox.dest[{100 + i, 1}] = d;
    }
    for (size_t i = 0; i < 4; ++i) {
        // A pull response (as the KV server sends it), from a shared buffer
        // for one of them.
        ps_slice_t k = Filled(8, 1);
        ps_slice_t v = Filled(sizes[i], 50 + i, i == 2);
        ps_msg_t msg;
        MakeMsg(&msg, 9, 100 + i, {k, v});
        msg.meta.request = false;
        msg.meta.push = false;
        msg.meta.pull = true;
        ASSERT_EQ(a.Send(&msg), PS_OK);
        ps_msg_release(&msg);
        ps_slice_unref(&k);
        ps_slice_unref(&v);
    }
    ASSERT_TRUE(b.inbox.WaitMsgs(4));
    // Pull responses are read by the peer when it can (one copy, into the
    // named buffer); a shared buffer is described, not copied, when allowed.
    std::vector<uint64_t> want(PS__SHM_TEST_KINDS, 0);
    want[kInline] = 4 + 2;
    int plain = m.cma ? kCma : m.stage ? kStaged : kStream;
    want[plain]++;
    want[m.seg ? kShared : plain]++;
    EXPECT_EQ(Counts(a.van), want);
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (size_t i = 0; i < 4; ++i) {
        const Received &r = b.inbox.msgs[i];
        ASSERT_EQ(r.data.size(), 2u);
        EXPECT_EQ(r.ptrs[1], where[i]) << "size " << sizes[i];
        EXPECT_TRUE(Matches(r.data[1], sizes[i], 50 + i));
    }
}

// Many messages of mixed sizes, through a receiver that stops reading for
// a while (the rings fill, sends queue): all arrive, in order.
TEST_P(ShmVanModes, OrderUnderBackPressure)
{
    const Mode &m = GetParam();
    Van a, b;
    ASSERT_EQ(a.Open("shm", m), PS_OK);
    ASSERT_EQ(b.Open("shm", m), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ASSERT_EQ(b.Bind(8), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    {
        std::lock_guard<std::mutex> lk(b.inbox.mu);
        b.inbox.gate_closed = true;
    }
    const size_t sizes[] = {8, 300, 20000, 70000, 250000, 1 << 20};
    const int n = 120;
    for (int i = 0; i < n; ++i) {
        ps_slice_t v = Filled(sizes[i % 6], 1000 + i);
        ps_msg_t msg;
        MakeMsg(&msg, 8, static_cast<uint64_t>(i), {v});
        ASSERT_EQ(a.Send(&msg), PS_OK) << i;
        ps_msg_release(&msg);
        ps_slice_unref(&v);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    b.inbox.OpenGate();
    ASSERT_TRUE(b.inbox.WaitMsgs(n));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(b.inbox.msgs[i].meta.key, static_cast<uint64_t>(i));
        EXPECT_TRUE(Matches(b.inbox.msgs[i].data[0], sizes[i % 6], 1000 + i)) << i;
    }
}

// Both directions at once, answered from the progress thread (as a server
// answers): an echo of every message.
TEST_P(ShmVanModes, EchoBothWays)
{
    const Mode &m = GetParam();
    Van a, b;
    ASSERT_EQ(a.Open("shm", m), PS_OK);
    ASSERT_EQ(b.Open("shm", m), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ASSERT_EQ(b.Bind(8), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    b.inbox.on_msg = [&](const ps_msg_t *in) {
        ps_msg_t out;
        ps_msg_init(&out);
        out.meta.recver = in->meta.sender;
        out.meta.key = in->meta.key;
        for (uint32_t i = 0; i < in->num_data; ++i) {
            ps_msg_add_data(&out, &in->data[i], PS_DATA_CHAR);
        }
        EXPECT_EQ(b.Send(&out), PS_OK);
        ps_msg_release(&out);
    };
    const int n = 30;
    for (int i = 0; i < n; ++i) {
        ps_slice_t v = Filled(i % 3 == 0 ? (1 << 20) : 5000, 7 + i);
        ps_msg_t msg;
        MakeMsg(&msg, 8, static_cast<uint64_t>(i), {v});
        ASSERT_EQ(a.Send(&msg), PS_OK);
        ps_msg_release(&msg);
        ps_slice_unref(&v);
    }
    ASSERT_TRUE(a.inbox.WaitMsgs(n));
    std::lock_guard<std::mutex> lk(a.inbox.mu);
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(a.inbox.msgs[i].meta.sender, 8);
        EXPECT_TRUE(Matches(a.inbox.msgs[i].data[0], i % 3 == 0 ? (1 << 20) : 5000, 7 + i));
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, ShmVanModes, ::testing::ValuesIn(kModes),
                         [](const ::testing::TestParamInfo<Mode> &info) {
                             return std::string(info.param.name);
                         });

class ShmVan : public ::testing::Test {
protected:
    void SetUp() override { UniqueJob(); }
};

// A value in a shared buffer is not copied: the receiver's view is the
// sender's memory, and the sender keeps its buffer until the view goes.
TEST_F(ShmVan, SharedBufferTravelsWithoutCopy)
{
    Van a, b;
    ASSERT_EQ(a.Open(), PS_OK);
    ASSERT_EQ(b.Open(), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ASSERT_EQ(b.Bind(8), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    b.inbox.SetKeep();

    ps_slice_t v = Filled(1 << 20, 77, true);
    ASSERT_TRUE(ps_shm_buf_is_shared(v.buf));
    ps_slice_t k = Filled(8, 1);
    ps_msg_t msg;
    MakeMsg(&msg, 8, 5, {k, v});
    ASSERT_EQ(a.Send(&msg), PS_OK);
    ps_msg_release(&msg);
    ASSERT_TRUE(b.inbox.WaitMsgs(1));
    EXPECT_EQ(Counts(a.van)[kShared], 1u);
    {
        std::lock_guard<std::mutex> lk(b.inbox.mu);
        EXPECT_EQ(b.inbox.msgs[0].kinds[1], PS_BUF_MEM_SHM);
        EXPECT_TRUE(Matches(b.inbox.msgs[0].data[1], 1 << 20, 77));
    }
    // The sender's buffer is held for the peer, and what the sender writes
    // shows in the receiver's view: the same memory.
    EXPECT_GT(ps_buf_refcount(v.buf), 1u);
    static_cast<uint8_t *>(ps_slice_ptr(&v))[123] ^= 0xff;
    {
        std::lock_guard<std::mutex> lk(b.inbox.mu);
        const uint8_t *view = static_cast<const uint8_t *>(ps_slice_ptr(&b.inbox.kept[0].data[1]));
        EXPECT_EQ(view[123], static_cast<uint8_t>(Pattern(77, 123) ^ 0xff));
    }
    // Letting go of the view hands the buffer back to the sender.
    b.inbox.Release();
    auto until = std::chrono::steady_clock::now() + kWait;
    while (ps_buf_refcount(v.buf) != 1 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(ps_buf_refcount(v.buf), 1u);
    ps_slice_unref(&v);
    ps_slice_unref(&k);
}

// Opening the van installs shared segments as the process's shared
// blocks (ps/base/shared_block.h), which the staging pool of device values
// uses: a value on such a block travels as a descriptor too, and the
// block's release runs once the receiver lets go of its view.
TEST_F(ShmVan, SharedBlocksTravelWithoutCopy)
{
    Van a, b;
    ASSERT_EQ(a.Open(), PS_OK);
    ASSERT_EQ(b.Open(), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ASSERT_EQ(b.Bind(8), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    b.inbox.SetKeep();

    const ps_shared_block_ops_t *blocks = ps_shared_block_provider();
    ASSERT_NE(blocks, nullptr);
    ps_shared_block_t *block;
    void *data;
    ASSERT_EQ(blocks->create(1 << 20, &block, &data), PS_OK);
    static std::atomic<int> released{0};
    released = 0;
    ps_buf_t *buf;
    ASSERT_EQ(blocks->wrap(block, 1 << 20, [](void *) { released++; }, nullptr, &buf), PS_OK);
    for (size_t i = 0; i < (1u << 20); ++i) {
        static_cast<uint8_t *>(data)[i] = Pattern(31, i);
    }
    ps_slice_t v;
    ASSERT_EQ(ps_slice_of(buf, 0, 1 << 20, &v), PS_OK);
    ps_buf_unref(buf);
    ps_slice_t k = Filled(8, 1);
    ps_msg_t msg;
    MakeMsg(&msg, 8, 5, {k, v});
    ASSERT_EQ(a.Send(&msg), PS_OK);
    ps_msg_release(&msg);
    ps_slice_unref(&v);
    ps_slice_unref(&k);
    ASSERT_TRUE(b.inbox.WaitMsgs(1));
    EXPECT_EQ(Counts(a.van)[kShared], 1u);
    EXPECT_EQ(Counts(a.van)[kStaged], 0u);
    {
        std::lock_guard<std::mutex> lk(b.inbox.mu);
        EXPECT_EQ(b.inbox.msgs[0].kinds[1], PS_BUF_MEM_SHM);
        EXPECT_TRUE(Matches(b.inbox.msgs[0].data[1], 1 << 20, 31));
    }
    EXPECT_EQ(released.load(), 0); // the van holds it for the receiver
    b.inbox.Release();
    auto until = std::chrono::steady_clock::now() + kWait;
    while (released.load() == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(released.load(), 1);
    blocks->destroy(block);
}

// A pull whose destination is a shared buffer is answered by writing the
// value straight into it: the answer carries no bytes, and the named
// destination already holds them. Without a named destination on arrival
// the value is still delivered (copied out of the buffer).
TEST_F(ShmVan, PullAnswerWrittenIntoSharedDestination)
{
    Van w, s;
    ASSERT_EQ(w.Open(), PS_OK);
    ASSERT_EQ(s.Open(), PS_OK);
    ASSERT_EQ(w.Bind(9), PS_OK);
    ASSERT_EQ(s.Bind(8), PS_OK);
    ASSERT_EQ(w.Connect(s), PS_OK);
    ASSERT_EQ(s.Connect(w), PS_OK);
    const size_t len = 3 << 20;
    s.inbox.on_msg = [&](const ps_msg_t *req) {
        // The server's answer: keys back, then the value (from plain memory).
        ps_slice_t v = Filled(len, 900 + req->meta.timestamp);
        ps_msg_t res;
        ps_msg_init(&res);
        res.meta.recver = req->meta.sender;
        res.meta.app_id = req->meta.app_id;
        res.meta.customer_id = req->meta.customer_id;
        res.meta.timestamp = req->meta.timestamp;
        res.meta.key = req->meta.key;
        res.meta.pull = true;
        ps_msg_add_data(&res, &req->data[0], PS_DATA_CHAR);
        ps_msg_add_data(&res, &v, PS_DATA_CHAR);
        EXPECT_EQ(s.Send(&res), PS_OK);
        ps_msg_release(&res);
        ps_slice_unref(&v);
    };
    ps_slice_t dest[2];
    for (int t = 0; t < 2; ++t) {
        ASSERT_EQ(ps_shm_slice_alloc(len + 4096, &dest[t]), PS_OK);
        ps_slice_t where;
        ASSERT_EQ(ps_slice_sub(&dest[t], 4096, len, &where), PS_OK);
        if (t == 0) {
            std::lock_guard<std::mutex> lk(w.inbox.mu);
            w.inbox.dest[{static_cast<uint64_t>(t), 1}] = ps_slice_ref(&where);
        }
        ps_slice_t k = Filled(8, 1);
        ps_msg_t msg;
        MakeMsg(&msg, 8, static_cast<uint64_t>(t), {k});
        msg.meta.push = false;
        msg.meta.pull = true;
        msg.meta.addr = reinterpret_cast<uint64_t>(ps_slice_ptr(&where));
        msg.meta.val_len = len;
        ASSERT_EQ(w.Send(&msg), PS_OK);
        ps_msg_release(&msg);
        ps_slice_unref(&k);
        ps_slice_unref(&where);
        ASSERT_TRUE(w.inbox.WaitMsgs(static_cast<size_t>(t) + 1));
    }
    EXPECT_EQ(Counts(s.van)[kPlaced], 2u);
    std::lock_guard<std::mutex> lk(w.inbox.mu);
    // Named: the bytes are in place, no copy.
    EXPECT_EQ(w.inbox.msgs[0].ptrs[1], static_cast<const uint8_t *>(ps_slice_ptr(&dest[0])) + 4096);
    EXPECT_TRUE(Matches(w.inbox.msgs[0].data[1], len, 900 + 0));
    // Not named on arrival: copied out of the shared buffer.
    EXPECT_NE(w.inbox.msgs[1].ptrs[1], static_cast<const uint8_t *>(ps_slice_ptr(&dest[1])) + 4096);
    EXPECT_TRUE(Matches(w.inbox.msgs[1].data[1], len, 900 + 1));
    ps_slice_unref(&dest[0]);
    ps_slice_unref(&dest[1]);
}

// Large plain values are not kept by the sender longer than the peer
// needs them (read or staged, then acknowledged).
TEST_F(ShmVan, SenderLetsGoOfLargeValues)
{
    for (const Mode &m : kModes) {
        Van a, b;
        ASSERT_EQ(a.Open("shm", m), PS_OK);
        ASSERT_EQ(b.Open("shm", m), PS_OK);
        ASSERT_EQ(a.Bind(9), PS_OK);
        ASSERT_EQ(b.Bind(8), PS_OK);
        ASSERT_EQ(a.Connect(b), PS_OK);
        ps_slice_t v = Filled(3 << 20, 9);
        ps_msg_t msg;
        MakeMsg(&msg, 8, 1, {v});
        msg.meta.request = false;
        msg.meta.pull = true; // a pull response: read by the peer when it can
        ASSERT_EQ(a.Send(&msg), PS_OK);
        ps_msg_release(&msg);
        ASSERT_TRUE(b.inbox.WaitMsgs(1));
        auto until = std::chrono::steady_clock::now() + kWait;
        while (ps_buf_refcount(v.buf) != 1 && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_EQ(ps_buf_refcount(v.buf), 1u) << m.name;
        ps_slice_unref(&v);
    }
}

// A node that connects before it knows its id announces it later, in
// order with its messages.
TEST_F(ShmVan, NodeIdAnnouncedLater)
{
    Van a, b;
    ASSERT_EQ(a.Open(), PS_OK);
    ASSERT_EQ(b.Open(), PS_OK);
    snprintf(a.node.hostname, sizeof(a.node.hostname), "127.0.0.1");
    a.node.num_ports = 1;
    ASSERT_EQ(a.ops->bind(a.van, &a.node, 40), PS_OK);
    ASSERT_EQ(b.Bind(1), PS_OK);
    ASSERT_EQ(a.ops->connect(a.van, &b.node, PS_NODE_EMPTY), PS_OK);
    ps_msg_t msg;
    MakeMsg(&msg, 1, 1, {});
    ASSERT_EQ(a.Send(&msg), PS_OK);
    ASSERT_EQ(a.ops->set_node_id(a.van, 11), PS_OK);
    msg.meta.key = 2;
    ASSERT_EQ(a.Send(&msg), PS_OK);
    ps_msg_release(&msg);
    ASSERT_TRUE(b.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(b.inbox.mu);
    EXPECT_EQ(b.inbox.msgs[0].meta.sender, PS_NODE_EMPTY);
    EXPECT_EQ(b.inbox.msgs[1].meta.sender, 11);
    // And b can now answer node 11 on that channel.
    ps_msg_t back;
    MakeMsg(&back, 11, 3, {});
    EXPECT_EQ(b.Send(&back), PS_OK);
    ps_msg_release(&back);
}

// Two jobs on one host never meet: a node of another job is not found.
TEST_F(ShmVan, JobsAreSeparate)
{
    Van a, b;
    ASSERT_EQ(ps_config_set(PS_CFG_PS_JOB_ID, "job-one"), PS_OK);
    ASSERT_EQ(a.Open(), PS_OK);
    ASSERT_EQ(a.Bind(8), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_PS_JOB_ID, "job-two"), PS_OK);
    ASSERT_EQ(b.Open(), PS_OK);
    ASSERT_EQ(b.Bind(9, "127.0.0.1", a.node.ports[0]), PS_OK); // same host:port, other job
    ASSERT_EQ(ps_config_set(PS_CFG_PS_JOB_ID, "job-three"), PS_OK);
    Van c;
    ASSERT_EQ(c.Open(), PS_OK);
    ASSERT_EQ(c.Bind(10), PS_OK);
    EXPECT_EQ(c.Connect(a), PS_ERR_UNREACHABLE);
    ps_msg_t msg;
    MakeMsg(&msg, 8, 1, {});
    EXPECT_EQ(c.Send(&msg), PS_ERR_UNREACHABLE);
    ps_msg_release(&msg);
}

// Bad arguments (a peer nobody listens for, a second bind, a taken port:
// the conformance suite).
TEST_F(ShmVan, Errors)
{
    Van a;
    ASSERT_EQ(a.Open(), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ps_msg_t msg;
    MakeMsg(&msg, -1, 1, {});
    EXPECT_EQ(a.Send(&msg), PS_ERR_INVALID_ARG);
    ps_msg_release(&msg);
    ps_node_t nobody;
    ps_node_init(&nobody);
    nobody.id = 8;
    snprintf(nobody.hostname, sizeof(nobody.hostname), "127.0.0.1");
    nobody.num_ports = 1;
    nobody.ports[0] = 0;
    EXPECT_EQ(a.ops->connect(a.van, &nobody, 9), PS_ERR_INVALID_ARG);
}

// With a job secret, a listener that takes the channel but never answers
// the handshake is a timeout (the connect deadline), not a refused secret.
TEST_F(ShmVan, SilentPeerDuringHandshakeIsATimeout)
{
    char job[PS__SHM_JOB_MAX + 1];
    ps__shm_job_id(job, sizeof(job));
    struct sockaddr_un addr;
    socklen_t alen;
    const int port = 20000 + (int)(getpid() % 20000);
    ASSERT_EQ(ps__shm_sock_addr(job, "127.0.0.1", port, &addr, &alen), PS_OK);
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ASSERT_GE(lfd, 0);
    ASSERT_EQ(bind(lfd, (struct sockaddr *)&addr, alen), 0) << strerror(errno);
    ASSERT_EQ(listen(lfd, 4), 0); // the kernel completes the connect; nobody reads

    Van a;
    a.secret = "s3cret";
    a.connect_timeout_ms = 300;
    ASSERT_EQ(a.Open(), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ps_node_t silent;
    ps_node_init(&silent);
    silent.id = 8;
    snprintf(silent.hostname, sizeof(silent.hostname), "127.0.0.1");
    silent.num_ports = 1;
    silent.ports[0] = port;
    EXPECT_EQ(a.ops->connect(a.van, &silent, 9), PS_ERR_TIMED_OUT);

    // A peer with another secret is still refused as such.
    Van b;
    b.secret = "other";
    ASSERT_EQ(b.Open(), PS_OK);
    ASSERT_EQ(b.Bind(10), PS_OK);
    EXPECT_EQ(a.Connect(b), PS_ERR_AUTH);
    close(lfd);
}

// Closing everything leaves no file and no descriptor behind.
TEST_F(ShmVan, NoLeaksAfterClose)
{
    auto shm_before = DevShm();
    auto fds_before = OpenFds();
    {
        Van a, b;
        ASSERT_EQ(a.Open(), PS_OK);
        ASSERT_EQ(b.Open(), PS_OK);
        ASSERT_EQ(a.Bind(9), PS_OK);
        ASSERT_EQ(b.Bind(8), PS_OK);
        ASSERT_EQ(a.Connect(b), PS_OK);
        ASSERT_EQ(b.Connect(a), PS_OK);
        b.inbox.SetKeep();
        for (int i = 0; i < 4; ++i) {
            ps_slice_t v = Filled(i == 0 ? 8 : (1 << 20), 3, i % 2 == 1);
            ps_msg_t msg;
            MakeMsg(&msg, 8, static_cast<uint64_t>(i), {v});
            ASSERT_EQ(a.Send(&msg), PS_OK);
            ps_msg_release(&msg);
            ps_slice_unref(&v);
        }
        ASSERT_TRUE(b.inbox.WaitMsgs(4));
        EXPECT_EQ(DevShmMappings(), 0);
        // b still holds views of a's shared buffers when both close.
        a.Close();
        b.Close();
        b.inbox.Release();
    }
    EXPECT_EQ(Leaked(shm_before, {}), std::vector<std::string>());
    EXPECT_EQ(OpenFds(), fds_before);
}

// ---- a peer in another process ----

std::string PeerPath()
{
    const char *srcdir = getenv("TEST_SRCDIR");
    const char *ws = getenv("TEST_WORKSPACE");
    if (srcdir == nullptr || ws == nullptr) {
        return "tests/shm/shm_peer";
    }
    return std::string(srcdir) + "/" + ws + "/tests/shm/shm_peer";
}

struct Child {
    pid_t pid = -1;
    FILE *out = nullptr; // the child's stdout
    ~Child()
    {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        if (out != nullptr) {
            fclose(out);
        }
    }
    bool Start(const std::vector<std::string> &args)
    {
        std::vector<char *> argv;
        std::string path = PeerPath();
        argv.push_back(const_cast<char *>(path.c_str()));
        for (const auto &s : args) {
            argv.push_back(const_cast<char *>(s.c_str()));
        }
        argv.push_back(nullptr);
        int p[2];
        if (pipe(p) != 0) {
            return false;
        }
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        posix_spawn_file_actions_addclose(&fa, p[0]);
        int rc = posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        out = fdopen(p[0], "r");
        return rc == 0 && out != nullptr;
    }
    // The port the child listens on (its "ready PORT" line), or -1.
    int ReadyPort()
    {
        int port = -1;
        return fscanf(out, "ready %d", &port) == 1 ? port : -1;
    }
    int KillAndReap()
    {
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        pid = -1;
        return status;
    }
};

std::string CurrentJob()
{
    const char *job = ps_config_str_or(PS_CFG_PS_JOB_ID, "");
    return job;
}

// A peer process sends shared, plain and small values, then is killed: its
// channel fails with "peer gone", what it shared stays readable until let
// go, and nothing is left behind.
TEST_F(ShmVan, PeerKilledWhileSharing)
{
    auto shm_before = DevShm();
    auto fds_before = OpenFds();
    {
        Van a;
        ASSERT_EQ(a.Open(), PS_OK);
        ASSERT_EQ(a.Bind(8), PS_OK);
        a.inbox.SetKeep();
        Child child;
        ASSERT_TRUE(child.Start({CurrentJob(), "9", "127.0.0.1", "0", "8", "127.0.0.1",
                                 std::to_string(a.node.ports[0])}));
        ASSERT_GT(child.ReadyPort(), 0);
        ASSERT_TRUE(a.inbox.WaitMsgs(1));
        pid_t child_pid = child.pid;
        {
            std::lock_guard<std::mutex> lk(a.inbox.mu);
            const Received &r = a.inbox.msgs[0];
            EXPECT_EQ(r.meta.sender, 9);
            EXPECT_EQ(r.meta.key, 42u);
            ASSERT_EQ(r.data.size(), 3u);
            EXPECT_TRUE(Matches(r.data[0], 8, 1));
            EXPECT_TRUE(Matches(r.data[1], 1 << 20, 2));
            EXPECT_EQ(r.kinds[1], PS_BUF_MEM_SHM); // the child's own memory
            EXPECT_TRUE(Matches(r.data[2], 2 << 20, 3));
        }
        int status = child.KillAndReap();
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        ASSERT_TRUE(a.inbox.WaitFailure(1));
        {
            std::lock_guard<std::mutex> lk(a.inbox.mu);
            EXPECT_EQ(a.inbox.failures[0].first, 9);
            EXPECT_EQ(a.inbox.failures[0].second, PS_ERR_PEER_GONE);
            // The dead process's shared bytes are still there.
            const ps_msg_t &kept = a.inbox.kept[0];
            std::string view(static_cast<const char *>(ps_slice_ptr(&kept.data[1])), kept.data[1].len);
            EXPECT_TRUE(Matches(view, 1 << 20, 2));
        }
        // Sending to it now fails at once.
        ps_msg_t msg;
        MakeMsg(&msg, 9, 1, {});
        EXPECT_NE(a.Send(&msg), PS_OK);
        ps_msg_release(&msg);
        a.inbox.Release();
        EXPECT_EQ(Leaked(shm_before, {child_pid}), std::vector<std::string>());
    }
    EXPECT_EQ(DevShmMappings(), 0);
    EXPECT_EQ(OpenFds(), fds_before);
}

// We connected to the peer (our channel) and it dies mid-conversation.
TEST_F(ShmVan, ConnectedPeerKilled)
{
    Van a;
    ASSERT_EQ(a.Open(), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    // The child listens on a port of its choice and tells us which.
    Child child;
    ASSERT_TRUE(child.Start({CurrentJob(), "8", "127.0.0.1", "0"}));
    Van peer; // only its node description is used
    ps_node_init(&peer.node);
    peer.node.id = 8;
    snprintf(peer.node.hostname, sizeof(peer.node.hostname), "127.0.0.1");
    peer.node.num_ports = 1;
    peer.node.ports[0] = child.ReadyPort();
    ASSERT_GT(peer.node.ports[0], 0);
    ASSERT_EQ(a.ops->connect(a.van, &peer.node, 9), PS_OK);
    // The child echoes key 7 with key 8: a round trip proves the channel.
    ps_slice_t v = Filled(1 << 20, 5);
    ps_msg_t msg;
    MakeMsg(&msg, 8, 7, {v});
    ASSERT_EQ(a.Send(&msg), PS_OK);
    ps_msg_release(&msg);
    ps_slice_unref(&v);
    ASSERT_TRUE(a.inbox.WaitMsgs(1));
    {
        std::lock_guard<std::mutex> lk(a.inbox.mu);
        EXPECT_EQ(a.inbox.msgs[0].meta.key, 8u);
        EXPECT_TRUE(Matches(a.inbox.msgs[0].data[0], 1 << 20, 5));
    }
    child.KillAndReap();
    ASSERT_TRUE(a.inbox.WaitFailure(1));
    std::lock_guard<std::mutex> lk(a.inbox.mu);
    EXPECT_EQ(a.inbox.failures[0].first, 8);
    EXPECT_EQ(a.inbox.failures[0].second, PS_ERR_PEER_GONE);
}

// ---- the composed van ----

// Two "ipc" vans in one process reach each other through shared memory; an
// "ipc" van reaches a plain TCP van through the network.
TEST_F(ShmVan, IpcRoutesByReachability)
{
    Van a, b, c;
    ASSERT_EQ(a.Open("ipc"), PS_OK);
    ASSERT_EQ(b.Open("ipc"), PS_OK);
    ASSERT_EQ(c.Open("tcp"), PS_OK);
    ASSERT_EQ(a.Bind(9), PS_OK);
    ASSERT_EQ(b.Bind(8), PS_OK);
    ASSERT_EQ(c.Bind(10), PS_OK);
    ASSERT_EQ(a.Connect(b), PS_OK);
    ASSERT_EQ(a.Connect(c), PS_OK);
    EXPECT_STREQ(ps__ipc_route(a.van, 8), "shm");
    EXPECT_STREQ(ps__ipc_route(a.van, 10), "net");
    ps_van_attr_t attr;
    ASSERT_EQ(a.ops->query(a.van, &attr), PS_OK);
    EXPECT_FALSE(attr.cap_flags & PS_CAP_SAME_HOST_ONLY);
    EXPECT_TRUE(attr.cap_flags & PS_CAP_RECV_INTO_DEST);

    for (int to : {8, 10}) {
        ps_slice_t v = Filled(2 << 20, static_cast<uint64_t>(to));
        ps_msg_t msg;
        MakeMsg(&msg, to, static_cast<uint64_t>(to), {v});
        ASSERT_EQ(a.Send(&msg), PS_OK);
        ps_msg_release(&msg);
        ps_slice_unref(&v);
    }
    ASSERT_TRUE(b.inbox.WaitMsgs(1));
    ASSERT_TRUE(c.inbox.WaitMsgs(1));
    {
        std::lock_guard<std::mutex> lk(b.inbox.mu);
        EXPECT_TRUE(Matches(b.inbox.msgs[0].data[0], 2 << 20, 8));
        EXPECT_EQ(b.inbox.msgs[0].meta.sender, 9);
    }
    {
        std::lock_guard<std::mutex> lk(c.inbox.mu);
        EXPECT_TRUE(Matches(c.inbox.msgs[0].data[0], 2 << 20, 10));
        EXPECT_EQ(c.inbox.msgs[0].meta.sender, 9);
    }
    // Answers go back the way the message came (b never connected to a).
    ps_msg_t back;
    MakeMsg(&back, 9, 77, {});
    EXPECT_STREQ(ps__ipc_route(b.van, 9), "shm");
    ASSERT_EQ(b.Send(&back), PS_OK);
    ps_msg_release(&back);
    ASSERT_TRUE(a.inbox.WaitMsgs(1));
    // A dead co-located peer is reported once, whichever van notices.
    b.Close();
    ASSERT_TRUE(a.inbox.WaitFailure(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lk(a.inbox.mu);
    EXPECT_EQ(a.inbox.failures.size(), 1u);
    EXPECT_EQ(a.inbox.failures[0].first, 8);
}

// The composed van offers the progress op too (a waiting thread driving
// the shm van's loop: the conformance suite).
TEST_F(ShmVan, ComposedVanOffersTheProgressOp)
{
    Van c;
    ASSERT_EQ(c.Open("ipc", kModes[1]), PS_OK);
    EXPECT_NE(ps_van_progress_op(c.van), nullptr);
}

// BYTEPS_ENABLE_IPC=1 (as upstream) selects the composed van around the
// network van the other variables choose; a shared-memory-only job stays so.
TEST(ShmVanSelect, EnableIpcSelectsComposedVan)
{
    ps_config_clear_overrides();
    for (const char *v : {"DMLC_ENABLE_RDMA", "DMLC_ENABLE_UCX", "DMLC_PS_VAN_TYPE",
                          "BYTEPS_ENABLE_IPC"}) {
        unsetenv(v);
    }
    auto select = [](ps_status_t (*fn)(const char **)) {
        const char *name = nullptr;
        EXPECT_EQ(fn(&name), PS_OK);
        return std::string(name != nullptr ? name : "(null)");
    };
    EXPECT_EQ(select(ps_van_select_name), "tcp");
    ASSERT_EQ(ps_config_set(PS_CFG_BYTEPS_ENABLE_IPC, "1"), PS_OK);
    EXPECT_EQ(select(ps_van_select_name), "ipc");
    EXPECT_EQ(select(ps__van_select_network_name), "tcp");
    const struct {
        const char *rdma, *selected, *network;
    } cases[] = {{"zmq", "ipc", "tcp"},       {"fabric", "ipc", "fabric"},
                 {"ibverbs", "ipc", "ibverbs"}, {"shm", "shm", "shm"},
                 {"ipc", "ipc", "ipc"}};
    for (const auto &c : cases) {
        ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_RDMA, c.rdma), PS_OK);
        EXPECT_EQ(select(ps_van_select_name), c.selected) << "DMLC_ENABLE_RDMA=" << c.rdma;
        EXPECT_EQ(select(ps__van_select_network_name), c.network) << "DMLC_ENABLE_RDMA=" << c.rdma;
    }
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_RDMA, nullptr), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_UCX, "1"), PS_OK);
    EXPECT_EQ(select(ps_van_select_name), "ipc");
    EXPECT_EQ(select(ps__van_select_network_name), "ucx");
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_UCX, nullptr), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_PS_VAN_TYPE, "shm"), PS_OK);
    EXPECT_EQ(select(ps_van_select_name), "shm");
    ASSERT_EQ(ps_config_set(PS_CFG_BYTEPS_ENABLE_IPC, "0"), PS_OK);
    EXPECT_EQ(select(ps_van_select_name), "shm");
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_PS_VAN_TYPE, nullptr), PS_OK);
    EXPECT_EQ(select(ps_van_select_name), "tcp");
    ps_config_clear_overrides();
}

} // namespace

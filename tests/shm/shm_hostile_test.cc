// A hostile process against the shared-memory van: it connects to a van's
// rendezvous socket as a peer (the van's own HELLO, ring and records,
// written by hand in a forked child) and
//   - hands over memory (the channel's or a segment's) without the seals
//     against resizing, then shrinks it and makes the van touch it: the
//     SIGBUS attack. The van must refuse the memory (the channel closes)
//     and go on serving others;
//   - hands over sealed memory and tries to shrink it: the kernel refuses;
//   - writes corrupted records (framing, lengths, offsets, segment ids,
//     tokens) or shares more (sparse) memory than a channel maps: only
//     that channel closes;
//   - runs as another user (root only: setuid to nobody): refused without
//     a job secret, left to the handshake with one.
// After each attack a well-behaved peer's message must arrive with every
// byte right. Every wait has a deadline; no timing assertions.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/auth.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/shm/shm_job.h"
#include "ps/net/shm/shm_proto.h"
#include "ps/net/shm/shm_ring.h"
#include "ps/net/shm/shm_van.h"
#include "ps/net/van/van.h"
}

namespace {

constexpr auto kWait = std::chrono::seconds(60);
constexpr int kChildDeadlineMs = 20000; // a child's wait for the van's answer or EOF
constexpr uint64_t kRing = 1u << 16;    // the attacker's ring size

// ---- the van under attack, and a well-behaved peer ----

struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<int, std::vector<std::string>>> msgs; // sender, segments
};

void Deliver(void *arg, ps_msg_t *msg)
{
    Inbox *in = static_cast<Inbox *>(arg);
    std::vector<std::string> data;
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        const char *p = static_cast<const char *>(ps_slice_ptr(&msg->data[i]));
        // Reading every byte: a view of shrunk memory would fault here.
        data.emplace_back(p == nullptr ? std::string() : std::string(p, msg->data[i].len));
    }
    int sender = msg->meta.sender;
    ps_msg_release(msg);
    std::lock_guard<std::mutex> lk(in->mu);
    in->msgs.emplace_back(sender, std::move(data));
    in->cv.notify_all();
}

void PeerFailed(void *, int, ps_status_t) {}

struct Van {
    Inbox inbox;
    ps_van_t *van = nullptr;
    const ps_van_ops_t *ops = nullptr;
    ps_node_t node;

    ps_status_t Open(const char *secret = nullptr)
    {
        const ps_van_component_t *c = nullptr;
        ps_status_t st = ps_van_find("shm", &c);
        if (st != PS_OK) {
            return st;
        }
        ops = c->ops;
        ps_van_params_t p;
        memset(&p, 0, sizeof(p));
        p.role = PS_ROLE_SERVER;
        p.connect_timeout_ms = 20000;
        if (secret != nullptr) {
            p.auth_enabled = 1;
            st = ps_auth_key_from_secret(secret, strlen(secret), &p.auth_key);
            if (st != PS_OK) {
                return st;
            }
        }
        ps_van_callbacks_t cb{};
        cb.arg = &inbox;
        cb.deliver = Deliver; // no recv_buffer: a peer's segment is handed over in place
        cb.peer_failed = PeerFailed;
        ps_node_init(&node);
        return ops->open(&p, &cb, &van);
    }
    ps_status_t Bind(int id)
    {
        snprintf(node.hostname, sizeof(node.hostname), "127.0.0.1");
        node.id = id;
        node.num_ports = 1;
        node.ports[0] = 0;
        ps_status_t st = ops->bind(van, &node, 40);
        return st == PS_OK ? ops->set_node_id(van, id) : st;
    }
    ~Van()
    {
        if (van != nullptr) {
            ops->close(van);
        }
    }
};

uint8_t Pattern(uint64_t seed, size_t i)
{
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + i;
    x ^= x >> 29;
    return static_cast<uint8_t>(x * 0xbf58476d1ce4e5b9ull >> 56);
}

// A good peer (node 9) sends the victim (node 8) three segments (inline,
// and two large ones) and the victim must get every byte.
void ExpectServes(Van &victim, Van &good, uint64_t seed)
{
    ASSERT_EQ(good.ops->connect(good.van, &victim.node, good.node.id), PS_OK);
    const size_t lens[3] = {100, 200000, 3u << 20};
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.recver = victim.node.id;
    msg.meta.app_id = 3;
    msg.meta.customer_id = 1;
    msg.meta.timestamp = static_cast<int>(seed);
    msg.meta.request = true;
    msg.meta.push = true;
    for (size_t k = 0; k < 3; ++k) {
        ps_slice_t s = PS_SLICE_EMPTY_INIT;
        ASSERT_EQ(ps_slice_alloc(lens[k], 64, &s), PS_OK);
        uint8_t *p = static_cast<uint8_t *>(ps_slice_ptr(&s));
        for (size_t i = 0; i < lens[k]; ++i) {
            p[i] = Pattern(seed + k, i);
        }
        ps_msg_add_data(&msg, &s, PS_DATA_CHAR);
        ps_slice_unref(&s);
    }
    size_t before;
    {
        std::lock_guard<std::mutex> lk(victim.inbox.mu);
        before = victim.inbox.msgs.size();
    }
    ASSERT_EQ(good.ops->send(good.van, &msg), PS_OK);
    ps_msg_release(&msg);
    std::unique_lock<std::mutex> lk(victim.inbox.mu);
    ASSERT_TRUE(victim.inbox.cv.wait_for(lk, kWait, [&] {
        for (size_t i = before; i < victim.inbox.msgs.size(); ++i) {
            if (victim.inbox.msgs[i].first == good.node.id) {
                return true;
            }
        }
        return false;
    }));
    for (size_t i = before; i < victim.inbox.msgs.size(); ++i) {
        const auto &m = victim.inbox.msgs[i];
        if (m.first != good.node.id) {
            continue;
        }
        ASSERT_EQ(m.second.size(), 3u);
        for (size_t k = 0; k < 3; ++k) {
            ASSERT_EQ(m.second[k].size(), lens[k]);
            size_t bad = 0;
            for (size_t j = 0; j < lens[k]; ++j) {
                bad += static_cast<uint8_t>(m.second[k][j]) != Pattern(seed + k, j);
            }
            EXPECT_EQ(bad, 0u) << "segment " << k;
        }
    }
}

// Messages the victim delivered from the attacker (an unassigned node).
size_t FromAttacker(Van &victim)
{
    std::lock_guard<std::mutex> lk(victim.inbox.mu);
    size_t n = 0;
    for (const auto &m : victim.inbox.msgs) {
        n += m.first == PS_NODE_EMPTY;
    }
    return n;
}

// ---- the attacker (a forked child) ----

enum class Attack {
    kHelloUnsealed,   // unsealed channel memory, then shrunk and rung
    kHelloSealed,     // sealed channel memory: shrinking fails; one good message
    kSegUnsealed,     // unsealed segment, shrunk, then a record that uses it
    kSegShort,        // sealed segment shorter than announced
    kTailPastRing,    // the ring's tail further than the ring is long
    kRecordTooLong,   // a record header longer than what was published
    kUnknownRecord,   // a record type nobody knows
    kTooManySegments, // a MSG with more descriptors than a message has
    kInlineOutside,   // an inline segment's offset beyond its record
    kSegOutside,      // a SEG descriptor beyond its (sealed) segment
    kSegUnknown,      // a SEG descriptor naming a segment never announced
    kChunkAlone,      // a CHUNK with no message
    kBogusAck,        // an ACK of a token never lent
    kMetaGarbage,     // a MSG whose meta does not decode
    kSegsTooBig,      // sealed sparse segments of 1 TiB, more than a channel maps
};

struct Result {
    int welcomed;      // a WELCOME arrived
    int accepted;      // ... saying accepted
    int auth_refusal;  // ... refusing for the job secret
    int closed;        // the van closed the channel (EOF) by the deadline
    int shrink_errno;  // ftruncate of sealed memory: its errno (0: it worked)
    char reason[120];
};

int MakeMemfd(size_t len, bool sealed)
{
    int fd = memfd_create("hostile", MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(len)) != 0) {
        return -1;
    }
    if (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        return -1;
    }
    return fd;
}

bool SendWithFd(int sock, const void *pkt, size_t len, int fd)
{
    struct iovec iov = {const_cast<void *>(pkt), len};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (fd >= 0) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

void Bell(int sock)
{
    uint8_t b = PS__SHM_PKT_BELL;
    (void)send(sock, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Waits for the van to close the socket (EOF or reset), reading and
// dropping anything else (bells); 1 if it did by the deadline.
int WaitClosed(int sock)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kChildDeadlineMs);
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        end - std::chrono::steady_clock::now())
                        .count();
        if (left <= 0) {
            return 0;
        }
        struct pollfd pfd = {sock, POLLIN, 0};
        if (poll(&pfd, 1, static_cast<int>(left)) <= 0) {
            continue;
        }
        uint8_t buf[512];
        ssize_t n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            return 1;
        }
    }
}

// Waits until the van has consumed the ring up to `pos` (1), or closed the
// channel or let the deadline pass (0).
int WaitConsumed(int sock, ps__shm_ring_ctl_t *ctl, uint64_t pos)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kChildDeadlineMs);
    while (std::chrono::steady_clock::now() < end) {
        if (__atomic_load_n(&ctl->head, __ATOMIC_ACQUIRE) >= pos) {
            return 1;
        }
        struct pollfd pfd = {sock, POLLIN, 0};
        if (poll(&pfd, 1, 1) > 0) {
            uint8_t buf[512];
            ssize_t n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                return 0;
            }
        }
    }
    return 0;
}

// A MSG record: header, descriptors, a meta that decodes, inline bytes.
std::vector<uint8_t> MsgRecord(const std::vector<ps__shm_seg_desc_t> &descs, size_t inline_len,
                               uint16_t num_seg_override = 0, bool garbage_meta = false)
{
    ps_meta_t meta;
    ps_meta_init(&meta);
    meta.app_id = 3;
    meta.customer_id = 1;
    meta.timestamp = 77;
    meta.request = true;
    meta.push = true;
    uint8_t mbuf[1024];
    size_t mlen = 0;
    if (ps_meta_encode(&meta, mbuf, sizeof(mbuf), &mlen) != PS_OK) {
        return {};
    }
    if (garbage_meta) {
        memset(mbuf, 0xff, mlen);
    }
    ps__shm_rec_msg_t h;
    memset(&h, 0, sizeof(h));
    size_t head = sizeof(h) + descs.size() * sizeof(ps__shm_seg_desc_t) + mlen;
    size_t total = ps__shm_align8(head + inline_len);
    h.hdr.len = static_cast<uint32_t>(total);
    h.hdr.type = PS__SHM_REC_MSG;
    h.meta_len = static_cast<uint32_t>(mlen);
    h.num_seg = num_seg_override != 0 ? num_seg_override : static_cast<uint16_t>(descs.size());
    std::vector<uint8_t> rec(total, 0);
    memcpy(rec.data(), &h, sizeof(h));
    for (size_t i = 0; i < descs.size(); ++i) {
        ps__shm_seg_desc_t d = descs[i];
        if (d.kind == PS__SHM_SEG_INLINE && d.a == 0) {
            d.a = head; // where the inline bytes are
        }
        memcpy(rec.data() + sizeof(h) + i * sizeof(d), &d, sizeof(d));
    }
    memcpy(rec.data() + sizeof(h) + descs.size() * sizeof(ps__shm_seg_desc_t), mbuf, mlen);
    for (size_t i = 0; i < inline_len; ++i) {
        rec[head + i] = Pattern(1000, i);
    }
    return rec;
}

ps__shm_seg_desc_t Desc(uint8_t kind, uint64_t len, uint64_t a = 0, uint64_t b = 0)
{
    ps__shm_seg_desc_t d;
    memset(&d, 0, sizeof(d));
    d.kind = kind;
    d.token = 1;
    d.len = len;
    d.a = a;
    d.b = b;
    return d;
}

// The attack, in the child. Writes a Result to `out`.
void RunAttack(const std::string &job, int port, Attack attack, bool as_nobody, int out)
{
    Result r;
    memset(&r, 0, sizeof(r));
    alarm(60); // a child that hangs anyway ends
    if (as_nobody && setuid(65534) != 0) {
        _exit(3);
    }
    struct sockaddr_un addr;
    socklen_t alen;
    if (ps__shm_sock_addr(job.c_str(), "127.0.0.1", port, &addr, &alen) != PS_OK) {
        _exit(4);
    }
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0 || connect(sock, reinterpret_cast<struct sockaddr *>(&addr), alen) != 0) {
        _exit(5);
    }
    const size_t one = ps__shm_ring_bytes(kRing);
    int memfd = MakeMemfd(2 * one, attack != Attack::kHelloUnsealed);
    if (memfd < 0) {
        _exit(6);
    }
    void *mem = mmap(nullptr, 2 * one, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (mem == MAP_FAILED) {
        _exit(7);
    }
    ps__shm_ring_init(mem, kRing);
    ps__shm_ring_init(static_cast<uint8_t *>(mem) + one, kRing);
    ps__shm_ring_t tx;
    ps__shm_ring_attach(&tx, mem, kRing); // ring 0: connector -> acceptor

    ps__shm_pkt_hello_t hello;
    memset(&hello, 0, sizeof(hello));
    hello.type = PS__SHM_PKT_HELLO;
    hello.magic = PS__SHM_MAGIC;
    hello.version = PS__SHM_VERSION;
    hello.node_id = PS_NODE_EMPTY;
    hello.ring_bytes = kRing;
    snprintf(hello.job, sizeof(hello.job), "%s", job.c_str());
    (void)SendWithFd(sock, &hello, sizeof(hello), memfd);

    // The answer: a WELCOME, or the van closing the channel.
    struct pollfd pfd = {sock, POLLIN, 0};
    if (poll(&pfd, 1, kChildDeadlineMs) > 0) {
        ps__shm_pkt_welcome_t w;
        ssize_t n = recv(sock, &w, sizeof(w), 0);
        if (n < 0 && errno == ECONNRESET) {
            // A van that refused and closed with our HELLO unread: the
            // reset comes first, its WELCOME is still queued behind.
            n = recv(sock, &w, sizeof(w), MSG_DONTWAIT);
        }
        if (n == static_cast<ssize_t>(sizeof(w)) && w.type == PS__SHM_PKT_WELCOME) {
            r.welcomed = 1;
            r.accepted = w.accepted;
            r.auth_refusal = !w.accepted && w.pad == PS__SHM_REFUSED_AUTH;
            memcpy(r.reason, w.reason, sizeof(r.reason));
            r.reason[sizeof(r.reason) - 1] = '\0';
        } else if (n <= 0) {
            r.closed = 1;
        }
    }

    auto publish = [&](const std::vector<uint8_t> &rec) {
        void *p = ps__shm_ring_reserve(&tx, static_cast<uint32_t>(rec.size()));
        if (p != nullptr) {
            memcpy(p, rec.data(), rec.size());
            (void)ps__shm_ring_commit(&tx);
        }
        Bell(sock);
    };
    // A sealed segment of 64 KiB announced as id 7 (of `announce` bytes).
    auto announce_seg = [&](bool sealed, uint64_t announce) -> int {
        int fd = MakeMemfd(1u << 16, sealed);
        ps__shm_pkt_seg_t s;
        memset(&s, 0, sizeof(s));
        s.type = PS__SHM_PKT_SEG;
        s.seg_id = 7;
        s.size = announce;
        (void)SendWithFd(sock, &s, sizeof(s), fd);
        return fd;
    };

    if (r.accepted) {
        switch (attack) {
        case Attack::kHelloUnsealed:
            break;
        case Attack::kHelloSealed:
            // Shrinking sealed memory fails; the channel still works.
            r.shrink_errno = ftruncate(memfd, 0) == 0 ? 0 : errno;
            publish(MsgRecord({Desc(PS__SHM_SEG_INLINE, 300)}, 300));
            break;
        case Attack::kSegUnsealed: {
            // A first record makes the van map the segment (a van that
            // takes it); once the van has read that record, the segment
            // shrinks under its mapping and a second record uses it.
            int fd = announce_seg(false, 1u << 16);
            publish(MsgRecord({Desc(PS__SHM_SEG_SEG, 8192, 7, 0)}, 0));
            if (!WaitConsumed(sock, static_cast<ps__shm_ring_ctl_t *>(mem), tx.pos)) {
                r.closed = 1; // refused
                break;
            }
            if (ftruncate(fd, 0) != 0) {
                _exit(8);
            }
            publish(MsgRecord({Desc(PS__SHM_SEG_SEG, 8192, 7, 4096)}, 0));
            break;
        }
        case Attack::kSegShort:
            (void)announce_seg(true, 1u << 20);
            publish(MsgRecord({Desc(PS__SHM_SEG_SEG, 8192, 7, 0)}, 0));
            break;
        case Attack::kTailPastRing: {
            auto *ctl = static_cast<ps__shm_ring_ctl_t *>(mem);
            __atomic_store_n(&ctl->tail, 2 * kRing, __ATOMIC_SEQ_CST);
            Bell(sock);
            break;
        }
        case Attack::kRecordTooLong: {
            auto *ctl = static_cast<ps__shm_ring_ctl_t *>(mem);
            ps__shm_rec_t h = {4096, PS__SHM_REC_MSG, 0};
            memcpy(static_cast<uint8_t *>(mem) + sizeof(ps__shm_ring_ctl_t), &h, sizeof(h));
            __atomic_store_n(&ctl->tail, 64, __ATOMIC_SEQ_CST);
            Bell(sock);
            break;
        }
        case Attack::kUnknownRecord: {
            std::vector<uint8_t> rec(64, 0);
            ps__shm_rec_t h = {64, 0x77, 0};
            memcpy(rec.data(), &h, sizeof(h));
            publish(rec);
            break;
        }
        case Attack::kTooManySegments:
            publish(MsgRecord({Desc(PS__SHM_SEG_INLINE, 8)}, 8, 60000));
            break;
        case Attack::kInlineOutside:
            publish(MsgRecord({Desc(PS__SHM_SEG_INLINE, 64, 40000)}, 8));
            break;
        case Attack::kSegOutside:
            (void)announce_seg(true, 1u << 16);
            publish(MsgRecord({Desc(PS__SHM_SEG_SEG, 8192, 7, (1u << 16) - 4096)}, 0));
            break;
        case Attack::kSegUnknown:
            publish(MsgRecord({Desc(PS__SHM_SEG_SEG, 8192, 99, 0)}, 0));
            break;
        case Attack::kChunkAlone: {
            std::vector<uint8_t> rec(sizeof(ps__shm_rec_chunk_t) + 64, 0);
            ps__shm_rec_chunk_t c;
            memset(&c, 0, sizeof(c));
            c.hdr = {static_cast<uint32_t>(rec.size()), PS__SHM_REC_CHUNK, 0};
            c.nbytes = 64;
            memcpy(rec.data(), &c, sizeof(c));
            publish(rec);
            break;
        }
        case Attack::kBogusAck: {
            std::vector<uint8_t> rec(sizeof(ps__shm_rec_ack_t) + 8, 0);
            ps__shm_rec_ack_t a;
            memset(&a, 0, sizeof(a));
            a.hdr = {static_cast<uint32_t>(rec.size()), PS__SHM_REC_ACK, 0};
            a.count = 2;
            uint32_t toks[2] = {12345, 0xffffffffu};
            memcpy(rec.data(), &a, sizeof(a));
            memcpy(rec.data() + sizeof(a), toks, sizeof(toks));
            publish(rec);
            break;
        }
        case Attack::kMetaGarbage:
            publish(MsgRecord({Desc(PS__SHM_SEG_INLINE, 8)}, 8, 0, true));
            break;
        case Attack::kSegsTooBig:
            for (uint64_t id = 1; id <= 17; ++id) {
                int fd = MakeMemfd(static_cast<size_t>(1ull << 40), true);
                ps__shm_pkt_seg_t seg;
                memset(&seg, 0, sizeof(seg));
                seg.type = PS__SHM_PKT_SEG;
                seg.seg_id = id;
                seg.size = 1ull << 40;
                if (fd < 0 || !SendWithFd(sock, &seg, sizeof(seg), fd)) {
                    break;
                }
                close(fd);
            }
            break;
        }
    }
    if (attack == Attack::kHelloUnsealed) {
        // Whatever the answer: shrink what was handed over and make the van
        // look at its ring.
        (void)ftruncate(memfd, 0);
        Bell(sock);
    }
    if (!r.closed && attack != Attack::kHelloSealed) {
        r.closed = WaitClosed(sock);
    }
    // (kHelloSealed: the van reads what is left in the ring when the socket
    // goes.)
    ssize_t n = write(out, &r, sizeof(r));
    _exit(n == static_cast<ssize_t>(sizeof(r)) ? 0 : 9);
}

// Forks the attacker against `victim`; its result in *r.
::testing::AssertionResult Launch(Van &victim, Attack attack, Result *r, bool as_nobody = false)
{
    char job[PS__SHM_JOB_MAX + 1];
    ps__shm_job_id(job, sizeof(job));
    std::string j(job);
    int port = victim.node.ports[0];
    int fds[2];
    if (pipe(fds) != 0) {
        return ::testing::AssertionFailure() << "pipe";
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        RunAttack(j, port, attack, as_nobody, fds[1]);
        _exit(2);
    }
    close(fds[1]);
    memset(r, 0, sizeof(*r));
    size_t got = 0;
    while (got < sizeof(*r)) {
        ssize_t n = read(fds[0], reinterpret_cast<char *>(r) + got, sizeof(*r) - got);
        if (n <= 0) {
            break;
        }
        got += static_cast<size_t>(n);
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != sizeof(*r)) {
        return ::testing::AssertionFailure() << "the attacker failed (status " << status << ")";
    }
    return ::testing::AssertionSuccess();
}

class ShmHostile : public ::testing::Test {
  protected:
    void SetUp() override
    {
        ASSERT_EQ(victim.Open(), PS_OK);
        ASSERT_EQ(victim.Bind(8), PS_OK);
        ASSERT_EQ(good.Open(), PS_OK);
        ASSERT_EQ(good.Bind(9), PS_OK);
    }
    Van victim, good;
};

// The SIGBUS attack on the channel memory: refused before it is mapped.
TEST_F(ShmHostile, UnsealedChannelMemoryIsRefused)
{
    Result r;
    ASSERT_TRUE(Launch(victim, Attack::kHelloUnsealed, &r));
    EXPECT_FALSE(r.accepted);
    EXPECT_TRUE(r.closed);
    ExpectServes(victim, good, 1);
}

// Sealed memory: the attacker cannot shrink it, and the channel works
// (its one message arrives with its bytes).
TEST_F(ShmHostile, SealedChannelMemoryCannotShrink)
{
    Result r;
    ASSERT_TRUE(Launch(victim, Attack::kHelloSealed, &r));
    ASSERT_TRUE(r.accepted);
    EXPECT_EQ(r.shrink_errno, EPERM);
    std::unique_lock<std::mutex> lk(victim.inbox.mu);
    ASSERT_TRUE(victim.inbox.cv.wait_for(lk, kWait, [&] { return !victim.inbox.msgs.empty(); }));
    const auto &m = victim.inbox.msgs[0];
    EXPECT_EQ(m.first, PS_NODE_EMPTY);
    ASSERT_EQ(m.second.size(), 1u);
    ASSERT_EQ(m.second[0].size(), 300u);
    for (size_t i = 0; i < 300; ++i) {
        ASSERT_EQ(static_cast<uint8_t>(m.second[0][i]), Pattern(1000, i)) << i;
    }
    lk.unlock();
    ExpectServes(victim, good, 2);
}

// The SIGBUS attack on a segment: announced unsealed, shrunk, then used.
TEST_F(ShmHostile, UnsealedSegmentIsRefused)
{
    Result r;
    ASSERT_TRUE(Launch(victim, Attack::kSegUnsealed, &r));
    ASSERT_TRUE(r.accepted);
    EXPECT_TRUE(r.closed);
    EXPECT_EQ(FromAttacker(victim), 0u);
    ExpectServes(victim, good, 3);
}

// Corrupted records and announcements: each closes only its channel.
TEST_F(ShmHostile, CorruptedRecordsCloseOnlyTheirChannel)
{
    const Attack attacks[] = {
        Attack::kSegShort,      Attack::kTailPastRing,   Attack::kRecordTooLong,
        Attack::kUnknownRecord, Attack::kTooManySegments, Attack::kInlineOutside,
        Attack::kSegOutside,    Attack::kSegUnknown,     Attack::kChunkAlone,
        Attack::kBogusAck,      Attack::kMetaGarbage,    Attack::kSegsTooBig,
    };
    uint64_t seed = 10;
    for (Attack a : attacks) {
        SCOPED_TRACE(static_cast<int>(a));
        Result r;
        ASSERT_TRUE(Launch(victim, a, &r));
        ASSERT_TRUE(r.accepted);
        EXPECT_TRUE(r.closed);
        EXPECT_EQ(FromAttacker(victim), 0u);
        ExpectServes(victim, good, seed++);
    }
}

// Another user's process: refused without a job secret; with one, the
// handshake (not the uid) decides.
bool CanBecomeNobody()
{
    pid_t pid = fork();
    if (pid == 0) {
        _exit(setuid(65534) == 0 ? 0 : 1);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

TEST(ShmHostileUid, OtherUserRefusedWithoutSecret)
{
    if (geteuid() != 0) {
        GTEST_SKIP() << "needs root (to run a peer as another user)";
    }
    if (!CanBecomeNobody()) {
        // A user namespace that maps root only (a sandbox).
        GTEST_SKIP() << "needs root that can setuid to nobody (run with tag local)";
    }
    {
        Van victim;
        ASSERT_EQ(victim.Open(), PS_OK);
        ASSERT_EQ(victim.Bind(8), PS_OK);
        Result r;
        ASSERT_TRUE(Launch(victim, Attack::kHelloSealed, &r, true));
        EXPECT_FALSE(r.accepted);
        EXPECT_FALSE(r.auth_refusal);
        EXPECT_TRUE(r.welcomed) << "no reason given";
        EXPECT_NE(strstr(r.reason, "another user"), nullptr) << r.reason;
        EXPECT_EQ(FromAttacker(victim), 0u);
        // The same attacker as this user gets in (the uid made the difference).
        ASSERT_TRUE(Launch(victim, Attack::kHelloSealed, &r, false));
        EXPECT_TRUE(r.accepted);
    }
    {
        Van victim;
        ASSERT_EQ(victim.Open("s3cret"), PS_OK);
        ASSERT_EQ(victim.Bind(8), PS_OK);
        Result r;
        ASSERT_TRUE(Launch(victim, Attack::kHelloSealed, &r, true));
        EXPECT_FALSE(r.accepted);
        EXPECT_TRUE(r.auth_refusal) << r.reason; // the handshake refused it
    }
}

} // namespace

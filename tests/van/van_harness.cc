// The scaffolding of the van-level tests (van_harness.h).
#include "tests/van/van_harness.h"

#include <cstdio>
#include <cstring>

extern "C" {
#include "ps/gpu/mem.h"
}

namespace ps_van_test {

uint8_t Pattern(uint64_t seq, unsigned seg, size_t i)
{
    uint64_t x = seq * 0x9e3779b97f4a7c15ull + seg * 0x632be59bd9b4e019ull + i;
    x ^= x >> 29;
    return static_cast<uint8_t>(x * 0xbf58476d1ce4e5b9ull >> 56);
}

Inbox::~Inbox()
{
    for (auto &kv : dest) {
        ps_slice_unref(&kv.second);
    }
}

bool Inbox::WaitMsgs(size_t n)
{
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, kWait, [&] { return msgs.size() >= n; });
}

bool Inbox::WaitFailure(size_t n)
{
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, kWait, [&] { return failures.size() >= n; });
}

void Inbox::OpenGate()
{
    std::lock_guard<std::mutex> lk(mu);
    gate_closed = false;
    cv.notify_all();
}

size_t Inbox::Count()
{
    std::lock_guard<std::mutex> lk(mu);
    return msgs.size();
}

ps_status_t RecvBuffer(void *arg, const ps_meta_t *meta, unsigned index, uint64_t len,
                       ps_slice_t *slice_p)
{
    Inbox *in = static_cast<Inbox *>(arg);
    in->recv_buffer_calls++;
    std::lock_guard<std::mutex> lk(in->mu);
    auto it = in->dest.find({meta->key, index});
    if (it == in->dest.end()) {
        return PS_ERR_NOT_FOUND;
    }
    (void)len;
    *slice_p = ps_slice_ref(&it->second);
    return PS_OK;
}

// Records r, first waiting while the gate is closed.
// Returns on_msg as it is now (read under the lock: see SetOnMsg).
static std::function<void(const ps_msg_t *)> Record(Inbox *in, Received &&r)
{
    std::unique_lock<std::mutex> lk(in->mu);
    if (in->gate_closed) {
        in->in_gate = true;
        in->cv.notify_all();
        in->cv.wait(lk, [&] { return !in->gate_closed; });
    }
    in->msgs.push_back(std::move(r));
    in->cv.notify_all();
    return in->on_msg;
}

void Inbox::SetOnMsg(std::function<void(const ps_msg_t *)> fn)
{
    std::lock_guard<std::mutex> lk(mu);
    on_msg = std::move(fn);
}

void DeliverLane(void *arg, int sender, const uint8_t *bytes, size_t len)
{
    Received r;
    r.lane = true;
    memset(&r.meta, 0, sizeof(r.meta));
    r.meta.sender = sender;
    r.data.emplace_back(reinterpret_cast<const char *>(bytes), len);
    r.ptrs.push_back(bytes);
    Record(static_cast<Inbox *>(arg), std::move(r));
}

void Deliver(void *arg, ps_msg_t *msg)
{
    Inbox *in = static_cast<Inbox *>(arg);
    Received r;
    r.meta = msg->meta;
    r.meta.body = nullptr;
    r.meta.control.nodes = nullptr;
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        const ps_slice_t *d = &msg->data[i];
        const char *p = static_cast<const char *>(ps_slice_ptr(d));
        if (p == nullptr) {
            r.data.emplace_back();
        } else if (ps_slice_in_host_mem(d)) {
            r.data.emplace_back(p, d->len);
        } else {
            // Device memory (a van that receives into it): read through
            // its kind, as host code may not touch it.
            std::string bytes(d->len, '\0');
            ps_status_t st =
                ps_mem_ops(ps_slice_mem_ops_kind(d))->copy_to_host(&bytes[0], p, d->len);
            r.data.push_back(st == PS_OK ? bytes : "<device copy failed: " +
                                                       std::string(ps_status_str(st)) + ">");
        }
        r.ptrs.push_back(p);
    }
    if (msg->meta.body_len != 0) {
        r.body.assign(reinterpret_cast<const char *>(msg->meta.body), msg->meta.body_len);
    }
    for (uint32_t i = 0; i < msg->meta.control.num_nodes; ++i) {
        r.nodes.push_back(msg->meta.control.nodes[i]);
    }
    std::function<void(const ps_msg_t *)> on_msg = Record(in, std::move(r));
    if (on_msg) {
        on_msg(msg);
    }
    ps_msg_release(msg);
}

void PeerFailed(void *arg, int node_id, ps_status_t why)
{
    Inbox *in = static_cast<Inbox *>(arg);
    std::lock_guard<std::mutex> lk(in->mu);
    in->failures.emplace_back(node_id, why);
    in->cv.notify_all();
}

const ps_van_ops_t *VanOps(const char *name)
{
    const ps_van_component_t *c = nullptr;
    EXPECT_EQ(ps_van_find(name, &c), PS_OK) << name;
    return c != nullptr ? c->ops : nullptr;
}

ps_van_params_t DefaultParams()
{
    ps_van_params_t p;
    memset(&p, 0, sizeof(p));
    p.role = PS_ROLE_WORKER;
    p.connect_timeout_ms = 20000;
    return p;
}

ps_status_t VanBase::OpenAs(const char *name, int id, const char *host, ps_van_params_t params,
                           int port)
{
    ops = VanOps(name);
    if (ops == nullptr) {
        return PS_ERR_NOT_FOUND;
    }
    ps_van_callbacks_t cb{};
    cb.arg = &inbox;
    cb.recv_buffer = RecvBuffer;
    cb.deliver = Deliver;
    cb.peer_failed = PeerFailed;
    cb.deliver_lane = DeliverLane;
    ps_status_t st = ops->open(&params, &cb, &van);
    if (st != PS_OK) {
        return st;
    }
    ps_node_init(&node);
    node.id = id;
    snprintf(node.hostname, sizeof(node.hostname), "%s", host);
    if (port != 0) {
        node.num_ports = 1;
        node.ports[0] = port;
    }
    return ops->bind(van, &node, 40);
}

void VanBase::Close()
{
    if (van != nullptr) {
        if (before_close) {
            before_close(*this);
        }
        ops->close(van);
        van = nullptr;
    }
}

OutMsg::OutMsg(int recver, uint64_t seq, const std::vector<size_t> &sizes, size_t offset)
{
    ps_msg_init(&msg);
    msg.meta.recver = recver;
    msg.meta.key = seq;
    msg.meta.timestamp = static_cast<int32_t>(seq & 0x7fffffff);
    msg.meta.request = true;
    msg.meta.push = true;
    for (unsigned s = 0; s < sizes.size(); ++s) {
        ps_slice_t whole, sl;
        EXPECT_EQ(ps_slice_alloc(sizes[s] + offset, 0, &whole), PS_OK);
        EXPECT_EQ(ps_slice_sub(&whole, offset, sizes[s], &sl), PS_OK);
        ps_slice_unref(&whole);
        uint8_t *p = static_cast<uint8_t *>(ps_slice_ptr(&sl));
        for (size_t i = 0; i < sizes[s]; ++i) {
            p[i] = Pattern(seq, s, i);
        }
        EXPECT_EQ(ps_msg_add_data(&msg, &sl, PS_DATA_UINT8), PS_OK);
        ps_slice_unref(&sl);
    }
}

::testing::AssertionResult CheckMsg(const Received &r, int sender, uint64_t seq,
                                    const std::vector<size_t> &sizes)
{
    if (r.meta.sender != sender) {
        return ::testing::AssertionFailure() << "sender " << r.meta.sender << " != " << sender;
    }
    if (r.meta.key != seq) {
        return ::testing::AssertionFailure() << "key " << r.meta.key << " != " << seq;
    }
    if (r.data.size() != sizes.size()) {
        return ::testing::AssertionFailure()
               << "msg " << seq << ": " << r.data.size() << " segments, want " << sizes.size();
    }
    for (unsigned s = 0; s < sizes.size(); ++s) {
        if (r.data[s].size() != sizes[s]) {
            return ::testing::AssertionFailure() << "msg " << seq << " seg " << s << ": "
                                                 << r.data[s].size() << " bytes, want " << sizes[s];
        }
        for (size_t i = 0; i < sizes[s]; ++i) {
            if (static_cast<uint8_t>(r.data[s][i]) != Pattern(seq, s, i)) {
                return ::testing::AssertionFailure()
                       << "msg " << seq << " seg " << s << " byte " << i << " differs";
            }
        }
    }
    return ::testing::AssertionSuccess();
}

} // namespace ps_van_test

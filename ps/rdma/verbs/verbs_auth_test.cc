// The ibverbs van's job-secret handshake without a device: both sides of
// a connection of several queue pairs are driven through verbs_auth.h with
// the bytes each would put in rdmacm private data or the first SEND.
#include <gtest/gtest.h>

#include <string.h>

#include <vector>

#include "ps/net/auth.h"
#include "ps/net/codec/message.h"
#include "ps/rdma/verbs/verbs_auth.h"
#include "ps/rdma/verbs/verbs_wire.h"

namespace {

// Room InfiniBand gives rdmacm private data (connect request, accept).
constexpr size_t kReqRoom = 56;
constexpr size_t kAcceptRoom = 196;

ps_auth_key_t Key(const char *secret)
{
    ps_auth_key_t k;
    EXPECT_EQ(ps_auth_key_from_secret(secret, strlen(secret), &k), PS_OK);
    return k;
}

struct Wire {
    std::vector<std::vector<uint8_t>> requests, accepts;
    std::vector<uint8_t> proof;
};

struct Outcome {
    ps_status_t accept_st = PS_OK;    // initiator, on the accepts
    int initiator_good = -1;          // its check of proof_r
    ps_status_t proof_st = PS_OK;     // responder, on the proof
    int initiator_state = 0, responder_state = 0;
};

std::vector<uint8_t> Request(const ps__vb_auth_t &a, unsigned index, unsigned count)
{
    std::vector<uint8_t> buf(kReqRoom, 0);  // padded, as IB delivers it
    size_t len = 0;
    EXPECT_EQ(ps__vb_auth_req_encode(&a, 0, index, count, buf.data(), buf.size(), &len), PS_OK);
    EXPECT_EQ(len, (size_t)PS__VB_AUTH_REQ_LEN);
    return buf;
}

std::vector<uint8_t> Accept(const ps__vb_auth_t &a, unsigned index, unsigned count)
{
    std::vector<uint8_t> buf(kAcceptRoom, 0);
    size_t len = 0;
    EXPECT_EQ(ps__vb_auth_accept_encode(&a, 0, index, count, buf.data(), buf.size(), &len),
              PS_OK);
    EXPECT_EQ(len, (size_t)PS__VB_AUTH_ACCEPT_LEN);
    return buf;
}

// One connection of `nqp` QPs between an initiator (node ini_id, a worker)
// and a responder (the scheduler), each with its own secret.
Outcome Connect(const ps_auth_key_t &ki, const ps_auth_key_t &kr, unsigned nqp, Wire *wire,
                int expect_id = PS_SCHEDULER_ID, int ini_id = 9)
{
    Outcome o;
    ps__vb_auth_t ini, resp;
    ps__vb_auth_start(&ini, ini_id, PS_ROLE_WORKER);
    Wire w;
    for (unsigned q = 0; q < nqp; q++)
        w.requests.push_back(Request(ini, q, nqp));
    for (unsigned q = 0; q < nqp; q++) {
        ps__vb_auth_req_t r;
        EXPECT_EQ(ps__vb_auth_req_decode(w.requests[q].data(), w.requests[q].size(), &r), PS_OK);
        EXPECT_EQ(r.group, ps__vb_auth_group(&ini));
        if (q == 0)
            ps__vb_auth_respond(&resp, &kr, &r, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
        else
            EXPECT_TRUE(ps__vb_auth_same_request(&resp, &r));
        w.accepts.push_back(Accept(resp, r.qp_index, r.qp_count));
    }
    for (unsigned q = 0; q < nqp && o.accept_st == PS_OK; q++)
        o.accept_st = ps__vb_auth_on_accept(&ini, &ki, expect_id, q, nqp, w.accepts[q].data(),
                                            w.accepts[q].size(), nullptr);
    if (o.accept_st == PS_OK) {
        uint8_t msg[PS__VB_AUTH_PROOF_LEN];
        EXPECT_EQ(ps__vb_auth_proof_msg(&ini, &ki, msg, &o.initiator_good), PS_OK);
        w.proof.assign(msg, msg + sizeof(msg));
        EXPECT_TRUE(ps__vb_auth_is_proof(msg, sizeof(msg)));
        o.proof_st = ps__vb_auth_on_proof(&resp, &kr, msg, sizeof(msg));
    }
    o.initiator_state = ps__vb_auth_state(&ini);
    o.responder_state = ps__vb_auth_state(&resp);
    if (wire != nullptr)
        *wire = w;
    return o;
}

TEST(VerbsAuth, RecordsFitRdmacmPrivateData)
{
    EXPECT_LE(PS__VB_AUTH_REQ_LEN, 56);
    EXPECT_LE(PS__VB_AUTH_ACCEPT_LEN, 196);
    EXPECT_LE(PS__VB_AUTH_REFUSAL_LEN, 148);
    EXPECT_LE(PS__VB_AUTH_PROOF_LEN, PS__VB_CTRL_LEN);
}

TEST(VerbsAuth, RightSecretBothWays)
{
    ps_auth_key_t k = Key("correct horse battery staple");
    for (unsigned nqp : {1u, 2u, (unsigned)PS__VB_MAX_QP}) {
        Outcome o = Connect(k, k, nqp, nullptr);
        EXPECT_EQ(o.accept_st, PS_OK) << nqp;
        EXPECT_EQ(o.initiator_good, 1) << nqp;
        EXPECT_EQ(o.proof_st, PS_OK) << nqp;
        EXPECT_EQ(o.initiator_state, PS__VB_AUTH_DONE);
        EXPECT_EQ(o.responder_state, PS__VB_AUTH_DONE);
    }
}

TEST(VerbsAuth, WrongSecretOnEitherSideFailsBothChecks)
{
    ps_auth_key_t good = Key("correct horse battery staple");
    ps_auth_key_t wrong = Key("not the secret");
    // A stranger connecting to the job, and a node of the job reaching a
    // stranger: each side's check fails; the initiator still sends its
    // proof (the verdict is the responder's).
    for (int stranger_initiates = 0; stranger_initiates < 2; stranger_initiates++) {
        const ps_auth_key_t &ki = stranger_initiates ? wrong : good;
        const ps_auth_key_t &kr = stranger_initiates ? good : wrong;
        Wire w;
        Outcome o = Connect(ki, kr, 2, &w);
        EXPECT_EQ(o.accept_st, PS_OK);
        EXPECT_EQ(o.initiator_good, 0);
        EXPECT_EQ(o.initiator_state, PS__VB_AUTH_WAIT_VERDICT);
        EXPECT_EQ(w.proof.size(), (size_t)PS__VB_AUTH_PROOF_LEN);
        EXPECT_EQ(o.proof_st, PS_ERR_AUTH);
        EXPECT_EQ(o.responder_state, PS__VB_AUTH_FAILED);
    }
}

TEST(VerbsAuth, TruncatedOrGarbageRequestIsRefused)
{
    ps_auth_key_t k = Key("s");
    (void)k;
    ps__vb_auth_t ini;
    ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
    std::vector<uint8_t> req = Request(ini, 1, 2);
    ps__vb_auth_req_t r;
    for (size_t len = 0; len < PS__VB_AUTH_REQ_LEN; len++)
        EXPECT_EQ(ps__vb_auth_req_decode(req.data(), len, &r), PS_ERR_PROTOCOL) << len;
    EXPECT_EQ(ps__vb_auth_req_decode(req.data(), PS__VB_AUTH_REQ_LEN, &r), PS_OK);
    EXPECT_EQ(r.qp_index, 1);
    EXPECT_EQ(r.qp_count, 2);
    EXPECT_EQ(r.id_i, 9);
    EXPECT_EQ(r.role_i, PS_ROLE_WORKER);
    EXPECT_EQ(ps__vb_auth_req_decode(nullptr, 52, &r), PS_ERR_PROTOCOL);

    // Every single-byte change of the header is noticed or harmless: the
    // magic, kind, version, reserved bytes and QP fields are checked.
    for (size_t i = 0; i < PS__VB_AUTH_HDR_LEN; i++) {
        if (i == 6 || i == 7)
            continue;  // flags: informational
        std::vector<uint8_t> b = req;
        b[i] ^= 0x5a;
        EXPECT_EQ(ps__vb_auth_req_decode(b.data(), b.size(), &r), PS_ERR_PROTOCOL) << i;
    }
    // QP index not below the count; a count above the maximum.
    std::vector<uint8_t> b = req;
    b[8] = 2;
    EXPECT_EQ(ps__vb_auth_req_decode(b.data(), b.size(), &r), PS_ERR_PROTOCOL);
    b = req;
    b[9] = PS__VB_MAX_QP + 1;
    b[8] = 0;
    EXPECT_EQ(ps__vb_auth_req_decode(b.data(), b.size(), &r), PS_ERR_PROTOCOL);
    // A node id out of range (id field at 12 + 32), a role above 255.
    b = req;
    b[44] = 0xff, b[45] = 0xff, b[46] = 0xff, b[47] = 0xff;
    EXPECT_EQ(ps__vb_auth_req_decode(b.data(), b.size(), &r), PS_ERR_PROTOCOL);
    b = req;
    b[49] = 1;
    EXPECT_EQ(ps__vb_auth_req_decode(b.data(), b.size(), &r), PS_ERR_PROTOCOL);
    // Garbage.
    std::vector<uint8_t> g(kReqRoom);
    for (size_t i = 0; i < g.size(); i++)
        g[i] = (uint8_t)(i * 37 + 11);
    EXPECT_EQ(ps__vb_pd_kind(g.data(), g.size()), PS__VB_PD_OTHER);
    EXPECT_EQ(ps__vb_auth_req_decode(g.data(), g.size(), &r), PS_ERR_PROTOCOL);
}

TEST(VerbsAuth, TruncatedOrGarbageAcceptIsRefused)
{
    ps_auth_key_t k = Key("correct horse battery staple");
    Wire w;
    ASSERT_EQ(Connect(k, k, 1, &w).accept_st, PS_OK);
    const std::vector<uint8_t> &acc = w.accepts[0];
    for (size_t len = 0; len < PS__VB_AUTH_ACCEPT_LEN; len++) {
        ps__vb_auth_t ini;
        ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
        const char *why = nullptr;
        EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 1, acc.data(), len, &why),
                  PS_ERR_PROTOCOL)
            << len;
        EXPECT_NE(why, nullptr);
        int good = -1;
        uint8_t msg[PS__VB_AUTH_PROOF_LEN];
        EXPECT_EQ(ps__vb_auth_proof_msg(&ini, &k, msg, &good), PS_ERR_BAD_STATE);
    }
    // A plain accept (the responder skipped the handshake) is an auth
    // failure, not a retry.
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.node_id = PS_SCHEDULER_ID;
    d.qp_count = 1;
    uint8_t plain[PS__VB_CONN_DATA_LEN];
    size_t len = 0;
    ASSERT_EQ(ps__vb_conn_data_encode(&d, plain, sizeof(plain), &len), PS_OK);
    ps__vb_auth_t ini;
    ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
    EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 1, plain, len, nullptr),
              PS_ERR_AUTH);
    uint8_t refusal[PS__VB_AUTH_REFUSAL_LEN];
    ASSERT_EQ(ps__vb_auth_refusal_encode(refusal, sizeof(refusal), &len), PS_OK);
    EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 1, refusal, len, nullptr),
              PS_ERR_PROTOCOL);
    std::vector<uint8_t> g(kAcceptRoom, 0xa5);
    EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 1, g.data(), g.size(), nullptr),
              PS_ERR_PROTOCOL);
    // Right bytes for QP 0 of 1 delivered on QP 1 of 2.
    EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 1, 2, acc.data(), acc.size(),
                                    nullptr),
              PS_ERR_PROTOCOL);
}

TEST(VerbsAuth, TruncatedOrGarbageProofIsRefused)
{
    ps_auth_key_t k = Key("correct horse battery staple");
    Wire w;
    ASSERT_EQ(Connect(k, k, 1, &w).proof_st, PS_OK);
    // Replay the same connection's request into fresh responders, each fed
    // a broken version of the right proof.
    ps__vb_auth_req_t r;
    ASSERT_EQ(ps__vb_auth_req_decode(w.requests[0].data(), w.requests[0].size(), &r), PS_OK);
    std::vector<std::vector<uint8_t>> bad;
    for (size_t len = 0; len < w.proof.size(); len++)
        bad.emplace_back(w.proof.begin(), w.proof.begin() + (long)len);
    std::vector<uint8_t> longer = w.proof;
    longer.push_back(0);
    bad.push_back(longer);
    for (size_t i = 0; i < w.proof.size(); i++) {
        std::vector<uint8_t> b = w.proof;
        b[i] ^= 1;
        bad.push_back(b);
    }
    bad.push_back(std::vector<uint8_t>(PS__VB_AUTH_PROOF_LEN, 0));
    for (size_t i = 0; i < bad.size(); i++) {
        ps__vb_auth_t resp;
        ps__vb_auth_respond(&resp, &k, &r, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
        EXPECT_EQ(ps__vb_auth_on_proof(&resp, &k, bad[i].data(), bad[i].size()), PS_ERR_AUTH)
            << i;
        EXPECT_EQ(ps__vb_auth_state(&resp), PS__VB_AUTH_FAILED);
        // Nothing more is taken once it failed.
        EXPECT_EQ(ps__vb_auth_on_proof(&resp, &k, w.proof.data(), w.proof.size()),
                  PS_ERR_BAD_STATE);
    }
    ps__vb_auth_t resp;
    ps__vb_auth_respond(&resp, &k, &r, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
    EXPECT_EQ(ps__vb_auth_on_proof(&resp, &k, nullptr, 0), PS_ERR_AUTH);
}

TEST(VerbsAuth, ReplayedProofFromAnotherConnectionIsRefused)
{
    ps_auth_key_t k = Key("correct horse battery staple");
    Wire first;
    ASSERT_EQ(Connect(k, k, 2, &first).proof_st, PS_OK);
    // A listener replays the whole first connection: its requests (same
    // nonce_i, id, role), then its proof. The responder's fresh nonce_r
    // makes the old proof worthless.
    ps__vb_auth_req_t r;
    ASSERT_EQ(ps__vb_auth_req_decode(first.requests[0].data(), first.requests[0].size(), &r),
              PS_OK);
    ps__vb_auth_t resp;
    ps__vb_auth_respond(&resp, &k, &r, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
    EXPECT_EQ(ps__vb_auth_on_proof(&resp, &k, first.proof.data(), first.proof.size()),
              PS_ERR_AUTH);

    // And a proof of another live connection (its own, correct nonces)
    // does not open this one either.
    Wire second;
    ASSERT_EQ(Connect(k, k, 2, &second).proof_st, PS_OK);
    ps__vb_auth_respond(&resp, &k, &r, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
    EXPECT_EQ(ps__vb_auth_on_proof(&resp, &k, second.proof.data(), second.proof.size()),
              PS_ERR_AUTH);

    // An old accept replayed to a new attempt (fresh nonce_i) does not
    // pass the initiator's check.
    ps__vb_auth_t ini;
    ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
    for (unsigned q = 0; q < 2; q++)
        ASSERT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, q, 2, first.accepts[q].data(),
                                        first.accepts[q].size(), nullptr),
                  PS_OK);
    int good = -1;
    uint8_t msg[PS__VB_AUTH_PROOF_LEN];
    ASSERT_EQ(ps__vb_auth_proof_msg(&ini, &k, msg, &good), PS_OK);
    EXPECT_EQ(good, 0);
    EXPECT_EQ(ps__vb_auth_state(&ini), PS__VB_AUTH_WAIT_VERDICT);
}

TEST(VerbsAuth, IdOrRoleChangedOnTheWayFailsTheProofs)
{
    ps_auth_key_t k = Key("correct horse battery staple");
    // The request's id (offset 12 + 32) or role (12 + 36) altered after
    // the initiator built it: the responder proves a transcript the
    // initiator does not have.
    for (size_t off : {(size_t)44, (size_t)48}) {
        ps__vb_auth_t ini, resp;
        ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
        std::vector<uint8_t> req = Request(ini, 0, 1);
        req[off] = (uint8_t)(off == 44 ? 11 : PS_ROLE_SERVER);
        ps__vb_auth_req_t r;
        ASSERT_EQ(ps__vb_auth_req_decode(req.data(), req.size(), &r), PS_OK);
        ps__vb_auth_respond(&resp, &k, &r, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
        std::vector<uint8_t> acc = Accept(resp, 0, 1);
        ASSERT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 1, acc.data(), acc.size(),
                                        nullptr),
                  PS_OK);
        int good = -1;
        uint8_t msg[PS__VB_AUTH_PROOF_LEN];
        ASSERT_EQ(ps__vb_auth_proof_msg(&ini, &k, msg, &good), PS_OK);
        EXPECT_EQ(good, 0) << off;
        EXPECT_EQ(ps__vb_auth_on_proof(&resp, &k, msg, sizeof(msg)), PS_ERR_AUTH) << off;
    }
    // The accept's id (12 + 32) or role (12 + 36) altered on the way: the
    // initiator's check fails (the unaltered accept passes).
    for (size_t off : {(size_t)44, (size_t)48}) {
        ps__vb_auth_t ini, resp;
        ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
        std::vector<uint8_t> req = Request(ini, 0, 1);
        ps__vb_auth_req_t r;
        ASSERT_EQ(ps__vb_auth_req_decode(req.data(), req.size(), &r), PS_OK);
        ps__vb_auth_respond(&resp, &k, &r, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
        std::vector<uint8_t> acc = Accept(resp, 0, 1);
        ps__vb_auth_t same = ini;
        int good = -1;
        uint8_t msg[PS__VB_AUTH_PROOF_LEN];
        ASSERT_EQ(ps__vb_auth_on_accept(&same, &k, PS_SCHEDULER_ID, 0, 1, acc.data(), acc.size(),
                                        nullptr),
                  PS_OK);
        ASSERT_EQ(ps__vb_auth_proof_msg(&same, &k, msg, &good), PS_OK);
        EXPECT_EQ(good, 1);
        if (off == 44)
            acc[44] = 0xff, acc[45] = 0x7f, acc[46] = acc[47] = 0;  // PS_NODE_EMPTY passes the id check
        else
            acc[48] = PS_ROLE_SERVER;
        ASSERT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 1, acc.data(), acc.size(),
                                        nullptr),
                  PS_OK);
        ASSERT_EQ(ps__vb_auth_proof_msg(&ini, &k, msg, &good), PS_OK);
        EXPECT_EQ(good, 0) << off;
    }
    // The responder is another node than the one meant: refused before any
    // proof is looked at; one not yet assigned (PS_NODE_EMPTY) passes.
    EXPECT_EQ(Connect(k, k, 2, nullptr, /*expect_id=*/8).accept_st, PS_ERR_AUTH);
    {
        ps__vb_auth_t ini, resp;
        ps__vb_auth_start(&ini, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
        std::vector<uint8_t> req = Request(ini, 0, 1);
        ps__vb_auth_req_t r;
        ASSERT_EQ(ps__vb_auth_req_decode(req.data(), req.size(), &r), PS_OK);
        ps__vb_auth_respond(&resp, &k, &r, PS_NODE_EMPTY, PS_ROLE_WORKER);
        std::vector<uint8_t> acc = Accept(resp, 0, 1);
        const char *why = nullptr;
        EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, 9, 0, 1, acc.data(), acc.size(), &why), PS_OK);
        int good = -1;
        uint8_t msg[PS__VB_AUTH_PROOF_LEN];
        ASSERT_EQ(ps__vb_auth_proof_msg(&ini, &k, msg, &good), PS_OK);
        EXPECT_EQ(good, 1);
        EXPECT_EQ(ps__vb_auth_on_proof(&resp, &k, msg, sizeof(msg)), PS_OK);
    }
}

TEST(VerbsAuth, QueuePairsMustCarryOneHandshake)
{
    ps_auth_key_t k = Key("correct horse battery staple");
    Wire a, b;
    ASSERT_EQ(Connect(k, k, 2, &a).proof_st, PS_OK);
    ASSERT_EQ(Connect(k, k, 2, &b).proof_st, PS_OK);
    // Responder: QP 1's request from another attempt is not this one's.
    ps__vb_auth_req_t r0, r1;
    ASSERT_EQ(ps__vb_auth_req_decode(a.requests[0].data(), a.requests[0].size(), &r0), PS_OK);
    ASSERT_EQ(ps__vb_auth_req_decode(b.requests[1].data(), b.requests[1].size(), &r1), PS_OK);
    ps__vb_auth_t resp;
    ps__vb_auth_respond(&resp, &k, &r0, PS_SCHEDULER_ID, PS_ROLE_SCHEDULER);
    EXPECT_FALSE(ps__vb_auth_same_request(&resp, &r1));
    // Initiator: QP 1 answered with another connection's handshake.
    ps__vb_auth_t ini;
    ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
    ASSERT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 2, a.accepts[0].data(),
                                    a.accepts[0].size(), nullptr),
              PS_OK);
    const char *why = nullptr;
    EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 1, 2, b.accepts[1].data(),
                                    b.accepts[1].size(), &why),
              PS_ERR_PROTOCOL);
    EXPECT_NE(why, nullptr);
}

TEST(VerbsAuth, ResponderIsUpOnlyWithBothEstablishedAndProved)
{
    for (int proof_first = 0; proof_first < 2; proof_first++) {
        ps__vb_auth_t a;
        memset(&a, 0, sizeof(a));
        unsigned first = proof_first ? PS__VB_AUTH_GATE_PROVED : PS__VB_AUTH_GATE_UP;
        unsigned second = proof_first ? PS__VB_AUTH_GATE_UP : PS__VB_AUTH_GATE_PROVED;
        EXPECT_EQ(ps__vb_auth_gate(&a, first), 0);
        EXPECT_EQ(ps__vb_auth_gate(&a, first), 0);
        EXPECT_EQ(ps__vb_auth_gate(&a, second), 1);
        EXPECT_EQ(ps__vb_auth_gate(&a, second), 0);
    }
}

TEST(VerbsAuth, StatesRefuseOutOfOrderSteps)
{
    ps_auth_key_t k = Key("correct horse battery staple");
    Wire w;
    ASSERT_EQ(Connect(k, k, 1, &w).proof_st, PS_OK);
    ps__vb_auth_t off;
    memset(&off, 0, sizeof(off));
    EXPECT_EQ(ps__vb_auth_state(&off), PS__VB_AUTH_OFF);
    EXPECT_EQ(ps__vb_auth_on_proof(&off, &k, w.proof.data(), w.proof.size()), PS_ERR_BAD_STATE);
    EXPECT_EQ(ps__vb_auth_on_accept(&off, &k, PS_SCHEDULER_ID, 0, 1, w.accepts[0].data(),
                                    w.accepts[0].size(), nullptr),
              PS_ERR_BAD_STATE);
    ps__vb_auth_t ini;
    ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
    EXPECT_EQ(ps__vb_auth_fail(&ini), PS__VB_AUTH_WAIT_ACCEPT);
    EXPECT_EQ(ps__vb_auth_on_accept(&ini, &k, PS_SCHEDULER_ID, 0, 1, w.accepts[0].data(),
                                    w.accepts[0].size(), nullptr),
              PS_ERR_BAD_STATE);
}

TEST(VerbsAuth, WithoutSecretThePrivateDataIsThePlainLayout)
{
    // What a van without a secret sends is verbs_wire.h's 28 bytes, told
    // apart from every handshake record, and the plain decoder refuses the
    // handshake records (a node without the secret rejects them).
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.node_id = 9;
    d.qp_index = 1;
    d.qp_count = 2;
    d.nonce = 0x0123456789abcdefull;
    uint8_t plain[PS__VB_CONN_DATA_LEN];
    size_t len = 0;
    ASSERT_EQ(ps__vb_conn_data_encode(&d, plain, sizeof(plain), &len), PS_OK);
    EXPECT_EQ(len, 28u);
    EXPECT_EQ(ps__vb_pd_kind(plain, len), PS__VB_PD_PLAIN);
    ps__vb_auth_req_t r;
    EXPECT_EQ(ps__vb_auth_req_decode(plain, len, &r), PS_ERR_PROTOCOL);

    ps__vb_auth_t ini;
    ps__vb_auth_start(&ini, 9, PS_ROLE_WORKER);
    std::vector<uint8_t> req = Request(ini, 0, 1);
    EXPECT_EQ(ps__vb_pd_kind(req.data(), req.size()), PS__VB_PD_REQUEST);
    ps__vb_conn_data_t out;
    EXPECT_EQ(ps__vb_conn_data_decode(req.data(), req.size(), &out), PS_ERR_PROTOCOL);
    uint8_t refusal[PS__VB_AUTH_REFUSAL_LEN];
    ASSERT_EQ(ps__vb_auth_refusal_encode(refusal, sizeof(refusal), &len), PS_OK);
    EXPECT_EQ(ps__vb_pd_kind(refusal, len), PS__VB_PD_REFUSAL);
    EXPECT_EQ(ps__vb_conn_data_decode(refusal, len, &out), PS_ERR_PROTOCOL);
    // IB delivers a reject padded with zeros: still a refusal.
    std::vector<uint8_t> padded(148, 0);
    memcpy(padded.data(), refusal, len);
    EXPECT_EQ(ps__vb_pd_kind(padded.data(), padded.size()), PS__VB_PD_REFUSAL);
    // A reject the CM made itself (no listener) carries zeros.
    std::vector<uint8_t> zeros(148, 0);
    EXPECT_EQ(ps__vb_pd_kind(zeros.data(), zeros.size()), PS__VB_PD_OTHER);
}

TEST(VerbsAuth, RequestLayoutIsStable)
{
    // Byte layout: header, then ps/net/auth.h's INIT record.
    ps__vb_auth_t ini;
    ps__vb_auth_start(&ini, 0x1234, 2);
    for (int i = 0; i < PS_AUTH_NONCE_BYTES; i++)
        ini.t.nonce_i[i] = (uint8_t)(0xa0 + i);
    uint8_t buf[PS__VB_AUTH_REQ_LEN];
    size_t len = 0;
    ASSERT_EQ(ps__vb_auth_req_encode(&ini, 1, 3, 4, buf, sizeof(buf), &len), PS_OK);
    const uint8_t head[12] = {'P', 'S', 'V', 'C', 'I', 1, 1, 0, 3, 4, 0, 0};
    EXPECT_EQ(memcmp(buf, head, sizeof(head)), 0);
    EXPECT_EQ(buf[12], 0xa0);
    EXPECT_EQ(buf[43], 0xa0 + 31);
    const uint8_t tail[8] = {0x34, 0x12, 0, 0, 2, 0, 0, 0};
    EXPECT_EQ(memcmp(buf + 44, tail, sizeof(tail)), 0);
    EXPECT_EQ(ps__vb_auth_group(&ini), 0xa7a6a5a4a3a2a1a0ull);
}

}  // namespace

// The job-secret handshake's state machine (ps/net/van/handshake.h) on its
// own: two machines hand each other what the other says to send.
#include "ps/net/van/handshake.h"

#include <gtest/gtest.h>
#include <string.h>

#include <string>

#include "ps/net/codec/message.h"

namespace {

ps_auth_key_t key_of(const char *secret)
{
    ps_auth_key_t k;
    EXPECT_EQ(ps_auth_key_from_secret(secret, strlen(secret), &k), PS_OK);
    return k;
}

struct Pair {
    ps_auth_key_t ki, kr;
    ps_van_hs_t ini, resp;
    ps_van_hs_action_t a;

    // The initiator (a worker, id 9) opens to the responder (the
    // scheduler, id 1); NULL secret: that side has none.
    Pair(const char *si, const char *sr, const char *van = "tcp")
    {
        if (si != nullptr) {
            ki = key_of(si);
        }
        if (sr != nullptr) {
            kr = key_of(sr);
        }
        ps_van_hs_init(&ini, van, 1, si != nullptr ? &ki : nullptr, PS_ROLE_WORKER);
        ps_van_hs_init(&resp, van, 0, sr != nullptr ? &kr : nullptr, PS_ROLE_SCHEDULER);
        ps_van_hs_accept(&resp);
    }
    ps_van_hs_verdict_t to_resp(const ps_van_hs_action_t &in)
    {
        ps_van_hs_rx(&resp, in.send, in.body, in.body_len, PS_SCHEDULER_ID, PS_NODE_EMPTY, &a);
        return a.verdict;
    }
    ps_van_hs_verdict_t to_ini(const ps_van_hs_action_t &in, int32_t peer = PS_SCHEDULER_ID)
    {
        ps_van_hs_rx(&ini, in.send, in.body, in.body_len, 9, peer, &a);
        return a.verdict;
    }
    // Each message of a fresh handshake announcing `id`, the ones before
    // it exchanged.
    ps_van_hs_action_t init(int32_t id = 9)
    {
        ps_van_hs_action_t m;
        EXPECT_EQ(ps_van_hs_start(&ini, id, &m), PS_OK);
        return m;
    }
    ps_van_hs_action_t challenge(int32_t id = 9)
    {
        to_resp(init(id));
        return a;
    }
    ps_van_hs_action_t proof(int32_t id = 9)
    {
        to_ini(challenge(id));
        return a;
    }
};

TEST(Handshake, BothProve)
{
    Pair p("s3cret", "s3cret");
    EXPECT_EQ(p.resp.state, PS_VAN_HS_WAIT_INIT);
    EXPECT_TRUE(ps_van_hs_pending(&p.resp));
    ps_van_hs_action_t init;
    ASSERT_EQ(ps_van_hs_start(&p.ini, 9, &init), PS_OK);
    EXPECT_EQ(init.send, PS_VAN_HS_INIT);
    EXPECT_EQ(init.body_len, (size_t)PS_AUTH_INIT_BYTES);
    EXPECT_EQ(init.verdict, PS_VAN_HS_WAIT);
    EXPECT_EQ(p.ini.state, PS_VAN_HS_WAIT_CHALLENGE);

    EXPECT_EQ(p.to_resp(init), PS_VAN_HS_WAIT);
    ps_van_hs_action_t chal = p.a;
    EXPECT_EQ(chal.send, PS_VAN_HS_CHALLENGE);
    EXPECT_EQ(chal.body_len, (size_t)PS_AUTH_CHALLENGE_BYTES);
    EXPECT_EQ(p.resp.state, PS_VAN_HS_WAIT_PROOF);
    EXPECT_EQ(p.resp.t.id_i, 9);
    EXPECT_EQ(p.resp.t.role_i, PS_ROLE_WORKER);

    EXPECT_EQ(p.to_ini(chal), PS_VAN_HS_PROVED);
    ps_van_hs_action_t proof = p.a;
    EXPECT_EQ(proof.send, PS_VAN_HS_PROOF);
    EXPECT_EQ(proof.body_len, (size_t)PS_AUTH_PROOF_BYTES);
    EXPECT_EQ(p.ini.state, PS_VAN_HS_DONE);
    EXPECT_EQ(p.ini.t.id_r, PS_SCHEDULER_ID);
    EXPECT_EQ(p.ini.t.role_r, PS_ROLE_SCHEDULER);

    EXPECT_EQ(p.to_resp(proof), PS_VAN_HS_PROVED);
    EXPECT_EQ(p.a.send, PS_VAN_HS_OTHER);
    EXPECT_EQ(p.resp.state, PS_VAN_HS_DONE);
    EXPECT_FALSE(ps_van_hs_pending(&p.resp));
    EXPECT_EQ(ps_van_hs_status(&p.a), PS_OK);

    // Then everything else passes on, both ways; handshake steps do not.
    ps_van_hs_action_t other{};
    other.send = PS_VAN_HS_OTHER;
    EXPECT_EQ(p.to_resp(other), PS_VAN_HS_PASS);
    EXPECT_EQ(p.to_ini(other), PS_VAN_HS_PASS);
    EXPECT_EQ(p.to_resp(init), PS_VAN_HS_PROTOCOL);
    EXPECT_EQ(ps_van_hs_status(&p.a), PS_ERR_PROTOCOL);
    EXPECT_EQ(p.resp.state, PS_VAN_HS_FAILED);
    EXPECT_EQ(p.to_resp(other), PS_VAN_HS_DROP);
    EXPECT_EQ(p.to_ini(chal), PS_VAN_HS_PROTOCOL);
}

TEST(Handshake, ProofsAreBoundToTheVan)
{
    Pair a("s3cret", "s3cret", "tcp");
    Pair b("s3cret", "s3cret", "shm");
    b.to_resp(a.init()); // shm's challenge to tcp's INIT
    EXPECT_EQ(a.to_ini(b.a), PS_VAN_HS_WAIT);
    EXPECT_EQ(a.ini.state, PS_VAN_HS_WAIT_VERDICT);
}

TEST(Handshake, WrongSecretResponderIsRefusedByItsOwnVerdict)
{
    // The initiator's check of proof_r fails; it proves itself anyway and
    // the responder refuses that proof.
    Pair p("s3cret", "other");
    ps_van_hs_action_t proof = p.proof();
    EXPECT_EQ(p.a.verdict, PS_VAN_HS_WAIT);
    EXPECT_EQ(proof.send, PS_VAN_HS_PROOF);
    EXPECT_EQ(p.ini.state, PS_VAN_HS_WAIT_VERDICT);
    EXPECT_FALSE(ps_van_hs_claim_ok(&p.resp, 9));

    EXPECT_EQ(p.to_resp(proof), PS_VAN_HS_REFUSE);
    EXPECT_EQ(std::string(p.a.why), "it does not hold the job secret");
    EXPECT_EQ(ps_van_hs_status(&p.a), PS_ERR_AUTH);
    EXPECT_EQ(p.resp.state, PS_VAN_HS_FAILED);
    EXPECT_FALSE(ps_van_hs_claim_ok(&p.resp, 9));

    ps_van_hs_action_t refused{};
    refused.send = PS_VAN_HS_REFUSED;
    EXPECT_EQ(p.to_ini(refused), PS_VAN_HS_FAIL);
    EXPECT_EQ(std::string(p.a.why), "refused us: wrong or missing PS_JOB_SECRET");
    EXPECT_EQ(p.ini.state, PS_VAN_HS_FAILED);
}

TEST(Handshake, VerdictOtherThanRefusedFails)
{
    // A responder that takes a proof its own check should have refused is
    // no ps node with our secret.
    Pair p("s3cret", "other");
    ps_van_hs_action_t chal = p.challenge();
    EXPECT_EQ(p.to_ini(chal), PS_VAN_HS_WAIT);
    ps_van_hs_action_t ack{};
    EXPECT_EQ(p.to_ini(ack), PS_VAN_HS_FAIL);
    EXPECT_EQ(std::string(p.a.why), "did not prove it holds the job secret; closing");
}

TEST(Handshake, WrongProofFromInitiatorIsRefused)
{
    Pair p("s3cret", "s3cret");
    ps_van_hs_action_t chal = p.challenge();
    ASSERT_EQ(p.to_ini(chal), PS_VAN_HS_PROVED);
    ps_van_hs_action_t proof = p.a;
    proof.body[3] ^= 1;
    EXPECT_EQ(p.to_resp(proof), PS_VAN_HS_REFUSE);
    EXPECT_EQ(p.resp.state, PS_VAN_HS_FAILED);
    // Short, long, none.
    for (size_t len : {0, 31, 33}) {
        Pair q("s3cret", "s3cret");
        proof = q.proof();
        proof.body_len = len;
        EXPECT_EQ(q.to_resp(proof), PS_VAN_HS_REFUSE) << len;
    }
}

TEST(Handshake, ReflectedResponderProofIsRefused)
{
    // The responder's own proof_r sent back as the initiator's proof: the
    // direction label makes it worthless.
    Pair p("s3cret", "s3cret");
    p.challenge();
    ps_van_hs_action_t reflected{};
    reflected.send = PS_VAN_HS_PROOF;
    reflected.body_len = PS_AUTH_PROOF_BYTES;
    memcpy(reflected.body, p.a.body + PS_AUTH_NONCE_BYTES + 8, PS_AUTH_PROOF_BYTES);
    EXPECT_EQ(p.to_resp(reflected), PS_VAN_HS_REFUSE);
}

TEST(Handshake, WrongResponderProofIsCaught)
{
    Pair p("s3cret", "s3cret");
    ps_van_hs_action_t chal = p.challenge();
    chal.body[PS_AUTH_CHALLENGE_BYTES - 1] ^= 0x80;
    EXPECT_EQ(p.to_ini(chal), PS_VAN_HS_WAIT);
    EXPECT_EQ(p.ini.state, PS_VAN_HS_WAIT_VERDICT);
    EXPECT_EQ(p.a.send, PS_VAN_HS_PROOF); // ours goes out all the same
}

TEST(Handshake, MalformedOrUnknownStepsAreRefused)
{
    // Responder: an INIT of the wrong length, a step of no known kind (or
    // version) first, a hello first, a PROOF before INIT.
    ps_van_hs_action_t init;
    {
        Pair p("s3cret", "s3cret");
        ASSERT_EQ(ps_van_hs_start(&p.ini, 9, &init), PS_OK);
        init.body_len = PS_AUTH_INIT_BYTES - 1;
        EXPECT_EQ(p.to_resp(init), PS_VAN_HS_REFUSE);
        EXPECT_EQ(std::string(p.a.why), "malformed job-secret handshake");
    }
    for (int step : {0, (int)'X', (int)PS_VAN_HS_UNKNOWN, (int)PS_VAN_HS_PROOF,
                     (int)PS_VAN_HS_CHALLENGE, (int)PS_VAN_HS_REFUSED}) {
        Pair p("s3cret", "s3cret");
        ASSERT_EQ(ps_van_hs_start(&p.ini, 9, &init), PS_OK);
        init.send = (ps_van_hs_step_t)step;
        EXPECT_EQ(p.to_resp(init), PS_VAN_HS_REFUSE) << step;
        EXPECT_EQ(std::string(p.a.why), "it does not hold the job secret");
        EXPECT_FALSE(ps_van_hs_claim_ok(&p.resp, 9));
    }
    // Initiator: a challenge of the wrong length, another step, a hello.
    for (int step : {(int)PS_VAN_HS_CHALLENGE, (int)PS_VAN_HS_UNKNOWN, (int)PS_VAN_HS_OTHER}) {
        Pair p("s3cret", "s3cret");
        ps_van_hs_action_t chal = p.challenge();
        chal.send = (ps_van_hs_step_t)step;
        if (step == PS_VAN_HS_CHALLENGE) {
            chal.body_len--;
        }
        EXPECT_EQ(p.to_ini(chal), PS_VAN_HS_FAIL) << step;
        EXPECT_EQ(p.ini.state, PS_VAN_HS_FAILED);
        EXPECT_EQ(p.a.send, PS_VAN_HS_OTHER); // no proof of ours then
    }
}

TEST(Handshake, ChallengeMustComeFromTheNodeMeant)
{
    Pair p("s3cret", "s3cret");
    ps_van_hs_action_t chal = p.challenge();
    Pair q("s3cret", "s3cret");
    q.init();
    EXPECT_EQ(q.to_ini(chal, 7), PS_VAN_HS_FAIL); // meant node 7, answered as 1
    EXPECT_EQ(std::string(q.a.why), "answered the job-secret handshake as node 1; closing");
    EXPECT_EQ(q.a.send, PS_VAN_HS_OTHER);
    // An unassigned responder (PS_NODE_EMPTY) passes.
    Pair r("s3cret", "s3cret");
    ps_van_hs_action_t init = r.init();
    ps_van_hs_rx(&r.resp, init.send, init.body, init.body_len, PS_NODE_EMPTY, PS_NODE_EMPTY, &r.a);
    chal = r.a;
    EXPECT_EQ(r.to_ini(chal, 7), PS_VAN_HS_PROVED);
}

TEST(Handshake, IdBinding)
{
    // Proved as 9: the hello may announce 9, nothing else.
    Pair p("s3cret", "s3cret");
    EXPECT_FALSE(ps_van_hs_claim_ok(&p.resp, 9)); // not before the proof
    ps_van_hs_action_t proof = p.proof();
    EXPECT_FALSE(ps_van_hs_claim_ok(&p.resp, 9));
    ASSERT_EQ(p.to_resp(proof), PS_VAN_HS_PROVED);
    EXPECT_TRUE(ps_van_hs_claim_ok(&p.resp, 9));
    EXPECT_FALSE(ps_van_hs_claim_ok(&p.resp, 10));
    EXPECT_FALSE(ps_van_hs_claim_ok(&p.resp, PS_SCHEDULER_ID));
    EXPECT_TRUE(ps_van_hs_claim_ok(&p.ini, 1234)); // the initiator holds no one to an id
    // The hello check says so as a refusal.
    ps_van_hs_action_t h;
    ps_van_hs_hello(&p.resp, 9, &h);
    EXPECT_EQ(h.verdict, PS_VAN_HS_PASS);
    ps_van_hs_hello(&p.resp, 10, &h);
    EXPECT_EQ(h.verdict, PS_VAN_HS_REFUSE);
    EXPECT_EQ(std::string(h.why), "it announced another node id than it proved the job secret as");
    EXPECT_EQ(p.resp.state, PS_VAN_HS_FAILED);

    // An unassigned node may take the id the scheduler gives it.
    Pair u("s3cret", "s3cret");
    proof = u.proof(PS_NODE_EMPTY);
    ASSERT_EQ(u.to_resp(proof), PS_VAN_HS_PROVED);
    EXPECT_TRUE(ps_van_hs_claim_ok(&u.resp, 11));
    // A hello before the proof is refused.
    Pair b("s3cret", "s3cret");
    ps_van_hs_hello(&b.resp, 9, &h);
    EXPECT_EQ(h.verdict, PS_VAN_HS_REFUSE);
    EXPECT_EQ(std::string(h.why), "it does not hold the job secret");

    // The announced id is covered by the proof: changed in flight, the
    // responder's proof no longer checks out.
    Pair f("s3cret", "s3cret");
    ps_van_hs_action_t init = f.init();
    init.body[PS_AUTH_NONCE_BYTES] = 10;
    f.to_resp(init);
    ps_van_hs_action_t chal = f.a;
    EXPECT_EQ(f.to_ini(chal), PS_VAN_HS_WAIT);
    proof = f.a;
    EXPECT_EQ(f.to_resp(proof), PS_VAN_HS_REFUSE);
}

TEST(Handshake, NoSecretMeetsSecret)
{
    // A responder without a secret refuses an INIT, and the initiator
    // understands the refusal.
    Pair p("s3cret", nullptr);
    EXPECT_EQ(p.resp.state, PS_VAN_HS_NONE);
    EXPECT_FALSE(ps_van_hs_pending(&p.resp));
    ps_van_hs_action_t init;
    ASSERT_EQ(ps_van_hs_start(&p.ini, 9, &init), PS_OK);
    EXPECT_EQ(p.to_resp(init), PS_VAN_HS_REFUSE);
    EXPECT_EQ(std::string(p.a.why),
              "it wants a job-secret handshake, but this node has no PS_JOB_SECRET");
    ps_van_hs_action_t refused{};
    refused.send = PS_VAN_HS_REFUSED;
    EXPECT_EQ(p.to_ini(refused), PS_VAN_HS_FAIL);

    // An initiator without a secret cannot start, passes its peer's
    // traffic on, understands a refusal and closes on any other step.
    Pair q(nullptr, "s3cret");
    EXPECT_EQ(ps_van_hs_start(&q.ini, 9, &init), PS_ERR_BAD_STATE);
    ps_van_hs_action_t hello{};
    EXPECT_EQ(q.to_resp(hello), PS_VAN_HS_REFUSE); // its hello, first
    EXPECT_EQ(q.to_ini(hello), PS_VAN_HS_PASS);
    ps_van_hs_action_t chal{};
    chal.send = PS_VAN_HS_CHALLENGE;
    EXPECT_EQ(q.to_ini(chal), PS_VAN_HS_PROTOCOL);
    Pair r(nullptr, "s3cret");
    EXPECT_EQ(r.to_ini(refused), PS_VAN_HS_FAIL);
    EXPECT_EQ(std::string(r.a.why), "refused us: wrong or missing PS_JOB_SECRET");

    // Neither has one: everything passes, any id may be claimed.
    Pair n(nullptr, nullptr);
    EXPECT_EQ(n.to_resp(hello), PS_VAN_HS_PASS);
    EXPECT_EQ(n.to_ini(hello), PS_VAN_HS_PASS);
    EXPECT_TRUE(ps_van_hs_claim_ok(&n.resp, 5));
    EXPECT_EQ(n.to_resp(chal), PS_VAN_HS_PROTOCOL);
}

TEST(Handshake, ClosedDuringTheHandshake)
{
    Pair p("s3cret", "s3cret");
    ps_van_hs_action_t act;
    ps_van_hs_closed(&p.ini, &act);
    EXPECT_EQ(act.verdict, PS_VAN_HS_PASS); // not started
    p.init();
    ps_van_hs_closed(&p.ini, &act);
    EXPECT_EQ(act.verdict, PS_VAN_HS_FAIL);
    EXPECT_NE(std::string(act.why).find("closed the connection during the job-secret handshake"),
              std::string::npos);
    EXPECT_EQ(p.ini.state, PS_VAN_HS_FAILED);
    // Waiting for the verdict too; not once done, nor on the responder.
    Pair q("s3cret", "other");
    q.proof();
    ps_van_hs_closed(&q.ini, &act);
    EXPECT_EQ(act.verdict, PS_VAN_HS_FAIL);
    ps_van_hs_closed(&q.resp, &act);
    EXPECT_EQ(act.verdict, PS_VAN_HS_PASS);
    Pair d("s3cret", "s3cret");
    d.proof();
    ps_van_hs_closed(&d.ini, &act);
    EXPECT_EQ(act.verdict, PS_VAN_HS_PASS);
}

TEST(Handshake, StartIsTheInitiatorsOnly)
{
    Pair p("s3cret", "s3cret");
    ps_van_hs_action_t act;
    EXPECT_EQ(ps_van_hs_start(&p.resp, 1, &act), PS_ERR_BAD_STATE);
    EXPECT_EQ(act.send, PS_VAN_HS_OTHER);
}

} // namespace

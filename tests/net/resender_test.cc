// The resender on its own, with a fake clock: what is remembered until
// acknowledged, the resend schedule and the retry budget, de-duplication
// and its bounded memory, forgetting a peer, and the references it holds.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/base/buffer.h"
#include "ps/net/message.h"
#include "ps/net/resender_internal.h"
}

namespace {

constexpr uint64_t kTimeout = 1000; // ns, on the fake clock

struct Released {
    int count = 0;
};

void on_release(void *data, size_t length, void *arg)
{
    (void)data;
    (void)length;
    static_cast<Released *>(arg)->count++;
}

// A data message from `sender` to `recver` whose one segment wraps `bytes`
// (released into `rel` when the last reference goes).
ps_msg_t make_msg(int sender, int recver, int ts, bool request, std::vector<uint8_t> *bytes,
                  Released *rel, const char *body = nullptr)
{
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.sender = sender;
    msg.meta.recver = recver;
    msg.meta.app_id = 3;
    msg.meta.customer_id = 4;
    msg.meta.timestamp = ts;
    msg.meta.request = request;
    if (body != nullptr) {
        msg.meta.body = reinterpret_cast<const uint8_t *>(body);
        msg.meta.body_len = strlen(body);
    }
    ps_slice_t s;
    EXPECT_EQ(PS_OK, ps_slice_wrap(bytes->data(), bytes->size(), on_release, rel, &s));
    EXPECT_EQ(PS_OK, ps_msg_add_data(&msg, &s, PS_DATA_UINT8));
    ps_slice_unref(&s);
    return msg;
}

// The ACK `recver` sends back for msg.
ps_meta_t ack_for(const ps_msg_t &msg)
{
    ps_meta_t ack;
    ps_meta_init(&ack);
    ack.sender = msg.meta.recver;
    ack.app_id = msg.meta.app_id;
    ack.customer_id = msg.meta.customer_id;
    ack.timestamp = msg.meta.timestamp;
    ack.request = msg.meta.request;
    ack.control.cmd = PS_CTRL_ACK;
    return ack;
}

struct Calls {
    std::vector<ps_meta_t> resent;
    std::vector<std::string> resent_bodies;
    std::vector<std::vector<uint8_t>> resent_data;
    std::vector<int> gave_up_ts;
    std::vector<int> gave_up_retries;
};

ps_status_t resend_cb(void *arg, ps_msg_t *msg)
{
    auto *c = static_cast<Calls *>(arg);
    c->resent.push_back(msg->meta);
    c->resent_bodies.emplace_back(reinterpret_cast<const char *>(msg->meta.body),
                                  msg->meta.body_len);
    auto *p = static_cast<uint8_t *>(ps_slice_ptr(&msg->data[0]));
    c->resent_data.emplace_back(p, p + msg->data[0].len);
    return PS_OK;
}

void giveup_cb(void *arg, const ps_msg_t *msg, int retries)
{
    auto *c = static_cast<Calls *>(arg);
    c->gave_up_ts.push_back(msg->meta.timestamp);
    c->gave_up_retries.push_back(retries);
}

TEST(Resender, AcknowledgedMessagesAreForgotten)
{
    ps__resender_t *r;
    ASSERT_EQ(PS_OK, ps__resender_create(kTimeout, 3, 64, &r));
    std::vector<uint8_t> bytes = {1, 2, 3};
    Released rel;
    ps_msg_t msg = make_msg(9, 8, 5, true, &bytes, &rel);
    int kick = 0;
    ASSERT_EQ(PS_OK, ps__resender_track(r, &msg, 0, &kick));
    EXPECT_EQ(1, kick); // the first message: the timer must plan a poll
    ps_msg_release(&msg);
    EXPECT_EQ(0, rel.count); // the resender still holds the data
    EXPECT_EQ(1u, ps__resender_num_tracked(r));

    // The same key again is refused (the two could not be told apart).
    ps_msg_t again = make_msg(9, 8, 5, true, &bytes, &rel);
    EXPECT_EQ(PS_ERR_EXISTS, ps__resender_track(r, &again, 1, &kick));
    ps_msg_release(&again);
    EXPECT_EQ(1, rel.count);

    // An ACK for another timestamp, request flag or peer matches nothing.
    ps_msg_t probe = make_msg(9, 8, 5, true, &bytes, &rel);
    ps_meta_t ack = ack_for(probe);
    ps_msg_release(&probe);
    ps__msg_key_t key;
    ack.timestamp = 6;
    ps__msg_key_of_ack(&ack, 9, &key);
    EXPECT_EQ(0, ps__resender_on_ack(r, &key));
    ack.timestamp = 5;
    ack.request = false;
    ps__msg_key_of_ack(&ack, 9, &key);
    EXPECT_EQ(0, ps__resender_on_ack(r, &key));
    ack.request = true;
    ack.sender = 10;
    ps__msg_key_of_ack(&ack, 9, &key);
    EXPECT_EQ(0, ps__resender_on_ack(r, &key));
    ack.sender = 8;
    ps__msg_key_of_ack(&ack, 9, &key);
    EXPECT_EQ(1, ps__resender_on_ack(r, &key));
    EXPECT_EQ(0, ps__resender_on_ack(r, &key));
    EXPECT_EQ(0u, ps__resender_num_tracked(r));
    EXPECT_EQ(3, rel.count); // every reference is gone

    Calls calls;
    EXPECT_EQ(0u, ps__resender_poll(r, 100 * kTimeout, resend_cb, giveup_cb, &calls));
    EXPECT_TRUE(calls.resent.empty());
    ps__resender_destroy(r);
}

TEST(Resender, ResendScheduleAndRetryBudget)
{
    ps__resender_t *r;
    ASSERT_EQ(PS_OK, ps__resender_create(kTimeout, 3, 64, &r));
    std::vector<uint8_t> bytes = {7, 8, 9, 10};
    Released rel;
    ps_msg_t msg = make_msg(9, 8, 42, true, &bytes, &rel, "hello");
    ASSERT_EQ(PS_OK, ps__resender_track(r, &msg, 0, nullptr));
    ps_msg_release(&msg);

    Calls calls;
    // Resent at 1x, 2x, 3x the timeout after the first send; not before.
    EXPECT_EQ(kTimeout, ps__resender_poll(r, kTimeout - 1, resend_cb, giveup_cb, &calls));
    EXPECT_EQ(0u, calls.resent.size());
    EXPECT_EQ(2 * kTimeout, ps__resender_poll(r, kTimeout, resend_cb, giveup_cb, &calls));
    ASSERT_EQ(1u, calls.resent.size());
    EXPECT_EQ(42, calls.resent[0].timestamp);
    EXPECT_EQ(8, calls.resent[0].recver);
    EXPECT_EQ("hello", calls.resent_bodies[0]);
    EXPECT_EQ(bytes, calls.resent_data[0]);
    EXPECT_EQ(2 * kTimeout, ps__resender_poll(r, 2 * kTimeout - 1, resend_cb, giveup_cb, &calls));
    EXPECT_EQ(1u, calls.resent.size());
    EXPECT_EQ(3 * kTimeout, ps__resender_poll(r, 2 * kTimeout, resend_cb, giveup_cb, &calls));
    EXPECT_EQ(4 * kTimeout, ps__resender_poll(r, 3 * kTimeout, resend_cb, giveup_cb, &calls));
    EXPECT_EQ(3u, calls.resent.size());
    EXPECT_EQ(3u, ps__resender_num_resent(r));
    EXPECT_TRUE(calls.gave_up_ts.empty());
    // The budget is spent: given up (not aborted), and forgotten.
    EXPECT_EQ(0u, ps__resender_poll(r, 4 * kTimeout, resend_cb, giveup_cb, &calls));
    ASSERT_EQ(1u, calls.gave_up_ts.size());
    EXPECT_EQ(42, calls.gave_up_ts[0]);
    EXPECT_EQ(3, calls.gave_up_retries[0]);
    EXPECT_EQ(0u, ps__resender_num_tracked(r));
    EXPECT_EQ(1, rel.count);
    ps__resender_destroy(r);
}

TEST(Resender, KickWhenDueBeforeThePlannedPoll)
{
    ps__resender_t *r;
    ASSERT_EQ(PS_OK, ps__resender_create(kTimeout, 5, 64, &r));
    std::vector<uint8_t> bytes = {1};
    Released rel;
    int kick = -1;
    ps_msg_t a = make_msg(9, 8, 1, true, &bytes, &rel);
    ASSERT_EQ(PS_OK, ps__resender_track(r, &a, 0, &kick));
    EXPECT_EQ(1, kick);
    ps_msg_t b = make_msg(9, 8, 2, true, &bytes, &rel);
    ASSERT_EQ(PS_OK, ps__resender_track(r, &b, 10, &kick));
    EXPECT_EQ(0, kick); // due after a's, which is planned already
    Calls calls;
    // Both resent; a's next is at 2x, b's at 10 + 2x.
    EXPECT_EQ(2 * kTimeout, ps__resender_poll(r, kTimeout + 10, resend_cb, giveup_cb, &calls));
    // Acknowledge a: the next poll is b's.
    ps_meta_t ack = ack_for(a);
    ps__msg_key_t key;
    ps__msg_key_of_ack(&ack, 9, &key);
    EXPECT_EQ(1, ps__resender_on_ack(r, &key));
    EXPECT_EQ(2 * kTimeout + 10, ps__resender_poll(r, kTimeout + 20, resend_cb, giveup_cb, &calls));
    // A new message due before that asks for an earlier poll.
    ps_msg_t c = make_msg(9, 10, 3, true, &bytes, &rel);
    ASSERT_EQ(PS_OK, ps__resender_track(r, &c, kTimeout + 30, &kick));
    EXPECT_EQ(0, kick); // 2x + 30 is after 2x + 10
    ps_msg_t d = make_msg(9, 10, 4, true, &bytes, &rel);
    ASSERT_EQ(PS_OK, ps__resender_track(r, &d, kTimeout / 2, &kick));
    EXPECT_EQ(1, kick);
    for (ps_msg_t *m : {&a, &b, &c, &d})
        ps_msg_release(m);
    ps__resender_destroy(r);
    EXPECT_EQ(4, rel.count);
}

TEST(Resender, DuplicatesAreRecognisedByTheirWholeKey)
{
    ps__resender_t *r;
    ASSERT_EQ(PS_OK, ps__resender_create(kTimeout, 3, 1024, &r));
    ps_meta_t m;
    ps_meta_init(&m);
    m.sender = 9;
    m.recver = 8;
    m.app_id = 0;
    m.customer_id = 0;
    m.timestamp = 17;
    m.request = true;
    EXPECT_EQ(0, ps__resender_seen(r, &m, 0));
    EXPECT_EQ(1, ps__resender_seen(r, &m, 1));
    EXPECT_EQ(1, ps__resender_seen(r, &m, 2));
    // Any field differs: another message.
    ps_meta_t other = m;
    other.request = false; // the response to it, say
    EXPECT_EQ(0, ps__resender_seen(r, &other, 3));
    other = m;
    other.sender = 11;
    EXPECT_EQ(0, ps__resender_seen(r, &other, 3));
    other = m;
    other.customer_id = 1;
    EXPECT_EQ(0, ps__resender_seen(r, &other, 3));
    other = m;
    other.app_id = 2;
    EXPECT_EQ(0, ps__resender_seen(r, &other, 3));
    other = m;
    other.timestamp = 18;
    EXPECT_EQ(0, ps__resender_seen(r, &other, 3));
    EXPECT_EQ(2u, ps__resender_num_duplicates(r));
    EXPECT_EQ(6u, ps__resender_num_keys(r));

    // Once no copy can still come (the whole schedule plus the margin),
    // the key is forgotten.
    uint64_t keep = kTimeout * 4 + PS__RESEND_DEDUP_MARGIN_NS;
    EXPECT_EQ(1, ps__resender_seen(r, &m, keep - 1));
    EXPECT_EQ(0, ps__resender_seen(r, &m, keep + 10));
    EXPECT_EQ(1u, ps__resender_num_keys(r));
    ps__resender_destroy(r);
}

TEST(Resender, DedupMemoryIsBounded)
{
    ps__resender_t *r;
    ASSERT_EQ(PS_OK, ps__resender_create(kTimeout, 3, 100, &r)); // rounded down to 64
    ps_meta_t m;
    ps_meta_init(&m);
    m.sender = 9;
    m.recver = 8;
    m.request = true;
    for (int ts = 0; ts < 1000; ts++) {
        m.timestamp = ts;
        ASSERT_EQ(0, ps__resender_seen(r, &m, 5));
        ASSERT_LE(ps__resender_num_keys(r), 64u);
    }
    EXPECT_EQ(64u, ps__resender_num_keys(r));
    // The most recent are remembered, the oldest went first.
    m.timestamp = 999;
    EXPECT_EQ(1, ps__resender_seen(r, &m, 6));
    m.timestamp = 936;
    EXPECT_EQ(1, ps__resender_seen(r, &m, 6));
    m.timestamp = 935;
    EXPECT_EQ(0, ps__resender_seen(r, &m, 6));
    ps__resender_destroy(r);
}

TEST(Resender, ForgettingAPeer)
{
    ps__resender_t *r;
    ASSERT_EQ(PS_OK, ps__resender_create(kTimeout, 3, 1024, &r));
    std::vector<uint8_t> bytes = {1, 2};
    Released rel;
    ps_msg_t to8 = make_msg(9, 8, 1, true, &bytes, &rel);
    ps_msg_t to10 = make_msg(9, 10, 1, true, &bytes, &rel);
    ASSERT_EQ(PS_OK, ps__resender_track(r, &to8, 0, nullptr));
    ASSERT_EQ(PS_OK, ps__resender_track(r, &to10, 0, nullptr));
    ps_meta_t from8 = to8.meta;
    from8.sender = 8;
    from8.recver = 9;
    from8.request = false;
    ps_meta_t from10 = from8;
    from10.sender = 10;
    EXPECT_EQ(0, ps__resender_seen(r, &from8, 0));
    EXPECT_EQ(0, ps__resender_seen(r, &from10, 0));

    ps__resender_forget_peer(r, 8);
    EXPECT_EQ(1u, ps__resender_num_tracked(r));
    EXPECT_EQ(1u, ps__resender_num_keys(r));
    // A new process with node 8's id starts its timestamps afresh.
    EXPECT_EQ(0, ps__resender_seen(r, &from8, 1));
    EXPECT_EQ(1, ps__resender_seen(r, &from10, 1));
    Calls calls;
    ps__resender_poll(r, kTimeout, resend_cb, giveup_cb, &calls);
    ASSERT_EQ(1u, calls.resent.size());
    EXPECT_EQ(10, calls.resent[0].recver);
    ps_msg_release(&to8);
    ps_msg_release(&to10);
    ps__resender_destroy(r);
    EXPECT_EQ(2, rel.count);
}

TEST(Resender, BadArguments)
{
    ps__resender_t *r = nullptr;
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__resender_create(0, 3, 64, &r));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__resender_create(kTimeout, -1, 64, &r));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__resender_create(kTimeout, 3, 8, &r));
    EXPECT_EQ(nullptr, r);
    ps__resender_destroy(nullptr);
}

} // namespace

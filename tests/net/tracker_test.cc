// Unit tests of the request tracker behind ps_customer_t.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

extern "C" {
#include "ps/net/tracker_internal.h"
}

namespace {

struct DoneLog {
    std::atomic<int> calls{0};
    std::atomic<int> last_ts{-1};
    std::atomic<int> last_status{1};
    std::atomic<intptr_t> last_ctx{0};
};

void record_done(void *arg, int ts, void *ctx, ps_status_t status)
{
    auto *log = static_cast<DoneLog *>(arg);
    log->last_ts = ts;
    log->last_status = status;
    log->last_ctx = reinterpret_cast<intptr_t>(ctx);
    log->calls++;
}

class TrackerTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_EQ(PS_OK, ps__tracker_create(0, &t_));
        ps__tracker_set_done_func(t_, record_done, &log_);
    }
    void TearDown() override { ps__tracker_destroy(t_); }

    ps__tracker_t *t_ = nullptr;
    DoneLog log_;
};

TEST_F(TrackerTest, TimestampsAreDenseFromZero)
{
    for (int i = 0; i < 5; i++) {
        int ts = -1;
        ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts));
        EXPECT_EQ(i, ts);
    }
}

TEST_F(TrackerTest, CompletesAfterExpectedResponses)
{
    int peers[] = {8, 10, 12};
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 3, peers, 3, reinterpret_cast<void *>(42), &ts));
    EXPECT_EQ(0, ps__tracker_num_responses(t_, ts));
    EXPECT_EQ(0, ps__tracker_add_response(t_, ts, 1));
    EXPECT_EQ(0, ps__tracker_add_response(t_, ts, 1));
    EXPECT_EQ(2, ps__tracker_num_responses(t_, ts));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_wait(t_, ts, 0));
    EXPECT_EQ(0, log_.calls.load());
    EXPECT_EQ(1, ps__tracker_add_response(t_, ts, 1));
    EXPECT_EQ(1, log_.calls.load());
    EXPECT_EQ(ts, log_.last_ts.load());
    EXPECT_EQ(PS_OK, log_.last_status.load());
    EXPECT_EQ(42, log_.last_ctx.load());
    EXPECT_EQ(PS_OK, ps__tracker_wait(t_, ts, 0));
    // A late response to a completed request changes nothing.
    EXPECT_EQ(0, ps__tracker_add_response(t_, ts, 1));
    EXPECT_EQ(1, log_.calls.load());
}

TEST_F(TrackerTest, WaitingTwiceAndLateIsOk)
{
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts));
    EXPECT_EQ(1, ps__tracker_add_response(t_, ts, 1));
    EXPECT_EQ(PS_OK, ps__tracker_wait(t_, ts, 0));
    EXPECT_EQ(PS_OK, ps__tracker_wait(t_, ts, 0));
    // After many more requests, the old ts still reads as done.
    for (int i = 0; i < 10000; i++) {
        int t2;
        ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &t2));
        ASSERT_EQ(1, ps__tracker_add_response(t_, t2, 1));
    }
    EXPECT_EQ(PS_OK, ps__tracker_wait(t_, ts, 0));
}

TEST_F(TrackerTest, NeverIssuedIsInvalid)
{
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_wait(t_, 0, 0));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_wait(t_, -3, 0));
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_wait(t_, ts + 1, 0));
    EXPECT_EQ(-1, ps__tracker_num_responses(t_, ts + 1));
}

// The busy-poll check answers as wait(ts, 0) does, whatever completed
// between two calls (this request, another one, a failure, an eviction).
TEST_F(TrackerTest, PollAnswersAsAZeroWait)
{
    uint64_t seen = PS__TRACKER_POLL_START;
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_poll(t_, 0, &seen));
    int a, b, c;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, nullptr, 0, nullptr, &a));
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &b));
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &c));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_poll(t_, c + 1, &seen));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, a, &seen));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, a, &seen));
    // A response that does not complete it, then another request's end.
    EXPECT_EQ(0, ps__tracker_add_response(t_, a, 1));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, a, &seen));
    EXPECT_EQ(1, ps__tracker_add_response(t_, b, 1));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, a, &seen));
    EXPECT_EQ(1, ps__tracker_add_response(t_, a, 1));
    EXPECT_EQ(PS_OK, ps__tracker_poll(t_, a, &seen));
    EXPECT_EQ(PS_OK, ps__tracker_poll(t_, a, &seen));

    // A failure is seen by a waiter that last found the request open.
    uint64_t seen_c = PS__TRACKER_POLL_START;
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, c, &seen_c));
    EXPECT_EQ(1, ps__tracker_fail(t_, c, PS_ERR_PROTOCOL));
    EXPECT_EQ(PS_ERR_PROTOCOL, ps__tracker_poll(t_, c, &seen_c));
    EXPECT_EQ(ps__tracker_wait(t_, c, 0), ps__tracker_poll(t_, c, &seen_c));

    // Close fails what is open; the poll sees it like wait.
    int d;
    uint64_t seen_d = PS__TRACKER_POLL_START;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &d));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, d, &seen_d));
    EXPECT_EQ(1, ps__tracker_close(t_, PS_ERR_SHUTDOWN));
    EXPECT_EQ(PS_ERR_SHUTDOWN, ps__tracker_poll(t_, d, &seen_d));
}

// A waiter polling from another thread sees the completion.
TEST_F(TrackerTest, PollSeesACompletionOnAnotherThread)
{
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts));
    std::atomic<int> result{PS_INPROGRESS};
    std::thread waiter([&] {
        uint64_t seen = PS__TRACKER_POLL_START;
        ps_status_t st;
        while ((st = ps__tracker_poll(t_, ts, &seen)) == PS_ERR_TIMED_OUT)
            std::this_thread::yield();
        result = st;
    });
    EXPECT_EQ(1, ps__tracker_add_response(t_, ts, 1));
    waiter.join();
    EXPECT_EQ(PS_OK, result.load());
}

// The request that completed last is answered without the lock; its
// timestamp, issued again after the wrap, is not "done" any more.
TEST_F(TrackerTest, PollKnowsTheLastSuccessUntilItsTimestampComesBack)
{
    int a, b;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &a));
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &b));
    uint64_t seen = PS__TRACKER_POLL_START;
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, a, &seen));
    EXPECT_EQ(1, ps__tracker_add_response(t_, a, 1));
    EXPECT_EQ(PS_OK, ps__tracker_poll(t_, a, &seen));
    uint64_t seen_b = PS__TRACKER_POLL_START;
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, b, &seen_b));

    // Past the wrap, a's timestamp is the first free one again.
    ps__tracker_skip_to(t_, 0x80000000ull);
    int again;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &again));
    ASSERT_EQ(a, again);
    uint64_t seen_again = PS__TRACKER_POLL_START;
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, again, &seen_again));
    // (b, still open, was skipped over.)
    int next;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &next));
    EXPECT_NE(b, next);
    EXPECT_EQ(1, ps__tracker_add_response(t_, next, 1));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_poll(t_, again, &seen_again));
    EXPECT_EQ(1, ps__tracker_add_response(t_, again, 1));
    EXPECT_EQ(PS_OK, ps__tracker_poll(t_, again, &seen_again));
}

// A quiet count publishes the completion itself: waiters see it, the done
// function is left to the caller (it still runs for failures).
TEST_F(TrackerTest, QuietCountCompletesWithoutTheDoneFunction)
{
    int ts, failed;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, nullptr, 0, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, nullptr, 0, nullptr, &failed));
    EXPECT_EQ(0, ps__tracker_add_response_quiet(t_, ts, 1));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_wait(t_, ts, 0));
    EXPECT_EQ(1, ps__tracker_add_response_quiet(t_, ts, 1));
    EXPECT_EQ(0, ps__tracker_add_response_quiet(t_, ts, 1));
    EXPECT_EQ(0, log_.calls.load());
    EXPECT_EQ(PS_OK, ps__tracker_wait(t_, ts, 0));
    uint64_t seen = PS__TRACKER_POLL_START;
    EXPECT_EQ(PS_OK, ps__tracker_poll(t_, ts, &seen));
    EXPECT_EQ(1u, ps__tracker_num_outstanding(t_)); // `failed`
    EXPECT_EQ(0, ps__tracker_add_response_quiet(t_, failed, 1));
    EXPECT_EQ(1, ps__tracker_fail(t_, failed, PS_ERR_PROTOCOL));
    EXPECT_EQ(1, log_.calls.load());
    EXPECT_EQ(failed, log_.last_ts.load());
    EXPECT_EQ(0, ps__tracker_add_response_quiet(t_, failed, 1));
    EXPECT_EQ(PS_ERR_PROTOCOL, ps__tracker_wait(t_, failed, 0));
}

ps_status_t count_claim(void *ctx, void *arg)
{
    static_cast<std::atomic<int> *>(arg)->fetch_add(1);
    return ctx == nullptr ? PS_ERR_PROTOCOL : PS_OK;
}

// Claims reach an open request's ctx and return what the function said;
// nothing is called once the request ended.
TEST_F(TrackerTest, ClaimOnlyWhileOpen)
{
    std::atomic<int> calls{0};
    int ts, bare;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, nullptr, 0, &log_, &ts));
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &bare));
    EXPECT_EQ(PS_OK, ps__tracker_claim(t_, ts, count_claim, &calls));
    EXPECT_EQ(PS_ERR_PROTOCOL, ps__tracker_claim(t_, bare, count_claim, &calls));
    EXPECT_EQ(2, calls.load());
    EXPECT_EQ(0, ps__tracker_add_response(t_, ts, 1));
    EXPECT_EQ(PS_OK, ps__tracker_claim(t_, ts, count_claim, &calls));
    EXPECT_EQ(1, ps__tracker_add_response(t_, ts, 1));
    EXPECT_EQ(1, ps__tracker_fail(t_, bare, PS_ERR_PEER_GONE));
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps__tracker_claim(t_, ts, count_claim, &calls));
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps__tracker_claim(t_, bare, count_claim, &calls));
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps__tracker_claim(t_, bare + 1, count_claim, &calls));
    EXPECT_EQ(3, calls.load());
}

struct ClaimInDone {
    ps__tracker_t *t;
    std::atomic<int> calls{0};
    std::atomic<int> seen{PS_INPROGRESS};
};

// From the done function (completion decided, not yet published) a claim
// finds the request closed: no response can take a reference any more.
TEST(TrackerClaim, ClosedOnceTheCompletionIsDecided)
{
    ps__tracker_t *t;
    ASSERT_EQ(PS_OK, ps__tracker_create(0, &t));
    ClaimInDone d;
    d.t = t;
    ps__tracker_set_done_func(
        t,
        [](void *arg, int ts, void *, ps_status_t) {
            auto *d = static_cast<ClaimInDone *>(arg);
            d->seen = ps__tracker_claim(d->t, ts, count_claim, &d->calls);
        },
        &d);
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t, 1, nullptr, 0, &d, &ts));
    EXPECT_EQ(1, ps__tracker_add_response(t, ts, 1));
    EXPECT_EQ(PS_ERR_NOT_FOUND, d.seen.load());
    EXPECT_EQ(0, d.calls.load());
    ps__tracker_destroy(t);
}

TEST_F(TrackerTest, RejectsBadArguments)
{
    int ts;
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_new(t_, 0, nullptr, 0, nullptr, &ts));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_new(t_, 1, nullptr, 2, nullptr, &ts));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps__tracker_new(t_, 1, nullptr, 0, nullptr, nullptr));
}

TEST_F(TrackerTest, CallbackOnlyRequestsUseNoMemory)
{
    // Requests nobody waits for: once complete they leave no record.
    for (int i = 0; i < 100000; i++) {
        int ts;
        ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, nullptr, 0, nullptr, &ts));
        ps__tracker_add_response(t_, ts, 1);
        ps__tracker_add_response(t_, ts, 1);
    }
    EXPECT_EQ(0u, ps__tracker_num_records(t_));
    EXPECT_EQ(0u, ps__tracker_num_outstanding(t_));
    EXPECT_EQ(100000, log_.calls.load());
}

TEST_F(TrackerTest, FailuresAreRememberedBoundedly)
{
    int first;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &first));
    EXPECT_EQ(1, ps__tracker_fail(t_, first, PS_ERR_PROTOCOL));
    EXPECT_EQ(0, ps__tracker_fail(t_, first, PS_ERR_PROTOCOL)); // once
    EXPECT_EQ(PS_ERR_PROTOCOL, ps__tracker_wait(t_, first, 0));
    EXPECT_EQ(PS_ERR_PROTOCOL, ps__tracker_wait(t_, first, 0)); // and again
    EXPECT_EQ(0, ps__tracker_add_response(t_, first, 1));        // late response: ignored
    for (int i = 0; i < PS__TRACKER_FAILED_KEEP * 2; i++) {
        int ts;
        ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts));
        ps__tracker_fail(t_, ts, PS_ERR_PEER_GONE);
    }
    EXPECT_EQ(static_cast<size_t>(PS__TRACKER_FAILED_KEEP), ps__tracker_num_records(t_));
    // The first failure was forgotten: the documented rule reads it as OK.
    EXPECT_EQ(PS_OK, ps__tracker_wait(t_, first, 0));
}

TEST_F(TrackerTest, FailMakesPositiveStatusAnError)
{
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts));
    ps__tracker_fail(t_, ts, PS_OK);
    EXPECT_LT(ps__tracker_wait(t_, ts, 0), 0);
}

TEST_F(TrackerTest, FailPeerFailsOnlyItsRequests)
{
    int a_peers[] = {8, 10};
    int b_peers[] = {10};
    int c_peers[] = {12};
    int a, b, c;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, a_peers, 2, nullptr, &a));
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, b_peers, 1, nullptr, &b));
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, c_peers, 1, nullptr, &c));
    ps__tracker_add_response(t_, a, 1);
    EXPECT_EQ(2, ps__tracker_fail_peer(t_, 10, PS_ERR_PEER_GONE, 0));
    EXPECT_EQ(PS_ERR_PEER_GONE, ps__tracker_wait(t_, a, 0));
    EXPECT_EQ(PS_ERR_PEER_GONE, ps__tracker_wait(t_, b, 0));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_wait(t_, c, 0));
    EXPECT_EQ(2, log_.calls.load());
    // Not marked dead: new requests to it are allowed.
    int d;
    EXPECT_EQ(PS_OK, ps__tracker_new(t_, 1, b_peers, 1, nullptr, &d));
}

TEST_F(TrackerTest, DeadPeerRefusesNewRequests)
{
    int peers[] = {8, 10};
    ps__tracker_fail_peer(t_, 10, PS_ERR_PEER_GONE, 1);
    int ts = -7;
    EXPECT_EQ(PS_ERR_PEER_GONE, ps__tracker_new(t_, 2, peers, 2, nullptr, &ts));
    EXPECT_EQ(-7, ts); // out-parameter untouched
    EXPECT_EQ(PS_OK, ps__tracker_new(t_, 1, peers, 1, nullptr, &ts));
}

TEST_F(TrackerTest, RevivedPeerAcceptsNewRequestsAgain)
{
    // A new process took the dead node's id over (recovery).
    int peers[] = {8, 10};
    int old_ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, peers, 2, nullptr, &old_ts));
    ps__tracker_fail_peer(t_, 10, PS_ERR_PEER_GONE, 1);
    ps__tracker_fail_peer(t_, 12, PS_ERR_PEER_GONE, 1);
    int ts;
    EXPECT_EQ(PS_ERR_PEER_GONE, ps__tracker_new(t_, 2, peers, 2, nullptr, &ts));
    ps__tracker_revive_peer(t_, 10);
    ps__tracker_revive_peer(t_, 14); // never dead: nothing changes
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 2, peers, 2, nullptr, &ts));
    EXPECT_EQ(PS_OK, (ps__tracker_add_response(t_, ts, 2), ps__tracker_wait(t_, ts, 0)));
    // What failed stays failed; other dead peers stay dead.
    EXPECT_EQ(PS_ERR_PEER_GONE, ps__tracker_wait(t_, old_ts, 0));
    int p12[] = {12};
    EXPECT_EQ(PS_ERR_PEER_GONE, ps__tracker_new(t_, 1, p12, 1, nullptr, &ts));
}

TEST_F(TrackerTest, CloseFailsEverythingAndRefuses)
{
    std::vector<int> ts(200);
    for (auto &t : ts)
        ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &t));
    EXPECT_EQ(200, ps__tracker_close(t_, PS_ERR_SHUTDOWN));
    for (int t : ts)
        EXPECT_EQ(PS_ERR_SHUTDOWN, ps__tracker_wait(t_, t, 0));
    EXPECT_EQ(200, log_.calls.load());
    int x;
    EXPECT_EQ(PS_ERR_SHUTDOWN, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &x));
    EXPECT_EQ(0u, ps__tracker_num_outstanding(t_));
}

TEST_F(TrackerTest, ManyPeersOnTheHeap)
{
    std::vector<int> peers;
    for (int i = 0; i < 40; i++)
        peers.push_back(8 + 2 * i);
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 40, peers.data(), 40, nullptr, &ts));
    EXPECT_EQ(1, ps__tracker_fail_peer(t_, 8 + 2 * 39, PS_ERR_LINK_FAILED, 0));
    EXPECT_EQ(PS_ERR_LINK_FAILED, ps__tracker_wait(t_, ts, 0));
    // Recycled record with few peers afterwards.
    int small[] = {8};
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, small, 1, nullptr, &ts));
    EXPECT_EQ(1, ps__tracker_add_response(t_, ts, 1));
}

TEST_F(TrackerTest, CtxOnlyWhileOutstanding)
{
    int ts;
    void *ctx = nullptr;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, &log_, &ts));
    ASSERT_EQ(PS_OK, ps__tracker_ctx(t_, ts, &ctx));
    EXPECT_EQ(&log_, ctx);
    ps__tracker_add_response(t_, ts, 1);
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps__tracker_ctx(t_, ts, &ctx));
}

TEST_F(TrackerTest, OldOutstandingRequestSurvivesGrowth)
{
    int stuck;
    ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &stuck));
    for (int i = 0; i < 50000; i++) {
        int ts;
        ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts));
        ASSERT_EQ(1, ps__tracker_add_response(t_, ts, 1));
    }
    EXPECT_EQ(1u, ps__tracker_num_records(t_));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps__tracker_wait(t_, stuck, 0));
    EXPECT_EQ(1, ps__tracker_add_response(t_, stuck, 1));
    EXPECT_EQ(PS_OK, ps__tracker_wait(t_, stuck, 0));
}

TEST_F(TrackerTest, ManyOutstandingThenCompletedInAnyOrder)
{
    const int n = 5000;
    std::vector<int> ts(n);
    for (int i = 0; i < n; i++)
        ASSERT_EQ(PS_OK, ps__tracker_new(t_, 1, nullptr, 0, nullptr, &ts[i]));
    // Complete odd ones, then even ones backwards: exercises deletion.
    for (int i = 1; i < n; i += 2)
        ASSERT_EQ(1, ps__tracker_add_response(t_, ts[i], 1));
    for (int i = n - 2; i >= 0; i -= 2) {
        ASSERT_EQ(PS_ERR_TIMED_OUT, ps__tracker_wait(t_, ts[i], 0)) << i;
        ASSERT_EQ(1, ps__tracker_add_response(t_, ts[i], 1));
    }
    EXPECT_EQ(0u, ps__tracker_num_records(t_));
    for (int i = 0; i < n; i++)
        ASSERT_EQ(PS_OK, ps__tracker_wait(t_, ts[i], 0));
}

void concurrent_round_trips(ps__tracker_t *t, int rounds)
{
    // A "van" thread answers every request; the main thread waits on each.
    std::atomic<int> issued{-1};
    std::atomic<bool> stop{false};
    std::thread responder([&] {
        int next = 0;
        while (!stop.load()) {
            if (issued.load() >= next) {
                ps__tracker_add_response(t, next, 1);
                next++;
            } else {
                std::this_thread::yield();
            }
        }
    });
    for (int i = 0; i < rounds; i++) {
        int ts;
        ASSERT_EQ(PS_OK, ps__tracker_new(t, 1, nullptr, 0, nullptr, &ts));
        ASSERT_EQ(i, ts);
        issued.store(ts);
        ASSERT_EQ(PS_OK, ps__tracker_wait(t, ts, 10000));
    }
    stop = true;
    responder.join();
}

TEST(TrackerConcurrency, SleepingWaiter)
{
    ps__tracker_t *t;
    ASSERT_EQ(PS_OK, ps__tracker_create(0, &t));
    concurrent_round_trips(t, 2000);
    ps__tracker_destroy(t);
}

TEST(TrackerConcurrency, SpinningWaiter)
{
    ps__tracker_t *t;
    ASSERT_EQ(PS_OK, ps__tracker_create(2000000, &t));
    concurrent_round_trips(t, 2000);
    ps__tracker_destroy(t);
}

TEST(TrackerConcurrency, FailPeerRacesWithNewRequests)
{
    // However new_request and a peer's death interleave, no request to the
    // dead peer stays outstanding.
    for (int iter = 0; iter < 20; iter++) {
        ps__tracker_t *t;
        ASSERT_EQ(PS_OK, ps__tracker_create(0, &t));
        std::atomic<bool> go{false};
        std::vector<int> made;
        std::thread maker([&] {
            int peers[] = {8};
            while (!go.load())
                std::this_thread::yield();
            for (int i = 0; i < 500; i++) {
                int ts;
                if (ps__tracker_new(t, 1, peers, 1, nullptr, &ts) == PS_OK)
                    made.push_back(ts);
            }
        });
        go = true;
        ps__tracker_fail_peer(t, 8, PS_ERR_PEER_GONE, 1);
        maker.join();
        EXPECT_EQ(0u, ps__tracker_num_outstanding(t));
        for (int ts : made)
            EXPECT_EQ(PS_ERR_PEER_GONE, ps__tracker_wait(t, ts, 0));
        ps__tracker_destroy(t);
    }
}

TEST(TrackerConcurrency, DoneFunctionMayIssueRequests)
{
    // The done function runs without the lock: it may call back in.
    struct Ctx {
        ps__tracker_t *t;
        std::atomic<int> chained{0};
    } ctx;
    ASSERT_EQ(PS_OK, ps__tracker_create(0, &ctx.t));
    ps__tracker_set_done_func(
        ctx.t,
        [](void *arg, int ts, void *, ps_status_t) {
            auto *c = static_cast<Ctx *>(arg);
            if (c->chained.fetch_add(1) < 10) {
                int next;
                ASSERT_EQ(PS_OK, ps__tracker_new(c->t, 1, nullptr, 0, nullptr, &next));
                ASSERT_EQ(ts + 1, next);
                ps__tracker_add_response(c->t, next, 1);
            }
        },
        &ctx);
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(ctx.t, 1, nullptr, 0, nullptr, &ts));
    ps__tracker_add_response(ctx.t, ts, 1);
    EXPECT_EQ(11, ctx.chained.load());
    ps__tracker_destroy(ctx.t);
}

TEST(TrackerConcurrency, WaiterWokenByFailure)
{
    ps__tracker_t *t;
    ASSERT_EQ(PS_OK, ps__tracker_create(0, &t));
    int peers[] = {9};
    int ts;
    ASSERT_EQ(PS_OK, ps__tracker_new(t, 1, peers, 1, nullptr, &ts));
    std::atomic<int> result{1};
    std::thread waiter([&] { result = ps__tracker_wait(t, ts, -1); });
    ps__tracker_fail_peer(t, 9, PS_ERR_PEER_GONE, 1);
    waiter.join();
    EXPECT_EQ(PS_ERR_PEER_GONE, result.load());
    ps__tracker_destroy(t);
}

} // namespace

namespace {

TEST(TrackerOrdering, DoneFunctionRunsBeforeTheWaiterWakes)
{
    // The done function "copies the value"; a waiter must see it done.
    struct Ctx {
        std::atomic<int> copied{0};
    } ctx;
    ps__tracker_t *t;
    ASSERT_EQ(PS_OK, ps__tracker_create(0, &t));
    ps__tracker_set_done_func(
        t,
        [](void *arg, int, void *, ps_status_t) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            static_cast<Ctx *>(arg)->copied.fetch_add(1);
        },
        &ctx);
    for (int i = 0; i < 20; i++) {
        int ts;
        ASSERT_EQ(PS_OK, ps__tracker_new(t, 1, nullptr, 0, nullptr, &ts));
        std::thread responder([&] {
            if (i % 2)
                ps__tracker_add_response(t, ts, 1);
            else
                ps__tracker_fail(t, ts, PS_ERR_PEER_GONE);
        });
        ps_status_t st = ps__tracker_wait(t, ts, -1);
        EXPECT_EQ(i + 1, ctx.copied.load());
        EXPECT_EQ(i % 2 ? PS_OK : PS_ERR_PEER_GONE, st);
        // While the done function runs, the request takes no more answers.
        EXPECT_EQ(0, ps__tracker_add_response(t, ts, 1));
        responder.join();
    }
    ps__tracker_destroy(t);
}

} // namespace

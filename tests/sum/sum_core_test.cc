// The summation handler driven in-process: requests are fed to
// ps_sum_handler as the KV server would, answers are captured by a
// responder, for every engine mode (threads, one thread, scheduling,
// blocking) and async mode.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ps/app/kv_sum.h"
#include "ps/app/sum/sum_cmd.h"
#include "ps/app/sum/sum_server.h"
#include "ps/base/buffer.h"

namespace {

enum Kind { ACK, VALUE, FAIL };

struct Reply {
    Kind kind;
    int sender;
    int ts;
    uint64_t key;
    std::vector<uint8_t> vals;
};

// Captures answers; optionally keeps a reference to every value answered
// (a transport that has not sent it yet).
class Capture {
  public:
    static ps_status_t Respond(void *arg, ps_kv_server_t *, const ps_kv_meta_t *meta,
                               const ps_kv_pairs_t *res)
    {
        auto *c = static_cast<Capture *>(arg);
        Reply r{ACK, meta->sender, meta->timestamp, meta->key, {}};
        if (res) {
            uint64_t key = 0;
            EXPECT_EQ(8u, res->keys.len);
            if (res->keys.len == 8)
                std::memcpy(&key, ps_slice_ptr(&res->keys), 8);
            r.key = key;
            int32_t len0 = -1;
            if (res->lens.len == 4)
                std::memcpy(&len0, ps_slice_ptr(&res->lens), 4);
            r.kind = len0 == 0 ? FAIL : VALUE;
            if (res->vals.len) {
                const uint8_t *p = static_cast<const uint8_t *>(ps_slice_ptr(&res->vals));
                r.vals.assign(p, p + res->vals.len);
            }
        }
        std::lock_guard<std::mutex> g(c->mu_);
        if (res && c->hold_ && res->vals.len)
            c->held_.push_back(ps_slice_ref(&res->vals));
        c->replies_.push_back(r);
        c->cv_.notify_all();
        return PS_OK;
    }
    ~Capture() { Release(); }
    void Hold(bool on)
    {
        std::lock_guard<std::mutex> g(mu_);
        hold_ = on;
    }
    void Release()
    {
        std::lock_guard<std::mutex> g(mu_);
        for (auto &s : held_)
            ps_slice_unref(&s);
        held_.clear();
    }
    std::vector<ps_slice_t> Held()
    {
        std::lock_guard<std::mutex> g(mu_);
        return held_;
    }
    // The answer to (sender, ts), waiting up to 10 s for it.
    bool Wait(int sender, int ts, Reply *out, int ms = 10000)
    {
        std::unique_lock<std::mutex> g(mu_);
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        for (;;) {
            for (auto &r : replies_) {
                if (r.sender == sender && r.ts == ts) {
                    *out = r;
                    return true;
                }
            }
            if (cv_.wait_until(g, until) == std::cv_status::timeout)
                return false;
        }
    }
    bool Has(int sender, int ts)
    {
        std::lock_guard<std::mutex> g(mu_);
        for (auto &r : replies_)
            if (r.sender == sender && r.ts == ts)
                return true;
        return false;
    }
    size_t Count(int sender, int ts)
    {
        std::lock_guard<std::mutex> g(mu_);
        size_t n = 0;
        for (auto &r : replies_)
            n += r.sender == sender && r.ts == ts;
        return n;
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Reply> replies_;
    bool hold_ = false;
    std::vector<ps_slice_t> held_;
};

struct Mode {
    const char *name;
    int threads;
    int blocking;
    int schedule;
};

const Mode kModes[] = {
    {"engine4", 4, 0, 0},
    {"engine1", 1, 0, 0},
    {"schedule", 2, 0, 1},
    {"blocking", 1, 1, 0},
};

class Server {
  public:
    Server(int workers, Mode m, int async = 0, int byteps_init = 0)
    {
        ps_sum_options_t o;
        ps_sum_options_init(&o);
        o.num_workers = workers;
        o.engine_threads = m.threads;
        o.engine_blocking = m.blocking;
        o.schedule = m.schedule;
        o.async_mode = async;
        o.byteps_init = byteps_init;
        EXPECT_EQ(PS_OK, ps_sum_create(&o, nullptr, &sum_));
        ps_sum_set_responder(sum_, Capture::Respond, &cap_);
    }
    ~Server()
    {
        ps_sum_destroy(sum_);
        cap_.Release();
    }

    // Sends a request from worker w with timestamp ts.
    void Request(int w, int ts, uint64_t key, bool push, bool pull, const void *vals,
                 size_t bytes, ps_data_type_t type, int cmd = 0, int nkeys = 1)
    {
        ps_kv_meta_t meta = {};
        meta.cmd = cmd;
        meta.push = push;
        meta.pull = pull;
        meta.sender = ps_worker_rank_to_id(w);
        meta.timestamp = ts;
        meta.key = key;
        meta.type = type;
        ps_kv_pairs_t req = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, type};
        EXPECT_EQ(PS_OK, ps_slice_alloc(8 * nkeys, 0, &req.keys));
        for (int i = 0; i < nkeys; i++) {
            uint64_t k = key + i;
            std::memcpy(static_cast<char *>(ps_slice_ptr(&req.keys)) + 8 * i, &k, 8);
        }
        if (push) {
            EXPECT_EQ(PS_OK, ps_slice_alloc(bytes, 0, &req.vals));
            std::memcpy(ps_slice_ptr(&req.vals), vals, bytes);
        }
        ps_sum_handler(sum_, &meta, &req, nullptr);
        ps_slice_unref(&req.keys);
        ps_slice_unref(&req.vals);
    }
    void Push(int w, int ts, uint64_t key, const std::vector<float> &v)
    {
        Request(w, ts, key, true, false, v.data(), v.size() * 4, PS_DATA_FLOAT);
    }
    void Pull(int w, int ts, uint64_t key) { Request(w, ts, key, false, true, nullptr, 0, PS_DATA_FLOAT); }
    void PushPull(int w, int ts, uint64_t key, const std::vector<float> &v)
    {
        Request(w, ts, key, true, true, v.data(), v.size() * 4, PS_DATA_FLOAT);
    }

    Reply Get(int w, int ts)
    {
        Reply r{};
        EXPECT_TRUE(cap_.Wait(ps_worker_rank_to_id(w), ts, &r)) << "no answer to worker " << w
                                                                << " ts " << ts;
        return r;
    }
    // Nothing answered yet, once the engines are idle.
    bool Waiting(int w, int ts)
    {
        EXPECT_EQ(PS_OK, ps_sum_flush(sum_, 10000));
        return !cap_.Has(ps_worker_rank_to_id(w), ts);
    }
    ps_sum_stats_t Stats()
    {
        ps_sum_stats_t s;
        ps_sum_stats(sum_, &s);
        return s;
    }

    ps_sum_t *sum_ = nullptr;
    Capture cap_;
};

std::vector<float> Floats(const std::vector<uint8_t> &b)
{
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
}

std::vector<float> Values(int n, int seed)
{
    std::vector<float> v(n);
    for (int i = 0; i < n; i++)
        v[i] = static_cast<float>((seed * 31 + i * 7) % 17) - 8.0f; // sums are exact
    return v;
}

std::vector<float> Add(std::vector<float> a, const std::vector<float> &b)
{
    for (size_t i = 0; i < a.size(); i++)
        a[i] += b[i];
    return a;
}

class SumModes : public ::testing::TestWithParam<Mode> {};

INSTANTIATE_TEST_SUITE_P(All, SumModes, ::testing::ValuesIn(kModes),
                         [](const ::testing::TestParamInfo<Mode> &i) { return std::string(i.param.name); });

TEST_P(SumModes, PullsWaitForEveryWorkerThenGetTheSum)
{
    Server s(3, GetParam());
    auto v0 = Values(1000, 1), v1 = Values(1000, 2), v2 = Values(1000, 3);
    s.Pull(0, 100, 5); // before any push: waits
    EXPECT_TRUE(s.Waiting(0, 100));
    s.Push(0, 1, 5, v0);
    EXPECT_EQ(ACK, s.Get(0, 1).kind);
    s.Push(1, 1, 5, v1);
    EXPECT_EQ(ACK, s.Get(1, 1).kind);
    EXPECT_TRUE(s.Waiting(0, 100));
    s.Push(2, 1, 5, v2);
    EXPECT_EQ(ACK, s.Get(2, 1).kind);
    Reply r = s.Get(0, 100);
    ASSERT_EQ(VALUE, r.kind);
    EXPECT_EQ(5u, r.key);
    auto want = Add(Add(v0, v1), v2);
    EXPECT_EQ(want, Floats(r.vals));
    s.Pull(1, 101, 5);
    s.Pull(2, 102, 5);
    EXPECT_EQ(want, Floats(s.Get(1, 101).vals));
    EXPECT_EQ(want, Floats(s.Get(2, 102).vals));

    // The next round starts clean.
    auto w0 = Values(1000, 4), w1 = Values(1000, 5), w2 = Values(1000, 6);
    s.Push(2, 2, 5, w2);
    s.Push(0, 2, 5, w0);
    s.Pull(0, 103, 5);
    EXPECT_TRUE(s.Waiting(0, 103));
    s.Push(1, 2, 5, w1);
    auto want2 = Add(Add(w2, w0), w1);
    EXPECT_EQ(want2, Floats(s.Get(0, 103).vals));
    s.Pull(1, 104, 5);
    s.Pull(2, 105, 5);
    EXPECT_EQ(want2, Floats(s.Get(1, 104).vals));
    EXPECT_EQ(want2, Floats(s.Get(2, 105).vals));

    ps_sum_stats_t st = s.Stats();
    EXPECT_EQ(2u, st.rounds);
    EXPECT_EQ(6u, st.pushes);
    EXPECT_EQ(6u, st.pulls);
    EXPECT_EQ(2u, st.pulls_waited);
    EXPECT_EQ(0u, st.refused);
    EXPECT_EQ(1u, st.keys);
    EXPECT_LE(st.stores, 2u); // two buffers ping-pong at most
}

TEST_P(SumModes, ManyKeysManyRoundsEveryType)
{
    const int workers = 4, rounds = 3;
    Server s(workers, GetParam());
    const ps_data_type_t types[] = {PS_DATA_FLOAT, PS_DATA_DOUBLE, PS_DATA_FLOAT16,
                                    PS_DATA_BFLOAT16, PS_DATA_INT8, PS_DATA_UINT8,
                                    PS_DATA_INT32, PS_DATA_INT64};
    std::mt19937_64 rng(3);
    int ts = 1;
    for (int round = 0; round < rounds; round++) {
        std::map<uint64_t, std::vector<uint8_t>> expect;
        std::map<uint64_t, int> pull_ts;
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            size_t es = ps_data_type_size(types[t]);
            size_t bytes = es * (1 + t * 97);
            uint64_t key = 1000 + t;
            std::vector<uint8_t> acc;
            for (int w = 0; w < workers; w++) {
                std::vector<uint8_t> v(bytes);
                for (auto &b : v)
                    b = static_cast<uint8_t>(rng());
                if (types[t] == PS_DATA_FLOAT16 || types[t] == PS_DATA_BFLOAT16 ||
                    types[t] == PS_DATA_FLOAT || types[t] == PS_DATA_DOUBLE) {
                    // Keep the floats finite: clear the top exponent bit.
                    for (size_t i = 0; i < bytes; i += es)
                        v[i + es - 1] &= 0xbf;
                }
                // Each key is applied in arrival order: ((w0 + w1) + w2) + w3.
                if (w == 0)
                    acc = v;
                else
                    ASSERT_EQ(PS_OK, ps_kv_sum3_at(PS_KV_SUM_SCALAR, types[t], acc.data(),
                                                   acc.data(), v.data(), bytes));
                s.Request(w, ts, key, true, false, v.data(), bytes, types[t]);
                ts++;
            }
            expect[key] = acc;
        }
        for (auto &e : expect) {
            for (int w = 0; w < workers; w++) {
                s.Request(w, ts, e.first, false, true, nullptr, 0, PS_DATA_CHAR);
                Reply r = s.Get(w, ts);
                ASSERT_EQ(VALUE, r.kind);
                ASSERT_EQ(e.second, r.vals) << "key " << e.first << " round " << round;
                ts++;
            }
        }
    }
    EXPECT_EQ(static_cast<uint64_t>(rounds * 8), s.Stats().rounds);
}

TEST_P(SumModes, PushForTheNextRoundIsHeldUntilEveryonePulled)
{
    Server s(2, GetParam());
    auto a0 = Values(64, 1), b0 = Values(64, 2), a1 = Values(64, 3), b1 = Values(64, 4);
    auto a2 = Values(64, 5), b2 = Values(64, 6);
    s.Push(0, 1, 9, a0);
    s.Push(1, 1, 9, b0);
    s.Pull(0, 2, 9);
    EXPECT_EQ(Add(a0, b0), Floats(s.Get(0, 2).vals));
    s.Push(0, 3, 9, a1); // round 1, while worker 1 has not pulled round 0
    s.Push(0, 4, 9, a2); // round 2: held
    EXPECT_EQ(ACK, s.Get(0, 4).kind);
    s.Push(1, 3, 9, b1); // round 1 complete, but round 0 is still being pulled
    s.Pull(1, 5, 9);     // worker 1's round 0
    EXPECT_EQ(Add(a0, b0), Floats(s.Get(1, 5).vals));
    s.Pull(0, 6, 9);
    s.Pull(1, 6, 9);
    EXPECT_EQ(Add(a1, b1), Floats(s.Get(0, 6).vals));
    EXPECT_EQ(Add(a1, b1), Floats(s.Get(1, 6).vals));
    s.Push(1, 7, 9, b2);
    s.Pull(0, 8, 9);
    s.Pull(1, 8, 9);
    EXPECT_EQ(Add(a2, b2), Floats(s.Get(0, 8).vals));
    EXPECT_EQ(Add(a2, b2), Floats(s.Get(1, 8).vals));
    EXPECT_EQ(1u, s.Stats().pushes_held);
    EXPECT_EQ(3u, s.Stats().rounds);
}

TEST_P(SumModes, PushPullRequestsAreAnsweredWithTheSum)
{
    Server s(3, GetParam());
    for (int round = 0; round < 3; round++) {
        auto v0 = Values(300, round * 3), v1 = Values(300, round * 3 + 1),
             v2 = Values(300, round * 3 + 2);
        s.PushPull(1, 10 + round, 77, v1);
        s.PushPull(0, 10 + round, 77, v0);
        EXPECT_TRUE(s.Waiting(0, 10 + round));
        s.PushPull(2, 10 + round, 77, v2);
        auto want = Add(Add(v1, v0), v2);
        for (int w = 0; w < 3; w++) {
            Reply r = s.Get(w, 10 + round);
            ASSERT_EQ(VALUE, r.kind);
            EXPECT_EQ(want, Floats(r.vals));
            EXPECT_EQ(1u, s.cap_.Count(ps_worker_rank_to_id(w), 10 + round));
        }
    }
}

TEST_P(SumModes, PipelinedPushPullsAreAnsweredRoundByRound)
{
    Server s(2, GetParam());
    std::vector<std::vector<float>> a, b;
    for (int r = 0; r < 4; r++) {
        a.push_back(Values(40, r));
        b.push_back(Values(40, r + 100));
    }
    // Worker 0 runs ahead: all its rounds are in flight before worker 1
    // sent anything.
    for (int r = 0; r < 4; r++)
        s.PushPull(0, 10 + r, 12, a[r]);
    EXPECT_TRUE(s.Waiting(0, 10));
    for (int r = 0; r < 4; r++) {
        s.PushPull(1, 10 + r, 12, b[r]);
        auto want = Add(a[r], b[r]);
        EXPECT_EQ(want, Floats(s.Get(0, 10 + r).vals)) << "round " << r;
        EXPECT_EQ(want, Floats(s.Get(1, 10 + r).vals)) << "round " << r;
    }
    EXPECT_EQ(3u, s.Stats().pushes_held);
    EXPECT_EQ(4u, s.Stats().rounds);
}

TEST_P(SumModes, BytePSInitWithAWorkerGoneReleasesTheOthers)
{
    Server s(3, GetParam(), 0, 1);
    s.Push(0, 1, 6, Values(8, 1));
    s.Push(1, 1, 6, Values(8, 1));
    EXPECT_TRUE(s.Waiting(0, 1));
    ps_sum_worker_gone(s.sum_, ps_worker_rank_to_id(2));
    EXPECT_EQ(ACK, s.Get(0, 1).kind);
    EXPECT_EQ(ACK, s.Get(1, 1).kind);
    s.Pull(0, 2, 6);
    EXPECT_EQ(FAIL, s.Get(0, 2).kind);
}

TEST_P(SumModes, OneWorkerGetsItsOwnPushWithoutAStore)
{
    Server s(1, GetParam());
    for (int round = 0; round < 3; round++) {
        auto v = Values(100, round);
        s.Push(0, 2 * round, 3, v);
        s.Pull(0, 2 * round + 1, 3);
        EXPECT_EQ(v, Floats(s.Get(0, 2 * round + 1).vals));
    }
    EXPECT_EQ(0u, s.Stats().stores);
}

TEST_P(SumModes, AStoreTheTransportStillHoldsIsNotWrittenAgain)
{
    Server s(2, GetParam());
    s.cap_.Hold(true); // answers stay referenced, as if not sent yet
    std::vector<std::vector<float>> results;
    for (int round = 0; round < 4; round++) {
        auto a = Values(256, round), b = Values(256, round + 10);
        s.Push(0, 3 * round, 4, a);
        s.Push(1, 3 * round, 4, b);
        s.Pull(0, 3 * round + 1, 4);
        s.Pull(1, 3 * round + 1, 4);
        results.push_back(Add(a, b));
        s.Get(1, 3 * round + 1);
    }
    ASSERT_EQ(PS_OK, ps_sum_flush(s.sum_, 10000));
    auto held = s.cap_.Held();
    ASSERT_EQ(8u, held.size());
    for (int round = 0; round < 4; round++) {
        std::vector<float> got(256);
        std::memcpy(got.data(), ps_slice_ptr(&held[2 * round]), 1024);
        EXPECT_EQ(results[round], got) << "round " << round << " was overwritten";
    }
    EXPECT_EQ(4u, s.Stats().stores); // one per round while all are held
    s.cap_.Hold(false);
    s.cap_.Release();
    for (int round = 4; round < 8; round++) {
        s.Push(0, 3 * round, 4, Values(256, round));
        s.Push(1, 3 * round, 4, Values(256, round));
        s.Pull(0, 3 * round + 1, 4);
        s.Pull(1, 3 * round + 1, 4);
        s.Get(1, 3 * round + 1);
        s.Get(0, 3 * round + 1);
    }
    EXPECT_LE(s.Stats().stores, 6u); // recycled once the transport let go
}

TEST_P(SumModes, AWorkerGoneFailsTheRoundsThatNeedIt)
{
    Server s(3, GetParam());
    auto v = Values(50, 1);
    // Key 1: everyone pushed before worker 2 left. Key 2: worker 2 did not.
    s.Push(0, 1, 1, v);
    s.Push(1, 1, 1, v);
    s.Push(2, 1, 1, v);
    s.Push(0, 2, 2, v);
    s.Push(1, 2, 2, v);
    s.Pull(0, 3, 2);
    EXPECT_TRUE(s.Waiting(0, 3));
    ps_sum_worker_gone(s.sum_, ps_worker_rank_to_id(2));
    ps_sum_worker_gone(s.sum_, ps_worker_rank_to_id(2)); // once is enough
    ps_sum_worker_gone(s.sum_, ps_server_rank_to_id(0)); // not a worker: ignored
    EXPECT_EQ(FAIL, s.Get(0, 3).kind);
    s.Pull(1, 3, 2);
    EXPECT_EQ(FAIL, s.Get(1, 3).kind);

    // Key 1's round is complete: the live workers get it, and the round
    // retires without worker 2's pull.
    s.Pull(0, 4, 1);
    s.Pull(1, 4, 1);
    EXPECT_EQ(Add(Add(v, v), v), Floats(s.Get(0, 4).vals));
    EXPECT_EQ(Add(Add(v, v), v), Floats(s.Get(1, 4).vals));
    // Its next round needs worker 2.
    s.Push(0, 5, 1, v);
    EXPECT_EQ(ACK, s.Get(0, 5).kind);
    s.Pull(0, 6, 1);
    EXPECT_EQ(FAIL, s.Get(0, 6).kind);
    // A key first used after the worker left fails at once too.
    s.Pull(1, 7, 3);
    EXPECT_EQ(FAIL, s.Get(1, 7).kind);

    ps_sum_stats_t st = s.Stats();
    EXPECT_EQ(3u, st.keys_failed);
    EXPECT_EQ(4u, st.pulls_failed);
}

TEST_P(SumModes, ShutdownAnswersWaitingPulls)
{
    Server s(2, GetParam());
    s.Push(0, 1, 8, Values(10, 1));
    s.Pull(0, 2, 8);
    s.Pull(1, 2, 9);
    EXPECT_TRUE(s.Waiting(0, 2));
    ps_sum_shutdown(s.sum_);
    EXPECT_EQ(FAIL, s.Get(0, 2).kind);
    EXPECT_EQ(FAIL, s.Get(1, 2).kind);
    s.Pull(1, 3, 8); // after shutdown: answered at once
    EXPECT_EQ(FAIL, s.Get(1, 3).kind);
    s.Push(1, 4, 8, Values(10, 1)); // dropped
    EXPECT_FALSE(s.cap_.Has(ps_worker_rank_to_id(1), 4));
}

// A responder that blocks until released (20 s at most).
struct StuckResponder {
    std::atomic<bool> entered{false};
    std::atomic<bool> release{false};

    static ps_status_t Respond(void *arg, ps_kv_server_t *, const ps_kv_meta_t *,
                               const ps_kv_pairs_t *)
    {
        auto *r = static_cast<StuckResponder *>(arg);
        r->entered = true;
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!r->release && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return PS_OK;
    }
};

// A handler call that never returns: shutdown gives up at its deadline
// instead of waiting for it, refuses what comes next, and finishes when
// called again once the call returned.
TEST(SumShutdown, TimesOutWhileAHandlerCallRuns)
{
    // Blocking mode answers a push on the handler's thread.
    Server s(1, kModes[3]);
    StuckResponder stuck;
    ps_sum_set_responder(s.sum_, StuckResponder::Respond, &stuck);
    std::atomic<bool> returned{false};
    std::thread pusher([&] {
        s.Push(0, 1, 8, Values(4, 1));
        returned = true;
    });
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!stuck.entered && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(stuck.entered.load());

    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_sum_shutdown_timed(s.sum_, 200));
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    EXPECT_GE(took, 190);
    EXPECT_LT(took, 2000);
    EXPECT_FALSE(returned.load());
    stuck.release = true;
    pusher.join();
    ps_sum_set_responder(s.sum_, Capture::Respond, &s.cap_);
    EXPECT_EQ(PS_OK, ps_sum_shutdown_timed(s.sum_, 10000));
    s.Pull(0, 2, 8); // after shutdown: answered at once with no value
    EXPECT_EQ(FAIL, s.Get(0, 2).kind);
}

TEST_P(SumModes, BytePSInitRoundOnlyInitialises)
{
    Server s(2, GetParam(), 0, 1);
    auto init = Values(20, 9);
    s.Push(0, 1, 6, init);
    EXPECT_TRUE(s.Waiting(0, 1)); // held until every worker initialised
    s.Push(1, 1, 6, init);
    EXPECT_EQ(ACK, s.Get(0, 1).kind);
    EXPECT_EQ(ACK, s.Get(1, 1).kind);
    auto a = Values(20, 1), b = Values(20, 2);
    s.Push(0, 2, 6, a);
    s.Push(1, 2, 6, b);
    s.Pull(0, 3, 6);
    s.Pull(1, 3, 6);
    EXPECT_EQ(Add(a, b), Floats(s.Get(0, 3).vals));
    EXPECT_EQ(Add(a, b), Floats(s.Get(1, 3).vals));
}

TEST(SumAsync, EveryPushIsSummedAndPullsSeeTheStore)
{
    Server s(2, kModes[0], 1);
    auto a = Values(128, 1), b = Values(128, 2), c = Values(128, 3);
    s.Pull(0, 1, 2); // nothing pushed yet: waits for the first push
    EXPECT_TRUE(s.Waiting(0, 1));
    s.Push(0, 2, 2, a);
    EXPECT_EQ(ACK, s.Get(0, 2).kind);
    EXPECT_EQ(a, Floats(s.Get(0, 1).vals));
    s.cap_.Hold(true);
    s.Push(1, 3, 2, b);
    s.Pull(1, 4, 2);
    EXPECT_EQ(Add(a, b), Floats(s.Get(1, 4).vals));
    s.Push(0, 5, 2, c); // the answer above is still referenced: copy on write
    s.Pull(0, 6, 2);
    EXPECT_EQ(Add(Add(a, b), c), Floats(s.Get(0, 6).vals));
    auto held = s.cap_.Held();
    ASSERT_EQ(2u, held.size());
    std::vector<float> first(128);
    std::memcpy(first.data(), ps_slice_ptr(&held[0]), 512);
    EXPECT_EQ(Add(a, b), first);
    s.PushPull(1, 7, 2, a);
    EXPECT_EQ(Add(Add(Add(a, b), c), a), Floats(s.Get(1, 7).vals));
    EXPECT_EQ(0u, s.Stats().rounds);
}

TEST(SumRequests, RefusesWhatItCannotSum)
{
    Server s(2, kModes[0]);
    float v[4] = {1, 2, 3, 4};
    s.Request(0, 1, 5, true, false, v, 16, PS_DATA_FLOAT, 0, 2); // two keys
    s.Request(0, 2, 5, true, false, v, 16, PS_DATA_FLOAT, ps_sum_cmd_encode(PS_SUM_REQ_ROW_SPARSE, 0));
    s.Request(0, 3, 5, true, false, v, 16, PS_DATA_FLOAT,
              ps_sum_cmd_encode(PS_SUM_REQ_DEFAULT, PS_BYTEPS_FLOAT16)); // type contradicts cmd
    s.Request(0, 4, 5, true, false, v, 15, PS_DATA_CHAR, 0); // float32 by cmd 0: 15 bytes
    s.Request(0, 5, 5, true, false, v, 16, PS_DATA_FLOAT);   // fine: shapes key 5
    s.Request(1, 6, 5, true, false, v, 8, PS_DATA_FLOAT);    // another length
    s.Request(1, 7, 5, true, false, v, 16, PS_DATA_INT32);   // another type
    s.Request(5, 8, 5, true, false, v, 16, PS_DATA_FLOAT);   // worker 5 of 2
    ASSERT_EQ(PS_OK, ps_sum_flush(s.sum_, 10000));
    for (int ts : {1, 2, 3, 4, 6, 7})
        EXPECT_FALSE(s.cap_.Has(ps_worker_rank_to_id(ts == 6 || ts == 7 ? 1 : 0), ts)) << ts;
    EXPECT_FALSE(s.cap_.Has(ps_worker_rank_to_id(5), 8));
    EXPECT_EQ(ACK, s.Get(0, 5).kind);
    EXPECT_EQ(7u, s.Stats().refused);

    // BytePS workers send untyped bytes and the type in cmd.
    int16_t h[4];
    for (int i = 0; i < 4; i++)
        h[i] = static_cast<int16_t>(ps_float_to_half(static_cast<float>(i)));
    int cmd = ps_sum_cmd_for_type(PS_DATA_FLOAT16);
    s.Request(0, 10, 6, true, false, h, 8, PS_DATA_CHAR, cmd);
    s.Request(1, 10, 6, true, false, h, 8, PS_DATA_CHAR, cmd);
    s.Request(0, 11, 6, false, true, nullptr, 0, PS_DATA_CHAR, cmd);
    Reply r = s.Get(0, 11);
    ASSERT_EQ(VALUE, r.kind);
    for (int i = 0; i < 4; i++) {
        uint16_t x;
        std::memcpy(&x, r.vals.data() + 2 * i, 2);
        EXPECT_EQ(2.0f * i, ps_half_to_float(x));
    }
}

TEST(SumOptions, FromEnvironment)
{
    ps_sum_options_t o;
    setenv("BYTEPS_SERVER_ENGINE_THREAD", "3", 1);
    setenv("BYTEPS_ENABLE_ASYNC", "1", 1);
    ASSERT_EQ(PS_OK, ps_sum_options_from_env(&o));
    EXPECT_EQ(3, o.engine_threads);
    EXPECT_EQ(1, o.async_mode);
    EXPECT_EQ(0, o.schedule);
    setenv("BYTEPS_SERVER_ENGINE_THREAD", "0", 1);
    EXPECT_EQ(PS_ERR_CONFIG, ps_sum_options_from_env(&o));
    setenv("BYTEPS_SERVER_ENGINE_THREAD", "many", 1);
    EXPECT_EQ(PS_ERR_CONFIG, ps_sum_options_from_env(&o));
    unsetenv("BYTEPS_SERVER_ENGINE_THREAD");
    unsetenv("BYTEPS_ENABLE_ASYNC");
    ps_sum_t *sum;
    ps_sum_options_init(&o);
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_sum_create(&o, nullptr, &sum)); // no workers known
}

} // namespace

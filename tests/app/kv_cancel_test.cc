// ps_kv_cancel: after it returned PS_OK, nothing writes into the pull's
// destination any more, even when the server answers later and the van
// receives in place (tcp and shm both do). Every pulled byte is checked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/net/postoffice.h"
#include "tests/lib/small_job.h"
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBytes = 1 << 20; // a full message (not the small lane): received in place
constexpr uint8_t kPoison = 0xA5;

// A server that answers each pull when the test says so, with every value
// byte equal to the request's timestamp's low byte plus one.
struct Stalling {
    struct Pending {
        ps_kv_meta_t meta;
        ps_slice_t keys;
        ps_kv_server_t *server;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Pending> pending;
    size_t seen = 0;

    static void Handle(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                       ps_kv_server_t *server)
    {
        auto *s = static_cast<Stalling *>(arg);
        std::lock_guard<std::mutex> g(s->mu);
        s->pending.push_back({*meta, ps_slice_ref(&req->keys), server});
        s->seen++;
        s->cv.notify_all();
    }
    bool WaitSeen(size_t n)
    {
        std::unique_lock<std::mutex> g(mu);
        return cv.wait_for(g, std::chrono::seconds(10), [&] { return seen >= n; });
    }
    // Answers the oldest pending pull.
    void AnswerOne()
    {
        Pending p;
        {
            std::lock_guard<std::mutex> g(mu);
            ASSERT_FALSE(pending.empty());
            p = pending.front();
            pending.pop_front();
        }
        ps_kv_pairs_t res = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                             PS_DATA_UINT8};
        res.keys = p.keys;
        ASSERT_EQ(PS_OK, ps_slice_alloc(kBytes, 0, &res.vals));
        memset(ps_slice_ptr(&res.vals), (uint8_t)(p.meta.timestamp + 1), kBytes);
        EXPECT_EQ(PS_OK, ps_kv_server_respond(p.server, &p.meta, &res));
        ps_slice_unref(&res.vals);
        ps_slice_unref(&p.keys);
    }
};

bool all_bytes(const std::vector<uint8_t> &b, uint8_t v)
{
    for (uint8_t x : b)
        if (x != v)
            return false;
    return true;
}

// A job on the van of the parameter, with a stalling server and a worker.
class KvCancel : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override
    {
        small_job_opts_t o = {GetParam().c_str(), 0, 0, 0};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 0, Stalling::Handle,
                                             &server_, &srv_));
        ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
    }
    void TearDown() override
    {
        ps_kv_worker_destroy(w_);
        ps_kv_server_destroy(srv_);
        small_job_finalize(po_, 1);
    }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    Stalling server_;
    ps_kv_server_t *srv_ = nullptr;
    ps_kv_worker_t *w_ = nullptr;
};

} // namespace

// The server stalls; the wait times out; cancel returns; then the server
// answers: the destination keeps its poison, and the worker goes on (a
// following pull is answered in full).
TEST_P(KvCancel, ALateAnswerDoesNotTouchTheBuffer)
{
    ps_kv_worker_t *w = w_;
    Stalling &server = server_;

    std::vector<uint8_t> buf(kBytes, kPoison);
    ps_key_t key = 5;
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_pull(w, &key, 1, buf.data(), kBytes, nullptr, PS_DATA_UINT8, 0,
                                nullptr, nullptr, &ts));
    ASSERT_TRUE(server.WaitSeen(1));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_kv_wait(w, ts, 100));
    EXPECT_EQ(PS_OK, ps_kv_cancel(w, ts, 10000));
    EXPECT_EQ(PS_ERR_CANCELLED, ps_kv_wait(w, ts, 0));
    server.AnswerOne();

    // The next pull on the same connection is answered after the late one
    // arrived.
    std::vector<uint8_t> next(kBytes, kPoison);
    int ts2;
    ASSERT_EQ(PS_OK, ps_kv_pull(w, &key, 1, next.data(), kBytes, nullptr, PS_DATA_UINT8, 0,
                                nullptr, nullptr, &ts2));
    ASSERT_TRUE(server.WaitSeen(2));
    server.AnswerOne();
    ASSERT_EQ(PS_OK, ps_kv_wait(w, ts2, 10000));
    EXPECT_TRUE(all_bytes(next, (uint8_t)(ts2 + 1)));
    EXPECT_TRUE(all_bytes(buf, kPoison)) << "the cancelled pull's buffer was written";
    EXPECT_EQ(PS_OK, ps_kv_cancel(w, ts2, 0)); // completed: nothing holds it
    ps_kv_worker_stats_t stats;
    ps_kv_worker_stats(w, &stats);
    EXPECT_EQ(kBytes, stats.pull_bytes_in_place); // the van wrote into the destination
}

// Answers racing the cancel: whatever landed before cancel returned may be
// there, nothing changes after it.
TEST_P(KvCancel, NothingChangesAfterCancelReturned)
{
    ps_kv_worker_t *w = w_;
    Stalling &server = server_;
    std::mt19937 rng(7);
    ps_key_t key = 9;
    int changed = 0, cancelled = 0;
    for (int round = 0; round < 30; round++) {
        std::vector<uint8_t> buf(kBytes, kPoison);
        int ts;
        ASSERT_EQ(PS_OK, ps_kv_pull(w, &key, 1, buf.data(), kBytes, nullptr, PS_DATA_UINT8, 0,
                                    nullptr, nullptr, &ts));
        ASSERT_TRUE(server.WaitSeen((size_t)round + 1));
        int delay_us = (int)(rng() % 400);
        std::thread answer([&] {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            server.AnswerOne();
        });
        ps_status_t st = ps_kv_wait(w, ts, (int)(rng() % 2));
        if (st == PS_ERR_TIMED_OUT) {
            ASSERT_EQ(PS_OK, ps_kv_cancel(w, ts, 10000));
            cancelled++;
        }
        std::vector<uint8_t> snapshot = buf;
        answer.join();
        // The answer has been sent; let it arrive (and be dropped).
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (buf != snapshot)
            changed++;
        // Either untouched or the whole answer.
        EXPECT_TRUE(all_bytes(snapshot, kPoison) || all_bytes(snapshot, (uint8_t)(ts + 1)))
            << "round " << round;
    }
    EXPECT_EQ(0, changed) << "of " << cancelled << " cancelled pulls";
    EXPECT_GT(cancelled, 0);}

INSTANTIATE_TEST_SUITE_P(Vans, KvCancel, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

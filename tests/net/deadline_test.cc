// Teardown calls end by their deadline when a function they wait for never
// returns: customer destroy, node-callback removal, and finalize while a
// busy-poll waiter is stuck inside the van's loop (the van must outlive it:
// it stays open, and nothing the waiter uses is freed).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/time.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "tests/lib/po_send.h"
#include "tests/lib/small_job.h"
}

namespace {

using Clock = std::chrono::steady_clock;

// Scheduler, server (node 8) and worker on tcp in this process.
struct Job {
    ps_postoffice_t *po[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    ps_status_t st;

    explicit Job(bool busy_poll, int worker_finalize_ms = 0)
    {
        small_job_opts_t o = {"tcp", busy_poll ? 1 : 0, worker_finalize_ms, 0};
        st = small_job_start(&o, po);
    }
    bool ok() const { return st == PS_OK; }
    // Every node still up leaves without a barrier.
    void finalize() { small_job_finalize(po, 0); }
};

// A request of one byte to customer (app, cust) of node `to`.
ps_status_t send_byte(ps_postoffice_t *po, int to, int app, int cust, int ts)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    EXPECT_EQ(PS_OK, ps_slice_alloc(1, 0, &s));
    *static_cast<uint8_t *>(ps_slice_ptr(&s)) = 7;
    ps_status_t st = po_send_request(po, to, app, cust, ts, 0, false, &s, PS_DATA_UINT8);
    ps_slice_unref(&s);
    return st;
}

// A function that blocks until released (or 20 s, so that a broken run
// still ends).
struct Gate {
    std::atomic<bool> entered{false};
    std::atomic<bool> release{false};
    std::atomic<bool> left{false};

    void block()
    {
        entered = true;
        auto until = Clock::now() + std::chrono::seconds(20);
        while (!release && Clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        left = true;
    }
    bool wait_entered()
    {
        auto until = Clock::now() + std::chrono::seconds(10);
        while (!entered && Clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return entered;
    }
};

void gate_recv(void *arg, ps_customer_t *, const ps_msg_t *msg)
{
    if (msg->meta.request)
        static_cast<Gate *>(arg)->block();
}

long ms_since(Clock::time_point t0)
{
    return (long)std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

void count_recv(void *, ps_customer_t *c, const ps_msg_t *msg)
{
    if (!msg->meta.request)
        ps_customer_add_response(c, msg->meta.timestamp, 1);
}

} // namespace

TEST(Deadline, CustomerDestroyTimesOutWhileItsHandlerRuns)
{
    Job job(false);
    ASSERT_TRUE(job.ok());
    Gate gate;
    ps_customer_t *sc, *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.po[1], 3, 3, gate_recv, &gate, &sc));
    ASSERT_EQ(PS_OK, ps_customer_create(job.po[2], 3, 0, count_recv, nullptr, &wc));
    int server = 8, ts;
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, &server, 1, &ts));
    ASSERT_EQ(PS_OK, send_byte(job.po[2], 8, 3, 0, ts));
    ASSERT_TRUE(gate.wait_entered());

    auto t0 = Clock::now();
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_customer_destroy_timed(sc, 200));
    long took = ms_since(t0);
    EXPECT_GE(took, 190);
    EXPECT_LT(took, 2000);
    EXPECT_FALSE(gate.left.load()); // it did not wait for the handler

    // The handler returns into a customer still allocated; a second call
    // finishes, and the app's routing is free for a new customer.
    gate.release = true;
    EXPECT_EQ(PS_OK, ps_customer_destroy_timed(sc, 10000));
    EXPECT_TRUE(gate.left.load());
    Gate again;
    again.release = true;
    ASSERT_EQ(PS_OK, ps_customer_create(job.po[1], 3, 3, gate_recv, &again, &sc));
    ps_customer_destroy(sc);
    ps_customer_destroy(wc);
    job.finalize();
}

namespace {

void gate_event(void *arg, ps_postoffice_t *, int, ps_status_t)
{
    static_cast<Gate *>(arg)->block();
}

} // namespace

TEST(Deadline, RemoveNodeCallbackTimesOutWhileTheCallbackRuns)
{
    Job job(false);
    ASSERT_TRUE(job.ok());
    Gate gate;
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_failed(job.po[2], gate_event, &gate));
    // The server leaves without a barrier: the worker's callback runs.
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(job.po[1], 0));
    job.po[1] = nullptr;
    ASSERT_TRUE(gate.wait_entered());

    auto t0 = Clock::now();
    EXPECT_EQ(PS_ERR_TIMED_OUT,
              ps_postoffice_remove_node_callback_timed(job.po[2], gate_event, &gate, 200));
    long took = ms_since(t0);
    EXPECT_GE(took, 190);
    EXPECT_LT(took, 2000);
    EXPECT_FALSE(gate.left.load());
    gate.release = true;
    EXPECT_EQ(PS_OK, ps_postoffice_remove_node_callback_timed(job.po[2], gate_event, &gate,
                                                              10000));
    EXPECT_TRUE(gate.left.load());
    job.finalize();
}

namespace {

// A worker customer whose receive function blocks when (and only when) it
// runs on the busy-poll waiter's thread, i.e. inside the van's loop driven
// by that waiter.
struct Driver {
    std::atomic<std::thread::id> waiter{};
    Gate gate;
    std::atomic<int> answers{0};
};

void driver_recv(void *arg, ps_customer_t *c, const ps_msg_t *msg)
{
    auto *d = static_cast<Driver *>(arg);
    if (msg->meta.request)
        return;
    d->answers++;
    if (std::this_thread::get_id() == d->waiter.load())
        d->gate.block();
    ps_customer_add_response(c, msg->meta.timestamp, 1);
}

// Answers every request at once.
struct Echo {
    ps_postoffice_t *po;
};

void echo_recv(void *arg, ps_customer_t *, const ps_msg_t *msg)
{
    auto *e = static_cast<Echo *>(arg);
    if (msg->meta.request)
        (void)po_send_reply(e->po, msg, nullptr, PS_DATA_UINT8);
}

} // namespace

TEST(Deadline, FinalizeLeavesTheVanToAWaiterStuckInItsLoop)
{
    Job job(true, 300);
    ASSERT_TRUE(job.ok());
    Echo echo{job.po[1]};
    Driver d;
    ps_customer_t *sc, *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.po[1], 0, 0, echo_recv, &echo, &sc));
    ASSERT_EQ(PS_OK, ps_customer_create(job.po[2], 0, 0, driver_recv, &d, &wc));
    std::atomic<int> last{PS_OK};
    ps_postoffice_t *worker = job.po[2];
    std::thread waiter([&] {
        d.waiter = std::this_thread::get_id();
        int server = 8;
        auto until = Clock::now() + std::chrono::seconds(10);
        // Short waits: the answer usually comes while this thread drives.
        while (!d.gate.entered && Clock::now() < until) {
            int ts;
            if (ps_customer_new_request(wc, 1, &server, 1, &ts) != PS_OK)
                break;
            if (send_byte(worker, 8, 0, 0, ts) != PS_OK)
                break;
            ps_status_t st;
            while ((st = ps_customer_wait(wc, ts, 2)) == PS_ERR_TIMED_OUT && !d.gate.entered &&
                   Clock::now() < until) {
            }
            last = st;
        }
    });
    ASSERT_TRUE(d.gate.wait_entered()) << d.answers.load() << " answers, none on the waiter";

    job.po[2] = nullptr;
    auto t0 = Clock::now();
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_postoffice_finalize(worker, 0));
    long took = ms_since(t0);
    EXPECT_LT(took, 5000);
    EXPECT_FALSE(d.gate.left.load());
    // The waiter returns from its receive function into the van's loop:
    // the van is still there (ASan and TSan would see it freed otherwise).
    d.gate.release = true;
    waiter.join();
    EXPECT_TRUE(d.gate.left.load());
    // The customer's registry stayed too.
    EXPECT_EQ(PS_OK, ps_customer_destroy_timed(wc, 10000));
    ps_customer_destroy(sc);
    job.finalize();
}

// Busy-poll waiters that keep starting to drive the loop while finalize
// runs: finalize waits for them, and none drives once the van closed.
TEST(Deadline, BusyWaitersRacingFinalize)
{
    for (int round = 0; round < 3; round++) {
        Job job(true, 2000);
        ASSERT_TRUE(job.ok());
        Echo echo{job.po[1]};
        ps_customer_t *sc, *wc;
        ASSERT_EQ(PS_OK, ps_customer_create(job.po[1], 0, 0, echo_recv, &echo, &sc));
        ASSERT_EQ(PS_OK, ps_customer_create(job.po[2], 0, 0, count_recv, nullptr, &wc));
        ps_postoffice_t *worker = job.po[2];
        // Sends stop before finalize (the postoffice goes with it); waits
        // go on across it.
        std::mutex send_mu;
        bool finalizing = false;
        std::atomic<int> answered{0};
        std::vector<std::thread> waiters;
        for (int w = 0; w < 3; w++) {
            waiters.emplace_back([&] {
                int server = 8;
                for (;;) {
                    int ts;
                    if (ps_customer_new_request(wc, 1, &server, 1, &ts) != PS_OK)
                        return; // closed
                    {
                        std::lock_guard<std::mutex> g(send_mu);
                        // Once finalizing, the request is never answered:
                        // its wait ends when finalize fails it.
                        if (!finalizing) {
                            EXPECT_EQ(PS_OK, send_byte(worker, 8, 0, 0, ts));
                        }
                    }
                    ps_status_t st;
                    while ((st = ps_customer_wait(wc, ts, 1)) == PS_ERR_TIMED_OUT) {
                    }
                    if (st != PS_OK) {
                        EXPECT_EQ(PS_ERR_SHUTDOWN, st);
                        return;
                    }
                    answered++;
                }
            });
        }
        auto until = Clock::now() + std::chrono::seconds(10);
        while (answered.load() < 50 && Clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_GE(answered.load(), 50);
        {
            std::lock_guard<std::mutex> g(send_mu);
            finalizing = true;
        }
        job.po[2] = nullptr;
        EXPECT_EQ(PS_OK, ps_postoffice_finalize(worker, 0));
        for (auto &t : waiters)
            t.join();
        ps_customer_destroy(wc);
        ps_customer_destroy(sc);
        job.finalize();
    }
}

// The small lane through the postoffice and customers, over the UCX van
// (the van that has a send_lane op): jobs of a scheduler, a server and a
// worker inside one process, each postoffice on its own thread.
//
// Covers: lane messages reach the customer they name with their sender and
// bytes; those that arrive before the customer exists wait and are replayed
// in order (with the customer id their header named) by the create call;
// the lane is off with PS_SMALL_LANE=0, with PS_RESEND and PS_DROP_MSG, and
// over a van without the op (tcp); a payload too long is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "ps/base/config.h"
#include "ps/net/customer.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"
#include "tests/lib/small_job.h"
}

namespace {

// A scheduler, one server (node 8) and one worker (node 9) over `van`.
struct Job {
    ps_postoffice_t *po[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    ps_status_t st = PS_INPROGRESS;

    explicit Job(const char *van)
    {
        small_job_opts_t o = {};
        o.van = van;
        st = small_job_start(&o, po);
    }
    bool Started() const
    {
        return st == PS_OK;
    }
    ps_postoffice_t *server()
    {
        return po[SMALL_JOB_SERVER];
    }
    ps_postoffice_t *worker()
    {
        return po[SMALL_JOB_WORKER];
    }
    ~Job()
    {
        EXPECT_EQ(PS_OK, small_job_finalize(po, 1));
    }
};

// What a customer's lane function received.
struct LaneInbox {
    std::mutex mu;
    std::condition_variable cv;
    struct Got {
        int sender;
        int customer_id;
        std::string payload;
    };
    std::vector<Got> got;
    ps_postoffice_t *answer_from = nullptr; // set: echo each payload back, reversed
    int app_id = 0;

    bool Wait(size_t n)
    {
        std::unique_lock<std::mutex> lk(mu);
        return cv.wait_for(lk, std::chrono::seconds(30), [&] { return got.size() >= n; });
    }
};

void no_recv(void *, ps_customer_t *, const ps_msg_t *) {}

ps_status_t send_lane(ps_postoffice_t *po, int to, int app, int cust, const std::string &payload)
{
    alignas(8) uint8_t buf[PS_POSTOFFICE_LANE_HEADROOM + PS_LANE_MAX_PAYLOAD + 64];
    memcpy(buf + PS_POSTOFFICE_LANE_HEADROOM, payload.data(), payload.size());
    return ps_postoffice_send_lane(po, to, app, cust, buf + PS_POSTOFFICE_LANE_HEADROOM,
                                   payload.size());
}

void lane_recv(void *arg, ps_customer_t *, int sender, int customer_id, const uint8_t *payload,
               size_t len)
{
    auto *in = static_cast<LaneInbox *>(arg);
    std::string p(reinterpret_cast<const char *>(payload), len);
    if (in->answer_from != nullptr) {
        std::string r(p.rbegin(), p.rend());
        EXPECT_EQ(PS_OK, send_lane(in->answer_from, sender, in->app_id, customer_id, r));
    }
    std::lock_guard<std::mutex> g(in->mu);
    in->got.push_back({sender, customer_id, p});
    in->cv.notify_all();
}

std::string payload_of(int i)
{
    std::string p(8 + static_cast<size_t>(i) * 29 % (PS_LANE_MAX_PAYLOAD - 7), '\0');
    for (size_t j = 0; j < p.size(); j++)
        p[j] = static_cast<char>(i * 31 + static_cast<int>(j));
    return p;
}

class UcxLane : public ::testing::Test {
  protected:
    void SetUp() override
    {
        // Shared memory, as the benchmarks; tcp lanes only on loopback.
        setenv("UCX_TLS", "sm,tcp", 1);
        setenv("UCX_NET_DEVICES", "lo", 1);
    }
    void TearDown() override
    {
        ps_config_set(PS_CFG_PS_SMALL_LANE, "1");
        ps_config_set(PS_CFG_PS_RESEND, "0");
        ps_config_set(PS_CFG_PS_DROP_MSG, "0");
    }
};

TEST_F(UcxLane, MessagesWaitForTheirCustomerAndAreReplayedInOrder)
{
    Job job("ucx");
    ASSERT_TRUE(job.Started());
    ASSERT_EQ(static_cast<size_t>(PS_LANE_MAX_PAYLOAD), ps_postoffice_lane_max(job.worker()));
    LaneInbox wbox;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create_lane(job.worker(), 5, 3, no_recv, lane_recv, &wbox, &wc));
    // The server's app 5 does not exist yet: these wait.
    const int kEarly = 5, kLate = 40;
    for (int i = 0; i < kEarly; i++)
        ASSERT_EQ(PS_OK, send_lane(job.worker(), 8, 5, 3, payload_of(i)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    LaneInbox sbox;
    sbox.answer_from = job.server();
    sbox.app_id = 5;
    ps_customer_t *sc;
    // A server routes by app id: customer (5, 5) takes app 5's messages,
    // and sees the worker's customer id (3) in each.
    ASSERT_EQ(PS_OK, ps_customer_create_lane(job.server(), 5, 5, no_recv, lane_recv, &sbox, &sc));
    for (int i = kEarly; i < kLate; i++)
        ASSERT_EQ(PS_OK, send_lane(job.worker(), 8, 5, 3, payload_of(i)));
    ASSERT_TRUE(sbox.Wait(kLate));
    ASSERT_TRUE(wbox.Wait(kLate));
    for (int i = 0; i < kLate; i++) {
        std::string want = payload_of(i);
        EXPECT_EQ(9, sbox.got[i].sender) << i;
        EXPECT_EQ(3, sbox.got[i].customer_id) << i;
        EXPECT_EQ(want, sbox.got[i].payload) << i;
        EXPECT_EQ(8, wbox.got[i].sender) << i;
        EXPECT_EQ(std::string(want.rbegin(), want.rend()), wbox.got[i].payload) << i;
    }
    // One byte too many is refused, nothing sent; ids the header cannot
    // carry are for the generic way.
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              send_lane(job.worker(), 8, 5, 3, std::string(PS_LANE_MAX_PAYLOAD + 1, 'x')));
    EXPECT_EQ(PS_ERR_UNSUPPORTED, send_lane(job.worker(), 8, 70000, 3, "12345678"));
    EXPECT_EQ(PS_ERR_UNSUPPORTED, send_lane(job.worker(), 8, 5, -1, "12345678"));
    ps_customer_destroy(sc);
    ps_customer_destroy(wc);
}

TEST_F(UcxLane, OffWhenAskedOrWhenEveryMessageMustBeSeen)
{
    {
        ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_SMALL_LANE, "0"));
        Job job("ucx");
        ASSERT_TRUE(job.Started());
        EXPECT_EQ(0u, ps_postoffice_lane_max(job.worker()));
        EXPECT_EQ(0u, ps_postoffice_lane_max(job.server()));
        EXPECT_EQ(PS_ERR_INVALID_ARG, send_lane(job.worker(), 8, 5, 3, "12345678"));
        ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_SMALL_LANE, "1"));
    }
    {
        ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND, "1"));
        Job job("ucx");
        ASSERT_TRUE(job.Started());
        EXPECT_EQ(0u, ps_postoffice_lane_max(job.worker()));
        ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND, "0"));
    }
    {
        ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_DROP_MSG, "5"));
        Job job("ucx");
        ASSERT_TRUE(job.Started());
        EXPECT_EQ(0u, ps_postoffice_lane_max(job.server()));
        ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_DROP_MSG, "0"));
    }
    {
        Job job("tcp"); // a van without send_lane
        ASSERT_TRUE(job.Started());
        EXPECT_EQ(0u, ps_postoffice_lane_max(job.worker()));
    }
}

} // namespace

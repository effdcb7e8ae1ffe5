// The postoffice's lane delivery (the deliver_lane callback it gives its
// van) drops a lane message longer than PS_LANE_MAX_BYTES or shorter than
// its header before any customer's lane function sees it; a well-formed one
// reaches it. The callbacks are taken from a van that wraps the TCP van
// ("lanetap"), in a job of one server and one worker in this process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

extern "C" {
#include "ps/base/status.h"
#include "ps/net/codec/lane.h"
#include "ps/net/customer.h"
#include "ps/net/postoffice.h"
#include "ps/net/van/van.h"
#include "tests/lib/small_job.h"
}

namespace {

std::mutex g_mu;
std::map<void *, ps_van_callbacks_t> g_cbs; // postoffice -> its callbacks
const ps_van_ops_t *g_tcp_ops;
ps_van_ops_t g_tap_ops;
ps_van_component_t g_tap;

ps_status_t TapOpen(const ps_van_params_t *params, const ps_van_callbacks_t *cb, ps_van_t **van_p)
{
    {
        std::lock_guard<std::mutex> lk(g_mu);
        g_cbs[cb->arg] = *cb;
    }
    return g_tcp_ops->open(params, cb, van_p);
}

void RegisterTap()
{
    const ps_van_component_t *tcp = nullptr;
    ASSERT_EQ(ps_van_find("tcp", &tcp), PS_OK);
    g_tcp_ops = tcp->ops;
    g_tap_ops = *tcp->ops;
    g_tap_ops.open = TapOpen;
    g_tap.name = "lanetap";
    g_tap.aliases = nullptr;
    g_tap.ops = &g_tap_ops;
    g_tap.unavailable = nullptr;
    ps_van_register(&g_tap);
}

struct LaneLog {
    std::atomic<int> calls{0};
    std::atomic<size_t> last_len{0};
    std::atomic<int> last_sender{0};
};

void OnLane(void *arg, ps_customer_t *, int sender, int, const uint8_t *, size_t len)
{
    LaneLog *log = static_cast<LaneLog *>(arg);
    log->last_len = len;
    log->last_sender = sender;
    log->calls++;
}

void OnRecv(void *, ps_customer_t *, const ps_msg_t *) {}

TEST(LaneAdmit, OversizedAndTruncatedLaneMessagesNeverReachACustomer)
{
    RegisterTap();
    ps_postoffice_t *po[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    small_job_opts_t o = {};
    o.van = "lanetap";
    ps_status_t st = small_job_start(&o, po);
    if (st != PS_OK) {
        small_job_finalize(po, 0);
        FAIL() << "the job did not start: " << ps_status_str(st);
    }
    ps_van_callbacks_t cb;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        ASSERT_EQ(g_cbs.count(po[SMALL_JOB_SERVER]), 1u);
        cb = g_cbs[po[SMALL_JOB_SERVER]];
    }
    ASSERT_NE(cb.deliver_lane, nullptr);

    const int app = 3;
    LaneLog log;
    ps_customer_t *cust = nullptr;
    ASSERT_EQ(ps_customer_create_lane(po[SMALL_JOB_SERVER], app, app, OnRecv, OnLane, &log, &cust),
              PS_OK);
    const int worker = 9; // the one worker's id (servers 8, workers 9 on)

    std::vector<uint8_t> buf(2 * PS_LANE_MAX_BYTES, 0xab);
    ps_lane_hdr_write(buf.data(), app, app);

    // Well formed, the longest there is: it arrives, payload length intact.
    cb.deliver_lane(cb.arg, worker, buf.data(), PS_LANE_MAX_BYTES);
    ASSERT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.last_len.load(), (size_t)PS_LANE_MAX_PAYLOAD);
    EXPECT_EQ(log.last_sender.load(), worker);
    // A header alone is an empty payload.
    cb.deliver_lane(cb.arg, worker, buf.data(), PS_LANE_HDR_LEN);
    ASSERT_EQ(log.calls.load(), 2);
    EXPECT_EQ(log.last_len.load(), 0u);

    // One byte over, and far over: dropped.
    cb.deliver_lane(cb.arg, worker, buf.data(), PS_LANE_MAX_BYTES + 1);
    cb.deliver_lane(cb.arg, worker, buf.data(), buf.size());
    // Shorter than the header: dropped.
    for (size_t len = 0; len < PS_LANE_HDR_LEN; ++len) {
        cb.deliver_lane(cb.arg, worker, buf.data(), len);
    }
    EXPECT_EQ(log.calls.load(), 2);

    // The lane still works after the refusals.
    cb.deliver_lane(cb.arg, worker, buf.data(), PS_LANE_HDR_LEN + 16);
    EXPECT_EQ(log.calls.load(), 3);
    EXPECT_EQ(log.last_len.load(), 16u);

    ps_customer_destroy(cust);
    EXPECT_EQ(small_job_finalize(po, 1), PS_OK);
}

} // namespace

// Jobs inside one process: a scheduler, servers and workers, each a
// postoffice started on its own thread over the TCP van on loopback.
// Covers start, barriers, customers and dispatch (pending messages, the
// recv_buffer hook, done functions), and the failure paths: a dead server,
// a silent node (heartbeats), a lost scheduler, finalize timing out.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

extern "C" {
#include "ps/base/buffer.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
// Internal: the registry, to check that unclaimed messages expire.
#include "ps/base/time.h"
#include "ps/net/postoffice_internal.h"
}

namespace {

int free_port()
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = -1;
    if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

ps_start_params_t make_params(ps_role_t role, int port, int servers, int workers)
{
    ps_start_params_t p;
    ps_start_params_init(&p);
    p.role = role;
    snprintf(p.scheduler_host, sizeof(p.scheduler_host), "127.0.0.1");
    snprintf(p.node_host, sizeof(p.node_host), "127.0.0.1");
    p.scheduler_port = port;
    p.num_servers = servers;
    p.num_workers = workers;
    p.start_timeout_ms = 15000;
    p.finalize_timeout_ms = 15000;
    snprintf(p.van, sizeof(p.van), "tcp");
    return p;
}

// The nodes of one job: index 0 the scheduler, then servers, then workers.
struct Job {
    std::vector<ps_postoffice_t *> po;
    std::vector<ps_status_t> status;
    int servers = 0;
    int workers = 0;

    ps_postoffice_t *sched() { return po[0]; }
    ps_postoffice_t *server(int i) { return po[1 + i]; }
    ps_postoffice_t *worker(int i) { return po[1 + servers + i]; }
};

using Tweak = std::function<void(int index, ps_start_params_t *)>;

Job start_job(int servers, int workers, Tweak tweak = nullptr, int do_barrier = 1)
{
    Job job;
    job.servers = servers;
    job.workers = workers;
    int n = 1 + servers + workers;
    job.po.assign(n, nullptr);
    job.status.assign(n, PS_INPROGRESS);
    int port = free_port();
    std::vector<std::thread> threads;
    for (int i = 0; i < n; i++) {
        ps_role_t role = i == 0 ? PS_ROLE_SCHEDULER
                                : (i <= servers ? PS_ROLE_SERVER : PS_ROLE_WORKER);
        ps_start_params_t p = make_params(role, port, servers, workers);
        if (tweak)
            tweak(i, &p);
        threads.emplace_back([&job, i, p, do_barrier] {
            job.status[i] = ps_postoffice_start(&p, do_barrier, &job.po[i]);
        });
    }
    for (auto &t : threads)
        t.join();
    return job;
}

// Finalizes every node still up, concurrently; returns their statuses.
std::vector<ps_status_t> finalize_all(Job &job, int do_barrier = 1)
{
    std::vector<ps_status_t> st(job.po.size(), PS_OK);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < job.po.size(); i++) {
        if (job.po[i] == nullptr)
            continue;
        threads.emplace_back([&, i] { st[i] = ps_postoffice_finalize(job.po[i], do_barrier); });
    }
    for (auto &t : threads)
        t.join();
    for (auto &p : job.po)
        p = nullptr;
    return st;
}

bool eventually(const std::function<bool()> &cond, int ms = 10000)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
        if (cond())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return cond();
}

ps_status_t send_bytes(ps_postoffice_t *po, int to, int app, int cust, int ts, bool request,
                       const std::vector<uint8_t> &bytes, int head = 0)
{
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.recver = to;
    msg.meta.app_id = app;
    msg.meta.customer_id = cust;
    msg.meta.timestamp = ts;
    msg.meta.request = request;
    msg.meta.head = head;
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    if (!bytes.empty()) {
        EXPECT_EQ(PS_OK, ps_slice_alloc(bytes.size(), 0, &s));
        memcpy(ps_slice_ptr(&s), bytes.data(), bytes.size());
        ps_msg_add_data(&msg, &s, PS_DATA_UINT8);
    }
    ps_status_t st = ps_postoffice_send(po, &msg);
    ps_msg_release(&msg);
    ps_slice_unref(&s);
    return st;
}

// A server customer that answers each request with its bytes reversed.
struct Echo {
    ps_postoffice_t *po;
    std::atomic<int> requests{0};
    bool answer = true;
};

void echo_recv(void *arg, ps_customer_t *, const ps_msg_t *msg)
{
    auto *e = static_cast<Echo *>(arg);
    if (!msg->meta.request)
        return;
    e->requests++;
    if (!e->answer)
        return;
    std::vector<uint8_t> v;
    if (msg->num_data > 0) {
        auto *p = static_cast<uint8_t *>(ps_slice_ptr(&msg->data[0]));
        v.assign(p, p + msg->data[0].len);
        std::reverse(v.begin(), v.end());
    }
    send_bytes(e->po, msg->meta.sender, msg->meta.app_id, msg->meta.customer_id,
               msg->meta.timestamp, false, v, msg->meta.head);
}

// A worker customer that checks answers and counts responses.
struct Client {
    std::mutex mu;
    std::vector<std::vector<uint8_t>> answers;
    std::atomic<int> done_calls{0};
    std::atomic<int> done_errors{0};
    std::atomic<int> hook_calls{0};
    ps_slice_t dest = PS_SLICE_EMPTY_INIT; // where the recv_buffer hook steers data
};

void client_recv(void *arg, ps_customer_t *c, const ps_msg_t *msg)
{
    auto *cl = static_cast<Client *>(arg);
    if (msg->meta.request)
        return;
    if (msg->num_data > 0) {
        auto *p = static_cast<uint8_t *>(ps_slice_ptr(&msg->data[0]));
        std::lock_guard<std::mutex> g(cl->mu);
        cl->answers.emplace_back(p, p + msg->data[0].len);
    }
    ps_customer_add_response(c, msg->meta.timestamp, 1);
}

void client_done(void *arg, ps_customer_t *, int, void *ctx, ps_status_t status)
{
    auto *cl = static_cast<Client *>(arg);
    cl->done_calls++;
    if (status != PS_OK)
        cl->done_errors++;
    (void)ctx;
}

ps_status_t client_hook(void *arg, ps_customer_t *c, const ps_meta_t *meta, unsigned index,
                        uint64_t len, ps_slice_t *slice_p)
{
    auto *cl = static_cast<Client *>(arg);
    void *ctx = nullptr;
    if (meta->request || index != 0 || ps_customer_request_ctx(c, meta->timestamp, &ctx) != PS_OK ||
        ctx != cl || len > cl->dest.len)
        return PS_ERR_NOT_FOUND;
    cl->hook_calls++;
    return ps_slice_sub(&cl->dest, 0, len, slice_p);
}

TEST(Postoffice, StartBarriersAndFinalize)
{
    Job job = start_job(2, 2);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]) << "node " << i;
    EXPECT_EQ(1, ps_postoffice_my_id(job.sched()));
    EXPECT_EQ(PS_ROLE_SCHEDULER, ps_postoffice_role(job.sched()));
    std::vector<int> ids;
    for (int i = 0; i < 2; i++) {
        ids.push_back(ps_postoffice_my_id(job.server(i)));
        ids.push_back(ps_postoffice_my_id(job.worker(i)));
    }
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ((std::vector<int>{8, 9, 10, 11}), ids);
    EXPECT_STREQ("tcp", ps_postoffice_van_name(job.worker(0)));
    EXPECT_NE(0u, ps_postoffice_capabilities(job.worker(0)) & PS_CAP_ZCOPY_SEND);

    int g[8];
    EXPECT_EQ(5, ps_postoffice_group_ids(job.worker(0), PS_GROUP_ALL, g, 8));
    EXPECT_EQ(1, g[0]);
    EXPECT_EQ(8, g[1]);
    EXPECT_EQ(10, g[2]);
    EXPECT_EQ(9, g[3]);
    EXPECT_EQ(11, g[4]);
    EXPECT_EQ(2, ps_postoffice_group_ids(job.worker(0), PS_GROUP_WORKER, g, 1)); // count > cap
    EXPECT_EQ(1, ps_postoffice_group_ids(job.worker(0), 10, g, 8));
    EXPECT_EQ(0, ps_postoffice_group_ids(job.worker(0), 12, g, 8));

    uint64_t b0, e0, b1, e1;
    ASSERT_EQ(PS_OK, ps_postoffice_server_key_range(job.worker(0), 0, &b0, &e0));
    ASSERT_EQ(PS_OK, ps_postoffice_server_key_range(job.worker(0), 1, &b1, &e1));
    EXPECT_EQ(0u, b0);
    EXPECT_EQ(e0, b1);
    EXPECT_EQ(UINT64_MAX / 2, e0);
    EXPECT_EQ(UINT64_MAX, e1);
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_postoffice_server_key_range(job.worker(0), 2, &b0, &e0));

    // Group barriers: workers only, then servers and workers, then all.
    std::vector<ps_status_t> st(5, PS_INPROGRESS);
    std::vector<std::thread> t;
    for (int i = 0; i < 2; i++)
        t.emplace_back([&, i] { st[i] = ps_postoffice_barrier(job.worker(i), PS_GROUP_WORKER, 10000); });
    for (auto &th : t)
        th.join();
    EXPECT_EQ(PS_OK, st[0]);
    EXPECT_EQ(PS_OK, st[1]);
    t.clear();
    for (int i = 0; i < 5; i++)
        t.emplace_back([&, i] { st[i] = ps_postoffice_barrier(job.po[i], PS_GROUP_ALL, 10000); });
    for (auto &th : t)
        th.join();
    for (int i = 0; i < 5; i++)
        EXPECT_EQ(PS_OK, st[i]) << i;

    // Not a member / not a group.
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_postoffice_barrier(job.server(0), PS_GROUP_WORKER, 100));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_postoffice_barrier(job.server(0), 9, 100));
    // A barrier nobody else joins ends at its deadline.
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_postoffice_barrier(job.server(0), PS_GROUP_SERVER, 100));

    uint64_t sent = 0, recvd = 0;
    ps_postoffice_traffic(job.worker(0), &sent, &recvd);
    EXPECT_GT(sent, 0u);
    EXPECT_GT(recvd, 0u);
    int dead[4];
    EXPECT_EQ(0, ps_postoffice_dead_nodes(job.worker(0), dead, 4));

    // The stale server barrier arrival above must not confuse finalize:
    // give the other server one so the group completes, then finalize.
    EXPECT_EQ(PS_OK, ps_postoffice_barrier(job.server(1), PS_GROUP_SERVER, 10000));
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, PingPongThroughCustomers)
{
    Job job = start_job(2, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    std::vector<Echo> echo(2);
    std::vector<ps_customer_t *> sc(2);
    for (int i = 0; i < 2; i++) {
        echo[i].po = job.server(i);
        ASSERT_EQ(PS_OK, ps_customer_create(job.server(i), 3, 3, echo_recv, &echo[i], &sc[i]));
    }
    ps_customer_t *dup;
    EXPECT_EQ(PS_ERR_EXISTS, ps_customer_create(job.server(0), 3, 3, echo_recv, &echo[0], &dup));

    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 3, 7, client_recv, &cl, &wc));
    ps_customer_set_done_func(wc, client_done, &cl);
    ASSERT_EQ(PS_OK, ps_slice_alloc(1 << 16, 0, &cl.dest));
    ps_customer_set_recv_buffer_func(wc, client_hook, &cl);
    EXPECT_EQ(job.worker(0), ps_customer_postoffice(wc));
    EXPECT_EQ(3, ps_customer_app_id(wc));
    EXPECT_EQ(7, ps_customer_id(wc));

    int servers[] = {8, 10};
    for (int round = 0; round < 20; round++) {
        int ts;
        ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 2, servers, 2, &ts));
        std::vector<uint8_t> bytes(round * 97 + 1);
        for (size_t i = 0; i < bytes.size(); i++)
            bytes[i] = static_cast<uint8_t>(i * 13 + round);
        for (int s : servers)
            ASSERT_EQ(PS_OK, send_bytes(job.worker(0), s, 3, 7, ts, true, bytes));
        ASSERT_EQ(PS_OK, ps_customer_wait(wc, ts, 10000));
        std::reverse(bytes.begin(), bytes.end());
        std::lock_guard<std::mutex> g(cl.mu);
        ASSERT_EQ(2u, cl.answers.size());
        EXPECT_EQ(bytes, cl.answers[0]);
        EXPECT_EQ(bytes, cl.answers[1]);
        cl.answers.clear();
    }
    EXPECT_EQ(20, cl.done_calls.load());
    EXPECT_EQ(0, cl.done_errors.load());

    // The recv_buffer hook: a request with the client as ctx gets its
    // answer written straight into cl.dest (when the van can do that).
    int ts;
    ASSERT_EQ(PS_OK, ps_customer_new_request_ctx(wc, 1, servers, 1, &cl, &ts));
    std::vector<uint8_t> bytes = {1, 2, 3, 4, 5};
    ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 3, 7, ts, true, bytes));
    ASSERT_EQ(PS_OK, ps_customer_wait(wc, ts, 10000));
    if (ps_postoffice_capabilities(job.worker(0)) & PS_CAP_RECV_INTO_DEST) {
        EXPECT_EQ(1, cl.hook_calls.load());
        auto *d = static_cast<uint8_t *>(ps_slice_ptr(&cl.dest));
        EXPECT_EQ((std::vector<uint8_t>{5, 4, 3, 2, 1}), std::vector<uint8_t>(d, d + 5));
    }
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps_customer_request_ctx(wc, ts, nullptr));

    for (int i = 0; i < 2; i++)
        ps_customer_destroy(sc[i]);
    ps_customer_destroy(wc);
    ps_slice_unref(&cl.dest);
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, MessagesWaitForTheirCustomer)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 5, 0, client_recv, &cl, &wc));
    int servers[] = {8};
    int ts[3];
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts[i]));
        ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 5, 0, ts[i], true, {uint8_t(i)}));
    }
    // The server's app 5 registers only now; the three requests waited
    // (in order) and are answered.
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_customer_wait(wc, ts[0], 50));
    Echo echo;
    echo.po = job.server(0);
    ps_customer_t *sc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 5, 5, echo_recv, &echo, &sc));
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(PS_OK, ps_customer_wait(wc, ts[i], 10000));
    {
        std::lock_guard<std::mutex> g(cl.mu);
        ASSERT_EQ(3u, cl.answers.size());
        for (int i = 0; i < 3; i++)
            EXPECT_EQ(std::vector<uint8_t>{uint8_t(i)}, cl.answers[i]);
    }
    ps_customer_destroy(sc);
    ps_customer_destroy(wc);
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, UnclaimedMessagesExpire)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 9, 0, i, true, {uint8_t(i)}));
    ps__registry_t *reg = ps__postoffice_registry(job.server(0));
    ASSERT_TRUE(eventually([&] { return ps__registry_num_pending(reg) == 3; }));
    // Not yet expired: the next expiry is PS__PENDING_TIMEOUT_NS away.
    uint64_t now = ps_time_now_ns();
    EXPECT_GT(ps__registry_expire_pending(reg, now), now);
    EXPECT_EQ(3u, ps__registry_num_pending(reg));
    // As the timer thread would see it 6 s later: dropped.
    EXPECT_EQ(0u, ps__registry_expire_pending(reg, now + 6 * PS_NSEC_PER_SEC));
    EXPECT_EQ(0u, ps__registry_num_pending(reg));
    Echo echo;
    echo.po = job.server(0);
    ps_customer_t *sc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 9, 9, echo_recv, &echo, &sc));
    EXPECT_EQ(0, echo.requests.load());
    ps_customer_destroy(sc);
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, DeadServerFailsRequestsWithPeerGone)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Echo echo;
    echo.po = job.server(0);
    echo.answer = false; // requests stay outstanding
    ps_customer_t *sc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 0, 0, echo_recv, &echo, &sc));
    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 0, 0, client_recv, &cl, &wc));
    ps_customer_set_done_func(wc, client_done, &cl);
    int servers[] = {8};
    int ts;
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts));
    ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 0, 0, ts, true, {42}));
    ASSERT_TRUE(eventually([&] { return echo.requests.load() == 1; }));

    // The server leaves without a barrier: it is gone for the others.
    ps_customer_destroy(sc);
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(job.server(0), 0));
    job.po[1] = nullptr;

    EXPECT_EQ(PS_ERR_PEER_GONE, ps_customer_wait(wc, ts, 10000));
    EXPECT_EQ(1, cl.done_errors.load());
    // The scheduler declares it dead and tells the worker.
    int dead[4] = {0};
    ASSERT_TRUE(eventually([&] { return ps_postoffice_dead_nodes(job.worker(0), dead, 4) == 1; }));
    EXPECT_EQ(8, dead[0]);
    EXPECT_EQ(1, ps_postoffice_dead_nodes(job.sched(), dead, 4));
    int ts2 = -1;
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_customer_new_request(wc, 1, servers, 1, &ts2));
    EXPECT_EQ(PS_ERR_PEER_GONE, send_bytes(job.worker(0), 8, 0, 0, 0, true, {1}));
    // Barriers that include the dead server cannot complete.
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_postoffice_barrier(job.worker(0), PS_GROUP_ALL, 10000));
    EXPECT_EQ(PS_OK, ps_postoffice_barrier(job.worker(0), PS_GROUP_WORKER, 10000));

    ps_customer_destroy(wc);
    auto st = finalize_all(job);
    EXPECT_EQ(PS_ERR_PEER_GONE, st[0]); // finalize barrier fails fast, no hang
    EXPECT_EQ(PS_ERR_PEER_GONE, st[2]);
}

TEST(Postoffice, SilentNodeIsDeclaredDead)
{
    // The worker sends heartbeats every second, the server none: after
    // PS_HEARTBEAT_TIMEOUT the scheduler declares the server dead.
    Job job = start_job(1, 1, [](int i, ps_start_params_t *p) {
        p->heartbeat_timeout_s = 2;
        p->heartbeat_interval_s = i == 1 ? 0 : 1;
    });
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    int dead[4] = {0};
    ASSERT_TRUE(eventually([&] { return ps_postoffice_dead_nodes(job.worker(0), dead, 4) == 1; },
                           15000));
    EXPECT_EQ(8, dead[0]);
    EXPECT_EQ(1, ps_postoffice_dead_nodes(job.sched(), dead, 4));
    // The worker keeps its heartbeats: still alive a while later.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    EXPECT_EQ(1, ps_postoffice_dead_nodes(job.sched(), dead, 4));
    EXPECT_EQ(8, dead[0]);
    finalize_all(job, 0);
}

TEST(Postoffice, LostSchedulerEndsEveryWait)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 0, 0, client_recv, &cl, &wc));
    int servers[] = {8};
    int ts;
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts));

    std::atomic<int> barrier_status{1};
    std::thread waiter([&] {
        barrier_status = ps_postoffice_barrier(job.worker(0), PS_GROUP_ALL, 20000);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(job.sched(), 0));
    job.po[0] = nullptr;
    waiter.join();
    EXPECT_EQ(PS_ERR_PEER_GONE, barrier_status.load());
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_customer_wait(wc, ts, 10000));
    int ts2;
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_customer_new_request(wc, 1, servers, 1, &ts2));
    ps_customer_destroy(wc);
    for (ps_status_t s : finalize_all(job))
        EXPECT_NE(PS_INPROGRESS, s); // returns (without hanging)
}

TEST(Postoffice, FinalizeTimesOutInsteadOfHanging)
{
    Job job = start_job(1, 2, [](int, ps_start_params_t *p) { p->finalize_timeout_ms = 300; });
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    // Worker 1 does not come to the finalize barrier (yet).
    ps_postoffice_t *late = job.worker(1);
    job.po[3] = nullptr;
    auto st = finalize_all(job);
    for (int i = 0; i < 3; i++)
        EXPECT_EQ(PS_ERR_TIMED_OUT, st[i]) << i;
    EXPECT_NE(PS_INPROGRESS, ps_postoffice_finalize(late, 1));
}

TEST(Postoffice, CustomerOutlivesItsPostoffice)
{
    Job job = start_job(0, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 0, 0, client_recv, &cl, &wc));
    ps_customer_set_done_func(wc, client_done, &cl);
    int ts;
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, nullptr, 0, &ts));
    finalize_all(job);
    // Finalize failed the outstanding request and detached the customer.
    EXPECT_EQ(PS_ERR_SHUTDOWN, ps_customer_wait(wc, ts, 0));
    EXPECT_EQ(1, cl.done_errors.load());
    EXPECT_EQ(nullptr, ps_customer_postoffice(wc));
    EXPECT_EQ(PS_ERR_SHUTDOWN, ps_customer_new_request(wc, 1, nullptr, 0, &ts));
    ps_customer_destroy(wc);
}

TEST(Postoffice, NoSchedulerTimesOut)
{
    ps_start_params_t p = make_params(PS_ROLE_WORKER, free_port(), 1, 1);
    p.start_timeout_ms = 400;
    ps_postoffice_t *po = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_postoffice_start(&p, 1, &po));
    EXPECT_EQ(nullptr, po);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Postoffice, BadParamsAreRejected)
{
    ps_postoffice_t *po = nullptr;
    ps_start_params_t p = make_params(PS_ROLE_JOINT, 1234, 1, 1);
    EXPECT_EQ(PS_ERR_UNSUPPORTED, ps_postoffice_start(&p, 1, &po));
    p = make_params(PS_ROLE_WORKER, 0, 1, 1);
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &po));
    p = make_params(PS_ROLE_WORKER, 1234, 1, 1);
    p.preferred_rank = 1;
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &po));
    p = make_params(PS_ROLE_WORKER, 1234, 1, 1);
    snprintf(p.van, sizeof(p.van), "nosuchvan");
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps_postoffice_start(&p, 1, &po));
    EXPECT_EQ(nullptr, po);
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_postoffice_start(&p, 1, nullptr));
}

TEST(StartParams, FromEnvironment)
{
    setenv("DMLC_ROLE", "server", 1);
    setenv("DMLC_PS_ROOT_URI", "10.1.2.3", 1);
    setenv("DMLC_PS_ROOT_PORT", "9000", 1);
    setenv("DMLC_NUM_SERVER", "2", 1);
    setenv("DMLC_NUM_WORKER", "3", 1);
    setenv("DMLC_RANK", "1", 1);
    setenv("PS_HEARTBEAT_INTERVAL", "5", 1);
    setenv("PS_BUSY_POLL", "1", 1);
    ps_start_params_t p;
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(PS_ROLE_SERVER, p.role);
    EXPECT_STREQ("10.1.2.3", p.scheduler_host);
    EXPECT_EQ(9000, p.scheduler_port);
    EXPECT_EQ(2, p.num_servers);
    EXPECT_EQ(3, p.num_workers);
    EXPECT_EQ(1, p.preferred_rank);
    EXPECT_EQ(5, p.heartbeat_interval_s);
    EXPECT_EQ(1, p.busy_poll);
    EXPECT_EQ(120000, p.start_timeout_ms);
    EXPECT_STREQ("", p.van);

    // DMLC_WORKER_ID is a worker's preferred rank when DMLC_RANK is unset.
    unsetenv("DMLC_RANK");
    setenv("DMLC_ROLE", "worker", 1);
    setenv("DMLC_WORKER_ID", "2", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(2, p.preferred_rank);

    setenv("DMLC_ROLE", "emperor", 1);
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    setenv("DMLC_ROLE", "worker", 1);
    setenv("DMLC_PS_ROOT_PORT", "70000", 1);
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    unsetenv("DMLC_PS_ROOT_PORT");
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    for (const char *v : {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER",
                          "DMLC_WORKER_ID", "PS_HEARTBEAT_INTERVAL", "PS_BUSY_POLL"})
        unsetenv(v);
}

} // namespace

// Jobs inside one process: a scheduler, servers and workers, each a
// postoffice started on its own thread over the TCP van on loopback.
// Covers start, barriers, customers and dispatch (pending messages, the
// recv_buffer hook, done functions), and the failure paths: a dead server,
// a silent node (heartbeats), a lost scheduler, finalize timing out, node
// event callbacks, recovery of a dead node by a new one, a node too many,
// nodes started with different counts, and PS_RESEND with PS_DROP_MSG.
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
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "tests/lib/free_port.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/net/customer.h"
#include "ps/net/group.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"
// Internal: the registry, to check that unclaimed messages expire.
#include "ps/base/time.h"
#include "ps/net/postoffice_internal.h"
}

namespace {


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
    int port = 0;

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
    int port = test_free_port(0);
    job.port = port;
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

// The van asks the registry about every segment of every message; a hook
// is asked only about the segments its customer chose, and with no hook
// (or only others') nothing is looked up at all.
ps_status_t counting_hook(void *arg, ps_customer_t *, const ps_meta_t *, unsigned, uint64_t,
                          ps_slice_t *)
{
    static_cast<std::atomic<int> *>(arg)->fetch_add(1);
    return PS_ERR_NOT_FOUND;
}

TEST(Postoffice, RecvBufferHookIsAskedOnlyAboutItsSegments)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 4, 2, client_recv, &cl, &wc));
    ps__registry_t *reg = ps__postoffice_registry(job.worker(0));
    ps_meta_t meta;
    ps_meta_init(&meta);
    meta.app_id = 4;
    meta.customer_id = 2;
    meta.sender = 8;
    std::atomic<int> calls{0};
    auto ask = [&](unsigned index) {
        ps_slice_t s = PS_SLICE_EMPTY_INIT;
        return ps__registry_recv_buffer(reg, &meta, index, 8, &s);
    };

    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(0)); // no hook yet
    ps_customer_set_recv_buffer_func(wc, counting_hook, &calls);
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(0));
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(1));
    EXPECT_EQ(2, calls.load()); // by default, every segment
    ps_customer_set_recv_buffer_segments(wc, 1u << 1);
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(0));
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(2));
    EXPECT_EQ(2, calls.load());
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(1));
    EXPECT_EQ(3, calls.load());
    meta.customer_id = 3; // another customer's message: not this hook's
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(1));
    EXPECT_EQ(3, calls.load());
    meta.customer_id = 2;
    ps_customer_set_recv_buffer_func(wc, nullptr, nullptr);
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(1));
    ps_customer_set_recv_buffer_func(wc, counting_hook, &calls);
    ps_customer_destroy(wc); // unlinked: its segments are nobody's now
    EXPECT_EQ(PS_ERR_NOT_FOUND, ask(1));
    EXPECT_EQ(3, calls.load());
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

// More apps than the registry has fast slots: every customer gets its
// answers, whether its deliveries found it with the lock or without.
TEST(Postoffice, MoreCustomersThanFastSlots)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    const int kApps = 12, kRounds = 3;
    std::vector<std::unique_ptr<Echo>> echoes;
    std::vector<std::unique_ptr<Client>> clients;
    std::vector<ps_customer_t *> sc(kApps), wc(kApps);
    for (int a = 0; a < kApps; a++) {
        echoes.emplace_back(new Echo);
        echoes.back()->po = job.server(0);
        clients.emplace_back(new Client);
        ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 20 + a, 20 + a, echo_recv,
                                            echoes.back().get(), &sc[a]));
        ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 20 + a, a, client_recv,
                                            clients.back().get(), &wc[a]));
    }
    int servers[] = {8};
    for (int r = 0; r < kRounds; r++) {
        std::vector<int> ts(kApps);
        for (int a = 0; a < kApps; a++) {
            ASSERT_EQ(PS_OK, ps_customer_new_request(wc[a], 1, servers, 1, &ts[a]));
            ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 20 + a, a, ts[a], true,
                                        {uint8_t(a), uint8_t(r)}));
        }
        for (int a = 0; a < kApps; a++)
            ASSERT_EQ(PS_OK, ps_customer_wait(wc[a], ts[a], 10000));
    }
    for (int a = 0; a < kApps; a++) {
        EXPECT_EQ(kRounds, echoes[a]->requests.load());
        std::lock_guard<std::mutex> g(clients[a]->mu);
        ASSERT_EQ(size_t(kRounds), clients[a]->answers.size());
        for (int r = 0; r < kRounds; r++)
            EXPECT_EQ((std::vector<uint8_t>{uint8_t(r), uint8_t(a)}), clients[a]->answers[r]);
    }
    for (int a = 0; a < kApps; a++) {
        ps_customer_destroy(sc[a]);
        ps_customer_destroy(wc[a]);
    }
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

// A server customer whose receive function waits until told to go on.
struct Blocker {
    std::atomic<bool> entered{false};
    std::atomic<bool> release{false};
    std::atomic<bool> left{false};
};

void blocker_recv(void *arg, ps_customer_t *, const ps_msg_t *msg)
{
    auto *b = static_cast<Blocker *>(arg);
    if (!msg->meta.request)
        return;
    b->entered = true;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!b->release && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    b->left = true;
}

// Destroy waits for a delivery running in the customer, and the customer
// created next for the same app (taking over its routing) gets what comes
// after.
TEST(Postoffice, DestroyWaitsForARunningDelivery)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Blocker b;
    ps_customer_t *sc, *wc;
    Client cl;
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 6, 6, blocker_recv, &b, &sc));
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 6, 0, client_recv, &cl, &wc));
    int servers[] = {8};
    int ts;
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts));
    ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 6, 0, ts, true, {1}));
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!b.entered && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(b.entered.load());

    std::atomic<bool> destroyed{false}, left_first{false};
    std::thread d([&] {
        ps_customer_destroy(sc);
        left_first = b.left.load();
        destroyed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(destroyed.load());
    b.release = true;
    d.join();
    EXPECT_TRUE(left_first.load());

    Echo echo;
    echo.po = job.server(0);
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 6, 6, echo_recv, &echo, &sc));
    ps_customer_fail_request(wc, ts, PS_ERR_PROTOCOL); // the first was never answered
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts));
    ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 6, 0, ts, true, {2, 3}));
    ASSERT_EQ(PS_OK, ps_customer_wait(wc, ts, 10000));
    {
        std::lock_guard<std::mutex> g(cl.mu);
        ASSERT_EQ(1u, cl.answers.size());
        EXPECT_EQ((std::vector<uint8_t>{3, 2}), cl.answers[0]);
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
    // As the timer thread would see it once the window passed: dropped.
    EXPECT_EQ(0u, ps__registry_expire_pending(reg, now + PS__PENDING_TIMEOUT_NS + PS_NSEC_PER_SEC));
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
    // Finalize returns at once, and says the job did not end together.
    auto st = finalize_all(job);
    for (size_t i = 1; i < st.size(); i++)
        EXPECT_EQ(PS_ERR_PEER_GONE, st[i]) << i;
}

// Node events seen by one postoffice.
struct Events {
    std::mutex mu;
    std::vector<std::pair<int, ps_status_t>> seen;

    size_t size()
    {
        std::lock_guard<std::mutex> g(mu);
        return seen.size();
    }
    std::pair<int, ps_status_t> at(size_t i)
    {
        std::lock_guard<std::mutex> g(mu);
        return seen.at(i);
    }
};

void record_event(void *arg, ps_postoffice_t *, int node_id, ps_status_t why)
{
    auto *e = static_cast<Events *>(arg);
    std::lock_guard<std::mutex> g(e->mu);
    e->seen.emplace_back(node_id, why);
}

TEST(Postoffice, NodeFailedCallbacks)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Events on_worker, on_sched, removed;
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_failed(job.worker(0), record_event, &on_worker));
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_failed(job.sched(), record_event, &on_sched));
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_failed(job.worker(0), record_event, &removed));
    ps_postoffice_remove_node_callback(job.worker(0), record_event, &removed);
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_postoffice_on_node_failed(job.worker(0), nullptr, nullptr));

    // The server leaves without a barrier: dead for the others.
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(job.server(0), 0));
    job.po[1] = nullptr;
    ASSERT_TRUE(eventually([&] { return on_worker.size() >= 1 && on_sched.size() >= 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(1u, on_worker.size()); // once per death
    ASSERT_EQ(1u, on_sched.size());
    EXPECT_EQ(8, on_worker.at(0).first);
    EXPECT_EQ(PS_ERR_PEER_GONE, on_worker.at(0).second);
    EXPECT_EQ(8, on_sched.at(0).first);
    EXPECT_EQ(0u, removed.size());

    // A bounded number of registrations.
    Events many;
    int added = 0;
    while (ps_postoffice_on_node_recovered(job.worker(0), record_event, &many) == PS_OK)
        added++;
    EXPECT_EQ(PS_NODE_CALLBACKS_MAX, added);
    EXPECT_EQ(PS_ERR_NO_RESOURCE, ps_postoffice_on_node_recovered(job.worker(0), record_event,
                                                                 &many));
    ps_postoffice_remove_node_callback(job.worker(0), record_event, &many);
    EXPECT_EQ(PS_OK, ps_postoffice_on_node_recovered(job.worker(0), record_event, &many));

    // Losing the scheduler is an event too (node id 1).
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(job.sched(), 0));
    job.po[0] = nullptr;
    ASSERT_TRUE(eventually([&] { return on_worker.size() == 2; }));
    EXPECT_EQ(1, on_worker.at(1).first);
    EXPECT_EQ(PS_ERR_PEER_GONE, on_worker.at(1).second);
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_postoffice_wait_alive(job.worker(0), PS_GROUP_SERVER, 1000));
    finalize_all(job, 0);
}

TEST(Postoffice, RecoveryTakesOverADeadWorker)
{
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    EXPECT_EQ(0, ps_postoffice_is_recovery(job.worker(0)));
    Echo echo;
    echo.po = job.server(0);
    ps_customer_t *sc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 0, 0, echo_recv, &echo, &sc));
    Events failed, recovered, sched_recovered;
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_failed(job.server(0), record_event, &failed));
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_recovered(job.server(0), record_event, &recovered));
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_recovered(job.sched(), record_event,
                                                     &sched_recovered));

    // The worker dies (leaves without a barrier).
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(job.worker(0), 0));
    job.po[2] = nullptr;
    ASSERT_TRUE(eventually([&] { return failed.size() == 1; }));
    EXPECT_EQ(9, failed.at(0).first);
    int dead[4];
    EXPECT_EQ(1, ps_postoffice_dead_nodes(job.server(0), dead, 4));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_postoffice_wait_alive(job.server(0), PS_GROUP_WORKER, 50));
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_postoffice_barrier(job.server(0), PS_GROUP_ALL, 5000));

    // The server waits for a replacement while a new worker process starts.
    std::atomic<int> alive_status{1};
    std::thread waiter([&] {
        alive_status = ps_postoffice_wait_alive(job.server(0), PS_GROUP_WORKER, 20000);
    });
    ps_start_params_t p = make_params(PS_ROLE_WORKER, job.port, 1, 1);
    ps_postoffice_t *fresh = nullptr;
    // A restart of this job's worker: it is given the job's id.
    std::string job_id = ps_postoffice_job_id(job.sched());
    EXPECT_EQ(job_id, ps_postoffice_job_id(job.server(0)));
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_JOB_ID, job_id.c_str()));
    ps_status_t fresh_st = ps_postoffice_start(&p, 1, &fresh); // no start barrier for it
    ps_config_clear_overrides();
    ASSERT_EQ(PS_OK, fresh_st);
    job.po[2] = fresh;
    EXPECT_EQ(job_id, ps_postoffice_job_id(fresh));
    EXPECT_EQ(1, ps_postoffice_is_recovery(fresh));
    EXPECT_EQ(9, ps_postoffice_my_id(fresh));
    waiter.join();
    EXPECT_EQ(PS_OK, alive_status.load());
    ASSERT_TRUE(eventually([&] { return recovered.size() == 1 && sched_recovered.size() == 1; }));
    EXPECT_EQ(9, recovered.at(0).first);
    EXPECT_EQ(PS_OK, recovered.at(0).second);
    EXPECT_EQ(0, ps_postoffice_dead_nodes(job.server(0), dead, 4));
    EXPECT_EQ(0, ps_postoffice_dead_nodes(job.sched(), dead, 4));

    // The new worker talks to the server, and the job's barriers work.
    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(fresh, 0, 0, client_recv, &cl, &wc));
    for (int i = 0; i < 5; i++) {
        int servers[] = {8};
        int ts;
        ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts));
        ASSERT_EQ(PS_OK, send_bytes(fresh, 8, 0, 0, ts, true, {1, 2, (uint8_t)i}));
        ASSERT_EQ(PS_OK, ps_customer_wait(wc, ts, 10000));
    }
    {
        std::lock_guard<std::mutex> g(cl.mu);
        ASSERT_EQ(5u, cl.answers.size());
        EXPECT_EQ((std::vector<uint8_t>{4, 2, 1}), cl.answers[4]);
    }
    std::vector<ps_status_t> bst(3, PS_INPROGRESS);
    std::vector<std::thread> bt;
    for (int i = 0; i < 3; i++)
        bt.emplace_back([&, i] { bst[i] = ps_postoffice_barrier(job.po[i], PS_GROUP_ALL, 10000); });
    for (auto &t : bt)
        t.join();
    for (int i = 0; i < 3; i++)
        EXPECT_EQ(PS_OK, bst[i]) << i;
    ps_customer_destroy(wc);
    ps_customer_destroy(sc);
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

// Instance groups (DMLC_GROUP_SIZE 2, one group of each role): nodes that
// ask for an instance get ranks of it, each talks to its own instance's
// peers only, and when worker instance 1 dies a new worker of instance 0
// cannot take its place (refused as a node too many) while one of
// instance 1 does.
TEST(Postoffice, InstanceGroupsPairPeersAndRecoveryKeepsTheInstance)
{
    Job job = start_job(2, 2, [](int i, ps_start_params_t *p) {
        p->group_size = 2;
        p->num_servers = 1;
        p->num_workers = 1;
        p->heartbeat_interval_s = 1;
        p->heartbeat_timeout_s = 2;
        if (i > 0)
            p->instance = (i - 1) % 2; // server 0 and worker 0 ask for instance 0
    });
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]) << i;
    for (int i = 0; i < 2; i++) {
        EXPECT_EQ(i, ps_postoffice_instance(job.server(i)));
        EXPECT_EQ(i, ps_postoffice_instance(job.worker(i)));
        EXPECT_EQ(i, ps_postoffice_my_rank(job.worker(i)));
        EXPECT_EQ(1, ps_postoffice_num_servers(job.worker(i))); // groups
        EXPECT_EQ(2, ps_postoffice_group_size(job.worker(i)));
        EXPECT_EQ(ps_server_rank_to_id(i), ps_postoffice_peer_id(job.worker(i), PS_ROLE_SERVER, 0));
        EXPECT_EQ(ps_worker_rank_to_id(i), ps_postoffice_peer_id(job.server(i), PS_ROLE_WORKER, 0));
        EXPECT_EQ(-1, ps_postoffice_peer_id(job.worker(i), PS_ROLE_SERVER, 1)); // one group
        EXPECT_EQ(0, ps_postoffice_peer_rank(job.server(i), ps_worker_rank_to_id(i)));
        EXPECT_EQ(-1, ps_postoffice_peer_rank(job.server(i), ps_worker_rank_to_id(1 - i)));
    }
    EXPECT_EQ(4, ps_postoffice_group_ids(job.sched(), PS_GROUP_SERVER | PS_GROUP_WORKER, nullptr, 0));

    // Worker instance 1 dies; a new process of instance 1 takes its place.
    Events failed;
    ASSERT_EQ(PS_OK, ps_postoffice_on_node_failed(job.server(1), record_event, &failed));
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(job.worker(1), 0));
    job.po[4] = nullptr;
    ASSERT_TRUE(eventually([&] { return failed.size() == 1; }));
    EXPECT_EQ(ps_worker_rank_to_id(1), failed.at(0).first);
    ps_start_params_t p = make_params(PS_ROLE_WORKER, job.port, 1, 1);
    p.group_size = 2;
    p.heartbeat_interval_s = 1;
    p.heartbeat_timeout_s = 2;
    std::string job_id = ps_postoffice_job_id(job.sched());
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_JOB_ID, job_id.c_str()));
    ps_postoffice_t *fresh = nullptr;
    p.instance = 0;
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &fresh));
    EXPECT_EQ(nullptr, fresh);
    p.instance = 1;
    ps_status_t st = ps_postoffice_start(&p, 1, &fresh);
    ps_config_clear_overrides();
    ASSERT_EQ(PS_OK, st);
    job.po[4] = fresh;
    EXPECT_EQ(1, ps_postoffice_is_recovery(fresh));
    EXPECT_EQ(ps_worker_rank_to_id(1), ps_postoffice_my_id(fresh));
    EXPECT_EQ(1, ps_postoffice_instance(fresh));
    EXPECT_EQ(ps_server_rank_to_id(1), ps_postoffice_peer_id(fresh, PS_ROLE_SERVER, 0));
    for (ps_status_t s : finalize_all(job, 0))
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, ANodeTooManyIsRefused)
{
    // Everyone alive: a late worker the job accepts as a replacement
    // (PS_ALLOW_RECOVERY on the scheduler) waits PS_HEARTBEAT_TIMEOUT + 2 s
    // for a dead one to take over, then is refused as a node too many.
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_ALLOW_RECOVERY, "1"));
    Job job = start_job(0, 1, [](int, ps_start_params_t *p) {
        p->heartbeat_interval_s = 1;
        p->heartbeat_timeout_s = 2;
    });
    ps_config_clear_overrides();
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    ps_start_params_t p = make_params(PS_ROLE_WORKER, job.port, 0, 1);
    ps_postoffice_t *extra = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &extra));
    // It waited for a node to die before it was refused.
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    EXPECT_EQ(nullptr, extra);
    int dead[4];
    EXPECT_EQ(0, ps_postoffice_dead_nodes(job.sched(), dead, 4));
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, ALateNodeOfAnotherJobIsRefusedAtOnce)
{
    // A worker without the job's id (or a wrong one) registering after the
    // job started is refused at once: no waiting for a node to die.
    Job job = start_job(0, 1, [](int, ps_start_params_t *p) {
        p->heartbeat_interval_s = 1;
        p->heartbeat_timeout_s = 20;
    });
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    for (const char *claim : {"", "not-this-job"}) {
        if (claim[0] != '\0') {
            ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_JOB_ID, claim));
        }
        ps_start_params_t p = make_params(PS_ROLE_WORKER, job.port, 0, 1);
        ps_postoffice_t *extra = nullptr;
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &extra)) << claim;
        ps_config_clear_overrides();
        // Well under PS_HEARTBEAT_TIMEOUT + 2 s, the stand-by wait.
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15)) << claim;
        EXPECT_EQ(nullptr, extra);
    }
    int dead[4];
    EXPECT_EQ(0, ps_postoffice_dead_nodes(job.sched(), dead, 4));
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

// Runs `fn` with the log going to a file; returns what was logged.
std::string logged_during(const std::function<void()> &fn)
{
    char path[] = "/tmp/po_log_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return "";
    unlink(path);
    ps_log_set_fd(fd);
    fn();
    ps_log_set_fd(-1);
    std::string out;
    char buf[4096];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        out.append(buf, (size_t)n);
    close(fd);
    return out;
}

size_t lines_with(const std::string &log, const std::string &needle)
{
    size_t n = 0;
    size_t at = 0;
    while (at < log.size()) {
        size_t end = log.find('\n', at);
        if (end == std::string::npos)
            end = log.size();
        if (log.substr(at, end - at).find(needle) != std::string::npos)
            n++;
        at = end + 1;
    }
    return n;
}

TEST(Postoffice, EveryBadValueStopsTheStart)
{
    // One variable of each type that is read with a fallback deep inside
    // the start: a value that does not parse must stop it, not be ignored.
    // PS_TCP_CONNS_PER_PEER is the tcp van's own (a table it registers).
    struct Bad {
        const char *value;
        const char *name;
    } bad[] = {
        {"1x", "PS_MAX_META_BYTES"},     // size
        {"2x", "PS_TCP_CONNS_PER_PEER"}, // int
        {"maybe", "PS_BIND_ANY"},        // bool
    };
    for (const Bad &b : bad) {
        ps_config_id_t id;
        ASSERT_EQ(PS_OK, ps_config_find(b.name, &id)) << b.name;
        ASSERT_EQ(PS_OK, ps_config_set(id, b.value));
        ps_start_params_t p = make_params(PS_ROLE_SCHEDULER, test_free_port(false), 0, 1);
        ps_postoffice_t *po = nullptr;
        ps_status_t st = PS_OK;
        std::string log = logged_during([&] { st = ps_postoffice_start(&p, 1, &po); });
        ps_config_clear_overrides();
        EXPECT_EQ(PS_ERR_CONFIG, st) << b.name;
        EXPECT_EQ(nullptr, po) << b.name;
        EXPECT_NE(std::string::npos, log.find(b.name)) << log;
        EXPECT_NE(std::string::npos, log.find(b.value)) << log;
        EXPECT_NE(std::string::npos, log.find("not starting")) << log;
    }
}

TEST(Postoffice, AnUnknownSchedulerNameIsSaidOnce)
{
    // A name that does not resolve: said once (not every 200 ms), and the
    // start ends: at once for a name that does not exist, at the deadline
    // for a resolver that does not answer.
    ps_start_params_t p = make_params(PS_ROLE_WORKER, 9, 0, 1);
    snprintf(p.scheduler_host, sizeof(p.scheduler_host), "no-such-host.invalid");
    p.start_timeout_ms = 3000;
    ps_postoffice_t *po = nullptr;
    ps_status_t st = PS_OK;
    auto t0 = std::chrono::steady_clock::now();
    std::string log = logged_during([&] { st = ps_postoffice_start(&p, 1, &po); });
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_TRUE(st == PS_ERR_CONFIG || st == PS_ERR_TIMED_OUT) << ps_status_name(st);
    EXPECT_EQ(nullptr, po);
    EXPECT_LT(took, std::chrono::seconds(20));
    EXPECT_GE(lines_with(log, "no-such-host.invalid"), 1u) << log;
    EXPECT_LE(lines_with(log, "no-such-host.invalid"), 2u) << log;
    EXPECT_NE(std::string::npos, log.find("DMLC_PS_ROOT_URI")) << log;
}

TEST(Postoffice, ARefusedConnectionIsSaidRefused)
{
    // Nothing listens at the scheduler's port: the connection is refused,
    // and the log says so rather than "no answer".
    int port = test_free_port(false);
    ASSERT_GT(port, 0);
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_CONNECT_TIMEOUT_MS, "300"));
    ps_start_params_t p = make_params(PS_ROLE_WORKER, port, 0, 1);
    p.start_timeout_ms = 1500;
    ps_postoffice_t *po = nullptr;
    ps_status_t st = PS_OK;
    std::string log = logged_during([&] { st = ps_postoffice_start(&p, 1, &po); });
    ps_config_clear_overrides();
    EXPECT_EQ(PS_ERR_TIMED_OUT, st);
    EXPECT_NE(std::string::npos, log.find("refused")) << log;
    EXPECT_EQ(std::string::npos, log.find("no answer within")) << log;
}

TEST(Postoffice, ASecondSchedulerOnThePortNamesTheRootPort)
{
    Job job = start_job(0, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    ps_start_params_t p = make_params(PS_ROLE_SCHEDULER, job.port, 0, 1);
    ps_postoffice_t *po = nullptr;
    ps_status_t st = PS_OK;
    std::string log = logged_during([&] { st = ps_postoffice_start(&p, 1, &po); });
    EXPECT_EQ(PS_ERR_ADDRESS_IN_USE, st);
    EXPECT_NE(std::string::npos, log.find("DMLC_PS_ROOT_PORT")) << log;
    EXPECT_EQ(std::string::npos, log.find("DMLC_PORT ")) << log;
    for (ps_status_t s : finalize_all(job))
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, TheAvailableVansArePrintedWholeAfterALongName)
{
    // A van name long enough to fill a log line: the list of the vans that
    // exist must still be printed whole.
    std::string name(3000, 'v');
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_DMLC_PS_VAN_TYPE, name.c_str()));
    ps_start_params_t p = make_params(PS_ROLE_SCHEDULER, test_free_port(false), 0, 1);
    p.van[0] = '\0';
    ps_postoffice_t *po = nullptr;
    ps_status_t st = PS_OK;
    std::string log = logged_during([&] { st = ps_postoffice_start(&p, 1, &po); });
    ps_config_clear_overrides();
    EXPECT_EQ(PS_ERR_NOT_FOUND, st);
    EXPECT_EQ(nullptr, po);
    // Every van this binary has, in full, and the list ends its line.
    size_t at = log.find("available");
    ASSERT_NE(std::string::npos, at) << log;
    std::string line = log.substr(at, log.find('\n', at) - at);
    for (const char *van : {"tcp (also zmq,0)", "shm"})
        EXPECT_NE(std::string::npos, line.find(van)) << line;
    EXPECT_NE('v', line.back()) << line;
}

TEST(Postoffice, DifferentCountsAreAConfigError)
{
    // One worker was started with DMLC_NUM_WORKER=3, the others with 2:
    // everyone hears it at once instead of waiting for the deadline.
    auto t0 = std::chrono::steady_clock::now();
    Job job = start_job(1, 2, [](int i, ps_start_params_t *p) {
        if (i == 3)
            p->num_workers = 3;
        p->start_timeout_ms = 60000;
    });
    for (size_t i = 0; i < job.po.size(); i++) {
        EXPECT_EQ(PS_ERR_CONFIG, job.status[i]) << "node " << i;
        EXPECT_EQ(nullptr, job.po[i]);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

// Resend with drops: every request reaches the server once, every answer
// the worker once, whatever was dropped and resent.
struct CountingEcho {
    ps_postoffice_t *po;
    int stall_ms = 0; // the first request holds the van thread this long
    std::atomic<int> stalled{0};
    std::mutex mu;
    std::map<int, int> requests; // ts -> times seen
};

void counting_echo_recv(void *arg, ps_customer_t *, const ps_msg_t *msg)
{
    auto *e = static_cast<CountingEcho *>(arg);
    if (!msg->meta.request)
        return;
    {
        std::lock_guard<std::mutex> g(e->mu);
        e->requests[msg->meta.timestamp]++;
    }
    if (e->stall_ms > 0 && e->stalled.exchange(1) == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(e->stall_ms));
    auto *p = static_cast<uint8_t *>(ps_slice_ptr(&msg->data[0]));
    std::vector<uint8_t> v(p, p + msg->data[0].len);
    for (auto &b : v)
        b ^= 0xff;
    send_bytes(e->po, msg->meta.sender, msg->meta.app_id, msg->meta.customer_id,
               msg->meta.timestamp, false, v);
}

struct CountingClient {
    std::mutex mu;
    std::map<int, int> answers; // ts -> times seen
    std::map<int, std::vector<uint8_t>> bytes;
};

void counting_client_recv(void *arg, ps_customer_t *c, const ps_msg_t *msg)
{
    auto *cl = static_cast<CountingClient *>(arg);
    if (msg->meta.request)
        return;
    {
        std::lock_guard<std::mutex> g(cl->mu);
        cl->answers[msg->meta.timestamp]++;
        auto *p = static_cast<uint8_t *>(ps_slice_ptr(&msg->data[0]));
        cl->bytes[msg->meta.timestamp].assign(p, p + msg->data[0].len);
    }
    ps_customer_add_response(c, msg->meta.timestamp, 1);
}

TEST(Postoffice, ResendWithDropsDeliversEachMessageOnce)
{
    // 30 % of the data messages each node receives are dropped, and the
    // server's first request stalls its van thread for 600 ms (2.4 resend
    // timeouts, well inside the budget of 10): messages behind it are
    // resent before they are read, and the copies must be recognised as
    // duplicates. The budget (10 x 250 ms) leaves a machine saturated by
    // other tests seconds to deliver an acknowledgement.
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND, "1"));
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND_TIMEOUT, "250"));
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_DROP_MSG, "30"));
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    CountingEcho echo;
    echo.po = job.server(0);
    echo.stall_ms = 600;
    ps_customer_t *sc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 0, 0, counting_echo_recv, &echo, &sc));
    CountingClient cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 0, 0, counting_client_recv, &cl, &wc));

    // Many requests in flight at once, then each waited for.
    const int n = 100;
    std::vector<int> ts(n);
    int servers[] = {8};
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts[i]));
        ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 0, 0, ts[i], true,
                                    {(uint8_t)i, (uint8_t)(i >> 8), 7}));
    }
    for (int i = 0; i < n; i++)
        ASSERT_EQ(PS_OK, ps_customer_wait(wc, ts[i], 30000)) << "request " << i;
    {
        std::lock_guard<std::mutex> g(echo.mu);
        EXPECT_EQ((size_t)n, echo.requests.size());
        for (auto &kv : echo.requests)
            EXPECT_EQ(1, kv.second) << "request ts " << kv.first << " applied more than once";
    }
    {
        std::lock_guard<std::mutex> g(cl.mu);
        EXPECT_EQ((size_t)n, cl.answers.size());
        for (int i = 0; i < n; i++) {
            EXPECT_EQ(1, cl.answers[ts[i]]) << "answer " << i;
            EXPECT_EQ((std::vector<uint8_t>{(uint8_t)~i, (uint8_t)~(i >> 8), (uint8_t)~7}),
                      cl.bytes[ts[i]]);
        }
    }
    uint64_t resent[2], dups[2], dropped[2];
    ps__postoffice_resend_stats(job.worker(0), &resent[0], &dups[0], &dropped[0]);
    ps__postoffice_resend_stats(job.server(0), &resent[1], &dups[1], &dropped[1]);
    printf("worker: %llu resent, %llu duplicates, %llu dropped; server: %llu resent, %llu "
           "duplicates, %llu dropped\n",
           (unsigned long long)resent[0], (unsigned long long)dups[0],
           (unsigned long long)dropped[0], (unsigned long long)resent[1],
           (unsigned long long)dups[1], (unsigned long long)dropped[1]);
    EXPECT_GT(dropped[0] + dropped[1], 0u);
    EXPECT_GE(resent[0] + resent[1], dropped[0] + dropped[1]);
    EXPECT_GT(dups[1], 0u); // the stall made the worker resend what the server had
    ps_customer_destroy(wc);
    ps_customer_destroy(sc);
    auto st = finalize_all(job);
    ps_config_clear_overrides();
    for (ps_status_t s : st)
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, ResendBudgetFailsTheRequestWithTimedOut)
{
    // Every data message is dropped: the request's message runs out of
    // resends and the request fails (upstream aborted the process).
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND, "1"));
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND_TIMEOUT, "10"));
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_DROP_MSG, "100"));
    Job job = start_job(1, 1);
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    CountingEcho echo;
    echo.po = job.server(0);
    ps_customer_t *sc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.server(0), 0, 0, counting_echo_recv, &echo, &sc));
    CountingClient cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 0, 0, counting_client_recv, &cl, &wc));
    int servers[] = {8};
    int ts;
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts));
    ASSERT_EQ(PS_OK, send_bytes(job.worker(0), 8, 0, 0, ts, true, {1}));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_customer_wait(wc, ts, 60000));
    {
        std::lock_guard<std::mutex> g(echo.mu);
        EXPECT_TRUE(echo.requests.empty());
    }
    ps_customer_destroy(wc);
    ps_customer_destroy(sc);
    auto st = finalize_all(job);
    ps_config_clear_overrides();
    for (ps_status_t s : st)
        EXPECT_EQ(PS_OK, s);
}

TEST(Postoffice, BadResendSettingsAreAConfigError)
{
    ps_postoffice_t *po = nullptr;
    ps_start_params_t p = make_params(PS_ROLE_SCHEDULER, test_free_port(0), 1, 1);
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_DROP_MSG, "101"));
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &po));
    ps_config_clear_overrides();
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND, "1"));
    ASSERT_EQ(PS_OK, ps_config_set(PS_CFG_PS_RESEND_TIMEOUT, "0"));
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &po));
    ps_config_clear_overrides();
    EXPECT_EQ(nullptr, po);
}

TEST(Postoffice, FinalizeTimesOutInsteadOfHanging)
{
    // The scheduler waits longer than the others, so that each of them times
    // out while the scheduler is still there (else a node may rightly see
    // 'peer gone' first).
    Job job = start_job(1, 2, [](int i, ps_start_params_t *p) {
        p->finalize_timeout_ms = i == 0 ? 1500 : 300;
    });
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

// The default, as ps-lite: finalize's barrier waits for the last node however
// late it comes (here 2.5 s, past a limit a test would set), and the teardown
// waits after it stay bounded.
TEST(Postoffice, FinalizeByDefaultWaitsForTheLastNode)
{
    ps_start_params_t defaults;
    ps_start_params_init(&defaults);
    EXPECT_EQ(-1, defaults.finalize_timeout_ms);
    Job job = start_job(1, 1, [](int, ps_start_params_t *p) { p->finalize_timeout_ms = -1; });
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    EXPECT_EQ(PS_TEARDOWN_DEFAULT_MS, ps_postoffice_finalize_timeout_ms(job.server(0)));
    ps_postoffice_t *late = job.worker(0);
    job.po[2] = nullptr;
    ps_status_t late_st = PS_INPROGRESS;
    std::thread worker([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        late_st = ps_postoffice_finalize(late, 1);
    });
    auto t0 = std::chrono::steady_clock::now();
    auto st = finalize_all(job);
    auto waited = std::chrono::steady_clock::now() - t0;
    worker.join();
    EXPECT_EQ(PS_OK, st[0]);
    EXPECT_EQ(PS_OK, st[1]);
    EXPECT_EQ(PS_OK, late_st);
    EXPECT_GE(waited, std::chrono::milliseconds(2000));
}

// Busy polling: a waiter that runs the van's loop itself while another
// thread finalizes. Finalize must take the loop back before it closes the
// van (ASan would see the van used after free), and the wait must end with
// the request's failure, not hang.
TEST(Postoffice, BusyWaiterOverlappingFinalizeEnds)
{
    Job job = start_job(1, 1, [](int, ps_start_params_t *p) {
        p->busy_poll = 1;
        p->finalize_timeout_ms = 2000;
    });
    for (size_t i = 0; i < job.po.size(); i++)
        ASSERT_EQ(PS_OK, job.status[i]);
    Client cl;
    ps_customer_t *wc;
    ASSERT_EQ(PS_OK, ps_customer_create(job.worker(0), 0, 0, client_recv, &cl, &wc));
    int servers[] = {8};
    int ts;
    // Nobody on the server answers: the request stays outstanding.
    ASSERT_EQ(PS_OK, ps_customer_new_request(wc, 1, servers, 1, &ts));
    std::atomic<int> waits{0};
    std::atomic<int> result{PS_OK};
    std::thread waiter([&] {
        // Short waits in a row, so that the waiter keeps starting to drive
        // the loop while finalize runs.
        for (;;) {
            ps_status_t st = ps_customer_wait(wc, ts, 5);
            waits++;
            if (st != PS_ERR_TIMED_OUT) {
                result = st;
                return;
            }
        }
    });
    while (waits.load() < 20)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ps_postoffice_t *worker = job.worker(0);
    job.po[2] = nullptr;
    EXPECT_EQ(PS_OK, ps_postoffice_finalize(worker, 0));
    waiter.join();
    EXPECT_EQ(PS_ERR_SHUTDOWN, result.load());
    ps_customer_destroy(wc);
    finalize_all(job, 0);
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
    ps_start_params_t p = make_params(PS_ROLE_WORKER, test_free_port(0), 1, 1);
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
    // An interval alone: the timeout follows (4 intervals, at least 20 s).
    EXPECT_EQ(20, p.heartbeat_timeout_s);
    setenv("PS_HEARTBEAT_INTERVAL", "10", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(10, p.heartbeat_interval_s);
    EXPECT_EQ(40, p.heartbeat_timeout_s);
    // Heartbeats off: nobody is declared dead by silence either.
    setenv("PS_HEARTBEAT_INTERVAL", "0", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(0, p.heartbeat_interval_s);
    EXPECT_EQ(0, p.heartbeat_timeout_s);
    // ... unless the timeout is set too: both honoured.
    setenv("PS_HEARTBEAT_TIMEOUT", "7", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(0, p.heartbeat_interval_s);
    EXPECT_EQ(7, p.heartbeat_timeout_s);
    // A timeout alone: heartbeats often enough for it.
    unsetenv("PS_HEARTBEAT_INTERVAL");
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(1, p.heartbeat_interval_s);
    setenv("PS_HEARTBEAT_TIMEOUT", "60", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(5, p.heartbeat_interval_s);
    EXPECT_EQ(60, p.heartbeat_timeout_s);
    // The defaults: on, 5 s and 20 s.
    unsetenv("PS_HEARTBEAT_TIMEOUT");
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(5, p.heartbeat_interval_s);
    EXPECT_EQ(20, p.heartbeat_timeout_s);
    ps_start_params_t defaults;
    ps_start_params_init(&defaults);
    EXPECT_EQ(5, defaults.heartbeat_interval_s);
    EXPECT_EQ(20, defaults.heartbeat_timeout_s);

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
                          "DMLC_WORKER_ID", "PS_HEARTBEAT_INTERVAL", "PS_HEARTBEAT_TIMEOUT",
                          "PS_BUSY_POLL"})
        unsetenv(v);
}

// Instance groups as StepMesh's launch scripts set them: the rank from
// DMLC_NODE_RANK and the instance (DMLC_INSTANCE_ID, or STEPMESH_GPU +
// DMLC_RANK_OFFSET); a rank and an instance that disagree are refused.
TEST(StartParams, InstanceGroupsFromEnvironment)
{
    setenv("DMLC_ROLE", "worker", 1);
    setenv("DMLC_PS_ROOT_URI", "127.0.0.1", 1);
    setenv("DMLC_PS_ROOT_PORT", "9000", 1);
    setenv("DMLC_NUM_SERVER", "2", 1);
    setenv("DMLC_NUM_WORKER", "3", 1);
    ps_start_params_t p;
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(1, p.group_size);
    EXPECT_EQ(0, p.instance);
    EXPECT_EQ(-1, p.preferred_rank);

    setenv("DMLC_GROUP_SIZE", "4", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(4, p.group_size);
    EXPECT_EQ(-1, p.instance); // whatever the scheduler's rank implies
    setenv("DMLC_INSTANCE_ID", "3", 1);
    setenv("DMLC_NODE_RANK", "2", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(3, p.instance);
    EXPECT_EQ(11, p.preferred_rank); // 2 * 4 + 3
    unsetenv("DMLC_INSTANCE_ID");
    setenv("STEPMESH_GPU", "1", 1);
    setenv("DMLC_RANK_OFFSET", "2", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(3, p.instance);
    EXPECT_EQ(11, p.preferred_rank);
    // DMLC_RANK counts instances and wins over DMLC_NODE_RANK.
    setenv("DMLC_RANK", "7", 1);
    ASSERT_EQ(PS_OK, ps_start_params_from_env(&p));
    EXPECT_EQ(7, p.preferred_rank);
    setenv("DMLC_RANK", "6", 1); // instance 2, not STEPMESH_GPU + offset
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    unsetenv("DMLC_RANK");
    setenv("DMLC_RANK_OFFSET", "3", 1); // instance 4 of 4
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    unsetenv("DMLC_RANK_OFFSET");
    unsetenv("STEPMESH_GPU");
    // A node rank without an instance names no rank.
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    setenv("DMLC_INSTANCE_ID", "4", 1);
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    setenv("DMLC_GROUP_SIZE", "0", 1);
    EXPECT_EQ(PS_ERR_CONFIG, ps_start_params_from_env(&p));
    for (const char *v : {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
                          "DMLC_NUM_WORKER", "DMLC_GROUP_SIZE", "DMLC_INSTANCE_ID",
                          "DMLC_NODE_RANK"})
        unsetenv(v);
}

// One server group and one worker group of 2 instances; a scheduler at
// port 1, which a refused start never dials.
static ps_start_params_t GroupsOfTwo()
{
    ps_start_params_t p;
    ps_start_params_init(&p);
    snprintf(p.scheduler_host, sizeof(p.scheduler_host), "127.0.0.1");
    p.scheduler_port = 1;
    p.num_servers = 1;
    p.num_workers = 1;
    p.group_size = 2;
    return p;
}

// A group start refuses what is not a server or worker group, and a group
// rank beyond the groups, before starting anything.
TEST(StartGroup, RefusesBadParams)
{
    ps_start_params_t p = GroupsOfTwo();
    ps_postoffice_t *pos[2];
    p.role = PS_ROLE_SCHEDULER;
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_postoffice_start_group(&p, 1, pos));
    p.role = PS_ROLE_WORKER;
    p.preferred_rank = 1;
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start_group(&p, 1, pos));
}

// Parameters a program fills itself get the environment's check too: rank 1
// of a group of 2 is instance 1, so asking for instance 0 is refused
// before anything starts.
TEST(StartParams, RankAndInstanceThatDisagreeAreRefused)
{
    ps_start_params_t p = GroupsOfTwo();
    p.role = PS_ROLE_WORKER;
    p.preferred_rank = 1;
    p.instance = 0;
    ps_postoffice_t *po = NULL;
    EXPECT_EQ(PS_ERR_CONFIG, ps_postoffice_start(&p, 1, &po));
    EXPECT_EQ(nullptr, po);
}

} // namespace

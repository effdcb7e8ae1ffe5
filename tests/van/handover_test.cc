// The hand-over lists (ps/net/van/handover.h): what callers put reaches the
// taker once, both lists at a time, with the connection found from its link.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

extern "C" {
#include "ps/net/van/handover.h"
}

namespace {

struct Conn {
    int id;
    ps_van_handover_link_t start_link;
    ps_van_handover_link_t close_link;
};

std::vector<int> Ids(ps_van_handover_link_t *list, bool start)
{
    std::vector<int> ids;
    ps_van_handover_link_t *l;
    while ((l = ps_van_handover_pop(&list)) != nullptr) {
        ids.push_back(start ? PS_VAN_HANDOVER_OF(l, Conn, start_link)->id
                            : PS_VAN_HANDOVER_OF(l, Conn, close_link)->id);
        EXPECT_EQ(nullptr, l->next);
    }
    return ids;
}

TEST(Handover, BothListsTakenAtOnceNewestFirst)
{
    ps_van_handover_t h;
    ASSERT_EQ(PS_OK, ps_van_handover_init(&h));
    EXPECT_FALSE(ps_van_handover_waiting(&h));
    Conn c[4] = {{1, {}, {}}, {2, {}, {}}, {3, {}, {}}, {4, {}, {}}};
    ps_van_handover_link_t *start[2] = {&c[0].start_link, &c[1].start_link};
    ps_van_handover_link_t *close[1] = {&c[2].close_link};
    ps_van_handover_put(&h, start, 2, close, 1);
    EXPECT_TRUE(ps_van_handover_waiting(&h));
    ps_van_handover_link_t *one = &c[3].close_link;
    ps_van_handover_put(&h, nullptr, 0, &one, 1);

    ps_van_handover_link_t *to_start, *to_close;
    EXPECT_EQ(1, ps_van_handover_take(&h, &to_start, &to_close));
    EXPECT_FALSE(ps_van_handover_waiting(&h));
    EXPECT_EQ((std::vector<int>{2, 1}), Ids(to_start, true));
    EXPECT_EQ((std::vector<int>{4, 3}), Ids(to_close, false));

    ps_van_handover_put(&h, start, 2, nullptr, 0);
    EXPECT_EQ(1, ps_van_handover_take(&h, &to_start, &to_close));
    EXPECT_EQ(nullptr, to_close);
    EXPECT_EQ((std::vector<int>{1, 2}), Ids(ps_van_handover_reverse(to_start), true));
    EXPECT_EQ(0, ps_van_handover_take(&h, &to_start, &to_close)) << "nothing waits";
    EXPECT_EQ(nullptr, to_start);
    EXPECT_EQ(nullptr, to_close);
    EXPECT_EQ(nullptr, ps_van_handover_reverse(nullptr));
    ps_van_handover_fini(&h);
}

TEST(Handover, EveryPutFromManyThreadsIsTakenOnce)
{
    ps_van_handover_t h;
    ASSERT_EQ(PS_OK, ps_van_handover_init(&h));
    const int kThreads = 4, kEach = 2000;
    std::vector<Conn> conns(kThreads * kEach);
    for (size_t i = 0; i < conns.size(); i++)
        conns[i].id = (int)i;
    std::vector<int> seen(conns.size(), 0);
    std::atomic<int> running{kThreads};
    std::vector<std::thread> putters;
    for (int t = 0; t < kThreads; t++) {
        putters.emplace_back([&, t] {
            for (int i = 0; i < kEach; i++) {
                Conn *c = &conns[t * kEach + i];
                ps_van_handover_link_t *s = &c->start_link, *cl = &c->close_link;
                ps_van_handover_put(&h, &s, i % 2, &cl, 1 - i % 2);
            }
            running--;
        });
    }
    auto drain = [&] {
        ps_van_handover_link_t *to_start, *to_close;
        ps_van_handover_take(&h, &to_start, &to_close);
        for (int id : Ids(to_start, true))
            seen[id]++;
        for (int id : Ids(to_close, false))
            seen[id]++;
    };
    while (running.load() > 0)
        drain();
    for (auto &t : putters)
        t.join();
    drain();
    for (size_t i = 0; i < seen.size(); i++)
        ASSERT_EQ(1, seen[i]) << "connection " << i;
    ps_van_handover_fini(&h);
}

}  // namespace

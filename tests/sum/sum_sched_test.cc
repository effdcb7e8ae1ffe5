// The engine's work order: FIFO, and upstream's priority order (fewest
// counted pushes first, ties by arrival; a key's own pushes never reorder).
#include <gtest/gtest.h>

#include <vector>

#include "ps/app/sum/sum_sched.h"

namespace {

struct Key {
    ps__sum_queue_t queue;
    int name;
    Key(int n) : name(n) { ps__sum_queue_init(&queue); }
};

class Sched {
  public:
    explicit Sched(int priority) { ps__sum_sched_init(&s_, priority); }
    ~Sched()
    {
        while (ps__sum_item_t *it = ps__sum_sched_pop(&s_))
            delete it;
        ps__sum_sched_fini(&s_);
    }
    void Push(Key *k)
    {
        auto *it = new ps__sum_item_t();
        it->queue = &k->queue;
        it->key = k;
        it->id = next_id_++;
        ASSERT_EQ(PS_OK, ps__sum_sched_push(&s_, it));
    }
    // (key name, id) of the next item, or (-1, 0).
    std::pair<int, uint64_t> Pop()
    {
        ps__sum_item_t *it = ps__sum_sched_pop(&s_);
        if (!it)
            return {-1, 0};
        std::pair<int, uint64_t> r{static_cast<Key *>(it->key)->name, it->id};
        delete it;
        return r;
    }
    void Clear(Key *k) { ps__sum_sched_clear_count(&s_, &k->queue); }
    size_t Size() const { return s_.size; }

  private:
    ps__sum_sched_t s_;
    uint64_t next_id_ = 1;
};

using P = std::pair<int, uint64_t>;

TEST(SumSched, FifoKeepsArrivalOrder)
{
    Sched s(0);
    Key a(0), b(1);
    s.Push(&a);
    s.Push(&b);
    s.Push(&a);
    s.Clear(&a); // no effect in FIFO mode
    EXPECT_EQ(3u, s.Size());
    EXPECT_EQ(P(0, 1), s.Pop());
    EXPECT_EQ(P(1, 2), s.Pop());
    EXPECT_EQ(P(0, 3), s.Pop());
    EXPECT_EQ(P(-1, 0), s.Pop());
}

TEST(SumSched, PriorityTakesTheKeyWithFewestPushesFirst)
{
    Sched s(1);
    Key a(0), b(1), c(2);
    s.Push(&a); // id 1, a:1
    s.Push(&a); // id 2, a:2
    s.Push(&a); // id 3, a:3
    s.Push(&b); // id 4, b:1
    s.Push(&c); // id 5, c:1
    s.Push(&c); // id 6, c:2
    EXPECT_EQ(P(1, 4), s.Pop()); // b has 1
    EXPECT_EQ(P(2, 5), s.Pop()); // c has 2, a has 3
    EXPECT_EQ(P(2, 6), s.Pop());
    EXPECT_EQ(P(0, 1), s.Pop());
    EXPECT_EQ(P(0, 2), s.Pop());
    EXPECT_EQ(P(0, 3), s.Pop());
    EXPECT_EQ(P(-1, 0), s.Pop());
}

TEST(SumSched, TiesGoByArrival)
{
    Sched s(1);
    Key a(0), b(1);
    s.Push(&b); // id 1
    s.Push(&a); // id 2
    s.Push(&a); // id 3
    s.Push(&b); // id 4: both have 2
    EXPECT_EQ(P(1, 1), s.Pop());
    EXPECT_EQ(P(0, 2), s.Pop());
    EXPECT_EQ(P(0, 3), s.Pop());
    EXPECT_EQ(P(1, 4), s.Pop());
}

TEST(SumSched, ClearingACounterMovesTheKeyToTheFront)
{
    Sched s(1);
    Key a(0), b(1);
    s.Push(&b); // id 1, b:1
    s.Push(&a); // id 2
    s.Push(&a); // id 3
    s.Push(&a); // id 4, a:3
    s.Clear(&a); // a's round got its last push: a:0
    EXPECT_EQ(P(0, 2), s.Pop());
    s.Push(&a); // id 5, a:1; b:1 but b's head (id 1) is older
    EXPECT_EQ(P(1, 1), s.Pop());
    EXPECT_EQ(P(0, 3), s.Pop());
    EXPECT_EQ(P(0, 4), s.Pop());
    EXPECT_EQ(P(0, 5), s.Pop());
}

TEST(SumSched, AKeysOwnPushesNeverReorderUnderManyKeys)
{
    Sched s(1);
    std::vector<Key> keys;
    for (int i = 0; i < 50; i++)
        keys.emplace_back(i);
    uint64_t seed = 12345;
    int pushed = 0;
    std::vector<uint64_t> last(keys.size(), 0);
    for (int step = 0; step < 5000; step++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int r = static_cast<int>((seed >> 33) % 100);
        Key *k = &keys[(seed >> 20) % keys.size()];
        if (r < 55) {
            s.Push(k);
            pushed++;
        } else if (r < 60) {
            s.Clear(k);
        } else {
            P p = s.Pop();
            if (p.first < 0)
                continue;
            ASSERT_GT(p.second, last[p.first]) << "key " << p.first << " reordered";
            last[p.first] = p.second;
        }
    }
    while (true) {
        P p = s.Pop();
        if (p.first < 0)
            break;
        ASSERT_GT(p.second, last[p.first]);
        last[p.first] = p.second;
    }
    EXPECT_EQ(0u, s.Size());
    EXPECT_GT(pushed, 1000);
}

} // namespace

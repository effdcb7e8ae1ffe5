// The TCP van's choice between sending large unaligned segments as they are
// and from an aligned copy (ps/net/tcp/send_align.h): the settings, the
// measuring turns, the cheaper way once measured, the rechecks, and a change
// of conditions noticed.
#include "ps/net/tcp/send_align.h"

#include <gtest/gtest.h>

namespace {

constexpr uint64_t kMiB = 1u << 20;

struct Chooser {
    ps_send_align_t a;
    explicit Chooser(const char *mode = "auto")
    {
        EXPECT_EQ(ps_send_align_init(&a, mode, PS_LOG_CORE), 0);
    }
    ~Chooser()
    {
        ps_send_align_fini(&a);
    }
};

// Feeds the figures of one send made the way `copy` says, at the given
// picoseconds per byte.
void Feed(ps_send_align_t *a, int copy, uint64_t direct_ps, uint64_t copied_ps, uint64_t memcpy_ps)
{
    if (copy) {
        ps_send_align_note_memcpy(a, memcpy_ps * 4 * kMiB / 1000, 4 * kMiB);
        ps_send_align_note_send(a, PS_SEND_ALIGN_COPIED, copied_ps * kMiB / 1000, kMiB);
    } else {
        ps_send_align_note_send(a, PS_SEND_ALIGN_DIRECT, direct_ps * kMiB / 1000, kMiB);
    }
}

// Runs n decisions against a host with these costs; returns how many copied.
int Decide(ps_send_align_t *a, int n, uint64_t direct_ps, uint64_t copied_ps, uint64_t memcpy_ps)
{
    int copies = 0;
    for (int i = 0; i < n; ++i) {
        int copy = ps_send_align_choose(a);
        copies += copy;
        Feed(a, copy, direct_ps, copied_ps, memcpy_ps);
    }
    return copies;
}

TEST(SendAlign, Settings)
{
    for (const char *text : {"on", "off", "auto", ""}) {
        ps_send_align_t a;
        EXPECT_EQ(ps_send_align_init(&a, text, PS_LOG_CORE), 0) << text;
        ps_send_align_fini(&a);
    }
    ps_send_align_t a;
    EXPECT_EQ(ps_send_align_init(&a, nullptr, PS_LOG_CORE), 0);
    EXPECT_EQ(a.mode, PS_SEND_ALIGN_AUTO);
    ps_send_align_fini(&a);
    EXPECT_EQ(ps_send_align_init(&a, "sometimes", PS_LOG_CORE), -1);
    EXPECT_EQ(a.mode, PS_SEND_ALIGN_AUTO);
    ps_send_align_fini(&a);

    Chooser on("on"), off("off");
    // Forced: every decision the same, no figures kept.
    EXPECT_EQ(Decide(&on.a, 100, 100, 900, 900), 100);
    EXPECT_EQ(Decide(&off.a, 100, 900, 100, 100), 0);
    EXPECT_EQ(on.a.direct.count + on.a.copied.count + on.a.copying.count, 0u);
}

TEST(SendAlign, MeasuresBothWaysFirst)
{
    Chooser c;
    int copies = 0;
    for (int i = 0; i < 2 * PS_SEND_ALIGN_WARMUP; ++i) {
        int copy = ps_send_align_choose(&c.a);
        EXPECT_EQ(copy, i % 2) << "turn " << i; // direct, copy, direct, ...
        copies += copy;
        Feed(&c.a, copy, 200, 250, 300);
    }
    EXPECT_EQ(copies, PS_SEND_ALIGN_WARMUP);
}

TEST(SendAlign, TakesTheCheaperWayAndRechecksTheOther)
{
    // Kernel copies unaligned sources fast: sending as they are wins.
    Chooser fast;
    Decide(&fast.a, 2 * PS_SEND_ALIGN_WARMUP, 200, 250, 300);
    EXPECT_EQ(Decide(&fast.a, 32 * PS_SEND_ALIGN_RECHECK, 200, 250, 300), 32);

    // Kernel copies unaligned sources at a third of its speed: copying wins.
    Chooser slow;
    Decide(&slow.a, 2 * PS_SEND_ALIGN_WARMUP, 700, 200, 150);
    EXPECT_EQ(Decide(&slow.a, 32 * PS_SEND_ALIGN_RECHECK, 700, 200, 150),
              32 * PS_SEND_ALIGN_RECHECK - 32);
}

TEST(SendAlign, NoticesAChangeOfConditions)
{
    Chooser c;
    Decide(&c.a, 2 * PS_SEND_ALIGN_WARMUP + 64, 200, 250, 300);
    ASSERT_EQ(ps_send_align_choose(&c.a), 0);
    // Unaligned sends become slow: each one sent as it is adds a slow figure,
    // and once they are the ring's majority copying wins; from then on only a
    // recheck sends one as it is.
    EXPECT_GE(Decide(&c.a, PS_SEND_ALIGN_RING, 900, 250, 300), 1);
    EXPECT_GE(Decide(&c.a, PS_SEND_ALIGN_RECHECK - 1, 900, 250, 300), PS_SEND_ALIGN_RECHECK - 2);
}

TEST(SendAlign, AWayWithoutFiguresIsOnlyRetriedAtRechecks)
{
    // Sends from the copy always find the socket nearly full: their sendmsg
    // gives no figure, so measuring never ends and the copy, having fewer
    // figures, would get every turn. Past the patience it only gets the
    // rechecks.
    Chooser c;
    auto turn = [&c]() {
        int copy = ps_send_align_choose(&c.a);
        if (copy) {
            ps_send_align_note_memcpy(&c.a, 300 * 4 * kMiB / 1000, 4 * kMiB);
            ps_send_align_note_send(&c.a, PS_SEND_ALIGN_COPIED, 1000, 4096);
        } else {
            ps_send_align_note_send(&c.a, PS_SEND_ALIGN_DIRECT, 200 * kMiB / 1000, kMiB);
        }
        return copy;
    };
    int early = 0;
    for (int i = 0; i < PS_SEND_ALIGN_PATIENCE; ++i) {
        early += turn();
    }
    EXPECT_GE(early, PS_SEND_ALIGN_PATIENCE - 2); // the copy's turns, unanswered
    int late = 0;
    for (int i = 0; i < 8 * PS_SEND_ALIGN_RECHECK; ++i) {
        late += turn();
    }
    EXPECT_LE(late, 8);
    EXPECT_GE(late, 7);
    // Figures that arrive later still end the measuring.
    Decide(&c.a, 8 * PS_SEND_ALIGN_RECHECK, 700, 200, 150);
    EXPECT_GE(Decide(&c.a, PS_SEND_ALIGN_RECHECK, 700, 200, 150), PS_SEND_ALIGN_RECHECK - 1);
}

TEST(SendAlign, SmallSendsGiveNoFigure)
{
    Chooser c;
    ps_send_align_note_send(&c.a, PS_SEND_ALIGN_DIRECT, 1000, PS_SEND_ALIGN_MIN_SAMPLE - 1);
    ps_send_align_note_send(&c.a, PS_SEND_ALIGN_NONE, 1000, 4 * kMiB);
    EXPECT_EQ(c.a.direct.count, 0u);
    EXPECT_EQ(c.a.copied.count, 0u);
    ps_send_align_note_send(&c.a, PS_SEND_ALIGN_DIRECT, 1000, PS_SEND_ALIGN_MIN_SAMPLE);
    EXPECT_EQ(c.a.direct.count, 1u);
}

TEST(SendAlign, Median)
{
    ps_send_align_ring_t r = {};
    EXPECT_EQ(ps_send_align_median(&r), 0u);
    const uint32_t in[] = {50, 10, 40, 20, 30, 90, 70, 80, 60, 5};
    r.ps_per_byte[0] = in[0];
    r.count = 1;
    EXPECT_EQ(ps_send_align_median(&r), 50u);
    for (uint32_t i = 0; i < 4; ++i) {
        r.ps_per_byte[i] = in[i];
    }
    r.count = 4; // 10 20 40 50
    EXPECT_EQ(ps_send_align_median(&r), 30u);
    // Past the ring's size only the newest figures count.
    ps_send_align_ring_t w = {};
    for (uint32_t v : in) {
        w.ps_per_byte[w.count % PS_SEND_ALIGN_RING] = v;
        w.count++;
    }
    // Kept: 40 20 30 90 70 80 60 5 (the first two overwritten) -> 5 20 30 40 60 70 80 90.
    EXPECT_EQ(ps_send_align_median(&w), 50u);
}

TEST(SendAlign, ThreadClockCountsWork)
{
    uint64_t t0 = ps_send_align_thread_ns();
    volatile uint64_t x = 0;
    for (int i = 0; i < 20000000; ++i) {
        x = x + (uint64_t)i;
    }
    uint64_t t1 = ps_send_align_thread_ns();
    EXPECT_GT(t0, 0u);
    EXPECT_GT(t1, t0);
}

} // namespace

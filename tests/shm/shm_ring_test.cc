// The record ring of the shared-memory van on its own: framing, wrap-around
// with PAD records, full and empty rings, the sleep/wait handshakes, and
// rejection of a broken producer.

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
#include "ps/net/shm/shm_ring.h"
}

namespace {

constexpr uint64_t kSize = 4096;

struct Ring {
    std::vector<uint64_t> mem;
    ps__shm_ring_t prod, cons;
    Ring() : mem(ps__shm_ring_bytes(kSize) / 8 + 1)
    {
        ps__shm_ring_init(mem.data(), kSize);
        ps__shm_ring_attach(&prod, mem.data(), kSize);
        ps__shm_ring_attach(&cons, mem.data(), kSize);
    }
    ps__shm_ring_ctl_t *ctl() { return reinterpret_cast<ps__shm_ring_ctl_t *>(mem.data()); }
};

// Writes a record of `len` bytes whose body bytes are `fill`.
bool Put(ps__shm_ring_t *r, uint32_t len, uint8_t fill, uint16_t type = 7)
{
    uint8_t *p = static_cast<uint8_t *>(ps__shm_ring_reserve(r, len));
    if (p == nullptr) {
        return false;
    }
    ps__shm_rec_t h = {len, type, 0};
    memcpy(p, &h, sizeof(h));
    memset(p + sizeof(h), fill, len - sizeof(h));
    return true;
}

// Reads one record; returns its length (0 if none) and checks its fill.
uint32_t Get(ps__shm_ring_t *r, uint8_t want_fill, int *wake = nullptr)
{
    const uint8_t *rec = nullptr;
    ps__shm_rec_t h;
    int w = 0;
    EXPECT_EQ(ps__shm_ring_peek(r, &rec, &h, &w), PS_OK);
    if (rec == nullptr) {
        return 0;
    }
    for (uint32_t i = sizeof(h); i < h.len; ++i) {
        EXPECT_EQ(rec[i], want_fill) << "byte " << i;
    }
    w |= ps__shm_ring_consume(r, h.len);
    if (wake != nullptr) {
        *wake = w;
    }
    return h.len;
}

TEST(ShmRing, EmptyThenOneRecord)
{
    Ring r;
    EXPECT_FALSE(ps__shm_ring_readable(&r.cons));
    EXPECT_EQ(Get(&r.cons, 0), 0u);
    ASSERT_TRUE(Put(&r.prod, 64, 0xab));
    // Not visible before the commit.
    EXPECT_FALSE(ps__shm_ring_readable(&r.cons));
    EXPECT_EQ(ps__shm_ring_commit(&r.prod), 0);
    EXPECT_TRUE(ps__shm_ring_readable(&r.cons));
    EXPECT_EQ(Get(&r.cons, 0xab), 64u);
    EXPECT_EQ(Get(&r.cons, 0), 0u);
}

TEST(ShmRing, RejectsBadLengths)
{
    Ring r;
    EXPECT_EQ(ps__shm_ring_reserve(&r.prod, 0), nullptr);
    EXPECT_EQ(ps__shm_ring_reserve(&r.prod, 12), nullptr);          // not 8-aligned
    EXPECT_EQ(ps__shm_ring_reserve(&r.prod, kSize / 2 + 8), nullptr); // over half
}

TEST(ShmRing, FullThenRoomAfterConsume)
{
    Ring r;
    int n = 0;
    while (Put(&r.prod, 512, static_cast<uint8_t>(n))) {
        ++n;
    }
    EXPECT_EQ(n, static_cast<int>(kSize / 512));
    ps__shm_ring_commit(&r.prod);
    // The producer says it waits; the consumer's next consume must report it.
    EXPECT_EQ(ps__shm_ring_wait_room(&r.prod, 512), 0);
    EXPECT_EQ(r.ctl()->tx_waiting, 1u);
    int wake = 0;
    EXPECT_EQ(Get(&r.cons, 0, &wake), 512u);
    EXPECT_EQ(wake, 1);
    EXPECT_EQ(r.ctl()->tx_waiting, 0u);
    EXPECT_TRUE(Put(&r.prod, 512, 99));
    ps__shm_ring_commit(&r.prod);
    for (int i = 1; i < n; ++i) {
        EXPECT_EQ(Get(&r.cons, static_cast<uint8_t>(i)), 512u);
    }
    EXPECT_EQ(Get(&r.cons, 99), 512u);
}

TEST(ShmRing, WrapsWithPadRecords)
{
    Ring r;
    // Records of odd sizes so that the end of the area never fits exactly.
    const uint32_t sizes[] = {104, 1000, 8, 2040, 336, 1496, 16};
    uint64_t total = 0;
    for (int round = 0; round < 200; ++round) {
        uint32_t len = sizes[round % 7];
        ASSERT_TRUE(Put(&r.prod, len, static_cast<uint8_t>(round)));
        ps__shm_ring_commit(&r.prod);
        ASSERT_EQ(Get(&r.cons, static_cast<uint8_t>(round)), len) << "round " << round;
        total += len;
    }
    EXPECT_GT(r.prod.pos, total); // PAD records were written
}

TEST(ShmRing, ReserveUpTo)
{
    Ring r;
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(Put(&r.prod, 1000, 1));
    }
    ps__shm_ring_commit(&r.prod);
    uint32_t got = 0;
    // 1096 bytes left before the end, none after (the ring is 4096).
    void *p = ps__shm_ring_reserve_upto(&r.prod, 64, 2048, &got);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(got, 1096u);
    ps__shm_rec_t h = {got, 7, 0};
    memcpy(p, &h, sizeof(h));
    memset(static_cast<uint8_t *>(p) + 8, 2, got - 8);
    ps__shm_ring_commit(&r.prod);
    // Full now: nothing, not even the minimum.
    EXPECT_EQ(ps__shm_ring_reserve_upto(&r.prod, 64, 2048, &got), nullptr);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(Get(&r.cons, 1), 1000u);
    }
    EXPECT_EQ(Get(&r.cons, 2), 1096u);
}

TEST(ShmRing, SleepHandshake)
{
    Ring r;
    // Nothing there: the consumer may sleep, and the producer learns it.
    EXPECT_EQ(ps__shm_ring_sleep(&r.cons), 0);
    ASSERT_TRUE(Put(&r.prod, 64, 5));
    EXPECT_EQ(ps__shm_ring_commit(&r.prod), 1);
    // Only one producer commit rings.
    ASSERT_TRUE(Put(&r.prod, 64, 5));
    EXPECT_EQ(ps__shm_ring_commit(&r.prod), 0);
    // Something there: sleeping is refused and the flag left clear.
    EXPECT_EQ(ps__shm_ring_sleep(&r.cons), 1);
    EXPECT_EQ(r.ctl()->rx_sleeping, 0u);
    ps__shm_ring_awake(&r.cons);
    EXPECT_EQ(Get(&r.cons, 5), 64u);
    EXPECT_EQ(Get(&r.cons, 5), 64u);
}

TEST(ShmRing, BrokenProducerIsRejected)
{
    const uint8_t *rec;
    ps__shm_rec_t h;
    int wake = 0;
    {
        Ring r;
        r.ctl()->tail = kSize + 8; // more than the ring holds
        EXPECT_EQ(ps__shm_ring_peek(&r.cons, &rec, &h, &wake), PS_ERR_PROTOCOL);
        EXPECT_EQ(rec, nullptr);
    }
    {
        Ring r;
        r.ctl()->tail = 12; // not aligned
        EXPECT_EQ(ps__shm_ring_peek(&r.cons, &rec, &h, &wake), PS_ERR_PROTOCOL);
    }
    {
        Ring r;
        ASSERT_TRUE(Put(&r.prod, 64, 1));
        ps__shm_ring_commit(&r.prod);
        // A record claiming more than was published.
        ps__shm_rec_t bad = {128, 7, 0};
        memcpy(r.prod.data, &bad, sizeof(bad));
        EXPECT_EQ(ps__shm_ring_peek(&r.cons, &rec, &h, &wake), PS_ERR_PROTOCOL);
    }
    {
        Ring r;
        ASSERT_TRUE(Put(&r.prod, 64, 1));
        ps__shm_ring_commit(&r.prod);
        ps__shm_rec_t bad = {4, 7, 0}; // shorter than a header
        memcpy(r.prod.data, &bad, sizeof(bad));
        EXPECT_EQ(ps__shm_ring_peek(&r.cons, &rec, &h, &wake), PS_ERR_PROTOCOL);
    }
    {
        Ring r;
        // A consumer lying about head must not let the producer overwrite.
        r.ctl()->head = 1ull << 40;
        int n = 0;
        while (Put(&r.prod, 512, 1)) {
            ++n;
        }
        EXPECT_LE(n, static_cast<int>(kSize / 512));
    }
}

} // namespace

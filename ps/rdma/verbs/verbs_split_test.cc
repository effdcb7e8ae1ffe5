// Payload split across queue pairs, scatter-gather pieces, and in-order
// release of messages whose slave chunks arrive late or out of step.
#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
#include "ps/rdma/verbs/verbs_split.h"
}

namespace {

std::vector<ps__vb_chunk_t> Split(uint64_t total, unsigned nqp, uint64_t min_split,
                                  uint64_t max_wr)
{
    ps__vb_chunk_t c[PS__VB_MAX_CHUNKS];
    unsigned n = 0;
    EXPECT_EQ(ps__vb_split(total, nqp, min_split, max_wr, c, PS__VB_MAX_CHUNKS, &n), PS_OK);
    return std::vector<ps__vb_chunk_t>(c, c + n);
}

// Chunks cover [0, total) exactly once, in payload order.
void ExpectCovers(const std::vector<ps__vb_chunk_t> &v, uint64_t total)
{
    uint64_t off = 0;
    for (const auto &c : v) {
        EXPECT_EQ(c.off, off);
        EXPECT_GT(c.len, 0u);
        off += c.len;
    }
    EXPECT_EQ(off, total);
}

TEST(Split, TwoQpsAsStepMesh)
{
    // QP 0 gets total/n plus the remainder, QP 1 total/n.
    auto v = Split(1000001, 2, 1, 0);
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[0].qp, 0);
    EXPECT_EQ(v[0].len, 500001u);
    EXPECT_EQ(v[1].qp, 1);
    EXPECT_EQ(v[1].len, 500000u);
    ExpectCovers(v, 1000001);
}

TEST(Split, SmallPayloadStaysOnQpZero)
{
    auto v = Split(4095, 2, 4096, 0);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].qp, 0);
    EXPECT_EQ(v[0].len, 4095u);
    v = Split(1 << 20, 1, 1, 0);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].qp, 0);
    EXPECT_TRUE(Split(0, 4, 1, 0).empty());
}

TEST(Split, FewerBytesThanQps)
{
    auto v = Split(3, 4, 1, 0);
    ASSERT_EQ(v.size(), 1u) << "no empty chunks";
    ExpectCovers(v, 3);
}

TEST(Split, CutsAtMaxWr)
{
    auto v = Split(10, 2, 1, 3);
    // QP 0: 5 -> 3 + 2; QP 1: 5 -> 3 + 2.
    ASSERT_EQ(v.size(), 4u);
    EXPECT_EQ(v[0].qp, 0);
    EXPECT_EQ(v[1].qp, 0);
    EXPECT_EQ(v[2].qp, 1);
    EXPECT_EQ(v[3].qp, 1);
    for (const auto &c : v)
        EXPECT_LE(c.len, 3u);
    ExpectCovers(v, 10);
}

TEST(Split, EveryQpCountCovers)
{
    for (unsigned nqp = 1; nqp <= PS__VB_MAX_QP; nqp++) {
        for (uint64_t total : {1ull, 7ull, 4096ull, 65537ull, 12345678ull}) {
            auto v = Split(total, nqp, 1, 1 << 20);
            ExpectCovers(v, total);
            // QPs appear in order 0..n-1.
            for (size_t i = 1; i < v.size(); i++)
                EXPECT_LE(v[i - 1].qp, v[i].qp);
        }
    }
}

TEST(Split, Errors)
{
    ps__vb_chunk_t c[2];
    unsigned n;
    EXPECT_EQ(ps__vb_split(10, 0, 1, 0, c, 2, &n), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps__vb_split(10, PS__VB_MAX_QP + 1, 1, 0, c, 2, &n), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps__vb_split(10, 4, 1, 0, c, 2, &n), PS_ERR_TOO_LARGE);
    EXPECT_EQ(ps__vb_split(100, 1, 1, 10, c, 2, &n), PS_ERR_TOO_LARGE);
}

TEST(Pieces, ChunkSpanningSegments)
{
    const uint64_t lens[] = {8, 0, 100, 4};
    ps__vb_piece_t p[8];
    unsigned n = 0;
    ASSERT_EQ(ps__vb_pieces(lens, 4, 4, 106, p, 8, &n), PS_OK);
    ASSERT_EQ(n, 3u);
    EXPECT_EQ(p[0].seg, 0);
    EXPECT_EQ(p[0].off, 4u);
    EXPECT_EQ(p[0].len, 4u);
    EXPECT_EQ(p[1].seg, 2) << "the empty segment is skipped";
    EXPECT_EQ(p[1].off, 0u);
    EXPECT_EQ(p[1].len, 100u);
    EXPECT_EQ(p[2].seg, 3);
    EXPECT_EQ(p[2].len, 2u);

    ASSERT_EQ(ps__vb_pieces(lens, 4, 50, 10, p, 8, &n), PS_OK);
    ASSERT_EQ(n, 1u);
    EXPECT_EQ(p[0].seg, 2);
    EXPECT_EQ(p[0].off, 42u);

    EXPECT_EQ(ps__vb_pieces(lens, 4, 100, 20, p, 8, &n), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps__vb_pieces(lens, 4, 0, 112, p, 2, &n), PS_ERR_TOO_LARGE);
}

TEST(Pieces, SplitThenPiecesCoverEveryByteOnce)
{
    const uint64_t lens[] = {8, 1000, 3, 77777};
    uint64_t total = 8 + 1000 + 3 + 77777;
    std::vector<int> seen(total, 0);
    ps__vb_chunk_t c[PS__VB_MAX_CHUNKS];
    unsigned nc = 0;
    ASSERT_EQ(ps__vb_split(total, 3, 1, 4096, c, PS__VB_MAX_CHUNKS, &nc), PS_OK);
    for (unsigned i = 0; i < nc; i++) {
        ps__vb_piece_t p[8];
        unsigned np = 0;
        ASSERT_EQ(ps__vb_pieces(lens, 4, c[i].off, c[i].len, p, 8, &np), PS_OK);
        uint64_t pos = c[i].off;
        for (unsigned j = 0; j < np; j++) {
            uint64_t base = 0;
            for (unsigned s = 0; s < p[j].seg; s++)
                base += lens[s];
            EXPECT_EQ(base + p[j].off, pos) << "pieces are contiguous in the payload";
            for (uint64_t b = 0; b < p[j].len; b++)
                seen[base + p[j].off + b]++;
            pos += p[j].len;
        }
    }
    for (uint64_t b = 0; b < total; b++)
        ASSERT_EQ(seen[b], 1) << "byte " << b;
}

struct Item {
    ps__vb_reorder_item_t it;
    int id;
};

Item MakeItem(int id, std::vector<uint32_t> need)
{
    Item x;
    memset(&x, 0, sizeof(x));
    x.id = id;
    for (size_t k = 0; k < need.size(); k++)
        x.it.need[k + 1] = need[k];
    x.it.arg = nullptr;
    return x;
}

int PopId(ps__vb_reorder_t *r)
{
    ps__vb_reorder_item_t *it = ps__vb_reorder_pop(r);
    if (it == nullptr)
        return -1;
    return reinterpret_cast<Item *>(it)->id;
}

TEST(Reorder, MetaBeforeItsSlaveChunks)
{
    ps__vb_reorder_t r;
    ps__vb_reorder_init(&r, 2);
    // Message 1 announced 1 slave chunk on QP 1; it has not arrived yet.
    Item a = MakeItem(1, {1});
    ps__vb_reorder_push(&r, &a.it);
    EXPECT_EQ(PopId(&r), -1);
    // Message 2 needs nothing new but must wait behind message 1.
    Item b = MakeItem(2, {1});
    ps__vb_reorder_push(&r, &b.it);
    EXPECT_EQ(PopId(&r), -1);
    ASSERT_EQ(ps__vb_reorder_slave(&r, 1), PS_OK);
    EXPECT_EQ(PopId(&r), 1);
    EXPECT_EQ(PopId(&r), 2);
    EXPECT_EQ(PopId(&r), -1);
    EXPECT_EQ(r.waiting, 0u);
}

TEST(Reorder, SlaveChunksBeforeTheirMeta)
{
    ps__vb_reorder_t r;
    ps__vb_reorder_init(&r, 3);
    ASSERT_EQ(ps__vb_reorder_slave(&r, 1), PS_OK);
    ASSERT_EQ(ps__vb_reorder_slave(&r, 2), PS_OK);
    ASSERT_EQ(ps__vb_reorder_slave(&r, 2), PS_OK);
    Item a = MakeItem(1, {1, 2});
    ps__vb_reorder_push(&r, &a.it);
    EXPECT_EQ(PopId(&r), 1) << "everything it needs is already there";
    Item b = MakeItem(2, {2, 2});
    ps__vb_reorder_push(&r, &b.it);
    EXPECT_EQ(PopId(&r), -1);
    ASSERT_EQ(ps__vb_reorder_slave(&r, 1), PS_OK);
    EXPECT_EQ(PopId(&r), 2);
}

TEST(Reorder, CountersWrap)
{
    ps__vb_reorder_t r;
    ps__vb_reorder_init(&r, 2);
    r.got[1] = 0xffffffffu;
    Item a = MakeItem(1, {0}); // one chunk after 0xffffffff
    ps__vb_reorder_push(&r, &a.it);
    EXPECT_EQ(PopId(&r), -1);
    ASSERT_EQ(ps__vb_reorder_slave(&r, 1), PS_OK);
    EXPECT_EQ(PopId(&r), 1);
}

TEST(Reorder, BadQpIsAProtocolError)
{
    ps__vb_reorder_t r;
    ps__vb_reorder_init(&r, 2);
    EXPECT_EQ(ps__vb_reorder_slave(&r, 0), PS_ERR_PROTOCOL);
    EXPECT_EQ(ps__vb_reorder_slave(&r, 2), PS_ERR_PROTOCOL);
}

TEST(Reorder, InterleavedStreamKeepsSendOrder)
{
    // A sender posts 50 messages; message i has (i % 3) slave chunks on
    // QP 1 and (i % 2) on QP 2. The receiver sees the metas in order but
    // the slave chunks of each QP only every few messages, in bursts.
    const unsigned n = 50;
    std::vector<Item> items(n);
    uint32_t c1 = 0, c2 = 0;
    std::vector<uint32_t> per1, per2;
    for (unsigned i = 0; i < n; i++) {
        c1 += i % 3;
        c2 += i % 2;
        items[i] = MakeItem((int)i, {c1, c2});
        per1.push_back(i % 3);
        per2.push_back(i % 2);
    }
    ps__vb_reorder_t r;
    ps__vb_reorder_init(&r, 3);
    std::vector<int> order;
    unsigned s1 = 0, s2 = 0; // slave chunks delivered so far, by message
    for (unsigned i = 0; i < n; i++) {
        ps__vb_reorder_push(&r, &items[i].it);
        if (i % 7 == 6 || i == n - 1) {
            for (; s1 <= i; s1++)
                for (unsigned k = 0; k < per1[s1]; k++)
                    ASSERT_EQ(ps__vb_reorder_slave(&r, 1), PS_OK);
        }
        if (i % 5 == 4 || i == n - 1) {
            for (; s2 <= i; s2++)
                for (unsigned k = 0; k < per2[s2]; k++)
                    ASSERT_EQ(ps__vb_reorder_slave(&r, 2), PS_OK);
        }
        for (int id; (id = PopId(&r)) >= 0;)
            order.push_back(id);
    }
    ASSERT_EQ(order.size(), n);
    for (unsigned i = 0; i < n; i++)
        EXPECT_EQ(order[i], (int)i);
}

TEST(Reorder, DrainGivesEveryWaitingItem)
{
    ps__vb_reorder_t r;
    ps__vb_reorder_init(&r, 2);
    Item a = MakeItem(1, {5});
    Item b = MakeItem(2, {6});
    ps__vb_reorder_push(&r, &a.it);
    ps__vb_reorder_push(&r, &b.it);
    std::vector<int> got;
    ps__vb_reorder_drain(
        &r,
        [](void *ctx, ps__vb_reorder_item_t *it) {
            static_cast<std::vector<int> *>(ctx)->push_back(reinterpret_cast<Item *>(it)->id);
        },
        &got);
    EXPECT_EQ(got, (std::vector<int>{1, 2}));
    EXPECT_EQ(r.waiting, 0u);
    EXPECT_EQ(PopId(&r), -1);
}

} // namespace

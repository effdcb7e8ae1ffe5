// The id-indexed peer slots every van keeps, and the locked peer table
// over them.
#include <gtest/gtest.h>

extern "C" {
#include "ps/net/codec/message.h"
#include "ps/net/van/peer_slots.h"
#include "ps/net/van/peer_table.h"
}

namespace {

struct Peer {
    int id;
    int value;
};

TEST(PeerSlots, FindSeesWhatGetCreated)
{
    ps_van_peer_slots_t t = {nullptr, 0};
    EXPECT_EQ(nullptr, ps_van_peer_slots_find(&t, 9));
    EXPECT_EQ(nullptr, ps_van_peer_slots_get(&t, 9, sizeof(Peer), 0, nullptr));
    int created = 0;
    auto *p = static_cast<Peer *>(ps_van_peer_slots_get(&t, 9, sizeof(Peer), 1, &created));
    ASSERT_NE(nullptr, p);
    EXPECT_EQ(1, created);
    EXPECT_EQ(0, p->value); // zeroed
    p->value = 42;
    EXPECT_EQ(p, ps_van_peer_slots_find(&t, 9));
    EXPECT_EQ(p, ps_van_peer_slots_get(&t, 9, sizeof(Peer), 1, &created));
    EXPECT_EQ(0, created);
    // Neighbours, ids past the table and impossible ids: none.
    EXPECT_EQ(nullptr, ps_van_peer_slots_find(&t, 8));
    EXPECT_EQ(nullptr, ps_van_peer_slots_find(&t, 10));
    EXPECT_EQ(nullptr, ps_van_peer_slots_find(&t, t.cap));
    EXPECT_EQ(nullptr, ps_van_peer_slots_find(&t, 0));
    EXPECT_EQ(nullptr, ps_van_peer_slots_find(&t, -1));
    EXPECT_EQ(nullptr, ps_van_peer_slots_get(&t, PS_NODE_EMPTY, sizeof(Peer), 1, nullptr));
    // Growing keeps what was there.
    auto *far = static_cast<Peer *>(ps_van_peer_slots_get(&t, 1001, sizeof(Peer), 1, nullptr));
    ASSERT_NE(nullptr, far);
    EXPECT_GT(t.cap, 1001);
    EXPECT_EQ(far, ps_van_peer_slots_find(&t, 1001));
    EXPECT_EQ(42, static_cast<Peer *>(ps_van_peer_slots_find(&t, 9))->value);
    ps_van_peer_slots_free(&t);
    EXPECT_EQ(nullptr, ps_van_peer_slots_find(&t, 9));
}

} // namespace

// The locked table over the slots, with each peer's id and last failure.
namespace {

struct TablePeer {
    ps_van_peer_t hdr;
    int conns[3];
    int num;
};

// Takes the connections of a peer whose number is even.
int PickEven(void *peer, void **out, int max)
{
    auto *p = static_cast<TablePeer *>(peer);
    int n = 0;
    for (int i = 0; i < p->num && n < max; ++i) {
        if (p->conns[i] % 2 == 0) {
            out[n++] = &p->conns[i];
        }
    }
    return n;
}

TEST(PeerTable, PeersKnowTheirIdAndHowTheyWentAway)
{
    ps_van_peer_table_t t;
    ps_van_peer_table_init(&t, sizeof(TablePeer));
    EXPECT_EQ(nullptr, ps_van_peer_table_get(&t, 9, 0));
    EXPECT_EQ(PS_OK, ps_van_peer_table_lost(&t, 9)); // no such peer
    auto *p = static_cast<TablePeer *>(ps_van_peer_table_get(&t, 9, 1));
    ASSERT_NE(nullptr, p);
    EXPECT_EQ(9, p->hdr.id);
    EXPECT_EQ(PS_OK, p->hdr.lost);
    EXPECT_EQ(p, ps_van_peer_table_get(&t, 9, 1));

    // Only a gone or broken link is kept for the sends that follow.
    ps_van_peer_went(&p->hdr, PS_OK);
    EXPECT_EQ(PS_OK, ps_van_peer_table_lost(&t, 9));
    ps_van_peer_went(&p->hdr, PS_ERR_PEER_GONE);
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_van_peer_table_lost(&t, 9));
    ps_van_peer_went(&p->hdr, PS_ERR_TIMED_OUT);
    EXPECT_EQ(PS_ERR_PEER_GONE, ps_van_peer_table_lost(&t, 9));
    ps_van_peer_went(&p->hdr, PS_ERR_LINK_FAILED);
    EXPECT_EQ(PS_ERR_LINK_FAILED, ps_van_peer_table_lost(&t, 9));
    ps_van_peer_connected(&p->hdr);
    EXPECT_EQ(PS_OK, ps_van_peer_table_lost(&t, 9));
    ps_van_peer_table_fini(&t);
}

TEST(PeerTable, CollectGathersWhatEachPeerPicks)
{
    ps_van_peer_table_t t;
    ps_van_peer_table_init(&t, sizeof(TablePeer));
    void **list = nullptr;
    EXPECT_EQ(0, ps_van_peer_table_collect(&t, PickEven, 3, &list));
    free(list);
    // 40 peers (more than the first array holds), ids spread out.
    int want = 0;
    for (int i = 0; i < 40; ++i) {
        auto *p = static_cast<TablePeer *>(ps_van_peer_table_get(&t, 8 + 3 * i, 1));
        ASSERT_NE(nullptr, p);
        p->num = 3;
        for (int c = 0; c < 3; ++c) {
            p->conns[c] = i * 3 + c;
            want += (i * 3 + c) % 2 == 0;
        }
    }
    int n = ps_van_peer_table_collect(&t, PickEven, 3, &list);
    ASSERT_EQ(want, n);
    int prev = -1;
    for (int i = 0; i < n; ++i) {
        int v = *static_cast<int *>(list[i]);
        EXPECT_EQ(0, v % 2);
        EXPECT_GT(v, prev); // peers in id order, each peer's in its order
        prev = v;
    }
    free(list);
    ps_van_peer_table_fini(&t);
}

} // namespace

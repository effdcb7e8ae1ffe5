// The id-indexed peer table every van keeps.
#include <gtest/gtest.h>

extern "C" {
#include "ps/net/codec/message.h"
#include "ps/net/van/peer_slots.h"
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

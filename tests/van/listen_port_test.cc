// How every van picks the port it listens on (ps_van_listen_on_port): the
// node's own port once, else random ones while they are taken.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

extern "C" {
#include "ps/net/codec/message.h"
#include "ps/net/van/addr.h"
}

namespace {

struct Tries {
    std::vector<int> ports;
    std::vector<int> random;
    int taken = 0;                // the first `taken` tries find the port taken
    ps_status_t other = PS_OK;    // else this, when not PS_OK
};

ps_status_t Try(void *arg, int port, int random, char *where, size_t cap)
{
    auto *t = static_cast<Tries *>(arg);
    t->ports.push_back(port);
    t->random.push_back(random);
    snprintf(where, cap, "test:%d", port);
    if (static_cast<int>(t->ports.size()) <= t->taken) {
        return PS_ERR_ADDRESS_IN_USE;
    }
    return t->other;
}

ps_node_t NodeWithPort(int port)
{
    ps_node_t node{};
    if (port != 0) {
        node.ports[0] = port;
        node.num_ports = 1;
    }
    return node;
}

ps_status_t Listen(const ps_node_t &node, int max_retry, Tries *t, int *port, char *where)
{
    return ps_van_listen_on_port(&node, max_retry, 0, PS_LOG_VAN, Try, t, nullptr, port, where,
                                 64);
}

TEST(ListenOnPort, TheNodesPortIsTriedOnce)
{
    Tries t;
    int port = 0;
    char where[64];
    ASSERT_EQ(PS_OK, Listen(NodeWithPort(9123), 5, &t, &port, where));
    EXPECT_EQ(std::vector<int>({9123}), t.ports);
    EXPECT_EQ(std::vector<int>({0}), t.random);
    EXPECT_EQ(9123, port);
    EXPECT_STREQ("test:9123", where);

    Tries taken;
    taken.taken = 1;
    EXPECT_EQ(PS_ERR_ADDRESS_IN_USE, Listen(NodeWithPort(9123), 5, &taken, &port, where));
    EXPECT_EQ(1u, taken.ports.size());
}

TEST(ListenOnPort, RandomPortsAreTriedWhileTaken)
{
    Tries t;
    t.taken = 2;
    int port = 0;
    char where[64];
    ASSERT_EQ(PS_OK, Listen(NodeWithPort(0), 5, &t, &port, where));
    ASSERT_EQ(3u, t.ports.size());
    for (size_t i = 0; i < t.ports.size(); ++i) {
        EXPECT_GE(t.ports[i], 10000);
        EXPECT_LT(t.ports[i], 50000);
        EXPECT_EQ(1, t.random[i]);
    }
    EXPECT_EQ(t.ports.back(), port);

    // max_retry + 1 tries at most.
    Tries full;
    full.taken = 100;
    EXPECT_EQ(PS_ERR_ADDRESS_IN_USE, Listen(NodeWithPort(0), 3, &full, &port, where));
    EXPECT_EQ(4u, full.ports.size());
}

TEST(ListenOnPort, AnotherFailureEndsTheSearch)
{
    Tries t;
    t.taken = 1;
    t.other = PS_ERR_INVALID_ARG;
    int port = 0;
    char where[64];
    EXPECT_EQ(PS_ERR_INVALID_ARG, Listen(NodeWithPort(0), 5, &t, &port, where));
    EXPECT_EQ(2u, t.ports.size());

    Tries none;
    EXPECT_EQ(PS_ERR_INVALID_ARG, Listen(NodeWithPort(70000), 5, &none, &port, where));
    EXPECT_TRUE(none.ports.empty());
}

} // namespace

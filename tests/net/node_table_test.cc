// Unit tests of the scheduler's id assignment.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/net/node_table_internal.h"
}

namespace {

ps_node_t make(ps_role_t role, const char *host, int port, int rank = -1)
{
    ps_node_t n;
    ps_node_init(&n);
    n.role = role;
    snprintf(n.hostname, sizeof(n.hostname), "%s", host);
    n.num_ports = 1;
    n.ports[0] = port;
    n.aux_id = rank;
    return n;
}

struct Result {
    ps_status_t status;
    std::string why;
    std::vector<ps_node_t> nodes;
};

Result assign(std::vector<ps_node_t> nodes, int servers, int workers,
              const char *ordered = nullptr, int mixed = 0, int group_size = 1)
{
    char why[512];
    Result r;
    r.status = ps__node_table_assign(nodes.data(), nodes.size(), servers, workers, group_size,
                                     ordered, mixed, why, sizeof(why));
    r.why = why;
    r.nodes = nodes;
    return r;
}

std::string ep(const ps_node_t &n)
{
    return std::string(n.hostname) + ":" + std::to_string(n.ports[0]);
}

TEST(NodeTable, SortsByHostThenPortAndNumbersAsUpstream)
{
    auto r = assign({make(PS_ROLE_WORKER, "10.0.0.2", 5000), make(PS_ROLE_SERVER, "10.0.0.1", 7000),
                     make(PS_ROLE_WORKER, "10.0.0.1", 9000), make(PS_ROLE_SERVER, "10.0.0.1", 6000),
                     make(PS_ROLE_WORKER, "10.0.0.1", 8000)},
                    2, 3);
    ASSERT_EQ(PS_OK, r.status) << r.why;
    ASSERT_EQ(5u, r.nodes.size());
    // Servers by rank, then workers by rank.
    EXPECT_EQ("10.0.0.1:6000", ep(r.nodes[0]));
    EXPECT_EQ(8, r.nodes[0].id);
    EXPECT_EQ("10.0.0.1:7000", ep(r.nodes[1]));
    EXPECT_EQ(10, r.nodes[1].id);
    EXPECT_EQ("10.0.0.1:8000", ep(r.nodes[2]));
    EXPECT_EQ(9, r.nodes[2].id);
    EXPECT_EQ("10.0.0.1:9000", ep(r.nodes[3]));
    EXPECT_EQ(11, r.nodes[3].id);
    EXPECT_EQ("10.0.0.2:5000", ep(r.nodes[4]));
    EXPECT_EQ(13, r.nodes[4].id);
}

TEST(NodeTable, PreferredRanksAreHonoured)
{
    auto r = assign({make(PS_ROLE_WORKER, "h", 1, 2), make(PS_ROLE_WORKER, "h", 2, 0),
                     make(PS_ROLE_WORKER, "h", 3, 1), make(PS_ROLE_SERVER, "h", 4, 0)},
                    1, 3);
    ASSERT_EQ(PS_OK, r.status) << r.why;
    EXPECT_EQ(8, r.nodes[0].id);
    EXPECT_EQ("h:2", ep(r.nodes[1]));
    EXPECT_EQ(9, r.nodes[1].id);
    EXPECT_EQ("h:3", ep(r.nodes[2]));
    EXPECT_EQ(11, r.nodes[2].id);
    EXPECT_EQ("h:1", ep(r.nodes[3]));
    EXPECT_EQ(13, r.nodes[3].id);
}

TEST(NodeTable, MixedPreferredAndFreeRanks)
{
    // Port 1 wants rank 1; the others fill ranks 0 and 2 in sorted order.
    auto r = assign({make(PS_ROLE_WORKER, "h", 3), make(PS_ROLE_WORKER, "h", 1, 1),
                     make(PS_ROLE_WORKER, "h", 2)},
                    0, 3);
    ASSERT_EQ(PS_OK, r.status) << r.why;
    EXPECT_EQ("h:2", ep(r.nodes[0]));
    EXPECT_EQ("h:1", ep(r.nodes[1]));
    EXPECT_EQ("h:3", ep(r.nodes[2]));
}

TEST(NodeTable, DuplicatePreferredRankIsRejected)
{
    std::vector<ps_node_t> in = {make(PS_ROLE_WORKER, "h", 1, 0), make(PS_ROLE_WORKER, "h", 2, 0)};
    auto r = assign(in, 0, 2);
    EXPECT_EQ(PS_ERR_CONFIG, r.status);
    EXPECT_NE(std::string::npos, r.why.find("both asked for rank 0")) << r.why;
    EXPECT_NE(std::string::npos, r.why.find("h:1")) << r.why;
    EXPECT_NE(std::string::npos, r.why.find("h:2")) << r.why;
    // Unchanged on failure.
    EXPECT_EQ(0, memcmp(in.data(), r.nodes.data(), in.size() * sizeof(ps_node_t)));
}

TEST(NodeTable, OutOfRangePreferredRankIsRejected)
{
    auto r = assign({make(PS_ROLE_SERVER, "h", 1, 2), make(PS_ROLE_SERVER, "h", 2)}, 2, 0);
    EXPECT_EQ(PS_ERR_CONFIG, r.status);
    EXPECT_NE(std::string::npos, r.why.find("asked for rank 2 but DMLC_NUM_SERVER is 2"))
        << r.why;
}

TEST(NodeTable, SameRankInDifferentRolesIsFine)
{
    auto r = assign({make(PS_ROLE_SERVER, "h", 1, 0), make(PS_ROLE_WORKER, "h", 2, 0)}, 1, 1);
    ASSERT_EQ(PS_OK, r.status) << r.why;
    EXPECT_EQ(8, r.nodes[0].id);
    EXPECT_EQ(9, r.nodes[1].id);
}

TEST(NodeTable, RoleCountsMustMatch)
{
    auto r = assign({make(PS_ROLE_SERVER, "h", 1), make(PS_ROLE_SERVER, "h", 2)}, 1, 1);
    EXPECT_EQ(PS_ERR_CONFIG, r.status);
    EXPECT_NE(std::string::npos, r.why.find("2 servers and 0 workers registered")) << r.why;
}

TEST(NodeTable, DuplicateAddressIsRejected)
{
    auto r = assign({make(PS_ROLE_WORKER, "h", 1), make(PS_ROLE_SERVER, "h", 1)}, 1, 1);
    EXPECT_EQ(PS_ERR_CONFIG, r.status);
    EXPECT_NE(std::string::npos, r.why.find("same address")) << r.why;
}

TEST(NodeTable, OrderedHostsDecideOrder)
{
    auto r = assign({make(PS_ROLE_WORKER, "10.0.0.1", 1), make(PS_ROLE_WORKER, "10.0.0.2", 1),
                     make(PS_ROLE_WORKER, "10.0.0.3", 1), make(PS_ROLE_WORKER, "10.0.0.3", 2)},
                    0, 4, " 10.0.0.3:2, 10.0.0.2 ,10.0.0.3");
    ASSERT_EQ(PS_OK, r.status) << r.why;
    EXPECT_EQ("10.0.0.3:2", ep(r.nodes[0]));
    EXPECT_EQ("10.0.0.2:1", ep(r.nodes[1]));
    EXPECT_EQ("10.0.0.3:1", ep(r.nodes[2]));
    EXPECT_EQ("10.0.0.1:1", ep(r.nodes[3])); // not listed: last
}

TEST(NodeTable, OrderedHostsIPv6)
{
    auto r = assign({make(PS_ROLE_WORKER, "::1", 5), make(PS_ROLE_WORKER, "::1", 6),
                     make(PS_ROLE_WORKER, "fe80::2", 1)},
                    0, 3, "fe80::2,[::1]:6");
    ASSERT_EQ(PS_OK, r.status) << r.why;
    EXPECT_EQ("fe80::2:1", ep(r.nodes[0]));
    EXPECT_EQ("::1:6", ep(r.nodes[1]));
    EXPECT_EQ("::1:5", ep(r.nodes[2]));
}

// BytePS mixed mode: 2 workers, each with a co-located server, and 2
// servers alone on their hosts; the lone servers take ranks 0 and 1.
TEST(NodeTable, MixedModePutsLoneServersFirst)
{
    std::vector<ps_node_t> job = {make(PS_ROLE_SERVER, "10.0.0.1", 1), make(PS_ROLE_WORKER, "10.0.0.1", 2),
                                  make(PS_ROLE_SERVER, "10.0.0.2", 1), make(PS_ROLE_WORKER, "10.0.0.2", 2),
                                  make(PS_ROLE_SERVER, "10.0.0.4", 1), make(PS_ROLE_SERVER, "10.0.0.3", 1)};
    auto plain = assign(job, 4, 2);
    ASSERT_EQ(PS_OK, plain.status) << plain.why;
    EXPECT_EQ("10.0.0.1:1", ep(plain.nodes[0]));
    auto r = assign(job, 4, 2, nullptr, 1);
    ASSERT_EQ(PS_OK, r.status) << r.why;
    EXPECT_EQ("10.0.0.3:1", ep(r.nodes[0]));
    EXPECT_EQ(8, r.nodes[0].id);
    EXPECT_EQ("10.0.0.4:1", ep(r.nodes[1]));
    EXPECT_EQ("10.0.0.1:1", ep(r.nodes[2]));
    EXPECT_EQ("10.0.0.2:1", ep(r.nodes[3]));
    EXPECT_EQ(14, r.nodes[3].id);
    EXPECT_EQ("10.0.0.1:2", ep(r.nodes[4]));
    EXPECT_EQ(9, r.nodes[4].id);
    EXPECT_EQ("10.0.0.2:2", ep(r.nodes[5]));
}

TEST(NodeTable, MixedModeKeepsPreferredRanks)
{
    auto r = assign({make(PS_ROLE_SERVER, "10.0.0.1", 1, 0), make(PS_ROLE_WORKER, "10.0.0.1", 2),
                     make(PS_ROLE_SERVER, "10.0.0.9", 1)},
                    2, 1, nullptr, 1);
    ASSERT_EQ(PS_OK, r.status) << r.why;
    EXPECT_EQ("10.0.0.1:1", ep(r.nodes[0]));
    EXPECT_EQ("10.0.0.9:1", ep(r.nodes[1]));
}

TEST(NodeTable, MixedModeRefusesLayoutsUpstreamRefuses)
{
    auto three = assign({make(PS_ROLE_SERVER, "10.0.0.1", 1), make(PS_ROLE_WORKER, "10.0.0.1", 2),
                         make(PS_ROLE_SERVER, "10.0.0.1", 3)},
                        2, 1, nullptr, 1);
    EXPECT_EQ(PS_ERR_CONFIG, three.status);
    EXPECT_NE(std::string::npos, three.why.find("3 nodes registered from host 10.0.0.1")) << three.why;
    auto lone = assign({make(PS_ROLE_SERVER, "10.0.0.1", 1), make(PS_ROLE_WORKER, "10.0.0.2", 2)},
                       1, 1, nullptr, 1);
    EXPECT_EQ(PS_ERR_CONFIG, lone.status);
    EXPECT_NE(std::string::npos, lone.why.find("worker 10.0.0.2:2 is alone on its host")) << lone.why;
    auto both = assign({make(PS_ROLE_SERVER, "10.0.0.1", 1), make(PS_ROLE_WORKER, "10.0.0.1", 2)},
                       1, 1, "10.0.0.1", 1);
    EXPECT_EQ(PS_ERR_CONFIG, both.status);
    EXPECT_NE(std::string::npos, both.why.find("BYTEPS_ORDERED_HOSTS")) << both.why;
    // Unchanged on refusal.
    EXPECT_EQ(PS_NODE_EMPTY, lone.nodes[0].id);
}

// DMLC_GROUP_SIZE 2: 2 server groups make 4 servers; preferred ranks count
// instances, and a node that asked for an instance gets a rank of it.
TEST(NodeTable, InstanceGroupsCountInstancesAndHonourInstances)
{
    const int i0 = PS_NODE_AUX_INSTANCE(0), i1 = PS_NODE_AUX_INSTANCE(1);
    auto r = assign({make(PS_ROLE_SERVER, "h", 1, i1), make(PS_ROLE_SERVER, "h", 2, i1),
                     make(PS_ROLE_SERVER, "h", 3, i0), make(PS_ROLE_SERVER, "h", 4, 2),
                     make(PS_ROLE_WORKER, "h", 5), make(PS_ROLE_WORKER, "h", 6, i1)},
                    2, 1, nullptr, 0, 2);
    ASSERT_EQ(PS_OK, r.status) << r.why;
    // Rank 2 was asked for; instance 1 takes ranks 1 and 3 in sorted order,
    // instance 0 the one left (0).
    EXPECT_EQ("h:3", ep(r.nodes[0]));
    EXPECT_EQ("h:1", ep(r.nodes[1]));
    EXPECT_EQ("h:4", ep(r.nodes[2]));
    EXPECT_EQ("h:2", ep(r.nodes[3]));
    EXPECT_EQ(ps_server_rank_to_id(3), r.nodes[3].id);
    // The worker of instance 1 gets rank 1, the other the rank left.
    EXPECT_EQ("h:5", ep(r.nodes[4]));
    EXPECT_EQ(ps_worker_rank_to_id(0), r.nodes[4].id);
    EXPECT_EQ("h:6", ep(r.nodes[5]));
    EXPECT_EQ(ps_worker_rank_to_id(1), r.nodes[5].id);

    // Three nodes for instance 1 of two groups.
    auto full = assign({make(PS_ROLE_SERVER, "h", 1, i1), make(PS_ROLE_SERVER, "h", 2, i1),
                        make(PS_ROLE_SERVER, "h", 3, i1), make(PS_ROLE_SERVER, "h", 4),
                        make(PS_ROLE_WORKER, "h", 5), make(PS_ROLE_WORKER, "h", 6)},
                       2, 1, nullptr, 0, 2);
    EXPECT_EQ(PS_ERR_CONFIG, full.status);
    EXPECT_NE(std::string::npos, full.why.find("every group's instance of it is taken"))
        << full.why;
    // An instance beyond the group, and counts that are not groups x size.
    auto beyond = assign({make(PS_ROLE_SERVER, "h", 1, PS_NODE_AUX_INSTANCE(2)),
                          make(PS_ROLE_SERVER, "h", 2), make(PS_ROLE_WORKER, "h", 5),
                          make(PS_ROLE_WORKER, "h", 6)},
                         1, 1, nullptr, 0, 2);
    EXPECT_EQ(PS_ERR_CONFIG, beyond.status);
    EXPECT_NE(std::string::npos, beyond.why.find("DMLC_GROUP_SIZE is smaller")) << beyond.why;
    auto counts = assign({make(PS_ROLE_SERVER, "h", 1), make(PS_ROLE_WORKER, "h", 5),
                          make(PS_ROLE_WORKER, "h", 6)},
                         1, 1, nullptr, 0, 2);
    EXPECT_EQ(PS_ERR_CONFIG, counts.status);
    EXPECT_NE(std::string::npos, counts.why.find("DMLC_GROUP_SIZE 2 make 2 and 2")) << counts.why;
}

TEST(NodeTable, EmptyJob)
{
    auto r = assign({}, 0, 0);
    EXPECT_EQ(PS_OK, r.status);
}

TEST(NodeTable, FindAndDescribe)
{
    std::vector<ps_node_t> v = {make(PS_ROLE_WORKER, "a", 1), make(PS_ROLE_SERVER, "::1", 2)};
    EXPECT_EQ(1, ps__node_table_find(v.data(), v.size(), "::1", 2));
    EXPECT_EQ(-1, ps__node_table_find(v.data(), v.size(), "::1", 3));
    char buf[300];
    EXPECT_STREQ("server [::1]:2", ps__node_describe(&v[1], buf, sizeof(buf)));
    EXPECT_STREQ("worker a:1", ps__node_describe(&v[0], buf, sizeof(buf)));
}

} // namespace

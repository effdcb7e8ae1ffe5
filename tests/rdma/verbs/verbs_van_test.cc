// The ibverbs van as the registry and the postoffice see it, on any
// machine: it is compiled in under "ibverbs" and "1", its ops table is
// complete, and without an RDMA device it says why ("no RDMA device: ...")
// and refuses to open with a status instead of crashing. On a machine with
// a device the same tests check the other side (find and open succeed).
#include <cstring>
#include <string>

#include "gtest/gtest.h"

extern "C" {
#include "ps/base/config.h"
#include "ps/base/status.h"
#include "ps/net/van/van.h"
}

namespace {

const ps_van_component_t *Component()
{
    const ps_van_component_t *list[32];
    size_t n = ps_van_list(list, 32);
    for (size_t i = 0; i < n && i < 32; i++) {
        if (strcmp(list[i]->name, "ibverbs") == 0)
            return list[i];
    }
    return nullptr;
}

std::string Why(const ps_van_component_t *c)
{
    char why[256] = "";
    if (c->unavailable == nullptr || c->unavailable(why, sizeof(why)) == 0)
        return "";
    return why;
}

TEST(VerbsVan, RegisteredWithItsUpstreamNames)
{
    const ps_van_component_t *c = Component();
    ASSERT_NE(c, nullptr) << "linking //ps/rdma/verbs registers the van";
    EXPECT_STREQ(c->aliases, "1") << "DMLC_ENABLE_RDMA=1 (deprecated) still names it";
    EXPECT_NE(c->unavailable, nullptr);
}

// StepMesh's queue-pair variables are this van's (its table), under their
// upstream names too.
TEST(VerbsVan, QueuePairVariablesLiveWithTheVan)
{
    const struct {
        const char *name, *alias;
    } want[] = {{"STEPMESH_QP_NUM", "STEPAF_QP_NUM"},
                {"STEPMESH_SPLIT_QP_LAG", "DMLC_SPLIT_QP_LAG"}};
    for (const auto &w : want) {
        ps_config_id_t id, by_alias;
        ASSERT_EQ(ps_config_find(w.name, &id), PS_OK) << w.name;
        ASSERT_EQ(ps_config_find(w.alias, &by_alias), PS_OK) << w.alias;
        EXPECT_EQ(id, by_alias);
        EXPECT_GE(id, PS_CFG_COUNT) << w.name << " is in the core table";
    }
}

TEST(VerbsVan, OpsTableIsComplete)
{
    const ps_van_component_t *c = Component();
    ASSERT_NE(c, nullptr);
    const ps_van_ops_t *ops = c->ops;
    ASSERT_NE(ops, nullptr);
    EXPECT_EQ(ops->size, sizeof(ps_van_ops_t));
    EXPECT_NE(ops->open, nullptr);
    EXPECT_NE(ops->close, nullptr);
    EXPECT_NE(ops->query, nullptr);
    EXPECT_NE(ops->bind, nullptr);
    EXPECT_NE(ops->connect, nullptr);
    EXPECT_NE(ops->disconnect, nullptr);
    EXPECT_NE(ops->set_node_id, nullptr);
    EXPECT_NE(ops->send, nullptr);
    EXPECT_NE(ops->register_mem, nullptr);
    EXPECT_NE(ops->deregister_mem, nullptr);
    EXPECT_NE(ops->stats, nullptr);
}

TEST(VerbsVan, SelectedByDmlcEnableRdma)
{
    const char *name = nullptr;
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_RDMA, "ibverbs"), PS_OK);
    ASSERT_EQ(ps_van_select_name(&name), PS_OK);
    EXPECT_STREQ(name, "ibverbs");
    ASSERT_EQ(ps_config_set(PS_CFG_DMLC_ENABLE_RDMA, "1"), PS_OK);
    ASSERT_EQ(ps_van_select_name(&name), PS_OK);
    EXPECT_STREQ(name, "ibverbs");
    ps_config_set(PS_CFG_DMLC_ENABLE_RDMA, nullptr);
}

TEST(VerbsVan, UnavailableSaysWhyAndFindFollows)
{
    const ps_van_component_t *c = Component();
    ASSERT_NE(c, nullptr);
    std::string why = Why(c);
    const ps_van_component_t *found = nullptr;
    ps_status_t st = ps_van_find("ibverbs", &found);
    ps_status_t st1 = ps_van_find("1", &found);
    if (why.empty()) {
        printf("this machine has an RDMA device: the van is available\n");
        EXPECT_EQ(st, PS_OK);
        EXPECT_EQ(st1, PS_OK);
        return;
    }
    printf("unavailable: %s\n", why.c_str());
    EXPECT_EQ(why.rfind("no RDMA device: ", 0), 0u) << why;
    EXPECT_GT(why.size(), strlen("no RDMA device: ")) << "a reason follows";
    EXPECT_EQ(st, PS_ERR_UNSUPPORTED) << "chosen without a device: a status, not a crash";
    EXPECT_EQ(st1, PS_ERR_UNSUPPORTED);
    // The answer is stable (probed once).
    EXPECT_EQ(Why(c), why);
}

TEST(VerbsVan, OpenWithoutDeviceFailsCleanly)
{
    const ps_van_component_t *c = Component();
    ASSERT_NE(c, nullptr);
    if (Why(c).empty())
        GTEST_SKIP() << "this machine has an RDMA device; see //tests/rdma/verbs:verbs_hw_test";
    ps_van_params_t p;
    memset(&p, 0, sizeof(p));
    p.role = PS_ROLE_WORKER;
    ps_van_callbacks_t cb;
    memset(&cb, 0, sizeof(cb));
    ps_van_t *van = reinterpret_cast<ps_van_t *>(0x1);
    EXPECT_EQ(c->ops->open(&p, &cb, &van), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(van, reinterpret_cast<ps_van_t *>(0x1)) << "out-parameter untouched on failure";
    EXPECT_EQ(c->ops->open(nullptr, &cb, &van), PS_ERR_INVALID_ARG);
}

} // namespace

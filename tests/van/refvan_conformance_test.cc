// The van conformance suite on the reference van "mem" (ps/net/refvan):
// vans of one process joined by in-memory byte pipes. Its host names only
// key the in-process listener table; 127.0.0.1 keeps the suite's check
// that the host can bind it trivially true.

#include "gtest/gtest.h"
#include "tests/van/van_conformance.h"

extern "C" {
#include "ps/base/status.h"
#include "ps/net/caps.h"
#include "ps/net/van/van.h"
}

namespace {

using ps_van_test::VanConfig;
using ps_van_test::VanConfigName;
using ps_van_test::VanConformance;

VanConfig MemConfig()
{
    VanConfig c;
    c.name = "mem";
    c.van = "mem";
    // A peer's van closing ends its pipes: the end of file says "gone".
    c.peer_close_statuses = {PS_ERR_PEER_GONE};
    // The hello's van_data (mem_rx.c): "PSMEMH" and the announced id.
    c.hello_tag = "PSMEMH";
    c.hello_len = 10;
    // Bytes count as sent once the pipe took them.
    c.sent_counts_taken_bytes = true;
    // One pipe pair per peer, reaching only this process.
    c.caps_set = PS_CAP_SAME_HOST_ONLY | PS_CAP_BUSY_POLL;
    c.caps_clear = PS_CAP_REMOTE_WRITE | PS_CAP_MULTI_STREAM;
    c.num_streams = 1;
    return c;
}

INSTANTIATE_TEST_SUITE_P(Mem, VanConformance, ::testing::Values(MemConfig()), VanConfigName);

// The job secret: refused at open, since every peer shares the process
// and its key (a proof would show nothing).
TEST(MemVan, RefusesToOpenWithAJobSecret)
{
    const ps_van_component_t *c = nullptr;
    ASSERT_EQ(ps_van_find("refvan", &c), PS_OK);
    ps_van_params_t p = ps_van_test::DefaultParams();
    p.auth_enabled = 1;
    ps_van_t *van = nullptr;
    EXPECT_EQ(c->ops->open(&p, nullptr, &van), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(van, nullptr);
}

} // namespace

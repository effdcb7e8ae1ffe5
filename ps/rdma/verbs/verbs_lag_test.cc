// LAG port pinning policy with fake mlx5dv calls, and the dlopen lookup
// failing or succeeding cleanly on this machine.
#include <errno.h>

#include <cstring>
#include <map>

#include "gtest/gtest.h"

extern "C" {
#include "ps/rdma/verbs/verbs_lag.h"
}

namespace {

std::map<struct ibv_qp *, int> g_port;
int g_active = 2;
int g_fail_modify_at = -1;
int g_modifies = 0;

int FakeQuery(struct ibv_qp *qp, uint8_t *port, uint8_t *active)
{
    (void)qp;
    if (g_active < 0)
        return EOPNOTSUPP;
    *port = 1;
    *active = (uint8_t)g_active;
    return 0;
}

int FakeModify(struct ibv_qp *qp, uint8_t port)
{
    if (g_modifies++ == g_fail_modify_at)
        return EINVAL;
    g_port[qp] = port;
    return 0;
}

const ps__vb_lag_ops_t kFake = {FakeQuery, FakeModify};

struct ibv_qp *Qp(int i)
{
    return reinterpret_cast<struct ibv_qp *>(static_cast<uintptr_t>(0x1000 + 16 * i));
}

void Reset()
{
    g_port.clear();
    g_active = 2;
    g_fail_modify_at = -1;
    g_modifies = 0;
}

TEST(Lag, AlternatesPortsOverTwoPortBond)
{
    Reset();
    struct ibv_qp *qps[4] = {Qp(0), Qp(1), Qp(2), Qp(3)};
    unsigned ports = 0;
    ASSERT_EQ(ps__vb_lag_pin(&kFake, qps, 4, &ports, nullptr), PS_OK);
    EXPECT_EQ(ports, 2u);
    EXPECT_EQ(g_port[Qp(0)], 1);
    EXPECT_EQ(g_port[Qp(1)], 2);
    EXPECT_EQ(g_port[Qp(2)], 1);
    EXPECT_EQ(g_port[Qp(3)], 2);
}

TEST(Lag, NotABondIsUnsupported)
{
    Reset();
    struct ibv_qp *qps[2] = {Qp(0), Qp(1)};
    g_active = 1;
    EXPECT_EQ(ps__vb_lag_pin(&kFake, qps, 2, nullptr, nullptr), PS_ERR_UNSUPPORTED);
    g_active = -1; // query not supported by the device
    EXPECT_EQ(ps__vb_lag_pin(&kFake, qps, 2, nullptr, nullptr), PS_ERR_UNSUPPORTED);
    EXPECT_TRUE(g_port.empty()) << "nothing modified";
}

TEST(Lag, ModifyFailureIsADeviceError)
{
    Reset();
    struct ibv_qp *qps[2] = {Qp(0), Qp(1)};
    g_fail_modify_at = 1;
    int err = 0;
    EXPECT_EQ(ps__vb_lag_pin(&kFake, qps, 2, nullptr, &err), PS_ERR_DEVICE);
    EXPECT_EQ(err, EINVAL);
}

TEST(Lag, LookupIsCleanEitherWay)
{
    char why[160] = "";
    const ps__vb_lag_ops_t *ops = ps__vb_lag_ops(why, sizeof(why));
    if (ops == nullptr) {
        EXPECT_GT(strlen(why), 0u) << "a missing library comes with a reason";
    } else {
        EXPECT_NE(ops->query, nullptr);
        EXPECT_NE(ops->modify, nullptr);
    }
    EXPECT_EQ(ps__vb_lag_ops(nullptr, 0), ops) << "looked up once";
}

} // namespace

// Registration failures in words: the memlock limit (`ulimit -l`), GPU
// memory without nvidia-peermem, the device's max_mr_size, and the status
// each cause maps to.
#include <errno.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

extern "C" {
#include "ps/rdma/verbs/verbs_diag.h"
}

namespace {

ps__vb_reg_failure_t Host(int err, uint64_t len, uint64_t memlock, uint64_t registered)
{
    ps__vb_reg_failure_t f = {};
    f.err = err;
    f.kind = PS_BUF_MEM_HOST;
    f.len = len;
    f.memlock = memlock;
    f.registered = registered;
    f.device_name = "mlx5_0";
    return f;
}

std::string Explain(const ps__vb_reg_failure_t &f)
{
    char buf[512];
    ps__vb_reg_explain(&f, buf, sizeof(buf));
    return buf;
}

TEST(Diag, FmtBytes)
{
    char b[32];
    EXPECT_STREQ(ps__vb_fmt_bytes(0, b, sizeof(b)), "0 bytes");
    EXPECT_STREQ(ps__vb_fmt_bytes(1000, b, sizeof(b)), "1000 bytes");
    EXPECT_STREQ(ps__vb_fmt_bytes(64 << 10, b, sizeof(b)), "64 KiB");
    EXPECT_STREQ(ps__vb_fmt_bytes(3ull << 29, b, sizeof(b)), "1.5 GiB");
    EXPECT_STREQ(ps__vb_fmt_bytes(UINT64_MAX, b, sizeof(b)), "unlimited");
}

TEST(Diag, MemlockLimitIsNamedWithTheFix)
{
    auto f = Host(ENOMEM, 64 << 20, 64 << 10, 60 << 10);
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_NO_MEMORY);
    std::string s = Explain(f);
    EXPECT_NE(s.find("64 MiB"), std::string::npos) << s;
    EXPECT_NE(s.find("mlx5_0"), std::string::npos) << s;
    EXPECT_NE(s.find("`ulimit -l`"), std::string::npos) << s;
    EXPECT_NE(s.find("is 64 KiB"), std::string::npos) << s;
    EXPECT_NE(s.find("60 KiB is registered"), std::string::npos) << s;
    EXPECT_NE(s.find("PS_MR_CACHE_BYTES"), std::string::npos) << s;
    EXPECT_NE(s.find("memlock=-1"), std::string::npos) << "docker fix named: " << s;
}

TEST(Diag, UnlimitedMemlockSaysTheMachineIsShort)
{
    auto f = Host(ENOMEM, 1 << 20, UINT64_MAX, 100ull << 30);
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_NO_MEMORY);
    std::string s = Explain(f);
    EXPECT_NE(s.find("unlimited"), std::string::npos) << s;
    EXPECT_EQ(s.find("raise it"), std::string::npos) << "nothing to raise: " << s;
}

TEST(Diag, OtherErrnoAboveTheLimitIsStillMemlock)
{
    // Some drivers report EFAULT/EINVAL when pinning fails for the limit.
    auto f = Host(EFAULT, 1 << 20, 1 << 20, 512 << 10);
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_NO_MEMORY);
    f.registered = 0;
    f.len = 4096;
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_REGISTRATION);
    std::string s = Explain(f);
    EXPECT_NE(s.find("ibv_reg_mr"), std::string::npos) << s;
}

TEST(Diag, GpuMemoryWithoutPeermem)
{
    ps__vb_reg_failure_t f = {};
    f.err = EFAULT;
    f.kind = PS_BUF_MEM_CUDA;
    f.device = 3;
    f.len = 256 << 20;
    f.memlock = 64 << 10; // irrelevant for GPU memory
    f.peermem = 0;
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_UNSUPPORTED);
    std::string s = Explain(f);
    EXPECT_NE(s.find("GPU memory (device 3)"), std::string::npos) << s;
    EXPECT_NE(s.find("nvidia-peermem"), std::string::npos) << s;
    EXPECT_NE(s.find("modprobe"), std::string::npos) << s;
    EXPECT_EQ(s.find("ulimit"), std::string::npos) << "memlock is not the cause: " << s;

    f.peermem = 1;
    f.err = ENOMEM;
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_NO_MEMORY);
    s = Explain(f);
    EXPECT_NE(s.find("although nvidia-peermem is loaded"), std::string::npos) << s;
}

TEST(Diag, LargerThanTheDevice)
{
    auto f = Host(EINVAL, 8ull << 30, UINT64_MAX, 0);
    f.max_mr_size = 4ull << 30;
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_TOO_LARGE);
    std::string s = Explain(f);
    EXPECT_NE(s.find("largest memory region (4 GiB)"), std::string::npos) << s;
}

TEST(Diag, Unsupported)
{
    auto f = Host(EOPNOTSUPP, 4096, UINT64_MAX, 0);
    EXPECT_EQ(ps__vb_reg_status(&f), PS_ERR_UNSUPPORTED);
}

TEST(Diag, PeermemDetectedInSysfs)
{
    const char *tmp = getenv("TEST_TMPDIR");
    std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/diag_sysfs";
    mkdir(root.c_str(), 0755);
    mkdir((root + "/module").c_str(), 0755);
    EXPECT_EQ(ps__vb_peermem_loaded(root.c_str()), 0);
    mkdir((root + "/module/nvidia_peermem").c_str(), 0755);
    EXPECT_EQ(ps__vb_peermem_loaded(root.c_str()), 1);
}

TEST(Diag, MemlockLimitReadsTheRlimit)
{
    // Whatever this machine's limit is, it is a number or unlimited.
    uint64_t v = ps__vb_memlock_limit();
    EXPECT_GT(v, 0u);
}

} // namespace

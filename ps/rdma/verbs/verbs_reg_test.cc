// The ibverbs registration ops driving the common registration cache with a
// fake ibv_reg_mr: hits, the PS_MR_CACHE_BYTES limit and eviction, a device
// that runs out of lockable memory (the cache evicts and retries; the
// failure says `ulimit -l`), GPU memory through dma-buf first, GPU
// memory that neither dma-buf nor nvidia-peermem can register, and the
// dma-buf probe that decides whether the van takes GPU memory.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/lib/fake_device_probe.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/rdma/common/mr_cache.h"
#include "ps/rdma/common/rdma_shared.h"
#include "ps/rdma/verbs/verbs_reg.h"
}

namespace {

// A fake device: registrations are counted against a lockable-memory
// budget, as the kernel counts them against RLIMIT_MEMLOCK.
struct FakeDevice {
    uint64_t budget = UINT64_MAX;
    uint64_t locked = 0;
    int regs = 0, deregs = 0;
    int fail_errno = ENOMEM;
    std::set<void *> live;
} g_dev;

struct ibv_mr *FakeReg(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    (void)pd;
    EXPECT_TRUE(access & IBV_ACCESS_REMOTE_WRITE) << "grants and pull destinations are written remotely";
    if (g_dev.locked + len > g_dev.budget) {
        errno = g_dev.fail_errno;
        return nullptr;
    }
    auto *mr = static_cast<struct ibv_mr *>(calloc(1, sizeof(struct ibv_mr)));
    mr->addr = addr;
    mr->length = len;
    mr->lkey = 0x1000 + g_dev.regs;
    mr->rkey = 0x2000 + g_dev.regs;
    g_dev.locked += len;
    g_dev.regs++;
    g_dev.live.insert(mr);
    return mr;
}

int FakeDereg(struct ibv_mr *mr)
{
    EXPECT_EQ(g_dev.live.erase(mr), 1u) << "deregistered twice or never registered";
    g_dev.locked -= mr->length;
    g_dev.deregs++;
    free(mr);
    return 0;
}

class RegCache : public ::testing::Test {
  protected:
    ps__vb_reg_ctx_t ctx_;
    ps_rdma_mr_cache_t *cache_ = nullptr;
    std::string sysfs_;

    void SetUp() override
    {
        g_dev = FakeDevice();
        ASSERT_EQ(ps__vb_reg_ctx_init(&ctx_, nullptr, "fake_0", 0), PS_OK);
        ctx_.reg_mr = FakeReg;
        ctx_.dereg_mr = FakeDereg;
        const char *tmp = getenv("TEST_TMPDIR");
        sysfs_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/reg_sysfs";
        mkdir(sysfs_.c_str(), 0755); // no module/nvidia_peermem
        ctx_.sysfs_root = sysfs_.c_str();
    }
    void Open(uint64_t max_bytes)
    {
        ps_rdma_mr_cache_params_t p;
        memset(&p, 0, sizeof(p));
        p.name = "ibverbs";
        p.log = PS_LOG_RDMA;
        p.max_bytes = max_bytes;
        ASSERT_EQ(ps_rdma_mr_cache_create(&p, &ps__vb_reg_ops, &ctx_, &cache_), PS_OK);
    }
    void TearDown() override
    {
        if (cache_ != nullptr)
            ps_rdma_mr_cache_destroy(cache_);
        EXPECT_TRUE(g_dev.live.empty()) << "registrations left behind";
        EXPECT_EQ(__atomic_load_n(&ctx_.registered, __ATOMIC_RELAXED), 0u);
        ps__vb_reg_ctx_cleanup(&ctx_);
    }
    std::string LastError()
    {
        char buf[512];
        ps__vb_reg_last_error(&ctx_, buf, sizeof(buf));
        return buf;
    }
};

ps_slice_t Buffer(size_t len)
{
    ps_slice_t s;
    EXPECT_EQ(ps_slice_alloc(len, 4096, &s), PS_OK);
    return s;
}

TEST_F(RegCache, SecondUseOfABufferIsAHit)
{
    Open(0);
    ps_slice_t s = Buffer(8192);
    ps_rdma_mr_t *mr = nullptr;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &mr), PS_OK);
    uint32_t lkey = ps__vb_mr_lkey(mr->handle);
    ps_rdma_mr_cache_put(cache_, mr);
    ps_slice_t sub;
    ASSERT_EQ(ps_slice_sub(&s, 100, 1000, &sub), PS_OK);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &sub, &mr), PS_OK);
    EXPECT_EQ(ps__vb_mr_lkey(mr->handle), lkey) << "a slice of the same buffer reuses the MR";
    ps_rdma_mr_cache_put(cache_, mr);
    EXPECT_EQ(g_dev.regs, 1);
    ps_slice_unref(&sub);
    ps_slice_unref(&s);
    EXPECT_EQ(g_dev.deregs, 1) << "the registration goes with the buffer";
}

TEST_F(RegCache, LimitEvictsIdleRegistrations)
{
    Open(3 * 4096); // PS_MR_CACHE_BYTES
    ps_slice_t b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = Buffer(4096);
        ps_rdma_mr_t *mr = nullptr;
        ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &b[i], &mr), PS_OK);
        ps_rdma_mr_cache_put(cache_, mr);
    }
    ps_rdma_mr_cache_stats_t st;
    ps_rdma_mr_cache_stats(cache_, &st);
    EXPECT_EQ(st.evictions, 1u);
    EXPECT_LE(st.bytes, 3u * 4096);
    EXPECT_EQ(g_dev.locked, st.bytes);
    for (auto &s : b)
        ps_slice_unref(&s);
}

TEST_F(RegCache, InUseRegistrationsAreNeverEvicted)
{
    Open(2 * 4096);
    ps_slice_t a = Buffer(4096), b = Buffer(4096), c = Buffer(4096);
    ps_rdma_mr_t *ma, *mb, *mc;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &a, &ma), PS_OK);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &b, &mb), PS_OK);
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &c, &mc), PS_ERR_NO_RESOURCE) << "cache full";
    ps_rdma_mr_cache_put(cache_, ma);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &c, &mc), PS_OK) << "a was idle: evicted";
    ps_rdma_mr_cache_put(cache_, mb);
    ps_rdma_mr_cache_put(cache_, mc);
    ps_slice_unref(&a);
    ps_slice_unref(&b);
    ps_slice_unref(&c);
}

TEST_F(RegCache, OutOfLockableMemoryEvictsRetriesAndExplains)
{
    Open(0);
    g_dev.budget = 3 * 4096; // the "ulimit -l" of the fake device
    ctx_.memlock = 3 * 4096;
    ps_slice_t idle = Buffer(2 * 4096);
    ps_rdma_mr_t *mr;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &idle, &mr), PS_OK);
    ps_rdma_mr_cache_put(cache_, mr);
    // Needs 2 pages; only 1 is left until the idle registration goes.
    ps_slice_t want = Buffer(2 * 4096);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &want, &mr), PS_OK) << "evicted and retried";
    EXPECT_EQ(g_dev.deregs, 1);
    // Now one in use holds 2 pages; 4 more cannot fit even after eviction.
    ps_slice_t big = Buffer(4 * 4096);
    ps_rdma_mr_t *mr2;
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &big, &mr2), PS_ERR_NO_MEMORY);
    std::string why = LastError();
    EXPECT_NE(why.find("16 KiB"), std::string::npos) << why;
    EXPECT_NE(why.find("fake_0"), std::string::npos) << why;
    EXPECT_NE(why.find("ulimit -l"), std::string::npos) << why;
    EXPECT_NE(why.find("is 12 KiB"), std::string::npos) << why;
    // want's first try, then big's (nothing idle to evict: no retry).
    EXPECT_EQ(__atomic_load_n(&ctx_.failures, __ATOMIC_RELAXED), 2u);
    ps_rdma_mr_cache_put(cache_, mr);
    ps_slice_unref(&idle);
    ps_slice_unref(&want);
    ps_slice_unref(&big);
}

// A fake GPU driver exporting dma-bufs (pipe ends) and a fake NIC that
// registers them.
struct FakeDmabuf {
    ps_status_t export_status = PS_OK;
    int reg_errno = 0; // 0: registration succeeds
    int exports = 0, regs = 0;
    int last_fd = -1;
    uint64_t last_offset = 0, last_iova = 0;
} g_dmabuf;

ps_status_t FakeExport(ps_mem_kind_t kind, const void *ptr, size_t len, int *fd_p,
                       uint64_t *offset_p)
{
    EXPECT_EQ(kind, PS_MEM_CUDA);
    (void)len;
    g_dmabuf.exports++;
    if (g_dmabuf.export_status != PS_OK)
        return g_dmabuf.export_status;
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    close(p[1]);
    *fd_p = p[0];
    *offset_p = (uintptr_t)ptr % 4096;
    return PS_OK;
}

struct ibv_mr *FakeRegDmabuf(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                             int fd, int access)
{
    (void)pd;
    EXPECT_TRUE(access & IBV_ACCESS_REMOTE_WRITE);
    EXPECT_NE(fcntl(fd, F_GETFD), -1) << "the dma-buf is open while it is registered";
    g_dmabuf.last_fd = fd;
    g_dmabuf.last_offset = offset;
    g_dmabuf.last_iova = iova;
    if (g_dmabuf.reg_errno != 0) {
        errno = g_dmabuf.reg_errno;
        return nullptr;
    }
    g_dmabuf.regs++;
    // The same bookkeeping as ibv_reg_mr's, at the device address.
    return FakeReg(nullptr, reinterpret_cast<void *>(iova), len, access);
}

ps_slice_t FakeGpuSlice(char *mem, size_t len)
{
    // A "device" buffer: only its kind matters to the registration path.
    ps_buf_t *buf = nullptr;
    EXPECT_EQ(ps_buf_wrap_mem(mem, len, PS_BUF_MEM_CUDA, 1, nullptr, nullptr, &buf), PS_OK);
    ps_slice_t s;
    EXPECT_EQ(ps_slice_of(buf, 0, len, &s), PS_OK);
    ps_buf_unref(buf);
    return s;
}

TEST_F(RegCache, GpuMemoryGoesThroughDmabufFirst)
{
    g_dmabuf = FakeDmabuf();
    ctx_.reg_dmabuf_mr = FakeRegDmabuf;
    ctx_.dmabuf_export = FakeExport;
    Open(0);
    static char fake_gpu[8192];
    ps_slice_t s = FakeGpuSlice(fake_gpu + 100, 4096);
    ps_rdma_mr_t *mr = nullptr;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &mr), PS_OK);
    EXPECT_EQ(g_dmabuf.regs, 1);
    EXPECT_EQ(g_dmabuf.last_iova, (uint64_t)(uintptr_t)(fake_gpu + 100))
        << "registered at the device address remote writes name";
    EXPECT_EQ(g_dmabuf.last_offset, (uint64_t)((uintptr_t)(fake_gpu + 100) % 4096));
    EXPECT_EQ(fcntl(g_dmabuf.last_fd, F_GETFD), -1) << "the exported descriptor is closed";
    EXPECT_EQ(__atomic_load_n(&ctx_.dmabuf_registrations, __ATOMIC_RELAXED), 1u);
    ps_rdma_mr_cache_put(cache_, mr);

    // Host memory never asks the GPU driver.
    ps_slice_t h = Buffer(4096);
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &h, &mr), PS_OK);
    EXPECT_EQ(g_dmabuf.exports, 1);
    ps_rdma_mr_cache_put(cache_, mr);
    ps_slice_unref(&h);
    ps_slice_unref(&s);
}

// The van advertises GPU memory without nvidia-peermem only when a probe
// buffer registers through dma-buf; a process not using CUDA is not probed.
TEST_F(RegCache, DmabufProbeDecidesWhetherGpuMemoryIsTaken)
{
    g_dmabuf = FakeDmabuf();
    ctx_.reg_dmabuf_mr = FakeRegDmabuf;
    ctx_.dmabuf_export = FakeExport;
    FakeDeviceProbe::Install(PS_MEM_CUDA);
    char why[200];
    EXPECT_EQ(ps__vb_reg_probe_dmabuf(&ctx_, why, sizeof(why)), -1);
    EXPECT_EQ(g_dmabuf.exports, 0) << "nothing tried where CUDA is not in use";

    FakeDeviceProbe::in_use = true;
    EXPECT_EQ(ps__vb_reg_probe_dmabuf(&ctx_, why, sizeof(why)), 1);
    EXPECT_EQ(g_dmabuf.regs, 1);
    EXPECT_EQ(g_dmabuf.last_iova, (uint64_t)(uintptr_t)FakeDeviceProbe::arena);
    EXPECT_EQ(g_dev.deregs, 1) << "the probe's registration is released";
    EXPECT_EQ(FakeDeviceProbe::frees.load(), 1) << "and its buffer";

    g_dmabuf.reg_errno = EOPNOTSUPP;
    EXPECT_EQ(ps__vb_reg_probe_dmabuf(&ctx_, why, sizeof(why)), 0);
    EXPECT_NE(std::string(why).find("ibv_reg_dmabuf_mr"), std::string::npos) << why;
    g_dmabuf.export_status = PS_ERR_UNSUPPORTED;
    EXPECT_EQ(ps__vb_reg_probe_dmabuf(&ctx_, why, sizeof(why)), 0);
    EXPECT_NE(std::string(why).find("exports no dma-buf"), std::string::npos) << why;
    EXPECT_EQ(FakeDeviceProbe::frees.load(), 3);
    EXPECT_EQ(g_dev.regs, g_dmabuf.regs)
        << "a probe never falls back to ibv_reg_mr: every registration was a dma-buf one";
    FakeDeviceProbe::Remove(PS_MEM_CUDA);
}

TEST_F(RegCache, GpuMemoryFallsBackToPeermemRegistration)
{
    g_dmabuf = FakeDmabuf();
    g_dmabuf.reg_errno = EOPNOTSUPP; // the NIC's driver takes no dma-buf
    ctx_.reg_dmabuf_mr = FakeRegDmabuf;
    ctx_.dmabuf_export = FakeExport;
    Open(0);
    static char fake_gpu[4096];
    ps_slice_t s = FakeGpuSlice(fake_gpu, sizeof(fake_gpu));
    ps_rdma_mr_t *mr = nullptr;
    ASSERT_EQ(ps_rdma_mr_cache_get(cache_, &s, &mr), PS_OK) << "ibv_reg_mr (peermem) took it";
    EXPECT_EQ(fcntl(g_dmabuf.last_fd, F_GETFD), -1) << "closed after the failed attempt too";
    EXPECT_EQ(g_dev.regs, 1);
    EXPECT_EQ(__atomic_load_n(&ctx_.dmabuf_registrations, __ATOMIC_RELAXED), 0u);
    ps_rdma_mr_cache_put(cache_, mr);
    ps_slice_unref(&s);
}

TEST_F(RegCache, GpuMemoryNeitherWaySaysBoth)
{
    g_dmabuf = FakeDmabuf();
    g_dmabuf.export_status = PS_ERR_UNSUPPORTED; // no dma-buf from this driver
    ctx_.reg_dmabuf_mr = FakeRegDmabuf;
    ctx_.dmabuf_export = FakeExport;
    Open(0);
    g_dev.budget = 0;
    g_dev.fail_errno = EFAULT;
    static char fake_gpu[4096];
    ps_slice_t s = FakeGpuSlice(fake_gpu, sizeof(fake_gpu));
    ps_rdma_mr_t *mr;
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &s, &mr), PS_ERR_UNSUPPORTED);
    std::string why = LastError();
    EXPECT_NE(why.find("dma-buf: the memory's driver exports no dma-buf"), std::string::npos)
        << why;
    EXPECT_NE(why.find("nvidia-peermem"), std::string::npos) << why;
    ps_slice_unref(&s);
}

TEST_F(RegCache, GpuMemoryWithoutPeermemIsUnsupported)
{
    Open(0);
    g_dev.budget = 0;
    g_dev.fail_errno = EFAULT;
    // A "device" buffer: only its kind matters to the registration path.
    static char fake_gpu[4096];
    ps_buf_t *buf = nullptr;
    ASSERT_EQ(ps_buf_wrap_mem(fake_gpu, sizeof(fake_gpu), PS_BUF_MEM_CUDA, 1, nullptr, nullptr,
                              &buf),
              PS_OK);
    ps_slice_t s;
    ASSERT_EQ(ps_slice_of(buf, 0, sizeof(fake_gpu), &s), PS_OK);
    ps_buf_unref(buf);
    ps_rdma_mr_t *mr;
    EXPECT_EQ(ps_rdma_mr_cache_get(cache_, &s, &mr), PS_ERR_UNSUPPORTED);
    std::string why = LastError();
    EXPECT_NE(why.find("GPU memory (device 1)"), std::string::npos) << why;
    EXPECT_NE(why.find("nvidia-peermem"), std::string::npos) << why;
    ps_slice_unref(&s);
}

} // namespace

// KV pushes from and pulls into device memory through vans that move host
// memory only, on the emulated device (host code that touches its memory
// dies with SIGSEGV): pushes go out of one host copy, pulls land in a
// page-locked staging block (or the van's own buffer) and are copied into
// the device destination. Every
// pulled byte is checked, for small values (the small lane) and large ones
// (received in place for host destinations), push, pull and push-pull.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/gpu/mem.h"
#include "ps/net/postoffice.h"
#include "tests/lib/small_job.h"
}

namespace {

// A device allocation as a slice of the emulated kind.
struct DeviceSlice {
    void *ptr = nullptr;
    ps_slice_t slice = PS_SLICE_EMPTY_INIT;
    const ps_mem_ops_t *ops = ps_mem_ops(PS_MEM_EMU);

    explicit DeviceSlice(size_t len)
    {
        EXPECT_EQ(PS_OK, ps_mem_slice_alloc(PS_MEM_EMU, 0, len, &slice));
        ptr = ps_slice_ptr(&slice);
    }
    ~DeviceSlice() { ps_slice_unref(&slice); }
    void Fill(const std::vector<float> &v)
    {
        ASSERT_EQ(PS_OK, ops->copy_from_host(ptr, v.data(), v.size() * sizeof(float)));
    }
    std::vector<float> Read(size_t n)
    {
        std::vector<float> v(n);
        EXPECT_EQ(PS_OK, ops->copy_to_host(v.data(), ptr, n * sizeof(float)));
        return v;
    }
};

class KvDevice : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {
  protected:
    void SetUp() override
    {
        ASSERT_TRUE(ps_mem_kind_linked(PS_MEM_EMU));
        ASSERT_EQ(PS_OK, ps_mem_ops(PS_MEM_EMU)->init());
        small_job_opts_t o = {std::get<0>(GetParam()).c_str(), 0, 0, 0};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_kv_store_create(&store_));
        ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 0, ps_kv_store_handler,
                                             store_, &srv_));
        ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
    }
    void TearDown() override
    {
        ps_kv_worker_destroy(w_);
        ps_kv_server_destroy(srv_);
        ps_kv_store_destroy(store_);
        small_job_finalize(po_, 1);
    }
    ps_kv_pairs_t Pairs(const ps_slice_t &keys, const ps_slice_t &vals)
    {
        ps_kv_pairs_t kv = {keys, vals, PS_SLICE_EMPTY_INIT, PS_DATA_FLOAT};
        return kv;
    }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    ps_kv_store_t *store_ = nullptr;
    ps_kv_server_t *srv_ = nullptr;
    ps_kv_worker_t *w_ = nullptr;
};

} // namespace

TEST_P(KvDevice, PushPullAndPushPullThroughDeviceMemory)
{
    const size_t n = std::get<1>(GetParam()) / sizeof(float);
    const size_t bytes = n * sizeof(float);
    ps_key_t keys_host[2] = {3, 4};
    ps_slice_t keys;
    ASSERT_EQ(PS_OK, ps_slice_wrap(keys_host, sizeof(keys_host), nullptr, nullptr, &keys));

    std::vector<float> a(2 * n), b(2 * n);
    for (size_t i = 0; i < 2 * n; i++) {
        a[i] = (float)(i % 1000);
        b[i] = 0.5f * (float)(i % 7);
    }
    DeviceSlice src(2 * bytes), dst(2 * bytes);
    src.Fill(a);

    // Push from device memory, twice: the store sums.
    int ts;
    ps_kv_pairs_t push = Pairs(keys, src.slice);
    for (int round = 0; round < 2; round++) {
        ASSERT_EQ(PS_OK, ps_kv_zpush(w_, &push, 0, nullptr, nullptr, &ts));
        ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    }
    // Pull into device memory.
    ps_kv_pairs_t pull = Pairs(keys, dst.slice);
    ASSERT_EQ(PS_OK, ps_kv_zpull(w_, &pull, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    std::vector<float> got = dst.Read(2 * n);
    for (size_t i = 0; i < 2 * n; i++)
        ASSERT_EQ(2 * a[i], got[i]) << "element " << i;

    // Push-pull, device to device: the sum comes back into the destination.
    src.Fill(b);
    ps_kv_pairs_t out = Pairs(keys, dst.slice);
    ASSERT_EQ(PS_OK, ps_kv_zpushpull(w_, &push, &out, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    got = dst.Read(2 * n);
    for (size_t i = 0; i < 2 * n; i++)
        ASSERT_EQ(2 * a[i] + b[i], got[i]) << "element " << i;

    // Nothing reached the device destination but through a copy; large
    // values were received into page-locked staging blocks (small ones come
    // inline on the small lane).
    ps_kv_worker_stats_t stats;
    ps_kv_worker_stats(w_, &stats);
    EXPECT_EQ(0u, stats.pull_bytes_in_place);
    if (stats.pull_bytes_small == 0) {
        EXPECT_EQ(4 * bytes, stats.pull_bytes_staged);
    }
    EXPECT_LE(stats.pull_bytes_staged, stats.pull_bytes_copied);
    ps_slice_unref(&keys);
}

TEST_P(KvDevice, KeysMustBeInHostMemory)
{
    DeviceSlice keys(8), vals(64);
    ps_kv_pairs_t push = Pairs(keys.slice, vals.slice);
    int ts;
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_zpush(w_, &push, 0, nullptr, nullptr, &ts));
}

// A server whose store lives in device memory answers pulls with device
// slices: the van, which moves host memory only, sends a host copy.
struct DeviceStore {
    DeviceSlice *vals;
    static void Handle(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                       ps_kv_server_t *server)
    {
        auto *d = static_cast<DeviceStore *>(arg);
        if (!meta->pull) {
            ps_kv_server_respond(server, meta, nullptr);
            return;
        }
        ps_kv_pairs_t res = {req->keys, d->vals->slice, PS_SLICE_EMPTY_INIT, PS_DATA_FLOAT};
        EXPECT_EQ(PS_OK, ps_kv_server_respond(server, meta, &res));
    }
};

TEST_P(KvDevice, ServerAnswersFromDeviceMemory)
{
    const size_t n = std::get<1>(GetParam()) / sizeof(float);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; i++)
        want[i] = (float)(i % 977) - 3.5f;
    DeviceSlice vals(n * sizeof(float));
    vals.Fill(want);
    DeviceStore store = {&vals};
    ps_kv_server_t *srv;
    ps_kv_worker_t *w;
    ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 1, DeviceStore::Handle, &store,
                                         &srv));
    ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 1, 1, &w));
    ps_key_t key = 5;
    std::vector<float> got(n, 0.0f);
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_pull(w, &key, 1, got.data(), n * sizeof(float), nullptr,
                                PS_DATA_FLOAT, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_wait(w, ts, 10000));
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(want[i], got[i]) << "element " << i;
    ps_kv_worker_destroy(w);
    ps_kv_server_destroy(srv);
}

INSTANTIATE_TEST_SUITE_P(
    Vans, KvDevice,
    ::testing::Combine(::testing::Values("tcp", "shm"), ::testing::Values(64, 1 << 20)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, size_t>> &i) {
        return std::get<0>(i.param) + "_" + std::to_string(std::get<1>(i.param));
    });

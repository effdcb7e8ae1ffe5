// AF tensors in device memory through vans that move host memory only, on
// the emulated device (host code that touches its memory dies with
// SIGSEGV), over tcp and shm: a worker's push and pull tensors in device
// memory, the results arriving through a page-locked staging block; a
// large result is copied into the device as it arrives (a pipe,
// ps/app/host_stage.h), a small one on arrival.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/app/af.h"
#include "ps/base/buffer.h"
#include "ps/gpu/mem.h"
#include "ps/net/postoffice.h"
#include "tests/lib/small_job.h"
}

#include "tests/af/echo_server.h"

namespace {

constexpr uint64_t kPushKey = 1, kPullKey = 100;

// Results this large go through a pipe (ps/app/host_stage.h: two chunks).
constexpr int64_t kPipedFrom = 2 << 20;

struct Case {
    const char *van;
    int64_t bytes;
};

const ps_mem_ops_t *Emu()
{
    return ps_mem_ops(PS_MEM_EMU);
}

struct DeviceBuffer {
    ps_slice_t slice = PS_SLICE_EMPTY_INIT;
    int64_t bytes;
    DeviceBuffer(uint8_t fill, int64_t len) : bytes(len)
    {
        EXPECT_EQ(PS_OK, ps_mem_slice_alloc(PS_MEM_EMU, 0, (size_t)bytes, &slice));
        EXPECT_EQ(PS_OK, Emu()->memset(ps_slice_ptr(&slice), fill, (size_t)bytes));
    }
    ~DeviceBuffer()
    {
        ps_slice_unref(&slice);
    }
    void *ptr()
    {
        return ps_slice_ptr(&slice);
    }
    std::vector<uint8_t> Read()
    {
        std::vector<uint8_t> v((size_t)bytes);
        EXPECT_EQ(PS_OK, Emu()->copy_to_host(v.data(), ptr(), (size_t)bytes));
        return v;
    }
};

class AfDevice : public ::testing::TestWithParam<Case> {
  protected:
    void SetUp() override
    {
        ASSERT_EQ(PS_OK, Emu()->init());
        small_job_opts_t o = {GetParam().van, 0, 0, 0};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_af_server_create(po_[SMALL_JOB_SERVER], 0, EchoServer::Handle, &server_,
                                             &srv_));
        ASSERT_EQ(PS_OK, ps_af_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
    }
    void TearDown() override
    {
        if (w_ != nullptr)
            ps_af_worker_destroy(w_);
        if (srv_ != nullptr)
            ps_af_server_destroy(srv_);
        EXPECT_EQ(PS_OK, small_job_finalize(po_, 1));
    }
    void Batch(ps_af_tensor_t *push, ps_af_tensor_t *pull)
    {
        ps_af_handle_t *h;
        ASSERT_EQ(PS_OK, ps_af_worker_batch_push_pull(w_, push, 1, pull, 1, &h));
        ASSERT_EQ(PS_OK, ps_af_worker_wait(w_, h, 10000));
        ps_af_handle_release(w_, h);
    }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    int64_t bytes_ = GetParam().bytes;
    EchoServer server_{(size_t)GetParam().bytes};
    ps_af_server_t *srv_ = nullptr;
    ps_af_worker_t *w_ = nullptr;
};

} // namespace

TEST_P(AfDevice, ResultsForADevicePullTensorArriveThroughStaging)
{
    DeviceBuffer src(9, bytes_), dst(0, bytes_);
    ps_af_tensor_t push, pull;
    ps_af_tensor_init(&push, kPushKey, src.ptr(), PS_AF_UINT8, 1, &bytes_);
    push.mem_kind = PS_MEM_EMU;
    ps_af_tensor_init(&pull, kPullKey, dst.ptr(), PS_AF_UINT8, 1, &bytes_);
    pull.mem_kind = PS_MEM_EMU;
    for (int round = 0; round < 2; round++)
        ASSERT_NO_FATAL_FAILURE(Batch(&push, &pull));
    std::vector<uint8_t> got = dst.Read();
    for (int64_t i = 0; i < bytes_; i++)
        ASSERT_EQ(9, got[i]) << "byte " << i;
    ps_af_worker_stats_t st;
    ps_af_worker_stats(w_, &st);
    EXPECT_EQ(0u, st.pull_bytes_in_place);
    EXPECT_EQ(2u * bytes_, st.pull_bytes_copied);
    EXPECT_EQ(2u * bytes_, st.pull_bytes_staged);
    if (bytes_ < kPipedFrom) {
        EXPECT_EQ(0u, st.pull_bytes_piped);
    } else {
        // Some of each result went into the device before the rest was in;
        // the tail waits for delivery.
        EXPECT_GT(st.pull_bytes_piped, 0u);
        EXPECT_LT(st.pull_bytes_piped, st.pull_bytes_staged);
    }
}

INSTANTIATE_TEST_SUITE_P(Vans, AfDevice,
                         ::testing::Values(Case{"tcp", 64 << 10}, Case{"shm", 64 << 10},
                                           Case{"tcp", (4 << 20) + 4096 + 7},
                                           Case{"shm", (4 << 20) + 4096 + 7}),
                         [](const ::testing::TestParamInfo<Case> &i) {
                             return std::string(i.param.van) +
                                    (i.param.bytes < (1 << 20) ? "_small" : "_large");
                         });

// GPUDirect RDMA through the ibverbs van, on a host with both an RDMA device
// and a CUDA GPU: two vans in one process on the RDMA interface, CUDA memory
// on both sides. A push whose values are device memory is read by the
// sender's NIC (the van registers it through dma-buf or nvidia-peermem);
// a push into a device buffer that recv_buffer names (a server's registered
// receive buffer in GPU memory) is written there by the receiver's NIC, in
// place; and a pull response lands in a worker's device destination. Every
// byte is checked through the CUDA kind's copies.
//
// Tagged requires-rdma and requires-gpu. It skips, saying why, without an
// RDMA device, without a usable GPU, or when the NIC cannot reach GPU
// memory (the van's register_mem fails: no dma-buf, no nvidia-peermem).
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/van/gpu_slices.h"
#include "tests/van/van_harness.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/gpu/mem.h"
#include "ps/net/van/van.h"
#include "ps/rdma/verbs/verbs_testing.h"
#include "tests/rdma/verbs/rdma_host.h"
}

namespace {

using ps_van_test::Cuda;
using ps_van_test::CudaSlice;
using ps_van_test::DefaultParams;
using ps_van_test::PatternBytes;
using ps_van_test::PatternSlice;
using ps_van_test::Received;
using ps_van_test::SendKv;
using ps_van_test::VanBase;

class VerbsGpuDirect : public ::testing::Test {
  protected:
    VanBase w_, s_;

    void SetUp() override
    {
        char host[64], why[512];
        if (!ps_test_rdma_host(host, sizeof(host), why, sizeof(why)))
            GTEST_SKIP() << why;
        ps_mem_info_t info;
        if (ps_mem_describe(PS_MEM_CUDA, &info) != PS_OK || !info.available)
            GTEST_SKIP() << "no usable GPU: " << info.reason;
        ASSERT_EQ(Cuda()->init(), PS_OK);
        ps_van_params_t p = DefaultParams();
        p.role = PS_ROLE_SERVER;
        ASSERT_EQ(s_.OpenAs("ibverbs", 8, host, p, 0), PS_OK);
        p.role = PS_ROLE_WORKER;
        ASSERT_EQ(w_.OpenAs("ibverbs", 9, host, p, 0), PS_OK);
        ASSERT_EQ(w_.ConnectTo(s_, 9), PS_OK);
        ASSERT_EQ(s_.ConnectTo(w_, 8), PS_OK);
        // The precondition: this NIC reaches GPU memory.
        ps_slice_t probe = CudaSlice(1 << 20);
        ps_status_t st = w_.ops->register_mem(w_.van, probe.buf);
        if (st == PS_OK)
            (void)w_.ops->deregister_mem(w_.van, probe.buf);
        ps_slice_unref(&probe);
        if (st != PS_OK)
            GTEST_SKIP() << "the RDMA device cannot register GPU memory here ("
                         << ps_status_str(st) << "; the van's log says why: dma-buf, "
                         << "nvidia-peermem)";
    }
};

TEST_F(VerbsGpuDirect, PushFromDeviceMemoryIsReadByTheNic)
{
    const size_t len = 1 << 20;
    ps_slice_t keys = PatternSlice(8, 1, 0);
    ps_slice_t vals = CudaSlice(len, 1, 1);
    ASSERT_EQ(SendKv(w_, 8, 1, 5, keys, vals, true), PS_OK);
    ps_slice_unref(&keys);
    ps_slice_unref(&vals);
    ASSERT_TRUE(s_.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(s_.inbox.mu);
    EXPECT_EQ(s_.inbox.msgs[0].data[1], PatternBytes(1, 1, len));
}

TEST_F(VerbsGpuDirect, PushIsWrittenIntoARegisteredDeviceBuffer)
{
    ps_van_test::CheckPushesIntoDeviceBuffer(w_, s_, 8, 6, 4 << 20, 3);
    EXPECT_EQ(ps__vb_test_received_in_place(s_.van), 3ul) << "written by the NIC, no copy";
}

TEST_F(VerbsGpuDirect, PullResponseLandsInADeviceDestination)
{
    const size_t len = 2 << 20;
    ps_slice_t dest = CudaSlice(len);
    {
        std::lock_guard<std::mutex> lk(w_.inbox.mu);
        w_.inbox.dest[{7, 1}] = ps_slice_ref(&dest);
    }
    // The server answers the pull from device memory.
    s_.inbox.SetOnMsg([&](const ps_msg_t *m) {
        if (!m->meta.request || !m->meta.pull)
            return;
        ps_msg_t r;
        ps_msg_init(&r);
        r.meta.timestamp = m->meta.timestamp;
        r.meta.pull = true;
        r.meta.recver = m->meta.sender;
        r.meta.key = m->meta.key;
        ps_slice_t k = PatternSlice(8, 0, 0);
        ps_slice_t v = CudaSlice(m->meta.val_len, 9, 1);
        ps_msg_add_data(&r, &k, PS_DATA_UINT64);
        ps_msg_add_data(&r, &v, PS_DATA_UINT8);
        ps_slice_unref(&k);
        ps_slice_unref(&v);
        EXPECT_EQ(s_.ops->send(s_.van, &r), PS_OK);
        ps_msg_release(&r);
    });
    ps_slice_t keys = PatternSlice(8, 0, 0);
    ASSERT_EQ(SendKv(w_, 8, 11, 7, keys, PS_SLICE_EMPTY_INIT, true, true, len), PS_OK);
    ps_slice_unref(&keys);
    ASSERT_TRUE(w_.inbox.WaitMsgs(1));
    std::lock_guard<std::mutex> lk(w_.inbox.mu);
    EXPECT_EQ(w_.inbox.msgs[0].ptrs[1], ps_slice_ptr(&dest)) << "written in place";
    EXPECT_EQ(w_.inbox.msgs[0].data[1], PatternBytes(9, 1, len));
    ps_slice_unref(&dest);
}

} // namespace

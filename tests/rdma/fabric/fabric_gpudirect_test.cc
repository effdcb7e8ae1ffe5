// CUDA memory through the libfabric van (FI_HMEM), on a host with a GPU and a
// libfabric whose provider registers CUDA memory (EFA, or a libfabric built
// with CUDA): two vans in one process, CUDA memory on both sides. A push
// from device memory is read by the provider (small values too: never
// copied inline by the CPU); a push into a device buffer that recv_buffer
// names (a server's registered receive buffer in GPU memory) lands there in
// place; a pull response from device memory lands in the worker's device
// destination in place. Every byte is checked through the CUDA kind.
//
// Tagged requires-gpu. It skips, saying why, without a usable GPU, without
// libfabric, or when the van does not advertise device memory (the
// provider, asked with FI_HMEM, did not register the van's CUDA probe
// buffer: its info line names the step).
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "tests/van/gpu_slices.h"
#include "tests/van/van_harness.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/gpu/mem.h"
#include "ps/net/caps.h"
#include "ps/net/van/van.h"
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

class FabricGpuDirect : public ::testing::Test {
  protected:
    VanBase w_, s_;
    ps_slice_t context_ = PS_SLICE_EMPTY_INIT;

    ps_status_t Open(VanBase &v, int id, ps_role_t role)
    {
        ps_van_params_t p = DefaultParams();
        p.role = role;
        ps_status_t st = v.OpenAs("fabric", id, "127.0.0.1", p, 0);
        return st != PS_OK ? st : v.ops->set_node_id(v.van, id);
    }

    void SetUp() override
    {
        ps_mem_info_t info;
        if (ps_mem_describe(PS_MEM_CUDA, &info) != PS_OK || !info.available)
            GTEST_SKIP() << "no usable GPU: " << info.reason;
        ASSERT_EQ(Cuda()->init(), PS_OK);
        // The vans probe CUDA only where the process already uses it.
        context_ = CudaSlice(4096);
        ps_status_t st = Open(s_, 8, PS_ROLE_SERVER);
        if (st == PS_ERR_UNSUPPORTED)
            GTEST_SKIP() << "the fabric van cannot open here (no libfabric, or no provider)";
        ASSERT_EQ(st, PS_OK);
        ASSERT_EQ(Open(w_, 9, PS_ROLE_WORKER), PS_OK);
        ps_van_attr_t a;
        ASSERT_EQ(w_.ops->query(w_.van, &a), PS_OK);
        if (!(a.cap_flags & PS_CAP_DEVICE_MEMORY))
            GTEST_SKIP() << "the provider does not register CUDA memory here (FI_HMEM; the "
                            "fabric van's info line names the step that failed)";
        ASSERT_EQ(w_.ConnectTo(s_, 9), PS_OK);
        ASSERT_EQ(s_.ConnectTo(w_, 8), PS_OK);
    }
    void TearDown() override { ps_slice_unref(&context_); }
};

TEST_F(FabricGpuDirect, PushFromDeviceMemoryIsReadByTheProvider)
{
    // 64 bytes would ride inside the meta message from host memory.
    const size_t lens[] = {64, 1 << 20};
    for (unsigned i = 0; i < 2; i++) {
        ps_slice_t keys = PatternSlice(8, 1 + i, 0);
        ps_slice_t vals = CudaSlice(lens[i], 1 + i, 1);
        ASSERT_EQ(SendKv(w_, 8, 1 + i, 5, keys, vals, true), PS_OK);
        ps_slice_unref(&keys);
        ps_slice_unref(&vals);
    }
    ASSERT_TRUE(s_.inbox.WaitMsgs(2));
    std::lock_guard<std::mutex> lk(s_.inbox.mu);
    for (unsigned i = 0; i < 2; i++)
        EXPECT_EQ(s_.inbox.msgs[i].data[1], PatternBytes(1 + i, 1, lens[i])) << lens[i];
}

TEST_F(FabricGpuDirect, PushLandsInARegisteredDeviceBuffer)
{
    ps_van_test::CheckPushesIntoDeviceBuffer(w_, s_, 8, 6, 4 << 20, 3);
}

TEST_F(FabricGpuDirect, PullResponseLandsInADeviceDestination)
{
    const size_t lens[] = {64, 2 << 20};
    ps_slice_t dests[2] = {CudaSlice(lens[0]), CudaSlice(lens[1])};
    {
        std::lock_guard<std::mutex> lk(w_.inbox.mu);
        w_.inbox.dest[{7, 1}] = ps_slice_ref(&dests[0]);
        w_.inbox.dest[{8, 1}] = ps_slice_ref(&dests[1]);
    }
    // The server answers each pull from device memory.
    s_.inbox.SetOnMsg([&](const ps_msg_t *m) {
        if (!m->meta.request || !m->meta.pull)
            return;
        ps_slice_t k = PatternSlice(8, 0, 0);
        ps_slice_t v = CudaSlice(m->meta.val_len, 20 + m->meta.key, 1);
        EXPECT_EQ(SendKv(s_, m->meta.sender, static_cast<uint64_t>(m->meta.timestamp),
                         m->meta.key, k, v, false, true),
                  PS_OK);
        ps_slice_unref(&k);
        ps_slice_unref(&v);
    });
    for (unsigned i = 0; i < 2; i++) {
        ps_slice_t keys = PatternSlice(8, 0, 0);
        ASSERT_EQ(SendKv(w_, 8, 11 + i, 7 + i, keys, PS_SLICE_EMPTY_INIT, true, true, lens[i]),
                  PS_OK);
        ps_slice_unref(&keys);
        ASSERT_TRUE(w_.inbox.WaitMsgs(1 + i));
    }
    std::lock_guard<std::mutex> lk(w_.inbox.mu);
    for (unsigned i = 0; i < 2; i++) {
        const Received &r = w_.inbox.msgs[i];
        EXPECT_EQ(r.ptrs[1], ps_slice_ptr(&dests[i])) << lens[i] << " bytes: in place";
        EXPECT_EQ(r.data[1], PatternBytes(27 + i, 1, lens[i])) << lens[i];
    }
    ps_slice_unref(&dests[0]);
    ps_slice_unref(&dests[1]);
}

} // namespace

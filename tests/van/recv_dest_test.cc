// ps_van_recv_dest: which buffers the application names a van may write
// into, by memory kind and length, and which refusals are worth a warning.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "gtest/gtest.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/net/van/base.h"
#include "ps/net/van/rx.h"
}

namespace {

// What the application names: `kind` memory of `len` bytes (never touched
// here: only its kind and length matter).
struct Named {
    ps_buf_mem_t kind = PS_BUF_MEM_HOST;
    size_t len = 0;
} g_named;

alignas(64) char g_mem[4096];

ps_status_t NameBuffer(void *, const ps_meta_t *, unsigned, uint64_t, ps_slice_t *slice_p)
{
    ps_buf_t *buf = nullptr;
    ps_status_t st = ps_buf_wrap_mem(g_mem, g_named.len, g_named.kind, 0, nullptr, nullptr, &buf);
    if (st != PS_OK)
        return st;
    st = ps_slice_of(buf, 0, g_named.len, slice_p);
    ps_buf_unref(buf);
    return st;
}

class RecvDest : public ::testing::Test {
  protected:
    ps_van_base_t base_;
    ps_meta_t meta_;

    void SetUp() override
    {
        ps_van_callbacks_t cb;
        memset(&cb, 0, sizeof(cb));
        cb.recv_buffer = NameBuffer;
        ps_van_params_t params;
        memset(&params, 0, sizeof(params));
        ps_van_base_init(&base_, "test", nullptr, PS_LOG_VAN, &params, &cb);
        memset(&meta_, 0, sizeof(meta_));
    }
    void TearDown() override { ps_van_base_fini(&base_); }

    // Asks for 1 KiB under `kinds`; returns the status and what was logged.
    // The warning is rate-limited (a line per second): a check of what is
    // logged waits that out first (`fresh`).
    ps_status_t Ask(uint32_t kinds, std::string *log, bool fresh = false)
    {
        if (fresh)
            std::this_thread::sleep_for(std::chrono::milliseconds(1050));
        ps_slice_t s = PS_SLICE_EMPTY_INIT;
        ::testing::internal::CaptureStderr();
        ps_status_t st = ps_van_recv_dest(&base_, &meta_, 1, 1024, kinds, &s);
        *log = ::testing::internal::GetCapturedStderr();
        if (st == PS_OK) {
            EXPECT_EQ(s.len, 1024u) << "narrowed to the segment";
            ps_slice_unref(&s);
        }
        return st;
    }
};

TEST_F(RecvDest, DeviceMemoryOnlyForTheKindsTheVanMoves)
{
    std::string log;
    g_named = {PS_BUF_MEM_HOST, 2048};
    EXPECT_EQ(Ask(0, &log), PS_OK);
    EXPECT_EQ(Ask(PS_VAN_HOST_COPY, &log), PS_OK) << "host memory is always fine";

    g_named = {PS_BUF_MEM_CUDA, 2048};
    EXPECT_EQ(Ask(PS_VAN_DEVICE(PS_BUF_MEM_CUDA), &log), PS_OK);
    EXPECT_EQ(Ask(PS_VAN_DEVICE_ANY, &log), PS_OK);
    EXPECT_EQ(Ask(PS_VAN_DEVICE(PS_BUF_MEM_EMU), &log, true), PS_ERR_NOT_FOUND) << "another kind";
    EXPECT_NE(log.find("memory kind 1"), std::string::npos) << log;
}

// 0 (a host-only van) warns of a device buffer it was given; under
// PS_VAN_HOST_COPY (a van that moves device memory, copying this one
// segment with the CPU) the refusal is expected and says nothing, while a
// buffer too short for the segment is still worth the warning.
TEST_F(RecvDest, HostCopyRefusesDeviceMemoryQuietly)
{
    std::string log;
    g_named = {PS_BUF_MEM_CUDA, 2048};
    EXPECT_EQ(Ask(0, &log, true), PS_ERR_NOT_FOUND);
    EXPECT_NE(log.find("using a van buffer"), std::string::npos) << log;
    EXPECT_EQ(Ask(PS_VAN_HOST_COPY, &log, true), PS_ERR_NOT_FOUND);
    EXPECT_EQ(log, "");

    g_named = {PS_BUF_MEM_HOST, 512};
    EXPECT_EQ(Ask(PS_VAN_HOST_COPY, &log, true), PS_ERR_NOT_FOUND);
    EXPECT_NE(log.find("512 bytes"), std::string::npos) << log;
}

}  // namespace

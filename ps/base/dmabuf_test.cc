// The dma-buf exporter hook: nothing installed says unsupported; an
// installed exporter is called with the caller's range and its answer
// returned; arguments are checked before any exporter runs.
#include "gtest/gtest.h"

extern "C" {
#include "ps/base/dmabuf.h"
}

namespace {

const void *g_ptr;
size_t g_len;

ps_status_t FakeExport(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    g_ptr = ptr;
    g_len = len;
    *fd_p = 42;
    *offset_p = 128;
    return PS_OK;
}

TEST(Dmabuf, ExporterPerKind)
{
    char mem[256] = {0};
    int fd = -1;
    uint64_t off = 0;
    EXPECT_EQ(ps_dmabuf_export(PS_MEM_EMU, mem, 64, &fd, &off), PS_ERR_UNSUPPORTED);
    ps_dmabuf_set_exporter(PS_MEM_EMU, FakeExport);
    ASSERT_EQ(ps_dmabuf_export(PS_MEM_EMU, mem + 8, 64, &fd, &off), PS_OK);
    EXPECT_EQ(fd, 42);
    EXPECT_EQ(off, 128u);
    EXPECT_EQ(g_ptr, mem + 8);
    EXPECT_EQ(g_len, 64u);
    EXPECT_EQ(ps_dmabuf_export(PS_MEM_HOST, mem, 64, &fd, &off), PS_ERR_UNSUPPORTED)
        << "only the kind it was installed for";
    EXPECT_EQ(ps_dmabuf_export(PS_MEM_EMU, mem, 0, &fd, &off), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_dmabuf_export(PS_MEM_EMU, nullptr, 8, &fd, &off), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_dmabuf_export(PS_MEM_KIND_COUNT, mem, 8, &fd, &off), PS_ERR_UNSUPPORTED);
    ps_dmabuf_set_exporter(PS_MEM_EMU, nullptr);
    EXPECT_EQ(ps_dmabuf_export(PS_MEM_EMU, mem, 64, &fd, &off), PS_ERR_UNSUPPORTED);
}

} // namespace

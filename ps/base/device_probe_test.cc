// The device probe hook: nothing installed says unsupported; a kind not in
// use allocates nothing; one in use allocates on its device, and the
// buffer goes back through the same kind.
#include "gtest/gtest.h"

extern "C" {
#include "ps/base/device_probe.h"
}

namespace {

int g_in_use_device = -1; // -1: not in use
int g_allocs, g_frees;
int g_alloc_device;
char g_mem[64];

ps_status_t FakeInUse(int *device_p)
{
    if (g_in_use_device < 0)
        return PS_ERR_NOT_FOUND;
    *device_p = g_in_use_device;
    return PS_OK;
}

ps_status_t FakeAlloc(size_t len, int device, void **ptr_p)
{
    if (len > sizeof(g_mem))
        return PS_ERR_NO_MEMORY;
    g_allocs++;
    g_alloc_device = device;
    *ptr_p = g_mem;
    return PS_OK;
}

ps_status_t FakeFree(void *ptr)
{
    EXPECT_EQ(ptr, g_mem);
    g_frees++;
    return PS_OK;
}

int g_bus_id_calls;

ps_status_t FakeBusId(int device, char *buf, size_t cap)
{
    g_bus_id_calls++;
    snprintf(buf, cap, "0000:%02x:00.0", device);
    return PS_OK;
}

const ps_device_probe_ops_t kFake = {FakeInUse, FakeAlloc, FakeFree, FakeBusId};
const ps_device_probe_ops_t kNoBusId = {FakeInUse, FakeAlloc, FakeFree, nullptr};

TEST(DeviceProbe, AllocatesOnlyWhereTheKindIsInUse)
{
    void *p = nullptr;
    int dev = -1;
    EXPECT_EQ(ps_device_probe_alloc(PS_MEM_EMU, 16, &p, &dev), PS_ERR_UNSUPPORTED);
    ps_device_probe_set(PS_MEM_EMU, &kFake);
    EXPECT_EQ(ps_device_probe_alloc(PS_MEM_EMU, 16, &p, &dev), PS_ERR_NOT_FOUND);
    EXPECT_EQ(g_allocs, 0) << "a kind not in use must not allocate (no context made)";
    g_in_use_device = 3;
    ASSERT_EQ(ps_device_probe_alloc(PS_MEM_EMU, 16, &p, &dev), PS_OK);
    EXPECT_EQ(p, static_cast<void *>(g_mem));
    EXPECT_EQ(dev, 3);
    EXPECT_EQ(g_alloc_device, 3);
    ps_device_probe_free(PS_MEM_EMU, p);
    EXPECT_EQ(g_frees, 1);
    EXPECT_EQ(ps_device_probe_alloc(PS_MEM_EMU, 1024, &p, &dev), PS_ERR_NO_MEMORY)
        << "the kind's own status";
    EXPECT_EQ(ps_device_probe_alloc(PS_MEM_HOST, 16, &p, &dev), PS_ERR_UNSUPPORTED)
        << "only the kind it was installed for";
    EXPECT_EQ(ps_device_probe_alloc(PS_MEM_EMU, 0, &p, &dev), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_device_probe_alloc(PS_MEM_KIND_COUNT, 16, &p, &dev), PS_ERR_UNSUPPORTED);
    ps_device_probe_set(PS_MEM_EMU, nullptr);
    EXPECT_EQ(ps_device_probe_alloc(PS_MEM_EMU, 16, &p, &dev), PS_ERR_UNSUPPORTED);
    ps_device_probe_free(PS_MEM_EMU, g_mem); // nothing installed: a no-op
    EXPECT_EQ(g_frees, 1);
}

TEST(DeviceProbe, SaysTheDeviceAndItsPciAddressOnlyWhereInUse)
{
    int dev = -1;
    char id[32] = "";
    g_in_use_device = -1;
    g_bus_id_calls = 0;
    EXPECT_EQ(ps_device_probe_in_use(PS_MEM_EMU, &dev), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(ps_device_probe_pci_bus_id(PS_MEM_EMU, 0, id, sizeof(id)), PS_ERR_UNSUPPORTED);
    ps_device_probe_set(PS_MEM_EMU, &kFake);
    EXPECT_EQ(ps_device_probe_in_use(PS_MEM_EMU, &dev), PS_ERR_NOT_FOUND);
    EXPECT_EQ(ps_device_probe_pci_bus_id(PS_MEM_EMU, 0, id, sizeof(id)), PS_ERR_NOT_FOUND);
    EXPECT_EQ(g_bus_id_calls, 0) << "a kind not in use is not asked (no runtime started)";
    g_in_use_device = 2;
    ASSERT_EQ(ps_device_probe_in_use(PS_MEM_EMU, &dev), PS_OK);
    EXPECT_EQ(dev, 2);
    ASSERT_EQ(ps_device_probe_pci_bus_id(PS_MEM_EMU, 5, id, sizeof(id)), PS_OK)
        << "any device of the kind, once it is in use";
    EXPECT_STREQ(id, "0000:05:00.0");
    EXPECT_EQ(ps_device_probe_pci_bus_id(PS_MEM_EMU, -1, id, sizeof(id)), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_device_probe_pci_bus_id(PS_MEM_EMU, 0, id, 0), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_device_probe_in_use(PS_MEM_EMU, nullptr), PS_ERR_INVALID_ARG);
    ps_device_probe_set(PS_MEM_EMU, &kNoBusId);
    EXPECT_EQ(ps_device_probe_pci_bus_id(PS_MEM_EMU, 0, id, sizeof(id)), PS_ERR_UNSUPPORTED)
        << "a kind without PCI devices";
    ps_device_probe_set(PS_MEM_EMU, nullptr);
    g_in_use_device = -1;
}

} // namespace

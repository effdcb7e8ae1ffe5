// DMLC_INTERFACE=auto against fake sysfs trees: PCI NICs (device/net),
// soft-RoCE (parent), RoCE GID netdevs, active ports first, netdevs
// without an address skipped, a clear reason when nothing fits, and the
// GPU found through the CUDA kind's PCI address where the process uses it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "gtest/gtest.h"

extern "C" {
#include "ps/base/device_probe.h"
#include "ps/rdma/verbs/verbs_iface.h"
}

namespace {

class FakeSysfs : public ::testing::Test {
  protected:
    std::string root_;

    void SetUp() override
    {
        const char *tmp = getenv("TEST_TMPDIR");
        std::string base = tmp != nullptr ? tmp : "/tmp";
        char tmpl[512];
        snprintf(tmpl, sizeof(tmpl), "%s/sysfs.XXXXXX", base.c_str());
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root_ = tmpl;
    }
    void TearDown() override
    {
        std::string cmd = "rm -rf '" + root_ + "'";
        (void)system(cmd.c_str());
    }
    void Mkdir(const std::string &rel)
    {
        std::string path = root_;
        size_t pos = 0;
        while (pos != std::string::npos) {
            size_t next = rel.find('/', pos + 1);
            path = root_ + "/" + rel.substr(0, next);
            mkdir(path.c_str(), 0755);
            pos = next;
        }
    }
    void Write(const std::string &rel, const std::string &text)
    {
        std::string dir = rel.substr(0, rel.rfind('/'));
        Mkdir(dir);
        FILE *f = fopen((root_ + "/" + rel).c_str(), "w");
        ASSERT_NE(f, nullptr);
        fputs(text.c_str(), f);
        fclose(f);
    }
    void Port(const std::string &dev, int port, bool active)
    {
        Write("class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/state",
              active ? "4: ACTIVE\n" : "1: DOWN\n");
    }
};

std::set<std::string> g_have_addr;

int HasAddr(void *, const char *ifname)
{
    return g_have_addr.count(ifname) != 0;
}

TEST_F(FakeSysfs, NothingAtAll)
{
    ps__vb_rdma_netdev_t list[4];
    size_t n = 99;
    ASSERT_EQ(ps__vb_rdma_netdevs(root_.c_str(), list, 4, &n), PS_OK);
    EXPECT_EQ(n, 0u);
    char ifname[IF_NAMESIZE], why[256];
    g_have_addr = {"eth0"};
    EXPECT_EQ(ps__vb_pick_interface(root_.c_str(), nullptr, HasAddr, nullptr, ifname, sizeof(ifname), why,
                                    sizeof(why)),
              PS_ERR_NOT_FOUND);
    EXPECT_NE(std::string(why).find("no network interface has an RDMA device"),
              std::string::npos)
        << why;
}

TEST_F(FakeSysfs, PciNicSoftRoceAndGidNetdevs)
{
    // mlx5_0: a PCI NIC with eth2 under device/net, port down.
    Mkdir("class/infiniband/mlx5_0/device/net/eth2");
    Port("mlx5_0", 1, false);
    // rxe0: soft-RoCE on eth0, active.
    Write("class/infiniband/rxe0/parent", "eth0\n");
    Port("rxe0", 1, true);
    // mlx5_1: a bond, known only through its GID table.
    Write("class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/0", "bond0\n");
    Write("class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/1", "bond0\n");
    Port("mlx5_1", 1, true);

    ps__vb_rdma_netdev_t list[8];
    size_t n = 0;
    ASSERT_EQ(ps__vb_rdma_netdevs(root_.c_str(), list, 8, &n), PS_OK);
    ASSERT_EQ(n, 3u) << "bond0 appears once";
    // Active first, then by device name.
    EXPECT_STREQ(list[0].netdev, "bond0");
    EXPECT_STREQ(list[0].ibdev, "mlx5_1");
    EXPECT_TRUE(list[0].active);
    EXPECT_STREQ(list[1].netdev, "eth0");
    EXPECT_STREQ(list[1].ibdev, "rxe0");
    EXPECT_STREQ(list[2].netdev, "eth2");
    EXPECT_FALSE(list[2].active);

    char ifname[IF_NAMESIZE];
    g_have_addr = {"eth0", "eth2"}; // the bond has no address
    ASSERT_EQ(ps__vb_pick_interface(root_.c_str(), nullptr, HasAddr, nullptr, ifname, sizeof(ifname),
                                    nullptr, 0),
              PS_OK);
    EXPECT_STREQ(ifname, "eth0");
    g_have_addr = {"eth2"};
    ASSERT_EQ(ps__vb_pick_interface(root_.c_str(), nullptr, HasAddr, nullptr, ifname, sizeof(ifname),
                                    nullptr, 0),
              PS_OK);
    EXPECT_STREQ(ifname, "eth2") << "a down port is still better than nothing";

    // Cut to one entry: the best one.
    ASSERT_EQ(ps__vb_rdma_netdevs(root_.c_str(), list, 1, &n), PS_OK);
    ASSERT_EQ(n, 1u);
    EXPECT_STREQ(list[0].netdev, "bond0");
}

TEST_F(FakeSysfs, RdmaNetdevsWithoutAddressesSayWhich)
{
    Mkdir("class/infiniband/mlx5_0/device/net/ens1f0");
    Port("mlx5_0", 1, true);
    g_have_addr = {"eth0"}; // a plain NIC has one; the RDMA one has none
    char ifname[IF_NAMESIZE], why[256];
    EXPECT_EQ(ps__vb_pick_interface(root_.c_str(), nullptr, HasAddr, nullptr, ifname, sizeof(ifname), why,
                                    sizeof(why)),
              PS_ERR_NOT_FOUND);
    std::string w = why;
    EXPECT_NE(w.find("ens1f0 on mlx5_0"), std::string::npos) << w;
    EXPECT_NE(w.find("no IP address"), std::string::npos) << w;
}

TEST_F(FakeSysfs, JunkEntriesAreIgnored)
{
    Write("class/infiniband/rxe1/parent", "\n"); // empty
    Write("class/infiniband/rxe2/parent", "a-name-far-too-long-for-linux\n");
    Write("class/infiniband/rxe3/parent", "../../etc\n");
    ps__vb_rdma_netdev_t list[4];
    size_t n = 0;
    ASSERT_EQ(ps__vb_rdma_netdevs(root_.c_str(), list, 4, &n), PS_OK);
    EXPECT_EQ(n, 0u);
}

// Two PCIe trees, each with a GPU and an RDMA NIC: DMLC_INTERFACE=auto takes
// the NIC that shares the GPU's path, through CUDA_VISIBLE_DEVICES too.
class TwoSockets : public FakeSysfs {
  protected:
    std::string gpu0_, gpu1_;

    void Link(const std::string &target, const std::string &rel)
    {
        Mkdir(rel.substr(0, rel.rfind('/')));
        ASSERT_EQ(symlink(target.c_str(), (root_ + "/" + rel).c_str()), 0) << rel;
    }
    void PciDevice(const std::string &path, const std::string &vendor, const std::string &klass)
    {
        Write(path + "/vendor", vendor + "\n");
        Write(path + "/class", klass + "\n");
        std::string addr = path.substr(path.rfind('/') + 1);
        Link(root_ + "/" + path, "bus/pci/devices/" + addr);
    }
    void SetUp() override
    {
        FakeSysfs::SetUp();
        const std::string a = "devices/pci0000:00/0000:00:01.0", b = "devices/pci0000:80/0000:80:01.0";
        PciDevice(a + "/0000:01:00.0", "0x10de", "0x030200");  // GPU 0
        PciDevice(a + "/0000:01:00.1", "0x10de", "0x040300");  // its audio function: no GPU
        PciDevice(a + "/0000:02:00.0", "0x15b3", "0x020700");  // NIC near GPU 0
        PciDevice(b + "/0000:81:00.0", "0x10de", "0x030000");  // GPU 1
        PciDevice(b + "/0000:82:00.0", "0x15b3", "0x020700");  // NIC near GPU 1
        Link(root_ + "/" + a + "/0000:02:00.0", "class/infiniband/mlx5_0/device");
        Link(root_ + "/" + b + "/0000:82:00.0", "class/infiniband/mlx5_1/device");
        Mkdir(a + "/0000:02:00.0/net/ethA");
        Mkdir(b + "/0000:82:00.0/net/ethB");
        Port("mlx5_0", 1, true);
        Port("mlx5_1", 1, true);
        char buf[4096];
        ASSERT_NE(realpath((root_ + "/" + a + "/0000:01:00.0").c_str(), buf), nullptr);
        gpu0_ = buf;
        ASSERT_NE(realpath((root_ + "/" + b + "/0000:81:00.0").c_str(), buf), nullptr);
        gpu1_ = buf;
    }
    std::string Gpu(int index, const char *visible)
    {
        char path[4096];
        ps_status_t st = ps__vb_gpu_pci_path(root_.c_str(), index, visible, path, sizeof(path));
        return st == PS_OK ? std::string(path) : std::string("status ") + ps_status_str(st);
    }
    std::string Pick(const std::string &near)
    {
        char ifname[IF_NAMESIZE];
        ps_status_t st = ps__vb_pick_interface(root_.c_str(), near.empty() ? nullptr : near.c_str(),
                                               HasAddr, nullptr, ifname, sizeof(ifname), nullptr, 0);
        return st == PS_OK ? std::string(ifname) : std::string("status ") + ps_status_str(st);
    }
};

TEST_F(TwoSockets, GpusInPciOrderThroughCudaVisibleDevices)
{
    EXPECT_EQ(Gpu(0, nullptr), gpu0_);
    EXPECT_EQ(Gpu(1, ""), gpu1_);
    EXPECT_EQ(Gpu(0, "1,0"), gpu1_);
    EXPECT_EQ(Gpu(1, "1,0"), gpu0_);
    EXPECT_EQ(Gpu(2, nullptr), std::string("status ") + ps_status_str(PS_ERR_NOT_FOUND));
    EXPECT_EQ(Gpu(1, "0"), std::string("status ") + ps_status_str(PS_ERR_NOT_FOUND));
    EXPECT_EQ(Gpu(0, "GPU-8f2a1c7e"), std::string("status ") + ps_status_str(PS_ERR_UNSUPPORTED));
    EXPECT_EQ(Gpu(0, "0,MIG-4b1e"), gpu0_);
    // As CUDA reads it: an entry that is not a device ends the list.
    EXPECT_EQ(Gpu(0, "0,x,1"), gpu0_);
    EXPECT_EQ(Gpu(1, "0,x,1"), std::string("status ") + ps_status_str(PS_ERR_NOT_FOUND));
}

TEST_F(TwoSockets, PciPathOfACudaBusId)
{
    auto path = [&](const char *id) {
        char buf[4096];
        ps_status_t st = ps__vb_pci_path_of_bus_id(root_.c_str(), id, buf, sizeof(buf));
        return st == PS_OK ? std::string(buf) : std::string("status ") + ps_status_str(st);
    };
    EXPECT_EQ(path("0000:01:00.0"), gpu0_);
    EXPECT_EQ(path("00000000:81:00.0"), gpu1_) << "nvidia-smi's eight-digit domain";
    EXPECT_EQ(path("0000:81:00.0"), gpu1_);
    EXPECT_EQ(path("0000:3B:00.0"), std::string("status ") + ps_status_str(PS_ERR_NOT_FOUND));
    for (const char *bad : {"", "junk", "0000:01:00", "0000:01:00.0x", "0000:100:00.0",
                            "0000:01:20.0", "0000:01:00.8"})
        EXPECT_EQ(path(bad), std::string("status ") + ps_status_str(PS_ERR_INVALID_ARG)) << bad;
}

// The CUDA kind's probe as a process using CUDA device g_cuda_device sees
// it (-1: not in use), devices numbered fastest first: device 0 is the one
// at 81:00.0, device 1 at 01:00.0, the reverse of PCI order.
int g_cuda_device = -1;
int g_bus_id_calls;

ps_status_t CudaInUse(int *device_p)
{
    if (g_cuda_device < 0)
        return PS_ERR_NOT_FOUND;
    *device_p = g_cuda_device;
    return PS_OK;
}
ps_status_t NoAlloc(size_t, int, void **) { return PS_ERR_UNSUPPORTED; }
ps_status_t NoFree(void *) { return PS_OK; }
ps_status_t CudaBusId(int device, char *buf, size_t cap)
{
    g_bus_id_calls++;
    if (device > 1)
        return PS_ERR_NOT_FOUND;
    snprintf(buf, cap, "%s", device == 0 ? "0000:81:00.0" : "0000:01:00.0");
    return PS_OK;
}

TEST_F(TwoSockets, TheGpuThroughCudaWhereTheProcessUsesIt)
{
    auto near = [&](int gpu, const char *visible, std::string *how) {
        char buf[4096], h[64] = "";
        ps_status_t st = ps__vb_gpu_near(root_.c_str(), gpu, visible, buf, sizeof(buf), h,
                                         sizeof(h));
        *how = h;
        return st == PS_OK ? std::string(buf) : std::string("status ") + ps_status_str(st);
    };
    std::string how;
    // No CUDA kind linked: PCI order, device 0 when STEPMESH_GPU is unset.
    EXPECT_EQ(near(-1, nullptr, &how), gpu0_);
    EXPECT_EQ(how, "GPU 0 in PCI order");
    EXPECT_EQ(near(1, nullptr, &how), gpu1_);

    static const ps_device_probe_ops_t probe = {CudaInUse, NoAlloc, NoFree, CudaBusId};
    ps_device_probe_set(PS_MEM_CUDA, &probe);
    g_cuda_device = -1;
    g_bus_id_calls = 0;
    EXPECT_EQ(near(-1, nullptr, &how), gpu0_);
    EXPECT_EQ(how, "GPU 0 in PCI order");
    EXPECT_EQ(g_bus_id_calls, 0) << "CUDA not in use: the runtime is not asked";
    EXPECT_EQ(near(0, "GPU-8f2a1c7e", &how),
              std::string("status ") + ps_status_str(PS_ERR_UNSUPPORTED));

    // In use on device 1: that device, at the address CUDA gives.
    g_cuda_device = 1;
    EXPECT_EQ(near(-1, nullptr, &how), gpu0_);
    EXPECT_EQ(how, "CUDA device 1, 0000:01:00.0");
    // STEPMESH_GPU=0 is CUDA's device 0, which is not PCI's first here.
    EXPECT_EQ(near(0, nullptr, &how), gpu1_);
    EXPECT_EQ(how, "CUDA device 0, 0000:81:00.0");
    EXPECT_EQ(near(0, "GPU-8f2a1c7e", &how), gpu1_) << "UUIDs do not matter to CUDA's address";
    // A device CUDA does not know: PCI order, which has no such GPU either.
    EXPECT_EQ(near(2, nullptr, &how), std::string("status ") + ps_status_str(PS_ERR_NOT_FOUND));
    EXPECT_EQ(how, "GPU 2 in PCI order");
    ps_device_probe_set(PS_MEM_CUDA, nullptr);
    g_cuda_device = -1;
}

TEST_F(TwoSockets, TheNicNearestTheGpu)
{
    g_have_addr = {"ethA", "ethB"};
    EXPECT_EQ(Pick(gpu0_), "ethA");
    EXPECT_EQ(Pick(gpu1_), "ethB");
    EXPECT_EQ(Pick(""), "ethA") << "no GPU: the list's order";
    EXPECT_GT(ps__vb_pci_closeness(root_.c_str(), "mlx5_1", gpu1_.c_str()),
              ps__vb_pci_closeness(root_.c_str(), "mlx5_0", gpu1_.c_str()));
    EXPECT_EQ(ps__vb_pci_closeness(root_.c_str(), "nosuch", gpu1_.c_str()), 0);
    g_have_addr = {"ethA"};  // the near one has no address: the other
    EXPECT_EQ(Pick(gpu1_), "ethA");
}

TEST(RealSysfs, ListingNeverFails)
{
    // This machine has no RDMA device; a host with one lists it. Either way
    // the call succeeds.
    ps__vb_rdma_netdev_t list[16];
    size_t n = 0;
    ASSERT_EQ(ps__vb_rdma_netdevs("/sys", list, 16, &n), PS_OK);
    for (size_t i = 0; i < n; i++)
        printf("rdma netdev %s on %s%s\n", list[i].netdev, list[i].ibdev,
               list[i].active ? " (active)" : "");
}

} // namespace

/*
 * DMLC_INTERFACE=auto for the ibverbs van: which network interfaces have an
 * RDMA device, read from sysfs.
 *
 * A netdev belongs to an ibverbs device when sysfs says so in one of three
 * places, all looked at:
 *   <root>/class/infiniband/<dev>/device/net/<netdev>   PCI NICs (mlx5, ...)
 *   <root>/class/infiniband/<dev>/parent                soft devices (rxe, siw)
 *   <root>/class/infiniband/<dev>/ports/<p>/gid_attrs/ndevs/<i>   RoCE GIDs
 * Upstream StepMesh picked "the RDMA NIC nearest the GPU" but could pick an
 * address that does not route (StepMesh PR #32) or none at all; here the
 * list is explicit, active ports come first, and "none" is a clear status.
 * Among the netdevs that have an address, the one whose device shares the
 * longest PCIe path with this process's GPU is taken (the same switch
 * before the same root port before another socket).
 *
 * The sysfs root is a parameter, so tests run against a fake tree.
 */
#ifndef PS_RDMA_VERBS_VERBS_IFACE_H_
#define PS_RDMA_VERBS_VERBS_IFACE_H_

#include <net/if.h>
#include <stddef.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__VB_IBDEV_NAME_MAX 64

typedef struct {
    char ibdev[PS__VB_IBDEV_NAME_MAX]; /* "mlx5_0", "rxe0" */
    char netdev[IF_NAMESIZE];          /* "eth0", "bond0" */
    int active;                        /* a port of the device is ACTIVE */
} ps__vb_rdma_netdev_t;

/*
 * The netdevs with an ibverbs device under `sysfs_root` ("/sys" on a real
 * machine), each once: active ones first, then by device and netdev name.
 * PS_OK with *n_p 0 when there is none (no /class/infiniband at all).
 * More than `cap` are cut off (the first `cap` in that order).
 */
ps_status_t ps__vb_rdma_netdevs(const char *sysfs_root, ps__vb_rdma_netdev_t *out, size_t cap,
                                size_t *n_p);

/* Whether interface `ifname` has an address the van can bind (injected so
 * that tests need no real interface). */
typedef int (*ps__vb_has_addr_func_t)(void *arg, const char *ifname);

/*
 * The sysfs device path of local GPU `index` (STEPMESH_GPU): NVIDIA display
 * or 3D controllers under <root>/bus/pci/devices in PCI address order (CUDA's
 * order with CUDA_DEVICE_ORDER=PCI_BUS_ID, nvidia-smi's), the index taken
 * through `visible` (CUDA_VISIBLE_DEVICES; NULL or "" for none) when that
 * lists numbers. PS_ERR_NOT_FOUND for no such GPU, PS_ERR_UNSUPPORTED when
 * `visible` names GPUs by UUID (which sysfs does not show).
 */
ps_status_t ps__vb_gpu_pci_path(const char *sysfs_root, int index, const char *visible,
                                char *path, size_t cap);

/* The sysfs device path of the PCI device at address `bus_id` (as CUDA
 * names it: "0000:3B:00.0" or "00000000:3b:00.0"). PS_ERR_INVALID_ARG for
 * an address that does not parse, PS_ERR_NOT_FOUND when sysfs has none. */
ps_status_t ps__vb_pci_path_of_bus_id(const char *sysfs_root, const char *bus_id, char *path,
                                      size_t cap);

/*
 * The sysfs device path of this process's GPU, for DMLC_INTERFACE=auto.
 * `gpu` is the CUDA device STEPMESH_GPU names, or -1 when it is unset: then
 * the device the process already uses (the calling thread's), else 0.
 * Where the process uses CUDA, the runtime gives the device's PCI address
 * (right whatever CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES say); else
 * ps__vb_gpu_pci_path with `visible`, which assumes PCI order. *how_p says
 * which: "CUDA device N" or "GPU N in PCI order". Statuses as those two.
 */
ps_status_t ps__vb_gpu_near(const char *sysfs_root, int gpu, const char *visible, char *path,
                            size_t cap, char *how, size_t how_cap);

/* How near ibverbs device `ibdev` is to the PCI device at sysfs path `near`:
 * the leading components their device paths share (0 when either is
 * unknown). */
int ps__vb_pci_closeness(const char *sysfs_root, const char *ibdev, const char *near);

/*
 * The interface DMLC_INTERFACE=auto means: of the netdevs of
 * ps__vb_rdma_netdevs() that have an address, the nearest to the PCI device
 * at sysfs path `near` (the GPU; NULL: no preference), the first in the
 * list among equals.
 *   PS_ERR_NOT_FOUND  none; `why` (may be NULL) says what was found, e.g.
 *                     "no RDMA device in /sys/class/infiniband" or
 *                     "RDMA netdevs eth2 (mlx5_0) have no IP address".
 */
ps_status_t ps__vb_pick_interface(const char *sysfs_root, const char *near,
                                  ps__vb_has_addr_func_t has_addr, void *arg, char *ifname,
                                  size_t cap, char *why, size_t why_cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_IFACE_H_ */

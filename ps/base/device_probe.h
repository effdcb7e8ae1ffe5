/*
 * A small device buffer for a transport to try once, at start: whether its
 * NIC or library registers this kind's memory (the fabric van through
 * FI_HMEM, the ibverbs van through dma-buf) decides whether the van
 * advertises device memory. A memory kind (ps/gpu) installs its functions
 * here when it registers, so that a transport, which may use ps/base but
 * not ps/gpu, reaches them.
 *
 * A probe allocates only where the kind is already in use in the process
 * (`in_use`; CUDA: the current device's primary context is active): a
 * process that never touched the GPU, such as a CPU-only summation server,
 * gets PS_ERR_NOT_FOUND and no CUDA context is made for it.
 */
#ifndef PS_BASE_DEVICE_PROBE_H_
#define PS_BASE_DEVICE_PROBE_H_

#include <stddef.h>

#include "ps/base/mem_kind.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* PS_OK with the device the process uses, PS_ERR_NOT_FOUND when the
     * kind is not in use yet, or why it cannot say. */
    ps_status_t (*in_use)(int *device_p);
    ps_status_t (*alloc)(size_t len, int device, void **ptr_p);
    ps_status_t (*free)(void *ptr);
    /* Optional: the PCI address of `device`, lower case as sysfs writes
     * it ("0000:3b:00.0"). */
    ps_status_t (*pci_bus_id)(int device, char *buf, size_t cap);
} ps_device_probe_ops_t;

/* Installs (or, with NULL, removes) the probe functions of `kind`; ops
 * must outlive their use. Any thread. */
void ps_device_probe_set(ps_mem_kind_t kind, const ps_device_probe_ops_t *ops);

/* A len-byte buffer of `kind` on the device the process uses: PS_OK with
 * *ptr_p and *device_p; PS_ERR_UNSUPPORTED when the kind installed
 * nothing; PS_ERR_NOT_FOUND when it is not in use; else the kind's
 * status. Free it with ps_device_probe_free. */
ps_status_t ps_device_probe_alloc(ps_mem_kind_t kind, size_t len, void **ptr_p, int *device_p);

void ps_device_probe_free(ps_mem_kind_t kind, void *ptr);

/* The device of `kind` the process uses (the calling thread's, for CUDA):
 * PS_OK with *device_p; PS_ERR_NOT_FOUND when the kind is not in use;
 * PS_ERR_UNSUPPORTED when it installed nothing. */
ps_status_t ps_device_probe_in_use(ps_mem_kind_t kind, int *device_p);

/* The PCI address of `device`, only where the kind is already in use (so
 * a CPU-only process never starts the kind's runtime for it): PS_OK with
 * buf; PS_ERR_NOT_FOUND when not in use; PS_ERR_UNSUPPORTED when the kind
 * cannot say. */
ps_status_t ps_device_probe_pci_bus_id(ps_mem_kind_t kind, int device, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_DEVICE_PROBE_H_ */

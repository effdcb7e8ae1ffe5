/*
 * Device memory as a dma-buf, for a NIC to register (GPUDirect RDMA through
 * ibv_reg_dmabuf_mr). A memory kind that can export its pages (ps/gpu's
 * CUDA kind, through cuMemGetHandleForAddressRange) installs its exporter
 * here when it registers, so that a transport, which may use ps/base but
 * not ps/gpu, reaches it. Without an exporter for the kind every call says
 * PS_ERR_UNSUPPORTED.
 */
#ifndef PS_BASE_DMABUF_H_
#define PS_BASE_DMABUF_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/mem_kind.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dma-buf file descriptor exporting the device pages that hold
 * [ptr, ptr + len), and ptr's offset into it; the caller closes it. */
typedef ps_status_t (*ps_dmabuf_export_func_t)(const void *ptr, size_t len, int *fd_p,
                                               uint64_t *offset_p);

/* Installs (or, with NULL, removes) the exporter of `kind`. Any thread. */
void ps_dmabuf_set_exporter(ps_mem_kind_t kind, ps_dmabuf_export_func_t fn);

/* Exports [ptr, ptr + len) of `kind` memory: PS_OK with *fd_p and
 * *offset_p, PS_ERR_UNSUPPORTED when the kind has no exporter, or the
 * exporter's status. */
ps_status_t ps_dmabuf_export(ps_mem_kind_t kind, const void *ptr, size_t len, int *fd_p,
                             uint64_t *offset_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_DMABUF_H_ */

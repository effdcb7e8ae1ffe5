/*
 * Memory registration of the ibverbs van, as the common registration cache
 * and buffer pool call it (ps_rdma_reg_ops_t over ibv_reg_mr).
 *
 * GPU memory (GPUDirect RDMA) is registered through dma-buf where the
 * driver exports one and libibverbs has ibv_reg_dmabuf_mr, else with
 * ibv_reg_mr on the device pointer, which needs nvidia-peermem.
 *
 * The ibv_reg_mr / ibv_dereg_mr calls go through pointers in the context,
 * so that tests can drive the cache with a fake device: every failure is
 * turned into a status and a sentence (verbs_diag.h) saying why (`ulimit
 * -l`, GPU memory without nvidia-peermem, max_mr_size), logged once per
 * second at most and kept in last_error for the van's own messages.
 */
#ifndef PS_RDMA_VERBS_VERBS_REG_H_
#define PS_RDMA_VERBS_VERBS_REG_H_

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "ps/base/mem_kind.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/rdma/common/reg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ibv_mr *(*ps__vb_reg_mr_func_t)(struct ibv_pd *pd, void *addr, size_t len,
                                               int access);
typedef int (*ps__vb_dereg_mr_func_t)(struct ibv_mr *mr);
typedef struct ibv_mr *(*ps__vb_reg_dmabuf_mr_func_t)(struct ibv_pd *pd, uint64_t offset,
                                                      size_t len, uint64_t iova, int fd,
                                                      int access);
/* ps_dmabuf_export's shape (ps/base/dmabuf.h). */
typedef ps_status_t (*ps__vb_dmabuf_export_func_t)(ps_mem_kind_t kind, const void *ptr,
                                                   size_t len, int *fd_p, uint64_t *offset_p);

typedef struct {
    struct ibv_pd *pd;
    ps__vb_reg_mr_func_t reg_mr;     /* NULL: ibv_reg_mr */
    ps__vb_dereg_mr_func_t dereg_mr; /* NULL: ibv_dereg_mr */
    /* GPU memory goes through dma-buf first: NULL means libibverbs'
     * ibv_reg_dmabuf_mr (rdma-core 34 and later; none: skipped) and
     * ps_dmabuf_export. */
    ps__vb_reg_dmabuf_mr_func_t reg_dmabuf_mr;
    ps__vb_dmabuf_export_func_t dmabuf_export;
    uint64_t dmabuf_registrations;   /* atomic: GPU memory registered through dma-buf */
    char device_name[64];
    uint64_t max_mr_size;            /* 0: unknown */
    const char *sysfs_root;          /* NULL: "/sys" */
    uint64_t memlock;                /* 0: the real RLIMIT_MEMLOCK (tests set one) */
    uint64_t registered;             /* atomic: bytes registered now */
    uint64_t failures;               /* atomic */
    ps_mutex_t lock;                 /* guards last_error */
    char last_error[320];
} ps__vb_reg_ctx_t;

/* Fills the context (pointers NULL mean the real calls). */
ps_status_t ps__vb_reg_ctx_init(ps__vb_reg_ctx_t *ctx, struct ibv_pd *pd, const char *device_name,
                                uint64_t max_mr_size);
void ps__vb_reg_ctx_cleanup(ps__vb_reg_ctx_t *ctx);
/* Copies the explanation of the latest failure ("" if none). */
void ps__vb_reg_last_error(ps__vb_reg_ctx_t *ctx, char *buf, size_t cap);

/* Whether CUDA memory registers on ctx's device through dma-buf: a small
 * buffer from the kind's probe (ps/base/device_probe.h) registered with
 * ibv_reg_dmabuf_mr and released. 1: it does; 0: it does not (why says at
 * which step); -1: not tried, CUDA is not in use in this process (a probe
 * would give it a context). */
int ps__vb_reg_probe_dmabuf(ps__vb_reg_ctx_t *ctx, char *why, size_t cap);

/* ctx is a ps__vb_reg_ctx_t; handles are struct ibv_mr *. */
extern const ps_rdma_reg_ops_t ps__vb_reg_ops;

static inline uint32_t ps__vb_mr_lkey(void *handle)
{
    return ((struct ibv_mr *)handle)->lkey;
}

static inline uint32_t ps__vb_mr_rkey(void *handle)
{
    return ((struct ibv_mr *)handle)->rkey;
}

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_REG_H_ */

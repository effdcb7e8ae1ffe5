/*
 * Why a memory registration failed, in words a user can act on.
 *
 * Upstream's answer to a failed ibv_reg_mr was "Check failed: mr" and an
 * abort (byteps #216, #282, #295, #313, #369); users then guessed at
 * BYTEPS_RDMA_RX_DEPTH. The usual causes are few and each has a fix:
 *   - the memlock limit (`ulimit -l`, RLIMIT_MEMLOCK) is below what is
 *     registered: raise it, or lower PS_MR_CACHE_BYTES;
 *   - GPU memory without nvidia-peermem (the kernel cannot pin it);
 *   - a buffer larger than the device's max_mr_size.
 * These functions turn (errno, memory kind, sizes) into a status and one
 * line of text. Pure: the limits and facts are parameters, so the text is
 * unit-tested; ps__vb_memlock_limit() and ps__vb_peermem_loaded() read the
 * real ones.
 */
#ifndef PS_RDMA_VERBS_VERBS_DIAG_H_
#define PS_RDMA_VERBS_VERBS_DIAG_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What is known when a registration fails. */
typedef struct {
    int err;                 /* errno of ibv_reg_mr */
    ps_buf_mem_t kind;       /* memory kind of the buffer */
    int device;              /* its device ordinal (GPU) */
    uint64_t len;            /* bytes asked for */
    uint64_t memlock;        /* RLIMIT_MEMLOCK soft limit; UINT64_MAX unlimited */
    uint64_t registered;     /* bytes this process has registered already */
    uint64_t max_mr_size;    /* the device's limit; 0 unknown */
    int peermem;             /* nvidia-peermem (or nv_peer_mem) is loaded */
    const char *dmabuf;      /* GPU memory: why dma-buf registration did not serve; NULL */
    const char *device_name; /* "mlx5_0"; may be NULL */
} ps__vb_reg_failure_t;

/* The status a failed registration means:
 *   PS_ERR_NO_MEMORY    out of lockable memory (ENOMEM, EAGAIN, EPERM, or
 *                       any host-memory failure above the memlock limit);
 *   PS_ERR_UNSUPPORTED  memory the device cannot register (GPU memory
 *                       without peermem, EOPNOTSUPP);
 *   PS_ERR_TOO_LARGE    above the device's max_mr_size;
 *   PS_ERR_REGISTRATION anything else. */
ps_status_t ps__vb_reg_status(const ps__vb_reg_failure_t *f);

/* One line (no newline) saying what failed, why, and what to do. */
void ps__vb_reg_explain(const ps__vb_reg_failure_t *f, char *buf, size_t cap);

/* The soft RLIMIT_MEMLOCK in bytes; UINT64_MAX when unlimited. */
uint64_t ps__vb_memlock_limit(void);

/* 1 if <sysfs_root>/module/nvidia_peermem or .../nv_peer_mem exists. */
int ps__vb_peermem_loaded(const char *sysfs_root);

/* "64 KiB", "1.5 GiB", "unlimited" (UINT64_MAX). */
const char *ps__vb_fmt_bytes(uint64_t v, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_DIAG_H_ */

/*
 * A pool of registered host buffers for what the RDMA vans receive into
 * when the layer above names no destination (pushed values, metas, bounce
 * buffers): blocks in power-of-two size classes, registered once through
 * the transport's ops when they are made, handed out as slices and given
 * back to the pool when the last reference to them goes. A value of 4 MB
 * pushed again and again reuses one block: no page faults, no
 * re-registration per message.
 *
 * The pool outlives its owner: ps_rdma_buf_pool_destroy() deregisters
 * every block (the transport's context closes next) and frees the idle
 * ones; blocks still held by the application are freed when it lets them
 * go. Thread-safe.
 */
#ifndef PS_RDMA_COMMON_BUF_POOL_H_
#define PS_RDMA_COMMON_BUF_POOL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/rdma/common/reg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Smallest block (a page). */
#define PS_RDMA_BUF_POOL_MIN_BLOCK 4096u

typedef struct ps_rdma_buf_pool ps_rdma_buf_pool_t;

/* `ops` NULL: blocks are not registered (transports that need no local
 * registration). Up to `max_idle_bytes` of returned blocks are kept for
 * reuse (0: 256 MiB); blocks above `max_block` bytes (0: 64 MiB) are not
 * kept at all. */
ps_status_t ps_rdma_buf_pool_create(const char *name, const ps_rdma_reg_ops_t *ops, void *ctx,
                                    uint64_t max_idle_bytes, size_t max_block,
                                    ps_rdma_buf_pool_t **pool_p);
void ps_rdma_buf_pool_destroy(ps_rdma_buf_pool_t *pool);

/* A slice of `len` bytes (> 0) at the start of a block; the slice holds
 * the only reference. PS_ERR_NO_MEMORY, or the registration's error. */
ps_status_t ps_rdma_buf_pool_get(ps_rdma_buf_pool_t *pool, size_t len, ps_slice_t *slice_p);

/* The registration handle of the block under `slice` when it came from
 * `pool`; NULL otherwise (another buffer, or no ops). */
void *ps_rdma_buf_pool_handle(const ps_rdma_buf_pool_t *pool, const ps_slice_t *slice);

typedef struct {
    uint64_t blocks;        /* blocks allocated now (idle + held) */
    uint64_t idle_bytes;    /* bytes of idle blocks */
    uint64_t gets, reuses;  /* gets, and gets served by an idle block */
} ps_rdma_buf_pool_stats_t;

void ps_rdma_buf_pool_stats(ps_rdma_buf_pool_t *pool, ps_rdma_buf_pool_stats_t *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_BUF_POOL_H_ */

/*
 * Pinned host staging buffers for device memory that goes through a van
 * moving host memory only. Page-locking a buffer (the kind's register_host)
 * costs far more than a copy, and a fresh buffer costs a page fault per page
 * on its first copy, so blocks are kept and handed out again: a block comes
 * back to the pool when the last reference to its slice goes, on whatever
 * thread drops it.
 *
 * Blocks are sized in powers of two from PS_STAGE_POOL_MIN_BLOCK; the pool
 * keeps up to PS_STAGE_POOL_MAX_CACHED bytes of idle blocks per memory kind
 * and frees what would go over. A request larger than that gets a plain
 * host buffer (pageable), as does one whose kind cannot page-lock memory.
 *
 * Where a van provides shared host blocks (ps/base/shared_block.h: the shm
 * van, once opened), new blocks are made there, so that the van sends a
 * staged value by reference and the receiver reads it in place: a device
 * push costs the one copy out of the device, no more.
 */
#ifndef PS_GPU_STAGE_POOL_H_
#define PS_GPU_STAGE_POOL_H_

#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/mem_kind.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_STAGE_POOL_MIN_BLOCK ((size_t)64 << 10)
#define PS_STAGE_POOL_MAX_CACHED ((size_t)256 << 20)

/* A host slice of exactly `len` bytes (not zeroed), page-locked for copies
 * to and from memory of `kind` when the kind allows it. len 0 gives the
 * empty slice. */
ps_status_t ps_stage_pool_get(ps_mem_kind_t kind, size_t len, ps_slice_t *slice_p);

/* Counters, for tests and ps_info: blocks made (of them, in shared
 * memory), handed out again from the pool, and idle now; bytes idle now. */
typedef struct {
    size_t blocks_made;
    size_t blocks_shared;
    size_t blocks_reused;
    size_t blocks_idle;
    size_t bytes_idle;
} ps_stage_pool_stats_t;

void ps_stage_pool_stats(ps_mem_kind_t kind, ps_stage_pool_stats_t *stats_p);

/* Frees every idle block of every kind (blocks in use come back later and
 * are kept as usual). For tests and leak checkers. */
void ps_stage_pool_trim(void);

#ifdef __cplusplus
}
#endif

#endif /* PS_GPU_STAGE_POOL_H_ */

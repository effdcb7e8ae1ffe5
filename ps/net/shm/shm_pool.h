/*
 * Receive buffers of the shared-memory van: recycled, page-aligned host
 * buffers by power-of-two size class, handed out as slices.
 *
 * Why: a fresh multi-megabyte buffer is an mmap() whose pages fault in on
 * first touch, which costs more than the copy into it. The pool is
 * reference-counted: buffers a handler keeps outlive the van.
 */
#ifndef PS_NET_SHM_SHM_POOL_H_
#define PS_NET_SHM_SHM_POOL_H_

#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

typedef struct ps__shm_pool ps__shm_pool_t;

/* A pool keeping at most `max_cached_bytes` of free buffers. */
ps_status_t ps__shm_pool_create(size_t max_cached_bytes, ps__shm_pool_t **pool_p);
/* Drops the creator's reference. */
void ps__shm_pool_release(ps__shm_pool_t *pool);
/* A slice of exactly `len` (> 0) bytes, contents undefined. */
ps_status_t ps__shm_pool_get(ps__shm_pool_t *pool, size_t len, ps_slice_t *slice_p);
/* Bytes of free buffers cached (a snapshot, for tests). */
size_t ps__shm_pool_cached_bytes(ps__shm_pool_t *pool);

#endif /* PS_NET_SHM_SHM_POOL_H_ */

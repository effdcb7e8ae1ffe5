/*
 * Receive buffers of the vans that copy what they receive (tcp, shm): a
 * size-class pool of recycled, page-aligned host buffers handed out as
 * ref-counted slices.
 *
 * Why: a fresh multi-megabyte malloc() is an mmap() whose pages fault in on
 * first touch, and free() gives them back with munmap(); at 4 MB per message
 * that costs more than the copy out of the socket. Recycled buffers keep
 * their pages mapped.
 *
 * Buffers outlive the van when a handler keeps a slice: the pool is
 * reference-counted and goes away with its last buffer.
 */
#ifndef PS_NET_VAN_RX_POOL_H_
#define PS_NET_VAN_RX_POOL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/log.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van_rx_pool ps_van_rx_pool_t;

/* A pool keeping at most `max_cached_bytes` of free buffers; a buffer it
 * cannot allocate is logged under `log`. */
ps_status_t ps_van_rx_pool_create(size_t max_cached_bytes, ps_log_component_t log,
                                  ps_van_rx_pool_t **pool_p);
/* Drops the creator's reference; buffers still out keep the pool alive. */
void ps_van_rx_pool_release(ps_van_rx_pool_t *pool);
/* A slice of exactly `len` bytes (contents undefined) on a pooled buffer. */
ps_status_t ps_van_rx_pool_get(ps_van_rx_pool_t *pool, size_t len, ps_slice_t *slice_p);
/* Bytes of free buffers cached (a snapshot, for tests). */
size_t ps_van_rx_pool_cached_bytes(ps_van_rx_pool_t *pool);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_RX_POOL_H_ */

/*
 * The staging pool of the shared-memory van: shared segments a sender
 * copies a large value into, so that the receiver can use it in place (one
 * copy in all, at memcpy speed, into memory that is still in the cache).
 *
 * Segments are reused by power-of-two class, most recently freed first,
 * and each is announced to a peer only once. The bytes out at a time are
 * bounded: past the bound, get() says PS_ERR_AGAIN and the van sends the
 * value another way. The pool is reference-counted; buffers out keep it.
 */
#ifndef PS_NET_SHM_SHM_STAGE_H_
#define PS_NET_SHM_SHM_STAGE_H_

#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

typedef struct ps__shm_stage ps__shm_stage_t;

/* At most max_out bytes of staging out at once, at most max_cached kept
 * free. */
ps_status_t ps__shm_stage_create(size_t max_out, size_t max_cached, ps__shm_stage_t **stage_p);
void ps__shm_stage_release(ps__shm_stage_t *stage);
/* A slice of exactly len bytes on a staging segment (see shm_seg.h);
 * PS_ERR_AGAIN past the bound. */
ps_status_t ps__shm_stage_get(ps__shm_stage_t *stage, size_t len, ps_slice_t *slice_p);
/* Bytes out and bytes cached (snapshots, for tests). */
size_t ps__shm_stage_out_bytes(ps__shm_stage_t *stage);
size_t ps__shm_stage_cached_bytes(ps__shm_stage_t *stage);

#endif /* PS_NET_SHM_SHM_STAGE_H_ */

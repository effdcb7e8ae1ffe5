/*
 * Shared-memory buffers: host memory that processes on one host can map.
 *
 * A buffer from ps_shm_buf_alloc() lives in its own anonymous shared segment
 * (memfd). The shared-memory van recognises it: a data slice that lies in
 * such a buffer travels to a peer on the same host as a (segment, offset,
 * length) descriptor, with no copy at all; the receiver's handler reads the
 * sender's bytes in place (its slice has memory kind PS_BUF_MEM_SHM), and a
 * pull response lands in such a buffer like in any other. Every other van
 * sends it like ordinary host memory.
 *
 * The zero-copy contract is that of every send in ps: do not write a value
 * until the request that sends it has completed. The sender's buffer is kept
 * alive (a reference is held) until the receiver has released its view.
 *
 * Segments are never named in /dev/shm: there is nothing to clean up after
 * a crash or a kill -9; the memory goes when the last process mapping it
 * does. Implementation: //ps/net/shm:alloc (linked through //ps/net).
 */
#ifndef PS_NET_SHM_ALLOC_H_
#define PS_NET_SHM_ALLOC_H_

#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A new shared buffer of `len` bytes (zero-filled, page-aligned), holding
 * one reference. PS_ERR_INVALID_ARG for len 0, PS_ERR_NO_MEMORY /
 * PS_ERR_NO_RESOURCE when the segment cannot be made (logged). */
ps_status_t ps_shm_buf_alloc(size_t len, ps_buf_t **buf_p);

/* The same as a slice covering the whole buffer. */
ps_status_t ps_shm_slice_alloc(size_t len, ps_slice_t *slice_p);

/* 1 if buf came from ps_shm_buf_alloc() in this process, else 0. */
int ps_shm_buf_is_shared(const ps_buf_t *buf);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_SHM_ALLOC_H_ */

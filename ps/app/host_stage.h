/*
 * Device memory through a van that moves host memory only: the apps' one
 * copy each way, pipelined in chunks where the van allows it. A push from
 * device memory goes out of a host copy; a pull
 * into device memory is received into the van's host buffer and copied
 * into the destination. A van that moves device memory itself
 * (PS_CAP_DEVICE_MEMORY) gets the device slices untouched. Every copy goes
 * through the memory kind's ops (ps/gpu/mem.h), never a host memcpy on
 * device memory.
 */
#ifndef PS_APP_HOST_STAGE_H_
#define PS_APP_HOST_STAGE_H_

#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A slice the van can send: a new reference to `src` when it is in host
 * memory or `device_ok`, else a host copy of it (synchronous) in a pinned
 * staging buffer (ps/gpu/stage_pool.h), which goes back to its pool when the
 * last reference to the slice goes. */
ps_status_t ps__app_sendable(const ps_slice_t *src, int device_ok, ps_slice_t *out_p);

/* A host slice of dest->len bytes for a van to receive into when it cannot
 * write `dest` (device memory), page-locked for the copy into dest
 * (ps__app_copy_in) from the same pool. */
ps_status_t ps__app_receive_stage(const ps_slice_t *dest, ps_slice_t *out_p);

/*
 * A pull into device memory through a host-only van, pipelined: the van
 * receives into a staging block and reports its progress
 * (ps_slice_filled); each PS__APP_PIPE_CHUNK that is in is copied into the
 * destination on a stream of its kind at once, so the copies overlap the
 * rest of the receipt, and on delivery only the tail is left to copy. The
 * copies go after the work queued on the device's default stream when the
 * pipe opened, as a synchronous copy would: while that work runs, nothing
 * is queued early and the delivery waits for it.
 */
typedef struct ps__app_pipe ps__app_pipe_t;

/* Bytes per copy of a pipe; pulls under two chunks are not piped. */
#define PS__APP_PIPE_CHUNK ((size_t)1 << 20)

/* Called once the van let go of a pipe's block and every copy into the
 * destination is done (or was given up on after `timeout_ms`, logged):
 * from then on nothing of the pipe writes into it. */
typedef void (*ps__app_pipe_gone_func_t)(void *arg);

/* A pipe into dest (device memory of PS__APP_PIPE_CHUNK * 2 bytes or
 * more): *recv_p, a slice of dest->len bytes for the van to receive into
 * (the caller gives it away), and the pipe. PS_ERR_UNSUPPORTED when dest
 * is not worth piping or its kind has no streams; then nothing was made
 * and `gone` will not be called. timeout_ms bounds each wait for copies. */
ps_status_t ps__app_pipe_open(const ps_slice_t *dest, int timeout_ms, ps__app_pipe_gone_func_t gone,
                              void *gone_arg, ps_slice_t *recv_p, ps__app_pipe_t **pipe_p);

/* Whether `vals` (the delivered bytes) are the pipe's block, which the
 * pipe has been copying from. */
int ps__app_pipe_owns(const ps__app_pipe_t *pipe, const void *vals);

/* The delivery: copies what the progress reports did not cover and waits
 * until every copy into dest is done. Once per pipe, before the van lets go
 * of the block. Bytes that went while the rest was arriving are added to
 * *early_p. */
ps_status_t ps__app_pipe_finish(ps__app_pipe_t *pipe, size_t len, uint64_t *early_p);

/* A push through a van that sends a segment as it is written
 * (PS_CAP_SEND_AS_WRITTEN): like ps__app_sendable, but the copy out of the
 * device is queued in chunks on a stream and the slice handed back at once;
 * the van sends each chunk as it is in (ps_slice_written), so the copy of
 * chunk i + 1 overlaps the send of chunk i. The copies go after the work
 * queued on the device's default stream (waited for here, as a synchronous
 * copy would). PS_ERR_UNSUPPORTED for src under two PS__APP_PIPE_CHUNKs, in
 * host memory, or of a kind without streams: use ps__app_sendable. */
ps_status_t ps__app_sendable_as_written(const ps_slice_t *src, int timeout_ms, ps_slice_t *out_p);

/* Writes `len` host bytes at `off` into `dest`, whatever its memory kind
 * (PS_ERR_INVALID_ARG past its end). */
ps_status_t ps__app_copy_in(const ps_slice_t *dest, size_t off, const void *src, size_t len);

/* Whether a van without device memory may receive into `dest` itself:
 * only when dest is host memory. */
static inline int ps__app_receivable(const ps_slice_t *dest, int device_ok)
{
    return device_ok || ps_slice_in_host_mem(dest);
}

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_HOST_STAGE_H_ */

/*
 * Device memory through a van that moves host memory only: the apps' one
 * copy each way. A push from device memory goes out of a host copy; a pull
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

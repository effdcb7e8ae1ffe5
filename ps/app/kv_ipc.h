/*
 * KV values in device memory moved between processes of one host (the shm
 * van) as IPC handles rather than bytes (PS_DEVICE_IPC=1).
 *
 * Pushes: the worker sends a descriptor (the handle of the values'
 * allocation, their offset and length) in the request's meta body, and the
 * server copies the values out of the worker's device memory itself, once:
 * device to device into the receive buffer registered for the push (rank,
 * first key) when that is device memory of the same kind and holds them (a
 * store kept on the GPU), else into a pinned host buffer; its handler then
 * sees that buffer as usual. The worker makes no host copy and no value
 * byte crosses the van.
 *
 * Pulls: the worker sends a descriptor of its destination (a pull
 * descriptor, magic PS__KV_IPC_PULL_MAGIC; a push-pull sends the push's
 * descriptor first, then the destination's). When the handler answers, the
 * server writes the values straight into the worker's allocation with one
 * copy (host to device, or device to device for values in memory of the
 * same kind) on a stream of its own, waits for that copy (up to the
 * postoffice's request timeout; no device-wide synchronize), and sends the
 * keys and lengths with a body that says how many value bytes it wrote
 * (ps__kv_ipc_written_t) and no value bytes. The worker then completes the
 * pull without a copy. A descriptor the server cannot use (it does not
 * open, does not name exactly the answer's bytes inside its allocation,
 * or the values are device memory of another kind) is logged at debug
 * level and the values go as bytes instead, as without PS_DEVICE_IPC. A
 * write that does not complete by the deadline is not answered (it may
 * still land): the worker's pull times out, its destination held.
 * Since the server writes outside the worker's stream order, the worker
 * sends such a pull once the work already queued on the device's default
 * stream is done, and holds the destination until that server answered or
 * was declared dead (ps_kv_cancel), even after the pull failed.
 *
 * The server opens each allocation once and keeps it open, up to
 * PS__KV_IPC_CACHE allocations (the least recently used is closed first),
 * until its worker is gone (declared dead, or its node id taken over by a
 * new process) or the server is destroyed: an allocation a live worker
 * freed stays mapped until then or until evicted. A descriptor is checked
 * against what the server opened: a bad one fails its request (a push) or
 * falls back to bytes (a pull), never the server. A handle is a
 * capability: a worker that knew another process's handle could have the
 * server read or write that memory, so PS_DEVICE_IPC is for jobs whose
 * workers trust each other (one container, one job).
 */
#ifndef PS_APP_KV_IPC_H_
#define PS_APP_KV_IPC_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/gpu/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__KV_IPC_MAGIC 0x494b5350u      /* "PSKI": a push's values */
#define PS__KV_IPC_PULL_MAGIC 0x504b5350u /* "PSKP": a pull's destination */
#define PS__KV_IPC_WRITTEN_MAGIC 0x574b5350u /* "PSKW": a response written in place */
#define PS__KV_IPC_CACHE 256

/* Same host, same layout: sent as it is. */
typedef struct {
    uint32_t magic;  /* PS__KV_IPC_MAGIC or PS__KV_IPC_PULL_MAGIC */
    uint32_t kind;   /* ps_mem_kind_t of the values */
    int32_t device;  /* their device ordinal in the worker */
    uint32_t reserved;
    uint64_t offset; /* of the values from their allocation's start */
    uint64_t len;    /* value bytes */
    ps_mem_ipc_handle_t handle;
} ps__kv_ipc_desc_t;

/* The body of a response whose values the server wrote into the
 * worker's destination: len is their byte count. */
typedef struct {
    uint32_t magic; /* PS__KV_IPC_WRITTEN_MAGIC */
    uint32_t reserved;
    uint64_t len;
} ps__kv_ipc_written_t;

/* The descriptor of `vals` (device memory of a kind with IPC handles);
 * PS_ERR_UNSUPPORTED when its kind has none (then stage instead). */
ps_status_t ps__kv_ipc_describe(const ps_slice_t *vals, ps__kv_ipc_desc_t *desc_p);
/* The same for a pull's destination (magic PS__KV_IPC_PULL_MAGIC). */
ps_status_t ps__kv_ipc_describe_pull(const ps_slice_t *dest, ps__kv_ipc_desc_t *desc_p);

/* 1 when a request's meta body is exactly a push descriptor (copied into
 * *desc_p). */
int ps__kv_ipc_parse(const void *body, size_t len, ps__kv_ipc_desc_t *desc_p);

/* A request's meta body: a push descriptor, a pull descriptor, or a push
 * descriptor then a pull descriptor. 1 when it is one of these (*has_push_p
 * and *has_pull_p say which, the descriptors copied out); 0 for any other
 * body (both flags 0). */
int ps__kv_ipc_parse_request(const void *body, size_t len, ps__kv_ipc_desc_t *push_p,
                             int *has_push_p, ps__kv_ipc_desc_t *pull_p, int *has_pull_p);

/* 1 when a response's meta body says its values were written in place
 * (their byte count in *len_p). */
int ps__kv_ipc_written_parse(const void *body, size_t len, uint64_t *len_p);

typedef struct ps__kv_ipc_cache ps__kv_ipc_cache_t;

ps_status_t ps__kv_ipc_cache_create(ps__kv_ipc_cache_t **cache_p);
/* Closes every allocation still open. NULL is a no-op. */
void ps__kv_ipc_cache_destroy(ps__kv_ipc_cache_t *cache);

/* The values a descriptor from node `sender` names, copied into a pinned
 * host slice of desc->len bytes (the caller's reference). Thread-safe; the
 * copy runs outside the cache's lock, its allocation pinned in the cache
 * meanwhile (PS_ERR_NO_RESOURCE when every one of PS__KV_IPC_CACHE
 * allocations is pinned so and a new one must open). */
ps_status_t ps__kv_ipc_fetch(ps__kv_ipc_cache_t *cache, int sender,
                             const ps__kv_ipc_desc_t *desc, ps_slice_t *vals_p);

/* The values a push descriptor from node `sender` names, copied into
 * `dst` (exactly desc->len bytes of device memory of the descriptor's
 * kind: a receive buffer the server registered) with one device-to-device
 * copy on the cache's stream for that device, waited for up to timeout_ms.
 * PS_ERR_UNSUPPORTED for `dst` in host memory or another kind (fetch into
 * the pinned pool instead). A copy that did not complete by the deadline
 * (PS_ERR_TIMED_OUT) sets *may_land_p: it may still write `dst`, which
 * stays referenced and the allocation open until it is done. Thread-safe,
 * the copy outside the cache's lock. */
ps_status_t ps__kv_ipc_fetch_into(ps__kv_ipc_cache_t *cache, int sender,
                                  const ps__kv_ipc_desc_t *desc, const ps_slice_t *dst,
                                  int timeout_ms, int *may_land_p);

/* Writes `vals` (host memory, or device memory of the descriptor's kind)
 * into the destination a pull descriptor from node `sender` names: one
 * copy on the cache's stream for that device, waited for up to
 * timeout_ms. The descriptor must be a pull descriptor naming exactly
 * vals->len bytes inside its allocation (PS_ERR_INVALID_ARG otherwise);
 * values in another device kind give PS_ERR_UNSUPPORTED. A failure
 * before the copy was queued writes nothing (*may_land_p 0). One after
 * (PS_ERR_TIMED_OUT, or no event to wait on) sets *may_land_p: that copy
 * may still land, and its source stays referenced and the allocation open
 * until it is done. Thread-safe, the copy outside the cache's lock. */
ps_status_t ps__kv_ipc_put(ps__kv_ipc_cache_t *cache, int sender, const ps__kv_ipc_desc_t *desc,
                           const ps_slice_t *vals, int timeout_ms, int *may_land_p);

/* Node `sender` is gone (declared dead, or its id taken over by a new
 * process): closes its allocations now, or, for one a copy still uses,
 * once that copy is done; none of them is matched again. */
void ps__kv_ipc_forget(ps__kv_ipc_cache_t *cache, int sender);

/* Allocations open now, for tests. */
int ps__kv_ipc_open_count(ps__kv_ipc_cache_t *cache);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_IPC_H_ */

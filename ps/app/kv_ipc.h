/*
 * KV pushes from device memory to a server on the same host (the shm van)
 * as an IPC handle rather than bytes: the worker sends a descriptor (the
 * handle of the values' allocation, their offset and length) in the
 * request's meta body, and the server copies the values out of the
 * worker's device memory itself, once, into a pinned host buffer its
 * handler then sees as usual. The worker makes no host copy and no value
 * byte crosses the van.
 *
 * The server opens each allocation once and keeps it open, up to
 * PS__KV_IPC_CACHE allocations (the least recently used is closed first),
 * until it is destroyed: an allocation a worker freed, or a dead worker's,
 * stays mapped until then or until evicted. A descriptor is checked
 * against what the server opened: a bad one fails its request, never the
 * server. A handle is a capability: a worker that knew another process's
 * handle could have the server read that memory, so PS_DEVICE_IPC is for
 * jobs whose workers trust each other (one container, one job).
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

#define PS__KV_IPC_MAGIC 0x494b5350u /* "PSKI" */
#define PS__KV_IPC_CACHE 256

/* Same host, same layout: sent as it is. */
typedef struct {
    uint32_t magic;
    uint32_t kind;   /* ps_mem_kind_t of the values */
    int32_t device;  /* their device ordinal in the worker */
    uint32_t reserved;
    uint64_t offset; /* of the values from their allocation's start */
    uint64_t len;    /* value bytes */
    ps_mem_ipc_handle_t handle;
} ps__kv_ipc_desc_t;

/* The descriptor of `vals` (device memory of a kind with IPC handles);
 * PS_ERR_UNSUPPORTED when its kind has none (then stage instead). */
ps_status_t ps__kv_ipc_describe(const ps_slice_t *vals, ps__kv_ipc_desc_t *desc_p);

/* 1 when a request's meta body is a descriptor (copied into *desc_p). */
int ps__kv_ipc_parse(const void *body, size_t len, ps__kv_ipc_desc_t *desc_p);

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

/* Allocations open now, for tests. */
int ps__kv_ipc_open_count(ps__kv_ipc_cache_t *cache);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_IPC_H_ */

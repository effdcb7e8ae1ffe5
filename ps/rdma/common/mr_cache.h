/*
 * The memory-registration cache of the RDMA vans (ibverbs, libfabric, UCX).
 *
 * Upstream registered every user buffer on first use and kept it until
 * the van stopped; pinned memory grew without bound until ibv_reg_mr failed
 * with "Cannot allocate memory" (byteps #216, #282, #295, ...). Here:
 *  - a registration covers a whole ps_buf_t and hangs on one of the
 *    buffer's registration slots: a later slice of the same buffer finds it
 *    in O(1), and when the buffer's last reference goes the registration
 *    goes with it (no stale registration of freed, reused memory);
 *  - the bytes kept registered have a limit (PS_MR_CACHE_BYTES; unset: half
 *    of RLIMIT_MEMLOCK for transports that pin memory, none otherwise);
 *    registrations not in use are evicted least recently used first;
 *  - a registration in use by a transfer (get .. put) or pinned by the user
 *    (register_mem) is never evicted; when those alone fill the limit, get
 *    fails with PS_ERR_NO_RESOURCE and a log line saying so;
 *  - a failed registration is retried once after evicting everything idle,
 *    and its log line explains the memlock limit (`ulimit -l`).
 *
 * One cache per transport context (a domain, a PD, a UCP context). Each
 * live cache owns one of the buffers' registration slots; when all are
 * taken (more caches than PS_BUF_REG_SLOTS in one process) the cache still
 * works, registering on every get and deregistering on the last put.
 *
 * Thread-safe. reg/dereg of the ops run under the cache's lock.
 */
#ifndef PS_RDMA_COMMON_MR_CACHE_H_
#define PS_RDMA_COMMON_MR_CACHE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/buffer_internal.h"
#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/rdma/common/reg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_rdma_mr_cache ps_rdma_mr_cache_t;

/* One registration. The first fields are the caller's to read (between
 * get and put); the rest is the cache's. */
typedef struct ps_rdma_mr {
    void *addr;   /* start of the registered region (the buffer's data) */
    size_t len;   /* its length */
    void *handle; /* what ops->reg returned */
    /* private */
    struct ps__rdma_mr_anchor *anchor;
    ps_buf_t *buf;
    uint32_t use;
    uint32_t pinned;
    uint8_t transient;
    uint8_t in_lru;
    uint8_t in_all;
    struct ps_rdma_mr *lru_prev, *lru_next;
    struct ps_rdma_mr *all_prev, *all_next;
} ps_rdma_mr_t;

typedef struct ps_rdma_mr_cache_params {
    const char *name;          /* for log lines: "fabric", "ucx", "ibverbs" */
    ps_log_component_t log;    /* component of those lines */
    /* Most bytes kept registered; 0 means unlimited. Usually
     * ps_rdma_mr_cache_default_limit(pins_memory). */
    uint64_t max_bytes;
} ps_rdma_mr_cache_params_t;

/* The limit in effect: PS_MR_CACHE_BYTES when set; else, when registering
 * pins memory (verbs, EFA), half of RLIMIT_MEMLOCK (0 if that is
 * unlimited); else 0 (no limit). */
uint64_t ps_rdma_mr_cache_default_limit(int pins_memory);

/* `ops` and `ctx` must stay valid until destroy. */
ps_status_t ps_rdma_mr_cache_create(const ps_rdma_mr_cache_params_t *params,
                                    const ps_rdma_reg_ops_t *ops, void *ctx,
                                    ps_rdma_mr_cache_t **cache_p);

/* Deregisters everything. Every get must have been put. Buffers that still
 * carry one of its (now empty) registrations free them when they go. */
void ps_rdma_mr_cache_destroy(ps_rdma_mr_cache_t *cache);

/*
 * A registration covering slice->buf whole, taken for use (not evictable
 * until ps_rdma_mr_cache_put). The caller keeps a reference on the buffer
 * from get until after put. The address of slice byte i in the region is
 * (char *)ps_slice_ptr(slice) + i; its offset from mr->addr is
 * slice->off + i.
 *   PS_ERR_INVALID_ARG   empty slice.
 *   PS_ERR_NO_RESOURCE   the limit is reached by registrations in use or
 *                        pinned, or the buffer alone is larger than it.
 *   PS_ERR_NO_MEMORY / PS_ERR_REGISTRATION / PS_ERR_UNSUPPORTED from reg,
 *                        after one retry; logged (rate-limited) with the
 *                        memlock limit.
 */
ps_status_t ps_rdma_mr_cache_get(ps_rdma_mr_cache_t *cache, const ps_slice_t *slice,
                                 ps_rdma_mr_t **mr_p);

/* Ends a use begun by get. */
void ps_rdma_mr_cache_put(ps_rdma_mr_cache_t *cache, ps_rdma_mr_t *mr);

/* Registers buf now and keeps it registered (exempt from eviction) until
 * unpin or until the buffer goes: the van's register_mem / PinMemory.
 * Pins nest. */
ps_status_t ps_rdma_mr_cache_pin(ps_rdma_mr_cache_t *cache, ps_buf_t *buf);
/* PS_ERR_NOT_FOUND if buf is not pinned in this cache. */
ps_status_t ps_rdma_mr_cache_unpin(ps_rdma_mr_cache_t *cache, ps_buf_t *buf);

typedef struct ps_rdma_mr_cache_stats {
    uint64_t bytes;        /* registered now */
    uint64_t max_bytes;    /* the limit; 0 none */
    uint64_t entries;      /* registrations now */
    uint64_t in_use;       /* of which taken by get or pinned */
    uint64_t hits;         /* gets served by a registration that existed */
    uint64_t misses;       /* gets that registered */
    uint64_t evictions;
    uint64_t failures;     /* gets that failed */
    int slot;              /* buffer registration slot used; -1 none */
} ps_rdma_mr_cache_stats_t;

void ps_rdma_mr_cache_stats(ps_rdma_mr_cache_t *cache, ps_rdma_mr_cache_stats_t *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_MR_CACHE_H_ */

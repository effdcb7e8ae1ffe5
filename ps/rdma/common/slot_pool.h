/*
 * The address pool of the RDMA vans (upstream's AddressPool): a fixed table
 * of slots, each holding a pointer, named by a 32-bit id small enough for
 * an immediate value, a tag or a van_data field. An id carries the slot's
 * generation, so a late or forged id of a slot that was freed (and maybe
 * reused) is refused instead of naming someone else's buffer.
 *
 * Capacity comes from the caller (BYTEPS_ADDRESS_POOL_SIZE for the verbs
 * van); a full pool is a clear error, not a crash. Thread-safe.
 */
#ifndef PS_RDMA_COMMON_SLOT_POOL_H_
#define PS_RDMA_COMMON_SLOT_POOL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many slots (ids keep 20 bits of index, 12 of generation). */
#define PS_RDMA_SLOT_POOL_MAX (1u << 20)
/* Never a valid id. */
#define PS_RDMA_SLOT_NONE 0u

typedef struct ps_rdma_slot_pool ps_rdma_slot_pool_t;

/* `name` is for the "pool full" log line, e.g. "fabric pull". */
ps_status_t ps_rdma_slot_pool_create(const char *name, uint32_t capacity,
                                     ps_rdma_slot_pool_t **pool_p);
void ps_rdma_slot_pool_destroy(ps_rdma_slot_pool_t *pool);

/* Stores ptr (not NULL) in a free slot. PS_ERR_NO_RESOURCE when all slots
 * are in use (logged, rate-limited). */
ps_status_t ps_rdma_slot_alloc(ps_rdma_slot_pool_t *pool, void *ptr, uint32_t *id_p);
/* The pointer of a live id, or NULL (free, stale or out of range). */
void *ps_rdma_slot_get(ps_rdma_slot_pool_t *pool, uint32_t id);
/* Frees a live id and returns its pointer; NULL (and nothing freed) for a
 * free, stale or out-of-range id. */
void *ps_rdma_slot_release(ps_rdma_slot_pool_t *pool, uint32_t id);

size_t ps_rdma_slot_in_use(ps_rdma_slot_pool_t *pool);
uint32_t ps_rdma_slot_capacity(const ps_rdma_slot_pool_t *pool);

/* Calls fn on every live slot, after freeing it (for teardown and for a
 * failed peer's entries, when `match` is NULL or returns 1). */
void ps_rdma_slot_drain(ps_rdma_slot_pool_t *pool, int (*match)(void *arg, void *ptr),
                        void (*fn)(void *arg, void *ptr), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_SLOT_POOL_H_ */

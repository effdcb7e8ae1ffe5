/*
 * Rendezvous bookkeeping of the RDMA vans: what one side learned from a
 * request that its answer will need, keyed by the request's identity
 * (peer node, app, customer, timestamp). A server's van records where the
 * worker wants a pull response written (remote address and key, from the
 * request's van_data); the worker's van records the destination it
 * registered. The response to that request takes the entry.
 *
 * Bounded: when full, the oldest entry is dropped (through the drop
 * callback), so requests that are never answered cannot grow it without
 * limit. A failed peer's entries are dropped together. Thread-safe;
 * callbacks run without the table's lock.
 */
#ifndef PS_RDMA_COMMON_RDV_TABLE_H_
#define PS_RDMA_COMMON_RDV_TABLE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t peer;     /* the other node */
    int32_t app_id;
    int32_t customer_id;
    int32_t timestamp;
} ps_rdma_rdv_key_t;

typedef struct ps_rdma_rdv_table ps_rdma_rdv_table_t;

/* Gives an entry's value back (dropped as oldest, for its peer, or at
 * destroy). */
typedef void (*ps_rdma_rdv_drop_func_t)(void *arg, const ps_rdma_rdv_key_t *key, void *value);

ps_status_t ps_rdma_rdv_create(size_t max_entries, ps_rdma_rdv_drop_func_t drop, void *arg,
                               ps_rdma_rdv_table_t **table_p);
/* Drops every entry left. */
void ps_rdma_rdv_destroy(ps_rdma_rdv_table_t *table);

/* Records value (not NULL) under key. An entry already under the key is
 * replaced and dropped (a request id reused). When the table is full the
 * oldest entry is dropped first. */
ps_status_t ps_rdma_rdv_put(ps_rdma_rdv_table_t *table, const ps_rdma_rdv_key_t *key,
                            void *value);
/* Removes and returns the value under key, or NULL. */
void *ps_rdma_rdv_take(ps_rdma_rdv_table_t *table, const ps_rdma_rdv_key_t *key);
/* Drops every entry of one peer; returns how many. */
size_t ps_rdma_rdv_drop_peer(ps_rdma_rdv_table_t *table, int32_t peer);
size_t ps_rdma_rdv_size(ps_rdma_rdv_table_t *table);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_RDV_TABLE_H_ */

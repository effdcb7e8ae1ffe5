/*
 * A van's per-peer state, found by node id. Node ids are small and dense
 * (1 scheduler, 8 + 2k servers, 9 + 2k workers), so a growable array of
 * pointers indexed by id beats a hash table; each element is allocated
 * zeroed on first use and stays until the van frees the table.
 *
 * Not thread-safe: the van holds its own lock around every call.
 */
#ifndef PS_NET_VAN_PEER_SLOTS_H_
#define PS_NET_VAN_PEER_SLOTS_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van_peer_slots {
    void **slot; /* slot[id], NULL where no peer; `cap` entries */
    int cap;
} ps_van_peer_slots_t;

/* The element of `id` (1 .. PS_NODE_EMPTY - 1), or NULL when there is none
 * (or id is out of range). With `create`, a missing element of elem_size
 * zeroed bytes is made and *created_p set to 1 (else 0; created_p may be
 * NULL); NULL then only when out of memory. */
void *ps_van_peer_slots_get(ps_van_peer_slots_t *t, int id, size_t elem_size, int create,
                            int *created_p);

/* The element of `id`, or NULL when there is none: the lookup of
 * ps_van_peer_slots_get() without `create`, inline for the send path.
 * (Slots beyond the ids ever created are NULL.) */
static inline void *ps_van_peer_slots_find(const ps_van_peer_slots_t *t, int id)
{
    return id > 0 && id < t->cap ? t->slot[id] : NULL;
}

/* Frees every element (plain free()) and the array; the table is empty after. */
void ps_van_peer_slots_free(ps_van_peer_slots_t *t);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_PEER_SLOTS_H_ */

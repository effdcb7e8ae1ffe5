/*
 * A small map from 64-bit ids to pointers (open addressing, grow-only, no
 * removal): the segments a channel has announced or mapped. Not
 * thread-safe; its owner locks.
 */
#ifndef PS_NET_SHM_SHM_IDMAP_H_
#define PS_NET_SHM_SHM_IDMAP_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

typedef struct {
    uint64_t *ids; /* 0 = empty slot (ids are never 0) */
    void **vals;
    size_t cap;    /* power of two or 0 */
    size_t count;
} ps__shm_idmap_t;

/* The value of id, or NULL. */
void *ps__shm_idmap_get(const ps__shm_idmap_t *m, uint64_t id);
/* Adds or replaces (id != 0, val != NULL). */
ps_status_t ps__shm_idmap_put(ps__shm_idmap_t *m, uint64_t id, void *val);
/* Calls fn on every value, then empties and frees the map. */
void ps__shm_idmap_clear(ps__shm_idmap_t *m, void (*fn)(void *val));

#endif /* PS_NET_SHM_SHM_IDMAP_H_ */

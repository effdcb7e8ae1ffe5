/*
 * The peer table of a van that keeps connections per peer node (tcp, shm,
 * ucx): the id-indexed slots of peer_slots.h behind one read-write lock,
 * each peer starting with what every such van tracks, its id and how its
 * last connection failed. The van's own peer struct puts a ps_van_peer_t
 * first and keeps its connections after it, under the table's lock.
 */
#ifndef PS_NET_VAN_PEER_TABLE_H_
#define PS_NET_VAN_PEER_TABLE_H_

#include <pthread.h>
#include <stddef.h>

#include "ps/base/status.h"
#include "ps/net/van/base.h"
#include "ps/net/van/peer_slots.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van_peer {
    int id;
    /* How its last connection failed, PS_OK while connected
     * (ps_van_keeps_lost). */
    ps_status_t lost;
} ps_van_peer_t;

typedef struct ps_van_peer_table {
    pthread_rwlock_t lock;
    ps_van_peer_slots_t slots;
    size_t peer_size; /* of the van's peer struct */
} ps_van_peer_table_t;

void ps_van_peer_table_init(ps_van_peer_table_t *t, size_t peer_size);
/* Frees every peer (plain free()) and the lock. */
void ps_van_peer_table_fini(ps_van_peer_table_t *t);

/* The peer of `id`, or NULL when there is none; with `create` (the write
 * lock held) a missing one is made, zeroed but for its id, NULL then only
 * when out of memory. The lock held. */
void *ps_van_peer_table_get(ps_van_peer_table_t *t, int id, int create);

/* A connection of the peer is identified: it is connected again. */
static inline void ps_van_peer_connected(ps_van_peer_t *p)
{
    p->lost = PS_OK;
}

/* A connection of the peer went, for `why`: kept when the sends that find
 * no connection then must fail so (the write lock held). */
static inline void ps_van_peer_went(ps_van_peer_t *p, ps_status_t why)
{
    if (ps_van_keeps_lost(why)) {
        p->lost = why;
    }
}

/* How the peer's last connection failed; PS_OK when none did since it
 * connected, or there is no such peer. Takes the read lock. */
ps_status_t ps_van_peer_table_lost(ps_van_peer_table_t *t, int id);

/* Up to `max` connections of `peer` into out[], a reference taken on each
 * (under the read lock); returns how many. */
typedef int (*ps_van_peer_pick_t)(void *peer, void **out, int max);

/* Every connection `pick` names, of every peer, in a new array in *list_p
 * (free() it; NULL when none); returns how many. Out of memory, the peers
 * not yet picked are left out. */
int ps_van_peer_table_collect(ps_van_peer_table_t *t, ps_van_peer_pick_t pick, int max_per_peer,
                              void ***list_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_PEER_TABLE_H_ */

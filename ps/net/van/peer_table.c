/*
 * The locked peer table of peer_table.h.
 */
#include "ps/net/van/peer_table.h"

#include <stdlib.h>

void ps_van_peer_table_init(ps_van_peer_table_t *t, size_t peer_size)
{
    pthread_rwlock_init(&t->lock, NULL);
    t->slots.slot = NULL;
    t->slots.cap = 0;
    t->peer_size = peer_size < sizeof(ps_van_peer_t) ? sizeof(ps_van_peer_t) : peer_size;
}

void ps_van_peer_table_fini(ps_van_peer_table_t *t)
{
    ps_van_peer_slots_free(&t->slots);
    pthread_rwlock_destroy(&t->lock);
}

void *ps_van_peer_table_get(ps_van_peer_table_t *t, int id, int create)
{
    int created;
    ps_van_peer_t *p = ps_van_peer_slots_get(&t->slots, id, t->peer_size, create, &created);
    if (created) {
        p->id = id;
    }
    return p;
}

ps_status_t ps_van_peer_table_lost(ps_van_peer_table_t *t, int id)
{
    pthread_rwlock_rdlock(&t->lock);
    const ps_van_peer_t *p = ps_van_peer_slots_find(&t->slots, id);
    ps_status_t lost = p != NULL ? p->lost : PS_OK;
    pthread_rwlock_unlock(&t->lock);
    return lost;
}

int ps_van_peer_table_collect(ps_van_peer_table_t *t, ps_van_peer_pick_t pick, int max_per_peer,
                              void ***list_p)
{
    void **list = NULL;
    int n = 0, cap = 0;
    pthread_rwlock_rdlock(&t->lock);
    for (int id = 0; id < t->slots.cap; ++id) {
        void *p = t->slots.slot[id];
        if (p == NULL) {
            continue;
        }
        if (cap - n < max_per_peer) {
            int grown_cap = cap == 0 ? 16 : cap * 2;
            while (grown_cap - n < max_per_peer) {
                grown_cap *= 2;
            }
            void **grown = realloc(list, (size_t)grown_cap * sizeof(*list));
            if (grown == NULL) {
                break;
            }
            list = grown;
            cap = grown_cap;
        }
        n += pick(p, list + n, max_per_peer);
    }
    pthread_rwlock_unlock(&t->lock);
    *list_p = list;
    return n;
}

/*
 * The id-indexed peer table of peer_slots.h.
 */
#include "ps/net/van/peer_slots.h"

#include <stdlib.h>
#include <string.h>

#include "ps/net/codec/message.h"

void *ps_van_peer_slots_get(ps_van_peer_slots_t *t, int id, size_t elem_size, int create,
                            int *created_p)
{
    if (created_p != NULL) {
        *created_p = 0;
    }
    if (id <= 0 || id >= PS_NODE_EMPTY) {
        return NULL;
    }
    if (id >= t->cap) {
        if (!create) {
            return NULL;
        }
        int cap = t->cap == 0 ? 64 : t->cap;
        while (cap <= id) {
            cap *= 2;
        }
        void **slot = realloc(t->slot, (size_t)cap * sizeof(*slot));
        if (slot == NULL) {
            return NULL;
        }
        memset(slot + t->cap, 0, (size_t)(cap - t->cap) * sizeof(*slot));
        t->slot = slot;
        t->cap = cap;
    }
    if (t->slot[id] == NULL && create) {
        t->slot[id] = calloc(1, elem_size);
        if (t->slot[id] != NULL && created_p != NULL) {
            *created_p = 1;
        }
    }
    return t->slot[id];
}

void ps_van_peer_slots_free(ps_van_peer_slots_t *t)
{
    for (int id = 0; id < t->cap; ++id) {
        free(t->slot[id]);
    }
    free(t->slot);
    t->slot = NULL;
    t->cap = 0;
}

/*
 * The id map of shm_idmap.h.
 */
#include "ps/net/shm/shm_idmap.h"

#include <stdlib.h>

static size_t slot_of(uint64_t id, size_t cap)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

void *ps__shm_idmap_get(const ps__shm_idmap_t *m, uint64_t id)
{
    if (m->cap == 0 || id == 0) {
        return NULL;
    }
    for (size_t i = slot_of(id, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->ids[i] == id) {
            return m->vals[i];
        }
        if (m->ids[i] == 0) {
            return NULL;
        }
    }
}

static void insert(uint64_t *ids, void **vals, size_t cap, uint64_t id, void *val, int *added_p)
{
    for (size_t i = slot_of(id, cap);; i = (i + 1) & (cap - 1)) {
        if (ids[i] == id || ids[i] == 0) {
            *added_p = ids[i] == 0;
            ids[i] = id;
            vals[i] = val;
            return;
        }
    }
}

ps_status_t ps__shm_idmap_put(ps__shm_idmap_t *m, uint64_t id, void *val)
{
    if (id == 0 || val == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        uint64_t *ids = calloc(cap, sizeof(*ids));
        void **vals = calloc(cap, sizeof(*vals));
        if (ids == NULL || vals == NULL) {
            free(ids);
            free(vals);
            return PS_ERR_NO_MEMORY;
        }
        int added;
        for (size_t i = 0; i < m->cap; ++i) {
            if (m->ids[i] != 0) {
                insert(ids, vals, cap, m->ids[i], m->vals[i], &added);
            }
        }
        free(m->ids);
        free(m->vals);
        m->ids = ids;
        m->vals = vals;
        m->cap = cap;
    }
    int added = 0;
    insert(m->ids, m->vals, m->cap, id, val, &added);
    m->count += (size_t)added;
    return PS_OK;
}

void ps__shm_idmap_clear(ps__shm_idmap_t *m, void (*fn)(void *val))
{
    for (size_t i = 0; i < m->cap; ++i) {
        if (m->ids[i] != 0 && fn != NULL) {
            fn(m->vals[i]);
        }
    }
    free(m->ids);
    free(m->vals);
    m->ids = NULL;
    m->vals = NULL;
    m->cap = 0;
    m->count = 0;
}

/*
 * The rendezvous table (see rdv_table.h): a chained hash of power-of-two
 * buckets, plus a list in insertion order for dropping the oldest.
 */
#include "ps/rdma/common/rdv_table.h"

#include <stdlib.h>
#include <string.h>

#include "ps/base/thread.h"

typedef struct entry {
    ps_rdma_rdv_key_t key;
    void *value;
    struct entry *chain;             /* bucket */
    struct entry *older, *newer;     /* age list */
} entry_t;

struct ps_rdma_rdv_table {
    ps_mutex_t lock;
    entry_t **buckets;
    size_t nbuckets; /* power of two */
    size_t size;
    size_t max;
    entry_t *oldest, *newest;
    ps_rdma_rdv_drop_func_t drop;
    void *arg;
};

static uint64_t key_hash(const ps_rdma_rdv_key_t *k)
{
    uint64_t h = (uint64_t)(uint32_t)k->peer * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uint32_t)k->timestamp + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= ((uint64_t)(uint32_t)k->app_id << 32 | (uint32_t)k->customer_id) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    return h;
}

static int key_eq(const ps_rdma_rdv_key_t *a, const ps_rdma_rdv_key_t *b)
{
    return a->peer == b->peer && a->app_id == b->app_id && a->customer_id == b->customer_id &&
           a->timestamp == b->timestamp;
}

ps_status_t ps_rdma_rdv_create(size_t max_entries, ps_rdma_rdv_drop_func_t drop, void *arg,
                               ps_rdma_rdv_table_t **table_p)
{
    if (table_p == NULL || max_entries == 0 || drop == NULL)
        return PS_ERR_INVALID_ARG;
    ps_rdma_rdv_table_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return PS_ERR_NO_MEMORY;
    size_t nb = 64;
    while (nb < max_entries && nb < (1u << 20))
        nb <<= 1;
    t->buckets = calloc(nb, sizeof(*t->buckets));
    if (t->buckets == NULL || ps_mutex_init(&t->lock) != PS_OK) {
        free(t->buckets);
        free(t);
        return PS_ERR_NO_MEMORY;
    }
    t->nbuckets = nb;
    t->max = max_entries;
    t->drop = drop;
    t->arg = arg;
    *table_p = t;
    return PS_OK;
}

/* Unlinks e from its bucket and the age list (lock held). */
static void unlink_entry(ps_rdma_rdv_table_t *t, entry_t *e)
{
    entry_t **pp = &t->buckets[key_hash(&e->key) & (t->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    if (e->older)
        e->older->newer = e->newer;
    else
        t->oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        t->newest = e->older;
    t->size--;
}

static entry_t *find(ps_rdma_rdv_table_t *t, const ps_rdma_rdv_key_t *key)
{
    entry_t *e = t->buckets[key_hash(key) & (t->nbuckets - 1)];
    while (e != NULL && !key_eq(&e->key, key))
        e = e->chain;
    return e;
}

void ps_rdma_rdv_destroy(ps_rdma_rdv_table_t *t)
{
    if (t == NULL)
        return;
    entry_t *e = t->oldest;
    while (e != NULL) {
        entry_t *next = e->newer;
        t->drop(t->arg, &e->key, e->value);
        free(e);
        e = next;
    }
    ps_mutex_destroy(&t->lock);
    free(t->buckets);
    free(t);
}

ps_status_t ps_rdma_rdv_put(ps_rdma_rdv_table_t *t, const ps_rdma_rdv_key_t *key, void *value)
{
    if (t == NULL || key == NULL || value == NULL)
        return PS_ERR_INVALID_ARG;
    entry_t *n = malloc(sizeof(*n));
    if (n == NULL)
        return PS_ERR_NO_MEMORY;
    n->key = *key;
    n->value = value;
    entry_t *gone[2] = {NULL, NULL};
    ps_mutex_lock(&t->lock);
    entry_t *old = find(t, key);
    if (old != NULL) {
        unlink_entry(t, old);
        gone[0] = old;
    }
    if (t->size >= t->max && t->oldest != NULL) {
        gone[1] = t->oldest;
        unlink_entry(t, gone[1]);
    }
    size_t b = key_hash(key) & (t->nbuckets - 1);
    n->chain = t->buckets[b];
    t->buckets[b] = n;
    n->older = t->newest;
    n->newer = NULL;
    if (t->newest)
        t->newest->newer = n;
    else
        t->oldest = n;
    t->newest = n;
    t->size++;
    ps_mutex_unlock(&t->lock);
    for (int i = 0; i < 2; i++) {
        if (gone[i] != NULL) {
            t->drop(t->arg, &gone[i]->key, gone[i]->value);
            free(gone[i]);
        }
    }
    return PS_OK;
}

void *ps_rdma_rdv_take(ps_rdma_rdv_table_t *t, const ps_rdma_rdv_key_t *key)
{
    if (t == NULL || key == NULL)
        return NULL;
    ps_mutex_lock(&t->lock);
    if (t->size == 0) {
        ps_mutex_unlock(&t->lock);
        return NULL;
    }
    entry_t *e = find(t, key);
    if (e != NULL)
        unlink_entry(t, e);
    ps_mutex_unlock(&t->lock);
    if (e == NULL)
        return NULL;
    void *v = e->value;
    free(e);
    return v;
}

size_t ps_rdma_rdv_drop_peer(ps_rdma_rdv_table_t *t, int32_t peer)
{
    if (t == NULL)
        return 0;
    entry_t *list = NULL;
    size_t n = 0;
    ps_mutex_lock(&t->lock);
    entry_t *e = t->oldest;
    while (e != NULL) {
        entry_t *next = e->newer;
        if (e->key.peer == peer) {
            unlink_entry(t, e);
            e->chain = list;
            list = e;
            n++;
        }
        e = next;
    }
    ps_mutex_unlock(&t->lock);
    while (list != NULL) {
        entry_t *next = list->chain;
        t->drop(t->arg, &list->key, list->value);
        free(list);
        list = next;
    }
    return n;
}

size_t ps_rdma_rdv_size(ps_rdma_rdv_table_t *t)
{
    ps_mutex_lock(&t->lock);
    size_t n = t->size;
    ps_mutex_unlock(&t->lock);
    return n;
}

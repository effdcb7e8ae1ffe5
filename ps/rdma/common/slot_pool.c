/*
 * The address pool (see slot_pool.h): slots in an array, free ones on an
 * index free list, ids = generation << 20 | index with a generation of at
 * least 1, so 0 is never an id.
 */
#include "ps/rdma/common/slot_pool.h"

#include <stdio.h>
#include <stdlib.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/rdma/common/rdma_shared.h"

#define INDEX_BITS 20
#define INDEX_MASK ((1u << INDEX_BITS) - 1)
#define GEN_MAX ((1u << (32 - INDEX_BITS)) - 1)

typedef struct {
    void *ptr;      /* NULL when free */
    uint32_t gen;   /* 1..GEN_MAX; bumped when freed */
    uint32_t next;  /* free list link (index + 1; 0 ends) */
} slot_t;

struct ps_rdma_slot_pool {
    ps_mutex_t lock;
    slot_t *slots;
    uint32_t capacity;
    uint32_t free_head; /* index + 1; 0: none free */
    size_t in_use;
    char name[32];
};

ps_status_t ps_rdma_slot_pool_create(const char *name, uint32_t capacity,
                                     ps_rdma_slot_pool_t **pool_p)
{
    if (pool_p == NULL || capacity == 0 || capacity > PS_RDMA_SLOT_POOL_MAX)
        return PS_ERR_INVALID_ARG;
    ps_rdma_slot_pool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return PS_ERR_NO_MEMORY;
    p->slots = calloc(capacity, sizeof(*p->slots));
    if (p->slots == NULL || ps_mutex_init(&p->lock) != PS_OK) {
        free(p->slots);
        free(p);
        return PS_ERR_NO_MEMORY;
    }
    p->capacity = capacity;
    for (uint32_t i = 0; i < capacity; i++) {
        p->slots[i].gen = 1;
        p->slots[i].next = i + 1 < capacity ? i + 2 : 0;
    }
    p->free_head = 1;
    snprintf(p->name, sizeof(p->name), "%s", name ? name : "address");
    *pool_p = p;
    return PS_OK;
}

void ps_rdma_slot_pool_destroy(ps_rdma_slot_pool_t *p)
{
    if (p == NULL)
        return;
    ps_mutex_destroy(&p->lock);
    free(p->slots);
    free(p);
}

ps_status_t ps_rdma_slot_alloc(ps_rdma_slot_pool_t *p, void *ptr, uint32_t *id_p)
{
    if (p == NULL || ptr == NULL || id_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps_mutex_lock(&p->lock);
    if (p->free_head == 0) {
        size_t n = p->in_use;
        ps_mutex_unlock(&p->lock);
        ps_warn_ratelimited(PS_LOG_RDMA, "%s pool full: all %zu slots are in use by transfers "
                            "in flight (BYTEPS_ADDRESS_POOL_SIZE)", p->name, n);
        return PS_ERR_NO_RESOURCE;
    }
    uint32_t idx = p->free_head - 1;
    slot_t *s = &p->slots[idx];
    p->free_head = s->next;
    s->next = 0;
    s->ptr = ptr;
    p->in_use++;
    *id_p = (s->gen << INDEX_BITS) | idx;
    ps_mutex_unlock(&p->lock);
    return PS_OK;
}

/* The slot of a live id (lock held), or NULL. */
static slot_t *lookup(ps_rdma_slot_pool_t *p, uint32_t id)
{
    uint32_t idx = id & INDEX_MASK;
    uint32_t gen = id >> INDEX_BITS;
    if (idx >= p->capacity)
        return NULL;
    slot_t *s = &p->slots[idx];
    return s->ptr != NULL && s->gen == gen ? s : NULL;
}

static void *free_slot(ps_rdma_slot_pool_t *p, slot_t *s)
{
    void *ptr = s->ptr;
    s->ptr = NULL;
    s->gen = s->gen == GEN_MAX ? 1 : s->gen + 1;
    s->next = p->free_head;
    p->free_head = (uint32_t)(s - p->slots) + 1;
    p->in_use--;
    return ptr;
}

void *ps_rdma_slot_get(ps_rdma_slot_pool_t *p, uint32_t id)
{
    if (p == NULL)
        return NULL;
    ps_mutex_lock(&p->lock);
    slot_t *s = lookup(p, id);
    void *ptr = s ? s->ptr : NULL;
    ps_mutex_unlock(&p->lock);
    return ptr;
}

void *ps_rdma_slot_release(ps_rdma_slot_pool_t *p, uint32_t id)
{
    if (p == NULL)
        return NULL;
    ps_mutex_lock(&p->lock);
    slot_t *s = lookup(p, id);
    void *ptr = s ? free_slot(p, s) : NULL;
    ps_mutex_unlock(&p->lock);
    return ptr;
}

size_t ps_rdma_slot_in_use(ps_rdma_slot_pool_t *p)
{
    ps_mutex_lock(&p->lock);
    size_t n = p->in_use;
    ps_mutex_unlock(&p->lock);
    return n;
}

uint32_t ps_rdma_slot_capacity(const ps_rdma_slot_pool_t *p)
{
    return p->capacity;
}

void ps_rdma_slot_drain(ps_rdma_slot_pool_t *p, int (*match)(void *arg, void *ptr),
                        void (*fn)(void *arg, void *ptr), void *arg)
{
    if (p == NULL || fn == NULL)
        return;
    /* Collected under the lock, handed out without it: fn may call back. */
    size_t cap = 0, n = 0;
    void **out = NULL;
    ps_mutex_lock(&p->lock);
    cap = p->in_use;
    out = cap ? malloc(cap * sizeof(*out)) : NULL;
    for (uint32_t i = 0; out != NULL && i < p->capacity && n < cap; i++) {
        slot_t *s = &p->slots[i];
        if (s->ptr != NULL && (match == NULL || match(arg, s->ptr)))
            out[n++] = free_slot(p, s);
    }
    ps_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++)
        fn(arg, out[i]);
    free(out);
}

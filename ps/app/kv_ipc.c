/* KV pushes as IPC handles between processes of one host (kv_ipc.h). */
#include "ps/app/kv_ipc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/gpu/stage_pool.h"

ps_status_t ps__kv_ipc_describe(const ps_slice_t *vals, ps__kv_ipc_desc_t *desc_p)
{
    ps_mem_kind_t kind = ps_slice_mem_ops_kind(vals);
    const ps_mem_ops_t *ops = ps_mem_ops(kind);
    void *ptr = ps_slice_ptr(vals), *base;
    size_t alloc_len;
    memset(desc_p, 0, sizeof(*desc_p));
    ps_status_t st = ops->ipc_get_handle(ptr, &desc_p->handle);
    if (st == PS_OK)
        st = ops->addr_range(ptr, &base, &alloc_len);
    if (st != PS_OK)
        return PS_ERR_UNSUPPORTED; /* memory without handles (a pool, VMM): staged instead */
    desc_p->magic = PS__KV_IPC_MAGIC;
    desc_p->kind = (uint32_t)kind;
    desc_p->device = ps_slice_device(vals);
    desc_p->offset = (uint64_t)((char *)ptr - (char *)base);
    desc_p->len = vals->len;
    return PS_OK;
}

int ps__kv_ipc_parse(const void *body, size_t len, ps__kv_ipc_desc_t *desc_p)
{
    if (body == NULL || len != sizeof(*desc_p))
        return 0;
    memcpy(desc_p, body, sizeof(*desc_p));
    return desc_p->magic == PS__KV_IPC_MAGIC;
}

typedef struct {
    int sender;     /* 0: a free slot */
    ps_mem_kind_t kind;
    int device;
    ps_mem_ipc_handle_t handle;
    void *base;     /* where the allocation is open in this process */
    size_t len;     /* its length */
    uint64_t used;  /* last use, for eviction */
    int pins;       /* fetches copying from it now (outside the lock) */
} ipc_entry_t;

/* Entries are fixed slots; one that a fetch copies from is pinned, and
 * eviction passes it over. */
struct ps__kv_ipc_cache {
    pthread_mutex_t lock;
    ipc_entry_t entries[PS__KV_IPC_CACHE];
    uint64_t clock;
};

ps_status_t ps__kv_ipc_cache_create(ps__kv_ipc_cache_t **cache_p)
{
    ps__kv_ipc_cache_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return PS_ERR_NO_MEMORY;
    pthread_mutex_init(&c->lock, NULL);
    *cache_p = c;
    return PS_OK;
}

static void entry_close(ipc_entry_t *e)
{
    ps_status_t st = ps_mem_ops(e->kind)->ipc_close(e->base);
    if (st != PS_OK)
        ps_warn(PS_LOG_APP, "kv ipc: closing node %d's allocation failed: %s", e->sender,
                ps_status_str(st));
    memset(e, 0, sizeof(*e));
}

void ps__kv_ipc_cache_destroy(ps__kv_ipc_cache_t *c)
{
    if (c == NULL)
        return;
    /* No fetch runs now (the server's customer is gone): nothing pinned. */
    for (int i = 0; i < PS__KV_IPC_CACHE; i++) {
        if (c->entries[i].sender != 0)
            entry_close(&c->entries[i]);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Under the lock: the entry of (sender, handle), opening it when new. */
static ps_status_t lookup(ps__kv_ipc_cache_t *c, int sender, const ps__kv_ipc_desc_t *d,
                          ipc_entry_t **entry_p)
{
    ipc_entry_t *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < PS__KV_IPC_CACHE; i++) {
        ipc_entry_t *e = &c->entries[i];
        if (e->sender == 0) {
            if (free_slot == NULL)
                free_slot = e;
            continue;
        }
        if (e->sender == sender && e->kind == (ps_mem_kind_t)d->kind &&
            e->device == d->device && memcmp(&e->handle, &d->handle, sizeof(d->handle)) == 0) {
            e->used = ++c->clock;
            *entry_p = e;
            return PS_OK;
        }
        if (e->pins == 0 && (oldest == NULL || e->used < oldest->used))
            oldest = e;
    }
    ipc_entry_t *e = free_slot;
    if (e == NULL) {
        /* The least recently used that no fetch copies from. */
        if (oldest == NULL)
            return PS_ERR_NO_RESOURCE;
        entry_close(oldest);
        e = oldest;
    }
    const ps_mem_ops_t *ops = ps_mem_ops((ps_mem_kind_t)d->kind);
    void *base, *range_base;
    size_t len;
    ps_status_t st = ops->ipc_open_handle(&d->handle, d->device, &base);
    if (st != PS_OK)
        return st;
    if ((st = ops->addr_range(base, &range_base, &len)) != PS_OK) {
        (void)ops->ipc_close(base);
        return st;
    }
    *e = (ipc_entry_t){.sender = sender, .kind = (ps_mem_kind_t)d->kind, .device = d->device,
                       .handle = d->handle, .base = base, .len = len, .used = ++c->clock};
    *entry_p = e;
    return PS_OK;
}

ps_status_t ps__kv_ipc_fetch(ps__kv_ipc_cache_t *c, int sender, const ps__kv_ipc_desc_t *d,
                             ps_slice_t *vals_p)
{
    if (d->kind == PS_MEM_HOST || d->kind >= PS_MEM_KIND_COUNT ||
        !ps_mem_kind_linked((ps_mem_kind_t)d->kind) || sender == 0) {
        ps_warn_ratelimited(PS_LOG_APP, "kv ipc: node %d sent a descriptor of memory kind %u, "
                            "which this server cannot open", sender, d->kind);
        return PS_ERR_UNSUPPORTED;
    }
    ps_slice_t host = PS_SLICE_EMPTY_INIT;
    pthread_mutex_lock(&c->lock);
    ipc_entry_t *e;
    ps_status_t st = lookup(c, sender, d, &e);
    if (st != PS_OK) {
        pthread_mutex_unlock(&c->lock);
        if (st == PS_ERR_NO_RESOURCE)
            ps_warn_ratelimited(PS_LOG_APP, "kv ipc: node %d's allocation cannot open: all %d "
                                "cached ones are being copied from", sender, PS__KV_IPC_CACHE);
        else
            ps_warn_ratelimited(PS_LOG_APP, "kv ipc: node %d's handle does not open here (%s); "
                                "a worker in another container or namespace needs "
                                "PS_DEVICE_IPC=0", sender, ps_status_str(st));
        return st;
    }
    /* The length is checked against the allocation before a host buffer
     * of that length is made. */
    if (d->offset > e->len || d->len > e->len - d->offset) {
        size_t alloc_len = e->len;
        pthread_mutex_unlock(&c->lock);
        ps_warn_ratelimited(PS_LOG_APP, "kv ipc: node %d named %llu bytes at offset %llu of an "
                            "allocation of %zu", sender, (unsigned long long)d->len,
                            (unsigned long long)d->offset, alloc_len);
        return PS_ERR_INVALID_ARG;
    }
    /* Pinned, the allocation stays open (eviction passes it over) while
     * the pool allocates and the copy runs without the lock. */
    e->pins++;
    ps_mem_kind_t kind = e->kind;
    const char *src = (const char *)e->base + d->offset;
    pthread_mutex_unlock(&c->lock);
    if ((st = ps_stage_pool_get(kind, d->len, &host)) == PS_OK)
        st = ps_mem_ops(kind)->copy_to_host(ps_slice_ptr(&host), src, d->len);
    pthread_mutex_lock(&c->lock);
    e->pins--;
    pthread_mutex_unlock(&c->lock);
    if (st != PS_OK) {
        ps_slice_unref(&host);
        return st;
    }
    *vals_p = host;
    return PS_OK;
}

int ps__kv_ipc_open_count(ps__kv_ipc_cache_t *c)
{
    int n = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < PS__KV_IPC_CACHE; i++)
        n += c->entries[i].sender != 0;
    pthread_mutex_unlock(&c->lock);
    return n;
}

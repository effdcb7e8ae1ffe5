/* KV pushes and pulls as IPC handles between processes of one host
 * (kv_ipc.h). */
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

ps_status_t ps__kv_ipc_describe_pull(const ps_slice_t *dest, ps__kv_ipc_desc_t *desc_p)
{
    ps_status_t st = ps__kv_ipc_describe(dest, desc_p);
    if (st == PS_OK)
        desc_p->magic = PS__KV_IPC_PULL_MAGIC;
    return st;
}

int ps__kv_ipc_parse(const void *body, size_t len, ps__kv_ipc_desc_t *desc_p)
{
    if (body == NULL || len != sizeof(*desc_p))
        return 0;
    memcpy(desc_p, body, sizeof(*desc_p));
    return desc_p->magic == PS__KV_IPC_MAGIC;
}

int ps__kv_ipc_parse_request(const void *body, size_t len, ps__kv_ipc_desc_t *push_p,
                             int *has_push_p, ps__kv_ipc_desc_t *pull_p, int *has_pull_p)
{
    const size_t one = sizeof(ps__kv_ipc_desc_t);
    *has_push_p = *has_pull_p = 0;
    if (body == NULL || (len != one && len != 2 * one))
        return 0;
    ps__kv_ipc_desc_t first;
    memcpy(&first, body, one);
    if (len == one) {
        if (first.magic == PS__KV_IPC_MAGIC) {
            *push_p = first;
            *has_push_p = 1;
        } else if (first.magic == PS__KV_IPC_PULL_MAGIC) {
            *pull_p = first;
            *has_pull_p = 1;
        }
        return *has_push_p || *has_pull_p;
    }
    ps__kv_ipc_desc_t second;
    memcpy(&second, (const char *)body + one, one);
    if (first.magic != PS__KV_IPC_MAGIC || second.magic != PS__KV_IPC_PULL_MAGIC)
        return 0;
    *push_p = first;
    *pull_p = second;
    *has_push_p = *has_pull_p = 1;
    return 1;
}

int ps__kv_ipc_written_parse(const void *body, size_t len, uint64_t *len_p)
{
    ps__kv_ipc_written_t w;
    if (body == NULL || len != sizeof(w))
        return 0;
    memcpy(&w, body, sizeof(w));
    if (w.magic != PS__KV_IPC_WRITTEN_MAGIC || w.reserved != 0)
        return 0;
    *len_p = w.len;
    return 1;
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
    int forgotten;  /* its sender is gone: closed once unpinned, never matched */
} ipc_entry_t;

/* A stream the server's writes into one device run on. */
#define IPC_STREAMS 8
typedef struct {
    ps_mem_kind_t kind; /* PS_MEM_HOST: a free slot */
    int device;
    void *stream;
} ipc_stream_t;

/* A copy that did not finish by its deadline: our side of it and the
 * peer's allocation are kept until its event says it is done. */
typedef struct ipc_late {
    struct ipc_late *next;
    ps_mem_event_h event;
    ps_slice_t src; /* our side of the copy */
    ipc_entry_t *entry;
} ipc_late_t;

/* Entries are fixed slots; one that a fetch or a put copies with is
 * pinned, and eviction passes it over. */
struct ps__kv_ipc_cache {
    pthread_mutex_t lock;
    ipc_entry_t entries[PS__KV_IPC_CACHE];
    uint64_t clock;
    ipc_stream_t streams[IPC_STREAMS];
    ipc_late_t *late;
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

/* Under the lock: forgets the late copies that are done (all of them
 * with wait_ms >= 0, waiting up to that long for each); 1 when none is
 * left. */
static int late_prune(ps__kv_ipc_cache_t *c, int wait_ms)
{
    ipc_late_t **pp = &c->late;
    while (*pp != NULL) {
        ipc_late_t *l = *pp;
        ps_status_t st = wait_ms >= 0 ? ps_mem_event_wait(l->event, wait_ms)
                                      : ps_mem_event_query(l->event);
        if (st == PS_INPROGRESS || st == PS_ERR_TIMED_OUT) {
            pp = &l->next;
            continue;
        }
        *pp = l->next;
        (void)ps_mem_event_destroy(l->event);
        ps_slice_unref(&l->src);
        if (--l->entry->pins == 0 && l->entry->forgotten)
            entry_close(l->entry);
        free(l);
    }
    return c->late == NULL;
}

void ps__kv_ipc_cache_destroy(ps__kv_ipc_cache_t *c)
{
    if (c == NULL)
        return;
    /* No fetch or put runs now (the server's customer is gone); a copy
     * that is still not done keeps its allocation open (leaked, rather
     * than unmapped under the device). */
    if (!late_prune(c, 1000))
        ps_warn(PS_LOG_APP, "kv ipc: copies with workers' memory still not done at destroy; "
                "their allocations stay mapped");
    for (int i = 0; i < PS__KV_IPC_CACHE; i++) {
        if (c->entries[i].sender != 0 && c->entries[i].pins == 0)
            entry_close(&c->entries[i]);
    }
    for (int i = 0; i < IPC_STREAMS; i++) {
        if (c->streams[i].kind != PS_MEM_HOST)
            (void)ps_mem_ops(c->streams[i].kind)->stream_destroy(c->streams[i].stream);
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
        if (e->sender == sender && !e->forgotten && e->kind == (ps_mem_kind_t)d->kind &&
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

/* The entry a descriptor's allocation is open in, pinned (eviction passes
 * it over) once the descriptor is checked against it: *ptr_p the first of
 * its desc->len bytes in this process. Unpin with unpin(). */
static ps_status_t pin_range(ps__kv_ipc_cache_t *c, int sender, const ps__kv_ipc_desc_t *d,
                             uint32_t magic, ipc_entry_t **entry_p, char **ptr_p)
{
    if (d->magic != magic || d->kind == PS_MEM_HOST || d->kind >= PS_MEM_KIND_COUNT ||
        !ps_mem_kind_linked((ps_mem_kind_t)d->kind) || sender == 0) {
        ps_warn_ratelimited(PS_LOG_APP, "kv ipc: node %d sent a descriptor of memory kind %u, "
                            "which this server cannot open", sender, d->kind);
        return d->magic != magic ? PS_ERR_INVALID_ARG : PS_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&c->lock);
    (void)late_prune(c, -1);
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
     * of that length is made or anything is written. */
    if (d->offset > e->len || d->len > e->len - d->offset) {
        size_t alloc_len = e->len;
        pthread_mutex_unlock(&c->lock);
        ps_warn_ratelimited(PS_LOG_APP, "kv ipc: node %d named %llu bytes at offset %llu of an "
                            "allocation of %zu", sender, (unsigned long long)d->len,
                            (unsigned long long)d->offset, alloc_len);
        return PS_ERR_INVALID_ARG;
    }
    /* Pinned, the allocation stays open while the copy runs without the
     * lock. */
    e->pins++;
    *ptr_p = (char *)e->base + d->offset;
    *entry_p = e;
    pthread_mutex_unlock(&c->lock);
    return PS_OK;
}

static void unpin(ps__kv_ipc_cache_t *c, ipc_entry_t *e)
{
    pthread_mutex_lock(&c->lock);
    if (--e->pins == 0 && e->forgotten)
        entry_close(e);
    pthread_mutex_unlock(&c->lock);
}

void ps__kv_ipc_forget(ps__kv_ipc_cache_t *c, int sender)
{
    int closed = 0, later = 0;
    pthread_mutex_lock(&c->lock);
    (void)late_prune(c, -1);
    for (int i = 0; i < PS__KV_IPC_CACHE; i++) {
        ipc_entry_t *e = &c->entries[i];
        if (e->sender != sender || sender == 0 || e->forgotten)
            continue;
        if (e->pins == 0) {
            entry_close(e);
            closed++;
        } else {
            e->forgotten = 1;
            later++;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (closed + later > 0)
        ps_debug(PS_LOG_APP, "kv ipc: node %d is gone: closed %d of its allocations, %d more "
                 "once their copies are done", sender, closed, later);
}

ps_status_t ps__kv_ipc_fetch(ps__kv_ipc_cache_t *c, int sender, const ps__kv_ipc_desc_t *d,
                             ps_slice_t *vals_p)
{
    ps_slice_t host = PS_SLICE_EMPTY_INIT;
    ipc_entry_t *e;
    char *src;
    ps_status_t st = pin_range(c, sender, d, PS__KV_IPC_MAGIC, &e, &src);
    if (st != PS_OK)
        return st;
    ps_mem_kind_t kind = e->kind;
    if ((st = ps_stage_pool_get(kind, d->len, &host)) == PS_OK)
        st = ps_mem_ops(kind)->copy_to_host(ps_slice_ptr(&host), src, d->len);
    unpin(c, e);
    if (st != PS_OK) {
        ps_slice_unref(&host);
        return st;
    }
    *vals_p = host;
    return PS_OK;
}

/* Under the lock: the cache's stream for (kind, device), made when new;
 * NULL (the device's default stream) when none can be made. */
static void *stream_of(ps__kv_ipc_cache_t *c, ps_mem_kind_t kind, int device)
{
    for (int i = 0; i < IPC_STREAMS; i++) {
        ipc_stream_t *s = &c->streams[i];
        if (s->kind == kind && s->device == device)
            return s->stream;
        if (s->kind == PS_MEM_HOST) {
            void *stream;
            if (ps_mem_ops(kind)->stream_create(device, &stream) != PS_OK)
                return NULL;
            *s = (ipc_stream_t){kind, device, stream};
            return stream;
        }
    }
    return NULL;
}

/* One copy from src to dst, one of them inside pinned entry e's memory
 * and the other ours (`keep`: host memory or memory of e's kind), on the
 * cache's stream for e's device, waited for up to timeout_ms (none for
 * len 0). Unpins e unless the copy may still land (*may_land_p set): then
 * e stays pinned and `keep` referenced until a later prune sees the copy
 * done. */
static ps_status_t copy_pinned(ps__kv_ipc_cache_t *c, int sender, ipc_entry_t *e, void *dst,
                               const void *src, size_t len, const ps_slice_t *keep,
                               int timeout_ms, int *may_land_p)
{
    if (len == 0) {
        unpin(c, e);
        return PS_OK;
    }
    const ps_mem_ops_t *ops = ps_mem_ops(e->kind);
    pthread_mutex_lock(&c->lock);
    void *stream = stream_of(c, e->kind, e->device);
    pthread_mutex_unlock(&c->lock);
    ps_mem_event_h ev = NULL;
    ps_status_t st = ops->event_create(e->device, &ev);
    if (st != PS_OK) {
        unpin(c, e);
        return st;
    }
    if ((st = ops->copy_async(dst, src, len, stream)) != PS_OK) {
        (void)ps_mem_event_destroy(ev);
        unpin(c, e);
        return st;
    }
    *may_land_p = 1; /* until the event says it is done */
    if ((st = ops->event_record(ev, stream)) != PS_OK) {
        /* Queued, with nothing to tell when it is done: the slice and the
         * allocation are kept for good. */
        ps_error(PS_LOG_APP, "kv ipc: no event after a copy with node %d's memory (%s); the "
                 "buffer and the allocation are leaked", sender, ps_status_str(st));
        ps_slice_t leak = ps_slice_ref(keep);
        (void)leak;
        (void)ps_mem_event_destroy(ev);
        return st;
    }
    st = ps_mem_event_wait(ev, timeout_ms);
    if (st == PS_ERR_TIMED_OUT) {
        /* Still queued or running: the slice and the allocation stay until
         * it is done (pruned by a later fetch or put). */
        ipc_late_t *l = malloc(sizeof(*l));
        if (l == NULL) {
            ps_error(PS_LOG_APP, "kv ipc: out of memory keeping a late copy with node %d's "
                     "memory; the buffer and the allocation are leaked", sender);
            ps_slice_t leak = ps_slice_ref(keep);
            (void)leak;
            return st;
        }
        *l = (ipc_late_t){.event = ev, .src = ps_slice_ref(keep), .entry = e};
        pthread_mutex_lock(&c->lock);
        l->next = c->late;
        c->late = l;
        pthread_mutex_unlock(&c->lock);
        ps_warn_ratelimited(PS_LOG_APP, "kv ipc: a copy of %zu bytes with node %d's memory did "
                            "not finish in %d ms", len, sender, timeout_ms);
        return st;
    }
    /* Done, or failed on the device: either way nothing more lands. */
    *may_land_p = 0;
    (void)ps_mem_event_destroy(ev);
    unpin(c, e);
    return st;
}

ps_status_t ps__kv_ipc_fetch_into(ps__kv_ipc_cache_t *c, int sender, const ps__kv_ipc_desc_t *d,
                                  const ps_slice_t *dst, int timeout_ms, int *may_land_p)
{
    *may_land_p = 0;
    if (d->len != dst->len)
        return PS_ERR_INVALID_ARG;
    /* Host memory is passed over: a device-to-host copy into pageable
     * memory runs several times slower than into the pinned pool. */
    if ((uint32_t)ps_slice_mem_ops_kind(dst) != d->kind)
        return PS_ERR_UNSUPPORTED;
    ipc_entry_t *e;
    char *src;
    ps_status_t st = pin_range(c, sender, d, PS__KV_IPC_MAGIC, &e, &src);
    if (st != PS_OK)
        return st;
    return copy_pinned(c, sender, e, ps_slice_ptr(dst), src, d->len, dst, timeout_ms,
                       may_land_p);
}

ps_status_t ps__kv_ipc_put(ps__kv_ipc_cache_t *c, int sender, const ps__kv_ipc_desc_t *d,
                           const ps_slice_t *vals, int timeout_ms, int *may_land_p)
{
    *may_land_p = 0;
    if (d->len != vals->len) {
        ps_debug(PS_LOG_APP, "kv ipc: node %d's pull destination holds %llu bytes, the answer "
                 "has %zu", sender, (unsigned long long)d->len, vals->len);
        return PS_ERR_INVALID_ARG;
    }
    ps_mem_kind_t vkind = ps_slice_mem_ops_kind(vals);
    if (vkind != PS_MEM_HOST && (uint32_t)vkind != d->kind)
        return PS_ERR_UNSUPPORTED; /* device memory of another kind: as bytes */
    ipc_entry_t *e;
    char *dst;
    ps_status_t st = pin_range(c, sender, d, PS__KV_IPC_PULL_MAGIC, &e, &dst);
    if (st != PS_OK)
        return st;
    return copy_pinned(c, sender, e, dst, ps_slice_ptr(vals), vals->len, vals, timeout_ms,
                       may_land_p);
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

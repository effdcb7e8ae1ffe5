/*
 * The registration cache (see mr_cache.h).
 *
 * Ownership of an entry: an entry hung on a buffer's slot belongs to that
 * buffer and is freed by the buffer's release hook; eviction only undoes
 * its registration (the empty entry stays until the buffer goes, and is
 * registered again on the next get). A transient entry (no slot free)
 * lives from get to the last put.
 *
 * The hook may run on any thread, at any time, also after the cache is
 * destroyed: it reaches the cache through an anchor (a small ref-counted
 * object with its own lock) that the cache clears when it goes. Locks are
 * taken anchor first, then cache.
 */
#include "ps/rdma/common/mr_cache.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ps/base/config.h"
#include "ps/base/thread.h"
#include "ps/rdma/common/rdma_shared.h"

struct ps__rdma_mr_anchor {
    pthread_mutex_t lock;
    uint32_t refs; /* atomic: the cache's + one per hung entry */
    ps_rdma_mr_cache_t *cache; /* NULL once destroyed; under lock */
};
typedef struct ps__rdma_mr_anchor anchor_t;

struct ps_rdma_mr_cache {
    ps_mutex_t lock;
    anchor_t *anchor;
    ps_rdma_reg_ops_t ops;
    void *ctx;
    char name[32];
    ps_log_component_t log;
    int slot;
    uint64_t max_bytes;
    uint64_t bytes;
    uint64_t entries;
    uint64_t in_use;
    ps_rdma_mr_t *lru_head, *lru_tail; /* idle, registered; head = most recent */
    ps_rdma_mr_t *all;                 /* every hung entry of this cache */
    uint64_t hits, misses, evictions, failures;
    uint64_t log_last_ns;
    uint32_t log_suppressed;
};

/* Registration slots of ps_buf_t taken by live caches (a bit each). */
static uint32_t g_slots_used;

static int slot_acquire(void)
{
    uint32_t cur = __atomic_load_n(&g_slots_used, __ATOMIC_RELAXED);
    for (;;) {
        int slot = -1;
        for (int i = 0; i < PS_BUF_REG_SLOTS; i++) {
            if (!(cur & (1u << i))) {
                slot = i;
                break;
            }
        }
        if (slot < 0)
            return -1;
        if (__atomic_compare_exchange_n(&g_slots_used, &cur, cur | (1u << slot), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return slot;
    }
}

static void slot_release(int slot)
{
    if (slot >= 0)
        __atomic_fetch_and(&g_slots_used, ~(1u << slot), __ATOMIC_ACQ_REL);
}

static void anchor_unref(anchor_t *a)
{
    if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_mutex_destroy(&a->lock);
        free(a);
    }
}

uint64_t ps_rdma_mr_cache_default_limit(int pins_memory)
{
    uint64_t v = ps_config_size_or(PS_RDMA_CFG(PS_MR_CACHE_BYTES), 0);
    if (v != 0 || !pins_memory)
        return v;
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return (uint64_t)rl.rlim_cur / 2;
}

/* "8 MiB", "unlimited" */
static const char *fmt_bytes(uint64_t v, char *buf, size_t cap)
{
    if (v == UINT64_MAX)
        snprintf(buf, cap, "unlimited");
    else if (v >= (1ull << 30) && v % (1ull << 30) == 0)
        snprintf(buf, cap, "%" PRIu64 " GiB", v >> 30);
    else if (v >= (1ull << 20) && v % (1ull << 20) == 0)
        snprintf(buf, cap, "%" PRIu64 " MiB", v >> 20);
    else if (v >= (1ull << 10) && v % (1ull << 10) == 0)
        snprintf(buf, cap, "%" PRIu64 " KiB", v >> 10);
    else
        snprintf(buf, cap, "%" PRIu64 " bytes", v);
    return buf;
}

static const char *memlock_str(char *buf, size_t cap)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        return "unknown";
    return fmt_bytes(rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur, buf, cap);
}

/* ---- lists (cache lock held) ---- */

static void lru_unlink(ps_rdma_mr_cache_t *c, ps_rdma_mr_t *e)
{
    if (!e->in_lru)
        return;
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        c->lru_head = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        c->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
    e->in_lru = 0;
}

static void lru_push(ps_rdma_mr_cache_t *c, ps_rdma_mr_t *e)
{
    if (e->in_lru || e->handle == NULL || e->use != 0 || e->pinned != 0 || e->transient)
        return;
    e->lru_prev = NULL;
    e->lru_next = c->lru_head;
    if (c->lru_head)
        c->lru_head->lru_prev = e;
    else
        c->lru_tail = e;
    c->lru_head = e;
    e->in_lru = 1;
}

static void all_link(ps_rdma_mr_cache_t *c, ps_rdma_mr_t *e)
{
    e->all_prev = NULL;
    e->all_next = c->all;
    if (c->all)
        c->all->all_prev = e;
    c->all = e;
    e->in_all = 1;
}

static void all_unlink(ps_rdma_mr_cache_t *c, ps_rdma_mr_t *e)
{
    if (!e->in_all)
        return;
    if (e->all_prev)
        e->all_prev->all_next = e->all_next;
    else
        c->all = e->all_next;
    if (e->all_next)
        e->all_next->all_prev = e->all_prev;
    e->all_prev = e->all_next = NULL;
    e->in_all = 0;
}

/* Undoes an entry's registration (it stays hung on its buffer). */
static void unregister(ps_rdma_mr_cache_t *c, ps_rdma_mr_t *e)
{
    lru_unlink(c, e);
    if (e->handle == NULL)
        return;
    c->ops.dereg(c->ctx, e->handle);
    e->handle = NULL;
    c->bytes -= e->len;
    c->entries--;
}

static void evict_tail(ps_rdma_mr_cache_t *c)
{
    ps_rdma_mr_t *e = c->lru_tail;
    unregister(c, e);
    c->evictions++;
}

/* ---- the buffer's release hook ---- */

static void entry_release_hook(ps_buf_t *buf, unsigned slot, void *reg)
{
    (void)buf;
    (void)slot;
    ps_rdma_mr_t *e = reg;
    anchor_t *a = e->anchor;
    pthread_mutex_lock(&a->lock);
    ps_rdma_mr_cache_t *c = a->cache;
    if (c != NULL) {
        ps_mutex_lock(&c->lock);
        if (e->use != 0)
            ps_error(c->log, "%s registration cache: a buffer of %zu bytes was freed while a "
                     "transfer still used its registration", c->name, e->len);
        if (e->use != 0 || e->pinned != 0)
            c->in_use--;
        unregister(c, e);
        all_unlink(c, e);
        ps_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&a->lock);
    free(e);
    anchor_unref(a);
}

/* ---- lifecycle ---- */

ps_status_t ps_rdma_mr_cache_create(const ps_rdma_mr_cache_params_t *params,
                                    const ps_rdma_reg_ops_t *ops, void *ctx,
                                    ps_rdma_mr_cache_t **cache_p)
{
    if (params == NULL || ops == NULL || cache_p == NULL || ops->size < sizeof(*ops) ||
        ops->reg == NULL || ops->dereg == NULL)
        return PS_ERR_INVALID_ARG;
    ps_rdma_mr_cache_t *c = calloc(1, sizeof(*c));
    anchor_t *a = calloc(1, sizeof(*a));
    if (c == NULL || a == NULL) {
        free(c);
        free(a);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_mutex_init(&c->lock) != PS_OK) {
        free(c);
        free(a);
        return PS_ERR_NO_MEMORY;
    }
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        ps_mutex_destroy(&c->lock);
        free(c);
        free(a);
        return PS_ERR_NO_MEMORY;
    }
    a->refs = 1;
    a->cache = c;
    c->anchor = a;
    c->ops = *ops;
    c->ctx = ctx;
    snprintf(c->name, sizeof(c->name), "%s", params->name ? params->name : "rdma");
    c->log = params->log;
    c->max_bytes = params->max_bytes;
    c->slot = slot_acquire();
    if (c->slot < 0)
        ps_warn(c->log, "%s registration cache: all %d buffer registration slots are taken by "
                "other caches; registering on every transfer instead", c->name,
                PS_BUF_REG_SLOTS);
    char lim[32];
    ps_debug(c->log, "%s registration cache: limit %s, buffer slot %d", c->name,
             c->max_bytes ? fmt_bytes(c->max_bytes, lim, sizeof(lim)) : "none", c->slot);
    *cache_p = c;
    return PS_OK;
}

void ps_rdma_mr_cache_destroy(ps_rdma_mr_cache_t *c)
{
    if (c == NULL)
        return;
    anchor_t *a = c->anchor;
    pthread_mutex_lock(&a->lock);
    ps_mutex_lock(&c->lock);
    if (c->in_use != 0)
        ps_debug(c->log, "%s registration cache: %" PRIu64 " registrations still in use or "
                 "pinned at close", c->name, c->in_use);
    /* Hung entries stay on their buffers (the hook frees them, seeing the
     * anchor cleared); their registrations go now, while the transport's
     * context is still open. */
    for (ps_rdma_mr_t *e = c->all; e != NULL; e = e->all_next)
        unregister(c, e);
    a->cache = NULL;
    ps_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&a->lock);
    slot_release(c->slot);
    ps_mutex_destroy(&c->lock);
    free(c);
    anchor_unref(a);
}

/* ---- get / put ---- */

/* Room for `need` more bytes under the limit (lock held). */
static ps_status_t make_room(ps_rdma_mr_cache_t *c, size_t need)
{
    if (c->max_bytes == 0)
        return PS_OK;
    char b1[32], b2[32], b3[32];
    if (need > c->max_bytes) {
        ps_warn_ratelimited(c->log, "%s registration cache: a buffer of %s is larger than the "
                            "whole cache (%s, PS_MR_CACHE_BYTES); raise PS_MR_CACHE_BYTES",
                            c->name, fmt_bytes(need, b1, sizeof(b1)),
                            fmt_bytes(c->max_bytes, b2, sizeof(b2)));
        return PS_ERR_NO_RESOURCE;
    }
    while (c->bytes + need > c->max_bytes && c->lru_tail != NULL)
        evict_tail(c);
    if (c->bytes + need > c->max_bytes) {
        ps_warn_ratelimited(c->log, "%s registration cache full: %s registered by transfers "
                            "in flight and pinned buffers, limit %s (PS_MR_CACHE_BYTES); "
                            "cannot register %s more", c->name,
                            fmt_bytes(c->bytes, b1, sizeof(b1)),
                            fmt_bytes(c->max_bytes, b2, sizeof(b2)),
                            fmt_bytes(need, b3, sizeof(b3)));
        return PS_ERR_NO_RESOURCE;
    }
    return PS_OK;
}

/* Registers e (lock held). */
static ps_status_t do_register(ps_rdma_mr_cache_t *c, ps_rdma_mr_t *e)
{
    ps_status_t st = make_room(c, e->len);
    if (st != PS_OK)
        return st;
    ps_buf_mem_t kind = e->buf ? (ps_buf_mem_t)e->buf->mem_kind : PS_BUF_MEM_HOST;
    int device = e->buf ? e->buf->device : 0;
    void *h = NULL;
    st = c->ops.reg(c->ctx, e->addr, e->len, kind, device, &h);
    if (st == PS_ERR_NO_MEMORY || st == PS_ERR_REGISTRATION) {
        /* Lockable memory may be what ran out: give back all we can. */
        int evicted = 0;
        while (c->lru_tail != NULL) {
            evict_tail(c);
            evicted++;
        }
        if (evicted > 0)
            st = c->ops.reg(c->ctx, e->addr, e->len, kind, device, &h);
    }
    if (st != PS_OK) {
        char b1[32], b2[32], b3[32], b4[32];
        if (ps__log_ratelimit(&c->log_last_ns, &c->log_suppressed, PS_NSEC_PER_SEC))
            ps_error(c->log, "%s: cannot register %s at %p (%s): %s now registered by this "
                     "cache (limit %s); registered memory is capped by the memlock limit "
                     "(`ulimit -l`: %s): raise it, or lower PS_MR_CACHE_BYTES",
                     c->name, fmt_bytes(e->len, b1, sizeof(b1)), e->addr, ps_status_str(st),
                     fmt_bytes(c->bytes, b2, sizeof(b2)),
                     c->max_bytes ? fmt_bytes(c->max_bytes, b3, sizeof(b3)) : "none",
                     memlock_str(b4, sizeof(b4)));
        return st;
    }
    e->handle = h;
    c->bytes += e->len;
    c->entries++;
    return PS_OK;
}

/* A transient registration: made for this use only. */
static ps_status_t get_transient(ps_rdma_mr_cache_t *c, ps_buf_t *buf, ps_rdma_mr_t **mr_p)
{
    ps_rdma_mr_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return PS_ERR_NO_MEMORY;
    e->addr = buf->data;
    e->len = buf->length;
    e->buf = buf;
    e->transient = 1;
    ps_mutex_lock(&c->lock);
    ps_status_t st = do_register(c, e);
    if (st == PS_OK) {
        e->use = 1;
        c->in_use++;
        c->misses++;
    } else {
        c->failures++;
    }
    ps_mutex_unlock(&c->lock);
    if (st != PS_OK) {
        free(e);
        return st;
    }
    *mr_p = e;
    return PS_OK;
}

/* An entry hung by a cache that is gone: take it off the buffer (which
 * the caller holds, so its hook cannot run meanwhile). 1 if it was. */
static int reclaim_dead(ps_buf_t *buf, unsigned slot, ps_rdma_mr_t *e)
{
    anchor_t *a = e->anchor;
    pthread_mutex_lock(&a->lock);
    int dead = a->cache == NULL;
    pthread_mutex_unlock(&a->lock);
    if (!dead || ps_buf_reg_detach(buf, slot, NULL) != PS_OK)
        return 0;
    free(e);
    anchor_unref(a);
    return 1;
}

ps_status_t ps_rdma_mr_cache_get(ps_rdma_mr_cache_t *c, const ps_slice_t *slice,
                                 ps_rdma_mr_t **mr_p)
{
    if (c == NULL || slice == NULL || slice->buf == NULL || slice->buf->length == 0 ||
        mr_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps_buf_t *buf = slice->buf;
    if (c->slot < 0)
        return get_transient(c, buf, mr_p);
    unsigned slot = (unsigned)c->slot;

    ps_rdma_mr_t *e = ps_buf_reg_get(buf, slot);
    if (e != NULL && e->anchor != c->anchor) {
        if (!reclaim_dead(buf, slot, e))
            return get_transient(c, buf, mr_p);
        e = NULL;
    }
    ps_mutex_lock(&c->lock);
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL) {
            c->failures++;
            ps_mutex_unlock(&c->lock);
            return PS_ERR_NO_MEMORY;
        }
        e->addr = buf->data;
        e->len = buf->length;
        e->buf = buf;
        e->anchor = c->anchor;
        __atomic_add_fetch(&c->anchor->refs, 1, __ATOMIC_ACQ_REL);
        if (ps_buf_reg_attach(buf, slot, e, entry_release_hook) != PS_OK) {
            /* Another thread hung one first. */
            __atomic_sub_fetch(&c->anchor->refs, 1, __ATOMIC_ACQ_REL);
            free(e);
            e = ps_buf_reg_get(buf, slot);
            if (e == NULL || e->anchor != c->anchor) {
                ps_mutex_unlock(&c->lock);
                return get_transient(c, buf, mr_p);
            }
        } else {
            all_link(c, e);
        }
    }
    if (e->handle == NULL) {
        ps_status_t st = do_register(c, e);
        if (st != PS_OK) {
            c->failures++;
            ps_mutex_unlock(&c->lock);
            return st;
        }
        c->misses++;
    } else {
        c->hits++;
    }
    lru_unlink(c, e);
    if (e->use++ == 0 && e->pinned == 0)
        c->in_use++;
    ps_mutex_unlock(&c->lock);
    *mr_p = e;
    return PS_OK;
}

void ps_rdma_mr_cache_put(ps_rdma_mr_cache_t *c, ps_rdma_mr_t *e)
{
    if (c == NULL || e == NULL)
        return;
    ps_mutex_lock(&c->lock);
    if (e->use == 0) {
        ps_mutex_unlock(&c->lock);
        ps_error(c->log, "%s registration cache: put without a get", c->name);
        return;
    }
    e->use--;
    if (e->use == 0 && e->pinned == 0)
        c->in_use--;
    if (e->transient) {
        unregister(c, e);
        ps_mutex_unlock(&c->lock);
        free(e);
        return;
    }
    lru_push(c, e);
    ps_mutex_unlock(&c->lock);
}

ps_status_t ps_rdma_mr_cache_pin(ps_rdma_mr_cache_t *c, ps_buf_t *buf)
{
    if (c == NULL || buf == NULL || buf->length == 0)
        return PS_ERR_INVALID_ARG;
    if (c->slot < 0) {
        ps_warn(c->log, "%s registration cache: no buffer slot, so buffers cannot be pinned",
                c->name);
        return PS_ERR_UNSUPPORTED;
    }
    ps_slice_t whole = {buf, 0, buf->length};
    ps_rdma_mr_t *e;
    ps_status_t st = ps_rdma_mr_cache_get(c, &whole, &e);
    if (st != PS_OK)
        return st;
    if (e->transient) {
        ps_rdma_mr_cache_put(c, e);
        return PS_ERR_UNSUPPORTED;
    }
    ps_mutex_lock(&c->lock);
    e->pinned++;
    ps_mutex_unlock(&c->lock);
    ps_rdma_mr_cache_put(c, e);
    return PS_OK;
}

ps_status_t ps_rdma_mr_cache_unpin(ps_rdma_mr_cache_t *c, ps_buf_t *buf)
{
    if (c == NULL || buf == NULL)
        return PS_ERR_INVALID_ARG;
    if (c->slot < 0)
        return PS_ERR_NOT_FOUND;
    ps_rdma_mr_t *e = ps_buf_reg_get(buf, (unsigned)c->slot);
    if (e == NULL || e->anchor != c->anchor)
        return PS_ERR_NOT_FOUND;
    ps_mutex_lock(&c->lock);
    if (e->pinned == 0) {
        ps_mutex_unlock(&c->lock);
        return PS_ERR_NOT_FOUND;
    }
    e->pinned--;
    if (e->pinned == 0 && e->use == 0) {
        c->in_use--;
        lru_push(c, e);
    }
    ps_mutex_unlock(&c->lock);
    return PS_OK;
}

void ps_rdma_mr_cache_stats(ps_rdma_mr_cache_t *c, ps_rdma_mr_cache_stats_t *s)
{
    if (c == NULL || s == NULL)
        return;
    ps_mutex_lock(&c->lock);
    s->bytes = c->bytes;
    s->max_bytes = c->max_bytes;
    s->entries = c->entries;
    s->in_use = c->in_use;
    s->hits = c->hits;
    s->misses = c->misses;
    s->evictions = c->evictions;
    s->failures = c->failures;
    s->slot = c->slot;
    ps_mutex_unlock(&c->lock);
}

/* The rendezvous state of the ibverbs van (see verbs_rdv.h). */
#include "ps/rdma/verbs/verbs_rdv.h"

#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/rdma/common/slot_pool.h"

/* Extra room a meta region gets so that a slightly longer meta (a bigger
 * timestamp, another key) still fits a cached grant. */
#define META_SLACK 512u
#define META_ALIGN 4096u
#define CUR_BUCKETS 1024u

void ps__vb_grant_from_ctrl(const ps__vb_ctrl_t *c, ps__vb_grant_t *g_p)
{
    g_p->slot = c->slot;
    g_p->meta_cap = c->meta_len;
    g_p->data_cap = c->data_len;
    g_p->meta_addr = c->meta_addr;
    g_p->data_addr = c->data_addr;
    g_p->meta_rkey = c->meta_rkey;
    g_p->data_rkey = c->data_rkey;
    int steer = (c->flags & PS__VB_RDV_STEER) != 0;
    g_p->steer_seg = steer ? c->steer_seg : 0;
    g_p->app_id = steer ? c->app_id : 0;
    g_p->customer_id = steer ? c->customer_id : 0;
    g_p->steer_addr = steer ? c->steer_addr : 0;
    g_p->steer_len = steer ? c->steer_len : 0;
    g_p->steer_rkey = steer ? c->steer_rkey : 0;
}

ps__vb_fit_t ps__vb_grant_fit(const ps__vb_grant_t *g, const ps__vb_need_t *n)
{
    if (g->meta_cap < n->meta_len)
        return PS__VB_FIT_NO;
    if (g->steer_len > 0 && n->seg_len != NULL && g->steer_seg < n->num_data &&
        g->app_id == n->app_id && g->customer_id == n->customer_id) {
        uint64_t l = n->seg_len[g->steer_seg];
        if (l > 0 && l <= g->steer_len && l <= n->data_len && g->data_cap >= n->data_len - l)
            return PS__VB_FIT_STEER;
    }
    return g->data_cap >= n->data_len ? PS__VB_FIT_DATA : PS__VB_FIT_NO;
}

static size_t hash3(uint64_t a, uint64_t b, uint8_t c, size_t buckets)
{
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^ c;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (size_t)(x % buckets);
}

/* ---- sender side ---- */

struct ps__vb_gentry {
    uint64_t key;
    uint8_t dir;
    ps__vb_grant_t grant;
    ps__vb_gentry_t *hnext;
    ps__vb_gentry_t *older, *newer;
};

void ps__vb_gcache_init(ps__vb_gcache_t *c, size_t max_entries)
{
    memset(c, 0, sizeof(*c));
    c->max_entries = max_entries == 0 ? 1 : max_entries;
}

static ps__vb_gentry_t **gc_find(ps__vb_gcache_t *c, uint64_t key, uint8_t dir)
{
    ps__vb_gentry_t **pp = &c->buckets[hash3(key, 0, dir, PS__VB_GCACHE_BUCKETS)];
    while (*pp != NULL && ((*pp)->key != key || (*pp)->dir != dir))
        pp = &(*pp)->hnext;
    return pp;
}

/* Unlinks *pp (found by gc_find) and returns it. */
static ps__vb_gentry_t *gc_unlink(ps__vb_gcache_t *c, ps__vb_gentry_t **pp)
{
    ps__vb_gentry_t *e = *pp;
    *pp = e->hnext;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    c->entries--;
    return e;
}

void ps__vb_gcache_destroy(ps__vb_gcache_t *c)
{
    while (c->oldest != NULL) {
        ps__vb_gentry_t *e = c->oldest;
        ps__vb_gentry_t *taken = gc_unlink(c, gc_find(c, e->key, e->dir));
        free(taken);
    }
}

ps__vb_gc_result_t ps__vb_gcache_take(ps__vb_gcache_t *c, uint64_t key, uint8_t dir,
                                      const ps__vb_need_t *need, ps__vb_grant_t *grant_p)
{
    ps__vb_gentry_t **pp = gc_find(c, key, dir);
    if (*pp == NULL)
        return PS__VB_GC_MISS;
    ps__vb_gentry_t *e = gc_unlink(c, pp);
    *grant_p = e->grant;
    int fits = ps__vb_grant_fit(&e->grant, need) != PS__VB_FIT_NO;
    free(e);
    return fits ? PS__VB_GC_HIT : PS__VB_GC_TOO_SMALL;
}

int ps__vb_gcache_put(ps__vb_gcache_t *c, uint64_t key, uint8_t dir, const ps__vb_grant_t *grant,
                      ps__vb_grant_t *evicted_p)
{
    int evicted = 0;
    ps__vb_gentry_t **pp = gc_find(c, key, dir);
    ps__vb_gentry_t *e = NULL;
    if (*pp != NULL) {
        e = gc_unlink(c, pp);
        *evicted_p = e->grant;
        evicted = 1;
    } else if (c->entries >= c->max_entries && c->oldest != NULL) {
        ps__vb_gentry_t *old = c->oldest;
        e = gc_unlink(c, gc_find(c, old->key, old->dir));
        *evicted_p = e->grant;
        evicted = 1;
    }
    if (e == NULL) {
        e = malloc(sizeof(*e));
        if (e == NULL) {
            /* Without memory to cache it, give it straight back. */
            *evicted_p = *grant;
            return 1;
        }
    }
    memset(e, 0, sizeof(*e));
    e->key = key;
    e->dir = dir;
    e->grant = *grant;
    pp = gc_find(c, key, dir);
    e->hnext = *pp;
    *pp = e;
    e->older = c->newest;
    if (c->newest != NULL)
        c->newest->newer = e;
    else
        c->oldest = e;
    c->newest = e;
    c->entries++;
    return evicted;
}

size_t ps__vb_gcache_size(const ps__vb_gcache_t *c)
{
    return c->entries;
}

/* ---- receiver side ---- */

enum {
    REC_GRANTED = 1, /* at the sender (or on its way there) */
    REC_FILLED = 2,  /* a message landed; held by it */
};

struct ps__vb_grant_rec {
    ps__vb_grants_t *g;
    uint32_t slot;
    uint64_t owner;
    uint64_t key;
    uint8_t dir;
    uint8_t state;
    uint8_t current;    /* the re-grantable buffer of (owner, key, dir) */
    uint8_t pending;    /* on the re-grant queue */
    uint8_t owner_gone;
    uint8_t regranted;  /* has been re-granted at least once */
    uint8_t data_out;   /* its data slice is held by the application */
    ps_slice_t meta;
    ps_slice_t data;
    uint32_t meta_rkey;
    uint32_t data_rkey;
    /* The steered region (steered: 1), and what recv_buffer was asked. */
    uint8_t steered;
    uint8_t is_tensor;
    ps__vb_steer_t steer;
    int32_t app_id, customer_id;
    ps__vb_grant_rec_t *cnext;              /* current-table chain */
    ps__vb_grant_rec_t *pnext;              /* re-grant queue */
    ps__vb_grant_rec_t *prev_all, *next_all;
};

struct ps__vb_grants {
    ps_mutex_t lock;
    ps__vb_grants_params_t params;
    ps__vb_grants_ops_t ops;
    ps_rdma_slot_pool_t *slots;
    int closed;
    uint64_t live;
    uint64_t cached_bytes;
    ps__vb_grant_rec_t *cur[CUR_BUCKETS];
    ps__vb_grant_rec_t *all;
    ps__vb_grant_rec_t *pending_head, *pending_tail;
    ps__vb_grants_stats_t stats;
};

ps_status_t ps__vb_grants_create(const ps__vb_grants_params_t *params,
                                 const ps__vb_grants_ops_t *ops, ps__vb_grants_t **g_p)
{
    if (params == NULL || ops == NULL || ops->alloc == NULL || g_p == NULL ||
        params->max_slots == 0)
        return PS_ERR_INVALID_ARG;
    ps__vb_grants_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return PS_ERR_NO_MEMORY;
    g->params = *params;
    g->ops = *ops;
    uint32_t slots = params->max_slots > PS_RDMA_SLOT_POOL_MAX ? PS_RDMA_SLOT_POOL_MAX
                                                               : params->max_slots;
    ps_status_t st = ps_rdma_slot_pool_create("ibverbs grant", slots, &g->slots);
    if (st != PS_OK) {
        free(g);
        return st;
    }
    if ((st = ps_mutex_init(&g->lock)) != PS_OK) {
        ps_rdma_slot_pool_destroy(g->slots);
        free(g);
        return st;
    }
    *g_p = g;
    return PS_OK;
}

static void grants_free_obj(ps__vb_grants_t *g)
{
    ps_rdma_slot_pool_destroy(g->slots);
    ps_mutex_destroy(&g->lock);
    free(g);
}

static uint64_t rec_bytes(const ps__vb_grant_rec_t *r)
{
    return (uint64_t)r->meta.len + r->data.len;
}

static ps__vb_grant_rec_t **cur_find(ps__vb_grants_t *g, uint64_t owner, uint64_t key, uint8_t dir)
{
    ps__vb_grant_rec_t **pp = &g->cur[hash3(owner, key, dir, CUR_BUCKETS)];
    while (*pp != NULL && ((*pp)->owner != owner || (*pp)->key != key || (*pp)->dir != dir))
        pp = &(*pp)->cnext;
    return pp;
}

/* Makes r not current (lock held). */
static void cur_clear(ps__vb_grants_t *g, ps__vb_grant_rec_t *r)
{
    if (!r->current)
        return;
    ps__vb_grant_rec_t **pp = cur_find(g, r->owner, r->key, r->dir);
    if (*pp == r)
        *pp = r->cnext;
    r->cnext = NULL;
    r->current = 0;
    g->cached_bytes -= rec_bytes(r);
}

static void pending_remove(ps__vb_grants_t *g, ps__vb_grant_rec_t *r)
{
    if (!r->pending)
        return;
    ps__vb_grant_rec_t **pp = &g->pending_head;
    ps__vb_grant_rec_t *prev = NULL;
    while (*pp != NULL && *pp != r) {
        prev = *pp;
        pp = &(*pp)->pnext;
    }
    if (*pp == r) {
        *pp = r->pnext;
        if (g->pending_tail == r)
            g->pending_tail = prev;
    }
    r->pnext = NULL;
    r->pending = 0;
}

/* Takes r out of every table (lock held); the caller frees it after
 * unlocking with rec_free(). Returns 1 if the object may go too. */
static int rec_unlink(ps__vb_grants_t *g, ps__vb_grant_rec_t *r)
{
    cur_clear(g, r);
    pending_remove(g, r);
    if (r->prev_all != NULL)
        r->prev_all->next_all = r->next_all;
    else if (g->all == r)
        g->all = r->next_all;
    if (r->next_all != NULL)
        r->next_all->prev_all = r->prev_all;
    r->prev_all = r->next_all = NULL;
    if (r->slot != 0)
        ps_rdma_slot_release(g->slots, r->slot);
    r->slot = 0;
    g->live--;
    return g->closed && g->live == 0;
}

/* Lets go of r's steered region (r is not shared, or the lock is held). */
static void rec_unsteer(ps__vb_grant_rec_t *r)
{
    if (!r->steered)
        return;
    r->steered = 0;
    /* The registration first: the last reference on the buffer takes the
     * cache's entry with it. */
    if (r->g->ops.steer_release != NULL)
        r->g->ops.steer_release(r->g->ops.ctx, r->steer.handle);
    r->steer.handle = NULL;
    ps_slice_unref(&r->steer.dest);
}

static void rec_free(ps__vb_grant_rec_t *r)
{
    rec_unsteer(r);
    ps_slice_unref(&r->meta);
    ps_slice_unref(&r->data);
    free(r);
}

void ps__vb_grants_close(ps__vb_grants_t *g)
{
    if (g == NULL)
        return;
    ps__vb_grant_rec_t *dead = NULL;
    ps_mutex_lock(&g->lock);
    g->closed = 1;
    ps__vb_grant_rec_t *r = g->all;
    while (r != NULL) {
        ps__vb_grant_rec_t *next = r->next_all;
        if (!r->data_out) {
            rec_unlink(g, r);
            r->pnext = dead;
            dead = r;
        } else {
            r->owner_gone = 1;
            cur_clear(g, r);
            pending_remove(g, r);
            /* Its registration goes with the van; the message keeps its
             * own reference on the buffer. */
            rec_unsteer(r);
        }
        r = next;
    }
    int last = g->live == 0;
    ps_mutex_unlock(&g->lock);
    while (dead != NULL) {
        r = dead;
        dead = r->pnext;
        rec_free(r);
    }
    if (last)
        grants_free_obj(g);
}

/* The steering fields of a GRANT of r (lock held). */
static void rec_steer_ctrl(const ps__vb_grant_rec_t *r, ps__vb_ctrl_t *c)
{
    if (!r->steered)
        return;
    c->flags |= PS__VB_RDV_STEER;
    c->app_id = r->app_id;
    c->customer_id = r->customer_id;
    c->is_tensor = r->is_tensor;
    c->steer_seg = (uint8_t)r->steer.seg;
    c->steer_addr = (uint64_t)(uintptr_t)ps_slice_ptr(&r->steer.dest);
    c->steer_len = r->steer.dest.len;
    c->steer_rkey = r->steer.rkey;
}

static size_t meta_region(uint32_t meta_len)
{
    size_t want = (size_t)meta_len + META_SLACK;
    return (want + META_ALIGN - 1) / META_ALIGN * META_ALIGN;
}

ps_status_t ps__vb_grants_start(ps__vb_grants_t *g, uint64_t owner, const ps__vb_ctrl_t *start,
                                const ps__vb_steer_t *steer, ps__vb_ctrl_t *reply_p)
{
    if (g == NULL || start == NULL || reply_p == NULL || start->type != PS__VB_MSG_RDV_START)
        return PS_ERR_INVALID_ARG;
    if (steer != NULL &&
        (!(start->flags & PS__VB_RDV_STEER) || steer->seg >= start->num_data ||
         steer->dest.len == 0 || steer->dest.len != start->seg_len[steer->seg]))
        return PS_ERR_INVALID_ARG;
    if (start->meta_len == 0 || start->meta_len > g->params.max_meta_len ||
        (g->params.max_data_len != 0 && start->data_len > g->params.max_data_len))
        return PS_ERR_TOO_LARGE;

    ps__vb_grant_rec_t *replaced = NULL;
    ps_mutex_lock(&g->lock);
    if (start->slot != 0) {
        ps__vb_grant_rec_t *old = ps_rdma_slot_get(g->slots, start->slot);
        if (old == NULL || old->owner != owner || old->state != REC_GRANTED || old->pending) {
            ps_mutex_unlock(&g->lock);
            return PS_ERR_PROTOCOL;
        }
        rec_unlink(g, old);
        replaced = old;
    }
    ps_mutex_unlock(&g->lock);
    if (replaced != NULL)
        rec_free(replaced);

    ps__vb_grant_rec_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return PS_ERR_NO_RESOURCE;
    r->g = g;
    r->owner = owner;
    r->key = start->key;
    r->dir = start->dir;
    r->state = REC_GRANTED;
    uint64_t data_len = start->data_len - (steer != NULL ? steer->dest.len : 0);
    ps_status_t st = g->ops.alloc(g->ops.ctx, meta_region(start->meta_len), &r->meta,
                                  &r->meta_rkey);
    if (st == PS_OK && data_len > 0)
        st = g->ops.alloc(g->ops.ctx, (size_t)data_len, &r->data, &r->data_rkey);
    if (st != PS_OK) {
        rec_free(r);
        return st == PS_ERR_NO_MEMORY ? PS_ERR_NO_RESOURCE : st;
    }
    /* Taken only once nothing can fail: on error the caller keeps it. */
    int take_steer = steer != NULL;

    ps_mutex_lock(&g->lock);
    if (g->closed) {
        ps_mutex_unlock(&g->lock);
        rec_free(r);
        return PS_ERR_SHUTDOWN;
    }
    st = ps_rdma_slot_alloc(g->slots, r, &r->slot);
    if (st != PS_OK) {
        ps_mutex_unlock(&g->lock);
        rec_free(r);
        return PS_ERR_NO_RESOURCE;
    }
    if (take_steer) {
        r->steered = 1;
        r->steer = *steer;
        r->app_id = start->app_id;
        r->customer_id = start->customer_id;
        r->is_tensor = start->is_tensor;
        g->stats.steered++;
    }
    g->live++;
    r->next_all = g->all;
    if (g->all != NULL)
        g->all->prev_all = r;
    g->all = r;
    g->stats.starts++;
    if ((start->flags & PS__VB_RDV_CACHEABLE) && g->params.max_cached_bytes != 0 &&
        g->cached_bytes + rec_bytes(r) <= g->params.max_cached_bytes) {
        ps__vb_grant_rec_t **pp = cur_find(g, owner, r->key, r->dir);
        if (*pp != NULL)
            cur_clear(g, *pp); /* freed, not re-granted, when released */
        pp = cur_find(g, owner, r->key, r->dir);
        r->cnext = *pp;
        *pp = r;
        r->current = 1;
        g->cached_bytes += rec_bytes(r);
    } else {
        g->stats.one_shot++;
    }
    ps__vb_ctrl_t c;
    memset(&c, 0, sizeof(c));
    c.type = PS__VB_MSG_RDV_GRANT;
    c.dir = r->dir;
    c.token = start->token;
    c.slot = r->slot;
    c.key = r->key;
    c.meta_len = (uint32_t)r->meta.len;
    c.data_len = r->data.len;
    c.meta_addr = (uint64_t)(uintptr_t)ps_slice_ptr(&r->meta);
    c.meta_rkey = r->meta_rkey;
    c.data_addr = r->data.len ? (uint64_t)(uintptr_t)ps_slice_ptr(&r->data) : 0;
    c.data_rkey = r->data_rkey;
    rec_steer_ctrl(r, &c);
    ps_mutex_unlock(&g->lock);
    *reply_p = c;
    return PS_OK;
}

ps__vb_grant_rec_t *ps__vb_grants_filled(ps__vb_grants_t *g, uint64_t owner, uint32_t slot,
                                         const uint8_t **meta_p, uint32_t *meta_cap_p,
                                         uint64_t *data_cap_p)
{
    ps_mutex_lock(&g->lock);
    ps__vb_grant_rec_t *r = ps_rdma_slot_get(g->slots, slot);
    if (r == NULL || r->owner != owner || r->state != REC_GRANTED || r->pending) {
        ps_mutex_unlock(&g->lock);
        return NULL;
    }
    r->state = REC_FILLED;
    if (r->regranted)
        g->stats.reuses++;
    ps_mutex_unlock(&g->lock);
    *meta_p = ps_slice_ptr(&r->meta);
    *meta_cap_p = (uint32_t)r->meta.len;
    *data_cap_p = r->data.len;
    return r;
}

/* A filled grant came back (its message is done with it). */
static void rec_returned(ps__vb_grant_rec_t *r)
{
    ps__vb_grants_t *g = r->g;
    int notify = 0, free_rec = 0, free_obj = 0;
    ps_mutex_lock(&g->lock);
    r->data_out = 0;
    if (!g->closed && !r->owner_gone && r->current) {
        r->state = REC_GRANTED;
        r->regranted = 1;
        r->pending = 1;
        r->pnext = NULL;
        if (g->pending_tail != NULL)
            g->pending_tail->pnext = r;
        else
            g->pending_head = r;
        g->pending_tail = r;
        notify = 1;
    } else {
        free_obj = rec_unlink(g, r);
        free_rec = 1;
    }
    ps_mutex_unlock(&g->lock);
    if (free_rec)
        rec_free(r);
    if (notify && g->ops.notify != NULL)
        g->ops.notify(g->ops.ctx);
    if (free_obj)
        grants_free_obj(g);
}

static void data_released(void *data, size_t length, void *arg)
{
    (void)data;
    (void)length;
    rec_returned(arg);
}

int ps__vb_grants_steered(const ps__vb_grant_rec_t *rec, unsigned *seg_p,
                          const ps_slice_t **dest_p)
{
    if (rec == NULL || !rec->steered)
        return 0;
    *seg_p = rec->steer.seg;
    *dest_p = &rec->steer.dest;
    return 1;
}

ps_status_t ps__vb_grants_data(ps__vb_grants_t *g, ps__vb_grant_rec_t *rec, ps_slice_t *slice_p)
{
    if (g == NULL || rec == NULL || slice_p == NULL || rec->data.len == 0)
        return PS_ERR_INVALID_ARG;
    ps_mutex_lock(&g->lock);
    if (rec->state != REC_FILLED || rec->data_out) {
        ps_mutex_unlock(&g->lock);
        return PS_ERR_BAD_STATE;
    }
    rec->data_out = 1;
    ps_mutex_unlock(&g->lock);
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    ps_status_t st = ps_slice_wrap(ps_slice_ptr(&rec->data), rec->data.len, data_released, rec, &s);
    if (st != PS_OK) {
        ps_mutex_lock(&g->lock);
        rec->data_out = 0;
        ps_mutex_unlock(&g->lock);
        return st;
    }
    *slice_p = s;
    return PS_OK;
}

void ps__vb_grants_done(ps__vb_grants_t *g, ps__vb_grant_rec_t *rec)
{
    (void)g;
    if (rec != NULL)
        rec_returned(rec);
}

ps_status_t ps__vb_grants_drop(ps__vb_grants_t *g, uint64_t owner, uint32_t slot)
{
    ps_mutex_lock(&g->lock);
    ps__vb_grant_rec_t *r = ps_rdma_slot_get(g->slots, slot);
    if (r == NULL || r->owner != owner || r->state != REC_GRANTED) {
        ps_mutex_unlock(&g->lock);
        return PS_ERR_PROTOCOL;
    }
    rec_unlink(g, r);
    ps_mutex_unlock(&g->lock);
    rec_free(r);
    return PS_OK;
}

ps_status_t ps__vb_grants_unsteer(ps__vb_grants_t *g, uint64_t owner, uint32_t slot)
{
    ps_mutex_lock(&g->lock);
    ps__vb_grant_rec_t *r = ps_rdma_slot_get(g->slots, slot);
    if (r == NULL || r->owner != owner || r->state != REC_GRANTED || r->pending) {
        ps_mutex_unlock(&g->lock);
        return PS_ERR_PROTOCOL;
    }
    rec_unsteer(r);
    ps_mutex_unlock(&g->lock);
    return PS_OK;
}

void ps__vb_grants_owner_gone(ps__vb_grants_t *g, uint64_t owner)
{
    ps__vb_grant_rec_t *dead = NULL;
    ps_mutex_lock(&g->lock);
    ps__vb_grant_rec_t *r = g->all;
    while (r != NULL) {
        ps__vb_grant_rec_t *next = r->next_all;
        if (r->owner == owner) {
            if (r->state == REC_GRANTED) {
                rec_unlink(g, r);
                r->pnext = dead;
                dead = r;
            } else {
                /* Held by a message: freed when it is let go of. */
                r->owner_gone = 1;
                cur_clear(g, r);
            }
        }
        r = next;
    }
    ps_mutex_unlock(&g->lock);
    while (dead != NULL) {
        r = dead;
        dead = r->pnext;
        rec_free(r);
    }
}

size_t ps__vb_grants_take_regrants(ps__vb_grants_t *g, uint64_t *owners, ps__vb_ctrl_t *msgs,
                                   size_t cap)
{
    size_t n = 0;
    ps_mutex_lock(&g->lock);
    while (n < cap && g->pending_head != NULL) {
        ps__vb_grant_rec_t *r = g->pending_head;
        g->pending_head = r->pnext;
        if (g->pending_head == NULL)
            g->pending_tail = NULL;
        r->pnext = NULL;
        r->pending = 0;
        ps__vb_ctrl_t *c = &msgs[n];
        memset(c, 0, sizeof(*c));
        c->type = PS__VB_MSG_RDV_GRANT;
        c->flags = PS__VB_RDV_REGRANT;
        c->dir = r->dir;
        c->slot = r->slot;
        c->key = r->key;
        c->meta_len = (uint32_t)r->meta.len;
        c->data_len = r->data.len;
        c->meta_addr = (uint64_t)(uintptr_t)ps_slice_ptr(&r->meta);
        c->meta_rkey = r->meta_rkey;
        c->data_addr = r->data.len ? (uint64_t)(uintptr_t)ps_slice_ptr(&r->data) : 0;
        c->data_rkey = r->data_rkey;
        rec_steer_ctrl(r, c);
        owners[n] = r->owner;
        g->stats.regrants++;
        n++;
    }
    ps_mutex_unlock(&g->lock);
    return n;
}

void ps__vb_grants_stats(ps__vb_grants_t *g, ps__vb_grants_stats_t *stats_p)
{
    ps_mutex_lock(&g->lock);
    ps__vb_grants_stats_t s = g->stats;
    s.live = g->live;
    s.cached_bytes = g->cached_bytes;
    s.granted = 0;
    s.in_use = 0;
    for (ps__vb_grant_rec_t *r = g->all; r != NULL; r = r->next_all) {
        if (r->state == REC_GRANTED)
            s.granted++;
        else
            s.in_use++;
    }
    ps_mutex_unlock(&g->lock);
    *stats_p = s;
}

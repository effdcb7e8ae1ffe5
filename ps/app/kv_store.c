/*
 * The default handler's store: an open-addressing hash map from key to a
 * heap copy of its value, under one lock. Semantics in kv_store.h.
 */
#include "ps/app/kv_store.h"

#include <stdlib.h>
#include <string.h>

#include "ps/app/kv_sum.h"
#include "ps/base/buffer.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"

typedef struct {
    ps_key_t key;
    int used;
    ps_data_type_t type;
    size_t len;
    unsigned char *data;
} entry_t;

struct ps_kv_store {
    ps_mutex_t lock;
    entry_t *slots;
    size_t cap;   /* a power of two */
    size_t count;
};

#define INITIAL_CAP 64

/* splitmix64's finaliser: neighbouring keys land far apart. */
static inline size_t hash_key(ps_key_t k)
{
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    k ^= k >> 31;
    return (size_t)k;
}

static entry_t *find_slot(entry_t *slots, size_t cap, ps_key_t key)
{
    size_t i = hash_key(key) & (cap - 1);
    while (slots[i].used && slots[i].key != key)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static ps_status_t grow(ps_kv_store_t *s)
{
    size_t ncap = s->cap * 2;
    entry_t *n = calloc(ncap, sizeof(*n));
    if (!n)
        return PS_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].used)
            *find_slot(n, ncap, s->slots[i].key) = s->slots[i];
    free(s->slots);
    s->slots = n;
    s->cap = ncap;
    return PS_OK;
}

ps_status_t ps_kv_store_create(ps_kv_store_t **store_p)
{
    if (!store_p)
        return PS_ERR_INVALID_ARG;
    ps_kv_store_t *s = calloc(1, sizeof(*s));
    if (!s)
        return PS_ERR_NO_MEMORY;
    s->cap = INITIAL_CAP;
    s->slots = calloc(s->cap, sizeof(entry_t));
    if (!s->slots || ps_mutex_init(&s->lock) != PS_OK) {
        free(s->slots);
        free(s);
        return PS_ERR_NO_MEMORY;
    }
    *store_p = s;
    return PS_OK;
}

void ps_kv_store_destroy(ps_kv_store_t *store)
{
    if (!store)
        return;
    for (size_t i = 0; i < store->cap; i++)
        free(store->slots[i].data);
    free(store->slots);
    ps_mutex_destroy(&store->lock);
    free(store);
}

size_t ps_kv_store_num_keys(ps_kv_store_t *store)
{
    ps_mutex_lock(&store->lock);
    size_t n = store->count;
    ps_mutex_unlock(&store->lock);
    return n;
}

static inline ps_key_t key_at(const ps_kv_pairs_t *kvs, size_t i)
{
    ps_key_t k;
    memcpy(&k, (const char *)ps_slice_ptr(&kvs->keys) + i * sizeof(k), sizeof(k));
    return k;
}

static inline int32_t len_at(const ps_kv_pairs_t *kvs, size_t i)
{
    int32_t l;
    memcpy(&l, (const char *)ps_slice_ptr(&kvs->lens) + i * sizeof(l), sizeof(l));
    return l;
}

static size_t elem_size_of(ps_data_type_t type)
{
    size_t es = ps_data_type_size(type);
    return es ? es : 1;
}

/* Per-key byte sizes of a push: checks that they add up to the values. */
static ps_status_t check_push_sizes(const ps_kv_pairs_t *req, size_t nk, size_t *uniform_p)
{
    size_t es = elem_size_of(req->type);
    if (req->lens.len == 0) {
        size_t per = nk ? req->vals.len / nk : 0;
        if ((nk == 0 && req->vals.len) || per * nk != req->vals.len || per % es != 0)
            return PS_ERR_INVALID_ARG;
        *uniform_p = per;
        return PS_OK;
    }
    if (req->lens.len != nk * sizeof(int32_t))
        return PS_ERR_INVALID_ARG;
    uint64_t total = 0;
    for (size_t i = 0; i < nk; i++) {
        int32_t l = len_at(req, i);
        if (l < 0)
            return PS_ERR_INVALID_ARG;
        total += (uint64_t)l * es;
    }
    if (total != req->vals.len)
        return PS_ERR_INVALID_ARG;
    *uniform_p = 0;
    return PS_OK;
}

/* Stores or sums one key's value (lock held). */
static ps_status_t apply_one(ps_kv_store_t *s, ps_key_t key, ps_data_type_t type,
                             const unsigned char *val, size_t len)
{
    if ((s->count + 1) * 4 > s->cap * 3) {
        ps_status_t st = grow(s);
        if (st != PS_OK)
            return st;
    }
    entry_t *e = find_slot(s->slots, s->cap, key);
    if (e->used && e->type == type && e->len == len && ps_kv_type_summable(type))
        return ps_kv_sum(type, e->data, val, len);

    if (e->used && ps_kv_type_summable(type) && (e->type != type || e->len != len))
        ps_warn_ratelimited(PS_LOG_APP,
                            "kv store: key %llu pushed as %s of %zu bytes, stored as %s of %zu "
                            "bytes: replaced",
                            (unsigned long long)key, ps_data_type_str(type), len,
                            ps_data_type_str(e->type), e->len);
    /* First push, a replace type, or a changed shape: copy. malloc(0) may
     * return NULL, so keep at least one byte. */
    if (!e->used || e->len != len) {
        unsigned char *d = realloc(e->used ? e->data : NULL, len ? len : 1);
        if (!d)
            return PS_ERR_NO_MEMORY;
        e->data = d;
    }
    if (len)
        memcpy(e->data, val, len);
    e->len = len;
    e->type = type;
    if (!e->used) {
        e->used = 1;
        e->key = key;
        s->count++;
    }
    return PS_OK;
}

ps_status_t ps_kv_store_push(ps_kv_store_t *store, const ps_kv_pairs_t *req)
{
    if (!store || !req || req->keys.len % sizeof(ps_key_t) != 0)
        return PS_ERR_INVALID_ARG;
    size_t nk = ps_kv_pairs_num_keys(req);
    size_t uniform = 0;
    ps_status_t st = check_push_sizes(req, nk, &uniform);
    if (st != PS_OK) {
        ps_warn_ratelimited(PS_LOG_APP,
                            "kv store: push of %zu keys with %zu value bytes and %zu length "
                            "bytes does not add up",
                            nk, req->vals.len, req->lens.len);
        return st;
    }
    size_t es = elem_size_of(req->type);
    const unsigned char *vals = ps_slice_ptr(&req->vals);
    size_t off = 0;
    ps_mutex_lock(&store->lock);
    for (size_t i = 0; i < nk && st == PS_OK; i++) {
        size_t len = req->lens.len ? (size_t)len_at(req, i) * es : uniform;
        st = apply_one(store, key_at(req, i), req->type, vals + off, len);
        off += len;
    }
    ps_mutex_unlock(&store->lock);
    return st;
}

ps_status_t ps_kv_store_pull(ps_kv_store_t *store, const ps_kv_pairs_t *req,
                             ps_kv_pairs_t *res_p)
{
    if (!store || !req || !res_p || req->keys.len % sizeof(ps_key_t) != 0)
        return PS_ERR_INVALID_ARG;
    size_t nk = ps_kv_pairs_num_keys(req);
    size_t es = elem_size_of(req->type);
    ps_kv_pairs_t res = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                         req->type};
    ps_status_t st = ps_slice_alloc(nk * sizeof(int32_t), 0, &res.lens);
    if (st != PS_OK)
        return st;

    ps_mutex_lock(&store->lock);
    size_t total = 0;
    for (size_t i = 0; i < nk; i++) {
        entry_t *e = find_slot(store->slots, store->cap, key_at(req, i));
        total += e->used ? e->len : 0;
    }
    st = ps_slice_alloc(total, 0, &res.vals);
    if (st == PS_OK) {
        unsigned char *out = ps_slice_ptr(&res.vals);
        size_t off = 0;
        for (size_t i = 0; i < nk; i++) {
            entry_t *e = find_slot(store->slots, store->cap, key_at(req, i));
            size_t len = e->used ? e->len : 0;
            int32_t l = (int32_t)(len / es);
            if (len)
                memcpy(out + off, e->data, len);
            memcpy((char *)ps_slice_ptr(&res.lens) + i * sizeof(l), &l, sizeof(l));
            off += len;
        }
    }
    ps_mutex_unlock(&store->lock);
    if (st != PS_OK) {
        ps_slice_unref(&res.lens);
        return st;
    }
    res.keys = ps_slice_ref(&req->keys);
    *res_p = res;
    return PS_OK;
}

ps_status_t ps_kv_store_get(ps_kv_store_t *store, ps_key_t key, void *buf, size_t cap,
                            size_t *len_p, ps_data_type_t *type_p)
{
    if (!store)
        return PS_ERR_INVALID_ARG;
    ps_status_t st = PS_ERR_NOT_FOUND;
    ps_mutex_lock(&store->lock);
    entry_t *e = find_slot(store->slots, store->cap, key);
    if (e->used) {
        if (buf && cap)
            memcpy(buf, e->data, cap < e->len ? cap : e->len);
        if (len_p)
            *len_p = e->len;
        if (type_p)
            *type_p = e->type;
        st = PS_OK;
    }
    ps_mutex_unlock(&store->lock);
    return st;
}

void ps_kv_store_handler(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                         ps_kv_server_t *server)
{
    ps_kv_store_t *store = arg;
    if (meta->push) {
        ps_status_t st = ps_kv_store_push(store, req);
        if (st != PS_OK) {
            /* No error channel in the protocol: leave it unanswered so the
             * worker's request fails by its deadline instead of looking done. */
            ps_warn_ratelimited(PS_LOG_APP, "kv store: push ts %d from node %d not applied: %s",
                                meta->timestamp, meta->sender, ps_status_str(st));
            return;
        }
    }
    if (!meta->pull) {
        ps_kv_server_respond(server, meta, NULL);
        return;
    }
    ps_kv_pairs_t res;
    ps_status_t st = ps_kv_store_pull(store, req, &res);
    if (st != PS_OK) {
        ps_warn_ratelimited(PS_LOG_APP, "kv store: pull ts %d from node %d failed: %s",
                            meta->timestamp, meta->sender, ps_status_str(st));
        return;
    }
    ps_kv_server_respond(server, meta, &res);
    ps_slice_unref(&res.keys);
    ps_slice_unref(&res.vals);
    ps_slice_unref(&res.lens);
}

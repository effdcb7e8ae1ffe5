/*
 * The resender (see resender_internal.h): a chained hash table of messages
 * waiting for their acknowledgement, and, for de-duplication, a ring of
 * received keys in arrival order (so the oldest is always the next to go)
 * indexed by a hash table of ring positions.
 */
#include "ps/net/resender_internal.h"

#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"

#define SENT_MIN_BUCKETS 64
#define SEEN_MIN_RING 1024
#define NONE UINT32_MAX

typedef struct ps__sent {
    ps__msg_key_t key;
    uint64_t hash;
    ps_msg_t msg;        /* a copy holding references on the data */
    uint8_t *body;       /* the copy's body, owned */
    uint64_t first_ns;   /* first send */
    int retries;
    struct ps__sent *next;
} ps__sent_t;

typedef struct {
    ps__msg_key_t key;
    uint64_t at_ns;
    uint32_t next;       /* next ring index in this hash chain */
    uint32_t linked;     /* in a hash chain (0: forgotten, waits to leave the ring) */
} ps__seen_t;

struct ps__resender {
    ps_mutex_t lock;
    uint64_t timeout_ns;
    int max_retries;
    uint64_t keep_ns;
    size_t dedup_cap;

    ps__sent_t **sent;
    size_t sent_buckets; /* power of two */
    size_t num_sent;
    uint64_t planned_ns; /* when the last poll wants the next; 0: none */

    ps__seen_t *ring;
    size_t ring_cap;     /* power of two */
    size_t ring_head;
    size_t ring_count;
    size_t num_keys;     /* linked entries */
    uint32_t *heads;     /* hash buckets: ring index or NONE; 2 * ring_cap */

    uint64_t resent;
    uint64_t duplicates;
};

/* ---- keys ---- */

void ps__msg_key_of(const ps_meta_t *meta, ps__msg_key_t *key_p)
{
    key_p->app_id = meta->app_id;
    key_p->customer_id = meta->customer_id;
    key_p->sender = meta->sender;
    key_p->recver = meta->recver;
    key_p->timestamp = meta->timestamp;
    key_p->request = meta->request ? 1 : 0;
}

void ps__msg_key_of_ack(const ps_meta_t *ack, int me, ps__msg_key_t *key_p)
{
    key_p->app_id = ack->app_id;
    key_p->customer_id = ack->customer_id;
    key_p->sender = me;
    key_p->recver = ack->sender;
    key_p->timestamp = ack->timestamp;
    key_p->request = ack->request ? 1 : 0;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t ps__msg_key_sig(const ps__msg_key_t *k)
{
    uint64_t a = ((uint64_t)(uint32_t)k->app_id << 32) | (uint32_t)k->customer_id;
    uint64_t b = ((uint64_t)(uint32_t)k->sender << 32) | (uint32_t)k->recver;
    uint64_t c = ((uint64_t)(uint32_t)k->timestamp << 1) | (uint64_t)(k->request & 1);
    return mix64(a ^ mix64(b ^ mix64(c)));
}

static int key_eq(const ps__msg_key_t *a, const ps__msg_key_t *b)
{
    return a->app_id == b->app_id && a->customer_id == b->customer_id &&
           a->sender == b->sender && a->recver == b->recver && a->timestamp == b->timestamp &&
           a->request == b->request;
}

/* ---- message copies ---- */

/* A copy of a data message holding its own references; the body (not
 * owned by a ps_msg_t being sent) is copied too. */
static ps_status_t msg_copy(const ps_msg_t *src, ps_msg_t *dst, uint8_t **body_p)
{
    uint8_t *body = NULL;
    if (src->meta.body_len > 0 && src->meta.body != NULL) {
        body = malloc(src->meta.body_len);
        if (body == NULL)
            return PS_ERR_NO_MEMORY;
        memcpy(body, src->meta.body, src->meta.body_len);
    }
    *dst = *src;
    dst->nodes = NULL;
    dst->num_nodes = 0;
    dst->nodes_owned = 0;
    dst->meta.control.nodes = NULL;
    dst->meta.control.num_nodes = 0;
    dst->meta.body = body;
    if (body == NULL)
        dst->meta.body_len = 0;
    for (uint32_t i = 0; i < src->num_data && i < PS_MSG_MAX_DATA; i++)
        dst->data[i] = ps_slice_ref(&src->data[i]);
    *body_p = body;
    return PS_OK;
}

static void msg_copy_free(ps_msg_t *msg, uint8_t *body)
{
    ps_msg_release(msg);
    free(body);
}

/* ---- create / destroy ---- */

ps_status_t ps__resender_create(uint64_t timeout_ns, int max_retries, size_t dedup_cap,
                                ps__resender_t **res_p)
{
    if (timeout_ns == 0 || max_retries < 0 || dedup_cap < 16 || res_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps__resender_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return PS_ERR_NO_MEMORY;
    r->timeout_ns = timeout_ns;
    r->max_retries = max_retries;
    /* The last copy leaves the sender max_retries timeouts after the first;
     * then it may still sit in queues for a while. */
    r->keep_ns = timeout_ns * (uint64_t)(max_retries + 1) + PS__RESEND_DEDUP_MARGIN_NS;
    /* The ring grows by doubling: the cap is a power of two (rounded down). */
    size_t cap = 16;
    while (cap * 2 <= dedup_cap && cap < ((size_t)1 << 30))
        cap *= 2;
    r->dedup_cap = cap;
    r->sent_buckets = SENT_MIN_BUCKETS;
    r->sent = calloc(r->sent_buckets, sizeof(*r->sent));
    r->ring_cap = r->dedup_cap < SEEN_MIN_RING ? r->dedup_cap : SEEN_MIN_RING;
    r->ring = calloc(r->ring_cap, sizeof(*r->ring));
    r->heads = malloc(2 * r->ring_cap * sizeof(*r->heads));
    if (r->sent == NULL || r->ring == NULL || r->heads == NULL ||
        ps_mutex_init(&r->lock) != PS_OK) {
        free(r->sent);
        free(r->ring);
        free(r->heads);
        free(r);
        return PS_ERR_NO_MEMORY;
    }
    memset(r->heads, 0xff, 2 * r->ring_cap * sizeof(*r->heads));
    *res_p = r;
    return PS_OK;
}

void ps__resender_destroy(ps__resender_t *r)
{
    if (r == NULL)
        return;
    for (size_t b = 0; b < r->sent_buckets; b++) {
        ps__sent_t *e = r->sent[b];
        while (e != NULL) {
            ps__sent_t *next = e->next;
            msg_copy_free(&e->msg, e->body);
            free(e);
            e = next;
        }
    }
    free(r->sent);
    free(r->ring);
    free(r->heads);
    ps_mutex_destroy(&r->lock);
    free(r);
}

/* ---- sender side ---- */

static ps__sent_t **sent_slot(ps__resender_t *r, const ps__msg_key_t *key, uint64_t hash)
{
    ps__sent_t **pp = &r->sent[hash & (r->sent_buckets - 1)];
    while (*pp != NULL && !((*pp)->hash == hash && key_eq(&(*pp)->key, key)))
        pp = &(*pp)->next;
    return pp;
}

static void sent_grow(ps__resender_t *r)
{
    size_t nb = r->sent_buckets * 2;
    ps__sent_t **table = calloc(nb, sizeof(*table));
    if (table == NULL)
        return; /* longer chains, still correct */
    for (size_t b = 0; b < r->sent_buckets; b++) {
        ps__sent_t *e = r->sent[b];
        while (e != NULL) {
            ps__sent_t *next = e->next;
            e->next = table[e->hash & (nb - 1)];
            table[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(r->sent);
    r->sent = table;
    r->sent_buckets = nb;
}

ps_status_t ps__resender_track(ps__resender_t *r, const ps_msg_t *msg, uint64_t now_ns,
                               int *kick_p)
{
    ps__msg_key_t key;
    ps__msg_key_of(&msg->meta, &key);
    uint64_t hash = ps__msg_key_sig(&key);
    ps__sent_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return PS_ERR_NO_MEMORY;
    ps_status_t st = msg_copy(msg, &e->msg, &e->body);
    if (st != PS_OK) {
        free(e);
        return st;
    }
    e->key = key;
    e->hash = hash;
    e->first_ns = now_ns;
    int kick = 0;

    ps_mutex_lock(&r->lock);
    ps__sent_t **pp = sent_slot(r, &key, hash);
    if (*pp != NULL) {
        ps_mutex_unlock(&r->lock);
        msg_copy_free(&e->msg, e->body);
        free(e);
        return PS_ERR_EXISTS;
    }
    *pp = e;
    r->num_sent++;
    if (r->num_sent > r->sent_buckets)
        sent_grow(r);
    uint64_t due = now_ns + r->timeout_ns;
    if (r->planned_ns == 0 || due < r->planned_ns) {
        r->planned_ns = due;
        kick = 1;
    }
    ps_mutex_unlock(&r->lock);
    if (kick_p != NULL)
        *kick_p = kick;
    return PS_OK;
}

static ps__sent_t *sent_remove(ps__resender_t *r, const ps__msg_key_t *key)
{
    uint64_t hash = ps__msg_key_sig(key);
    ps__sent_t **pp = sent_slot(r, key, hash);
    ps__sent_t *e = *pp;
    if (e != NULL) {
        *pp = e->next;
        r->num_sent--;
    }
    return e;
}

void ps__resender_untrack(ps__resender_t *r, const ps_msg_t *msg)
{
    ps__msg_key_t key;
    ps__msg_key_of(&msg->meta, &key);
    ps_mutex_lock(&r->lock);
    ps__sent_t *e = sent_remove(r, &key);
    ps_mutex_unlock(&r->lock);
    if (e != NULL) {
        msg_copy_free(&e->msg, e->body);
        free(e);
    }
}

int ps__resender_on_ack(ps__resender_t *r, const ps__msg_key_t *key)
{
    ps_mutex_lock(&r->lock);
    ps__sent_t *e = sent_remove(r, key);
    ps_mutex_unlock(&r->lock);
    if (e == NULL)
        return 0;
    msg_copy_free(&e->msg, e->body);
    free(e);
    return 1;
}

typedef struct {
    ps_msg_t msg;
    uint8_t *body;
} resend_item_t;

uint64_t ps__resender_poll(ps__resender_t *r, uint64_t now_ns, ps__resend_func_t resend_fn,
                           ps__resend_giveup_func_t giveup_fn, void *arg)
{
    resend_item_t *items = NULL;
    size_t num_items = 0;
    ps__sent_t *given_up = NULL;
    uint64_t next = 0;

    ps_mutex_lock(&r->lock);
    if (r->num_sent > 0)
        items = malloc(r->num_sent * sizeof(*items));
    for (size_t b = 0; b < r->sent_buckets; b++) {
        ps__sent_t **pp = &r->sent[b];
        while (*pp != NULL) {
            ps__sent_t *e = *pp;
            uint64_t due = e->first_ns + r->timeout_ns * (uint64_t)(e->retries + 1);
            if (now_ns >= due && e->retries >= r->max_retries) {
                *pp = e->next;
                r->num_sent--;
                e->next = given_up;
                given_up = e;
                continue;
            }
            if (now_ns >= due && items != NULL &&
                msg_copy(&e->msg, &items[num_items].msg, &items[num_items].body) == PS_OK) {
                num_items++;
                e->retries++;
                r->resent++;
                due = e->first_ns + r->timeout_ns * (uint64_t)(e->retries + 1);
            } else if (now_ns >= due) {
                /* No memory for the copy now: try again soon. */
                due = now_ns + r->timeout_ns;
            }
            if (next == 0 || due < next)
                next = due;
            pp = &e->next;
        }
    }
    r->planned_ns = next;
    ps_mutex_unlock(&r->lock);

    for (size_t i = 0; i < num_items; i++) {
        if (resend_fn != NULL)
            (void)resend_fn(arg, &items[i].msg);
        msg_copy_free(&items[i].msg, items[i].body);
    }
    free(items);
    while (given_up != NULL) {
        ps__sent_t *e = given_up;
        given_up = e->next;
        if (giveup_fn != NULL)
            giveup_fn(arg, &e->msg, e->retries);
        msg_copy_free(&e->msg, e->body);
        free(e);
    }
    return next;
}

/* ---- receiver side ---- */

static size_t seen_bucket(const ps__resender_t *r, uint64_t hash)
{
    return (size_t)(hash & (2 * r->ring_cap - 1));
}

static void seen_unlink(ps__resender_t *r, uint32_t idx)
{
    ps__seen_t *s = &r->ring[idx];
    if (!s->linked)
        return;
    uint32_t *pp = &r->heads[seen_bucket(r, ps__msg_key_sig(&s->key))];
    while (*pp != NONE && *pp != idx)
        pp = &r->ring[*pp].next;
    if (*pp == idx)
        *pp = s->next;
    s->linked = 0;
    r->num_keys--;
}

static void seen_drop_head(ps__resender_t *r)
{
    uint32_t idx = (uint32_t)r->ring_head;
    seen_unlink(r, idx);
    r->ring_head = (r->ring_head + 1) & (r->ring_cap - 1);
    r->ring_count--;
}

/* Doubles the ring (keeping arrival order) and rebuilds the index. */
static int seen_grow(ps__resender_t *r)
{
    size_t cap = r->ring_cap * 2;
    ps__seen_t *ring = malloc(cap * sizeof(*ring));
    uint32_t *heads = malloc(2 * cap * sizeof(*heads));
    if (ring == NULL || heads == NULL) {
        free(ring);
        free(heads);
        return 0;
    }
    memset(heads, 0xff, 2 * cap * sizeof(*heads));
    for (size_t i = 0; i < r->ring_count; i++)
        ring[i] = r->ring[(r->ring_head + i) & (r->ring_cap - 1)];
    free(r->ring);
    free(r->heads);
    r->ring = ring;
    r->heads = heads;
    r->ring_cap = cap;
    r->ring_head = 0;
    for (size_t i = 0; i < r->ring_count; i++) {
        if (!ring[i].linked)
            continue;
        size_t b = seen_bucket(r, ps__msg_key_sig(&ring[i].key));
        ring[i].next = heads[b];
        heads[b] = (uint32_t)i;
    }
    return 1;
}

int ps__resender_seen(ps__resender_t *r, const ps_meta_t *meta, uint64_t now_ns)
{
    ps__msg_key_t key;
    ps__msg_key_of(meta, &key);
    uint64_t hash = ps__msg_key_sig(&key);
    int evicted_early = 0;

    ps_mutex_lock(&r->lock);
    while (r->ring_count > 0 && r->ring[r->ring_head].at_ns + r->keep_ns <= now_ns)
        seen_drop_head(r);
    for (uint32_t i = r->heads[seen_bucket(r, hash)]; i != NONE; i = r->ring[i].next) {
        if (key_eq(&r->ring[i].key, &key)) {
            r->duplicates++;
            ps_mutex_unlock(&r->lock);
            return 1;
        }
    }
    if (r->ring_count == r->ring_cap && (r->ring_cap >= r->dedup_cap || !seen_grow(r))) {
        evicted_early = r->ring[r->ring_head].linked;
        seen_drop_head(r);
    }
    uint32_t idx = (uint32_t)((r->ring_head + r->ring_count) & (r->ring_cap - 1));
    size_t b = seen_bucket(r, hash);
    r->ring[idx].key = key;
    r->ring[idx].at_ns = now_ns;
    r->ring[idx].linked = 1;
    r->ring[idx].next = r->heads[b];
    r->heads[b] = idx;
    r->ring_count++;
    r->num_keys++;
    size_t cap = r->ring_cap;
    ps_mutex_unlock(&r->lock);
    if (evicted_early)
        ps_warn_ratelimited(PS_LOG_CORE, "resend: remembering only the last %zu message keys; "
                            "an older duplicate would be taken for a new message", cap);
    return 0;
}

/* ---- both ---- */

void ps__resender_forget_peer(ps__resender_t *r, int peer)
{
    ps__sent_t *gone = NULL;
    ps_mutex_lock(&r->lock);
    for (size_t b = 0; b < r->sent_buckets; b++) {
        ps__sent_t **pp = &r->sent[b];
        while (*pp != NULL) {
            ps__sent_t *e = *pp;
            if (e->key.recver == peer) {
                *pp = e->next;
                r->num_sent--;
                e->next = gone;
                gone = e;
            } else {
                pp = &e->next;
            }
        }
    }
    for (size_t i = 0; i < r->ring_count; i++) {
        uint32_t idx = (uint32_t)((r->ring_head + i) & (r->ring_cap - 1));
        if (r->ring[idx].linked && r->ring[idx].key.sender == peer)
            seen_unlink(r, idx);
    }
    ps_mutex_unlock(&r->lock);
    while (gone != NULL) {
        ps__sent_t *e = gone;
        gone = e->next;
        msg_copy_free(&e->msg, e->body);
        free(e);
    }
}

size_t ps__resender_num_tracked(ps__resender_t *r)
{
    ps_mutex_lock(&r->lock);
    size_t n = r->num_sent;
    ps_mutex_unlock(&r->lock);
    return n;
}

size_t ps__resender_num_keys(ps__resender_t *r)
{
    ps_mutex_lock(&r->lock);
    size_t n = r->num_keys;
    ps_mutex_unlock(&r->lock);
    return n;
}

uint64_t ps__resender_num_resent(ps__resender_t *r)
{
    ps_mutex_lock(&r->lock);
    uint64_t n = r->resent;
    ps_mutex_unlock(&r->lock);
    return n;
}

uint64_t ps__resender_num_duplicates(ps__resender_t *r)
{
    ps_mutex_lock(&r->lock);
    uint64_t n = r->duplicates;
    ps_mutex_unlock(&r->lock);
    return n;
}

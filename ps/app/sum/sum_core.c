/*
 * The summation handler: per-key round state, the sync and async
 * semantics of sum_server.h, and what a dead worker fails.
 *
 * Locking: the key table has one lock (lookups and inserts; keys live until
 * destroy). Each key has its own lock over its round state. The heavy work
 * of a sync push (a sum over the value) runs on the key's engine thread
 * without the key lock: only that thread touches the round's buffers
 * (`first`, `acc`, `napplied`) until the round is complete, and nobody else
 * reads the accumulating bytes. In blocking and async mode the sum runs
 * under the key lock, on the handler's thread. Answers are collected under
 * the key lock and sent after it is released.
 *
 * Rounds (sync): `round` is the index of the round being accumulated; the
 * result of round-1 (`out`) is kept until every live worker pulled it.
 * Each worker's pulls are numbered per key (`next_pull`), so a pull is
 * answered with exactly the round it is for: out if that is round-1, else
 * it waits. A round whose sum is complete while out is still being pulled
 * waits (`complete`) and is promoted when out retires.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/kv_sum.h"
#include "ps/app/sum/sum_cmd.h"
#include "ps/app/sum/sum_engine.h"
#include "ps/app/sum/sum_server.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"

#define STORE_ALIGN 4096 /* page-aligned stores, as upstream */
#define MAX_WORKERS 65536

/* Where ps_sum_shutdown_timed is, past refusing requests. */
enum { SHUT_OPEN, SHUT_RUNNING, SHUT_DONE };

/* ---- types ---- */

typedef struct sum_pull {
    struct sum_pull *next;
    ps_kv_meta_t meta;
    ps_kv_server_t *server;
    uint64_t round; /* the round it is for (sync) */
    int worker;
} sum_pull_t;

/* A push held for a later round (sync), or an init push (byteps_init). */
typedef struct sum_held {
    struct sum_held *next;
    ps_slice_t data;
    int worker;
    int has_pull;          /* a push-pull: its answer is the pull's */
    ps_kv_meta_t meta;
    ps_kv_server_t *server;
} sum_held_t;

typedef struct sum_key {
    struct sum_key *hnext;
    ps_key_t key;
    ps_slice_t key_slice; /* the key's 8 bytes, for answers */
    ps_mutex_t lock;
    ps__sum_queue_t queue; /* the engine's (under its lock) */
    int engine;            /* pinned engine thread, -1 when none */

    int shaped;            /* len and type fixed by the first push */
    size_t len;
    ps_data_type_t type;

    /* async */
    ps_slice_t store;

    /* sync: the round being accumulated */
    uint64_t round;
    int npushed;
    uint64_t *pushed_by;
    int napplied;          /* engine side, see above */
    ps_slice_t first;      /* the first push, until the second is summed with it */
    ps_slice_t acc;        /* the sum (an own store buffer) */
    int complete;          /* all pushes applied; waiting for out to retire */
    ps_slice_t result;
    int result_owned;      /* result is a store buffer (not a pushed value) */
    int broken;            /* a worker this key needs is gone */
    int advancing;         /* advance() is running: completions only mark */

    /* sync: the previous round's result */
    int has_out;
    ps_slice_t out;
    int out_owned;
    int npulled;
    uint64_t *pulled_by;
    ps_slice_t spare;      /* a retired store, reused once the transport let go */

    uint64_t *next_pull;   /* per worker: the round its next pull is for */
    sum_pull_t *wait_head, *wait_tail;
    sum_held_t *held_head, *held_tail;

    /* byteps_init */
    int inited;
    int ninit;
    uint64_t *init_by;
    ps_slice_t init_data;
    sum_held_t *init_acks;
} sum_key_t;

enum { REPLY_ACK, REPLY_VALUE, REPLY_FAIL };

typedef struct {
    int kind;
    ps_kv_meta_t meta;
    ps_kv_server_t *server;
    ps_slice_t keys; /* referenced */
    ps_slice_t vals; /* referenced (REPLY_VALUE) */
    ps_data_type_t type;
} reply_t;

typedef struct {
    reply_t *v;
    size_t n, cap;
    reply_t fixed[4];
} replies_t;

struct ps_sum {
    ps_sum_options_t opts;
    int n;       /* workers */
    size_t words; /* bitmap words */
    ps_postoffice_t *po;
    ps_sum_respond_func_t respond;
    void *respond_arg;
    ps__sum_engine_t *engine; /* NULL: blocking or async */
    ps_slice_t zero_len;      /* int32 0: the "no value" answer */

    ps_mutex_t table_lock;
    sum_key_t **buckets;
    size_t nbuckets, nkeys;

    /* lifecycle */
    ps_mutex_t life_lock;
    ps_cond_t life_cond;
    int active;
    int closing;    /* requests are refused */
    int shut_state; /* SHUT_*: the rest of shutdown */

    /* dead workers: bits only ever set (atomically) */
    uint64_t *dead;
    atomic_int ndead;

    /* Dead workers as the postoffice reports them (its node-failed
     * callback, which must not block): the callback queues the node ids
     * under watch_lock, the "gone" thread fails their rounds. */
    ps_mutex_t watch_lock;
    ps_cond_t watch_cond;
    int watch_stop;
    int watching;        /* the thread runs */
    int registered;      /* the callback is registered */
    ps_thread_t watcher;
    int *gone_ids;       /* queued node ids */
    size_t ngone, gone_cap;

    atomic_uint_least64_t next_id;
    struct {
        atomic_uint_least64_t pushes, push_bytes, pulls, rounds, pulls_waited, pushes_held,
            pulls_failed, keys_failed, refused, stores, workers_gone;
    } st;
};

#define STAT_ADD(_s, _f, _v) atomic_fetch_add_explicit(&(_s)->st._f, (_v), memory_order_relaxed)

/* ---- small helpers ---- */

static int bit_get(const uint64_t *set, int i)
{
    return (int)((set[i / 64] >> (i % 64)) & 1u);
}

static void bit_set(uint64_t *set, int i)
{
    set[i / 64] |= 1ull << (i % 64);
}

static int dead_get(const ps_sum_t *s, int i)
{
    return (int)((__atomic_load_n(&s->dead[i / 64], __ATOMIC_ACQUIRE) >> (i % 64)) & 1u);
}

/* No other reference: the transport let go of every answer sent from it.
 * The acquire pairs with the release of the transport's last unref, so
 * writing the bytes afterwards cannot race with its reads. */
static int slice_exclusive(const ps_slice_t *s)
{
    return s->buf && ps_buf_refcount(s->buf) == 1;
}

static ps_slice_t slice_take(ps_slice_t *s)
{
    ps_slice_t t = *s;
    *s = (ps_slice_t)PS_SLICE_EMPTY_INIT;
    return t;
}

static void replies_init(replies_t *r)
{
    r->v = r->fixed;
    r->n = 0;
    r->cap = sizeof(r->fixed) / sizeof(r->fixed[0]);
}

static void reply_add(replies_t *r, int kind, const ps_kv_meta_t *meta, ps_kv_server_t *server,
                      const ps_slice_t *keys, const ps_slice_t *vals, ps_data_type_t type)
{
    if (r->n == r->cap) {
        size_t cap = 2 * r->cap;
        reply_t *v = malloc(cap * sizeof(*v));
        if (!v) {
            ps_error(PS_LOG_APP, "sum: out of memory: answer ts %d to node %d dropped",
                     meta->timestamp, meta->sender);
            return;
        }
        memcpy(v, r->v, r->n * sizeof(*v));
        if (r->v != r->fixed)
            free(r->v);
        r->v = v;
        r->cap = cap;
    }
    reply_t *x = &r->v[r->n++];
    x->kind = kind;
    x->meta = *meta;
    x->server = server;
    x->keys = keys ? ps_slice_ref(keys) : (ps_slice_t)PS_SLICE_EMPTY_INIT;
    x->vals = vals ? ps_slice_ref(vals) : (ps_slice_t)PS_SLICE_EMPTY_INIT;
    x->type = type;
}

/* Sends the collected answers (no lock held). */
static void replies_send(ps_sum_t *s, replies_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        reply_t *x = &r->v[i];
        ps_status_t st;
        if (x->kind == REPLY_ACK) {
            st = s->respond(s->respond_arg, x->server, &x->meta, NULL);
        } else {
            ps_kv_pairs_t res = {x->keys, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, x->type};
            if (x->kind == REPLY_VALUE)
                res.vals = x->vals;
            else
                res.lens = s->zero_len;
            st = s->respond(s->respond_arg, x->server, &x->meta, &res);
        }
        if (st != PS_OK)
            ps_debug(PS_LOG_APP, "sum: answer ts %d to node %d not sent: %s", x->meta.timestamp,
                     x->meta.sender, ps_status_str(st));
        ps_slice_unref(&x->keys);
        ps_slice_unref(&x->vals);
    }
    if (r->v != r->fixed)
        free(r->v);
    replies_init(r);
}

static ps_status_t default_respond(void *arg, ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                   const ps_kv_pairs_t *res)
{
    (void)arg;
    return ps_kv_server_respond(server, meta, res);
}

static void debug_values(ps_sum_t *s, const sum_key_t *k, const char *stage, const void *p,
                         size_t len)
{
    if (!s->opts.debug || k->key != s->opts.debug_key || !p)
        return;
    double v[4] = {0, 0, 0, 0};
    size_t es = ps_data_type_size(k->type);
    size_t n = es ? len / es : 0;
    for (size_t i = 0; i < n && i < 4; i++) {
        const unsigned char *e = (const unsigned char *)p + i * es;
        switch (k->type) {
        case PS_DATA_FLOAT: { float f; memcpy(&f, e, 4); v[i] = f; break; }
        case PS_DATA_DOUBLE: memcpy(&v[i], e, 8); break;
        case PS_DATA_FLOAT16: { uint16_t h; memcpy(&h, e, 2); v[i] = ps_half_to_float(h); break; }
        case PS_DATA_BFLOAT16: { uint16_t h; memcpy(&h, e, 2); v[i] = ps_bf16_to_float(h); break; }
        case PS_DATA_INT8: v[i] = *(const int8_t *)e; break;
        case PS_DATA_UINT8: v[i] = *e; break;
        case PS_DATA_INT32: { int32_t x; memcpy(&x, e, 4); v[i] = x; break; }
        case PS_DATA_INT64: { int64_t x; memcpy(&x, e, 8); v[i] = (double)x; break; }
        default: break;
        }
    }
    ps_info(PS_LOG_APP, "sum debug: key %llu round %llu %s: %g %g %g %g",
            (unsigned long long)k->key, (unsigned long long)k->round, stage, v[0], v[1], v[2],
            v[3]);
}

/* ---- options ---- */

void ps_sum_options_init(ps_sum_options_t *o)
{
    *o = (ps_sum_options_t){
        .engine_threads = 4,
    };
}

ps_status_t ps_sum_options_from_env(ps_sum_options_t *opts_p)
{
    ps_sum_options_t o;
    ps_sum_options_init(&o);
    int64_t threads, key;
    ps_status_t st;
    if ((st = ps_config_get_int(PS_CFG_BYTEPS_SERVER_ENGINE_THREAD, &threads)) != PS_OK ||
        (st = ps_config_get_bool(PS_CFG_BYTEPS_SERVER_ENGINE_BLOCKING, &o.engine_blocking)) !=
            PS_OK ||
        (st = ps_config_get_bool(PS_CFG_BYTEPS_SERVER_ENABLE_SCHEDULE, &o.schedule)) != PS_OK ||
        (st = ps_config_get_bool(PS_CFG_BYTEPS_ENABLE_ASYNC, &o.async_mode)) != PS_OK ||
        (st = ps_config_get_bool(PS_CFG_BYTEPS_SERVER_DEBUG, &o.debug)) != PS_OK ||
        (st = ps_config_get_bool(PS_CFG_PS_KEY_LOG, &o.log_keys)) != PS_OK)
        return PS_ERR_CONFIG;
    if (threads < 1 || threads > 1024) {
        ps_error(PS_LOG_APP, "BYTEPS_SERVER_ENGINE_THREAD=%lld: expected 1 to 1024",
                 (long long)threads);
        return PS_ERR_CONFIG;
    }
    o.engine_threads = (int)threads;
    if (o.debug) {
        st = ps_config_get_int(PS_CFG_BYTEPS_SERVER_DEBUG_KEY, &key);
        if (st != PS_OK && st != PS_ERR_NOT_FOUND)
            return PS_ERR_CONFIG;
        o.debug_key = st == PS_OK ? (uint64_t)key : 0;
    }
    *opts_p = o;
    return PS_OK;
}

/* ---- the key table ---- */

static size_t hash_key(ps_key_t key, size_t nbuckets)
{
    uint64_t x = key * 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 32) & (nbuckets - 1);
}

static void key_free(sum_key_t *k)
{
    ps_slice_unref(&k->key_slice);
    ps_slice_unref(&k->store);
    ps_slice_unref(&k->first);
    ps_slice_unref(&k->acc);
    ps_slice_unref(&k->result);
    ps_slice_unref(&k->out);
    ps_slice_unref(&k->spare);
    ps_slice_unref(&k->init_data);
    for (sum_pull_t *p = k->wait_head, *n; p; p = n) {
        n = p->next;
        free(p);
    }
    sum_held_t *lists[2] = {k->held_head, k->init_acks};
    for (int i = 0; i < 2; i++) {
        for (sum_held_t *h = lists[i], *n; h; h = n) {
            n = h->next;
            ps_slice_unref(&h->data);
            free(h);
        }
    }
    free(k->pushed_by);
    ps_mutex_destroy(&k->lock);
    free(k);
}

static sum_key_t *key_new(ps_sum_t *s, ps_key_t key)
{
    sum_key_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    /* One allocation for the three bitmaps and the pull counters. */
    size_t w = s->words;
    uint64_t *bits = calloc(3 * w + (size_t)s->n, sizeof(uint64_t));
    if (!bits || ps_mutex_init(&k->lock) != PS_OK) {
        free(bits);
        free(k);
        return NULL;
    }
    k->pushed_by = bits;
    k->pulled_by = bits + w;
    k->init_by = bits + 2 * w;
    k->next_pull = bits + 3 * w;
    if (ps_slice_alloc(sizeof(key), 0, &k->key_slice) != PS_OK) {
        free(bits);
        ps_mutex_destroy(&k->lock);
        free(k);
        return NULL;
    }
    memcpy(ps_slice_ptr(&k->key_slice), &key, sizeof(key));
    k->key = key;
    k->engine = -1;
    k->inited = !s->opts.byteps_init;
    ps__sum_queue_init(&k->queue);
    return k;
}

static sum_key_t *key_get(ps_sum_t *s, ps_key_t key)
{
    ps_mutex_lock(&s->table_lock);
    size_t b = hash_key(key, s->nbuckets);
    sum_key_t *k;
    for (k = s->buckets[b]; k; k = k->hnext)
        if (k->key == key)
            break;
    if (!k && (k = key_new(s, key)) != NULL) {
        if (s->nkeys >= s->nbuckets) {
            /* Grow (load factor 1); on failure keep the longer chains. */
            size_t nb = 2 * s->nbuckets;
            sum_key_t **nbk = calloc(nb, sizeof(*nbk));
            if (nbk) {
                for (size_t i = 0; i < s->nbuckets; i++) {
                    for (sum_key_t *x = s->buckets[i], *nx; x; x = nx) {
                        nx = x->hnext;
                        size_t h = hash_key(x->key, nb);
                        x->hnext = nbk[h];
                        nbk[h] = x;
                    }
                }
                free(s->buckets);
                s->buckets = nbk;
                s->nbuckets = nb;
                b = hash_key(key, nb);
            }
        }
        k->hnext = s->buckets[b];
        s->buckets[b] = k;
        s->nkeys++;
    }
    ps_mutex_unlock(&s->table_lock);
    return k;
}

/* Every key, for sweeps (keys are never freed before destroy). */
static sum_key_t **keys_snapshot(ps_sum_t *s, size_t *n_p)
{
    ps_mutex_lock(&s->table_lock);
    sum_key_t **v = malloc((s->nkeys ? s->nkeys : 1) * sizeof(*v));
    size_t n = 0;
    if (v) {
        for (size_t i = 0; i < s->nbuckets; i++)
            for (sum_key_t *k = s->buckets[i]; k; k = k->hnext)
                v[n++] = k;
    }
    ps_mutex_unlock(&s->table_lock);
    *n_p = n;
    return v;
}

/* ---- waiting pulls ---- */

static void queue_pull(ps_sum_t *s, sum_key_t *k, int worker, uint64_t round,
                       const ps_kv_meta_t *meta, ps_kv_server_t *server, replies_t *r)
{
    sum_pull_t *p = malloc(sizeof(*p));
    if (!p) {
        ps_error(PS_LOG_APP, "sum: out of memory: pull of key %llu by node %d answered with no value",
                 (unsigned long long)k->key, meta->sender);
        STAT_ADD(s, pulls_failed, 1);
        reply_add(r, REPLY_FAIL, meta, server, &k->key_slice, NULL, k->type);
        return;
    }
    p->next = NULL;
    p->meta = *meta;
    p->server = server;
    p->round = round;
    p->worker = worker;
    if (k->wait_tail)
        k->wait_tail->next = p;
    else
        k->wait_head = p;
    k->wait_tail = p;
    STAT_ADD(s, pulls_waited, 1);
}

/* Takes waiting pulls out of the list: all of them (match NULL) or those
 * `match` accepts, answering each with `kind`. */
static void answer_waiting(ps_sum_t *s, sum_key_t *k, int kind, const ps_slice_t *vals,
                           int (*match)(sum_key_t *, sum_pull_t *), replies_t *r)
{
    sum_pull_t **pp = &k->wait_head;
    k->wait_tail = NULL;
    while (*pp) {
        sum_pull_t *p = *pp;
        if (match && !match(k, p)) {
            k->wait_tail = p;
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        reply_add(r, kind, &p->meta, p->server, &k->key_slice, vals, k->type);
        STAT_ADD(s, pulls, kind == REPLY_VALUE);
        STAT_ADD(s, pulls_failed, kind == REPLY_FAIL);
        free(p);
    }
}

/* A waiting pull for the result just promoted (round - 1), from a worker
 * that has not had it: marks it pulled. */
static int match_out_round(sum_key_t *k, sum_pull_t *p)
{
    if (p->round + 1 != k->round || bit_get(k->pulled_by, p->worker))
        return 0;
    bit_set(k->pulled_by, p->worker);
    k->npulled++;
    return 1;
}

/* ---- sync rounds ---- */

static void join_round(ps_sum_t *s, sum_key_t *k, int worker, ps_slice_t *data, replies_t *r);
static void advance(ps_sum_t *s, sum_key_t *k, replies_t *r);
static void refuse(ps_sum_t *s, const ps_kv_meta_t *meta, const char *why, unsigned long long key);

/* The rank of the worker (of this server's instance) node `id` is, or -1.
 * Without a postoffice (tests) a worker's rank is its node rank. */
static int sum_worker_rank(const ps_sum_t *s, int id)
{
    if (ps_id_is_group(id) || ps_id_to_role(id) != PS_ROLE_WORKER)
        return -1;
    int w = s->po ? ps_postoffice_peer_rank(s->po, id) : ps_id_to_rank(id);
    return w >= 0 && w < s->n ? w : -1;
}

static void free_held(sum_held_t **head, sum_held_t **tail)
{
    for (sum_held_t *h = *head, *n; h; h = n) {
        n = h->next;
        ps_slice_unref(&h->data);
        free(h);
    }
    *head = NULL;
    if (tail)
        *tail = NULL;
}

/* The key needs a worker that is gone: fail what waits, now and later. */
static void key_break(ps_sum_t *s, sum_key_t *k, int gone, replies_t *r)
{
    k->broken = 1;
    STAT_ADD(s, keys_failed, 1);
    size_t waiting = 0;
    for (sum_pull_t *p = k->wait_head; p; p = p->next)
        waiting++;
    ps_warn_ratelimited(PS_LOG_APP,
                        "sum: key %llu round %llu failed: worker %d is gone (%d of %d pushed); "
                        "%zu waiting pulls and every later one answered with no value",
                        (unsigned long long)k->key, (unsigned long long)k->round, gone,
                        k->npushed, s->n, waiting);
    answer_waiting(s, k, REPLY_FAIL, NULL, NULL, r);
    free_held(&k->held_head, &k->held_tail);
    /* Init pushes waiting for the others: acknowledged (their values are
     * of no use now), an init push-pull answered with no value. */
    for (sum_held_t *h = k->init_acks; h; h = h->next) {
        if (h->has_pull) {
            STAT_ADD(s, pulls_failed, 1);
            reply_add(r, REPLY_FAIL, &h->meta, h->server, &k->key_slice, NULL, k->type);
        } else {
            reply_add(r, REPLY_ACK, &h->meta, h->server, NULL, NULL, k->type);
        }
    }
    free_held(&k->init_acks, NULL);
}

/* Breaks the key when its round (or its init) still needs a dead worker. */
static void check_break(ps_sum_t *s, sum_key_t *k, replies_t *r)
{
    if (atomic_load(&s->ndead) == 0 || k->broken || s->opts.async_mode)
        return;
    const uint64_t *need = !k->inited ? k->init_by : k->complete ? NULL : k->pushed_by;
    if (!need)
        return;
    for (int w = 0; w < s->n; w++) {
        if (dead_get(s, w) && !bit_get(need, w)) {
            key_break(s, k, w, r);
            return;
        }
    }
}

static int all_live_pulled(ps_sum_t *s, const sum_key_t *k)
{
    if (k->npulled >= s->n)
        return 1;
    for (int w = 0; w < s->n; w++)
        if (!bit_get(k->pulled_by, w) && !dead_get(s, w))
            return 0;
    return 1;
}

static void retire_out(ps_sum_t *s, sum_key_t *k)
{
    if (k->out_owned) {
        ps_slice_unref(&k->spare);
        k->spare = slice_take(&k->out);
    } else {
        ps_slice_unref(&k->out);
    }
    k->has_out = 0;
    k->npulled = 0;
    memset(k->pulled_by, 0, s->words * sizeof(uint64_t));
}

/* The complete round becomes the pulled result; the next round starts with
 * the pushes held for it. */
static void promote(ps_sum_t *s, sum_key_t *k, replies_t *r)
{
    size_t words = s->words;
    k->out = slice_take(&k->result);
    k->out_owned = k->result_owned;
    k->has_out = 1;
    k->npulled = 0;
    memset(k->pulled_by, 0, words * sizeof(uint64_t));
    k->round++;
    k->npushed = 0;
    k->napplied = 0;
    k->complete = 0;
    memset(k->pushed_by, 0, words * sizeof(uint64_t));

    answer_waiting(s, k, REPLY_VALUE, &k->out, match_out_round, r);

    /* Replay the held pushes, in arrival order, into the new round. */
    sum_held_t **hp = &k->held_head;
    k->held_tail = NULL;
    while (*hp) {
        sum_held_t *h = *hp;
        if (k->complete || k->broken || bit_get(k->pushed_by, h->worker)) {
            k->held_tail = h;
            hp = &h->next;
            continue;
        }
        *hp = h->next;
        if (h->has_pull) {
            /* Queued first: the round's completion answers it. */
            k->next_pull[h->worker] = k->round + 1;
            queue_pull(s, k, h->worker, k->round, &h->meta, h->server, r);
        }
        join_round(s, k, h->worker, &h->data, r);
        free(h);
        if (k->broken)
            break; /* key_break freed the rest of the list */
    }
}

/* Moves the key's state forward as far as it goes. Not re-entered: a
 * round completed inline while it runs (blocking mode, replaying held
 * pushes) is only marked, and this loop promotes it. */
static void advance(ps_sum_t *s, sum_key_t *k, replies_t *r)
{
    if (k->advancing)
        return;
    k->advancing = 1;
    for (;;) {
        if (k->has_out && all_live_pulled(s, k))
            retire_out(s, k);
        if (!k->has_out && k->complete && !k->broken) {
            promote(s, k, r);
            continue;
        }
        break;
    }
    check_break(s, k, r);
    k->advancing = 0;
}

static void finish_round(ps_sum_t *s, sum_key_t *k, replies_t *r)
{
    k->complete = 1;
    STAT_ADD(s, rounds, 1);
    debug_values(s, k, "complete", ps_slice_ptr(&k->result), k->result.len);
    advance(s, k, r);
}

/* A store buffer for the round's sum: the retired one when the transport
 * is done with it, else a new page-aligned one. */
static ps_status_t take_store(ps_sum_t *s, sum_key_t *k, ps_slice_t *slice_p)
{
    if (k->spare.buf && k->spare.len == k->len && slice_exclusive(&k->spare)) {
        *slice_p = slice_take(&k->spare);
        return PS_OK;
    }
    ps_slice_unref(&k->spare);
    ps_status_t st = ps_slice_alloc(k->len, STORE_ALIGN, slice_p);
    if (st == PS_OK)
        STAT_ADD(s, stores, 1);
    return st;
}

/* Applies one push of round `round` (owning *data). `locked`: the caller
 * holds the key lock (blocking mode), else it is taken here and released
 * around the sum. */
static void apply_push(ps_sum_t *s, sum_key_t *k, ps_slice_t *data, uint64_t round, int locked,
                       replies_t *r)
{
    if (!locked)
        ps_mutex_lock(&k->lock);
    if (k->broken || round != k->round || k->complete) {
        ps_slice_unref(data);
        goto out;
    }
    debug_values(s, k, "push", ps_slice_ptr(data), data->len);
    if (k->napplied == 0) {
        k->napplied = 1;
        if (s->n == 1) {
            k->result = slice_take(data);
            k->result_owned = 0;
            finish_round(s, k, r);
        } else {
            k->first = slice_take(data);
        }
        goto out;
    }
    if (!k->acc.buf) {
        ps_status_t st = take_store(s, k, &k->acc);
        if (st != PS_OK) {
            ps_error(PS_LOG_APP, "sum: key %llu: no memory for a %zu-byte store",
                     (unsigned long long)k->key, k->len);
            ps_slice_unref(data);
            key_break(s, k, -1, r);
            goto out;
        }
    }
    ps_slice_t first = slice_take(&k->first);
    void *dst = ps_slice_ptr(&k->acc);
    if (!locked)
        ps_mutex_unlock(&k->lock);
    /* Type and lengths were checked when the push was accepted. */
    if (first.buf)
        (void)ps_kv_sum3(k->type, dst, ps_slice_ptr(&first), ps_slice_ptr(data), k->len);
    else
        (void)ps_kv_sum(k->type, dst, ps_slice_ptr(data), k->len);
    if (!locked)
        ps_mutex_lock(&k->lock);
    ps_slice_unref(&first);
    ps_slice_unref(data);
    k->napplied++;
    if (!k->broken && k->napplied == s->n) {
        k->result = slice_take(&k->acc);
        k->result_owned = 1;
        finish_round(s, k, r);
    }
out:
    if (!locked)
        ps_mutex_unlock(&k->lock);
}

/* Counts a push into the current round (key lock held) and has it applied:
 * inline in blocking mode, else by the key's engine thread. */
static void join_round(ps_sum_t *s, sum_key_t *k, int worker, ps_slice_t *data, replies_t *r)
{
    bit_set(k->pushed_by, worker);
    k->npushed++;
    if (!s->engine) {
        apply_push(s, k, data, k->round, 1, r);
        return;
    }
    ps__sum_item_t *item = malloc(sizeof(*item));
    ps_status_t st = PS_ERR_NO_MEMORY;
    if (item) {
        *item = (ps__sum_item_t){
            .queue = &k->queue,
            .id = atomic_fetch_add(&s->next_id, 1),
            .key = k,
            .data = slice_take(data),
            .round = k->round,
            .worker = worker,
        };
        st = ps__sum_engine_push(s->engine, k->engine, item);
    }
    if (st != PS_OK) {
        ps_error(PS_LOG_APP, "sum: key %llu: push not queued: %s", (unsigned long long)k->key,
                 ps_status_str(st));
        if (item) {
            ps_slice_unref(&item->data);
            free(item);
        }
        ps_slice_unref(data);
        key_break(s, k, -1, r);
        return;
    }
    if (s->opts.schedule && k->npushed == s->n)
        ps__sum_engine_clear_count(s->engine, k->engine, &k->queue);
}

static void engine_apply(void *arg, ps__sum_item_t *item, int discard)
{
    ps_sum_t *s = arg;
    if (discard) {
        ps_slice_unref(&item->data);
        free(item);
        return;
    }
    replies_t r;
    replies_init(&r);
    apply_push(s, item->key, &item->data, item->round, 0, &r);
    free(item);
    replies_send(s, &r);
}

static sum_held_t *held_new(int worker, const ps_slice_t *data, const ps_kv_meta_t *meta,
                            ps_kv_server_t *server, int has_pull)
{
    sum_held_t *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->data = ps_slice_ref(data);
    h->worker = worker;
    h->has_pull = has_pull;
    h->meta = *meta;
    h->server = server;
    return h;
}

/* A sync push or push-pull (key lock held). */
static void sync_push(ps_sum_t *s, sum_key_t *k, int worker, const ps_slice_t *data,
                      const ps_kv_meta_t *meta, ps_kv_server_t *server, replies_t *r)
{
    int pushpull = meta->push && meta->pull;
    if (k->broken) {
        if (pushpull) {
            STAT_ADD(s, pulls_failed, 1);
            reply_add(r, REPLY_FAIL, meta, server, &k->key_slice, NULL, k->type);
        } else {
            reply_add(r, REPLY_ACK, meta, server, NULL, NULL, k->type);
        }
        return;
    }
    if (k->complete || bit_get(k->pushed_by, worker)) {
        /* For a later round: held, applied when the round turns. */
        sum_held_t *h = held_new(worker, data, meta, server, pushpull);
        if (!h) {
            ps_error(PS_LOG_APP, "sum: out of memory holding a push of key %llu",
                     (unsigned long long)k->key);
            STAT_ADD(s, refused, 1);
            return;
        }
        if (k->held_tail)
            k->held_tail->next = h;
        else
            k->held_head = h;
        k->held_tail = h;
        STAT_ADD(s, pushes_held, 1);
        if (!pushpull)
            reply_add(r, REPLY_ACK, meta, server, NULL, NULL, k->type);
        return;
    }
    ps_slice_t d = ps_slice_ref(data);
    if (pushpull) {
        /* Its pull is for the round its push joins; queued first so that
         * the round's completion (maybe inline, below) answers it. */
        k->next_pull[worker] = k->round + 1;
        queue_pull(s, k, worker, k->round, meta, server, r);
    } else {
        reply_add(r, REPLY_ACK, meta, server, NULL, NULL, k->type);
    }
    join_round(s, k, worker, &d, r);
    if (pushpull)
        advance(s, k, r);
}

static void sync_pull(ps_sum_t *s, sum_key_t *k, int worker, const ps_kv_meta_t *meta,
                      ps_kv_server_t *server, replies_t *r)
{
    uint64_t q = k->next_pull[worker]++;
    if (k->has_out && q + 1 == k->round && !bit_get(k->pulled_by, worker)) {
        bit_set(k->pulled_by, worker);
        k->npulled++;
        STAT_ADD(s, pulls, 1);
        reply_add(r, REPLY_VALUE, meta, server, &k->key_slice, &k->out, k->type);
        advance(s, k, r);
        return;
    }
    if (q + 1 < k->round || (q + 1 == k->round && !k->has_out) || k->broken) {
        if (!k->broken)
            ps_warn_ratelimited(PS_LOG_APP,
                                "sum: pull of key %llu by node %d is for round %llu, which is over",
                                (unsigned long long)k->key, meta->sender, (unsigned long long)q);
        STAT_ADD(s, pulls_failed, 1);
        reply_add(r, REPLY_FAIL, meta, server, &k->key_slice, NULL, k->type);
        return;
    }
    queue_pull(s, k, worker, q, meta, server, r);
    advance(s, k, r);
}

/* ---- async ---- */

static void async_push(ps_sum_t *s, sum_key_t *k, const ps_slice_t *data, replies_t *r)
{
    if (!k->store.buf || !slice_exclusive(&k->store)) {
        /* First push, or an answer still references the store: sum (or
         * copy) into another buffer and keep the old one as the spare. */
        ps_slice_t fresh;
        if (take_store(s, k, &fresh) != PS_OK) {
            ps_error(PS_LOG_APP, "sum: key %llu: no memory for a %zu-byte store; push dropped",
                     (unsigned long long)k->key, k->len);
            return;
        }
        if (k->store.buf)
            (void)ps_kv_sum3(k->type, ps_slice_ptr(&fresh), ps_slice_ptr(&k->store),
                             ps_slice_ptr(data), k->len);
        else
            memcpy(ps_slice_ptr(&fresh), ps_slice_ptr(data), k->len);
        ps_slice_unref(&k->spare);
        k->spare = slice_take(&k->store);
        k->store = fresh;
    } else {
        (void)ps_kv_sum(k->type, ps_slice_ptr(&k->store), ps_slice_ptr(data), k->len);
    }
    debug_values(s, k, "async store", ps_slice_ptr(&k->store), k->len);
    answer_waiting(s, k, REPLY_VALUE, &k->store, NULL, r);
}

/* ---- init round (byteps_init) ---- */

static void init_push(ps_sum_t *s, sum_key_t *k, int worker, const ps_slice_t *data,
                      const ps_kv_meta_t *meta, ps_kv_server_t *server, replies_t *r)
{
    if (bit_get(k->init_by, worker)) {
        /* This worker already initialised the key: in sync mode a push of
         * round 0 (which may start before the init ends); async mode has no
         * store to sum into yet. */
        if (!s->opts.async_mode)
            sync_push(s, k, worker, data, meta, server, r);
        else
            refuse(s, meta, "second push before every worker initialised the key", k->key);
        return;
    }
    sum_held_t *h = held_new(worker, data, meta, server, meta->push && meta->pull);
    if (!h) {
        STAT_ADD(s, refused, 1);
        return;
    }
    h->next = k->init_acks; /* the order of the acknowledgements does not matter */
    k->init_acks = h;
    bit_set(k->init_by, worker);
    k->ninit++;
    ps_slice_unref(&k->init_data);
    k->init_data = ps_slice_ref(data); /* the last one wins, as upstream */
    if (k->ninit < s->n) {
        check_break(s, k, r);
        return;
    }
    if (s->opts.async_mode)
        async_push(s, k, &k->init_data, r);
    ps_slice_unref(&k->init_data);
    k->inited = 1;
    for (sum_held_t *n; (h = k->init_acks) != NULL; k->init_acks = n) {
        n = h->next;
        if (h->has_pull) {
            /* Its pull waits for round 0 like a plain pull. */
            if (s->opts.async_mode)
                reply_add(r, REPLY_VALUE, &h->meta, h->server, &k->key_slice, &k->store,
                          k->type);
            else
                sync_pull(s, k, h->worker, &h->meta, h->server, r);
        } else {
            reply_add(r, REPLY_ACK, &h->meta, h->server, NULL, NULL, k->type);
        }
        ps_slice_unref(&h->data);
        free(h);
    }
    if (!s->opts.async_mode)
        advance(s, k, r);
}

/* ---- the handler ---- */

static int enter(ps_sum_t *s)
{
    ps_mutex_lock(&s->life_lock);
    int ok = !s->closing;
    if (ok)
        s->active++;
    ps_mutex_unlock(&s->life_lock);
    return ok;
}

static void leave(ps_sum_t *s)
{
    ps_mutex_lock(&s->life_lock);
    if (--s->active == 0 && s->closing)
        ps_cond_broadcast(&s->life_cond);
    ps_mutex_unlock(&s->life_lock);
}

static void refuse(ps_sum_t *s, const ps_kv_meta_t *meta, const char *why, unsigned long long key)
{
    STAT_ADD(s, refused, 1);
    ps_warn_ratelimited(PS_LOG_APP,
                        "sum: refused %s ts %d of key %llu from node %d: %s (not answered)",
                        meta->push ? "push" : "pull", meta->timestamp, key, meta->sender, why);
}

void ps_sum_handler(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                    ps_kv_server_t *server)
{
    ps_sum_t *s = arg;
    replies_t r;
    replies_init(&r);

    if (!enter(s)) {
        /* Shutting down: a pull must not wait for a server that leaves. */
        if (meta->pull) {
            STAT_ADD(s, pulls_failed, 1);
            reply_add(&r, REPLY_FAIL, meta, server, &req->keys, NULL, req->type);
            replies_send(s, &r);
        }
        return;
    }

    ps_key_t key = 0;
    if (req->keys.len != sizeof(ps_key_t)) {
        refuse(s, meta, "one key per request", meta->key);
        goto out;
    }
    memcpy(&key, ps_slice_ptr(&req->keys), sizeof(key));
    ps_data_type_t type;
    ps_status_t st = ps_sum_cmd_resolve(meta->cmd, req->type, &type);
    if (st != PS_OK) {
        refuse(s, meta, st == PS_ERR_UNSUPPORTED ? "command or data type not supported"
                                                 : "data type contradicts the command",
               key);
        goto out;
    }
    int worker = sum_worker_rank(s, meta->sender);
    if (worker < 0) {
        refuse(s, meta, "not from a worker of this job", key);
        goto out;
    }
    size_t es = ps_data_type_size(type);
    if (meta->push && (req->vals.len == 0 || req->vals.len % es != 0)) {
        refuse(s, meta, "value length not a positive multiple of the element size", key);
        goto out;
    }

    sum_key_t *k = key_get(s, key);
    if (!k) {
        ps_error(PS_LOG_APP, "sum: out of memory for key %llu", (unsigned long long)key);
        STAT_ADD(s, refused, 1);
        goto out;
    }
    if (s->opts.log_keys)
        ps_info(PS_LOG_APP, "sum: %s key %llu from worker %d, %zu bytes",
                meta->push ? (meta->pull ? "push-pull" : "push") : "pull",
                (unsigned long long)key, worker, req->vals.len);

    ps_mutex_lock(&k->lock);
    if (meta->push) {
        if (!k->shaped) {
            k->shaped = 1;
            k->len = req->vals.len;
            k->type = type;
            if (s->engine)
                k->engine = ps__sum_engine_pin(s->engine, k->len);
        } else if (k->len != req->vals.len || k->type != type) {
            ps_mutex_unlock(&k->lock);
            refuse(s, meta, "length or type differs from the key's first push", key);
            goto out;
        }
        STAT_ADD(s, pushes, 1);
        STAT_ADD(s, push_bytes, req->vals.len);
        if (!k->inited) {
            init_push(s, k, worker, &req->vals, meta, server, &r);
        } else if (s->opts.async_mode) {
            async_push(s, k, &req->vals, &r);
            if (meta->pull)
                reply_add(&r, REPLY_VALUE, meta, server, &k->key_slice, &k->store, k->type);
            else
                reply_add(&r, REPLY_ACK, meta, server, NULL, NULL, k->type);
            if (meta->pull)
                STAT_ADD(s, pulls, 1);
        } else {
            sync_push(s, k, worker, &req->vals, meta, server, &r);
        }
    } else if (s->opts.async_mode) {
        if (k->store.buf) {
            STAT_ADD(s, pulls, 1);
            reply_add(&r, REPLY_VALUE, meta, server, &k->key_slice, &k->store, k->type);
        } else {
            queue_pull(s, k, worker, 0, meta, server, &r);
        }
    } else {
        sync_pull(s, k, worker, meta, server, &r);
    }
    ps_mutex_unlock(&k->lock);

out:
    replies_send(s, &r);
    leave(s);
}

/* ---- dead workers ---- */

void ps_sum_worker_gone(ps_sum_t *s, int node_id)
{
    int w = s ? sum_worker_rank(s, node_id) : -1;
    if (w < 0)
        return;
    uint64_t bit = 1ull << (w % 64);
    if (__atomic_fetch_or(&s->dead[w / 64], bit, __ATOMIC_ACQ_REL) & bit)
        return;
    atomic_fetch_add(&s->ndead, 1);
    STAT_ADD(s, workers_gone, 1);
    if (s->opts.async_mode) {
        ps_warn(PS_LOG_APP, "sum: worker %d (node %d) is gone", w, node_id);
        return;
    }

    size_t n;
    sum_key_t **keys = keys_snapshot(s, &n);
    uint64_t failed_before = atomic_load(&s->st.keys_failed);
    for (size_t i = 0; keys && i < n; i++) {
        replies_t r;
        replies_init(&r);
        ps_mutex_lock(&keys[i]->lock);
        advance(s, keys[i], &r);
        ps_mutex_unlock(&keys[i]->lock);
        replies_send(s, &r);
    }
    free(keys);
    ps_error(PS_LOG_APP,
             "sum: worker %d (node %d) is gone: %llu of %zu keys failed (their rounds need it)",
             w, node_id, (unsigned long long)(atomic_load(&s->st.keys_failed) - failed_before), n);
}

/* The postoffice's node-failed callback (a postoffice thread; must not
 * block): queues the worker for the gone thread, which takes key locks and
 * sends the answers. Async mode only marks it (nothing waits for it). */
static void on_node_failed(void *arg, ps_postoffice_t *po, int node_id, ps_status_t why)
{
    (void)po;
    ps_sum_t *s = arg;
    if (ps_id_is_group(node_id) || ps_id_to_role(node_id) != PS_ROLE_WORKER)
        return;
    ps_info(PS_LOG_APP, "sum: the postoffice reports worker node %d failed (%s)", node_id,
            ps_status_str(why));
    if (s->opts.async_mode) {
        ps_sum_worker_gone(s, node_id);
        return;
    }
    ps_mutex_lock(&s->watch_lock);
    if (s->ngone == s->gone_cap) {
        size_t cap = s->gone_cap ? s->gone_cap * 2 : 16;
        int *ids = realloc(s->gone_ids, cap * sizeof(int));
        if (!ids) {
            ps_mutex_unlock(&s->watch_lock);
            /* Rare enough to do it here rather than lose the failure. */
            ps_sum_worker_gone(s, node_id);
            return;
        }
        s->gone_ids = ids;
        s->gone_cap = cap;
    }
    s->gone_ids[s->ngone++] = node_id;
    ps_cond_signal(&s->watch_cond);
    ps_mutex_unlock(&s->watch_lock);
}

static void *watch_main(void *arg)
{
    ps_sum_t *s = arg;
    ps_mutex_lock(&s->watch_lock);
    while (!s->watch_stop) {
        if (s->ngone == 0) {
            ps_cond_wait(&s->watch_cond, &s->watch_lock, ps_deadline_infinite());
            continue;
        }
        int id = s->gone_ids[--s->ngone];
        ps_mutex_unlock(&s->watch_lock);
        ps_sum_worker_gone(s, id);
        ps_mutex_lock(&s->watch_lock);
    }
    ps_mutex_unlock(&s->watch_lock);
    return NULL;
}

/* ---- lifecycle ---- */

ps_status_t ps_sum_create(const ps_sum_options_t *opts, ps_postoffice_t *po, ps_sum_t **sum_p)
{
    if (!sum_p)
        return PS_ERR_INVALID_ARG;
    ps_sum_options_t o;
    ps_status_t st;
    if (opts)
        o = *opts;
    else if ((st = ps_sum_options_from_env(&o)) != PS_OK)
        return st;
    int n = o.num_workers > 0 ? o.num_workers : po ? ps_postoffice_num_workers(po) : 0;
    if (n <= 0 || n > MAX_WORKERS || o.engine_threads < 1) {
        ps_error(PS_LOG_APP, "sum: %d workers and %d engine threads: expected 1 to %d workers "
                 "(from the options or the postoffice) and at least one thread",
                 n, o.engine_threads, MAX_WORKERS);
        return PS_ERR_INVALID_ARG;
    }

    ps_sum_t *s = calloc(1, sizeof(*s));
    if (!s)
        return PS_ERR_NO_MEMORY;
    s->opts = o;
    s->n = n;
    s->words = ((size_t)n + 63) / 64;
    s->po = po;
    s->respond = default_respond;
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->dead = calloc(s->words, sizeof(uint64_t));
    st = PS_ERR_NO_MEMORY;
    if (!s->buckets || !s->dead || ps_slice_alloc(sizeof(int32_t), 0, &s->zero_len) != PS_OK)
        goto fail_alloc;
    memset(ps_slice_ptr(&s->zero_len), 0, sizeof(int32_t));
    if ((st = ps_mutex_init(&s->table_lock)) != PS_OK)
        goto fail_alloc;
    if ((st = ps_mutex_init(&s->life_lock)) != PS_OK)
        goto fail_table;
    if ((st = ps_cond_init(&s->life_cond)) != PS_OK)
        goto fail_life;
    if ((st = ps_mutex_init(&s->watch_lock)) != PS_OK)
        goto fail_life_cond;
    if ((st = ps_cond_init(&s->watch_cond)) != PS_OK)
        goto fail_watch;
    if (!o.async_mode && !o.engine_blocking &&
        (st = ps__sum_engine_create(o.engine_threads, o.schedule, engine_apply, s, &s->engine)) !=
            PS_OK)
        goto fail_watch_cond;
    if (po && !o.async_mode) {
        s->watching = 1;
        if ((st = ps_thread_create("ps-sum-gone", PS_THREAD_NO_CPU, watch_main, s, &s->watcher)) !=
            PS_OK) {
            s->watching = 0;
            goto fail_engine;
        }
    }
    if (po) {
        /* Told at once when a worker dies; the ones dead already are read
         * after registering, so that none is missed in between. */
        if ((st = ps_postoffice_on_node_failed(po, on_node_failed, s)) != PS_OK) {
            ps_error(PS_LOG_APP, "sum: cannot register for node failures: %s",
                     ps_status_str(st));
            goto fail_thread;
        }
        s->registered = 1;
        int ids[64];
        int nd = ps_postoffice_dead_nodes(po, ids, 64);
        for (int i = 0; i < nd && i < 64; i++)
            ps_sum_worker_gone(s, ids[i]);
        if (nd > 64)
            ps_warn(PS_LOG_APP, "sum: %d nodes dead at start; only the first 64 marked", nd);
    }
    ps_info(PS_LOG_APP, "sum: %d workers, %s mode, %s%s, kernels %s", n,
            o.async_mode ? "async" : "sync",
            o.async_mode || o.engine_blocking ? "summing in the handler" : "engine threads",
            o.schedule && s->engine ? " with priority scheduling" : "",
            ps_kv_sum_level_name(ps_kv_sum_level()));
    *sum_p = s;
    return PS_OK;

fail_thread:
    if (s->watching) {
        ps_mutex_lock(&s->watch_lock);
        s->watch_stop = 1;
        ps_cond_broadcast(&s->watch_cond);
        ps_mutex_unlock(&s->watch_lock);
        ps_thread_join(&s->watcher, NULL);
    }
fail_engine:
    ps__sum_engine_destroy(s->engine);
fail_watch_cond:
    ps_cond_destroy(&s->watch_cond);
fail_watch:
    ps_mutex_destroy(&s->watch_lock);
fail_life_cond:
    ps_cond_destroy(&s->life_cond);
fail_life:
    ps_mutex_destroy(&s->life_lock);
fail_table:
    ps_mutex_destroy(&s->table_lock);
fail_alloc:
    ps_slice_unref(&s->zero_len);
    free(s->buckets);
    free(s->dead);
    free(s);
    return st;
}

void ps_sum_set_responder(ps_sum_t *s, ps_sum_respond_func_t fn, void *arg)
{
    if (!s)
        return;
    s->respond = fn ? fn : default_respond;
    s->respond_arg = fn ? arg : NULL;
}

ps_status_t ps_sum_flush(ps_sum_t *s, int timeout_ms)
{
    if (!s)
        return PS_ERR_INVALID_ARG;
    if (!s->engine)
        return PS_OK;
    return ps__sum_engine_wait_idle(s->engine, ps_deadline_from_ms(timeout_ms));
}

void ps_sum_stats(ps_sum_t *s, ps_sum_stats_t *stats_p)
{
    if (!s || !stats_p)
        return;
    ps_sum_stats_t x = {
        .pushes = atomic_load(&s->st.pushes),
        .push_bytes = atomic_load(&s->st.push_bytes),
        .pulls = atomic_load(&s->st.pulls),
        .rounds = atomic_load(&s->st.rounds),
        .pulls_waited = atomic_load(&s->st.pulls_waited),
        .pushes_held = atomic_load(&s->st.pushes_held),
        .pulls_failed = atomic_load(&s->st.pulls_failed),
        .keys_failed = atomic_load(&s->st.keys_failed),
        .refused = atomic_load(&s->st.refused),
        .stores = atomic_load(&s->st.stores),
        .workers_gone = atomic_load(&s->st.workers_gone),
    };
    ps_mutex_lock(&s->table_lock);
    x.keys = s->nkeys;
    ps_mutex_unlock(&s->table_lock);
    *stats_p = x;
}

/* The deadline of a teardown call given timeout_ms (< 0: the postoffice's
 * finalize_timeout_ms, or PS_FINALIZE_TIMEOUT_MS without one). */
static ps_deadline_t shutdown_deadline(const ps_sum_t *s, int timeout_ms)
{
    if (timeout_ms < 0 && s->po != NULL)
        timeout_ms = ps_postoffice_finalize_timeout_ms(s->po);
    if (timeout_ms < 0) {
        int64_t v = -1;
        (void)ps_config_get_int(PS_CFG_PS_FINALIZE_TIMEOUT_MS, &v);
        timeout_ms = v < 0 ? PS_TEARDOWN_DEFAULT_MS : v > INT_MAX ? INT_MAX : (int)v;
    }
    return ps_deadline_from_ms(timeout_ms);
}

ps_status_t ps_sum_shutdown_timed(ps_sum_t *s, int timeout_ms)
{
    if (!s)
        return PS_ERR_INVALID_ARG;
    ps_deadline_t deadline = shutdown_deadline(s, timeout_ms);
    ps_mutex_lock(&s->life_lock);
    s->closing = 1;
    /* Handlers in progress finish first; so does another shutdown. */
    while ((s->active > 0 || s->shut_state == SHUT_RUNNING) && !ps_deadline_expired(deadline))
        (void)ps_cond_wait(&s->life_cond, &s->life_lock, deadline);
    if (s->shut_state == SHUT_DONE) {
        ps_mutex_unlock(&s->life_lock);
        return PS_OK;
    }
    if (s->active > 0 || s->shut_state == SHUT_RUNNING) {
        int active = s->active;
        ps_mutex_unlock(&s->life_lock);
        ps_warn(PS_LOG_APP, "sum: %d handler calls still run at the shutdown's deadline", active);
        return PS_ERR_TIMED_OUT;
    }
    s->shut_state = SHUT_RUNNING;
    ps_mutex_unlock(&s->life_lock);

    if (s->registered) {
        /* When this returns PS_OK no callback runs any more. */
        int64_t left = ps_deadline_remaining_ns(deadline);
        int ms = left < 0 ? -1 : (int)(left / 1000000);
        if (ps_postoffice_remove_node_callback_timed(s->po, on_node_failed, s,
                                                     ms < 0 ? INT_MAX : ms) != PS_OK) {
            ps_mutex_lock(&s->life_lock);
            s->shut_state = SHUT_OPEN;
            ps_cond_broadcast(&s->life_cond);
            ps_mutex_unlock(&s->life_lock);
            ps_warn(PS_LOG_APP, "sum: its node-failure callback still runs at the shutdown's "
                    "deadline");
            return PS_ERR_TIMED_OUT;
        }
        s->registered = 0;
    }
    ps_mutex_lock(&s->watch_lock);
    int watching = s->watching;
    ps_mutex_unlock(&s->watch_lock);
    if (watching) {
        ps_mutex_lock(&s->watch_lock);
        s->watch_stop = 1;
        s->watching = 0;
        ps_cond_broadcast(&s->watch_cond);
        ps_mutex_unlock(&s->watch_lock);
        ps_thread_join(&s->watcher, NULL);
    }
    /* Engine threads finish the push in hand (its answers go out); the
     * queued ones are dropped. */
    ps__sum_engine_destroy(s->engine);
    s->engine = NULL;

    size_t n;
    sum_key_t **keys = keys_snapshot(s, &n);
    size_t answered = 0;
    for (size_t i = 0; keys && i < n; i++) {
        replies_t r;
        replies_init(&r);
        ps_mutex_lock(&keys[i]->lock);
        answer_waiting(s, keys[i], REPLY_FAIL, NULL, NULL, &r);
        ps_mutex_unlock(&keys[i]->lock);
        answered += r.n;
        replies_send(s, &r);
    }
    free(keys);
    if (answered)
        ps_warn(PS_LOG_APP, "sum: shut down with %zu pulls waiting; answered them with no value",
                answered);
    ps_mutex_lock(&s->life_lock);
    s->shut_state = SHUT_DONE;
    ps_cond_broadcast(&s->life_cond);
    ps_mutex_unlock(&s->life_lock);
    return PS_OK;
}

void ps_sum_shutdown(ps_sum_t *s)
{
    if (ps_sum_shutdown_timed(s, -1) == PS_ERR_TIMED_OUT)
        ps_error(PS_LOG_APP, "sum: shutdown gave up at its deadline; requests are refused, but "
                 "what is in progress goes on");
}


void ps_sum_destroy(ps_sum_t *s)
{
    if (!s)
        return;
    if (ps_sum_shutdown_timed(s, -1) != PS_OK) {
        /* A handler or callback still uses it. */
        ps_error(PS_LOG_APP, "sum: still in use at the shutdown's deadline; leaving it allocated");
        return;
    }
    for (size_t i = 0; i < s->nbuckets; i++) {
        for (sum_key_t *k = s->buckets[i], *n; k; k = n) {
            n = k->hnext;
            key_free(k);
        }
    }
    free(s->buckets);
    free(s->dead);
    free(s->gone_ids);
    ps_slice_unref(&s->zero_len);
    ps_cond_destroy(&s->watch_cond);
    ps_mutex_destroy(&s->watch_lock);
    ps_cond_destroy(&s->life_cond);
    ps_mutex_destroy(&s->life_lock);
    ps_mutex_destroy(&s->table_lock);
    free(s);
}

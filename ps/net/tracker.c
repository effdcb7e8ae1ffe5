/*
 * Request tracker: an open-addressing hash table (linear probing, keyed by
 * timestamp) of outstanding and failed requests, a free list of records, and
 * a ring that bounds how many failures are remembered. See
 * tracker_internal.h for the memory rule.
 */
#include "ps/net/tracker_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"

#define PS__TRACKER_INLINE_PEERS 8
#define PS__TRACKER_MIN_CAP 64
/* Timestamps live in [0, 2^31). */
#define PS__TS_MASK 0x7fffffffull
/* Requests failed per batch in fail_peer()/close(): the done functions run
 * between batches, without the lock. */
#define PS__FAIL_BATCH 64
/* Spinning: pause this many rounds before yielding the CPU. */
#define PS__SPIN_PAUSE_ROUNDS 128

typedef struct ps__req {
    int ts;
    int expected;
    int received;
    ps_status_t status; /* PS_INPROGRESS until the completion is published */
    int finishing;      /* completion decided; its done function is running */
    ps_status_t final_status;
    void *ctx;
    int num_peers;
    int peers_cap;      /* capacity of peers when heap-allocated, else 0 */
    int *peers;         /* inline_peers or a heap array */
    int inline_peers[PS__TRACKER_INLINE_PEERS];
    struct ps__req *next_free;
} ps__req_t;

typedef struct {
    ps__req_t *req;
    int ts;
    void *ctx;
    ps_status_t status;
} ps__done_t;

struct ps__tracker {
    ps_mutex_t lock;
    ps_cond_t cond;
    int sleepers;
    uint64_t spin_ns;
    uint64_t completions; /* atomic: bumped on every completion, for spinners */
    /* atomic: the request that completed successfully last (-1: none, or
     * its timestamp was issued again), so that a busy-poll waiter learns
     * of the usual end without the lock. */
    int last_ok;

    ps__tracker_done_func_t done;
    void *done_arg;

    uint64_t issued; /* timestamps handed out so far */

    ps__req_t **table;
    size_t cap; /* power of two */
    size_t count;
    size_t outstanding;
    ps__req_t *free_list;

    int *failed_ring; /* timestamps of remembered failures, oldest first */
    size_t failed_cap;
    size_t failed_head;
    size_t failed_count;

    int *dead;
    size_t num_dead;
    size_t dead_cap;

    ps_status_t closed; /* PS_OK while open */
};

/* ---- hash table ---- */

static size_t tracker_home(const ps__tracker_t *t, int ts)
{
    /* Timestamps are dense and increasing: identity spreads them perfectly. */
    return (size_t)(uint32_t)ts & (t->cap - 1);
}

static ps__req_t *tracker_find(const ps__tracker_t *t, int ts, size_t *pos_p)
{
    size_t mask = t->cap - 1;
    for (size_t i = tracker_home(t, ts);; i = (i + 1) & mask) {
        ps__req_t *r = t->table[i];
        if (r == NULL)
            return NULL;
        if (r->ts == ts) {
            if (pos_p != NULL)
                *pos_p = i;
            return r;
        }
    }
}

static void tracker_place(ps__tracker_t *t, ps__req_t *r)
{
    size_t mask = t->cap - 1;
    size_t i = tracker_home(t, r->ts);
    while (t->table[i] != NULL)
        i = (i + 1) & mask;
    t->table[i] = r;
}

static ps_status_t tracker_grow(ps__tracker_t *t)
{
    size_t old_cap = t->cap;
    ps__req_t **old = t->table;
    ps__req_t **table = calloc(old_cap * 2, sizeof(*table));
    if (table == NULL)
        return PS_ERR_NO_MEMORY;
    t->table = table;
    t->cap = old_cap * 2;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i] != NULL)
            tracker_place(t, old[i]);
    }
    free(old);
    return PS_OK;
}

/* Backward-shift deletion keeps every probe chain intact without tombstones. */
static void tracker_remove_at(ps__tracker_t *t, size_t pos)
{
    size_t mask = t->cap - 1;
    size_t hole = pos;
    t->table[hole] = NULL;
    for (size_t j = (hole + 1) & mask; t->table[j] != NULL; j = (j + 1) & mask) {
        size_t home = tracker_home(t, t->table[j]->ts);
        /* Entry j may move into the hole if its home is not in (hole, j]. */
        int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            t->table[hole] = t->table[j];
            t->table[j] = NULL;
            hole = j;
        }
    }
    t->count--;
}

static void tracker_free_req(ps__tracker_t *t, ps__req_t *r)
{
    r->ctx = NULL;
    r->next_free = t->free_list;
    t->free_list = r;
}

/* ---- helpers under the lock ---- */

static int tracker_issued(const ps__tracker_t *t, int ts)
{
    if (ts < 0)
        return 0;
    if (t->issued > PS__TS_MASK)
        return 1; /* wrapped: every timestamp has been used */
    return (uint64_t)ts < t->issued;
}

static int tracker_is_dead(const ps__tracker_t *t, int peer)
{
    for (size_t i = 0; i < t->num_dead; i++) {
        if (t->dead[i] == peer)
            return 1;
    }
    return 0;
}

static void tracker_signal(ps__tracker_t *t)
{
    __atomic_add_fetch(&t->completions, 1, __ATOMIC_RELEASE);
    if (t->sleepers > 0)
        ps_cond_broadcast(&t->cond);
}

/* Remembers a failure: its record stays; the oldest remembered one beyond
 * the limit is forgotten. */
static void tracker_remember_failure(ps__tracker_t *t, ps__req_t *r)
{
    if (t->failed_count == t->failed_cap && t->failed_cap < PS__TRACKER_FAILED_KEEP) {
        size_t cap = t->failed_cap ? t->failed_cap * 2 : 16;
        int *ring = malloc(cap * sizeof(*ring));
        if (ring != NULL) {
            for (size_t i = 0; i < t->failed_count; i++)
                ring[i] = t->failed_ring[(t->failed_head + i) % t->failed_cap];
            free(t->failed_ring);
            t->failed_ring = ring;
            t->failed_cap = cap;
            t->failed_head = 0;
        }
    }
    if (t->failed_cap == 0) {
        /* No memory for even a small ring: forget the failure now. */
        size_t pos;
        if (tracker_find(t, r->ts, &pos) == r) {
            tracker_remove_at(t, pos);
            tracker_free_req(t, r);
        }
        return;
    }
    if (t->failed_count == t->failed_cap) {
        int old_ts = t->failed_ring[t->failed_head];
        t->failed_head = (t->failed_head + 1) % t->failed_cap;
        t->failed_count--;
        size_t pos;
        ps__req_t *old = tracker_find(t, old_ts, &pos);
        if (old != NULL && old->status != PS_INPROGRESS) {
            tracker_remove_at(t, pos);
            tracker_free_req(t, old);
        }
    }
    t->failed_ring[(t->failed_head + t->failed_count) % t->failed_cap] = r->ts;
    t->failed_count++;
}

/*
 * Completion has two steps, so that the done function (which may, say,
 * copy a pulled value into the user's buffer) has run before any waiter
 * wakes up, as upstream runs a request's callback before waking Wait():
 *  1. decide (locked): the request stops accepting responses and failures;
 *  2. the done function runs, unlocked;
 *  3. publish (locked): waiters see the status; the record goes (PS_OK) or
 *     is remembered (failure).
 * A finishing record is never freed by anyone else (eviction takes only
 * published failures), so its pointer stays valid across step 2.
 */
static int req_open(const ps__req_t *r)
{
    return r->status == PS_INPROGRESS && !r->finishing;
}

static void tracker_decide(ps__req_t *r, ps_status_t status, ps__done_t *done)
{
    r->finishing = 1;
    r->final_status = status;
    done->req = r;
    done->ts = r->ts;
    done->ctx = r->ctx;
    done->status = status;
}

static void tracker_publish(ps__tracker_t *t, ps__req_t *r)
{
    size_t pos;
    ps__req_t *found = tracker_find(t, r->ts, &pos);
    r->finishing = 0;
    r->status = r->final_status;
    t->outstanding--;
    if (r->status == PS_OK) {
        if (found == r)
            tracker_remove_at(t, pos);
        __atomic_store_n(&t->last_ok, r->ts, __ATOMIC_RELEASE);
        tracker_free_req(t, r);
    } else {
        tracker_remember_failure(t, r);
    }
    tracker_signal(t);
}

/* Steps 2 and 3 for decided completions; called with the lock held, returns
 * with it held (dropped around the done functions). */
static void tracker_finish_locked(ps__tracker_t *t, ps__done_t *done, size_t n)
{
    ps__tracker_done_func_t fn = t->done;
    void *arg = t->done_arg;
    if (fn != NULL && n > 0) {
        ps_mutex_unlock(&t->lock);
        for (size_t i = 0; i < n; i++)
            fn(arg, done[i].ts, done[i].ctx, done[i].status);
        ps_mutex_lock(&t->lock);
    }
    for (size_t i = 0; i < n; i++)
        tracker_publish(t, done[i].req);
}

/* ---- API ---- */

ps_status_t ps__tracker_create(uint64_t spin_ns, ps__tracker_t **tracker_p)
{
    ps__tracker_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return PS_ERR_NO_MEMORY;
    t->table = calloc(PS__TRACKER_MIN_CAP, sizeof(*t->table));
    if (t->table == NULL)
        goto err_free;
    t->cap = PS__TRACKER_MIN_CAP;
    if (ps_mutex_init(&t->lock) != PS_OK)
        goto err_table;
    if (ps_cond_init(&t->cond) != PS_OK)
        goto err_mutex;
    t->spin_ns = spin_ns;
    t->closed = PS_OK;
    t->last_ok = -1;
    *tracker_p = t;
    return PS_OK;

err_mutex:
    ps_mutex_destroy(&t->lock);
err_table:
    free(t->table);
err_free:
    free(t);
    return PS_ERR_NO_MEMORY;
}

static void tracker_free_record(ps__req_t *r)
{
    if (r->peers_cap > 0)
        free(r->peers);
    free(r);
}

void ps__tracker_destroy(ps__tracker_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->table[i] != NULL)
            tracker_free_record(t->table[i]);
    }
    while (t->free_list != NULL) {
        ps__req_t *r = t->free_list;
        t->free_list = r->next_free;
        tracker_free_record(r);
    }
    free(t->table);
    free(t->failed_ring);
    free(t->dead);
    ps_cond_destroy(&t->cond);
    ps_mutex_destroy(&t->lock);
    free(t);
}

void ps__tracker_set_done_func(ps__tracker_t *t, ps__tracker_done_func_t fn, void *arg)
{
    ps_mutex_lock(&t->lock);
    t->done = fn;
    t->done_arg = arg;
    ps_mutex_unlock(&t->lock);
}

static ps_status_t tracker_set_peers(ps__req_t *r, const int *peers, int num_peers)
{
    if (num_peers <= PS__TRACKER_INLINE_PEERS) {
        if (r->peers_cap > 0) {
            free(r->peers);
            r->peers_cap = 0;
        }
        r->peers = r->inline_peers;
    } else if (r->peers_cap < num_peers) {
        int *p = malloc((size_t)num_peers * sizeof(*p));
        if (p == NULL)
            return PS_ERR_NO_MEMORY;
        if (r->peers_cap > 0)
            free(r->peers);
        r->peers = p;
        r->peers_cap = num_peers;
    }
    /* Usually one or two peers: a loop is cheaper than a memcpy call. */
    for (int i = 0; i < num_peers; i++)
        r->peers[i] = peers[i];
    r->num_peers = num_peers;
    return PS_OK;
}

ps_status_t ps__tracker_new(ps__tracker_t *t, int expected, const int *peers, int num_peers,
                            void *ctx, int *ts_p)
{
    if (expected < 1 || num_peers < 0 || (num_peers > 0 && peers == NULL) || ts_p == NULL)
        return PS_ERR_INVALID_ARG;

    ps_mutex_lock(&t->lock);
    ps_status_t st = t->closed;
    if (st != PS_OK)
        goto out;
    for (int i = 0; i < num_peers; i++) {
        if (tracker_is_dead(t, peers[i])) {
            st = PS_ERR_PEER_GONE;
            goto out;
        }
    }
    if ((t->count + 1) * 2 > t->cap) {
        st = tracker_grow(t);
        if (st != PS_OK)
            goto out;
    }
    ps__req_t *r = t->free_list;
    if (r != NULL) {
        t->free_list = r->next_free;
    } else {
        r = calloc(1, sizeof(*r));
        if (r == NULL) {
            st = PS_ERR_NO_MEMORY;
            goto out;
        }
        r->peers = r->inline_peers;
    }
    st = tracker_set_peers(r, peers, num_peers);
    if (st != PS_OK) {
        tracker_free_req(t, r);
        goto out;
    }
    /* After a wrap, skip timestamps still held (an old outstanding request
     * or a remembered failure). The table is at most half full, so this
     * ends. Before the first wrap every record's ts is below `issued`, so
     * the next one is free without a look. */
    int ts = (int)(t->issued & PS__TS_MASK);
    int wrapped = t->issued > PS__TS_MASK;
    t->issued++;
    while (wrapped && tracker_find(t, ts, NULL) != NULL) {
        ts = (int)(t->issued & PS__TS_MASK);
        t->issued++;
    }
    if (ts == __atomic_load_n(&t->last_ok, __ATOMIC_RELAXED))
        __atomic_store_n(&t->last_ok, -1, __ATOMIC_RELAXED); /* no longer "done" */
    r->ts = ts;
    r->expected = expected;
    r->received = 0;
    r->status = PS_INPROGRESS;
    r->finishing = 0;
    r->ctx = ctx;
    r->next_free = NULL;
    tracker_place(t, r);
    t->count++;
    t->outstanding++;
    *ts_p = ts;
out:
    ps_mutex_unlock(&t->lock);
    return st;
}

/* Counts n responses; on the last one, the completion is decided, and
 * finished through the done function (call_done) or published at once. */
static int tracker_count(ps__tracker_t *t, int ts, int n, int call_done)
{
    ps__done_t done;

    ps_mutex_lock(&t->lock);
    ps__req_t *r = tracker_find(t, ts, NULL);
    if (r == NULL || !req_open(r)) {
        ps_mutex_unlock(&t->lock);
        return 0;
    }
    r->received += n;
    if (r->received < r->expected) {
        ps_mutex_unlock(&t->lock);
        return 0;
    }
    tracker_decide(r, PS_OK, &done);
    if (call_done)
        tracker_finish_locked(t, &done, 1);
    else
        tracker_publish(t, r);
    ps_mutex_unlock(&t->lock);
    return 1;
}

int ps__tracker_add_response(ps__tracker_t *t, int ts, int n)
{
    return tracker_count(t, ts, n, 1);
}

int ps__tracker_add_response_quiet(ps__tracker_t *t, int ts, int n)
{
    return tracker_count(t, ts, n, 0);
}

int ps__tracker_fail(ps__tracker_t *t, int ts, ps_status_t why)
{
    ps__done_t done;

    if (why >= 0)
        why = PS_ERR_FATAL; /* a failure must read as one */
    ps_mutex_lock(&t->lock);
    ps__req_t *r = tracker_find(t, ts, NULL);
    if (r == NULL || !req_open(r)) {
        ps_mutex_unlock(&t->lock);
        return 0;
    }
    tracker_decide(r, why, &done);
    tracker_finish_locked(t, &done, 1);
    ps_mutex_unlock(&t->lock);
    return 1;
}

static int req_waits_for(const ps__req_t *r, int peer)
{
    if (peer < 0)
        return 1; /* any */
    for (int i = 0; i < r->num_peers; i++) {
        if (r->peers[i] == peer)
            return 1;
    }
    return 0;
}

/* Fails outstanding requests waiting for `peer` (< 0: all), a batch at a
 * time so that done functions run without the lock. */
static int tracker_fail_matching(ps__tracker_t *t, int peer, ps_status_t why)
{
    int total = 0;
    ps_mutex_lock(&t->lock);
    for (;;) {
        ps__done_t done[PS__FAIL_BATCH];
        size_t n = 0;
        /* Deciding moves nothing in the table, so one pass collects a
         * batch; publishing may (it forgets old failures), hence the
         * rescan until a pass finds nothing. */
        for (size_t i = 0; i < t->cap && n < PS__FAIL_BATCH; i++) {
            ps__req_t *r = t->table[i];
            if (r == NULL || !req_open(r) || !req_waits_for(r, peer))
                continue;
            tracker_decide(r, why, &done[n]);
            n++;
        }
        if (n == 0)
            break;
        tracker_finish_locked(t, done, n);
        total += (int)n;
    }
    ps_mutex_unlock(&t->lock);
    return total;
}

int ps__tracker_fail_peer(ps__tracker_t *t, int peer, ps_status_t why, int mark_dead)
{
    if (why >= 0)
        why = PS_ERR_PEER_GONE;
    if (mark_dead) {
        ps_mutex_lock(&t->lock);
        if (!tracker_is_dead(t, peer)) {
            if (t->num_dead == t->dead_cap) {
                size_t cap = t->dead_cap ? t->dead_cap * 2 : 8;
                int *d = realloc(t->dead, cap * sizeof(*d));
                if (d != NULL) {
                    t->dead = d;
                    t->dead_cap = cap;
                }
            }
            if (t->num_dead < t->dead_cap)
                t->dead[t->num_dead++] = peer;
        }
        ps_mutex_unlock(&t->lock);
    }
    return tracker_fail_matching(t, peer, why);
}

void ps__tracker_revive_peer(ps__tracker_t *t, int peer)
{
    ps_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->num_dead; i++) {
        if (t->dead[i] == peer) {
            t->dead[i] = t->dead[--t->num_dead];
            break;
        }
    }
    ps_mutex_unlock(&t->lock);
}

int ps__tracker_close(ps__tracker_t *t, ps_status_t why)
{
    if (why >= 0)
        why = PS_ERR_SHUTDOWN;
    ps_mutex_lock(&t->lock);
    if (t->closed == PS_OK)
        t->closed = why;
    ps_mutex_unlock(&t->lock);
    return tracker_fail_matching(t, -1, why);
}

int ps__tracker_num_responses(ps__tracker_t *t, int ts)
{
    ps_mutex_lock(&t->lock);
    ps__req_t *r = tracker_find(t, ts, NULL);
    int n = r != NULL ? r->received : -1;
    ps_mutex_unlock(&t->lock);
    return n;
}

ps_status_t ps__tracker_ctx(ps__tracker_t *t, int ts, void **ctx_p)
{
    ps_status_t st = PS_ERR_NOT_FOUND;
    ps_mutex_lock(&t->lock);
    ps__req_t *r = tracker_find(t, ts, NULL);
    if (r != NULL && req_open(r)) {
        *ctx_p = r->ctx;
        st = PS_OK;
    }
    ps_mutex_unlock(&t->lock);
    return st;
}

ps_status_t ps__tracker_claim(ps__tracker_t *t, int ts, ps__tracker_claim_func_t fn, void *arg)
{
    ps_status_t st = PS_ERR_NOT_FOUND;
    ps_mutex_lock(&t->lock);
    ps__req_t *r = tracker_find(t, ts, NULL);
    if (r != NULL && req_open(r))
        st = fn(r->ctx, arg);
    ps_mutex_unlock(&t->lock);
    return st;
}

/* Spins (without the lock) until another request completes or the budget
 * is spent. Pauses first, then yields: on two cores the thread that will
 * complete the request may need this one's CPU. */
static void tracker_spin(ps__tracker_t *t, uint64_t seen, uint64_t until_ns)
{
    for (unsigned i = 0;; i++) {
        if (__atomic_load_n(&t->completions, __ATOMIC_ACQUIRE) != seen)
            return;
        if (i < PS__SPIN_PAUSE_ROUNDS) {
            ps_cpu_relax();
            continue;
        }
        sched_yield();
        if ((i & 15) == 0 && ps_time_now_ns() >= until_ns)
            return;
    }
}

ps_status_t ps__tracker_wait(ps__tracker_t *t, int ts, int timeout_ms)
{
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    uint64_t spin_until = t->spin_ns > 0 ? ps_time_now_ns() + t->spin_ns : 0;
    ps_status_t st;

    ps_mutex_lock(&t->lock);
    if (!tracker_issued(t, ts)) {
        ps_mutex_unlock(&t->lock);
        return PS_ERR_INVALID_ARG;
    }
    for (;;) {
        ps__req_t *r = tracker_find(t, ts, NULL);
        if (r == NULL) {
            st = PS_OK; /* completed successfully (or a forgotten failure) */
            break;
        }
        if (r->status != PS_INPROGRESS) {
            st = r->status;
            break;
        }
        if (spin_until != 0 && ps_time_now_ns() < spin_until) {
            uint64_t seen = __atomic_load_n(&t->completions, __ATOMIC_ACQUIRE);
            ps_mutex_unlock(&t->lock);
            tracker_spin(t, seen, spin_until);
            ps_mutex_lock(&t->lock);
            continue;
        }
        if (ps_deadline_expired(deadline)) {
            st = PS_ERR_TIMED_OUT;
            break;
        }
        t->sleepers++;
        (void)ps_cond_wait(&t->cond, &t->lock, deadline);
        t->sleepers--;
    }
    ps_mutex_unlock(&t->lock);
    return st;
}

/* The locked half of ps__tracker_poll(), out of line so that the answer
 * from the count alone costs no frame set-up. */
static __attribute__((noinline)) ps_status_t tracker_poll_check(ps__tracker_t *t, int ts,
                                                               uint64_t now, uint64_t *seen_p)
{
    ps_status_t st;
    ps_mutex_lock(&t->lock);
    if (!tracker_issued(t, ts)) {
        st = PS_ERR_INVALID_ARG;
    } else {
        ps__req_t *r = tracker_find(t, ts, NULL);
        if (r == NULL)
            st = PS_OK; /* completed successfully (or a forgotten failure) */
        else if (r->status != PS_INPROGRESS)
            st = r->status;
        else
            st = PS_ERR_TIMED_OUT;
    }
    ps_mutex_unlock(&t->lock);
    if (st == PS_ERR_TIMED_OUT)
        *seen_p = now;
    return st;
}

ps_status_t ps__tracker_poll(ps__tracker_t *t, int ts, uint64_t *seen_p)
{
    /* Read before the check: a completion published after the check
     * (under the lock) bumps the count past this value, so an unchanged
     * count proves `ts` is still outstanding. The count never reaches
     * PS__TRACKER_POLL_START. */
    uint64_t now = __atomic_load_n(&t->completions, __ATOMIC_ACQUIRE);
    if (now == *seen_p)
        return PS_ERR_TIMED_OUT;
    /* Set when ts was published PS_OK, cleared under the lock before ts
     * could be issued again: equal means done. */
    if (ts >= 0 && __atomic_load_n(&t->last_ok, __ATOMIC_ACQUIRE) == ts)
        return PS_OK;
    return tracker_poll_check(t, ts, now, seen_p);
}

void ps__tracker_skip_to(ps__tracker_t *t, uint64_t issued)
{
    ps_mutex_lock(&t->lock);
    t->issued = issued;
    ps_mutex_unlock(&t->lock);
}

size_t ps__tracker_num_records(ps__tracker_t *t)
{
    ps_mutex_lock(&t->lock);
    size_t n = t->count;
    ps_mutex_unlock(&t->lock);
    return n;
}

size_t ps__tracker_num_outstanding(ps__tracker_t *t)
{
    ps_mutex_lock(&t->lock);
    size_t n = t->outstanding;
    ps_mutex_unlock(&t->lock);
    return n;
}

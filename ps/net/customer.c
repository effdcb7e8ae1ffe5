/*
 * Customers and the registry that routes data messages to them.
 *
 * A message is handed to its customer's receive function on the van's
 * thread (a hand-off to another thread costs ~70 us on a small machine).
 * A message for a customer not registered yet waits in a bounded pending
 * queue: the customer's creator replays it, in arrival order, before the
 * van thread may deliver to that customer directly; the postoffice's timer
 * thread drops what waited longer than PS__PENDING_TIMEOUT_NS.
 *
 * A customer is pinned (users > 0) while a postoffice thread runs one of
 * its functions; destroy waits for the pins to go. Deliveries usually find
 * their customer without the registry's lock, in one of a few fast slots
 * whose own count of users stands for the pin (reg_fast_t).
 */
#include "ps/net/customer.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/postoffice_internal.h"
#include "ps/net/postoffice_state_internal.h"
#include "ps/net/tracker_internal.h"
#include "ps/net/van/van.h"

/* With PS_BUSY_POLL, how long a waiter spins before it sleeps. */
#define PS__CUSTOMER_SPIN_NS (2ull * 1000000ull)
/* Events a driving waiter handles per round of the van's loop. */
#define PS__DRIVE_BUDGET 16
/* A driving waiter yields the CPU after this many rounds (a power of two). */
#define PS__DRIVE_YIELD_EVERY 256
/* Customers failed per round of fail_peer()/close() without allocating. */
#define PS__PIN_BATCH 32
/* Customers a delivery can find without the registry's lock. */
#define PS__REG_FAST_SLOTS 8

struct ps_customer {
    ps_postoffice_t *po;  /* NULL once the postoffice is gone */
    ps__registry_t *reg;  /* NULL once detached */
    int app_id;
    int customer_id;
    int request_timeout_ms;
    int destroy_timeout_ms; /* PS_FINALIZE_TIMEOUT_MS of its postoffice */
    int destroy_timed_out;  /* (under the registry lock) a destroy gave up */
    ps_customer_recv_func_t recv;
    ps_customer_lane_func_t lane; /* NULL: lane messages for it are dropped */
    void *recv_arg;               /* recv's and lane's */
    ps_customer_done_func_t done;
    void *done_arg;
    ps__tracker_t *tracker;
    /* Busy polling with a van that has a progress op: waiters drive it. */
    ps_van_t *van;
    int (*progress)(ps_van_t *van, unsigned budget);

    /* Under the registry lock. */
    ps_customer_recv_buffer_func_t recv_buffer;
    void *recv_buffer_arg;
    uint32_t recv_buffer_segments; /* bit i: ask about segment i */
    int users;      /* postoffice threads inside this customer's functions */
    int draining;   /* the creator is replaying pending messages */
    int linked;     /* in the registry's list */
    int fast_slot;  /* its index in the registry's fast slots, or -1 */
    struct ps_customer *next;
};

typedef struct ps__pending {
    ps_msg_t msg;
    uint8_t *body; /* a copy: the van's decode buffer does not outlive deliver */
    int lane;      /* a lane message: its payload is body[0..msg.meta.body_len) */
    uint64_t arrived_ns;
    struct ps__pending *next;
} ps__pending_t;

/*
 * A fast slot names one linked customer that is not draining, by its route
 * key (reg_route_key). A delivery counts itself in `users` first, then
 * reads the customer and checks the key again; the registry (under its
 * lock) empties a slot, customer then key, before the customer may go,
 * and waits until the slot's users are gone. Every access sequentially
 * consistent: a delivery either reads no customer or is waited for.
 */
typedef struct {
    uint64_t key;     /* atomic; 0: empty */
    ps_customer_t *c; /* atomic */
    int users;        /* atomic: deliveries that may hold c */
    int destroying;   /* (under the lock) destroys waiting for its users:
                       * no other customer gets the slot meanwhile */
} reg_fast_t;

struct ps__registry {
    ps_mutex_t lock;
    ps_cond_t cond; /* a pin was dropped */
    int pin_waiters; /* destroys waiting on cond: the last unpin signals only then */
    ps_role_t role;
    ps__kick_func_t kick;
    void *kick_arg;
    ps_customer_t *customers;
    ps__pending_t *pending_head;
    ps__pending_t *pending_tail;
    size_t num_pending;
    int *dead;
    size_t num_dead;
    size_t dead_cap;
    ps_status_t closed; /* PS_OK while open */
    /* Busy-poll waiters running the van's loop (customer_drive), and 1
     * once the van is about to close: no new driver may start then. */
    int drivers;
    int drive_off;
    /* The segments some linked customer's recv_buffer hook wants (bit i:
     * segment i), written under the lock, read without it: the van asks
     * about every segment of every message, and most are nobody's (a
     * server has no hook at all, a KV worker wants a pull's values only).
     * Answering those without the lock and the customer lookup saves a few
     * hundred instructions per segment. */
    uint32_t steer_mask;
    reg_fast_t fast[PS__REG_FAST_SLOTS];
};

/* Recomputes reg->steer_mask (lock held). */
static void reg_update_steer_mask(ps__registry_t *reg)
{
    uint32_t mask = 0;
    for (ps_customer_t *c = reg->customers; c != NULL; c = c->next) {
        if (c->recv_buffer != NULL)
            mask |= c->recv_buffer_segments;
    }
    __atomic_store_n(&reg->steer_mask, mask, __ATOMIC_RELEASE);
}

/* The customer whose receive function this thread is running. */
static __thread ps_customer_t *tls_in_customer;

/* ---- registry internals (under reg->lock) ---- */

/* The customer a message for (app_id, customer_id) goes to. */
static int route_ids(const ps__registry_t *reg, int app_id, int customer_id)
{
    return reg->role == PS_ROLE_WORKER ? customer_id : app_id;
}

static int route_customer_id(const ps__registry_t *reg, const ps_meta_t *meta)
{
    return route_ids(reg, meta->app_id, meta->customer_id);
}

/* The fast slots' key of (app_id, routed customer id); 0 (no slot) for
 * ids outside 0 .. INT32_MAX. */
static uint64_t reg_route_key(int app_id, int customer_id)
{
    if (app_id < 0 || customer_id < 0)
        return 0;
    return (1ull << 63) | ((uint64_t)app_id << 31) | (uint64_t)customer_id;
}

static ps_customer_t *reg_find(const ps__registry_t *reg, int app_id, int customer_id)
{
    for (ps_customer_t *c = reg->customers; c != NULL; c = c->next) {
        if (c->app_id == app_id && c->customer_id == customer_id)
            return c;
    }
    return NULL;
}

/* Pins c, found under the registry's lock (held). */
static void reg_pin(ps_customer_t *c)
{
    __atomic_add_fetch(&c->users, 1, __ATOMIC_SEQ_CST);
}

/* Drops one of a count of users (a customer's pins, a fast slot's
 * deliveries) without the lock (every delivery ends here): only a destroy
 * waiting for them needs waking, and it raises pin_waiters before it reads
 * the count. Both sides write, then read the other's counter, sequentially
 * consistent: at least one sees the other, so either the destroy sees no
 * user or the last one sees the waiter and wakes it under the lock. */
static void reg_drop_user(ps__registry_t *reg, int *users)
{
    if (__atomic_sub_fetch(users, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&reg->pin_waiters, __ATOMIC_SEQ_CST) > 0) {
        ps_mutex_lock(&reg->lock);
        ps_cond_broadcast(&reg->cond);
        ps_mutex_unlock(&reg->lock);
    }
}

static void reg_unpin(ps__registry_t *reg, ps_customer_t *c)
{
    reg_drop_user(reg, &c->users);
}

/* Gives c (linked, done draining) a fast slot if one is free (lock held). */
static void reg_fast_publish(ps__registry_t *reg, ps_customer_t *c)
{
    uint64_t key = reg_route_key(c->app_id, c->customer_id);
    if (key == 0 || c->fast_slot >= 0)
        return;
    for (int i = 0; i < PS__REG_FAST_SLOTS; i++) {
        reg_fast_t *f = &reg->fast[i];
        if (__atomic_load_n(&f->c, __ATOMIC_SEQ_CST) != NULL || f->destroying > 0)
            continue;
        /* Key first: a delivery that reads c then checks the key sees it. */
        __atomic_store_n(&f->key, key, __ATOMIC_SEQ_CST);
        __atomic_store_n(&f->c, c, __ATOMIC_SEQ_CST);
        c->fast_slot = i;
        return;
    }
}

/* Empties c's fast slot (lock held); the caller then waits, as for pins,
 * until reg_fast_users(reg, c) is 0. */
static void reg_fast_withdraw(ps__registry_t *reg, ps_customer_t *c)
{
    if (c->fast_slot < 0)
        return;
    reg_fast_t *f = &reg->fast[c->fast_slot];
    __atomic_store_n(&f->c, NULL, __ATOMIC_SEQ_CST);
    __atomic_store_n(&f->key, 0, __ATOMIC_SEQ_CST);
}

/* Deliveries that may still hold c through its (withdrawn) fast slot. */
static int reg_fast_users(const ps__registry_t *reg, const ps_customer_t *c)
{
    if (c->fast_slot < 0)
        return 0;
    return __atomic_load_n(&reg->fast[c->fast_slot].users, __ATOMIC_SEQ_CST);
}

/* A delivery's hold on its customer: a pin, or a fast slot's count. */
typedef struct {
    ps_customer_t *c;
    reg_fast_t *slot; /* NULL: c is pinned */
} reg_hold_t;

/* Finds the customer of `key` in a fast slot and holds it; 0 when no slot
 * has it (the locked lookup decides then). */
static int reg_fast_hold(ps__registry_t *reg, uint64_t key, reg_hold_t *hold)
{
    if (key == 0)
        return 0;
    for (int i = 0; i < PS__REG_FAST_SLOTS; i++) {
        reg_fast_t *f = &reg->fast[i];
        if (__atomic_load_n(&f->key, __ATOMIC_RELAXED) != key)
            continue;
        __atomic_add_fetch(&f->users, 1, __ATOMIC_SEQ_CST);
        ps_customer_t *c = __atomic_load_n(&f->c, __ATOMIC_SEQ_CST);
        if (c != NULL && __atomic_load_n(&f->key, __ATOMIC_SEQ_CST) == key) {
            hold->c = c;
            hold->slot = f;
            return 1;
        }
        reg_drop_user(reg, &f->users);
        return 0;
    }
    return 0;
}

static void reg_let_go(ps__registry_t *reg, const reg_hold_t *hold)
{
    if (hold->slot != NULL)
        reg_drop_user(reg, &hold->slot->users);
    else
        reg_unpin(reg, hold->c);
}

static void pending_free(ps__pending_t *p)
{
    ps_msg_release(&p->msg);
    free(p->body);
    free(p);
}

/* Takes msg over into the pending queue; returns 1 if the queue was empty.
 * `lane`: msg stands for a lane message, whose payload is its body. */
static int reg_queue_pending(ps__registry_t *reg, ps_msg_t *msg, int lane)
{
    if (reg->num_pending >= PS__PENDING_MAX) {
        ps_warn_ratelimited(PS_LOG_CORE,
                            "dropping a message from node %d for unknown app %d customer %d: "
                            "%d messages already wait for their customer",
                            msg->meta.sender, msg->meta.app_id, msg->meta.customer_id,
                            PS__PENDING_MAX);
        ps_msg_release(msg);
        return 0;
    }
    ps__pending_t *p = calloc(1, sizeof(*p));
    uint8_t *body = NULL;
    if (p != NULL && msg->meta.body_len > 0) {
        body = malloc(msg->meta.body_len);
        if (body == NULL) {
            free(p);
            p = NULL;
        }
    }
    if (p == NULL) {
        ps_warn_ratelimited(PS_LOG_CORE, "out of memory queueing a message for app %d",
                            msg->meta.app_id);
        ps_msg_release(msg);
        return 0;
    }
    p->msg = *msg; /* moves the references */
    if (body != NULL) {
        memcpy(body, msg->meta.body, msg->meta.body_len);
        p->msg.meta.body = body;
    }
    p->body = body;
    p->lane = lane;
    p->arrived_ns = ps_time_now_ns();
    int was_empty = reg->pending_head == NULL;
    if (reg->pending_tail != NULL)
        reg->pending_tail->next = p;
    else
        reg->pending_head = p;
    reg->pending_tail = p;
    reg->num_pending++;
    ps_debug(PS_LOG_CORE, "queued a message from node %d for app %d customer %d until it registers",
             msg->meta.sender, msg->meta.app_id, route_customer_id(reg, &msg->meta));
    return was_empty;
}

/* Unlinks and returns the oldest pending message for c, or NULL. */
static ps__pending_t *reg_take_pending(ps__registry_t *reg, const ps_customer_t *c)
{
    ps__pending_t *prev = NULL;
    for (ps__pending_t *p = reg->pending_head; p != NULL; prev = p, p = p->next) {
        if (p->msg.meta.app_id != c->app_id ||
            route_customer_id(reg, &p->msg.meta) != c->customer_id)
            continue;
        if (prev != NULL)
            prev->next = p->next;
        else
            reg->pending_head = p->next;
        if (reg->pending_tail == p)
            reg->pending_tail = prev;
        reg->num_pending--;
        p->next = NULL;
        return p;
    }
    return NULL;
}

static int reg_has_pending(const ps__registry_t *reg, const ps_customer_t *c)
{
    for (ps__pending_t *p = reg->pending_head; p != NULL; p = p->next) {
        if (p->msg.meta.app_id == c->app_id &&
            route_customer_id(reg, &p->msg.meta) == c->customer_id)
            return 1;
    }
    return 0;
}

static void customer_call_recv(ps_customer_t *c, const ps_msg_t *msg)
{
    ps_customer_t *outer = tls_in_customer;
    tls_in_customer = c;
    c->recv(c->recv_arg, c, msg);
    tls_in_customer = outer;
}

static void customer_call_lane(ps_customer_t *c, int sender, int customer_id,
                               const uint8_t *payload, size_t len)
{
    if (c->lane == NULL) {
        ps_warn_ratelimited(PS_LOG_CORE, "app %d customer %d takes no lane messages; dropped "
                            "one from node %d", c->app_id, c->customer_id, sender);
        return;
    }
    ps_customer_t *outer = tls_in_customer;
    tls_in_customer = c;
    c->lane(c->recv_arg, c, sender, customer_id, payload, len);
    tls_in_customer = outer;
}

/* Replays a pending message to c (pinned). */
static void customer_call_pending(ps_customer_t *c, const ps__pending_t *p)
{
    if (p->lane)
        customer_call_lane(c, p->msg.meta.sender, p->msg.meta.customer_id, p->body,
                           p->msg.meta.body_len);
    else
        customer_call_recv(c, &p->msg);
}

/* ---- registry API ---- */

ps_status_t ps__registry_create(ps_role_t role, ps__kick_func_t kick, void *kick_arg,
                                ps__registry_t **reg_p)
{
    ps__registry_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return PS_ERR_NO_MEMORY;
    if (ps_mutex_init(&reg->lock) != PS_OK) {
        free(reg);
        return PS_ERR_NO_MEMORY;
    }
    if (ps_cond_init(&reg->cond) != PS_OK) {
        ps_mutex_destroy(&reg->lock);
        free(reg);
        return PS_ERR_NO_MEMORY;
    }
    reg->role = role;
    reg->kick = kick;
    reg->kick_arg = kick_arg;
    reg->closed = PS_OK;
    *reg_p = reg;
    return PS_OK;
}

void ps__registry_destroy(ps__registry_t *reg)
{
    if (reg == NULL)
        return;
    ps__registry_close(reg, PS_ERR_SHUTDOWN);
    ps_mutex_lock(&reg->lock);
    /* Van threads are stopped by now; pins can only come from a
     * concurrent close, which has returned. */
    while (reg->customers != NULL) {
        ps_customer_t *c = reg->customers;
        reg->customers = c->next;
        c->next = NULL;
        c->linked = 0;
        reg_fast_withdraw(reg, c);
        c->fast_slot = -1;
        __atomic_store_n(&c->reg, NULL, __ATOMIC_SEQ_CST);
        c->po = NULL;
    }
    reg_update_steer_mask(reg);
    ps__pending_t *p = reg->pending_head;
    reg->pending_head = reg->pending_tail = NULL;
    reg->num_pending = 0;
    ps_mutex_unlock(&reg->lock);
    while (p != NULL) {
        ps__pending_t *next = p->next;
        pending_free(p);
        p = next;
    }
    free(reg->dead);
    ps_cond_destroy(&reg->cond);
    ps_mutex_destroy(&reg->lock);
    free(reg);
}

/* A lane message's payload, from sender, for ps__registry_deliver_lane. */
typedef struct {
    int sender;
    const uint8_t *payload;
    size_t len;
} reg_lane_t;

/* Holds the customer a message for (app_id, customer_id) routes to, for a
 * delivery (1), or returns 0 when there is none to deliver to now: then
 * the message (msg, or the lane message `lane` as one) was queued until
 * the customer registers or replays what waits for it, or dropped while
 * shutting down; msg is taken over either way. */
static int reg_deliver_to(ps__registry_t *reg, int app_id, int customer_id, ps_msg_t *msg,
                          const reg_lane_t *lane, reg_hold_t *hold)
{
    int cust_id = route_ids(reg, app_id, customer_id);
    if (reg_fast_hold(reg, reg_route_key(app_id, cust_id), hold))
        return 1;
    ps_mutex_lock(&reg->lock);
    ps_customer_t *c = reg_find(reg, app_id, cust_id);
    if (c != NULL && !c->draining) {
        reg_pin(c);
        ps_mutex_unlock(&reg->lock);
        hold->c = c;
        hold->slot = NULL;
        return 1;
    }
    ps_msg_t as_msg;
    if (lane != NULL) {
        /* The pending queue keeps messages: this one's payload as a body. */
        ps_msg_init(&as_msg);
        as_msg.meta.sender = lane->sender;
        as_msg.meta.app_id = app_id;
        as_msg.meta.customer_id = customer_id;
        as_msg.meta.body = lane->payload;
        as_msg.meta.body_len = (uint32_t)lane->len;
        msg = &as_msg;
    }
    if (reg->closed != PS_OK && c == NULL) {
        ps_mutex_unlock(&reg->lock);
        ps_debug(PS_LOG_CORE, "dropping a message for app %d customer %d: shutting down", app_id,
                 cust_id);
        ps_msg_release(msg);
        return 0;
    }
    int kick = reg_queue_pending(reg, msg, lane != NULL);
    ps_mutex_unlock(&reg->lock);
    if (kick && reg->kick != NULL)
        reg->kick(reg->kick_arg);
    return 0;
}

void ps__registry_deliver(ps__registry_t *reg, ps_msg_t *msg)
{
    reg_hold_t hold;
    if (!reg_deliver_to(reg, msg->meta.app_id, msg->meta.customer_id, msg, NULL, &hold))
        return;
    customer_call_recv(hold.c, msg);
    ps_msg_release(msg);
    reg_let_go(reg, &hold);
}

void ps__registry_deliver_lane(ps__registry_t *reg, int sender, int app_id, int customer_id,
                               const uint8_t *payload, size_t len)
{
    reg_lane_t lane = {sender, payload, len};
    reg_hold_t hold;
    if (!reg_deliver_to(reg, app_id, customer_id, NULL, &lane, &hold))
        return;
    customer_call_lane(hold.c, sender, customer_id, payload, len);
    reg_let_go(reg, &hold);
}

ps_status_t ps__registry_recv_buffer(ps__registry_t *reg, const ps_meta_t *meta,
                                     unsigned index, uint64_t len, ps_slice_t *slice_p)
{
    /* A hook set or widened concurrently is a caller error (hooks are set
     * before traffic can arrive), so a stale mask only ever says no to a
     * segment that no hook wanted a moment ago. */
    if (index >= 32 || !(__atomic_load_n(&reg->steer_mask, __ATOMIC_ACQUIRE) & (1u << index)))
        return PS_ERR_NOT_FOUND;
    ps_mutex_lock(&reg->lock);
    ps_customer_t *c = reg_find(reg, meta->app_id, route_customer_id(reg, meta));
    if (c == NULL || c->draining || c->recv_buffer == NULL ||
        !(c->recv_buffer_segments & (1u << index))) {
        ps_mutex_unlock(&reg->lock);
        return PS_ERR_NOT_FOUND;
    }
    ps_customer_recv_buffer_func_t fn = c->recv_buffer;
    void *arg = c->recv_buffer_arg;
    reg_pin(c);
    ps_mutex_unlock(&reg->lock);

    ps_status_t st = fn(arg, c, meta, index, len, slice_p);
    reg_unpin(reg, c);
    return st;
}

/* Runs fn on every registered customer, pinned and without the lock. */
static void reg_for_each(ps__registry_t *reg, void (*fn)(ps_customer_t *c, int peer,
                                                         ps_status_t why, int mark_dead),
                         int peer, ps_status_t why, int mark_dead)
{
    ps_customer_t *batch[PS__PIN_BATCH];
    size_t skip = 0;
    for (;;) {
        size_t n = 0;
        size_t idx = 0;
        ps_mutex_lock(&reg->lock);
        for (ps_customer_t *c = reg->customers; c != NULL && n < PS__PIN_BATCH; c = c->next) {
            if (idx++ < skip)
                continue;
            reg_pin(c);
            batch[n++] = c;
        }
        ps_mutex_unlock(&reg->lock);
        for (size_t i = 0; i < n; i++) {
            fn(batch[i], peer, why, mark_dead);
            reg_unpin(reg, batch[i]);
        }
        if (n < PS__PIN_BATCH)
            return;
        /* A customer created or destroyed meanwhile may shift the list; the
         * calls are idempotent, and new customers are seeded at creation. */
        skip += n;
    }
}

/* Done functions run inside these: mark the customer as busy on this
 * thread, as for its receive function (see ps_customer_destroy). */
static void customer_fail_peer_cb(ps_customer_t *c, int peer, ps_status_t why, int mark_dead)
{
    ps_customer_t *outer = tls_in_customer;
    tls_in_customer = c;
    ps__tracker_fail_peer(c->tracker, peer, why, mark_dead);
    tls_in_customer = outer;
}

static void customer_close_cb(ps_customer_t *c, int peer, ps_status_t why, int mark_dead)
{
    (void)peer;
    (void)mark_dead;
    ps_customer_t *outer = tls_in_customer;
    tls_in_customer = c;
    ps__tracker_close(c->tracker, why);
    tls_in_customer = outer;
}

void ps__registry_fail_peer(ps__registry_t *reg, int peer, ps_status_t why, int mark_dead)
{
    if (mark_dead) {
        ps_mutex_lock(&reg->lock);
        int known = 0;
        for (size_t i = 0; i < reg->num_dead; i++)
            known |= reg->dead[i] == peer;
        if (!known) {
            if (reg->num_dead == reg->dead_cap) {
                size_t cap = reg->dead_cap ? reg->dead_cap * 2 : 8;
                int *d = realloc(reg->dead, cap * sizeof(*d));
                if (d != NULL) {
                    reg->dead = d;
                    reg->dead_cap = cap;
                }
            }
            if (reg->num_dead < reg->dead_cap)
                reg->dead[reg->num_dead++] = peer;
        }
        ps_mutex_unlock(&reg->lock);
    }
    reg_for_each(reg, customer_fail_peer_cb, peer, why, mark_dead);
}

static void customer_revive_cb(ps_customer_t *c, int peer, ps_status_t why, int mark_dead)
{
    (void)why;
    (void)mark_dead;
    ps__tracker_revive_peer(c->tracker, peer);
}

void ps__registry_revive_peer(ps__registry_t *reg, int peer)
{
    ps_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->num_dead; i++) {
        if (reg->dead[i] == peer) {
            reg->dead[i] = reg->dead[--reg->num_dead];
            break;
        }
    }
    ps_mutex_unlock(&reg->lock);
    /* A customer created meanwhile was seeded without it: nothing to undo. */
    reg_for_each(reg, customer_revive_cb, peer, PS_OK, 0);
}

int ps__registry_fail_request(ps__registry_t *reg, const ps_meta_t *meta, ps_status_t why)
{
    ps_mutex_lock(&reg->lock);
    ps_customer_t *c = reg_find(reg, meta->app_id, route_customer_id(reg, meta));
    if (c == NULL) {
        ps_mutex_unlock(&reg->lock);
        return 0;
    }
    reg_pin(c);
    ps_mutex_unlock(&reg->lock);
    ps_customer_t *outer = tls_in_customer;
    tls_in_customer = c;
    int failed = ps__tracker_fail(c->tracker, meta->timestamp, why);
    tls_in_customer = outer;
    reg_unpin(reg, c);
    return failed;
}

void ps__registry_close(ps__registry_t *reg, ps_status_t why)
{
    ps_mutex_lock(&reg->lock);
    if (reg->closed == PS_OK)
        reg->closed = why;
    why = reg->closed;
    ps_mutex_unlock(&reg->lock);
    reg_for_each(reg, customer_close_cb, -1, why, 0);
}

size_t ps__registry_num_pending(ps__registry_t *reg)
{
    ps_mutex_lock(&reg->lock);
    size_t n = reg->num_pending;
    ps_mutex_unlock(&reg->lock);
    return n;
}

uint64_t ps__registry_expire_pending(ps__registry_t *reg, uint64_t now_ns)
{
    ps__pending_t *expired = NULL;
    uint64_t next = 0;

    ps_mutex_lock(&reg->lock);
    ps__pending_t *prev = NULL;
    ps__pending_t *p = reg->pending_head;
    while (p != NULL) {
        ps__pending_t *following = p->next;
        /* now_ns may predate a message queued since it was read (helper
         * h10: the unsigned difference wrapped and dropped it at once). */
        if (now_ns >= p->arrived_ns && now_ns - p->arrived_ns >= PS__PENDING_TIMEOUT_NS) {
            if (prev != NULL)
                prev->next = following;
            else
                reg->pending_head = following;
            if (reg->pending_tail == p)
                reg->pending_tail = prev;
            reg->num_pending--;
            p->next = expired;
            expired = p;
        } else {
            uint64_t at = p->arrived_ns + PS__PENDING_TIMEOUT_NS;
            if (next == 0 || at < next)
                next = at;
            prev = p;
        }
        p = following;
    }
    ps_mutex_unlock(&reg->lock);

    while (expired != NULL) {
        ps__pending_t *following = expired->next;
        ps_warn_ratelimited(PS_LOG_CORE,
                            "dropped a message from node %d for app %d customer %d: no such "
                            "customer registered within %llu s",
                            expired->msg.meta.sender, expired->msg.meta.app_id,
                            expired->msg.meta.customer_id,
                            (unsigned long long)(PS__PENDING_TIMEOUT_NS / 1000000000ull));
        pending_free(expired);
        expired = following;
    }
    return next;
}

/* ---- customer API ---- */

static void customer_done_trampoline(void *arg, int ts, void *ctx, ps_status_t status)
{
    ps_customer_t *c = arg;
    ps_customer_done_func_t fn = __atomic_load_n(&c->done, __ATOMIC_ACQUIRE);
    if (fn != NULL)
        fn(__atomic_load_n(&c->done_arg, __ATOMIC_ACQUIRE), c, ts, ctx, status);
}

ps_status_t ps_customer_create(ps_postoffice_t *po, int app_id, int customer_id,
                               ps_customer_recv_func_t recv, void *arg,
                               ps_customer_t **customer_p)
{
    return ps_customer_create_lane(po, app_id, customer_id, recv, NULL, arg, customer_p);
}

ps_status_t ps_customer_create_lane(ps_postoffice_t *po, int app_id, int customer_id,
                                    ps_customer_recv_func_t recv, ps_customer_lane_func_t lane,
                                    void *arg, ps_customer_t **customer_p)
{
    if (po == NULL || recv == NULL || customer_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps__registry_t *reg = ps__postoffice_registry(po);
    if (reg == NULL)
        return PS_ERR_SHUTDOWN;

    ps_customer_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return PS_ERR_NO_MEMORY;
    c->recv_buffer_segments = UINT32_MAX;
    c->fast_slot = -1;
    uint64_t spin = 0;
    if (ps__postoffice_busy_poll(po)) {
        /* Set at start, before any customer can exist; closed after the
         * customers' waits ended (they must not overlap finalize). */
        ps_van_t *van = po->van;
        c->progress = van != NULL ? ps_van_progress_op(van) : NULL;
        c->van = c->progress != NULL ? van : NULL;
        /* Without a progress op the tracker spins on its own. */
        spin = c->progress == NULL ? PS__CUSTOMER_SPIN_NS : 0;
    }
    ps_status_t st = ps__tracker_create(spin, &c->tracker);
    if (st != PS_OK) {
        free(c);
        return st;
    }
    c->po = po;
    __atomic_store_n(&c->reg, reg, __ATOMIC_SEQ_CST);
    c->app_id = app_id;
    c->customer_id = customer_id;
    c->request_timeout_ms = ps_postoffice_request_timeout_ms(po);
    c->destroy_timeout_ms = ps_postoffice_finalize_timeout_ms(po);
    c->recv = recv;
    c->lane = lane;
    c->recv_arg = arg;
    ps__tracker_set_done_func(c->tracker, customer_done_trampoline, c);

    ps_mutex_lock(&reg->lock);
    if (reg_find(reg, app_id, customer_id) != NULL) {
        ps_mutex_unlock(&reg->lock);
        ps_error(PS_LOG_CORE, "app %d customer %d is already registered", app_id, customer_id);
        ps__tracker_destroy(c->tracker);
        free(c);
        return PS_ERR_EXISTS;
    }
    /* Before the link: a receive function (on the van's thread, or the
     * replay below) may look at the caller's handle at once. */
    *customer_p = c;
    /* Seed what the postoffice already knows, under the registry lock so
     * that no death or close slips between this and the link below. */
    for (size_t i = 0; i < reg->num_dead; i++)
        ps__tracker_fail_peer(c->tracker, reg->dead[i], PS_ERR_PEER_GONE, 1);
    if (reg->closed != PS_OK)
        ps__tracker_close(c->tracker, reg->closed);
    c->draining = reg_has_pending(reg, c);
    c->linked = 1;
    c->next = reg->customers;
    reg->customers = c;
    reg_update_steer_mask(reg);
    ps_mutex_unlock(&reg->lock);

    /* Replay what arrived before we registered, in order; the van thread
     * queues behind us until the queue is empty. */
    for (;;) {
        ps_mutex_lock(&reg->lock);
        ps__pending_t *p = c->draining ? reg_take_pending(reg, c) : NULL;
        if (p == NULL) {
            c->draining = 0;
            if (c->linked)
                reg_fast_publish(reg, c);
            ps_mutex_unlock(&reg->lock);
            break;
        }
        reg_pin(c);
        ps_mutex_unlock(&reg->lock);
        customer_call_pending(c, p);
        pending_free(p);
        reg_unpin(reg, c);
    }
    ps_info(PS_LOG_CORE, "registered app %d customer %d", app_id, customer_id);
    return PS_OK;
}

ps_status_t ps_customer_destroy_timed(ps_customer_t *c, int timeout_ms)
{
    if (c == NULL)
        return PS_OK;
    if (tls_in_customer == c) {
        ps_error(PS_LOG_CORE, "app %d customer %d destroyed from its own receive or done "
                 "function; leaking it instead", c->app_id, c->customer_id);
        return PS_ERR_INVALID_ARG;
    }
    if (timeout_ms < 0)
        timeout_ms = c->destroy_timeout_ms;
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    ps__registry_t *reg = __atomic_load_n(&c->reg, __ATOMIC_SEQ_CST);
    if (reg != NULL) {
        /* The registry may be destroyed concurrently only if the caller
         * breaks the rule that finalize and destroy do not overlap. */
        ps_mutex_lock(&reg->lock);
        if (c->linked) {
            ps_customer_t **pp = &reg->customers;
            while (*pp != NULL && *pp != c)
                pp = &(*pp)->next;
            if (*pp == c)
                *pp = c->next;
            c->linked = 0;
            reg_update_steer_mask(reg);
        }
        reg_fast_withdraw(reg, c);
        /* A second call after a timed-out one finds the slot's count
         * already raised. */
        if (c->fast_slot >= 0 && !c->destroy_timed_out)
            reg->fast[c->fast_slot].destroying++;
        __atomic_add_fetch(&reg->pin_waiters, 1, __ATOMIC_SEQ_CST);
        int busy;
        for (;;) {
            busy = __atomic_load_n(&c->users, __ATOMIC_SEQ_CST) > 0 || reg_fast_users(reg, c) > 0;
            if (!busy || ps_deadline_expired(deadline))
                break;
            (void)ps_cond_wait(&reg->cond, &reg->lock, deadline);
        }
        __atomic_sub_fetch(&reg->pin_waiters, 1, __ATOMIC_SEQ_CST);
        if (busy) {
            /* A receive, lane, hook or done function of it still runs:
             * freeing would pull the customer (and its tracker) from under
             * it. It stays unlinked and allocated, and keeps its fast slot
             * reserved (that slot's count may still stand for it); a later
             * call may finish the job. */
            c->destroy_timed_out = 1;
            ps_mutex_unlock(&reg->lock);
            ps_error(PS_LOG_CORE, "app %d customer %d: a function of it still runs after %d ms; "
                     "destroy leaves it allocated", c->app_id, c->customer_id, timeout_ms);
            return PS_ERR_TIMED_OUT;
        }
        if (c->fast_slot >= 0)
            reg->fast[c->fast_slot].destroying--;
        c->fast_slot = -1;
        ps_mutex_unlock(&reg->lock);
    }
    ps__tracker_close(c->tracker, PS_ERR_SHUTDOWN);
    ps__tracker_destroy(c->tracker);
    free(c);
    return PS_OK;
}

void ps_customer_destroy(ps_customer_t *c)
{
    (void)ps_customer_destroy_timed(c, -1);
}

/* A change of what steers deliveries to the customer (its recv_buffer hook
 * or the segments it asks about) happens under the registry's lock, and
 * the registry's steer mask follows; a detached customer needs neither. */
static ps__registry_t *steer_change_begin(ps_customer_t *c)
{
    ps__registry_t *reg = __atomic_load_n(&c->reg, __ATOMIC_SEQ_CST);
    if (reg != NULL)
        ps_mutex_lock(&reg->lock);
    return reg;
}

static void steer_change_end(ps__registry_t *reg, const ps_customer_t *c)
{
    if (reg == NULL)
        return;
    if (c->linked)
        reg_update_steer_mask(reg);
    ps_mutex_unlock(&reg->lock);
}

void ps_customer_set_recv_buffer_func(ps_customer_t *c, ps_customer_recv_buffer_func_t fn,
                                      void *arg)
{
    ps__registry_t *reg = steer_change_begin(c);
    c->recv_buffer = fn;
    c->recv_buffer_arg = arg;
    steer_change_end(reg, c);
}

void ps_customer_set_recv_buffer_segments(ps_customer_t *c, uint32_t segments)
{
    ps__registry_t *reg = steer_change_begin(c);
    c->recv_buffer_segments = segments;
    steer_change_end(reg, c);
}

void ps_customer_set_done_func(ps_customer_t *c, ps_customer_done_func_t fn, void *arg)
{
    /* arg first, then the function pointer with release order: a racing
     * completion sees either no function or both. */
    __atomic_store_n(&c->done_arg, arg, __ATOMIC_RELEASE);
    __atomic_store_n(&c->done, fn, __ATOMIC_RELEASE);
}

ps_postoffice_t *ps_customer_postoffice(const ps_customer_t *c)
{
    return c->po;
}

int ps_customer_app_id(const ps_customer_t *c)
{
    return c->app_id;
}

int ps_customer_id(const ps_customer_t *c)
{
    return c->customer_id;
}

ps_status_t ps_customer_new_request(ps_customer_t *c, int expected, const int *peer_ids,
                                    int num_peers, int *ts_p)
{
    return ps__tracker_new(c->tracker, expected, peer_ids, num_peers, NULL, ts_p);
}

ps_status_t ps_customer_new_request_ctx(ps_customer_t *c, int expected, const int *peer_ids,
                                        int num_peers, void *ctx, int *ts_p)
{
    return ps__tracker_new(c->tracker, expected, peer_ids, num_peers, ctx, ts_p);
}

ps_status_t ps_customer_request_ctx(ps_customer_t *c, int ts, void **ctx_p)
{
    return ps__tracker_ctx(c->tracker, ts, ctx_p);
}

ps_status_t ps_customer_claim_request(ps_customer_t *c, int ts, ps_customer_claim_func_t fn,
                                     void *arg)
{
    if (c == NULL || fn == NULL)
        return PS_ERR_INVALID_ARG;
    return ps__tracker_claim(c->tracker, ts, fn, arg);
}

int ps_customer_add_response(ps_customer_t *c, int ts, int n)
{
    return ps__tracker_add_response(c->tracker, ts, n);
}

int ps_customer_add_response_quiet(ps_customer_t *c, int ts, int n)
{
    return ps__tracker_add_response_quiet(c->tracker, ts, n);
}

void ps_customer_fail_request(ps_customer_t *c, int ts, ps_status_t why)
{
    (void)ps__tracker_fail(c->tracker, ts, why);
}

int ps_customer_num_responses(ps_customer_t *c, int ts)
{
    return ps__tracker_num_responses(c->tracker, ts);
}

/* Busy polling: the waiter runs the van's event loop itself until the
 * request completes or spin_ns pass, so the process has one spinning
 * thread (the van's own stands back meanwhile). PS_INPROGRESS when the
 * spin ended without a result. The spin's start, *start_p, is the first
 * clock read, 16 turns in: at ~24 ns a read (docs/PERF.md), a request
 * answered sooner reads no clock, and the spin lasts those turns longer. */
static ps_status_t customer_drive(ps_customer_t *c, int ts, uint64_t spin_ns, uint64_t *start_p)
{
    int handled = 1;
    uint64_t seen = PS__TRACKER_POLL_START;
    uint64_t spin_until = 0;
    for (unsigned i = 1;; i++) {
        /* The request completes in a round this thread ran, or (rarely)
         * on another thread: check after work, and now and then. (Most
         * work is not this request's end: the poll answers those from the
         * tracker's completion count, without its lock or a clock read.) */
        if (handled > 0 || (i & 15) == 0) {
            ps_status_t st = ps__tracker_poll(c->tracker, ts, &seen);
            if (st != PS_ERR_TIMED_OUT)
                return st;
            if ((i & 15) == 0) {
                uint64_t now = ps_time_now_ns();
                if (spin_until == 0) {
                    *start_p = now;
                    spin_until = now + spin_ns;
                }
                if (now >= spin_until)
                    break;
            }
        }
        handled = c->progress(c->van, PS__DRIVE_BUDGET);
        /* Several waiters spin while one drives: now and then let the
         * others (and the driver) have the CPU. */
        if (handled == 0 && (i & (PS__DRIVE_YIELD_EVERY - 1)) == 0)
            sched_yield();
    }
    /* Going to sleep: the van's thread must take the loop back now. */
    (void)c->progress(c->van, 0);
    return PS_INPROGRESS;
}

/* A waiter may drive the van only between these two calls, and not once
 * ps__registry_stop_driving() began: the van must outlive every driver.
 * (Announce first, then check, both sequentially consistent: the stopper
 * sets the flag, then counts, so one of the two sees the other.) */
static ps__registry_t *drive_enter(ps_customer_t *c)
{
    ps__registry_t *reg = __atomic_load_n(&c->reg, __ATOMIC_SEQ_CST);
    if (reg == NULL)
        return NULL;
    __atomic_add_fetch(&reg->drivers, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&reg->drive_off, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(&reg->drivers, 1, __ATOMIC_SEQ_CST);
        return NULL;
    }
    return reg;
}

static void drive_exit(ps__registry_t *reg)
{
    __atomic_sub_fetch(&reg->drivers, 1, __ATOMIC_SEQ_CST);
}

ps_status_t ps__registry_stop_driving(ps__registry_t *reg, ps_deadline_t deadline)
{
    __atomic_store_n(&reg->drive_off, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&reg->drivers, __ATOMIC_SEQ_CST) > 0) {
        if (ps_deadline_expired(deadline))
            return PS_ERR_TIMED_OUT;
        sched_yield();
    }
    return PS_OK;
}

ps_status_t ps_customer_wait(ps_customer_t *c, int ts, int timeout_ms)
{
    if (timeout_ms < 0)
        timeout_ms = c->request_timeout_ms;
    /* Never from a receive or done function: the loop is already running
     * below us on this thread. */
    ps__registry_t *driving = NULL;
    if (c->progress != NULL && tls_in_customer == NULL && (driving = drive_enter(c)) != NULL) {
        uint64_t start = 0;
        uint64_t spin = PS__CUSTOMER_SPIN_NS;
        if (timeout_ms >= 0 && (uint64_t)timeout_ms * 1000000ull < spin)
            spin = (uint64_t)timeout_ms * 1000000ull;
        ps_status_t st = customer_drive(c, ts, spin, &start);
        drive_exit(driving);
        if (st != PS_INPROGRESS)
            return st;
        if (timeout_ms >= 0) {
            uint64_t spent_ms = (ps_time_now_ns() - start) / 1000000ull;
            timeout_ms = spent_ms >= (uint64_t)timeout_ms ? 0 : timeout_ms - (int)spent_ms;
        }
    }
    return ps__tracker_wait(c->tracker, ts, timeout_ms);
}

int ps_customer_waits_drive(const ps_customer_t *c)
{
    return c != NULL && c->progress != NULL;
}

int ps_customer_drive(ps_customer_t *c, unsigned budget)
{
    if (c == NULL || c->progress == NULL || tls_in_customer != NULL)
        return -1;
    ps__registry_t *driving = drive_enter(c);
    if (driving == NULL)
        return -1;
    int handled = c->progress(c->van, budget);
    drive_exit(driving);
    return handled;
}

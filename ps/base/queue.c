#include "ps/base/queue.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/thread.h"

#define PS_QUEUE_INITIAL_CAPACITY 64
#define PS_RING_MAX_CAPACITY (1ull << 31)

/* ---- blocking MPMC queue ---- */

struct ps_queue {
    ps_mutex_t lock;
    ps_cond_t nonempty;
    void **items;         /* ring of `capacity` slots */
    size_t capacity;      /* a power of two */
    size_t head;          /* index of the oldest item */
    size_t count;         /* written under the lock, read lock-free by spinners */
    int closed;           /* likewise */
    unsigned waiters;     /* consumers asleep on `nonempty` */
    uint64_t spin_ns;
};

ps_status_t ps_queue_create(uint64_t spin_ns, ps_queue_t **queue_p)
{
    ps_queue_t *q;

    if (queue_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    q->items = malloc(PS_QUEUE_INITIAL_CAPACITY * sizeof(void *));
    if (q->items == NULL) {
        free(q);
        return PS_ERR_NO_MEMORY;
    }
    q->capacity = PS_QUEUE_INITIAL_CAPACITY;
    q->spin_ns = spin_ns;
    ps_status_t st = ps_mutex_init(&q->lock);
    if (st != PS_OK) {
        goto err_free;
    }
    st = ps_cond_init(&q->nonempty);
    if (st != PS_OK) {
        goto err_mutex;
    }
    *queue_p = q;
    return PS_OK;

err_mutex:
    ps_mutex_destroy(&q->lock);
err_free:
    free(q->items);
    free(q);
    return st;
}

void ps_queue_destroy(ps_queue_t *queue)
{
    if (queue == NULL) {
        return;
    }
    ps_cond_destroy(&queue->nonempty);
    ps_mutex_destroy(&queue->lock);
    free(queue->items);
    free(queue);
}

/* Doubles the ring, unwrapping it; called with the lock held. */
static ps_status_t ps_queue_grow(ps_queue_t *q)
{
    if (q->capacity > SIZE_MAX / 2 / sizeof(void *)) {
        return PS_ERR_NO_MEMORY;
    }
    size_t cap = q->capacity * 2;
    void **items = malloc(cap * sizeof(void *));
    if (items == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    size_t first = q->capacity - q->head; /* items up to the end of the old ring */
    if (first > q->count) {
        first = q->count;
    }
    memcpy(items, q->items + q->head, first * sizeof(void *));
    memcpy(items + first, q->items, (q->count - first) * sizeof(void *));
    free(q->items);
    q->items = items;
    q->capacity = cap;
    q->head = 0;
    return PS_OK;
}

ps_status_t ps_queue_push(ps_queue_t *queue, void *item)
{
    ps_status_t st = PS_OK;

    if (queue == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_mutex_lock(&queue->lock);
    if (queue->closed) {
        st = PS_ERR_SHUTDOWN;
        goto out_unlock;
    }
    if (queue->count == queue->capacity) {
        st = ps_queue_grow(queue);
        if (st != PS_OK) {
            goto out_unlock;
        }
    }
    queue->items[(queue->head + queue->count) & (queue->capacity - 1)] = item;
    __atomic_store_n(&queue->count, queue->count + 1, __ATOMIC_RELEASE);
    /* A spinning consumer sees `count`; only a sleeping one needs a wake-up
     * (a system call). */
    if (queue->waiters != 0) {
        ps_cond_signal(&queue->nonempty);
    }
out_unlock:
    ps_mutex_unlock(&queue->lock);
    return st;
}

/* Takes the oldest item; called with the lock held and count > 0. */
static void *ps_queue_take(ps_queue_t *q)
{
    void *item = q->items[q->head];
    q->head = (q->head + 1) & (q->capacity - 1);
    __atomic_store_n(&q->count, q->count - 1, __ATOMIC_RELAXED);
    return item;
}

/* Spins until the queue looks non-empty or closed, the spin budget is spent,
 * or the deadline passes. */
static void ps_queue_spin(ps_queue_t *q, ps_deadline_t deadline)
{
    uint64_t until = ps_time_now_ns() + q->spin_ns;
    if (!ps_deadline_is_infinite(deadline) && deadline.at_ns < until) {
        until = deadline.at_ns;
    }
    for (unsigned i = 1;; ++i) {
        if (__atomic_load_n(&q->count, __ATOMIC_ACQUIRE) != 0 ||
            __atomic_load_n(&q->closed, __ATOMIC_ACQUIRE)) {
            return;
        }
        ps_cpu_relax();
        /* Reading the clock costs more than a pause: do it now and then. */
        if ((i & 63u) == 0 && ps_time_now_ns() >= until) {
            return;
        }
    }
}

ps_status_t ps_queue_pop(ps_queue_t *queue, ps_deadline_t deadline, void **item_p)
{
    ps_status_t st = PS_OK;

    if (queue == NULL || item_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (queue->spin_ns != 0) {
        ps_queue_spin(queue, deadline);
    }
    ps_mutex_lock(&queue->lock);
    while (queue->count == 0 && !queue->closed && st == PS_OK) {
        ++queue->waiters;
        st = ps_cond_wait(&queue->nonempty, &queue->lock, deadline);
        --queue->waiters;
    }
    if (queue->count != 0) {
        *item_p = ps_queue_take(queue);
        st = PS_OK;
    } else if (queue->closed) {
        st = PS_ERR_SHUTDOWN;
    } else {
        st = PS_ERR_TIMED_OUT;
    }
    ps_mutex_unlock(&queue->lock);
    return st;
}

ps_status_t ps_queue_try_pop(ps_queue_t *queue, void **item_p)
{
    ps_status_t st;

    if (queue == NULL || item_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_mutex_lock(&queue->lock);
    if (queue->count != 0) {
        *item_p = ps_queue_take(queue);
        st = PS_OK;
    } else {
        st = queue->closed ? PS_ERR_SHUTDOWN : PS_ERR_AGAIN;
    }
    ps_mutex_unlock(&queue->lock);
    return st;
}

void ps_queue_close(ps_queue_t *queue)
{
    if (queue == NULL) {
        return;
    }
    ps_mutex_lock(&queue->lock);
    __atomic_store_n(&queue->closed, 1, __ATOMIC_RELEASE);
    ps_cond_broadcast(&queue->nonempty);
    ps_mutex_unlock(&queue->lock);
}

int ps_queue_is_closed(ps_queue_t *queue)
{
    return __atomic_load_n(&queue->closed, __ATOMIC_ACQUIRE);
}

size_t ps_queue_size(ps_queue_t *queue)
{
    return __atomic_load_n(&queue->count, __ATOMIC_ACQUIRE);
}

/* ---- rings ---- */

#define PS_CACHE_ALIGNED __attribute__((aligned(PS_CACHE_LINE)))

struct ps_spsc_ring {
    /* consumer's line */
    uint64_t head PS_CACHE_ALIGNED;
    uint64_t tail_cache;  /* consumer's last view of tail */
    /* producer's line */
    uint64_t tail PS_CACHE_ALIGNED;
    uint64_t head_cache;  /* producer's last view of head */
    /* read-only after create */
    uint64_t mask PS_CACHE_ALIGNED;
    void *slots[];
};

typedef struct {
    uint64_t seq;
    void *data;
} ps_mpmc_cell_t;

struct ps_mpmc_ring {
    uint64_t enqueue_pos PS_CACHE_ALIGNED;
    uint64_t dequeue_pos PS_CACHE_ALIGNED;
    uint64_t mask PS_CACHE_ALIGNED;
    ps_mpmc_cell_t cells[];
};

_Static_assert(offsetof(struct ps_spsc_ring, tail) - offsetof(struct ps_spsc_ring, head) >=
                   PS_CACHE_LINE,
               "spsc indices share a cache line");
_Static_assert(offsetof(struct ps_mpmc_ring, dequeue_pos) -
                       offsetof(struct ps_mpmc_ring, enqueue_pos) >= PS_CACHE_LINE,
               "mpmc indices share a cache line");

static int ps_ring_capacity_ok(size_t capacity)
{
    return capacity >= 2 && capacity <= PS_RING_MAX_CAPACITY &&
           (capacity & (capacity - 1)) == 0;
}

/* A zeroed, cache-line aligned block (the ring types require it). */
static void *ps_ring_alloc(size_t size)
{
    void *p;
    size = (size + PS_CACHE_LINE - 1) & ~(size_t)(PS_CACHE_LINE - 1);
    if (posix_memalign(&p, PS_CACHE_LINE, size) != 0) {
        return NULL;
    }
    memset(p, 0, size);
    return p;
}

ps_status_t ps_spsc_ring_create(size_t capacity, ps_spsc_ring_t **ring_p)
{
    if (ring_p == NULL || !ps_ring_capacity_ok(capacity)) {
        return PS_ERR_INVALID_ARG;
    }
    ps_spsc_ring_t *ring = ps_ring_alloc(sizeof(*ring) + capacity * sizeof(void *));
    if (ring == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ring->mask = capacity - 1;
    *ring_p = ring;
    return PS_OK;
}

void ps_spsc_ring_destroy(ps_spsc_ring_t *ring)
{
    free(ring);
}

ps_status_t ps_spsc_ring_push(ps_spsc_ring_t *ring, void *item)
{
    uint64_t tail = __atomic_load_n(&ring->tail, __ATOMIC_RELAXED); /* ours */
    if (tail - ring->head_cache > ring->mask) {
        /* Looks full from what we saw last: look again. */
        ring->head_cache = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
        if (tail - ring->head_cache > ring->mask) {
            return PS_ERR_AGAIN;
        }
    }
    ring->slots[tail & ring->mask] = item;
    __atomic_store_n(&ring->tail, tail + 1, __ATOMIC_RELEASE);
    return PS_OK;
}

ps_status_t ps_spsc_ring_pop(ps_spsc_ring_t *ring, void **item_p)
{
    uint64_t head = __atomic_load_n(&ring->head, __ATOMIC_RELAXED); /* ours */
    if (head == ring->tail_cache) {
        ring->tail_cache = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
        if (head == ring->tail_cache) {
            return PS_ERR_AGAIN;
        }
    }
    *item_p = ring->slots[head & ring->mask];
    __atomic_store_n(&ring->head, head + 1, __ATOMIC_RELEASE);
    return PS_OK;
}

size_t ps_spsc_ring_size(const ps_spsc_ring_t *ring)
{
    uint64_t head = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
    uint64_t tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
    return tail >= head ? (size_t)(tail - head) : 0;
}

size_t ps_spsc_ring_capacity(const ps_spsc_ring_t *ring)
{
    return (size_t)ring->mask + 1;
}

/*
 * MPMC ring (after Dmitry Vyukov's bounded queue): each cell carries a
 * sequence number saying whose turn it is. For position p, the cell is free
 * for the producer of p when seq == p and holds the item for the consumer of
 * p when seq == p + 1; the consumer hands it to the producer of the next lap
 * with seq = p + capacity. Positions are claimed with a CAS, the data is
 * published with a release store of seq.
 */
ps_status_t ps_mpmc_ring_create(size_t capacity, ps_mpmc_ring_t **ring_p)
{
    if (ring_p == NULL || !ps_ring_capacity_ok(capacity)) {
        return PS_ERR_INVALID_ARG;
    }
    ps_mpmc_ring_t *ring = ps_ring_alloc(sizeof(*ring) + capacity * sizeof(ps_mpmc_cell_t));
    if (ring == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < capacity; ++i) {
        ring->cells[i].seq = i;
    }
    ring->mask = capacity - 1;
    *ring_p = ring;
    return PS_OK;
}

void ps_mpmc_ring_destroy(ps_mpmc_ring_t *ring)
{
    free(ring);
}

ps_status_t ps_mpmc_ring_push(ps_mpmc_ring_t *ring, void *item)
{
    uint64_t pos = __atomic_load_n(&ring->enqueue_pos, __ATOMIC_RELAXED);
    ps_mpmc_cell_t *cell;

    for (;;) {
        cell = &ring->cells[pos & ring->mask];
        uint64_t seq = __atomic_load_n(&cell->seq, __ATOMIC_ACQUIRE);
        int64_t diff = (int64_t)(seq - pos);
        if (diff == 0) {
            if (__atomic_compare_exchange_n(&ring->enqueue_pos, &pos, pos + 1, 1,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                break;
            }
            /* lost the race: pos now holds the current value */
        } else if (diff < 0) {
            return PS_ERR_AGAIN; /* the consumer of the last lap is not done: full */
        } else {
            pos = __atomic_load_n(&ring->enqueue_pos, __ATOMIC_RELAXED);
        }
    }
    cell->data = item;
    __atomic_store_n(&cell->seq, pos + 1, __ATOMIC_RELEASE);
    return PS_OK;
}

ps_status_t ps_mpmc_ring_pop(ps_mpmc_ring_t *ring, void **item_p)
{
    uint64_t pos = __atomic_load_n(&ring->dequeue_pos, __ATOMIC_RELAXED);
    ps_mpmc_cell_t *cell;

    for (;;) {
        cell = &ring->cells[pos & ring->mask];
        uint64_t seq = __atomic_load_n(&cell->seq, __ATOMIC_ACQUIRE);
        int64_t diff = (int64_t)(seq - (pos + 1));
        if (diff == 0) {
            if (__atomic_compare_exchange_n(&ring->dequeue_pos, &pos, pos + 1, 1,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                break;
            }
        } else if (diff < 0) {
            return PS_ERR_AGAIN; /* nothing published at this position: empty */
        } else {
            pos = __atomic_load_n(&ring->dequeue_pos, __ATOMIC_RELAXED);
        }
    }
    *item_p = cell->data;
    __atomic_store_n(&cell->seq, pos + ring->mask + 1, __ATOMIC_RELEASE);
    return PS_OK;
}

size_t ps_mpmc_ring_size(const ps_mpmc_ring_t *ring)
{
    uint64_t deq = __atomic_load_n(&ring->dequeue_pos, __ATOMIC_ACQUIRE);
    uint64_t enq = __atomic_load_n(&ring->enqueue_pos, __ATOMIC_ACQUIRE);
    return enq >= deq ? (size_t)(enq - deq) : 0;
}

size_t ps_mpmc_ring_capacity(const ps_mpmc_ring_t *ring)
{
    return (size_t)ring->mask + 1;
}

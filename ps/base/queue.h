/*
 * Queues of pointers between threads.
 *
 *  - ps_queue_t: unbounded, blocking, any number of producers and consumers.
 *    pop() waits with a deadline and says why it returned; close() wakes
 *    everyone, and consumers still drain what was queued before they see
 *    PS_ERR_SHUTDOWN. Optionally a consumer spins for a bounded time before
 *    it sleeps: on a machine where waking a sleeping thread costs tens of
 *    microseconds this buys latency with CPU.
 *  - ps_spsc_ring_t: bounded, lock-free, one producer and one consumer.
 *  - ps_mpmc_ring_t: bounded, lock-free (per-cell sequence numbers), any
 *    number of producers and consumers.
 *
 * The rings never block: push returns PS_ERR_AGAIN when full, pop when
 * empty. Items are opaque pointers; NULL is a valid item.
 */
#ifndef PS_BASE_QUEUE_H_
#define PS_BASE_QUEUE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/base/time.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_CACHE_LINE 64

/* ---- blocking MPMC queue ---- */

typedef struct ps_queue ps_queue_t;

/* A spin budget that covers a wake-up on a busy machine without burning a
 * core for long when the queue stays empty. */
#define PS_QUEUE_DEFAULT_SPIN_NS 50000ull

/* Creates an empty queue. `spin_ns` > 0 makes pop() spin up to that long
 * (checking without the lock) before it sleeps; 0 sleeps at once. */
ps_status_t ps_queue_create(uint64_t spin_ns, ps_queue_t **queue_p);
/* Frees the queue; items still in it are dropped (drain first if they own
 * memory). No thread may use it any more. */
void ps_queue_destroy(ps_queue_t *queue);

/* PS_ERR_SHUTDOWN once closed, PS_ERR_NO_MEMORY if it cannot grow. */
ps_status_t ps_queue_push(ps_queue_t *queue, void *item);

/* The oldest item: PS_OK; PS_ERR_TIMED_OUT when the deadline passes with the
 * queue empty; PS_ERR_SHUTDOWN when it is closed and empty. */
ps_status_t ps_queue_pop(ps_queue_t *queue, ps_deadline_t deadline, void **item_p);
/* Without waiting: PS_ERR_AGAIN when empty (and open). */
ps_status_t ps_queue_try_pop(ps_queue_t *queue, void **item_p);

/* Refuses further pushes and wakes every waiting consumer. Idempotent. */
void ps_queue_close(ps_queue_t *queue);
int ps_queue_is_closed(ps_queue_t *queue);
size_t ps_queue_size(ps_queue_t *queue);

/* ---- lock-free SPSC ring ---- */

/* Heap objects, cache-line aligned, with the producer's and the consumer's
 * indices on separate lines. */
typedef struct ps_spsc_ring ps_spsc_ring_t;

/* `capacity`: a power of two, 2 .. 2^31. */
ps_status_t ps_spsc_ring_create(size_t capacity, ps_spsc_ring_t **ring_p);
void ps_spsc_ring_destroy(ps_spsc_ring_t *ring);
/* Producer only: PS_OK or PS_ERR_AGAIN (full). */
ps_status_t ps_spsc_ring_push(ps_spsc_ring_t *ring, void *item);
/* Consumer only: PS_OK or PS_ERR_AGAIN (empty). */
ps_status_t ps_spsc_ring_pop(ps_spsc_ring_t *ring, void **item_p);
/* Items in the ring (exact only when both sides are quiet). */
size_t ps_spsc_ring_size(const ps_spsc_ring_t *ring);
size_t ps_spsc_ring_capacity(const ps_spsc_ring_t *ring);

/* ---- lock-free MPMC ring ---- */

typedef struct ps_mpmc_ring ps_mpmc_ring_t;

/* `capacity`: a power of two, 2 .. 2^31. */
ps_status_t ps_mpmc_ring_create(size_t capacity, ps_mpmc_ring_t **ring_p);
void ps_mpmc_ring_destroy(ps_mpmc_ring_t *ring);
/* Any thread: PS_OK or PS_ERR_AGAIN (full). */
ps_status_t ps_mpmc_ring_push(ps_mpmc_ring_t *ring, void *item);
/* Any thread: PS_OK or PS_ERR_AGAIN (empty). */
ps_status_t ps_mpmc_ring_pop(ps_mpmc_ring_t *ring, void **item_p);
size_t ps_mpmc_ring_size(const ps_mpmc_ring_t *ring);
size_t ps_mpmc_ring_capacity(const ps_mpmc_ring_t *ring);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_QUEUE_H_ */

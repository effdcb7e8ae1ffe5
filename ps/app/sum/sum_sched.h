/*
 * The order in which an engine thread applies pushes (internal to the
 * summation server; public to its tests).
 *
 * FIFO mode: arrival order.
 * Priority mode (BYTEPS_SERVER_ENABLE_SCHEDULE=1), upstream's order: the
 * next push is one of the key with the fewest pushes counted since its
 * counter was last cleared (the server clears it when the key's round has
 * received its last push, so a key about to complete goes first), ties by
 * arrival. Upstream keeps push items in a std heap whose comparator reads
 * those counters while they change; here each key's pushes wait in their
 * own FIFO and the heap holds keys, re-sorted whenever a counter changes,
 * so the order is exactly the comparator's at the time of each pop, and a
 * key's own pushes are never reordered.
 *
 * No locking: the engine holds its lock around every call.
 */
#ifndef PS_APP_SUM_SUM_SCHED_H_
#define PS_APP_SUM_SUM_SCHED_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps__sum_queue ps__sum_queue_t;

/* One push waiting to be applied. */
typedef struct ps__sum_item {
    struct ps__sum_item *next;
    ps__sum_queue_t *queue; /* its key's queue */
    uint64_t id;            /* arrival order */
    void *key;              /* the server's key state */
    ps_slice_t data;        /* the pushed values (a reference) */
    uint64_t round;         /* the round it belongs to */
    int worker;             /* the pushing worker's rank */
} ps__sum_item_t;

/* A key's waiting pushes; embedded in the key. */
struct ps__sum_queue {
    ps__sum_item_t *head, *tail;
    uint64_t count; /* pushes counted for priority since the last clear */
    int heap_index; /* position in the heap, -1 when absent */
};

typedef struct ps__sum_sched {
    int priority;
    size_t size;                        /* items waiting */
    ps__sum_item_t *fifo_head, *fifo_tail; /* FIFO mode */
    ps__sum_queue_t **heap;             /* priority mode: keys with items */
    size_t heap_len, heap_cap;
} ps__sum_sched_t;

void ps__sum_queue_init(ps__sum_queue_t *queue);

ps_status_t ps__sum_sched_init(ps__sum_sched_t *sched, int priority);
/* Frees the heap; items still queued are the caller's (pop them first). */
void ps__sum_sched_fini(ps__sum_sched_t *sched);

/* Queues item (item->queue set by the caller; id must grow with every
 * push). PS_ERR_NO_MEMORY when the heap cannot grow; nothing is queued
 * then. */
ps_status_t ps__sum_sched_push(ps__sum_sched_t *sched, ps__sum_item_t *item);
/* The next item, or NULL when empty. */
ps__sum_item_t *ps__sum_sched_pop(ps__sum_sched_t *sched);
/* Resets a key's priority counter (priority mode; a no-op otherwise). */
void ps__sum_sched_clear_count(ps__sum_sched_t *sched, ps__sum_queue_t *queue);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_SUM_SUM_SCHED_H_ */

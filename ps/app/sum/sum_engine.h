/*
 * Engine threads of the summation server (internal): each owns a queue
 * (sum_sched.h) of pushes to apply; a key is pinned to one thread, chosen
 * once as the thread with the fewest bytes pinned so far (upstream's
 * GetThreadID), so a key's pushes are applied in order by one thread. Idle
 * threads sleep on a condition variable.
 */
#ifndef PS_APP_SUM_SUM_ENGINE_H_
#define PS_APP_SUM_SUM_ENGINE_H_

#include <stddef.h>

#include "ps/app/sum/sum_sched.h"
#include "ps/base/status.h"
#include "ps/base/time.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Applies (discard 0) or drops (discard 1, at destroy) one item, which the
 * function then owns. Runs on an engine thread, no engine lock held. */
typedef void (*ps__sum_apply_func_t)(void *arg, ps__sum_item_t *item, int discard);

typedef struct ps__sum_engine ps__sum_engine_t;

ps_status_t ps__sum_engine_create(int threads, int priority, ps__sum_apply_func_t apply,
                                  void *arg, ps__sum_engine_t **engine_p);
/* Stops the threads after the item each is applying; items still queued
 * are handed to apply with discard 1. */
void ps__sum_engine_destroy(ps__sum_engine_t *engine);

/* The thread with the fewest bytes pinned so far; `bytes` are added to it. */
int ps__sum_engine_pin(ps__sum_engine_t *engine, size_t bytes);

/* Queues item on `thread`. PS_ERR_NO_MEMORY (nothing queued: apply it
 * yourself) or PS_ERR_SHUTDOWN after destroy began. */
ps_status_t ps__sum_engine_push(ps__sum_engine_t *engine, int thread, ps__sum_item_t *item);
void ps__sum_engine_clear_count(ps__sum_engine_t *engine, int thread, ps__sum_queue_t *queue);

/* Blocks until every queue is empty and no item is being applied. */
ps_status_t ps__sum_engine_wait_idle(ps__sum_engine_t *engine, ps_deadline_t deadline);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_SUM_SUM_ENGINE_H_ */

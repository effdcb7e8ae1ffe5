/*
 * Work that waits for device data to be ready: a push that carries a
 * readiness event (or a stream) is sent only when the event completed. One
 * thread per queue polls the event at the head, so neither the caller nor
 * a van's progress loop blocks on the device; entries run in the order
 * they were added (on one stream, events complete in that order anyway).
 */
#ifndef PS_APP_READY_QUEUE_H_
#define PS_APP_READY_QUEUE_H_

#include <stdbool.h>

#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/gpu/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps__ready_queue ps__ready_queue_t;

/* Runs once per entry, on the queue's thread: PS_OK when the event
 * completed; else why the entry ends without it: the event's own error,
 * PS_ERR_TIMED_OUT after the entry's timeout, PS_ERR_SHUTDOWN when the
 * queue is destroyed first. */
typedef void (*ps__ready_fn_t)(void *arg, ps_status_t why);

ps_status_t ps__ready_queue_create(ps__ready_queue_t **queue_p);

/* The queue in *slot, made (under `lock`) by the first caller: for an
 * owner that makes its queue only once something waits. */
ps_status_t ps__ready_queue_get(_Atomic(ps__ready_queue_t *) *slot, ps_mutex_t *lock,
                                ps__ready_queue_t **queue_p);

/* Queues fn(arg) behind `event`. timeout_ms < 0: no deadline of its own.
 * With own_event the queue destroys the event after fn ran. On an error
 * return nothing was queued (and the event is still the caller's). */
ps_status_t ps__ready_queue_add(ps__ready_queue_t *queue, ps_mem_event_h event, bool own_event,
                                int timeout_ms, ps__ready_fn_t fn, void *arg);

/* The event to wait for before sending device data of `kind` on `device`:
 * `event` itself when given, else one recorded now on `stream` (NULL: the
 * device's default stream), which *own_p says the caller must destroy.
 * *event_p NULL with PS_OK when the work is done already (nothing to
 * wait for); another status when the event cannot be made or failed
 * (logged, naming `what`). */
ps_status_t ps__ready_event(ps_mem_kind_t kind, int device, ps_mem_event_h event, void *stream,
                            const char *what, ps_mem_event_h *event_p, bool *own_p);
/* Ends the thread: entries whose event completed by then run with PS_OK,
 * the others with PS_ERR_SHUTDOWN. Waits for the fn running now. NULL is a
 * no-op. */
void ps__ready_queue_destroy(ps__ready_queue_t *queue);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_READY_QUEUE_H_ */

/* Work waiting for readiness events, polled by one thread (ready_queue.h):
 * entries travel through a ps_queue_t; the thread takes one at a time and
 * polls its event until it completes, runs out of time, or the queue
 * closes. */
#include "ps/app/ready_queue.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "ps/base/log.h"
#include "ps/base/queue.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"

/* Polling an event: a short spin (an event a few microseconds away), then
 * sleeps growing to POLL_MAX_NS (a copy or kernel of milliseconds costs
 * little CPU). */
#define POLL_SPIN_NS 20000
#define POLL_MIN_NS 2000
#define POLL_MAX_NS 200000

typedef struct {
    ps_mem_event_h event;
    bool own_event;
    ps_deadline_t deadline;
    ps__ready_fn_t fn;
    void *arg;
} ready_entry_t;

struct ps__ready_queue {
    ps_queue_t *entries;
    atomic_bool closing; /* entries not ready by now end with PS_ERR_SHUTDOWN */
    ps_thread_t thread;
};

/* How entry e ends: PS_OK once its event completed, else why not. */
static ps_status_t await(ps__ready_queue_t *q, const ready_entry_t *e)
{
    uint64_t since = ps_time_now_ns(), nap = POLL_MIN_NS;
    for (;;) {
        ps_status_t st = ps_mem_event_query(e->event);
        if (st != PS_INPROGRESS)
            return st;
        if (atomic_load(&q->closing))
            return PS_ERR_SHUTDOWN;
        if (ps_deadline_expired(e->deadline))
            return PS_ERR_TIMED_OUT;
        if (ps_time_now_ns() - since < POLL_SPIN_NS) {
            ps_cpu_relax();
        } else {
            ps_sleep_ns(nap);
            nap = nap * 2 > POLL_MAX_NS ? POLL_MAX_NS : nap * 2;
        }
    }
}

static void *ready_main(void *arg)
{
    ps__ready_queue_t *q = arg;
    void *item;
    /* Drains what was queued before the close, each entry in turn. */
    while (ps_queue_pop(q->entries, ps_deadline_infinite(), &item) == PS_OK) {
        ready_entry_t *e = item;
        e->fn(e->arg, await(q, e));
        if (e->own_event)
            (void)ps_mem_event_destroy(e->event);
        free(e);
    }
    return NULL;
}

ps_status_t ps__ready_queue_create(ps__ready_queue_t **queue_p)
{
    ps__ready_queue_t *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return PS_ERR_NO_MEMORY;
    ps_status_t st = ps_queue_create(0, &q->entries);
    if (st == PS_OK &&
        (st = ps_thread_create("ps-ready", PS_THREAD_NO_CPU, ready_main, q, &q->thread)) != PS_OK)
        ps_queue_destroy(q->entries);
    if (st != PS_OK) {
        free(q);
        return st;
    }
    *queue_p = q;
    return PS_OK;
}

ps_status_t ps__ready_queue_get(_Atomic(ps__ready_queue_t *) *slot, ps_mutex_t *lock,
                                ps__ready_queue_t **queue_p)
{
    ps__ready_queue_t *q = atomic_load(slot);
    ps_status_t st = PS_OK;
    if (q == NULL) {
        ps_mutex_lock(lock);
        q = atomic_load(slot);
        if (q == NULL && (st = ps__ready_queue_create(&q)) == PS_OK)
            atomic_store(slot, q);
        ps_mutex_unlock(lock);
    }
    *queue_p = q;
    return st;
}

ps_status_t ps__ready_queue_add(ps__ready_queue_t *q, ps_mem_event_h event, bool own_event,
                                int timeout_ms, ps__ready_fn_t fn, void *arg)
{
    if (q == NULL || event == NULL || fn == NULL)
        return PS_ERR_INVALID_ARG;
    ready_entry_t *e = malloc(sizeof(*e));
    if (e == NULL)
        return PS_ERR_NO_MEMORY;
    *e = (ready_entry_t){event, own_event, ps_deadline_from_ms(timeout_ms), fn, arg};
    ps_status_t st = ps_queue_push(q->entries, e);
    if (st != PS_OK)
        free(e); /* closed: PS_ERR_SHUTDOWN, and the event is still the caller's */
    return st;
}

void ps__ready_queue_destroy(ps__ready_queue_t *q)
{
    if (q == NULL)
        return;
    atomic_store(&q->closing, true);
    ps_queue_close(q->entries);
    (void)ps_thread_join(&q->thread, NULL);
    ps_queue_destroy(q->entries);
    free(q);
}

ps_status_t ps__ready_event(ps_mem_kind_t kind, int device, ps_mem_event_h event, void *stream,
                            const char *what, ps_mem_event_h *event_p, bool *own_p)
{
    *event_p = NULL;
    *own_p = false;
    ps_mem_event_h ev = event;
    if (ev == NULL) {
        const ps_mem_ops_t *ops = ps_mem_ops(kind);
        ps_status_t st = ops->event_create(device, &ev);
        if (st == PS_OK && (st = ops->event_record(ev, stream)) != PS_OK)
            (void)ops->event_destroy(ev);
        if (st != PS_OK) {
            ps_error(PS_LOG_APP, "%s: cannot record a readiness event on the caller's stream: %s",
                     what, ps_status_str(st));
            return st;
        }
        *own_p = true;
    }
    ps_status_t st = ps_mem_event_query(ev);
    if (st == PS_INPROGRESS) {
        *event_p = ev;
        return PS_OK;
    }
    if (*own_p)
        (void)ps_mem_event_destroy(ev);
    *own_p = false;
    if (st != PS_OK)
        ps_error(PS_LOG_APP, "%s: its readiness event failed: %s", what, ps_status_str(st));
    return st; /* PS_OK: complete already */
}

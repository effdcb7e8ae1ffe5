/* Work waiting for readiness events, polled by one thread (ready_queue.h). */
#include "ps/app/ready_queue.h"

#include <stdlib.h>

#include "ps/base/thread.h"
#include "ps/base/time.h"

/* Polling the head's event: a short spin (an event a few microseconds
 * away), then sleeps growing to POLL_MAX_NS (a copy or kernel of
 * milliseconds costs little CPU). */
#define POLL_SPIN_NS 20000
#define POLL_MIN_NS 2000
#define POLL_MAX_NS 200000

typedef struct ready_entry {
    struct ready_entry *next;
    ps_mem_event_h event;
    bool own_event;
    ps_deadline_t deadline;
    ps__ready_fn_t fn;
    void *arg;
} ready_entry_t;

struct ps__ready_queue {
    ps_mutex_t lock;
    ps_cond_t wake;
    ready_entry_t *head, *tail;
    int pending;
    bool closing;
    ps_thread_t thread;
};

static void entry_run(ready_entry_t *e, ps_status_t why)
{
    e->fn(e->arg, why);
    if (e->own_event)
        (void)ps_mem_event_destroy(e->event);
    free(e);
}

static ready_entry_t *pop_head(ps__ready_queue_t *q)
{
    ready_entry_t *e = q->head;
    q->head = e->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->pending--;
    return e;
}

static void *ready_main(void *arg)
{
    ps__ready_queue_t *q = arg;
    uint64_t waiting_since = 0, nap = POLL_MIN_NS;
    ps_mutex_lock(&q->lock);
    for (;;) {
        if (q->head == NULL) {
            if (q->closing)
                break;
            (void)ps_cond_wait(&q->wake, &q->lock, ps_deadline_infinite());
            continue;
        }
        ready_entry_t *e = q->head;
        bool closing = q->closing;
        ps_mutex_unlock(&q->lock);

        ps_status_t st = ps_mem_event_query(e->event);
        if (st == PS_INPROGRESS && closing)
            st = PS_ERR_SHUTDOWN;
        else if (st == PS_INPROGRESS && ps_deadline_expired(e->deadline))
            st = PS_ERR_TIMED_OUT;
        if (st == PS_INPROGRESS) {
            uint64_t now = ps_time_now_ns();
            if (waiting_since == 0)
                waiting_since = now;
            if (now - waiting_since < POLL_SPIN_NS) {
                ps_cpu_relax();
            } else {
                ps_sleep_ns(nap);
                nap = nap * 2 > POLL_MAX_NS ? POLL_MAX_NS : nap * 2;
            }
            ps_mutex_lock(&q->lock);
            continue;
        }
        waiting_since = 0;
        nap = POLL_MIN_NS;
        ps_mutex_lock(&q->lock);
        e = pop_head(q); /* still the head: only this thread takes entries */
        ps_mutex_unlock(&q->lock);
        entry_run(e, st);
        ps_mutex_lock(&q->lock);
    }
    ps_mutex_unlock(&q->lock);
    return NULL;
}

ps_status_t ps__ready_queue_create(ps__ready_queue_t **queue_p)
{
    ps__ready_queue_t *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return PS_ERR_NO_MEMORY;
    ps_status_t st = ps_mutex_init(&q->lock);
    if (st == PS_OK && (st = ps_cond_init(&q->wake)) != PS_OK)
        ps_mutex_destroy(&q->lock);
    if (st != PS_OK) {
        free(q);
        return st;
    }
    st = ps_thread_create("ps-ready", PS_THREAD_NO_CPU, ready_main, q, &q->thread);
    if (st != PS_OK) {
        ps_cond_destroy(&q->wake);
        ps_mutex_destroy(&q->lock);
        free(q);
        return st;
    }
    *queue_p = q;
    return PS_OK;
}

ps_status_t ps__ready_queue_add(ps__ready_queue_t *q, ps_mem_event_h event, bool own_event,
                                int timeout_ms, ps__ready_fn_t fn, void *arg)
{
    if (q == NULL || event == NULL || fn == NULL)
        return PS_ERR_INVALID_ARG;
    ready_entry_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return PS_ERR_NO_MEMORY;
    e->event = event;
    e->own_event = own_event;
    e->deadline = ps_deadline_from_ms(timeout_ms);
    e->fn = fn;
    e->arg = arg;
    ps_mutex_lock(&q->lock);
    if (q->closing) {
        ps_mutex_unlock(&q->lock);
        free(e);
        return PS_ERR_SHUTDOWN;
    }
    if (q->tail != NULL)
        q->tail->next = e;
    else
        q->head = e;
    q->tail = e;
    q->pending++;
    ps_cond_signal(&q->wake);
    ps_mutex_unlock(&q->lock);
    return PS_OK;
}

int ps__ready_queue_pending(ps__ready_queue_t *q)
{
    ps_mutex_lock(&q->lock);
    int n = q->pending;
    ps_mutex_unlock(&q->lock);
    return n;
}

void ps__ready_queue_destroy(ps__ready_queue_t *q)
{
    if (q == NULL)
        return;
    ps_mutex_lock(&q->lock);
    q->closing = true;
    ps_cond_signal(&q->wake);
    ps_mutex_unlock(&q->lock);
    (void)ps_thread_join(&q->thread, NULL);
    ps_cond_destroy(&q->wake);
    ps_mutex_destroy(&q->lock);
    free(q);
}

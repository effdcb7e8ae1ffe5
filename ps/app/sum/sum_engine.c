#include "ps/app/sum/sum_engine.h"

#include <stdio.h>
#include <stdlib.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"

typedef struct {
    ps__sum_engine_t *engine;
    int index;
    ps_mutex_t lock;
    ps_cond_t work;  /* signalled when an item arrives or on stop */
    ps_cond_t idle;  /* broadcast when the queue drained and nothing runs */
    ps__sum_sched_t sched;
    int busy;        /* an item is being applied */
    int stop;
    size_t pinned;   /* bytes of the keys pinned here (engine->pin_lock) */
    ps_thread_t thread;
    int started;
} engine_thread_t;

struct ps__sum_engine {
    ps__sum_apply_func_t apply;
    void *arg;
    int num_threads;
    ps_mutex_t pin_lock;
    engine_thread_t *threads;
};

static void *engine_main(void *arg)
{
    engine_thread_t *t = arg;
    ps__sum_engine_t *e = t->engine;
    ps_mutex_lock(&t->lock);
    for (;;) {
        while (!t->stop && t->sched.size == 0)
            ps_cond_wait(&t->work, &t->lock, ps_deadline_infinite());
        if (t->stop)
            break;
        ps__sum_item_t *item = ps__sum_sched_pop(&t->sched);
        t->busy = 1;
        ps_mutex_unlock(&t->lock);
        e->apply(e->arg, item, 0);
        ps_mutex_lock(&t->lock);
        t->busy = 0;
        if (t->sched.size == 0)
            ps_cond_broadcast(&t->idle);
    }
    ps_mutex_unlock(&t->lock);
    return NULL;
}

ps_status_t ps__sum_engine_create(int threads, int priority, ps__sum_apply_func_t apply,
                                  void *arg, ps__sum_engine_t **engine_p)
{
    if (threads < 1 || !apply || !engine_p)
        return PS_ERR_INVALID_ARG;
    ps__sum_engine_t *e = calloc(1, sizeof(*e));
    if (!e)
        return PS_ERR_NO_MEMORY;
    e->apply = apply;
    e->arg = arg;
    e->threads = calloc((size_t)threads, sizeof(*e->threads));
    ps_status_t st = PS_ERR_NO_MEMORY;
    if (!e->threads || (st = ps_mutex_init(&e->pin_lock)) != PS_OK) {
        free(e->threads);
        free(e);
        return st;
    }
    for (int i = 0; i < threads; i++) {
        engine_thread_t *t = &e->threads[i];
        t->engine = e;
        t->index = i;
        if ((st = ps_mutex_init(&t->lock)) != PS_OK)
            break;
        if ((st = ps_cond_init(&t->work)) != PS_OK) {
            ps_mutex_destroy(&t->lock);
            break;
        }
        if ((st = ps_cond_init(&t->idle)) != PS_OK) {
            ps_cond_destroy(&t->work);
            ps_mutex_destroy(&t->lock);
            break;
        }
        ps__sum_sched_init(&t->sched, priority);
        e->num_threads = i + 1;
        char name[PS_THREAD_NAME_MAX];
        snprintf(name, sizeof(name), "ps-sum-%d", i % 10000);
        if ((st = ps_thread_create(name, PS_THREAD_NO_CPU, engine_main, t, &t->thread)) != PS_OK)
            break;
        t->started = 1;
    }
    if (st != PS_OK) {
        ps_error(PS_LOG_APP, "sum engine: cannot start %d threads: %s", threads,
                 ps_status_str(st));
        ps__sum_engine_destroy(e);
        return st;
    }
    *engine_p = e;
    return PS_OK;
}

void ps__sum_engine_destroy(ps__sum_engine_t *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->num_threads; i++) {
        engine_thread_t *t = &e->threads[i];
        ps_mutex_lock(&t->lock);
        t->stop = 1;
        ps_cond_broadcast(&t->work);
        ps_mutex_unlock(&t->lock);
    }
    for (int i = 0; i < e->num_threads; i++) {
        engine_thread_t *t = &e->threads[i];
        if (t->started)
            ps_thread_join(&t->thread, NULL);
        ps__sum_item_t *item;
        while ((item = ps__sum_sched_pop(&t->sched)) != NULL)
            e->apply(e->arg, item, 1);
        ps__sum_sched_fini(&t->sched);
        ps_cond_destroy(&t->idle);
        ps_cond_destroy(&t->work);
        ps_mutex_destroy(&t->lock);
    }
    ps_mutex_destroy(&e->pin_lock);
    free(e->threads);
    free(e);
}

int ps__sum_engine_pin(ps__sum_engine_t *e, size_t bytes)
{
    ps_mutex_lock(&e->pin_lock);
    int best = 0;
    for (int i = 1; i < e->num_threads; i++)
        if (e->threads[i].pinned < e->threads[best].pinned)
            best = i;
    e->threads[best].pinned += bytes;
    ps_mutex_unlock(&e->pin_lock);
    return best;
}

ps_status_t ps__sum_engine_push(ps__sum_engine_t *e, int thread, ps__sum_item_t *item)
{
    engine_thread_t *t = &e->threads[thread];
    ps_mutex_lock(&t->lock);
    ps_status_t st = t->stop ? PS_ERR_SHUTDOWN : ps__sum_sched_push(&t->sched, item);
    if (st == PS_OK)
        ps_cond_signal(&t->work);
    ps_mutex_unlock(&t->lock);
    return st;
}

void ps__sum_engine_clear_count(ps__sum_engine_t *e, int thread, ps__sum_queue_t *queue)
{
    engine_thread_t *t = &e->threads[thread];
    ps_mutex_lock(&t->lock);
    ps__sum_sched_clear_count(&t->sched, queue);
    ps_mutex_unlock(&t->lock);
}

ps_status_t ps__sum_engine_wait_idle(ps__sum_engine_t *e, ps_deadline_t deadline)
{
    for (int i = 0; i < e->num_threads; i++) {
        engine_thread_t *t = &e->threads[i];
        ps_mutex_lock(&t->lock);
        while (!t->stop && (t->sched.size > 0 || t->busy)) {
            if (ps_cond_wait(&t->idle, &t->lock, deadline) == PS_ERR_TIMED_OUT &&
                (t->sched.size > 0 || t->busy)) {
                ps_mutex_unlock(&t->lock);
                return PS_ERR_TIMED_OUT;
            }
        }
        ps_mutex_unlock(&t->lock);
    }
    return PS_OK;
}

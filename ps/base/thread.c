#include "ps/base/thread.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ps/base/log.h"

/* What the new thread needs before it calls the user's function. */
typedef struct {
    ps_thread_func_t fn;
    void *arg;
    char name[PS_THREAD_NAME_MAX];
} ps_thread_start_t;

static void ps_thread_copy_name(char *dst, const char *name)
{
    size_t n = name != NULL ? strnlen(name, PS_THREAD_NAME_MAX - 1) : 0;
    memcpy(dst, name != NULL ? name : "", n);
    dst[n] = '\0';
}

/* Names itself first, so the name is in place before any of the user's code
 * (and its log lines) runs. */
static void *ps_thread_trampoline(void *p)
{
    ps_thread_start_t start = *(ps_thread_start_t *)p;
    free(p);
    if (start.name[0] != '\0') {
        pthread_setname_np(pthread_self(), start.name);
    }
    return start.fn(start.arg);
}

ps_status_t ps_thread_create(const char *name, int cpu, ps_thread_func_t fn, void *arg,
                             ps_thread_t *thread_p)
{
    pthread_attr_t attr;
    pthread_t tid;
    ps_thread_start_t *start;
    int err;

    if (fn == NULL || thread_p == NULL || cpu < PS_THREAD_NO_CPU) {
        return PS_ERR_INVALID_ARG;
    }
    if (cpu >= CPU_SETSIZE) {
        ps_error(PS_LOG_BASE, "cannot pin thread %s to cpu %d: beyond %d cpus",
                 name ? name : "?", cpu, CPU_SETSIZE);
        return PS_ERR_INVALID_ARG;
    }
    start = malloc(sizeof(*start));
    if (start == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    start->fn = fn;
    start->arg = arg;
    ps_thread_copy_name(start->name, name);

    err = pthread_attr_init(&attr);
    if (err != 0) {
        free(start);
        return ps_status_from_errno(err);
    }
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        /* Pinned before it runs: the thread never starts on the wrong core. */
        err = pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
        if (err != 0) {
            pthread_attr_destroy(&attr);
            errno = err;
            ps_error(PS_LOG_BASE, "cannot pin thread %s to cpu %d: %m", start->name, cpu);
            free(start);
            return PS_ERR_INVALID_ARG;
        }
    }
    err = pthread_create(&tid, &attr, ps_thread_trampoline, start);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        errno = err;
        if (cpu >= 0 && err == EINVAL) {
            ps_error(PS_LOG_BASE, "cannot start thread %s on cpu %d: %m", start->name, cpu);
        } else {
            ps_error(PS_LOG_BASE, "cannot start thread %s: %m", start->name);
        }
        free(start);
        return err == EAGAIN ? PS_ERR_NO_RESOURCE : ps_status_from_errno(err);
    }
    thread_p->tid = tid;
    thread_p->joinable = 1;
    return PS_OK;
}

ps_status_t ps_thread_join(ps_thread_t *thread, void **ret_p)
{
    void *ret;

    if (thread == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (!thread->joinable || pthread_equal(thread->tid, pthread_self())) {
        return PS_ERR_BAD_STATE;
    }
    int err = pthread_join(thread->tid, &ret);
    if (err != 0) {
        errno = err;
        ps_error(PS_LOG_BASE, "pthread_join failed: %m");
        return err == EDEADLK ? PS_ERR_BAD_STATE : ps_status_from_errno(err);
    }
    thread->joinable = 0;
    if (ret_p != NULL) {
        *ret_p = ret;
    }
    return PS_OK;
}

ps_status_t ps_thread_set_name(const char *name)
{
    char buf[PS_THREAD_NAME_MAX];

    if (name == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_thread_copy_name(buf, name);
    int err = pthread_setname_np(pthread_self(), buf);
    return err == 0 ? PS_OK : ps_status_from_errno(err);
}

void ps_thread_get_name(char *buf, size_t cap)
{
    char name[PS_THREAD_NAME_MAX];

    if (buf == NULL || cap == 0) {
        return;
    }
    if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) {
        name[0] = '\0';
    }
    size_t n = strnlen(name, sizeof(name));
    if (n >= cap) {
        n = cap - 1;
    }
    memcpy(buf, name, n);
    buf[n] = '\0';
}

ps_status_t ps_thread_pin_self(int cpu)
{
    cpu_set_t set;

    if (cpu < 0 || cpu >= CPU_SETSIZE) {
        return PS_ERR_INVALID_ARG;
    }
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (err != 0) {
        errno = err;
        ps_error(PS_LOG_BASE, "cannot pin thread to cpu %d: %m", cpu);
        return PS_ERR_INVALID_ARG;
    }
    return PS_OK;
}

int ps_thread_num_cpus(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) {
            return n;
        }
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int ps_thread_self_tid(void)
{
    return (int)syscall(SYS_gettid);
}

/* ---- mutex and condition variable ---- */

ps_status_t ps_mutex_init(ps_mutex_t *mutex)
{
    if (mutex == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    int err = pthread_mutex_init(&mutex->m, NULL);
    return err == 0 ? PS_OK : ps_status_from_errno(err);
}

void ps_mutex_destroy(ps_mutex_t *mutex)
{
    if (mutex != NULL) {
        int err = pthread_mutex_destroy(&mutex->m);
        if (err != 0) {
            errno = err;
            ps_warn(PS_LOG_BASE, "destroying a mutex failed (still locked?): %m");
        }
    }
}

ps_status_t ps_mutex_trylock(ps_mutex_t *mutex)
{
    int err = pthread_mutex_trylock(&mutex->m);
    return err == 0 ? PS_OK : err == EBUSY ? PS_ERR_AGAIN : ps_status_from_errno(err);
}

ps_status_t ps_cond_init(ps_cond_t *cond)
{
    pthread_condattr_t attr;
    int err;

    if (cond == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    err = pthread_condattr_init(&attr);
    if (err == 0) {
        err = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        if (err == 0) {
            err = pthread_cond_init(&cond->c, &attr);
        }
        pthread_condattr_destroy(&attr);
    }
    return err == 0 ? PS_OK : ps_status_from_errno(err);
}

void ps_cond_destroy(ps_cond_t *cond)
{
    if (cond != NULL) {
        pthread_cond_destroy(&cond->c);
    }
}

void ps_cond_signal(ps_cond_t *cond)
{
    pthread_cond_signal(&cond->c);
}

void ps_cond_broadcast(ps_cond_t *cond)
{
    pthread_cond_broadcast(&cond->c);
}

ps_status_t ps_cond_wait(ps_cond_t *cond, ps_mutex_t *mutex, ps_deadline_t deadline)
{
    struct timespec ts;

    if (ps_deadline_to_timespec(deadline, &ts) != PS_OK) {
        pthread_cond_wait(&cond->c, &mutex->m);
        return PS_OK;
    }
    int err = pthread_cond_timedwait(&cond->c, &mutex->m, &ts);
    return err == ETIMEDOUT ? PS_ERR_TIMED_OUT : PS_OK;
}

/* ---- event ---- */

ps_status_t ps_event_init(ps_event_t *event, int auto_reset)
{
    ps_status_t st;

    if (event == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    st = ps_mutex_init(&event->lock);
    if (st != PS_OK) {
        return st;
    }
    st = ps_cond_init(&event->cond);
    if (st != PS_OK) {
        ps_mutex_destroy(&event->lock);
        return st;
    }
    event->signaled = 0;
    event->auto_reset = auto_reset != 0;
    return PS_OK;
}

void ps_event_destroy(ps_event_t *event)
{
    if (event != NULL) {
        ps_cond_destroy(&event->cond);
        ps_mutex_destroy(&event->lock);
    }
}

void ps_event_set(ps_event_t *event)
{
    ps_mutex_lock(&event->lock);
    event->signaled = 1;
    if (event->auto_reset) {
        ps_cond_signal(&event->cond);
    } else {
        ps_cond_broadcast(&event->cond);
    }
    ps_mutex_unlock(&event->lock);
}

void ps_event_reset(ps_event_t *event)
{
    ps_mutex_lock(&event->lock);
    event->signaled = 0;
    ps_mutex_unlock(&event->lock);
}

int ps_event_is_set(ps_event_t *event)
{
    ps_mutex_lock(&event->lock);
    int set = event->signaled;
    ps_mutex_unlock(&event->lock);
    return set;
}

ps_status_t ps_event_wait(ps_event_t *event, ps_deadline_t deadline)
{
    ps_status_t st = PS_OK;

    ps_mutex_lock(&event->lock);
    while (!event->signaled && st == PS_OK) {
        st = ps_cond_wait(&event->cond, &event->lock, deadline);
    }
    if (event->signaled) {
        if (event->auto_reset) {
            event->signaled = 0;
        }
        st = PS_OK;
    }
    ps_mutex_unlock(&event->lock);
    return st;
}

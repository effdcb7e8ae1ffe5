/*
 * Threads and their synchronisation: named (and optionally pinned) threads,
 * a mutex and a condition variable whose timed waits use CLOCK_MONOTONIC,
 * and a small event that a thread can wait on with a deadline.
 *
 * Every wait takes a ps_deadline_t (ps/base/time.h) and says why it ended:
 * PS_OK or PS_ERR_TIMED_OUT.
 */
#ifndef PS_BASE_THREAD_H_
#define PS_BASE_THREAD_H_

#include <pthread.h>
#include <stddef.h>

#include "ps/base/status.h"
#include "ps/base/time.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Thread names are cut to what the kernel keeps (15 characters). */
#define PS_THREAD_NAME_MAX 16
#define PS_THREAD_NO_CPU (-1)

typedef void *(*ps_thread_func_t)(void *arg);

typedef struct {
    pthread_t tid;
    int joinable; /* 1 from a successful create until join */
} ps_thread_t;

/* Starts `fn(arg)` on a new thread named `name` (shown by top -H, gdb and
 * perf). `cpu` >= 0 pins the thread to that CPU before it runs: an invalid
 * or disallowed CPU fails the call (PS_ERR_INVALID_ARG) and no thread is
 * started. PS_THREAD_NO_CPU leaves it unpinned. */
ps_status_t ps_thread_create(const char *name, int cpu, ps_thread_func_t fn, void *arg,
                             ps_thread_t *thread_p);

/* Waits for the thread to end and stores its return value in *ret_p (may be
 * NULL). PS_ERR_BAD_STATE if it was never started or already joined;
 * PS_ERR_BAD_STATE also for a thread joining itself. */
ps_status_t ps_thread_join(ps_thread_t *thread, void **ret_p);

/* Names / pins the calling thread. */
ps_status_t ps_thread_set_name(const char *name);
ps_status_t ps_thread_pin_self(int cpu);
/* The calling thread's name, "" if unknown. */
void ps_thread_get_name(char *buf, size_t cap);

/* CPUs this process may run on (at least 1). */
int ps_thread_num_cpus(void);

/* Kernel thread id of the caller, for log lines. */
int ps_thread_self_tid(void);

/* One pause in a spin loop: tells the CPU (and a hyperthread sibling) we
 * are waiting. */
static inline void ps_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* ---- mutex and condition variable ---- */

typedef struct {
    pthread_mutex_t m;
} ps_mutex_t;

typedef struct {
    pthread_cond_t c;
} ps_cond_t;

ps_status_t ps_mutex_init(ps_mutex_t *mutex);
void ps_mutex_destroy(ps_mutex_t *mutex);

static inline void ps_mutex_lock(ps_mutex_t *mutex)
{
    pthread_mutex_lock(&mutex->m);
}

static inline void ps_mutex_unlock(ps_mutex_t *mutex)
{
    pthread_mutex_unlock(&mutex->m);
}

/* PS_OK if taken, PS_ERR_AGAIN if another thread holds it. */
ps_status_t ps_mutex_trylock(ps_mutex_t *mutex);

/* The condition variable's timed waits run on CLOCK_MONOTONIC. */
ps_status_t ps_cond_init(ps_cond_t *cond);
void ps_cond_destroy(ps_cond_t *cond);
void ps_cond_signal(ps_cond_t *cond);
void ps_cond_broadcast(ps_cond_t *cond);

/* Waits (with `mutex` held, as pthread_cond_wait) until signalled or the
 * deadline passes: PS_OK when woken (possibly spuriously: re-check the
 * predicate), PS_ERR_TIMED_OUT when the deadline has passed. */
ps_status_t ps_cond_wait(ps_cond_t *cond, ps_mutex_t *mutex, ps_deadline_t deadline);

/* ---- event ---- */

/* A flag one thread sets and others wait for. A manual-reset (one-shot)
 * event stays set, releasing every waiter, until ps_event_reset(); an
 * auto-reset event releases one waiter per set and clears itself. */
typedef struct {
    ps_mutex_t lock;
    ps_cond_t cond;
    int signaled;
    int auto_reset;
} ps_event_t;

ps_status_t ps_event_init(ps_event_t *event, int auto_reset);
void ps_event_destroy(ps_event_t *event);
void ps_event_set(ps_event_t *event);
void ps_event_reset(ps_event_t *event);
/* 1 if set (does not consume an auto-reset event). */
int ps_event_is_set(ps_event_t *event);
/* PS_OK once set (consuming it if auto-reset), PS_ERR_TIMED_OUT if the
 * deadline passes first. An expired deadline still reports a set event. */
ps_status_t ps_event_wait(ps_event_t *event, ps_deadline_t deadline);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_THREAD_H_ */

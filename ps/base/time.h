/*
 * Time and deadlines. Every clock here is CLOCK_MONOTONIC, so a wall-clock
 * step (NTP, an operator) never shortens or stretches a wait.
 *
 * Every blocking wait in ps takes a ps_deadline_t: an absolute monotonic
 * time, or "infinite". Timeouts given in milliseconds follow one convention
 * everywhere: a negative value (PS_TIMEOUT_INFINITE) means wait forever, 0
 * means do not wait (poll once), and a positive value is the time allowed.
 */
#ifndef PS_BASE_TIME_H_
#define PS_BASE_TIME_H_

#include <stdint.h>
#include <time.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_TIMEOUT_INFINITE (-1)

#define PS_NSEC_PER_USEC 1000ull
#define PS_NSEC_PER_MSEC 1000000ull
#define PS_NSEC_PER_SEC 1000000000ull

/* An absolute CLOCK_MONOTONIC time in nanoseconds; at_ns == UINT64_MAX is
 * "never". Passed by value. */
typedef struct {
    uint64_t at_ns;
} ps_deadline_t;

/* Monotonic time since an arbitrary point (boot), in ns / us / ms. */
uint64_t ps_time_now_ns(void);
uint64_t ps_time_now_us(void);
uint64_t ps_time_now_ms(void);

ps_deadline_t ps_deadline_infinite(void);
/* `timeout_ms` from now; negative is infinite, 0 is already expired. Very
 * large timeouts saturate to a finite deadline far in the future. */
ps_deadline_t ps_deadline_from_ms(int64_t timeout_ms);
ps_deadline_t ps_deadline_from_ns(int64_t timeout_ns);
/* A deadline at the absolute monotonic time `at_ns` (from ps_time_now_ns). */
ps_deadline_t ps_deadline_at_ns(uint64_t at_ns);

int ps_deadline_is_infinite(ps_deadline_t deadline);
/* 1 once the deadline has passed; never for an infinite one. */
int ps_deadline_expired(ps_deadline_t deadline);
/* The earlier of two deadlines. */
ps_deadline_t ps_deadline_min(ps_deadline_t a, ps_deadline_t b);

/* Time left: -1 for infinite, 0 when expired. */
int64_t ps_deadline_remaining_ns(ps_deadline_t deadline);
/* Time left as a poll()/epoll_wait() timeout: -1 for infinite, 0 when
 * expired, else rounded up to whole milliseconds (so a wait never ends
 * before the deadline) and capped at INT_MAX. */
int ps_deadline_remaining_ms(ps_deadline_t deadline);

/* The deadline as an absolute CLOCK_MONOTONIC timespec, for
 * pthread_cond_timedwait() on a condition variable whose clock is
 * CLOCK_MONOTONIC (see ps_cond_init), sem_clockwait() and
 * clock_nanosleep(TIMER_ABSTIME). PS_ERR_INVALID_ARG for an infinite
 * deadline: the caller waits without a timeout instead. */
ps_status_t ps_deadline_to_timespec(ps_deadline_t deadline, struct timespec *ts_p);

/* Sleeps the whole duration, resuming after signal interruptions. */
void ps_sleep_ns(uint64_t ns);
void ps_sleep_ms(uint64_t ms);
/* Sleeps until the deadline; PS_ERR_INVALID_ARG (immediately) for an infinite
 * one, otherwise PS_OK once it has passed. */
ps_status_t ps_sleep_until(ps_deadline_t deadline);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_TIME_H_ */

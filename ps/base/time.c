#include "ps/base/time.h"

#include <errno.h>
#include <limits.h>

#define PS_DEADLINE_NEVER UINT64_MAX
/* Saturation point of finite deadlines: still finite, centuries away. */
#define PS_DEADLINE_FAR (UINT64_MAX - 1)

uint64_t ps_time_now_ns(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail with a valid pointer on Linux. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * PS_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t ps_time_now_us(void)
{
    return ps_time_now_ns() / PS_NSEC_PER_USEC;
}

uint64_t ps_time_now_ms(void)
{
    return ps_time_now_ns() / PS_NSEC_PER_MSEC;
}

ps_deadline_t ps_deadline_infinite(void)
{
    ps_deadline_t d = {PS_DEADLINE_NEVER};
    return d;
}

ps_deadline_t ps_deadline_at_ns(uint64_t at_ns)
{
    ps_deadline_t d = {at_ns == PS_DEADLINE_NEVER ? PS_DEADLINE_FAR : at_ns};
    return d;
}

ps_deadline_t ps_deadline_from_ns(int64_t timeout_ns)
{
    if (timeout_ns < 0) {
        return ps_deadline_infinite();
    }
    uint64_t now = ps_time_now_ns();
    uint64_t t = (uint64_t)timeout_ns;
    ps_deadline_t d = {t > PS_DEADLINE_FAR - now ? PS_DEADLINE_FAR : now + t};
    return d;
}

ps_deadline_t ps_deadline_from_ms(int64_t timeout_ms)
{
    if (timeout_ms < 0) {
        return ps_deadline_infinite();
    }
    if ((uint64_t)timeout_ms > (uint64_t)INT64_MAX / PS_NSEC_PER_MSEC) {
        return ps_deadline_at_ns(PS_DEADLINE_FAR);
    }
    return ps_deadline_from_ns(timeout_ms * (int64_t)PS_NSEC_PER_MSEC);
}

int ps_deadline_is_infinite(ps_deadline_t deadline)
{
    return deadline.at_ns == PS_DEADLINE_NEVER;
}

int ps_deadline_expired(ps_deadline_t deadline)
{
    return !ps_deadline_is_infinite(deadline) && ps_time_now_ns() >= deadline.at_ns;
}

ps_deadline_t ps_deadline_min(ps_deadline_t a, ps_deadline_t b)
{
    return a.at_ns <= b.at_ns ? a : b;
}

int64_t ps_deadline_remaining_ns(ps_deadline_t deadline)
{
    if (ps_deadline_is_infinite(deadline)) {
        return -1;
    }
    uint64_t now = ps_time_now_ns();
    if (now >= deadline.at_ns) {
        return 0;
    }
    uint64_t left = deadline.at_ns - now;
    return left > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)left;
}

int ps_deadline_remaining_ms(ps_deadline_t deadline)
{
    int64_t ns = ps_deadline_remaining_ns(deadline);
    if (ns <= 0) {
        return (int)ns; /* -1 infinite, 0 expired */
    }
    uint64_t ms = ((uint64_t)ns + PS_NSEC_PER_MSEC - 1) / PS_NSEC_PER_MSEC;
    return ms > (uint64_t)INT_MAX ? INT_MAX : (int)ms;
}

ps_status_t ps_deadline_to_timespec(ps_deadline_t deadline, struct timespec *ts_p)
{
    if (ts_p == NULL || ps_deadline_is_infinite(deadline)) {
        return PS_ERR_INVALID_ARG;
    }
    ts_p->tv_sec = (time_t)(deadline.at_ns / PS_NSEC_PER_SEC);
    ts_p->tv_nsec = (long)(deadline.at_ns % PS_NSEC_PER_SEC);
    return PS_OK;
}

static void ps_sleep_abs(uint64_t at_ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(at_ns / PS_NSEC_PER_SEC),
        .tv_nsec = (long)(at_ns % PS_NSEC_PER_SEC),
    };
    /* Absolute sleeps resume correctly after a signal: just call again. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

void ps_sleep_ns(uint64_t ns)
{
    if (ns == 0) {
        return;
    }
    uint64_t now = ps_time_now_ns();
    ps_sleep_abs(ns > PS_DEADLINE_FAR - now ? PS_DEADLINE_FAR : now + ns);
}

void ps_sleep_ms(uint64_t ms)
{
    ps_sleep_ns(ms > UINT64_MAX / PS_NSEC_PER_MSEC ? PS_DEADLINE_FAR : ms * PS_NSEC_PER_MSEC);
}

ps_status_t ps_sleep_until(ps_deadline_t deadline)
{
    if (ps_deadline_is_infinite(deadline)) {
        return PS_ERR_INVALID_ARG;
    }
    ps_sleep_abs(deadline.at_ns);
    return PS_OK;
}

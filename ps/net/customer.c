/*
 * A customer: an app's endpoint in the postoffice (app id, customer id),
 * with the requests it tracks (tracker.c) and the waits for them. The
 * registry that routes messages to it is in customer_registry.c.
 */
#include "ps/net/customer.h"

#include <sched.h>
#include <stdlib.h>

#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/customer_internal.h"
#include "ps/net/postoffice_internal.h"
#include "ps/net/postoffice_state_internal.h"
#include "ps/net/tracker_internal.h"
#include "ps/net/van/van.h"

/* With PS_BUSY_POLL, how long a waiter spins before it sleeps. */
#define PS__CUSTOMER_SPIN_NS (2ull * 1000000ull)
/* Events a driving waiter handles per round of the van's loop. */
#define PS__DRIVE_BUDGET 16
/* A driving waiter yields the CPU after this many rounds (a power of two). */
#define PS__DRIVE_YIELD_EVERY 256

static void customer_done_trampoline(void *arg, int ts, void *ctx, ps_status_t status)
{
    ps_customer_t *c = arg;
    ps_customer_done_func_t fn = __atomic_load_n(&c->done, __ATOMIC_ACQUIRE);
    if (fn != NULL)
        fn(__atomic_load_n(&c->done_arg, __ATOMIC_ACQUIRE), c, ts, ctx, status);
}

ps_status_t ps_customer_create(ps_postoffice_t *po, int app_id, int customer_id,
                               ps_customer_recv_func_t recv, void *arg,
                               ps_customer_t **customer_p)
{
    return ps_customer_create_lane(po, app_id, customer_id, recv, NULL, arg, customer_p);
}

ps_status_t ps_customer_create_lane(ps_postoffice_t *po, int app_id, int customer_id,
                                    ps_customer_recv_func_t recv, ps_customer_lane_func_t lane,
                                    void *arg, ps_customer_t **customer_p)
{
    if (po == NULL || recv == NULL || customer_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps__registry_t *reg = ps__postoffice_registry(po);
    if (reg == NULL)
        return PS_ERR_SHUTDOWN;

    ps_customer_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return PS_ERR_NO_MEMORY;
    c->recv_buffer_segments = UINT32_MAX;
    c->fast_slot = -1;
    uint64_t spin = 0;
    if (ps__postoffice_busy_poll(po)) {
        /* Set at start, before any customer can exist; closed after the
         * customers' waits ended (they must not overlap finalize). */
        ps_van_t *van = po->van;
        c->progress = van != NULL ? ps_van_progress_op(van) : NULL;
        c->van = c->progress != NULL ? van : NULL;
        /* Without a progress op the tracker spins on its own. */
        spin = c->progress == NULL ? PS__CUSTOMER_SPIN_NS : 0;
    }
    ps_status_t st = ps__tracker_create(spin, &c->tracker);
    if (st != PS_OK) {
        free(c);
        return st;
    }
    c->po = po;
    __atomic_store_n(&c->reg, reg, __ATOMIC_SEQ_CST);
    c->app_id = app_id;
    c->customer_id = customer_id;
    c->request_timeout_ms = ps_postoffice_request_timeout_ms(po);
    c->destroy_timeout_ms = ps_postoffice_finalize_timeout_ms(po);
    c->recv = recv;
    c->lane = lane;
    c->recv_arg = arg;
    ps__tracker_set_done_func(c->tracker, customer_done_trampoline, c);

    /* Before the link: a receive function (on the van's thread, or the
     * registry's replay of what came early) may look at the caller's
     * handle at once. */
    *customer_p = c;
    st = ps__registry_link(reg, c);
    if (st != PS_OK) {
        ps_error(PS_LOG_CORE, "app %d customer %d is already registered", app_id, customer_id);
        ps__tracker_destroy(c->tracker);
        free(c);
        *customer_p = NULL;
        return st;
    }
    ps_info(PS_LOG_CORE, "registered app %d customer %d", app_id, customer_id);
    return PS_OK;
}

ps_status_t ps_customer_destroy_timed(ps_customer_t *c, int timeout_ms)
{
    if (c == NULL)
        return PS_OK;
    if (ps__registry_running_customer() == c) {
        ps_error(PS_LOG_CORE, "app %d customer %d destroyed from its own receive or done "
                 "function; leaking it instead", c->app_id, c->customer_id);
        return PS_ERR_INVALID_ARG;
    }
    if (timeout_ms < 0)
        timeout_ms = c->destroy_timeout_ms;
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    ps__registry_t *reg = __atomic_load_n(&c->reg, __ATOMIC_SEQ_CST);
    if (reg != NULL && ps__registry_unlink(reg, c, deadline) != PS_OK) {
        ps_error(PS_LOG_CORE, "app %d customer %d: a function of it still runs after %d ms; "
                 "destroy leaves it allocated", c->app_id, c->customer_id, timeout_ms);
        return PS_ERR_TIMED_OUT;
    }
    ps__tracker_close(c->tracker, PS_ERR_SHUTDOWN);
    ps__tracker_destroy(c->tracker);
    free(c);
    return PS_OK;
}

void ps_customer_destroy(ps_customer_t *c)
{
    (void)ps_customer_destroy_timed(c, -1);
}

void ps_customer_set_recv_buffer_func(ps_customer_t *c, ps_customer_recv_buffer_func_t fn,
                                      void *arg)
{
    ps__registry_t *reg = ps__registry_steer_begin(c);
    c->recv_buffer = fn;
    c->recv_buffer_arg = arg;
    ps__registry_steer_end(reg, c);
}

void ps_customer_set_recv_buffer_segments(ps_customer_t *c, uint32_t segments)
{
    ps__registry_t *reg = ps__registry_steer_begin(c);
    c->recv_buffer_segments = segments;
    ps__registry_steer_end(reg, c);
}

void ps_customer_set_done_func(ps_customer_t *c, ps_customer_done_func_t fn, void *arg)
{
    /* arg first, then the function pointer with release order: a racing
     * completion sees either no function or both. */
    __atomic_store_n(&c->done_arg, arg, __ATOMIC_RELEASE);
    __atomic_store_n(&c->done, fn, __ATOMIC_RELEASE);
}

ps_postoffice_t *ps_customer_postoffice(const ps_customer_t *c)
{
    return c->po;
}

int ps_customer_app_id(const ps_customer_t *c)
{
    return c->app_id;
}

int ps_customer_id(const ps_customer_t *c)
{
    return c->customer_id;
}

ps_status_t ps_customer_new_request(ps_customer_t *c, int expected, const int *peer_ids,
                                    int num_peers, int *ts_p)
{
    return ps__tracker_new(c->tracker, expected, peer_ids, num_peers, NULL, ts_p);
}

ps_status_t ps_customer_new_request_ctx(ps_customer_t *c, int expected, const int *peer_ids,
                                        int num_peers, void *ctx, int *ts_p)
{
    return ps__tracker_new(c->tracker, expected, peer_ids, num_peers, ctx, ts_p);
}

ps_status_t ps_customer_request_ctx(ps_customer_t *c, int ts, void **ctx_p)
{
    return ps__tracker_ctx(c->tracker, ts, ctx_p);
}

ps_status_t ps_customer_claim_request(ps_customer_t *c, int ts, ps_customer_claim_func_t fn,
                                     void *arg)
{
    if (c == NULL || fn == NULL)
        return PS_ERR_INVALID_ARG;
    return ps__tracker_claim(c->tracker, ts, fn, arg);
}

int ps_customer_add_response(ps_customer_t *c, int ts, int n)
{
    return ps__tracker_add_response(c->tracker, ts, n);
}

int ps_customer_add_response_quiet(ps_customer_t *c, int ts, int n)
{
    return ps__tracker_add_response_quiet(c->tracker, ts, n);
}

void ps_customer_fail_request(ps_customer_t *c, int ts, ps_status_t why)
{
    (void)ps__tracker_fail(c->tracker, ts, why);
}

int ps_customer_num_responses(ps_customer_t *c, int ts)
{
    return ps__tracker_num_responses(c->tracker, ts);
}

/* Busy polling: the waiter runs the van's event loop itself until the
 * request completes or spin_ns pass, so the process has one spinning
 * thread (the van's own stands back meanwhile). PS_INPROGRESS when the
 * spin ended without a result. The spin's start, *start_p, is the first
 * clock read, 16 turns in: at ~24 ns a read (docs/PERF.md), a request
 * answered sooner reads no clock, and the spin lasts those turns longer. */
static ps_status_t customer_drive(ps_customer_t *c, int ts, uint64_t spin_ns, uint64_t *start_p)
{
    int handled = 1;
    uint64_t seen = PS__TRACKER_POLL_START;
    uint64_t spin_until = 0;
    for (unsigned i = 1;; i++) {
        /* The request completes in a round this thread ran, or (rarely)
         * on another thread: check after work, and now and then. (Most
         * work is not this request's end: the poll answers those from the
         * tracker's completion count, without its lock or a clock read.) */
        if (handled > 0 || (i & 15) == 0) {
            ps_status_t st = ps__tracker_poll(c->tracker, ts, &seen);
            if (st != PS_ERR_TIMED_OUT)
                return st;
            if ((i & 15) == 0) {
                uint64_t now = ps_time_now_ns();
                if (spin_until == 0) {
                    *start_p = now;
                    spin_until = now + spin_ns;
                }
                if (now >= spin_until)
                    break;
            }
        }
        handled = c->progress(c->van, PS__DRIVE_BUDGET);
        /* Several waiters spin while one drives: now and then let the
         * others (and the driver) have the CPU. */
        if (handled == 0 && (i & (PS__DRIVE_YIELD_EVERY - 1)) == 0)
            sched_yield();
    }
    /* Going to sleep: the van's thread must take the loop back now. */
    (void)c->progress(c->van, 0);
    return PS_INPROGRESS;
}

ps_status_t ps_customer_wait(ps_customer_t *c, int ts, int timeout_ms)
{
    if (timeout_ms < 0)
        timeout_ms = c->request_timeout_ms;
    /* Never from a receive or done function: the loop is already running
     * below us on this thread. */
    ps__registry_t *driving = NULL;
    if (c->progress != NULL && ps__registry_running_customer() == NULL &&
        (driving = ps__registry_drive_enter(c)) != NULL) {
        uint64_t start = 0;
        uint64_t spin = PS__CUSTOMER_SPIN_NS;
        if (timeout_ms >= 0 && (uint64_t)timeout_ms * 1000000ull < spin)
            spin = (uint64_t)timeout_ms * 1000000ull;
        ps_status_t st = customer_drive(c, ts, spin, &start);
        ps__registry_drive_exit(driving);
        if (st != PS_INPROGRESS)
            return st;
        if (timeout_ms >= 0) {
            uint64_t spent_ms = (ps_time_now_ns() - start) / 1000000ull;
            timeout_ms = spent_ms >= (uint64_t)timeout_ms ? 0 : timeout_ms - (int)spent_ms;
        }
    }
    return ps__tracker_wait(c->tracker, ts, timeout_ms);
}

int ps_customer_waits_drive(const ps_customer_t *c)
{
    return c != NULL && c->progress != NULL;
}

int ps_customer_drive(ps_customer_t *c, unsigned budget)
{
    if (c == NULL || c->progress == NULL || ps__registry_running_customer() != NULL)
        return -1;
    ps__registry_t *driving = ps__registry_drive_enter(c);
    if (driving == NULL)
        return -1;
    int handled = c->progress(c->van, budget);
    ps__registry_drive_exit(driving);
    return handled;
}

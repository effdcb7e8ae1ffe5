/*
 * The progress loop every van runs (progress_loop.h): its thread, the
 * sleep protocol, the park while a waiter drives, the drain on close.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ps/net/van/progress_loop.h"

/* Threads abandoned by a stop in this process (ps_van_loop_abandon_count). */
static uint64_t abandon_count;

/* The loop the calling thread runs now, if any. */
static __thread const ps_van_loop_t *tls_loop;

int ps_van_loop_is_running_here(const ps_van_loop_t *loop)
{
    return tls_loop == loop;
}

void ps_van_loop_clear_wake(ps_van_loop_t *loop)
{
    uint64_t v;
    while (read(loop->wakefd, &v, sizeof(v)) > 0) {
    }
}

void ps_van_loop_wake(ps_van_loop_t *loop)
{
    __atomic_store_n(&loop->handed, 1, __ATOMIC_SEQ_CST);
    if (loop->wakefd >= 0) {
        ps_van_wake_fd(loop->wakefd);
    }
}

void ps_van_loop_kick(ps_van_loop_t *loop)
{
    if (__atomic_load_n(&loop->sleeping, __ATOMIC_SEQ_CST) && loop->wakefd >= 0) {
        ps_van_wake_fd(loop->wakefd);
    }
}

ps_status_t ps_van_loop_init(ps_van_loop_t *loop, const ps_van_loop_params_t *params,
                             const ps_van_loop_ops_t *ops, void *arg)
{
    memset(loop, 0, sizeof(*loop));
    loop->params = *params;
    if (loop->params.budget == 0) {
        loop->params.budget = PS_VAN_LOOP_BUDGET;
    }
    if (loop->params.thread_name == NULL) {
        loop->params.thread_name = "ps-progress";
    }
    if (loop->params.stop_ms <= 0) {
        loop->params.stop_ms = PS_VAN_LOOP_STOP_MS;
    }
    if (loop->params.drive_rounds == 0) {
        loop->params.drive_rounds = 1;
    }
    if (loop->params.yield_every == 0 ||
        (loop->params.yield_every & (loop->params.yield_every - 1)) != 0) {
        loop->params.yield_every = PS_VAN_LOOP_YIELD_EVERY;
    }
    loop->ops = ops;
    loop->arg = arg;
    loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->wakefd < 0) {
        ps_error(params->log, "cannot create the progress thread's eventfd: %m");
        return PS_ERR_NO_RESOURCE;
    }
    pthread_mutex_init(&loop->lock, NULL);
    return PS_OK;
}

void ps_van_loop_cleanup(ps_van_loop_t *loop)
{
    if (ps_van_loop_abandoned(loop)) {
        return;
    }
    if (loop->wakefd >= 0) {
        close(loop->wakefd);
        pthread_mutex_destroy(&loop->lock);
    }
    loop->wakefd = -1;
}

/* Work handed over by ps_van_loop_wake (the loop held). The eventfd is
 * cleared when a sleep or a park finds it readable, not here: a round
 * while spinning makes no system call for it. */
static void take_handover(ps_van_loop_t *loop)
{
    if (__atomic_load_n(&loop->handed, __ATOMIC_ACQUIRE) &&
        __atomic_exchange_n(&loop->handed, 0, __ATOMIC_ACQ_REL) && loop->ops->handover != NULL) {
        loop->ops->handover(loop->arg);
    }
}

/* Busy polling, while waiters drive the loop: the thread waits outside it
 * until the driving stops — a driver's hand-back, no drive call for a whole
 * PS_VAN_LOOP_PARK_MS, stop, or a wake-up (cleared here). */
static void park(ps_van_loop_t *loop, uint64_t *seen)
{
    struct pollfd pfd = {.fd = loop->wakefd, .events = POLLIN};
    while (!__atomic_load_n(&loop->stop, __ATOMIC_SEQ_CST)) {
        if (__atomic_exchange_n(&loop->handback, 0, __ATOMIC_ACQ_REL)) {
            return;
        }
        int r = poll(&pfd, 1, PS_VAN_LOOP_PARK_MS);
        if (r != 0) {
            if (r > 0) {
                ps_van_loop_clear_wake(loop);
            }
            return; /* work, or EINTR: a round sorts it out */
        }
        uint64_t cur = __atomic_load_n(&loop->drive_seq, __ATOMIC_ACQUIRE);
        if (cur == *seen) {
            return; /* nobody drove for a whole period */
        }
        *seen = cur;
    }
}

/* The sleep: the van's fds and the wake eventfd, at most timeout_ns.
 * `sleeping` is set (by the caller, before arm). */
static void sleep_on_fds(ps_van_loop_t *loop, int64_t timeout_ns)
{
    struct pollfd pfd[PS_VAN_LOOP_MAX_FDS + 1];
    pfd[0].fd = loop->wakefd;
    pfd[0].events = POLLIN;
    pfd[0].revents = 0;
    for (int i = 0; i < loop->nfds; ++i) {
        pfd[1 + i].fd = loop->fds[i];
        pfd[1 + i].events = POLLIN;
        pfd[1 + i].revents = 0;
    }
    struct timespec ts;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / (int64_t)PS_NSEC_PER_SEC);
        ts.tv_nsec = (long)(timeout_ns % (int64_t)PS_NSEC_PER_SEC);
    }
    int n = ppoll(pfd, (nfds_t)(1 + loop->nfds), timeout_ns >= 0 ? &ts : NULL, NULL);
    if (n < 0 && errno != EINTR) {
        ps_error(loop->params.log, "ppoll in the progress thread: %m");
        ps_sleep_ms(1);
    }
    if (n > 0 && (pfd[0].revents & POLLIN)) {
        ps_van_loop_clear_wake(loop);
    }
}

static void *loop_main(void *arg)
{
    ps_van_loop_t *loop = arg;
    const ps_van_loop_ops_t *ops = loop->ops;
    void *va = loop->arg;
    const int busy = loop->params.busy_poll;
    const unsigned yield_mask = loop->params.yield_every - 1;
    const uint64_t idle_spin = loop->params.idle_spin_ns;
    /* Without busy polling an adaptive spin doubles after it caught
     * something and halves after it ran dry (on a loaded machine polling
     * only takes the CPU the peer needs to answer); every
     * PS_VAN_LOOP_IDLE_PROBE sleeps it is tried again at full length. */
    const int adapt = !busy && loop->params.adaptive_idle_spin;
    uint64_t spin_ns = busy ? PS_VAN_LOOP_BUSY_SPIN_NS : idle_spin;
    int spun = 0; /* polled without work since the last work */
    unsigned sleeps = 0;
    unsigned idle = 0;
    unsigned clock_tick = 0;
    int work_since = 0; /* work since `now` was read: last_work is due */
    int waited = 0;     /* the last round was the van's wait, which polled */
    uint64_t now = ps_time_now_ns();
    uint64_t last_work = now;
    uint64_t seen = __atomic_load_n(&loop->drive_seq, __ATOMIC_ACQUIRE);
    tls_loop = loop;
    pthread_mutex_lock(&loop->lock);
    while (!__atomic_load_n(&loop->stop, __ATOMIC_ACQUIRE)) {
        if (busy) {
            uint64_t cur = __atomic_load_n(&loop->drive_seq, __ATOMIC_ACQUIRE);
            if (cur != seen) {
                seen = cur;
                pthread_mutex_unlock(&loop->lock);
                park(loop, &seen);
                pthread_mutex_lock(&loop->lock);
                if (ops->woke != NULL) {
                    ops->woke(va);
                }
                last_work = now = ps_time_now_ns();
                work_since = 0;
                waited = 0;
                continue;
            }
        }
        take_handover(loop);
        int n = 0;
        if (!(waited && spin_ns == 0)) {
            n = ops->poll(va, loop->params.budget);
        }
        waited = 0;
        if (n > 0) {
            if (adapt && spun) {
                spin_ns = spin_ns * 2 + PS_NSEC_PER_USEC;
                spin_ns = spin_ns > idle_spin ? idle_spin : spin_ns;
            }
            spun = 0;
            idle = 0;
            work_since = 1;
            continue;
        }
        /* Nothing: spin a while, or sleep. The clock is read now and then
         * (and right after work): the spin ends that many rounds late at
         * most, never early. */
        if (work_since || ++clock_tick >= PS_VAN_LOOP_CLOCK_EVERY) {
            clock_tick = 0;
            now = ps_time_now_ns();
            if (work_since) {
                last_work = now;
                work_since = 0;
            }
        }
        uint64_t window = ops->spin_ns != NULL ? ops->spin_ns(va) : spin_ns;
        if (now - last_work < window) {
            spun = 1;
            if ((++idle & yield_mask) == 0) {
                /* On a small machine the thread that will answer (or a
                 * waiter wanting the loop) may need this core. */
                pthread_mutex_unlock(&loop->lock);
                sched_yield();
                pthread_mutex_lock(&loop->lock);
                clock_tick = PS_VAN_LOOP_CLOCK_EVERY; /* the yield may have been long */
            } else {
                ps_cpu_relax();
            }
            continue;
        }
        if (adapt) {
            spin_ns = spun ? spin_ns / 2 : spin_ns;
            if (++sleeps % PS_VAN_LOOP_IDLE_PROBE == 0) {
                spin_ns = idle_spin;
            }
        }
        spun = 0;
        /* Sleep. `sleeping` first, then arm (which looks again for work
         * handed over without a wake-up): a thread that publishes work
         * before it sees `sleeping` is caught by arm, one after it wakes
         * us. Once armed, the thread sleeps (arm may have told peers so). */
        __atomic_store_n(&loop->sleeping, 1, __ATOMIC_SEQ_CST);
        int64_t timeout_ns = -1;
        if (__atomic_load_n(&loop->handed, __ATOMIC_SEQ_CST) ||
            __atomic_load_n(&loop->stop, __ATOMIC_SEQ_CST) ||
            (ops->arm != NULL && ops->arm(va, &timeout_ns) != PS_VAN_LOOP_SLEEP)) {
            __atomic_store_n(&loop->sleeping, 0, __ATOMIC_RELAXED);
            last_work = now = ps_time_now_ns();
            continue;
        }
        if (ops->wait != NULL) {
            n = ops->wait(va, timeout_ns);
            waited = n > 0;
        } else {
            sleep_on_fds(loop, timeout_ns);
        }
        __atomic_store_n(&loop->sleeping, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&loop->kicked, 0, __ATOMIC_RELEASE);
        if (ops->wait == NULL && ops->woke != NULL) {
            ops->woke(va);
        }
        last_work = now = ps_time_now_ns();
    }
    pthread_mutex_unlock(&loop->lock);
    tls_loop = NULL;
    ps_event_set(&loop->exited);
    return NULL;
}

ps_status_t ps_van_loop_start(ps_van_loop_t *loop, const int *fds, int nfds)
{
    if (nfds < 0 || nfds > PS_VAN_LOOP_MAX_FDS || loop->wakefd < 0) {
        return PS_ERR_INVALID_ARG;
    }
    for (int i = 0; i < nfds; ++i) {
        loop->fds[i] = fds[i];
    }
    loop->nfds = nfds;
    ps_status_t st = ps_event_init(&loop->exited, 0);
    if (st != PS_OK) {
        return st;
    }
    st = ps_thread_create(loop->params.thread_name, PS_THREAD_NO_CPU, loop_main, loop,
                          &loop->thread);
    if (st != PS_OK) {
        ps_error(loop->params.log, "cannot start the progress thread (%s)", ps_status_str(st));
        ps_event_destroy(&loop->exited);
        return st;
    }
    __atomic_store_n(&loop->started, 1, __ATOMIC_RELEASE);
    return PS_OK;
}

/* Lets outstanding sends leave while they still move (bounded). */
static void drain(ps_van_loop_t *loop)
{
    if (loop->ops->outstanding == NULL) {
        return;
    }
    uint64_t start = ps_time_now_ns();
    uint64_t last_move = start;
    uint64_t moved = 0;
    int64_t left = loop->ops->outstanding(loop->arg, &moved);
    uint64_t last_moved = moved;
    int64_t last_left = left;
    while (left > 0) {
        uint64_t now = ps_time_now_ns();
        if (moved != last_moved || left != last_left) {
            last_moved = moved;
            last_left = left;
            last_move = now;
        }
        if (now - start > PS_VAN_LOOP_DRAIN_MS * PS_NSEC_PER_MSEC ||
            now - last_move > PS_VAN_LOOP_DRAIN_IDLE_MS * PS_NSEC_PER_MSEC) {
            ps_info(loop->params.log, "closing with %lld sends unfinished",
                    (long long)left);
            return;
        }
        ps_sleep_ms(1);
        left = loop->ops->outstanding(loop->arg, &moved);
    }
}

uint64_t ps_van_loop_abandon_count(void)
{
    return __atomic_load_n(&abandon_count, __ATOMIC_ACQUIRE);
}

ps_status_t ps_van_loop_stop(ps_van_loop_t *loop)
{
    if (__atomic_load_n(&loop->started, __ATOMIC_ACQUIRE)) {
        /* Once abandoned, a stop only looks whether the thread left. */
        const int abandoned = ps_van_loop_abandoned(loop);
        if (!abandoned) {
            drain(loop);
        }
        __atomic_store_n(&loop->stop, 1, __ATOMIC_SEQ_CST);
        ps_van_wake_fd(loop->wakefd);
        ps_status_t st = ps_event_wait(&loop->exited,
                                       ps_deadline_from_ms(abandoned ? 0 : loop->params.stop_ms));
        if (st != PS_OK) {
            if (!abandoned) {
                __atomic_store_n(&loop->abandoned, 1, __ATOMIC_RELEASE);
                __atomic_add_fetch(&abandon_count, 1, __ATOMIC_ACQ_REL);
                ps_error(loop->params.log,
                         "the progress thread %s did not stop within %d ms (stuck in the "
                         "van): abandoning it with the van, which stays allocated",
                         loop->params.thread_name, loop->params.stop_ms);
            }
            return st;
        }
        ps_thread_join(&loop->thread, NULL);
        ps_event_destroy(&loop->exited);
        __atomic_store_n(&loop->abandoned, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&loop->started, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&loop->stop, 1, __ATOMIC_SEQ_CST);
    /* A driver still in a round finishes it first; later ones see stop. */
    pthread_mutex_lock(&loop->lock);
    pthread_mutex_unlock(&loop->lock);
    return PS_OK;
}

int ps_van_loop_drive(ps_van_loop_t *loop, unsigned budget)
{
    if (!__atomic_load_n(&loop->started, __ATOMIC_ACQUIRE)) {
        return 0; /* no thread (not bound, or closed): nothing to drive */
    }
    if (budget == 0) {
        __atomic_store_n(&loop->handback, 1, __ATOMIC_RELEASE);
        ps_van_wake_fd(loop->wakefd);
        return 0;
    }
    __atomic_add_fetch(&loop->drive_seq, 1, __ATOMIC_ACQ_REL);
    if (pthread_mutex_trylock(&loop->lock) != 0) {
        /* The thread has the loop; if it sleeps there, wake it once so that
         * it sees the driver and parks. */
        if (__atomic_load_n(&loop->sleeping, __ATOMIC_SEQ_CST) &&
            !__atomic_exchange_n(&loop->kicked, 1, __ATOMIC_ACQ_REL)) {
            ps_van_wake_fd(loop->wakefd);
        }
        return 0;
    }
    int n = 0;
    if (!__atomic_load_n(&loop->stop, __ATOMIC_ACQUIRE)) {
        const ps_van_loop_t *outer = tls_loop;
        tls_loop = loop;
        take_handover(loop);
        for (unsigned i = 0; i < loop->params.drive_rounds && n == 0; ++i) {
            n = loop->ops->poll(loop->arg, budget);
        }
        tls_loop = outer;
    }
    pthread_mutex_unlock(&loop->lock);
    return n;
}

int ps_van_loop_progress(ps_van_t *van, unsigned budget)
{
    return van->loop != NULL ? ps_van_loop_drive(van->loop, budget) : 0;
}

int ps_van_epoll_wait(int epfd, struct epoll_event *evs, int max, int64_t timeout_ns,
                      ps_log_component_t log)
{
    int64_t ms = -1;
    if (timeout_ns >= 0) {
        ms = (timeout_ns + (int64_t)PS_NSEC_PER_MSEC - 1) / (int64_t)PS_NSEC_PER_MSEC;
        ms = ms > INT_MAX ? INT_MAX : ms;
    }
    int n = epoll_wait(epfd, evs, max, (int)ms);
    if (n < 0) {
        if (errno != EINTR) {
            ps_error(log, "epoll_wait: %m");
            ps_sleep_ms(1);
        }
        return 0;
    }
    return n;
}

int ps_van_epoll_ctl(int epfd, int op, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.ptr = ptr;
    return epoll_ctl(epfd, op, fd, &ev);
}

ps_status_t ps_van_loop_epoll_open(const ps_van_loop_t *loop, void *wake_ptr,
                                   ps_log_component_t log, int *epfd_p)
{
    *epfd_p = epoll_create1(EPOLL_CLOEXEC);
    if (*epfd_p < 0) {
        ps_error(log, "cannot create the progress thread's epoll: %m");
        return PS_ERR_NO_RESOURCE;
    }
    if (ps_van_epoll_ctl(*epfd_p, EPOLL_CTL_ADD, loop->wakefd, EPOLLIN, wake_ptr) != 0) {
        ps_error(log, "epoll_ctl for the wake-up eventfd: %m");
        close(*epfd_p);
        *epfd_p = -1;
        return PS_ERR_NO_RESOURCE;
    }
    return PS_OK;
}

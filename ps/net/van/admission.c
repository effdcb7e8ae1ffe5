#include "ps/net/van/admission.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/time.h"
#include "ps/net/van/progress_loop.h"

#define PAUSE_FIRST_MS 100
#define PAUSE_MAX_MS 1000
#define DEFAULT_MAX_PENDING 256
#define DEFAULT_HANDSHAKE_MS 5000

void ps_van_admission_init(ps_van_admission_t *a, ps_log_component_t comp)
{
    memset(a, 0, sizeof(*a));
    a->comp = comp;
    a->epfd = -1;
    a->listen_fd = -1;
    int64_t n = ps_config_int_or(PS_CFG_PS_MAX_PENDING_CONNS, DEFAULT_MAX_PENDING);
    a->max_pending = n >= 1 && n <= INT_MAX ? (int)n : DEFAULT_MAX_PENDING;
    int64_t ms = ps_config_int_or(PS_CFG_PS_HANDSHAKE_TIMEOUT_MS, DEFAULT_HANDSHAKE_MS);
    a->handshake_ms = ms >= 1 && ms <= INT_MAX ? (int)ms : DEFAULT_HANDSHAKE_MS;
}

void ps_van_admission_listener(ps_van_admission_t *a, int epfd, int listen_fd, void *ptr)
{
    /* Called by bind() on the caller's thread while the progress thread
     * may run: listen_fd, stored last, publishes the rest. */
    a->epfd = epfd;
    a->listen_ptr = ptr;
    __atomic_store_n(&a->listen_fd, listen_fd, __ATOMIC_RELEASE);
}

static void listener_events(ps_van_admission_t *a, uint32_t events)
{
    if (ps_van_epoll_ctl(a->epfd, EPOLL_CTL_MOD, a->listen_fd, events, a->listen_ptr) != 0) {
        ps_warn_ratelimited(a->comp, "epoll_ctl for the listening socket: %m");
    }
}

/* Out of descriptors or memory: every accept() would fail the same way
 * right away, and the level-triggered listener would wake us for ever.
 * Stop listening for a while; the peers wait in the backlog. */
static void pause_listener(ps_van_admission_t *a, int err)
{
    uint64_t now = ps_time_now_ns();
    if (a->backoff_ms == 0) {
        a->backoff_ms = PAUSE_FIRST_MS;
    } else if (a->backoff_ms < PAUSE_MAX_MS) {
        a->backoff_ms = a->backoff_ms * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : a->backoff_ms * 2;
    }
    a->resume_ns = now + (uint64_t)a->backoff_ms * PS_NSEC_PER_MSEC;
    a->paused = 1;
    a->accept_paused++;
    listener_events(a, 0);
    ps_warn_ratelimited(a->comp,
                        "cannot accept connections: %s (%d pending handshakes); not accepting for %u ms",
                        strerror(err), __atomic_load_n(&a->pending, __ATOMIC_RELAXED), a->backoff_ms);
}

int ps_van_admission_accept(ps_van_admission_t *a, struct sockaddr *sa, socklen_t *len_p)
{
    int lfd = __atomic_load_n(&a->listen_fd, __ATOMIC_ACQUIRE);
    if (a->paused || lfd < 0) {
        return -1;
    }
    for (;;) {
        int fd = accept4(lfd, sa, len_p, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            /* Descriptors came back: the next shortage starts short, so a
             * backlog of dead peers drains in short pauses. */
            a->backoff_ms = 0;
            return fd;
        }
        int err = errno;
        if (err == EINTR || err == ECONNABORTED) {
            continue;
        }
        if (err == EAGAIN || err == EWOULDBLOCK) {
            return -1;
        }
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
            pause_listener(a, err);
            return -1;
        }
        /* Something else (EPERM from a firewall, a protocol error): that
         * connection is lost, the listener is fine. */
        ps_warn_ratelimited(a->comp, "accept: %s", strerror(err));
        return -1;
    }
}

int ps_van_admission_next(ps_van_admission_t *a, struct sockaddr *sa, socklen_t *len_p,
                          ps_van_admission_screen_t screen, void *arg)
{
    socklen_t cap = len_p != NULL ? *len_p : 0;
    for (;;) {
        if (len_p != NULL) {
            *len_p = cap;
        }
        int fd = ps_van_admission_accept(a, sa, len_p);
        if (fd < 0) {
            return -1;
        }
        if (screen != NULL && !screen(arg, fd)) {
            continue;
        }
        if (!ps_van_admission_admit(a)) {
            close(fd); /* too many strangers already wait for their handshake */
            continue;
        }
        return fd;
    }
}

void ps_van_admission_each(ps_van_admission_t *a, ps_van_admission_screen_t screen,
                           ps_van_admission_take_t take, void *arg)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = ps_van_admission_next(a, (struct sockaddr *)&ss, &len, screen, arg);
        if (fd < 0) {
            return;
        }
        if (take(arg, fd, (struct sockaddr *)&ss, len) != 0) {
            ps_van_admission_done(a);
            ps_warn_ratelimited(a->comp, "out of memory accepting a connection");
            close(fd);
        }
    }
}

int ps_van_admission_admit(ps_van_admission_t *a)
{
    int pending = __atomic_load_n(&a->pending, __ATOMIC_ACQUIRE);
    if (pending >= a->max_pending) {
        a->refused_full++;
        ps_warn_ratelimited(a->comp,
                            "%d connections are waiting for their handshake (PS_MAX_PENDING_CONNS); closing a new one (%llu so far)",
                            pending, (unsigned long long)a->refused_full);
        return 0;
    }
    __atomic_add_fetch(&a->pending, 1, __ATOMIC_ACQ_REL);
    return 1;
}

void ps_van_admission_done(ps_van_admission_t *a)
{
    int pending = __atomic_load_n(&a->pending, __ATOMIC_ACQUIRE);
    while (pending > 0 && !__atomic_compare_exchange_n(&a->pending, &pending, pending - 1, 0,
                                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
}

uint64_t ps_van_admission_deadline(const ps_van_admission_t *a)
{
    return ps_time_now_ns() + (uint64_t)a->handshake_ms * PS_NSEC_PER_MSEC;
}

void ps_van_admission_expired(ps_van_admission_t *a, const char *who)
{
    a->timed_out++;
    ps_debug(a->comp,
             "%s did not finish the handshake within %d ms (PS_HANDSHAKE_TIMEOUT_MS); closing (%llu so far)",
             who, a->handshake_ms, (unsigned long long)a->timed_out);
}

int ps_van_admission_timer(ps_van_admission_t *a)
{
    if (!a->paused) {
        return -1;
    }
    int ms = ps_deadline_remaining_ms(ps_deadline_at_ns(a->resume_ns));
    if (ms > 0) {
        return ms;
    }
    a->paused = 0;
    listener_events(a, EPOLLIN);
    return -1;
}

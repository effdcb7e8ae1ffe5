/*
 * One progress loop for every van: the thread that makes a van's progress,
 * its wake-up eventfd, when it spins, yields, sleeps or stands back for a
 * waiter that drives the van itself, and the drain on close.
 *
 * The van supplies what only it can do, as ops: poll (handle what is
 * ready, never block), arm (make its notifications fire again before the
 * thread sleeps, or say that work raced in), the fds the thread sleeps on,
 * and a few optional hooks. Everything the van's loop touches runs under
 * the loop's lock: on the loop's thread, or on a thread driving it through
 * ps_van_loop_drive() (the van's progress op, van.h).
 *
 * The policy:
 *  - After work, the thread keeps polling for a while before it sleeps:
 *    PS_VAN_LOOP_BUSY_SPIN_NS with busy polling (PS_BUSY_POLL), the van's
 *    idle_spin_ns without (0: sleep at once). The idle spin can adapt to
 *    what it catches (adaptive_idle_spin). While it spins without work it
 *    yields the CPU every yield_every rounds.
 *  - Then it sleeps in ppoll() on the wake eventfd and the van's fds, after
 *    arm(): an idle van uses no CPU, with or without busy polling.
 *  - With busy polling, a thread waiting for a completion may run the
 *    van's poll itself (ps_van_loop_drive); the loop's thread then parks
 *    outside the loop, checking every PS_VAN_LOOP_PARK_MS whether the
 *    driving goes on, so that a process spins on one thread, not two.
 *  - Other threads hand work to the loop with ps_van_loop_wake() (always
 *    wakes it; the van's handover op runs next round) or ps_van_loop_kick()
 *    (wakes it only if it sleeps: the caller published its work first, and
 *    arm() looks at it after the loop announced its sleep).
 *  - ps_van_loop_stop() first lets outstanding sends leave while they
 *    move (the van's outstanding op), at most PS_VAN_LOOP_DRAIN_MS, then
 *    waits for the thread at most params.stop_ms (PS_VAN_LOOP_STOP_MS). A
 *    thread still inside the van then is abandoned, logged: the van's close
 *    returns without freeing anything the thread may still touch.
 */
#ifndef PS_NET_VAN_PROGRESS_LOOP_H_
#define PS_NET_VAN_PROGRESS_LOOP_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/van/van.h"

struct epoll_event;

#ifdef __cplusplus
extern "C" {
#endif

/* Busy polling: how long the thread polls without any work before it
 * sleeps. */
#define PS_VAN_LOOP_BUSY_SPIN_NS (200ull * PS_NSEC_PER_MSEC)
/* The usual short poll after work without busy polling: it catches the
 * answer to what was just sent without a wake-up (tens of microseconds on
 * a VM). A van passes it as idle_spin_ns, or 0. */
#define PS_VAN_LOOP_IDLE_SPIN_NS (50ull * PS_NSEC_PER_USEC)
/* An adaptive idle spin goes back to its full length every this many
 * sleeps. */
#define PS_VAN_LOOP_IDLE_PROBE 64u
/* While a waiter drives the loop, the thread checks this often whether it
 * still does. */
#define PS_VAN_LOOP_PARK_MS 1
/* Close lets outstanding sends leave for at most this long, and stops
 * early once nothing has moved for PS_VAN_LOOP_DRAIN_IDLE_MS. */
#define PS_VAN_LOOP_DRAIN_MS 2000
#define PS_VAN_LOOP_DRAIN_IDLE_MS 200
/* Close waits this long for the thread to leave the loop (a van's stop_ms
 * 0). It leaves within a round unless the van's poll never returns (a
 * library call stuck on a peer that died); then close must not hang. */
#define PS_VAN_LOOP_STOP_MS 5000
/* A spinning thread yields the CPU every this many empty rounds unless
 * the van says otherwise: on a small machine the application may share its
 * core, but a yield that switches costs more than a round trip, and a
 * message arriving meanwhile waits for the system call. */
#define PS_VAN_LOOP_YIELD_EVERY 256u
/* Events a poll on the loop's thread may handle (the budget). */
#define PS_VAN_LOOP_BUDGET 64u
/* The spinning thread reads the clock every this many empty rounds (a
 * read costs about as much as an empty round of a shared-memory van). */
#define PS_VAN_LOOP_CLOCK_EVERY 16u
/* Van fds the thread sleeps on, at most. */
#define PS_VAN_LOOP_MAX_FDS 4

/* What arm() returns. */
enum {
    PS_VAN_LOOP_SLEEP = 0, /* armed: the thread may sleep */
    PS_VAN_LOOP_BUSY = 1,  /* work raced in: poll again first */
};

typedef struct ps_van_loop_ops {
    size_t size; /* sizeof(ps_van_loop_ops_t) the van was built with */
    /* Handles what is ready now, at most about `budget` events, without
     * blocking; returns how many (0: nothing moved). */
    int (*poll)(void *arg, unsigned budget);
    /* Optional. The thread is about to sleep (its `sleeping` flag is set):
     * re-arm the notifications behind the van's fds and look once more for
     * work handed over without a wake-up. PS_VAN_LOOP_BUSY: poll again.
     * PS_VAN_LOOP_SLEEP: sleep for at most *timeout_ns_p (on entry -1:
     * until an fd or a wake-up; set it for a timer). */
    int (*arm)(void *arg, int64_t *timeout_ns_p);
    /* Optional: the van sleeps itself, in place of the loop's ppoll() on
     * its fds: waits at most timeout_ns (-1: no limit) for its events or
     * the loop's wake eventfd (which it watches and clears with
     * ps_van_loop_clear_wake), handles what came, returns how many. For a
     * van whose wait handles events in the same call (epoll): with no
     * spin, the thread then sleeps again without a poll in between. */
    int (*wait)(void *arg, int64_t timeout_ns);
    /* Optional. The thread comes back from a park, or from a sleep in the
     * loop's ppoll(): take what woke it. */
    void (*woke)(void *arg);
    /* Optional. Someone called ps_van_loop_wake(): take the work handed
     * over. */
    void (*handover)(void *arg);
    /* Optional: how long the thread spins after work now, in place of the
     * loop's choice (PS_VAN_LOOP_BUSY_SPIN_NS or idle_spin_ns): a van that
     * spins longer while its transfers need polling, or for ever where
     * busy polling left it nothing to sleep on. */
    uint64_t (*spin_ns)(void *arg);
    /* Optional, for the drain on close (thread-safe): how many sends are
     * outstanding, and in *moved_p a figure that changes while they move. */
    int64_t (*outstanding)(void *arg, uint64_t *moved_p);
} ps_van_loop_ops_t;

typedef struct ps_van_loop_params {
    const char *thread_name;
    ps_log_component_t log;
    int busy_poll;              /* PS_BUSY_POLL */
    uint64_t idle_spin_ns;      /* without busy polling; 0: sleep at once */
    int adaptive_idle_spin;     /* the idle spin doubles after it caught work
                                   and halves after it ran dry */
    unsigned yield_every;       /* empty spinning rounds per sched_yield (a power
                                   of two; 0: PS_VAN_LOOP_YIELD_EVERY) */
    unsigned budget;            /* poll budget on the thread; 0: PS_VAN_LOOP_BUDGET */
    unsigned drive_rounds;      /* polls per drive call while nothing comes; 0: 1 */
    int stop_ms;                /* stop waits this long for the thread; 0:
                                   PS_VAN_LOOP_STOP_MS */
} ps_van_loop_params_t;

typedef struct ps_van_loop {
    ps_van_loop_params_t params;
    const ps_van_loop_ops_t *ops;
    void *arg;
    int wakefd; /* eventfd */
    int fds[PS_VAN_LOOP_MAX_FDS];
    int nfds;

    ps_thread_t thread;
    int started;             /* atomic */
    ps_event_t exited;       /* set by the thread as it ends */
    /* Held by whoever runs the van's loop: the thread, or a driver. */
    pthread_mutex_t lock;
    int stop;                /* atomic */
    int sleeping;            /* atomic: the thread sleeps (or is about to) */
    int kicked;              /* atomic: a driver woke the sleeping thread */
    int handback;            /* atomic: a driver stopped; the thread takes over */
    int handed;              /* atomic: ps_van_loop_wake() handed work over */
    int abandoned;           /* atomic: stop timed out; the thread may still run */
    uint64_t drive_seq;      /* atomic: drive calls so far */
} ps_van_loop_t;

/* Creates the wake-up eventfd and the lock; the thread starts later
 * (ps_van_loop_start), and wake-ups before it are kept. `ops` and `arg`
 * outlive the loop. */
ps_status_t ps_van_loop_init(ps_van_loop_t *loop, const ps_van_loop_params_t *params,
                             const ps_van_loop_ops_t *ops, void *arg);

/* Starts the thread, sleeping on the wake eventfd and `fds` (nfds up to
 * PS_VAN_LOOP_MAX_FDS; 0: a van that sleeps only until its timers or a
 * wake-up). */
ps_status_t ps_van_loop_start(ps_van_loop_t *loop, const int *fds, int nfds);

/* Drains outstanding sends (the outstanding op, bounded), stops the thread
 * and waits for it (params.stop_ms at most), then for a driver still in a
 * round. PS_ERR_TIMED_OUT (logged): the thread is stuck in the van and is
 * abandoned; the van must then free nothing the thread may touch (its
 * close returns early), and ps_van_loop_abandoned() says so from now on.
 * Idempotent; a later call on an abandoned thread does not wait: it joins
 * the thread if it left meanwhile (PS_OK), else returns PS_ERR_TIMED_OUT. */
ps_status_t ps_van_loop_stop(ps_van_loop_t *loop);

/* How many progress threads a stop abandoned in this process so far. The
 * owner of a van compares it across the van's close: a change means a
 * thread may still call the van's callbacks, and what they lead to must
 * stay allocated too. */
uint64_t ps_van_loop_abandon_count(void);

/* Releases the eventfd and the lock (after stop, or a failed start);
 * nothing while the thread is abandoned (it still uses them). */
void ps_van_loop_cleanup(ps_van_loop_t *loop);

/* Hands work to the loop: the van's handover op runs on its next round,
 * and a sleeping thread is woken. Any thread. */
void ps_van_loop_wake(ps_van_loop_t *loop);

/* Wakes the thread if it sleeps. The caller published its work first with
 * a seq_cst store that the van's arm() reads. Any thread. */
void ps_van_loop_kick(ps_van_loop_t *loop);

/* The van's progress op (van.h): one round of the loop (up to
 * drive_rounds polls while nothing comes) on the caller's thread, unless
 * the loop's thread runs it right now; budget 0 hands the loop back.
 * Returns the events handled. */
int ps_van_loop_drive(ps_van_loop_t *loop, unsigned budget);

/* Clears the wake eventfd (for a van's wait op that saw it readable). */
void ps_van_loop_clear_wake(ps_van_loop_t *loop);

/* The progress op of a van whose base names its loop (van->loop): the
 * ops table points here. */
int ps_van_loop_progress(ps_van_t *van, unsigned budget);

/* epoll_wait for a van's poll or wait op: `timeout_ns` rounded up to
 * milliseconds (-1: no limit). Returns the events; 0 after EINTR, or after
 * an error (logged under `log`, then a millisecond's pause). */
int ps_van_epoll_wait(int epfd, struct epoll_event *evs, int max, int64_t timeout_ns,
                      ps_log_component_t log);

/* epoll_ctl(epfd, op, fd) for `events`, with `ptr` as the event's data:
 * 0, or -1 with errno set. */
int ps_van_epoll_ctl(int epfd, int op, int fd, uint32_t events, void *ptr);

/* The epoll set a van's thread waits on, with the loop's wake-up eventfd
 * in it (its events carry `wake_ptr`): PS_OK and *epfd_p, or
 * PS_ERR_NO_RESOURCE (logged under `log`) and *epfd_p -1. */
ps_status_t ps_van_loop_epoll_open(const ps_van_loop_t *loop, void *wake_ptr,
                                   ps_log_component_t log, int *epfd_p);

/* Whether the calling thread runs this loop now (its thread, or a driver
 * inside a round). */
int ps_van_loop_is_running_here(const ps_van_loop_t *loop);

static inline int ps_van_loop_stopping(const ps_van_loop_t *loop)
{
    return __atomic_load_n(&loop->stop, __ATOMIC_ACQUIRE);
}

/* Whether the last stop left the thread running in the van (abandoned). */
static inline int ps_van_loop_abandoned(const ps_van_loop_t *loop)
{
    return __atomic_load_n(&loop->abandoned, __ATOMIC_ACQUIRE);
}

static inline int ps_van_loop_sleeping(const ps_van_loop_t *loop)
{
    return __atomic_load_n(&loop->sleeping, __ATOMIC_SEQ_CST);
}

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_PROGRESS_LOOP_H_ */

/*
 * The watchdog of the libfabric van: a thread that notices the progress
 * thread stuck in one round for longer than PS_FABRIC_STUCK_MS.
 *
 * libfabric 1.17's shm provider takes a spinlock in the shared region of
 * the receiving process in every send and in every progress call, and a
 * process killed while holding one never releases it: every call of every
 * other process that needs that lock then spins for good. No provider
 * call can be interrupted, so the van keeps the application's threads out
 * of them where that may happen (sends are posted by the progress thread,
 * which no waiting thread drives: fabric_send.c), and when the progress
 * thread stops coming round, this thread does what it no longer can: it
 * reports every peer failed through peer_failed (PS_ERR_PEER_GONE for a
 * peer whose process is gone, PS_ERR_LINK_FAILED for the rest), so that
 * every wait on the van returns; sends are refused from then on, and
 * close() leaves the stuck thread and what it may touch behind instead of
 * waiting for it.
 *
 * A stuck thread holds what it held when it entered the call: the lock of
 * the peer it was posting to, the endpoint lock of a provider that is not
 * thread-safe. Other threads take those through ps__fab_lock(), which
 * gives up once the watchdog's verdict is in, and close() gives that
 * verdict itself when the progress thread does not stop.
 *
 * What it watches: the loop's clock (round_now_ns), which a running loop
 * moves every PS__FAB_CLOCK_EVERY rounds and after every sleep (at most
 * PS__FAB_LIVENESS_NS with a wait object). It takes no lock the stuck
 * thread may hold: it reads the append-only peer list and each peer's
 * process handle without them.
 */
#include <stdio.h>
#include <time.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/rdma/fabric/fabric_internal.h"

/* A bound below the loop's longest sleep would take a sleeping thread for
 * a stuck one. */
#define WATCH_MIN_MS 1000
/* How often the loop's clock is looked at, at most. */
#define WATCH_EVERY_MS 500
/* A thread waiting for a lock the stuck thread may hold looks at the
 * verdict this often. */
#define LOCK_SLICE_MS 20

int ps__fab_stuck(const ps__fab_van_t *van)
{
    return __atomic_load_n(&van->stuck, __ATOMIC_ACQUIRE);
}

int ps__fab_lock(ps__fab_van_t *van, pthread_mutex_t *m)
{
    if (pthread_mutex_trylock(m) == 0) {
        return 0;
    }
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += LOCK_SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_mutex_timedlock(m, &ts) == 0) {
            return 0;
        }
        if (ps__fab_stuck(van)) {
            return -1;
        }
    }
}

/* Every peer in the table failed: its process is gone, or this van can no
 * longer reach it. */
static void fail_all(ps__fab_van_t *van)
{
    for (ps__fab_peer_t *p = __atomic_load_n(&van->all_peers, __ATOMIC_ACQUIRE); p != NULL;
         p = p->all_next) {
        if (ps__fab_peer_lookup(van, p->id) != p) {
            continue; /* replaced or disconnected: the table's entry speaks for the id */
        }
        /* The process fields are read atomically: a connect may set them now. */
        ps_status_t why = ps__fab_peer_process_gone(p) ? PS_ERR_PEER_GONE : PS_ERR_LINK_FAILED;
        if (van->base.cb.peer_failed != NULL) {
            van->base.cb.peer_failed(van->base.cb.arg, p->id, why);
        }
    }
}

static void *watch_main(void *arg)
{
    ps__fab_van_t *van = arg;
    int every = van->stuck_ms / 4 < WATCH_EVERY_MS ? van->stuck_ms / 4 : WATCH_EVERY_MS;
    uint64_t seen = ps__fab_round_now(van);
    uint64_t moved_ns = ps_time_now_ns();
    while (ps_event_wait(&van->watch_stop, ps_deadline_from_ms(every)) == PS_ERR_TIMED_OUT) {
        uint64_t now = ps_time_now_ns();
        uint64_t clock = ps__fab_round_now(van);
        if (clock != seen) {
            seen = clock;
            moved_ns = now;
            continue;
        }
        if (now - moved_ns < (uint64_t)van->stuck_ms * PS_NSEC_PER_MSEC) {
            continue;
        }
        __atomic_store_n(&van->stuck, 1, __ATOMIC_RELEASE);
        ps_error(PS_LOG_FABRIC,
                 "the progress thread has not come round for %.1f s (PS_FABRIC_STUCK_MS): "
                 "stuck inside provider %s (a process that died holding one of its locks?); "
                 "failing every link of this van, which close will leave behind",
                 (double)(now - moved_ns) / 1e9, van->prov_name);
        fail_all(van);
        break;
    }
    return NULL;
}

ps_status_t ps__fab_watchdog_start(ps__fab_van_t *van)
{
    int64_t ms = ps_config_int_or(PS_FABRIC_CFG(PS_FABRIC_STUCK_MS), PS__FAB_STUCK_MS_DEFAULT);
    if (ms <= 0) {
        return PS_OK;
    }
    van->stuck_ms = ms < WATCH_MIN_MS ? WATCH_MIN_MS : ms > INT32_MAX ? INT32_MAX : (int)ms;
    ps_status_t st = ps_event_init(&van->watch_stop, 0);
    if (st != PS_OK) {
        return st;
    }
    st = ps_thread_create("ps-fabric-watch", PS_THREAD_NO_CPU, watch_main, van, &van->watch_thread);
    if (st != PS_OK) {
        ps_event_destroy(&van->watch_stop);
        return st;
    }
    van->watching = 1;
    return PS_OK;
}

void ps__fab_watchdog_stop(ps__fab_van_t *van)
{
    if (!van->watching) {
        return;
    }
    ps_event_set(&van->watch_stop);
    ps_thread_join(&van->watch_thread, NULL);
    ps_event_destroy(&van->watch_stop);
    van->watching = 0;
}

/*
 * The progress thread of the libfabric van. Manual progress: every
 * completion, and every step of a provider's own protocol, happens when
 * this thread reads the completion queue.
 *
 * The progress loop (ps/net/van/progress_loop.h) decides when to spin,
 * sleep or park; idle, it does not burn a core: after a short spin (a
 * wake-up of an idle vCPU costs tens of microseconds; longer while
 * transfers are in flight) it sleeps on the completion queue's wait fd,
 * after fi_trywait() says that is safe. Providers without a wait object
 * (shm) get pauses doubling up to a millisecond; PS_BUSY_POLL=1 spins all
 * the time (the queue then has no wait object), and a thread waiting for a
 * request may run the loop itself while this thread parks.
 *
 * Errors: a failed send or data receive fails that peer's link (the
 * postoffice hears PS_ERR_LINK_FAILED), never the process. An op that
 * completed with an error is not reused before the endpoint is closed:
 * the provider may report it again (see ps__fab_tx_op_failed). A peer on this
 * host whose process is gone while sends to it hang is found by a
 * liveness check (shm never fails a send to a dead process: it waits for
 * the peer to take it, forever). A call that never returns (shm spinning
 * on a lock a killed process held) stops the loop's clock, which the
 * watchdog (fabric_watchdog.c) follows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>

#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/rdma/fabric/fabric_internal.h"

static void handle_completion(ps__fab_van_t *van, const struct fi_cq_tagged_entry *e,
                              fi_addr_t src)
{
    ps__fab_op_t *op = e->op_context;
    if (op == NULL)
        return; /* an inject or a write without a completion we asked for */
    switch (op->kind) {
    case PS__FAB_OP_SEND:
        ps__fab_tx_op_done(van, op->owner, 1);
        break;
    case PS__FAB_OP_MRECV:
        ps__fab_on_meta(van, op->owner, e->len, src);
        break;
    case PS__FAB_OP_RXPART:
        ps__fab_on_rx_part(van, op, 1);
        break;
    default:
        break;
    }
}

static void handle_error_entry(ps__fab_van_t *van, const struct fi_cq_err_entry *err)
{
    ps__fab_op_t *op = err->op_context;
    char detail[160];
    const char *prov = fi_cq_strerror(van->cq, err->prov_errno, err->err_data, NULL, 0);
    snprintf(detail, sizeof(detail), "%s%s%s", ps__fab_strerror(err->err),
             prov != NULL && prov[0] != '\0' ? ": " : "", prov != NULL ? prov : "");
    switch (op->kind) {
    case PS__FAB_OP_SEND:
        ps__fab_tx_op_failed(van, op, detail);
        break;
    case PS__FAB_OP_MRECV:
        ps__fab_meta_recv_error(van, op->owner, err->err);
        break;
    case PS__FAB_OP_RXPART:
        if (err->err != FI_ECANCELED)
            ps_warn(PS_LOG_FABRIC, "a receive failed: %s", detail);
        ps__fab_on_rx_part(van, op, 0);
        break;
    default:
        break;
    }
}

static void handle_error(ps__fab_van_t *van)
{
    struct fi_cq_err_entry err;
    memset(&err, 0, sizeof(err));
    ps__fab_ep_lock(van);
    ssize_t ret = fi_cq_readerr(van->cq, &err, 0);
    ps__fab_ep_unlock(van);
    if (ret != 1)
        return;
    if (err.op_context == NULL) {
        /* Ours all carry one except RMA writes into our memory (and
         * injects): with shm, the target copies a large write from the
         * writer's memory, and fails to when the writer died, while the
         * message saying the values are written follows (rma_doubt). */
        ps_warn_ratelimited(PS_LOG_FABRIC, "completion error without a context: %s",
                            ps__fab_strerror(err.err));
        van->rma_doubt_until_ns = ps__fab_round_now(van) + PS__FAB_RMA_DOUBT_NS;
        return;
    }
    handle_error_entry(van, &err);
    /* (A meta receive that failed otherwise than cancelled is posted again
     * at once, so a repeat of its report could not be told from news.) */
    if (ps_unlikely(__atomic_load_n(&ps__fab_repeat_errors, __ATOMIC_RELAXED)) &&
        ((ps__fab_op_t *)err.op_context)->kind != PS__FAB_OP_MRECV) {
        __atomic_add_fetch(&ps__fab_errors_repeated, 1, __ATOMIC_RELAXED);
        handle_error_entry(van, &err);
    }
}

/* Reads what the completion queue holds; returns how many events. Inlined
 * into run_round: most calls of a spinning loop find nothing, and then a
 * call of its own (its frame, the stack protector's check of the batch
 * arrays) cost as much as the rest of our part of the turn. */
static inline __attribute__((always_inline)) int drain_cq(ps__fab_van_t *van)
{
    struct fi_cq_tagged_entry ev[PS__FAB_CQ_BATCH];
    fi_addr_t src[PS__FAB_CQ_BATCH];
    int total = 0;
    for (int round = 0; round < 8; round++) {
        ssize_t n;
        ps__fab_ep_lock(van);
        if (van->have_source)
            n = fi_cq_readfrom(van->cq, ev, PS__FAB_CQ_BATCH, src);
        else
            n = fi_cq_read(van->cq, ev, PS__FAB_CQ_BATCH);
        ps__fab_ep_unlock(van);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++)
                handle_completion(van, &ev[i], van->have_source ? src[i] : FI_ADDR_NOTAVAIL);
            total += (int)n;
            if (n < PS__FAB_CQ_BATCH)
                break;
            continue;
        }
        if (n == -FI_EAVAIL) {
            handle_error(van);
            total++;
            continue;
        }
        if (n != -FI_EAGAIN)
            ps_warn_ratelimited(PS_LOG_FABRIC, "reading the completion queue: %s",
                                ps__fab_strerror((int)n));
        break;
    }
    return total;
}

/* Tells the postoffice about failed links (outside every lock). */
static void notify_failures(ps__fab_van_t *van)
{
    /* Every round passes here: a plain load first (an exchange writes the
     * line every time, a locked instruction per round). */
    if (!__atomic_load_n(&van->fail_pending, __ATOMIC_SEQ_CST) ||
        !__atomic_exchange_n(&van->fail_pending, 0, __ATOMIC_SEQ_CST))
        return;
    for (;;) {
        ps__fab_peer_t *hit = NULL;
        ps_status_t why = PS_ERR_LINK_FAILED;
        pthread_rwlock_rdlock(&van->peers_lock);
        for (ps__fab_peer_t *p = van->all_peers; p != NULL && hit == NULL; p = p->all_next) {
            pthread_mutex_lock(&p->lock);
            if (p->fail_pending) {
                p->fail_pending = 0;
                why = p->fail_why;
                hit = p;
            }
            pthread_mutex_unlock(&p->lock);
        }
        pthread_rwlock_unlock(&van->peers_lock);
        if (hit == NULL)
            return;
        if (van->base.cb.peer_failed != NULL)
            van->base.cb.peer_failed(van->base.cb.arg, hit->id, why);
    }
}

/* Peers whose sends hang. A peer on this host whose process is gone
 * (exited, reaped or not) is found within a check or two; any peer that
 * takes none of our sends and sends nothing for PS_CONNECT_TIMEOUT_MS is
 * taken for unreachable (some providers retry a refused connection, or
 * deliver into the shared memory of a dead process, without ever failing
 * the send). */
static void check_liveness(ps__fab_van_t *van, uint64_t now)
{
    if (now - van->last_liveness_ns < PS__FAB_LIVENESS_NS)
        return;
    van->last_liveness_ns = now;
    uint64_t limit = (uint64_t)(van->base.params.connect_timeout_ms > 0
                                    ? van->base.params.connect_timeout_ms
                                    : PS__FAB_STALL_MS_DEFAULT) * PS_NSEC_PER_MSEC;
    ps__fab_peer_t *dead = NULL;
    ps_status_t why = PS_ERR_PEER_GONE;
    char what[160] = "";
    pthread_rwlock_rdlock(&van->peers_lock);
    for (ps__fab_peer_t *p = van->all_peers; p != NULL && dead == NULL; p = p->all_next) {
        pthread_mutex_lock(&p->lock);
        uint64_t oldest = 0;
        if (!p->failed && !p->detached) {
            for (ps__fab_tx_t *t = p->inflight; t != NULL; t = t->fl_next) {
                /* a failed op's send stays listed until close */
                if (t->failed_ops == 0 && (oldest == 0 || t->posted_ns < oldest))
                    oldest = t->posted_ns;
            }
        }
        int hung = oldest != 0 && now - oldest >= PS__FAB_LIVENESS_NS;
        int gone = hung && ps__fab_peer_process_gone(p);
        pthread_mutex_unlock(&p->lock);
        if (!hung)
            continue;
        if (gone) {
            dead = p;
            snprintf(what, sizeof(what), "its process is gone");
            continue;
        }
        uint64_t seen = __atomic_load_n(&p->last_progress_ns, __ATOMIC_RELAXED);
        uint64_t since = seen > oldest ? seen : oldest;
        if (now > since && now - since > limit) {
            dead = p;
            why = PS_ERR_LINK_FAILED;
            snprintf(what, sizeof(what), "no send to it completed and nothing came from it "
                     "for %.1f s (PS_CONNECT_TIMEOUT_MS): unreachable?",
                     (double)(now - since) / 1e9);
        }
    }
    pthread_rwlock_unlock(&van->peers_lock);
    if (dead != NULL)
        ps__fab_peer_fail(van, dead, why, what);
}

static int have_handoffs(ps__fab_van_t *van)
{
    return __atomic_load_n(&van->blocked, __ATOMIC_SEQ_CST) != NULL ||
           __atomic_load_n(&van->fail_pending, __ATOMIC_SEQ_CST) != 0 ||
           van->rx_blocked != NULL || van->mrecv_blocked || van->mrecv_ndefer != 0;
}

/* One round of the loop; returns how many completions it handled.
 * Inlined into its two callers (a call of its own per idle round cost
 * more than its checks). */
static inline __attribute__((always_inline)) int run_round(ps__fab_van_t *van, uint64_t *now_p)
{
    int n = drain_cq(van);
    /* An idle round posts the meta receives read since (after their
     * delivery, whose answer has gone by now). */
    if (n == 0 && van->mrecv_ndefer != 0)
        ps__fab_flush_mrecvs(van);
    if (__atomic_load_n(&van->blocked, __ATOMIC_ACQUIRE) != NULL)
        ps__fab_flush_blocked(van);
    if (van->rx_blocked != NULL || van->mrecv_blocked)
        ps__fab_retry_recvs(van);
    notify_failures(van);
    /* The rounds of a spinning loop need no fresh time: the liveness check
     * and the spin windows are milliseconds (round_now_ns says more). */
    if (++van->clock_rounds >= PS__FAB_CLOCK_EVERY) {
        van->clock_rounds = 0;
        while (ps_unlikely(__atomic_load_n(&van->test_stall, __ATOMIC_RELAXED)))
            ps_cpu_relax(); /* a provider call that never returns */
        uint64_t now = ps_time_now_ns();
        ps__fab_set_round_now(van, now);
        check_liveness(van, now);
    }
    *now_p = ps__fab_round_now(van);
    return n;
}

/* After a sleep the last reading is old: read the clock now (what the
 * next round handles is stamped with it) and at the end of the round. */
static void fab_woke(void *arg)
{
    ps__fab_van_t *van = arg;
    ps__fab_set_round_now(van, ps_time_now_ns());
    van->clock_rounds = PS__FAB_CLOCK_EVERY;
}

static int fab_poll(void *arg, unsigned budget)
{
    ps__fab_van_t *van = arg;
    (void)budget; /* a round takes what the queue has */
    uint64_t now;
    int n = run_round(van, &now);
    if (n > 0) {
        van->last_active_ns = now;
        van->pause_ns = PS__FAB_SLEEP_MIN_NS;
        van->trywait_refusals = 0;
    }
    return n;
}

/* Busy polling opens the completion queue without a wait object (see
 * fabric_domain.c): the thread spins for ever, as the tools do. Otherwise
 * manual progress moves a large message only while someone polls: spin
 * longer while transfers are in flight. */
static uint64_t fab_spin_ns(void *arg)
{
    ps__fab_van_t *van = arg;
    if (van->base.params.busy_poll)
        return UINT64_MAX;
    if (__atomic_load_n(&van->ops_in_flight, __ATOMIC_RELAXED) > 0 &&
        ps__fab_round_now(van) - van->last_active_ns < PS__FAB_ACTIVE_NS)
        return PS__FAB_SPIN_INFLIGHT_NS;
    return PS_VAN_LOOP_IDLE_SPIN_NS;
}

/* Before sleeping: hand-offs published before the loop said it sleeps are
 * taken first (see ps__fab_kick); with a wait object, fi_trywait() says
 * whether sleeping on it is safe; without one, or when it keeps refusing
 * with nothing completing, the pause doubles. */
static int fab_arm(void *arg, int64_t *timeout_ns_p)
{
    ps__fab_van_t *van = arg;
    if (__atomic_load_n(&van->blocked, __ATOMIC_ACQUIRE) != NULL) {
        /* The provider pushed back and nothing completed: let it breathe
         * before the next try. */
        *timeout_ns_p = (int64_t)PS__FAB_SLEEP_MIN_NS;
        return PS_VAN_LOOP_SLEEP;
    }
    if (have_handoffs(van))
        return PS_VAN_LOOP_BUSY;
    if (van->cq_fd >= 0) {
        struct fid *fids[1] = {&van->cq->fid};
        ps__fab_ep_lock(van);
        int ret = fi_trywait(van->fabric, fids, 1);
        ps__fab_ep_unlock(van);
        if (ret == 0) {
            van->trywait_refusals = 0;
            *timeout_ns_p = (int64_t)PS__FAB_LIVENESS_NS;
            return PS_VAN_LOOP_SLEEP;
        }
        if (++van->trywait_refusals >= PS__FAB_TRYWAIT_REFUSALS) {
            /* Refused round after round with nothing completing: the wait
             * fd may stay ready for good, so pause off it, doubling as
             * without a wait object (a completion resets the pause). */
            ps_sleep_ns(van->pause_ns);
            van->pause_ns = van->pause_ns * 2 > PS__FAB_SLEEP_MAX_NS ? PS__FAB_SLEEP_MAX_NS
                                                                     : van->pause_ns * 2;
        }
        return PS_VAN_LOOP_BUSY;
    }
    /* Short pauses while traffic is recent (a 4 MB copy by the peer leaves
     * a gap of a millisecond), long ones when idle. */
    uint64_t now = ps__fab_round_now(van);
    *timeout_ns_p = (int64_t)van->pause_ns;
    uint64_t cap = now - van->last_active_ns < PS__FAB_ACTIVE_NS ? PS__FAB_SLEEP_ACTIVE_NS
                                                                 : PS__FAB_SLEEP_MAX_NS;
    van->pause_ns = van->pause_ns * 2 > cap ? cap : van->pause_ns * 2;
    return PS_VAN_LOOP_SLEEP;
}

static const ps_van_loop_ops_t fab_loop_ops = {
    .size = sizeof(ps_van_loop_ops_t),
    .poll = fab_poll,
    .arm = fab_arm,
    .woke = fab_woke,
    .spin_ns = fab_spin_ns,
};

ps_status_t ps__fab_start_progress(ps__fab_van_t *van)
{
    const ps_van_loop_params_t lp = {
        .thread_name = "ps-fabric",
        .log = PS_LOG_FABRIC,
        .busy_poll = van->base.params.busy_poll,
        .yield_every = van->base.params.busy_poll ? PS_VAN_LOOP_YIELD_EVERY : PS__FAB_IDLE_YIELD_EVERY,
        .stop_ms = PS__FAB_STOP_MS,
    };
    ps_status_t st = ps_van_loop_init(&van->loop, &lp, &fab_loop_ops, van);
    if (st != PS_OK)
        return st;
    /* Waiting threads may drive the loop, unless a provider call may never
     * return: only the progress thread may be caught in one (such a van
     * has no progress op either, fabric_van.c). */
    if (!van->posts_on_loop)
        van->base.handle.loop = &van->loop;
    van->last_liveness_ns = ps_time_now_ns();
    van->last_active_ns = van->last_liveness_ns;
    van->pause_ns = PS__FAB_SLEEP_MIN_NS;
    ps__fab_set_round_now(van, van->last_liveness_ns);
    return ps_van_loop_start(&van->loop, &van->cq_fd, van->cq_fd >= 0 ? 1 : 0);
}

ps_status_t ps__fab_stop_progress(ps__fab_van_t *van)
{
    if (van->loop.wakefd < 0)
        return PS_OK; /* never started */
    if (ps__fab_stuck(van)) {
        /* It will not come round: no drain, no wait. */
        __atomic_store_n(&van->loop.stop, 1, __ATOMIC_SEQ_CST);
        return PS_ERR_TIMED_OUT;
    }
    ps_status_t st = ps_van_loop_stop(&van->loop);
    if (st != PS_OK)
        return st; /* stuck: it keeps the van (and its fds) */
    ps_van_loop_cleanup(&van->loop);
    return PS_OK;
}

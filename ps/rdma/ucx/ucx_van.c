/*
 * The UCX van: lifecycle, the progress thread, and the ops table
 * registered as component "ucx" (chosen by DMLC_ENABLE_UCX=1, or
 * DMLC_ENABLE_RDMA=ucx / DMLC_PS_VAN_TYPE=ucx).
 *
 * The progress thread drives the workers (the data worker every turn, the
 * control worker and the handshake sockets less often: ucx_internal.h):
 * ucp_worker_progress(), then the META messages its handler took, then
 * what the callbacks recorded.
 * The progress loop (ps/net/van/progress_loop.h) decides when to spin,
 * sleep or stand back for a waiter that drives it; before it sleeps, this
 * van drains and arms the workers (ucp_worker_arm), and it sleeps on their
 * event fds and on the handshake sockets' epoll set.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/rdma/common/van_open.h"
#include "ps/base/time.h"
#include "ps/rdma/common/buf_pool.h"
#include "ps/rdma/probe.h"
#include "ps/rdma/ucx/ucx_internal.h"

/* ucp_worker_progress() calls at most per worker when draining it (before
 * blocking, at close). */
#define PS__UCX_PROGRESS_BURST 64
/* Rounds of the loop one progress-op call runs at most while idle: a
 * waiter's turn around the loop (taking it, the tracker's poll) costs about
 * as much as a round, and a message is found only in a round. */
#define PS__UCX_DRIVE_ROUNDS 8
/* Once sends have drained, endpoints get this long to close. */
#define PS__UCX_CLOSE_MS 1000
#define PS__UCX_DEFAULT_CONNECT_MS 10000

void ps__ucx_wake(ps__ucx_van_t *van)
{
    ps_van_loop_wake(&van->loop);
}

void ps__ucx_post_event(ps__ucx_van_t *van, ps__ucx_ev_t *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&van->ev_lock);
    if (van->ev_tail != NULL) {
        van->ev_tail->next = ev;
    } else {
        __atomic_store_n(&van->ev_head, ev, __ATOMIC_RELEASE);
    }
    van->ev_tail = ev;
    pthread_mutex_unlock(&van->ev_lock);
    ps_van_loop_kick(&van->loop);
}

static int process_events(ps__ucx_van_t *van)
{
    if (__atomic_load_n(&van->ev_head, __ATOMIC_ACQUIRE) == NULL) {
        return 0; /* every turn of the loop looks: no lock while there is nothing */
    }
    pthread_mutex_lock(&van->ev_lock);
    ps__ucx_ev_t *list = van->ev_head;
    __atomic_store_n(&van->ev_head, NULL, __ATOMIC_RELAXED);
    van->ev_tail = NULL;
    pthread_mutex_unlock(&van->ev_lock);
    int n = 0;
    van->timer_scan_ns = 0; /* events change connections and their timers */
    while (list != NULL) {
        ps__ucx_ev_t *ev = list;
        list = ev->next;
        ps__ucx_handle_event(van, ev);
        free(ev);
        n++;
    }
    return n;
}

static int events_waiting(ps__ucx_van_t *van)
{
    pthread_mutex_lock(&van->ev_lock);
    int waiting = van->ev_head != NULL || van->done_ops != NULL;
    pthread_mutex_unlock(&van->ev_lock);
    return waiting;
}

static int progress_worker(ucp_worker_h worker, unsigned burst)
{
    int did = 0;
    for (unsigned i = 0; i < burst; ++i) {
        unsigned n = ucp_worker_progress(worker);
        if (n == 0) {
            break;
        }
        did += (int)n;
    }
    return did;
}

/* One round of work; returns how many things happened (0: nothing). The
 * control worker's turn comes every PS__UCX_CTL_EVERY rounds, every round
 * while data rides on it, and whenever `all`. A worker is progressed once
 * per round, and up to `burst` times (until it has nothing) when `all`
 * (draining, before the workers are armed): a message's round goes on to
 * take it at once, where another ucp_worker_progress() that finds nothing
 * more would come first — its cost was on every message's path. */
static int progress_once(ps__ucx_van_t *van, unsigned burst, int all)
{
    int did = 0;
    burst = all ? burst : 1;
    if (van->dworker != NULL) {
        /* META messages reach their handler inside ucp_worker_progress();
         * the handler leaves them on van->am_head. */
        did += progress_worker(van->dworker, burst);
        if (van->am_head != NULL) {
            did += ps__ucx_am_take(van);
        }
    }
    if (van->dworker == NULL || all || van->ctl_data_conns > 0 ||
        ++van->ctl_tick >= PS__UCX_CTL_EVERY) {
        van->ctl_tick = 0;
        did += progress_worker(van->worker, burst);
        if (van->am_head != NULL) {
            did += ps__ucx_am_take(van);
        }
    }
    /* The handshakes' sockets: connection setup, not data, and a system
     * call to look, so not on every turn of a loop that spins for data. */
    if (all || ++van->boot_tick >= PS__UCX_CTL_EVERY) {
        van->boot_tick = 0;
        did += ps__ucx_boot_poll(van);
    }
    /* Receives before events: a message that arrived just before its
     * connection ended is delivered before the end is. (The checks are
     * here so that an idle turn makes no calls.) Lane messages first: each
     * arrived before anything of its connection a receive holds. */
    if (van->probe_pending != 0) {
        did += ps__ucx_rx_probe(van); /* large segments' DATA matched */
    }
    if (van->lane_n != 0) {
        did += ps__ucx_lane_deliver(van);
    }
    if (van->rx_ready != NULL) {
        did++;
        ps__ucx_rx_process(van);
    }
    if (__atomic_load_n(&van->done_ops, __ATOMIC_ACQUIRE) != NULL) {
        ps__ucx_process_done(van);
    }
    if (__atomic_load_n(&van->ev_head, __ATOMIC_ACQUIRE) != NULL) {
        did += process_events(van);
    }
    return did;
}

/* The loop's clock, read every PS__UCX_CLOCK_EVERY turns (or at once
 * when connections changed); runs the timers when it is read. Returns 1
 * when it read the clock. */
static int loop_clock(ps__ucx_van_t *van, uint64_t *now_p)
{
    if (++van->clock_tick < PS__UCX_CLOCK_EVERY && van->timer_scan_ns != 0) {
        return 0;
    }
    van->clock_tick = 0;
    *now_p = ps_time_now_ns();
    (void)ps__ucx_run_timers(van, *now_p);
    return 1;
}

/* A turn of the loop (see progress_once); `budget` bounds a worker's
 * burst when draining. */
static int ucx_poll(void *arg, unsigned budget)
{
    ps__ucx_van_t *van = arg;
    if (van->worker == NULL) {
        return 0;
    }
    van->posted_seen = __atomic_load_n(&van->posted, __ATOMIC_SEQ_CST);
    ps__ucx_start_pending(van);
    int did = progress_once(van, budget, 0);
    uint64_t now;
    (void)loop_clock(van, &now);
    return did;
}

/* Before sleeping: the timers with a fresh clock (the sleep ends at the
 * next one); every worker gets its turn (ucp_worker_arm wants them
 * drained), then is armed. The loop announced its sleep first: a sender
 * that posted before it saw that is caught by the checks here, one that
 * posts after it wakes us. */
static int ucx_arm(void *arg, int64_t *timeout_ns_p)
{
    ps__ucx_van_t *van = arg;
    int timeout = ps__ucx_run_timers(van, ps_time_now_ns());
    if (progress_once(van, PS__UCX_PROGRESS_BURST, 1)) {
        return PS_VAN_LOOP_BUSY;
    }
    ucs_status_t st = ucp_worker_arm(van->worker);
    if (st == UCS_OK && van->dworker != NULL) {
        st = ucp_worker_arm(van->dworker);
    }
    if (st == UCS_ERR_BUSY || events_waiting(van) ||
        __atomic_load_n(&van->posted, __ATOMIC_SEQ_CST) != van->posted_seen) {
        return PS_VAN_LOOP_BUSY;
    }
    if (st != UCS_OK) {
        ps_warn_ratelimited(PS_LOG_UCX, "ucp_worker_arm: %s", ucs_status_string(st));
        timeout = timeout < 0 || timeout > 1 ? 1 : timeout;
    }
    *timeout_ns_p = timeout < 0 ? -1 : (int64_t)timeout * (int64_t)PS_NSEC_PER_MSEC;
    return PS_VAN_LOOP_SLEEP;
}

static void ucx_woke(void *arg)
{
    ps__ucx_van_t *van = arg;
    /* Whichever fd woke us: every worker and the handshakes next. */
    van->ctl_tick = PS__UCX_CTL_EVERY;
    van->boot_tick = PS__UCX_CTL_EVERY;
    van->clock_tick = PS__UCX_CLOCK_EVERY;
}

static int64_t ucx_outstanding(void *arg, uint64_t *moved_p)
{
    ps__ucx_van_t *van = arg;
    *moved_p = __atomic_load_n(&van->base.bytes_sent, __ATOMIC_RELAXED);
    return __atomic_load_n(&van->inflight_ops, __ATOMIC_ACQUIRE);
}

static const ps_van_loop_ops_t ucx_loop_ops = {
    .size = sizeof(ps_van_loop_ops_t),
    .poll = ucx_poll,
    .arm = ucx_arm,
    .woke = ucx_woke,
    .outstanding = ucx_outstanding,
};

/* ---- ops ---- */

static void ucx_close(ps_van_t *v);
static const ps_van_ops_t ucx_ops;

static ps_status_t ucx_open_body(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                                 ps_van_t **van_p);

/* UCX is loaded here, not linked: a job of another van never maps it. The
 * process keeps its own dispositions of fatal signals whatever UCX's init
 * does to them. */
static ps_status_t ucx_open(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                            ps_van_t **van_p)
{
    return ps__van_open_loaded("ucx", PS_LOG_UCX, ps__ucx_dl_load, ucx_open_body, params, cb,
                               van_p);
}

static ps_status_t ucx_open_body(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                                 ps_van_t **van_p)
{
    if (params == NULL || van_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps__ucx_van_t *van = calloc(1, sizeof(*van));
    if (van == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps_van_base_init(&van->base, "ucx", &ucx_ops, PS_LOG_UCX, params, cb);
    ps_van_base_set_own_tag(&van->base, PS__UCX_HELLO_TAG);
    van->base.handle.loop = &van->loop;
    van->base.params.connect_timeout_ms =
        ps_van_connect_timeout_ms(van->base.params.connect_timeout_ms, PS__UCX_DEFAULT_CONNECT_MS);
    van->limits = ps_van_frame_limits(params);
    van->inline_max = ps_config_size_or(PS_UCX_CFG(BYTEPS_UCX_SHORT_THRESH), 4096);
    van->prealloc = ps_config_size_or(PS_CFG_PS_RECV_PREALLOC_BYTES, 4u << 20);
    if (ps_config_int_or(PS_UCX_CFG(DMLC_NUM_CPU_DEV), 1) > 1 || params->conns_per_peer > 1) {
        ps_info(PS_LOG_UCX, "one ucx worker per process: DMLC_NUM_CPU_DEV / DMLC_NUM_PORTS "
                "above 1 are not used");
    }
    if (ps_config_int_or(PS_UCX_CFG(DMLC_NUM_GPU_DEV), 0) > 0) {
        ps_info(PS_LOG_UCX, "one ucx context per process: DMLC_NUM_GPU_DEV is not used (CUDA "
                "memory goes through that context where UCX has its cuda transports)");
    }
    van->efd = -1;
    van->defd = -1;
    van->bfd = -1;
    van->boot_listen_fd = -1;
    const ps_van_loop_params_t lp = {
        .thread_name = "ps-ucx-progress",
        .log = PS_LOG_UCX,
        .busy_poll = params->busy_poll,
        .idle_spin_ns = PS_VAN_LOOP_IDLE_SPIN_NS,
        .budget = PS__UCX_PROGRESS_BURST,
        .drive_rounds = PS__UCX_DRIVE_ROUNDS,
    };
    ps_status_t st = ps_van_loop_init(&van->loop, &lp, &ucx_loop_ops, van);
    if (st != PS_OK) {
        free(van);
        return st;
    }
    ps_van_peer_table_init(&van->peers, sizeof(ps__ucx_peer_t));
    (void)ps_van_handover_init(&van->handover);
    pthread_mutex_init(&van->ev_lock, NULL);
    pthread_mutex_init(&van->ops_lock, NULL);
    st = ps_mpool_init(&van->ops, "ucx send ops", sizeof(ps__ucx_op_t), 64, 64, 0);
    if (st != PS_OK) {
        ps_van_peer_table_fini(&van->peers);
        ps_van_handover_fini(&van->handover);
        pthread_mutex_destroy(&van->ev_lock);
        pthread_mutex_destroy(&van->ops_lock);
        ps_van_loop_cleanup(&van->loop);
        free(van);
        return st;
    }
    /* UCX registers what its transports need by itself: no ops. */
    st = ps_rdma_buf_pool_create("ucx recv", NULL, NULL, 0, 0, &van->pool);
    if (st != PS_OK) {
        ucx_close(&van->base.handle);
        return st;
    }
    st = ps__ucx_boot_open(van);
    if (st == PS_OK) {
        st = ps__ucx_ctx_open(van);
    }
    if (st != PS_OK) {
        ucx_close(&van->base.handle);
        return st;
    }
    /* META messages, on every worker that carries data (ucx_recv.c). Not
     * UCP_AM_FLAG_PERSISTENT_DATA: UCX would then copy a short message
     * into a descriptor of its own, which the handler's copy makes
     * unnecessary. */
    ucp_worker_h data_workers[2] = {van->worker, van->dworker};
    for (int i = 0; i < 2 && data_workers[i] != NULL; ++i) {
        van->am_arg[i].van = van;
        van->am_arg[i].worker = data_workers[i];
        ucp_am_handler_param_t am;
        memset(&am, 0, sizeof(am));
        am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
        am.id = PS__UCX_AM_META_ID;
        am.cb = ps__ucx_am_meta;
        am.arg = &van->am_arg[i];
        am.flags = UCP_AM_FLAG_WHOLE_MSG;
        ucs_status_t ust = ucp_worker_set_am_recv_handler(data_workers[i], &am);
        if (ust != UCS_OK) {
            ps_error(PS_LOG_UCX, "cannot set the message handler: %s", ucs_status_string(ust));
            ucx_close(&van->base.handle);
            return ps__ucx_status(ust);
        }
    }
    int fds[3] = {van->efd, van->bfd, van->defd};
    st = ps_van_loop_start(&van->loop, fds, van->defd >= 0 ? 3 : 2);
    if (st != PS_OK) {
        ucx_close(&van->base.handle);
        return st;
    }
    *van_p = &van->base.handle;
    return PS_OK;
}

/* After the progress thread stopped: lets endpoint closes finish. */
static void close_endpoints(ps__ucx_van_t *van)
{
    ps__ucx_close_all(van);
    ps__ucx_rx_cancel_all(van);
    uint64_t deadline = ps_time_now_ns() + PS__UCX_CLOSE_MS * PS_NSEC_PER_MSEC;
    while ((van->closing != NULL || van->rx_all != NULL) && ps_time_now_ns() < deadline) {
        if (!progress_once(van, PS__UCX_PROGRESS_BURST, 1)) {
            ps_sleep_ms(1);
        }
    }
    if (van->closing != NULL) {
        ps_debug(PS_LOG_UCX, "closing with endpoints still flushing (peers gone)");
        ps__ucx_abandon_closing(van);
    }
}

static void ucx_close(ps_van_t *v)
{
    if (v == NULL) {
        return;
    }
    ps__ucx_van_t *van = ps__ucx_of(v);
    /* Sends leave while they still move (bounded); then the thread stops.
     * One stuck inside UCX keeps the van, the worker and the context. */
    if (ps_van_loop_stop(&van->loop) != PS_OK) {
        return;
    }
    /* The thread is gone: everything below is ours alone. */
    if (van->worker != NULL) {
        close_endpoints(van);
    }
    ps__ucx_ctx_close(van);
    ps__ucx_boot_close(van);
    /* UCX is gone: what it never finished is released without it. */
    ps__ucx_process_done(van);
    pthread_mutex_lock(&van->ev_lock);
    ps__ucx_ev_t *evs = van->ev_head;
    __atomic_store_n(&van->ev_head, NULL, __ATOMIC_RELAXED);
    van->ev_tail = NULL;
    pthread_mutex_unlock(&van->ev_lock);
    while (evs != NULL) {
        ps__ucx_ev_t *ev = evs;
        evs = ev->next;
        if (ev->kind == PS__UCX_EV_EP_ERROR) {
            ps__ucx_conn_unref(ev->conn);
        } else if (ev->kind == PS__UCX_EV_CLOSED) {
            /* Its record is still on van->closing, freed below. */
        }
        free(ev);
    }
    while (van->closing != NULL) {
        ps__ucx_closing_t *c = van->closing;
        van->closing = c->next;
        ps__ucx_conn_unref(c->conn);
        free(c);
    }
    while (van->inflight != NULL) {
        ps__ucx_op_release(van, van->inflight);
    }
    ps__ucx_rx_free_all(van);
    free(van->cookies);
    ps_van_base_fini(&van->base);
    if (van->pool != NULL) {
        ps_rdma_buf_pool_stats_t ps;
        ps_rdma_buf_pool_stats(van->pool, &ps);
        ps_debug(PS_LOG_UCX, "receive buffers: %llu taken, %llu of them reused",
                 (unsigned long long)ps.gets, (unsigned long long)ps.reuses);
        ps_rdma_buf_pool_destroy(van->pool);
    }
    ps__ucx_op_spare_free(van);
    ps_mpool_cleanup(&van->ops);
    ps_van_peer_table_fini(&van->peers);
    ps_van_handover_fini(&van->handover);
    pthread_mutex_destroy(&van->ev_lock);
    pthread_mutex_destroy(&van->ops_lock);
    ps_van_loop_cleanup(&van->loop);
    free(van);
}

static ps_status_t ucx_query(ps_van_t *v, ps_van_attr_t *attr_p)
{
    ps__ucx_van_t *van = ps__ucx_of(v);
    if (attr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_van_attr_t a;
    memset(&a, 0, sizeof(a));
    a.cap_flags = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_BUSY_POLL;
    if (van->device_kinds != 0)
        a.cap_flags |= PS_CAP_DEVICE_MEMORY;
    ps_van_frame_attr(&van->limits, &a);
    a.num_streams = 1;
    *attr_p = a;
    return PS_OK;
}

static const ps_van_ops_t ucx_ops = {
    .size = sizeof(ps_van_ops_t),
    .open = ucx_open,
    .close = ucx_close,
    .query = ucx_query,
    .bind = ps__ucx_bind,
    .connect = ps__ucx_connect,
    .disconnect = ps__ucx_disconnect,
    .set_node_id = ps__ucx_set_node_id,
    .send = ps__ucx_send,
    .register_mem = ps_van_no_register_mem,
    .deregister_mem = ps_van_no_deregister_mem,
    .stats = ps_van_base_stats,
    .progress = ps_van_loop_progress,
    .send_lane = ps__ucx_send_lane,
};

static int ucx_unavailable(char *why, size_t cap)
{
    ps_probe_ucx_t info;
    if (ps_probe_ucx(&info) != PS_OK || !info.available) {
        snprintf(why, cap, "%s", info.reason[0] ? info.reason : "no ucx transports");
        return 1;
    }
    return 0;
}

const ps_van_component_t ps__ucx_component = {
    .name = "ucx",
    .aliases = "",
    .ops = &ucx_ops,
    .unavailable = ucx_unavailable,
};

PS_VAN_REGISTER(ps__ucx_component)

static const ps_config_entry_t ucx_vars[] = {
#define PS_CONFIG_VAR PS_CONFIG_ENTRY
#include "ps/rdma/ucx/ucx_config_vars.h"
#undef PS_CONFIG_VAR
};
PS_CONFIG_TABLE(ps__ucx_config, "ucx", ucx_vars)

PS_LOG_COMPONENT(ps__ucx_log, "ucx")

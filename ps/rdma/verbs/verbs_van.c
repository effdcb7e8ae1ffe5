/*
 * The ibverbs van: lifecycle, the peer table, connection failure, and the
 * ops table registered as component "ibverbs" (alias "1", upstream's
 * deprecated DMLC_ENABLE_RDMA value; the registry warns about it once).
 *
 * On a machine without an RDMA device (or without the rdma_cm service)
 * unavailable() says so — "no RDMA device: ..." — so ps_info lists why and
 * choosing the van fails start-up with that sentence instead of a crash.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/rdma/common/rdma_shared.h"
#include "ps/rdma/common/van_open.h"
#include "ps/base/time.h"
#include "ps/rdma/verbs/verbs_diag.h"
#include "ps/rdma/verbs/verbs_cq.h"
#include "ps/rdma/verbs/verbs_internal.h"
#include "ps/rdma/verbs/verbs_testing.h"

#define DEFAULT_CONNECT_MS 10000

int ps__vb_my_id(ps__vb_van_t *van)
{
    return __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
}

unsigned long ps__vb_test_received_in_place(struct ps_van *v)
{
    return __atomic_load_n(&ps__vb_of(v)->received_in_place, __ATOMIC_RELAXED);
}

void ps__vb_poll_wake(ps__vb_van_t *van)
{
    if (van->loop.wakefd >= 0)
        ps_van_loop_wake(&van->loop);
}

void ps__vb_cm_wake(ps__vb_van_t *van)
{
    if (van->cm_wakefd >= 0)
        ps_van_wake_fd(van->cm_wakefd);
}

/* ---- connections ---- */

void ps__vb_conn_ref(ps__vb_conn_t *conn)
{
    __atomic_add_fetch(&conn->refs, 1, __ATOMIC_RELAXED);
}

void ps__vb_conn_unref(ps__vb_conn_t *conn)
{
    if (conn == NULL || __atomic_sub_fetch(&conn->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    /* Nobody else sees it now: messages still held for slave chunks that
     * will never come go with it. */
    ps__vb_poll_drop_held(conn);
    ps__vb_gcache_destroy(&conn->gcache);
    pthread_mutex_destroy(&conn->lock);
    free(conn->wrs);
    free(conn);
}

ps__vb_conn_t *ps__vb_conn_by_serial(ps__vb_van_t *van, uint64_t serial)
{
    ps__vb_conn_t *found = NULL;
    ps_mutex_lock(&van->lock);
    for (ps__vb_conn_t *c = van->conns; c != NULL; c = c->next) {
        if (c->serial == serial) {
            found = c;
            ps__vb_conn_ref(c);
            break;
        }
    }
    ps_mutex_unlock(&van->lock);
    return found;
}

/* ---- QP map (qp_num -> QP) ---- */

static unsigned qp_bucket(uint32_t qp_num)
{
    return (qp_num * 2654435761u) % PS__VB_QPMAP_BUCKETS;
}

void ps__vb_qp_map_add(ps__vb_van_t *van, ps__vb_qp_t *qp)
{
    pthread_rwlock_wrlock(&van->qpmap_lock);
    if (!qp->in_map) {
        unsigned b = qp_bucket(qp->qp_num);
        qp->map_next = van->qpmap[b];
        van->qpmap[b] = qp;
        qp->in_map = 1;
    }
    pthread_rwlock_unlock(&van->qpmap_lock);
}

void ps__vb_qp_map_remove(ps__vb_van_t *van, ps__vb_qp_t *qp)
{
    pthread_rwlock_wrlock(&van->qpmap_lock);
    if (qp->in_map) {
        ps__vb_qp_t **pp = &van->qpmap[qp_bucket(qp->qp_num)];
        while (*pp != NULL && *pp != qp)
            pp = &(*pp)->map_next;
        if (*pp == qp)
            *pp = qp->map_next;
        qp->map_next = NULL;
        qp->in_map = 0;
    }
    pthread_rwlock_unlock(&van->qpmap_lock);
}

ps__vb_qp_t *ps__vb_qp_lookup(ps__vb_van_t *van, uint32_t qp_num)
{
    pthread_rwlock_rdlock(&van->qpmap_lock);
    ps__vb_qp_t *qp = van->qpmap[qp_bucket(qp_num)];
    while (qp != NULL && qp->qp_num != qp_num)
        qp = qp->map_next;
    if (qp != NULL)
        ps__vb_conn_ref(qp->conn);
    pthread_rwlock_unlock(&van->qpmap_lock);
    return qp;
}

/* ---- peer table ---- */

/* peers_lock held for writing when create. */
static ps__vb_peer_t *peer_get(ps__vb_van_t *van, int id, int create)
{
    if (id <= 0 || id >= PS_NODE_EMPTY)
        return NULL;
    if (id >= van->peers_cap) {
        if (!create)
            return NULL;
        int cap = van->peers_cap == 0 ? 64 : van->peers_cap;
        while (cap <= id)
            cap *= 2;
        ps__vb_peer_t *p = realloc(van->peers, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return NULL;
        memset(p + van->peers_cap, 0, (size_t)(cap - van->peers_cap) * sizeof(*p));
        van->peers = p;
        van->peers_cap = cap;
    }
    return &van->peers[id];
}

ps__vb_conn_t *ps__vb_peer_send_conn(ps__vb_van_t *van, int id)
{
    ps__vb_conn_t *conn = NULL;
    pthread_rwlock_rdlock(&van->peers_lock);
    ps__vb_peer_t *p = peer_get(van, id, 0);
    if (p != NULL) {
        /* Our own connection first (even while it connects: sends queue
         * on it); else the peer's connection to us, a ready one first: one
         * whose messages came before its ESTABLISHED event did is tabled
         * already (deliver()), and sends queue on it until that event.
         * One fixed choice per peer keeps its messages in order. */
        if (p->out != NULL &&
            __atomic_load_n(&p->out->state, __ATOMIC_ACQUIRE) != PS__VB_C_FAILED)
            conn = p->out;
        for (int i = 0; conn == NULL && i < p->num_in; i++) {
            if (__atomic_load_n(&p->in[i]->state, __ATOMIC_ACQUIRE) == PS__VB_C_READY)
                conn = p->in[i];
        }
        for (int i = 0; conn == NULL && i < p->num_in; i++) {
            if (__atomic_load_n(&p->in[i]->state, __ATOMIC_ACQUIRE) == PS__VB_C_CONNECTING)
                conn = p->in[i];
        }
        if (conn != NULL)
            ps__vb_conn_ref(conn);
    }
    pthread_rwlock_unlock(&van->peers_lock);
    return conn;
}

ps_status_t ps__vb_peer_add_in(ps__vb_van_t *van, ps__vb_conn_t *conn, int id)
{
    pthread_rwlock_wrlock(&van->peers_lock);
    ps__vb_peer_t *p = peer_get(van, id, 1);
    if (p == NULL) {
        pthread_rwlock_unlock(&van->peers_lock);
        return PS_ERR_NO_MEMORY;
    }
    for (int i = 0; i < p->num_in; i++) {
        if (p->in[i] == conn) {
            /* Already recorded (its hello and its readiness both tell). */
            pthread_rwlock_unlock(&van->peers_lock);
            return PS_OK;
        }
    }
    if (p->num_in == PS__VB_MAX_IN) {
        /* A peer that reconnected several times: the oldest is replaced
         * (it is dead or about to be). */
        memmove(&p->in[0], &p->in[1], (PS__VB_MAX_IN - 1) * sizeof(p->in[0]));
        p->num_in--;
    }
    p->in[p->num_in++] = conn;
    p->lost = PS_OK;
    __atomic_store_n(&conn->peer_id, id, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&van->peers_lock);
    return PS_OK;
}

void ps__vb_peer_remove(ps__vb_van_t *van, ps__vb_conn_t *conn)
{
    int id = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    if (conn->outgoing)
        id = conn->expect_id;
    pthread_rwlock_wrlock(&van->peers_lock);
    ps__vb_peer_t *p = peer_get(van, id, 0);
    if (p != NULL) {
        if (p->out == conn)
            p->out = NULL;
        for (int i = 0; i < p->num_in; i++) {
            if (p->in[i] == conn) {
                memmove(&p->in[i], &p->in[i + 1], (size_t)(p->num_in - i - 1) * sizeof(p->in[0]));
                p->num_in--;
                break;
            }
        }
        ps_status_t why = __atomic_load_n(&conn->why, __ATOMIC_ACQUIRE);
        if (ps_van_keeps_lost(why))
            p->lost = why;
    }
    pthread_rwlock_unlock(&van->peers_lock);
}

ps_status_t ps__vb_peer_lost(ps__vb_van_t *van, int id)
{
    pthread_rwlock_rdlock(&van->peers_lock);
    ps__vb_peer_t *p = peer_get(van, id, 0);
    ps_status_t lost = p != NULL ? p->lost : PS_OK;
    /* A failed connection of ours stays listed until its teardown ends. */
    if (p != NULL && lost == PS_OK && p->out != NULL &&
        __atomic_load_n(&p->out->state, __ATOMIC_ACQUIRE) == PS__VB_C_FAILED) {
        ps_status_t why = __atomic_load_n(&p->out->why, __ATOMIC_ACQUIRE);
        if (ps_van_keeps_lost(why))
            lost = why;
    }
    pthread_rwlock_unlock(&van->peers_lock);
    return lost;
}

/* The other live connections of `id` (referenced), for failing them too. */
static int peer_others(ps__vb_van_t *van, int id, ps__vb_conn_t *skip, ps__vb_conn_t **out, int cap)
{
    int n = 0;
    pthread_rwlock_rdlock(&van->peers_lock);
    ps__vb_peer_t *p = peer_get(van, id, 0);
    if (p != NULL) {
        if (p->out != NULL && p->out != skip && n < cap) {
            ps__vb_conn_ref(p->out);
            out[n++] = p->out;
        }
        for (int i = 0; i < p->num_in && n < cap; i++) {
            if (p->in[i] != skip) {
                ps__vb_conn_ref(p->in[i]);
                out[n++] = p->in[i];
            }
        }
    }
    pthread_rwlock_unlock(&van->peers_lock);
    return n;
}

typedef struct {
    ps__vb_van_t *van;
    int id;
} pull_match_t;

static int pull_of_peer(void *arg, void *ptr)
{
    const pull_match_t *m = arg;
    return m->id < 0 || ((ps__vb_pull_t *)ptr)->peer == m->id;
}

void ps__vb_pull_free(ps__vb_pull_t *pull)
{
    if (pull == NULL)
        return;
    if (pull->mr != NULL)
        ps_rdma_mr_cache_put(pull->dev->mrc, pull->mr);
    ps_slice_unref(&pull->dest);
    free(pull);
}

static void pull_drop(void *arg, void *ptr)
{
    (void)arg;
    ps__vb_pull_free(ptr);
}

/* Rendezvous state kept for peer `id` (-1: everyone). */
static void drop_peer_state(ps__vb_van_t *van, int id)
{
    if (van->pulls != NULL) {
        pull_match_t m = {van, id};
        ps_rdma_slot_drain(van->pulls, pull_of_peer, pull_drop, &m);
    }
    if (van->dests != NULL && id >= 0)
        ps_rdma_rdv_drop_peer(van->dests, id);
}

void ps__vb_conn_admitted_end(ps__vb_conn_t *c)
{
    if (__atomic_exchange_n(&c->admitted, 0, __ATOMIC_ACQ_REL))
        ps_van_admission_done(&c->van->admission);
}

void ps__vb_conn_fail(ps__vb_conn_t *conn, ps_status_t why, const char *what)
{
    ps__vb_van_t *van = conn->van;
    if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) == PS__VB_C_FAILED)
        return;
    /* The reason first: whoever sees FAILED reads it. */
    __atomic_store_n(&conn->why, why, __ATOMIC_RELEASE);
    int old = __atomic_exchange_n(&conn->state, PS__VB_C_FAILED, __ATOMIC_ACQ_REL);
    if (old == PS__VB_C_FAILED)
        return;
    ps__vb_conn_admitted_end(conn);
    int id = conn->outgoing ? conn->expect_id : __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    int stopping = __atomic_load_n(&van->stop, __ATOMIC_ACQUIRE);
    if (what != NULL && !stopping) {
        if (old == PS__VB_C_READY)
            ps_warn(PS_LOG_RDMA, "connection %s node %d at %s failed: %s (%s)",
                    conn->outgoing ? "to" : "from", id, conn->addr_str, what, ps_status_str(why));
        else
            ps_info(PS_LOG_RDMA, "connection %s node %d at %s given up: %s",
                    conn->outgoing ? "to" : "from", id, conn->addr_str, what);
    }

    if (old == PS__VB_C_READY) {
        /* Stop the peer's RDMA writes now, before its grants and pull
         * destinations are freed below: a QP in error places nothing.
         * (The CM thread disconnects and destroys it later.) */
        for (unsigned i = 0; i < conn->nqp; i++) {
            if (conn->qp[i].qp == NULL)
                continue;
            struct ibv_qp_attr qa;
            memset(&qa, 0, sizeof(qa));
            qa.qp_state = IBV_QPS_ERR;
            int rc = ibv_modify_qp(conn->qp[i].qp, &qa, IBV_QP_STATE);
            if (rc != 0)
                ps_debug(PS_LOG_RDMA, "queue pair 0x%x to error: %s", conn->qp[i].qp_num,
                         strerror(rc));
        }
    }
    pthread_mutex_lock(&conn->lock);
    ps__vb_tx_t *list = ps__vb_conn_take_queues(conn);
    pthread_mutex_unlock(&conn->lock);
    ps__vb_tx_release_list(list);
    ps_mutex_lock(&van->lock);
    ps_cond_broadcast(&van->cond);
    ps_mutex_unlock(&van->lock);

    ps__vb_peer_remove(van, conn);
    if (conn->dev != NULL && conn->dev->grants != NULL)
        ps__vb_grants_owner_gone(conn->dev->grants, conn->serial);

    /* Hand the QPs to the CM thread, which disconnects and destroys them
     * (once: a connection fails once). */
    __atomic_store_n(&conn->closing, 1, __ATOMIC_RELEASE);
    ps__vb_conn_ref(conn); /* the close list's */
    ps_van_handover_link_t *to_close = &conn->close_link;
    ps_van_handover_put(&van->handover, NULL, 0, &to_close, 1);
    ps__vb_cm_wake(van);

    int notify = __atomic_load_n(&conn->notify, __ATOMIC_ACQUIRE) && old == PS__VB_C_READY && id != PS_NODE_EMPTY && id > 0 &&
                 !stopping;
    if (!notify)
        return;
    /* The peer's other connections go too: the postoffice hears of the
     * peer once, and nothing is sent to half of it. */
    ps__vb_conn_t *others[PS__VB_MAX_IN + 1];
    int n = peer_others(van, id, conn, others, PS__VB_MAX_IN + 1);
    for (int i = 0; i < n; i++) {
        __atomic_store_n(&others[i]->notify, 0, __ATOMIC_RELEASE);
        ps__vb_conn_fail(others[i], why, NULL);
        ps__vb_conn_unref(others[i]);
    }
    drop_peer_state(van, id);
    if (!__atomic_exchange_n(&conn->fail_reported, 1, __ATOMIC_ACQ_REL) &&
        van->base.cb.peer_failed != NULL)
        van->base.cb.peer_failed(van->base.cb.arg, id, why);
}

/* ---- ops ---- */

static void vb_close(ps_van_t *v);
static const ps_van_ops_t vb_ops;

static uint32_t clamp_cfg(ps_config_id_t id, int64_t fallback, int64_t lo, int64_t hi)
{
    int64_t v = ps_config_int_or(id, fallback);
    if (v < lo) {
        ps_warn(PS_LOG_RDMA, "%s=%lld is below %lld; using %lld", ps_config_entry(id)->name,
                (long long)v, (long long)lo, (long long)lo);
        v = lo;
    } else if (v > hi) {
        ps_warn(PS_LOG_RDMA, "%s=%lld is above %lld; using %lld", ps_config_entry(id)->name,
                (long long)v, (long long)hi, (long long)hi);
        v = hi;
    }
    return (uint32_t)v;
}

static void dest_drop(void *arg, const ps_rdma_rdv_key_t *key, void *value)
{
    (void)arg;
    (void)key;
    free(value);
}

static ps_status_t vb_open_body(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                                ps_van_t **van_p);

/* libibverbs and librdmacm are loaded (by ps__vb_unavailable), not linked;
 * the process keeps its own dispositions of fatal signals whatever their
 * providers' init does. */
static ps_status_t vb_open(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                           ps_van_t **van_p)
{
    return ps__van_open_loaded("ibverbs", PS_LOG_RDMA, NULL, vb_open_body, params, cb, van_p);
}

static ps_status_t vb_open_body(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                                ps_van_t **van_p)
{
    if (params == NULL || van_p == NULL)
        return PS_ERR_INVALID_ARG;
    char why[256];
    if (ps__vb_unavailable(why, sizeof(why))) {
        ps_error(PS_LOG_RDMA, "ibverbs van cannot start: %s", why);
        return PS_ERR_UNSUPPORTED;
    }
    ps__vb_van_t *van = calloc(1, sizeof(*van));
    if (van == NULL)
        return PS_ERR_NO_MEMORY;
    ps_van_base_init(&van->base, "ibverbs", &vb_ops, PS_LOG_RDMA, params, cb);
    if (van->base.params.connect_timeout_ms <= 0) {
        int64_t ms = ps_config_int_or(PS_CFG_PS_CONNECT_TIMEOUT_MS, DEFAULT_CONNECT_MS);
        van->base.params.connect_timeout_ms = ms > 0 && ms < INT_MAX ? (int)ms : DEFAULT_CONNECT_MS;
    }
    van->limits = ps_van_frame_limits(params);
    ps_van_admission_init(&van->admission, PS_LOG_RDMA);
    van->nqp = clamp_cfg(PS_VERBS_CFG(STEPMESH_QP_NUM), 2, 1, PS__VB_MAX_QP);
    van->lag = ps_config_bool_or(PS_VERBS_CFG(STEPMESH_SPLIT_QP_LAG), 0);
    van->rx_depth = clamp_cfg(PS_VERBS_CFG(BYTEPS_RDMA_RX_DEPTH), 2048, 16, 65536);
    van->send_depth = 2 * clamp_cfg(PS_VERBS_CFG(BYTEPS_RDMA_START_DEPTH), 128, 8, 8192);
    van->cq_sends = clamp_cfg(PS_VERBS_CFG(BYTEPS_RDMA_MAX_CONCURR_WR), 8192, PS__VB_CQ_MIN_SENDS,
                              1 << 22);
    van->pool_slots = clamp_cfg(PS_RDMA_CFG(BYTEPS_ADDRESS_POOL_SIZE), 10240, 16, PS_RDMA_SLOT_POOL_MAX);
    van->print_log = ps_config_bool_or(PS_VERBS_CFG(BYTEPS_PRINT_RDMA_LOG), 0);
    van->cm_wakefd = van->loop.wakefd = van->poll_epfd = -1;
    (void)ps_mutex_init(&van->lock);
    (void)ps_cond_init(&van->cond);
    (void)ps_van_handover_init(&van->handover);
    pthread_rwlock_init(&van->peers_lock, NULL);
    pthread_rwlock_init(&van->qpmap_lock, NULL);
    pthread_mutex_init(&van->blocked_lock, NULL);
    pthread_mutex_init(&van->txs_lock, NULL);

    ps_status_t st = PS_OK;
    errno = 0;
    van->channel = rdma_create_event_channel();
    if (van->channel == NULL) {
        ps_error(PS_LOG_RDMA, "ibverbs van cannot start: no RDMA device: "
                 "rdma_create_event_channel: %m");
        st = PS_ERR_UNSUPPORTED;
        goto fail;
    }
    int fl = fcntl(van->channel->fd, F_GETFL);
    if (fl < 0 || fcntl(van->channel->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        ps_error(PS_LOG_RDMA, "cannot make the rdma_cm event channel non-blocking: %m");
        st = PS_ERR_IO;
        goto fail;
    }
    van->cm_wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (van->cm_wakefd < 0) {
        ps_error(PS_LOG_RDMA, "cannot create the CM thread's eventfd: %m");
        st = PS_ERR_NO_RESOURCE;
        goto fail;
    }
    if ((st = ps_rdma_slot_pool_create("ibverbs pull", van->pool_slots, &van->pulls)) != PS_OK ||
        (st = ps_rdma_rdv_create(PS__VB_RDV_ENTRIES, dest_drop, van, &van->dests)) != PS_OK)
        goto fail;
    if ((st = ps__vb_poll_start(van)) != PS_OK || (st = ps__vb_cm_start(van)) != PS_OK)
        goto fail;
    ps_info(PS_LOG_RDMA, "ibverbs van open: %u queue pair%s per peer%s, %u receive buffers per "
            "device, %u send WRs per QP", van->nqp, van->nqp == 1 ? "" : "s",
            van->lag ? " pinned to LAG ports" : "", van->rx_depth, van->send_depth);
    *van_p = &van->base.handle;
    return PS_OK;

fail:
    vb_close(&van->base.handle);
    return st;
}

static void vb_close(ps_van_t *v)
{
    if (v == NULL)
        return;
    ps__vb_van_t *van = ps__vb_of(v);
    /* Queued sends leave while they still move (bounded). */
    ps_status_t polled = ps__vb_poll_stop(van);
    __atomic_store_n(&van->stop, 1, __ATOMIC_RELEASE);
    ps__vb_cm_stop(van);
    if (polled != PS_OK)
        return; /* the completion thread is stuck in the driver: all of it stays */
    /* The threads are gone: everything below is ours alone. */
    while (van->blocked != NULL) {
        ps__vb_conn_t *c = van->blocked;
        van->blocked = c->next_blocked;
        c->next_blocked = NULL;
        c->blocked = 0;
        ps__vb_conn_unref(c);
    }
    ps__vb_cm_destroy_all(van);
    ps__vb_tx_free_all(van);
    drop_peer_state(van, -1);
    if (van->dests != NULL)
        ps_rdma_rdv_destroy(van->dests);
    if (van->pulls != NULL)
        ps_rdma_slot_pool_destroy(van->pulls);
    ps__vb_dev_destroy_all(van);
    if (van->channel != NULL)
        rdma_destroy_event_channel(van->channel);
    if (van->cm_wakefd >= 0)
        close(van->cm_wakefd);
    ps_van_loop_cleanup(&van->loop);
    if (van->poll_epfd >= 0)
        close(van->poll_epfd);
    free(van->peers);
    ps_van_base_fini(&van->base);
    ps_mutex_destroy(&van->lock);
    ps_cond_destroy(&van->cond);
    ps_van_handover_fini(&van->handover);
    pthread_rwlock_destroy(&van->peers_lock);
    pthread_rwlock_destroy(&van->qpmap_lock);
    pthread_mutex_destroy(&van->blocked_lock);
    pthread_mutex_destroy(&van->txs_lock);
    free(van);
}

/* Whether the NIC registers GPU memory: with nvidia-peermem, or through
 * dma-buf, tried once on the first device with a probe buffer where CUDA
 * is in use (asked again while no device is open or CUDA is not in use). */
static int gpu_registrable(ps__vb_van_t *van)
{
    if (ps__vb_peermem_loaded("/sys"))
        return 1;
    int known = __atomic_load_n(&van->gpu_dmabuf, __ATOMIC_ACQUIRE);
    if (known != 0)
        return known == 1;
    if (__atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE) == 0)
        return 0;
    ps__vb_dev_t *dev = van->devs[0];
    char why[200] = "";
    int r = ps__vb_reg_probe_dmabuf(&dev->reg, why, sizeof(why));
    if (r < 0)
        return 0;
    int expected = 0;
    if (__atomic_compare_exchange_n(&van->gpu_dmabuf, &expected, r ? 1 : 2, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        if (r)
            ps_info(PS_LOG_RDMA, "%s registers GPU memory through dma-buf (GPUDirect RDMA)",
                    dev->name);
        else
            ps_info(PS_LOG_RDMA, "%s cannot register GPU memory (dma-buf: %s; nvidia-peermem is "
                    "not loaded): GPU memory is staged through host memory", dev->name, why);
    }
    return r;
}

static ps_status_t vb_query(ps_van_t *v, ps_van_attr_t *attr_p)
{
    ps__vb_van_t *van = ps__vb_of(v);
    if (attr_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps_van_attr_t a;
    memset(&a, 0, sizeof(a));
    a.cap_flags = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_REMOTE_WRITE |
                  PS_CAP_MEM_REGISTRATION | PS_CAP_BUSY_POLL;
    if (van->nqp > 1)
        a.cap_flags |= PS_CAP_MULTI_STREAM;
    if (gpu_registrable(van))
        a.cap_flags |= PS_CAP_DEVICE_MEMORY;
    ps_van_frame_attr(&van->limits, &a);
    a.num_streams = van->nqp;
    *attr_p = a;
    return PS_OK;
}

static ps_status_t vb_set_node_id(ps_van_t *v, int node_id)
{
    ps__vb_van_t *van = ps__vb_of(v);
    int changed;
    ps_status_t st = ps_van_base_set_node_id(&van->base, node_id, &changed);
    if (st != PS_OK || !changed)
        return st;
    /* Connections we opened before the id was known announced none (or
     * another): say who we are, in line with what is queued on them. */
    ps__vb_conn_t *list[256];
    int n = 0;
    ps_mutex_lock(&van->lock);
    for (ps__vb_conn_t *c = van->conns; c != NULL && n < 256; c = c->next) {
        if (c->outgoing && __atomic_load_n(&c->my_id_sent, __ATOMIC_ACQUIRE) != node_id &&
            __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == PS__VB_C_READY) {
            ps__vb_conn_ref(c);
            list[n++] = c;
        }
    }
    ps_mutex_unlock(&van->lock);
    ps_status_t result = PS_OK;
    for (int i = 0; i < n; i++) {
        ps__vb_ctrl_t hello;
        memset(&hello, 0, sizeof(hello));
        hello.type = PS__VB_MSG_HELLO;
        hello.node_id = node_id;
        ps_status_t st = ps__vb_send_ctrl(list[i], &hello);
        if (st == PS_OK)
            __atomic_store_n(&list[i]->my_id_sent, node_id, __ATOMIC_RELEASE);
        else if (result == PS_OK && st != PS_ERR_PEER_GONE)
            result = st;
        ps__vb_conn_unref(list[i]);
    }
    ps_info(PS_LOG_RDMA, "node id is now %d (announced on %d connections)", node_id, n);
    return result;
}

static ps_status_t vb_register_mem(ps_van_t *v, ps_buf_t *buf)
{
    ps__vb_van_t *van = ps__vb_of(v);
    if (buf == NULL)
        return PS_ERR_INVALID_ARG;
    int n = __atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE);
    if (n == 0) {
        /* Devices come with the first bind or connection. */
        ps_warn(PS_LOG_RDMA, "register_mem before any RDMA device is open (bind first)");
        return PS_ERR_BAD_STATE;
    }
    for (int i = 0; i < n; i++) {
        ps_status_t st = ps_rdma_mr_cache_pin(van->devs[i]->mrc, buf);
        if (st != PS_OK) {
            for (int j = 0; j < i; j++)
                ps_rdma_mr_cache_unpin(van->devs[j]->mrc, buf);
            return st;
        }
    }
    return PS_OK;
}

static ps_status_t vb_deregister_mem(ps_van_t *v, ps_buf_t *buf)
{
    ps__vb_van_t *van = ps__vb_of(v);
    if (buf == NULL)
        return PS_ERR_INVALID_ARG;
    ps_status_t result = PS_ERR_NOT_FOUND;
    int n = __atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        if (ps_rdma_mr_cache_unpin(van->devs[i]->mrc, buf) == PS_OK)
            result = PS_OK;
    }
    return result;
}

static const ps_van_ops_t vb_ops = {
    .size = sizeof(ps_van_ops_t),
    .open = vb_open,
    .close = vb_close,
    .query = vb_query,
    .bind = ps__vb_cm_bind,
    .connect = ps__vb_cm_connect,
    .disconnect = ps__vb_cm_disconnect,
    .set_node_id = vb_set_node_id,
    .send = ps__vb_send,
    .register_mem = vb_register_mem,
    .deregister_mem = vb_deregister_mem,
    .stats = ps_van_base_stats,
    .progress = ps_van_loop_progress,
};

const ps_van_component_t ps__verbs_component = {
    .name = "ibverbs",
    .aliases = "1",
    .ops = &vb_ops,
    .unavailable = ps__vb_unavailable,
};

PS_VAN_REGISTER(ps__verbs_component)

static const ps_config_entry_t ibverbs_vars[] = {
#define PS_CONFIG_VAR PS_CONFIG_ENTRY
#include "ps/rdma/verbs/verbs_config_vars.h"
#undef PS_CONFIG_VAR
};
PS_CONFIG_TABLE(ps__verbs_config, "ibverbs", ibverbs_vars)

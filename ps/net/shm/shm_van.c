/*
 * The shared-memory van: lifecycle, the peer table, the progress thread
 * and the ops table registered as component "shm".
 *
 * The progress loop (ps/net/van/progress_loop.h) polls every channel's
 * in ring (a shared load each) and flushes what senders could not write.
 * When nothing moves it keeps polling for a while (without busy polling, a
 * short adaptive spin) and then sleeps in epoll: it tells every peer that
 * it sleeps (shm_ring.h), and a peer that writes then sends one byte on the
 * channel's socket. So an idle van uses no CPU, a busy one makes no system
 * call per message, and sockets (new channels, segments announced, a
 * peer's death) are watched in both cases. With busy polling a waiting
 * thread may drive the loop itself (the progress op), and an answer is
 * handled on the thread that waits for it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/codec/frame.h"
#include "ps/net/shm/shm_internal.h"
#include "ps/net/shm/shm_seg.h"
#include "ps/net/shm/shm_van.h"

/* While polling, look at the sockets every this many rounds. */
#define PS__SHM_EPOLL_EVERY 64
/* While polling without traffic, yield the CPU every this many rounds (on
 * two cores the thread that will answer may need this one; measured:
 * yielding every round or every 64 is slower, never yielding is far
 * slower). */
#define PS__SHM_YIELD_EVERY 8
#define PS__SHM_MAX_EVENTS 64
/* Records handled per channel per round (fairness between channels). */
#define PS__SHM_RX_BUDGET 64
#define PS__SHM_DEFAULT_CONNECT_MS 10000

void ps__shm_wake(ps__shm_van_t *van)
{
    ps_van_loop_wake(&van->loop);
}

/* Sends from the loop's own thread (or a waiter driving it) flush and
 * acknowledge inline instead of kicking the thread. */
int ps__shm_on_progress(const ps__shm_van_t *van)
{
    return ps_van_loop_is_running_here(&van->loop);
}

/* ---- peer table ---- */

ps__shm_chan_t *ps__shm_peer_send_chan(ps__shm_van_t *van, int id)
{
    ps__shm_chan_t *ch = NULL;
    pthread_rwlock_rdlock(&van->sock.peers.lock);
    ps__shm_peer_t *p = ps_van_peer_table_get(&van->sock.peers, id, 0);
    if (p != NULL) {
        /* One fixed choice per peer keeps its messages in order. */
        ch = p->out != NULL ? p->out : (p->num_in > 0 ? p->in[0] : NULL);
        if (ch != NULL) {
            __atomic_add_fetch(&ch->refs, 1, __ATOMIC_RELAXED);
        }
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    return ch;
}

ps_status_t ps__shm_peer_add_in(ps__shm_van_t *van, ps__shm_chan_t *ch, int id)
{
    pthread_rwlock_wrlock(&van->sock.peers.lock);
    ps__shm_peer_t *p = ps_van_peer_table_get(&van->sock.peers, id, 1);
    if (p == NULL) {
        pthread_rwlock_unlock(&van->sock.peers.lock);
        return PS_ERR_NO_MEMORY;
    }
    if (p->num_in < (int)(sizeof(p->in) / sizeof(p->in[0]))) {
        p->in[p->num_in++] = ch;
    }
    ps_van_peer_connected(&p->hdr);
    ch->peer_id = id;
    pthread_rwlock_unlock(&van->sock.peers.lock);
    return PS_OK;
}

void ps__shm_peer_remove_chan(ps__shm_van_t *van, ps__shm_chan_t *ch, ps_status_t why)
{
    if (ch->peer_id == PS_NODE_EMPTY) {
        return;
    }
    pthread_rwlock_wrlock(&van->sock.peers.lock);
    ps__shm_peer_t *p = ps_van_peer_table_get(&van->sock.peers, ch->peer_id, 0);
    if (p != NULL) {
        if (p->out == ch) {
            p->out = NULL;
        }
        for (int i = 0; i < p->num_in; ++i) {
            if (p->in[i] == ch) {
                memmove(&p->in[i], &p->in[i + 1], (size_t)(p->num_in - i - 1) * sizeof(p->in[0]));
                p->num_in--;
                break;
            }
        }
        ps_van_peer_went(&p->hdr, why);
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
}

int ps__shm_has_peer(ps_van_t *v, int id)
{
    ps__shm_chan_t *ch = ps__shm_peer_send_chan((ps__shm_van_t *)v, id);
    if (ch == NULL) {
        return 0;
    }
    ps__shm_chan_unref(ch);
    return 1;
}

ps_status_t ps__shm_list_chan(ps__shm_van_t *van, ps__shm_chan_t *ch)
{
    if (van->nchans == van->chans_cap) {
        size_t cap = van->chans_cap ? van->chans_cap * 2 : 16;
        ps__shm_chan_t **chans = realloc(van->chans, cap * sizeof(*chans));
        if (chans == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        van->chans = chans;
        van->chans_cap = cap;
    }
    van->chans[van->nchans++] = ch;
    ch->listed = 1;
    return PS_OK;
}

/* Drops dead channels from the polled list (the list's reference goes). */
static void prune_chans(ps__shm_van_t *van)
{
    size_t w = 0;
    for (size_t i = 0; i < van->nchans; ++i) {
        ps__shm_chan_t *ch = van->chans[i];
        if (ch->state == PS__SHM_CH_DEAD) {
            ch->listed = 0;
            ps__shm_chan_unref(ch);
        } else {
            van->chans[w++] = ch;
        }
    }
    van->nchans = w;
}

/* ---- progress thread ---- */

/* One round over every channel: receive, then flush. Returns the number of
 * things that moved. */
static int poll_chans(ps__shm_van_t *van, unsigned budget)
{
    int work = 0;
    /* The kicks only keep the thread from sleeping; each channel says
     * itself whether it has something to flush. */
    if (__atomic_load_n(&van->ack_kick, __ATOMIC_RELAXED)) {
        __atomic_store_n(&van->ack_kick, 0, __ATOMIC_SEQ_CST);
    }
    if (__atomic_load_n(&van->tx_kick, __ATOMIC_RELAXED)) {
        __atomic_store_n(&van->tx_kick, 0, __ATOMIC_SEQ_CST);
    }
    int dead = 0;
    for (size_t i = 0; i < van->nchans; ++i) {
        ps__shm_chan_t *ch = van->chans[i];
        if (ch->state == PS__SHM_CH_DEAD) {
            dead = 1;
            continue;
        }
        if (ch->rx_ready) {
            work += ps__shm_rx_poll(ch, (int)budget);
        }
        if (ch->state == PS__SHM_CH_DEAD) {
            dead = 1;
            continue;
        }
        /* Unlocked peeks: a sender that queues or an ack that arrives
         * after them raises a kick, seen next round. */
        if (__atomic_load_n(&ch->nacks, __ATOMIC_RELAXED) != 0 ||
            __atomic_load_n(&ch->want_flush, __ATOMIC_RELAXED) != 0) {
            work += ps__shm_flush(ch);
        }
    }
    if (dead) {
        prune_chans(van);
    }
    return work;
}

/* Tells every peer we are about to sleep. 0 if something arrived meanwhile
 * (nothing is then left marked). */
static int prepare_sleep(ps__shm_van_t *van)
{
    for (size_t i = 0; i < van->nchans; ++i) {
        ps__shm_chan_t *ch = van->chans[i];
        if (ch->state == PS__SHM_CH_DEAD || !ch->rx_ready) {
            continue;
        }
        if (ps__shm_ring_sleep(&ch->rx)) {
            for (size_t j = 0; j < i; ++j) {
                if (van->chans[j]->rx_ready) {
                    ps__shm_ring_awake(&van->chans[j]->rx);
                }
            }
            return 0;
        }
    }
    if (__atomic_load_n(&van->ack_kick, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&van->tx_kick, __ATOMIC_ACQUIRE)) {
        for (size_t i = 0; i < van->nchans; ++i) {
            if (van->chans[i]->rx_ready && van->chans[i]->state != PS__SHM_CH_DEAD) {
                ps__shm_ring_awake(&van->chans[i]->rx);
            }
        }
        return 0;
    }
    return 1;
}

static void after_sleep(ps__shm_van_t *van)
{
    for (size_t i = 0; i < van->nchans; ++i) {
        ps__shm_chan_t *ch = van->chans[i];
        if (ch->rx_ready && ch->state != PS__SHM_CH_DEAD) {
            ps__shm_ring_awake(&ch->rx);
        }
    }
}

static void handle_events(ps__shm_van_t *van, struct epoll_event *evs, int n)
{
    for (int i = 0; i < n; ++i) {
        ps__shm_handle_t *h = evs[i].data.ptr;
        switch (h->kind) {
        case PS__SHM_H_WAKE:
            ps_van_loop_clear_wake(&van->loop); /* the work: shm_handover */
            break;
        case PS__SHM_H_LISTEN:
            ps__shm_accept_all(van);
            break;
        case PS__SHM_H_CHAN:
            ps__shm_on_socket((ps__shm_chan_t *)h, evs[i].events);
            break;
        }
    }
}

/* What the sockets have within timeout_ns (0: now); returns how many. */
static int watch_sockets(ps__shm_van_t *van, int64_t timeout_ns)
{
    struct epoll_event evs[PS__SHM_MAX_EVENTS];
    int n = ps_van_epoll_wait(van->sock.epfd, evs, PS__SHM_MAX_EVENTS, timeout_ns, PS_LOG_SHM);
    handle_events(van, evs, n);
    return n;
}

/* A round: the channels (up to `budget` records each), and every
 * PS__SHM_EPOLL_EVERY rounds the sockets and timers. */
static int shm_poll(void *arg, unsigned budget)
{
    ps__shm_van_t *van = arg;
    int work = poll_chans(van, budget < PS__SHM_RX_BUDGET ? budget : PS__SHM_RX_BUDGET);
    if (++van->rounds % PS__SHM_EPOLL_EVERY == 0) {
        work += watch_sockets(van, 0);
        (void)ps__shm_run_timers(van);
    }
    return work;
}

static int shm_arm(void *arg, int64_t *timeout_ns_p)
{
    ps__shm_van_t *van = arg;
    int ms = ps__shm_run_timers(van);
    if (!prepare_sleep(van)) {
        return PS_VAN_LOOP_BUSY;
    }
    *timeout_ns_p = ms < 0 ? -1 : (int64_t)ms * (int64_t)PS_NSEC_PER_MSEC;
    return PS_VAN_LOOP_SLEEP;
}

/* The sleep: epoll on the sockets and the wake eventfd. Returns 0: the
 * rings still want a poll. */
static int shm_wait(void *arg, int64_t timeout_ns)
{
    ps__shm_van_t *van = arg;
    (void)watch_sockets(van, timeout_ns);
    after_sleep(van);
    return 0;
}

/* Back from a park: what woke it, and the sockets. */
static void shm_woke(void *arg)
{
    (void)watch_sockets(arg, 0);
}

static void shm_handover(void *arg)
{
    ps__shm_take_pending(arg);
}

static int64_t shm_outstanding(void *arg, uint64_t *moved_p);

static const ps_van_loop_ops_t shm_loop_ops = {
    .size = sizeof(ps_van_loop_ops_t),
    .poll = shm_poll,
    .arm = shm_arm,
    .wait = shm_wait,
    .woke = shm_woke,
    .handover = shm_handover,
    .outstanding = shm_outstanding,
};

/* ---- ops ---- */

static void sv_close(ps_van_t *v);
static const ps_van_ops_t sv_ops;

void ps__shm_test_options(ps_van_t *v, int allow_cma, int allow_seg, int allow_stage)
{
    ps__shm_van_t *van = ps__shm_of(v);
    van->allow_cma = allow_cma;
    van->allow_seg = allow_seg;
    van->allow_stage = allow_stage;
}

static ps_status_t sv_open(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                           ps_van_t **van_p)
{
    if (params == NULL || van_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps__shm_van_t *van = calloc(1, sizeof(*van));
    if (van == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps_van_base_init(&van->base, "shm", &sv_ops, PS_LOG_SHM, params, cb);
    van->base.handle.loop = &van->loop;
    van->base.params.connect_timeout_ms =
        ps_van_connect_timeout_ms(van->base.params.connect_timeout_ms, PS__SHM_DEFAULT_CONNECT_MS);
    van->max_meta = params->max_meta_bytes != 0 && params->max_meta_bytes < UINT32_MAX
                        ? (uint32_t)params->max_meta_bytes
                        : PS_FRAME_DEFAULT_MAX_META;
    van->max_message =
        params->max_message_bytes != 0 ? params->max_message_bytes : PS_FRAME_DEFAULT_MAX_MESSAGE;
    ps__shm_job_id(van->job, sizeof(van->job));
    van->ring_bytes = PS__SHM_RING_BYTES;
    van->allow_cma = 1;
    van->allow_seg = 1;
    van->allow_stage = 1;
    /* What the layers above stage (device values) is then made in shared
     * segments this van sends by reference. */
    ps__shm_provide_blocks();
    ps_van_random_bytes(van->cookie, sizeof(van->cookie));
    van->wake_handle.kind = PS__SHM_H_WAKE;
    van->listen_handle.kind = PS__SHM_H_LISTEN;
    const ps_van_loop_params_t lp = {
        .thread_name = "ps-shm-progress",
        .log = PS_LOG_SHM,
        .busy_poll = params->busy_poll,
        .idle_spin_ns = PS_VAN_LOOP_IDLE_SPIN_NS,
        .adaptive_idle_spin = 1,
        .yield_every = PS__SHM_YIELD_EVERY,
        .budget = PS__SHM_RX_BUDGET,
    };
    ps_status_t st = ps_van_loop_init(&van->loop, &lp, &shm_loop_ops, van);
    if (st != PS_OK) {
        free(van);
        return st;
    }
    ps_van_sock_init(&van->sock, sizeof(ps__shm_peer_t), PS_LOG_SHM);
    (void)ps_van_handover_init(&van->handover);
    pthread_mutex_init(&van->hints_lock, NULL);

    st = ps_van_sock_open(&van->sock, PS__SHM_POOL_CACHE, &van->loop, &van->wake_handle);
    if (st == PS_OK) {
        st = ps__shm_stage_create(PS__SHM_STAGE_OUT, PS__SHM_STAGE_CACHE, &van->stage);
    }
    if (st != PS_OK) {
        sv_close(&van->base.handle);
        return st;
    }
    st = ps_van_loop_start(&van->loop, NULL, 0);
    if (st != PS_OK) {
        sv_close(&van->base.handle);
        return st;
    }
    ps_debug(PS_LOG_SHM, "opened (job '%s', %s)", van->job,
             van->base.params.busy_poll ? "busy-polling" : "sleeping when idle");
    *van_p = &van->base.handle;
    return PS_OK;
}

/* Whether queued sends or outstanding tokens are still waiting for a live
 * peer (for close's drain). */
static int64_t shm_outstanding(void *arg, uint64_t *moved_p)
{
    ps__shm_van_t *van = arg;
    int busy = 0;
    uint64_t moved = 0;
    pthread_rwlock_rdlock(&van->sock.peers.lock);
    for (int id = 0; id < van->sock.peers.slots.cap; ++id) {
        ps__shm_peer_t *p = van->sock.peers.slots.slot[id];
        if (p == NULL) {
            continue;
        }
        ps__shm_chan_t *list[5] = {p->out, NULL, NULL, NULL, NULL};
        for (int i = 0; i < p->num_in; ++i) {
            list[1 + i] = p->in[i];
        }
        for (int i = 0; i < 5; ++i) {
            ps__shm_chan_t *ch = list[i];
            if (ch == NULL) {
                continue;
            }
            pthread_mutex_lock(&ch->tx_lock);
            if (ch->state != PS__SHM_CH_DEAD && (ch->sq_head != NULL || ch->tok_live != 0)) {
                busy = 1;
            }
            moved += ch->tx.pos + ch->tok_live;
            pthread_mutex_unlock(&ch->tx_lock);
        }
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    *moved_p = moved;
    return busy;
}

/* Drains (bounded), stops the progress thread and closes every channel;
 * the van stays allocated: a send from another thread now fails cleanly
 * (PS_ERR_PEER_GONE / PS_ERR_UNREACHABLE). Idempotent. */
void ps__shm_stop(ps_van_t *v)
{
    ps__shm_van_t *van = ps__shm_of(v);
    if (__atomic_load_n(&van->loop.started, __ATOMIC_ACQUIRE) &&
        !ps_van_loop_abandoned(&van->loop)) {
        /* How the values travelled (see ps__shm_test_counters): the first
         * thing to look at when a figure is off. */
        uint64_t k[PS__SHM_TEST_KINDS];
        ps__shm_test_counters(v, k);
        ps_info(PS_LOG_SHM,
                "segments sent: %llu staged, %llu inline, %llu read by the peer, %llu from "
                "shared buffers, %llu streamed, %llu placed in the peer's buffer",
                (unsigned long long)k[0], (unsigned long long)k[1], (unsigned long long)k[2],
                (unsigned long long)k[3], (unsigned long long)k[4], (unsigned long long)k[5]);
    }
    /* Queued sends leave, and peers finish reading what they read from
     * our memory, while that makes progress (bounded). A thread stuck in
     * the van keeps its channels. */
    if (ps_van_loop_stop(&van->loop) != PS_OK) {
        return;
    }
    ps__shm_close_all(van);
    ps__shm_hints_clear(van);
}

static void sv_close(ps_van_t *v)
{
    if (v == NULL) {
        return;
    }
    ps__shm_van_t *van = ps__shm_of(v);
    ps__shm_stop(v);
    if (ps_van_loop_abandoned(&van->loop)) {
        return; /* its thread may still touch all of it */
    }
    free(van->chans);
    ps_van_sock_fini(&van->sock);
    ps_van_base_fini(&van->base);
    ps__shm_stage_release(van->stage);
    ps_van_handover_fini(&van->handover);
    pthread_mutex_destroy(&van->hints_lock);
    ps_van_loop_cleanup(&van->loop);
    free(van);
}

static ps_status_t sv_query(ps_van_t *v, ps_van_attr_t *attr_p)
{
    ps__shm_van_t *van = ps__shm_of(v);
    if (attr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_van_attr_t a;
    memset(&a, 0, sizeof(a));
    a.cap_flags = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_SAME_HOST_ONLY |
                  PS_CAP_BUSY_POLL;
    a.max_message_bytes = van->max_message;
    a.max_data_segments = PS_MSG_MAX_DATA;
    a.num_streams = 1;
    *attr_p = a;
    return PS_OK;
}

void ps__shm_test_counters(ps_van_t *v, uint64_t counts[PS__SHM_TEST_KINDS])
{
    for (int i = 0; i < PS__SHM_TEST_KINDS; ++i) {
        counts[i] = __atomic_load_n(&ps__shm_of(v)->sent_by_kind[i], __ATOMIC_RELAXED);
    }
}

/* The channel a new node id is announced on: ours. */
static int pick_announced(void *peer, void **out, int max)
{
    ps__shm_peer_t *p = peer;
    if (p->out == NULL || max < 1) {
        return 0;
    }
    __atomic_add_fetch(&p->out->refs, 1, __ATOMIC_RELAXED);
    out[0] = p->out;
    return 1;
}

static ps_status_t sv_set_node_id(ps_van_t *v, int node_id)
{
    ps__shm_van_t *van = ps__shm_of(v);
    int changed;
    ps_status_t st = ps_van_base_set_node_id(&van->base, node_id, &changed);
    if (st != PS_OK || !changed) {
        return st;
    }
    /* Re-announce on every channel we opened, in order with the messages
     * already written to it. */
    void **list;
    int n = ps_van_peer_table_collect(&van->sock.peers, pick_announced, 1, &list);
    ps_status_t result = PS_OK;
    for (int i = 0; i < n; ++i) {
        ps_status_t st = ps__shm_send_id(list[i], node_id);
        if (st != PS_OK && st != PS_ERR_PEER_GONE && result == PS_OK) {
            result = st;
        }
        ps__shm_chan_unref(list[i]);
    }
    free(list);
    ps_info(PS_LOG_SHM, "node id is now %d (announced on %d channels)", node_id, n);
    return result;
}

static const ps_van_ops_t sv_ops = {
    .size = sizeof(ps_van_ops_t),
    .open = sv_open,
    .close = sv_close,
    .query = sv_query,
    .bind = ps__shm_bind,
    .connect = ps__shm_connect,
    .disconnect = ps__shm_disconnect,
    .set_node_id = sv_set_node_id,
    .send = ps__shm_send,
    .register_mem = ps_van_no_register_mem,
    .deregister_mem = ps_van_no_deregister_mem,
    .stats = ps_van_base_stats,
    .progress = ps_van_loop_progress,
    /* Every peer of this van shares this host (PS_CAP_SAME_HOST_ONLY). */
    .same_host = ps__shm_has_peer,
};

/* Sealed memfds and SCM_RIGHTS are all the van needs from the kernel. */
static int sv_unavailable(char *why, size_t cap)
{
    int fd = memfd_create("ps-shm-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        snprintf(why, cap, "memfd_create: %s", strerror(errno));
        return 1;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        snprintf(why, cap, "sealing a memfd: %s", strerror(errno));
        close(fd);
        return 1;
    }
    close(fd);
    return 0;
}

const ps_van_component_t ps__shm_component = {
    .name = "shm",
    .aliases = NULL,
    .ops = &sv_ops,
    .unavailable = sv_unavailable,
};

PS_VAN_REGISTER(ps__shm_component)

const ps_van_ops_t *ps__shm_ops(void)
{
    return &sv_ops;
}

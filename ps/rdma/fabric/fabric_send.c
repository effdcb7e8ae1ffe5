/*
 * The send path of the libfabric van.
 *
 * send() builds the whole message first (header, frame, meta, inline data,
 * iovecs, registrations, an RMA write for a pull response), then, under the
 * peer's lock, takes the next sequence number and posts it if nothing is
 * queued for that peer. What the provider refuses for now (-FI_EAGAIN)
 * stays at the head of the peer's queue, in order, and the progress thread
 * posts it later: send() never blocks. A send object lives until its last
 * posted operation completes (a reference per operation plus the poster's),
 * and it keeps references on the data slices until then.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/base/time.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/lane.h"
#include "ps/net/codec/meta_fast.h"
#include "ps/rdma/fabric/fabric_internal.h"

/* ---- pending pulls (worker) ---- */

void ps__fab_pull_free(ps__fab_van_t *van, ps__fab_pull_t *pull)
{
    if (pull == NULL)
        return;
    if (pull->mr != NULL)
        ps_rdma_mr_cache_put(van->mrc, pull->mr);
    ps_slice_unref(&pull->dest);
    free(pull);
}

void ps__fab_dest_drop(void *arg, const ps_rdma_rdv_key_t *key, void *value)
{
    (void)arg;
    (void)key;
    free(value);
}

/* A pull request: when the postoffice already knows where the response's
 * values will land, register that buffer and tell the server, so that it
 * can write them there. Best effort: without it the values come as a
 * tagged message. */
static void attach_pull(ps__fab_van_t *van, int recver, ps_meta_t *m)
{
    if (m->van_data_len != 0 || van->base.cb.recv_buffer == NULL || van->pulls == NULL)
        return;
    ps_meta_t answer = *m;
    answer.request = false;
    answer.sender = recver;
    answer.recver = ps__fab_my_id(van);
    answer.van_data_len = 0;
    ps_slice_t dest = PS_SLICE_EMPTY_INIT;
    if (van->base.cb.recv_buffer(van->base.cb.arg, &answer, 1, m->val_len, &dest) != PS_OK)
        return;
    if (dest.buf == NULL || dest.len < m->val_len || !ps_van_moves_mem(van->device_kinds, &dest)) {
        ps_slice_unref(&dest);
        return;
    }
    ps__fab_pull_t *pull = calloc(1, sizeof(*pull));
    if (pull == NULL) {
        ps_slice_unref(&dest);
        return;
    }
    pull->peer = recver;
    pull->app_id = m->app_id;
    pull->customer_id = m->customer_id;
    pull->timestamp = m->timestamp;
    pull->dest = dest;
    if (ps_rdma_mr_cache_get(van->mrc, &dest, &pull->mr) != PS_OK) {
        pull->mr = NULL;
        ps__fab_pull_free(van, pull);
        return;
    }
    /* Everything the descriptor needs is read before the pull is published:
     * from then on the response may arrive, and free it, at any time. */
    ps__fab_rdv_desc_t d;
    d.magic = PS__FAB_RDV_MAGIC;
    char *p = ps_slice_ptr(&dest);
    d.addr = van->mr_virt ? (uint64_t)(uintptr_t)p : (uint64_t)(p - (char *)pull->mr->addr);
    d.key = ps__fab_mr_key(pull->mr->handle);
    d.len = dest.len;
    if (ps_rdma_slot_alloc(van->pulls, pull, &d.slot) != PS_OK) {
        ps__fab_pull_free(van, pull);
        return;
    }
    memcpy(m->van_data, &d, sizeof(d));
    m->van_data_len = sizeof(d);
}

/* Undoes attach_pull when the request never left. */
static void detach_pull(ps__fab_van_t *van, const ps_meta_t *m)
{
    ps__fab_rdv_desc_t d;
    if (van->pulls == NULL || m->van_data_len != sizeof(d))
        return;
    memcpy(&d, m->van_data, sizeof(d));
    if (d.magic == PS__FAB_RDV_MAGIC)
        ps__fab_pull_free(van, ps_rdma_slot_release(van->pulls, d.slot));
}

/* ---- send objects ---- */

/* A zeroed send object: a kept one, else a new one. Everything before
 * hm_inline is cleared; hm_inline is written before it is read. */
static ps__fab_tx_t *tx_get(ps__fab_van_t *van)
{
    ps__fab_tx_t *tx = NULL;
    pthread_mutex_lock(&van->tx_cache_lock);
    if (van->tx_cache != NULL) {
        tx = van->tx_cache;
        van->tx_cache = tx->next;
        van->tx_cached--;
    }
    pthread_mutex_unlock(&van->tx_cache_lock);
    if (tx == NULL)
        return calloc(1, sizeof(*tx));
    memset(tx, 0, offsetof(ps__fab_tx_t, hm_inline));
    return tx;
}

static void tx_put(ps__fab_van_t *van, ps__fab_tx_t *tx)
{
    pthread_mutex_lock(&van->tx_cache_lock);
    if (van->tx_cached < PS__FAB_OBJ_CACHE) {
        tx->next = van->tx_cache;
        van->tx_cache = tx;
        van->tx_cached++;
        tx = NULL;
    }
    pthread_mutex_unlock(&van->tx_cache_lock);
    free(tx);
}

void ps__fab_tx_cache_free(ps__fab_van_t *van)
{
    while (van->tx_cache != NULL) {
        ps__fab_tx_t *tx = van->tx_cache;
        van->tx_cache = tx->next;
        free(tx);
    }
    van->tx_cached = 0;
}

static void tx_release_resources(ps__fab_van_t *van, ps__fab_tx_t *tx)
{
    for (int i = 0; i < PS_MSG_MAX_DATA; i++) {
        if (tx->mr[i] != NULL)
            ps_rdma_mr_cache_put(van->mrc, tx->mr[i]);
        tx->mr[i] = NULL;
    }
    for (uint32_t i = 0; i < tx->num_data; i++)
        ps_slice_unref(&tx->data[i]);
    ps_slice_unref(&tx->hm_slice);
    free(tx->hm_heap);
    tx_put(van, tx);
}

/* Takes tx off its peer's in-flight list (peer lock held). */
static void inflight_unlink(ps__fab_peer_t *peer, ps__fab_tx_t *tx)
{
    if (!tx->in_flight)
        return;
    if (tx->fl_prev)
        tx->fl_prev->fl_next = tx->fl_next;
    else
        peer->inflight = tx->fl_next;
    if (tx->fl_next)
        tx->fl_next->fl_prev = tx->fl_prev;
    tx->fl_prev = tx->fl_next = NULL;
    tx->in_flight = 0;
}

static void inflight_link(ps__fab_peer_t *peer, ps__fab_tx_t *tx)
{
    tx->fl_prev = NULL;
    tx->fl_next = peer->inflight;
    if (peer->inflight)
        peer->inflight->fl_prev = tx;
    peer->inflight = tx;
    tx->in_flight = 1;
}

/* Drops a reference; the last frees (peer lock held or not, as said). */
static void tx_unref(ps__fab_van_t *van, ps__fab_tx_t *tx, int peer_locked)
{
    if (__atomic_sub_fetch(&tx->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    ps__fab_peer_t *peer = tx->peer;
    if (!peer_locked)
        pthread_mutex_lock(&peer->lock);
    inflight_unlink(peer, tx);
    if (!peer_locked)
        pthread_mutex_unlock(&peer->lock);
    tx_release_resources(van, tx);
}

void ps__fab_tx_op_done(ps__fab_van_t *van, ps__fab_tx_t *tx, int ok)
{
    __atomic_sub_fetch(&van->ops_in_flight, 1, __ATOMIC_RELAXED);
    if (ok) /* progress context: the round's clock */
        __atomic_store_n(&tx->peer->last_progress_ns, ps__fab_round_now(van), __ATOMIC_RELAXED);
    tx_unref(van, tx, 0);
}

/* An op of tx completed with an error. The provider may report such an op
 * again (rxm of libfabric 1.17 reports a receive it cancelled when a peer's
 * connection broke twice; a send is given the same care), so tx stays ours
 * to keep but not to reuse: the op's reference is not dropped, which keeps tx, and what it
 * points at, on its peer's in-flight list until close frees it after the
 * endpoint (nothing is reported after that). A repeated report finds the
 * op's bit set and is ignored. No send is cancelled while the endpoint is
 * open, so FI_ECANCELED too means the provider gave up on the peer. */
void ps__fab_tx_op_failed(ps__fab_van_t *van, ps__fab_op_t *op, const char *detail)
{
    ps__fab_tx_t *tx = op->owner;
    unsigned bit = 1u << (unsigned)(op - tx->op);
    pthread_mutex_lock(&tx->peer->lock);
    int again = (tx->failed_ops & bit) != 0;
    tx->failed_ops |= bit;
    pthread_mutex_unlock(&tx->peer->lock);
    if (again) {
        ps_debug(PS_LOG_FABRIC, "a failed send to node %d reported again", tx->peer->id);
        return;
    }
    __atomic_sub_fetch(&van->ops_in_flight, 1, __ATOMIC_RELAXED);
    ps__fab_peer_fail(van, tx->peer, PS_ERR_LINK_FAILED, detail);
}

/* A queued send that will never be posted further: the poster's reference
 * goes; what was posted finishes (or close frees it). */
void ps__fab_tx_free_list(ps__fab_van_t *van, ps__fab_tx_t *list)
{
    while (list != NULL) {
        ps__fab_tx_t *next = list->next;
        list->next = NULL;
        list->stage = PS__FAB_ST_DONE;
        tx_unref(van, list, 0);
        list = next;
    }
}

/* Close: the endpoint is gone, nothing will complete. */
void ps__fab_tx_free_all(ps__fab_van_t *van, ps__fab_peer_t *peer)
{
    ps__fab_tx_t *q = peer->q_head;
    peer->q_head = peer->q_tail = NULL;
    for (ps__fab_tx_t *t = q; t != NULL; t = t->next)
        inflight_unlink(peer, t);
    while (q != NULL) {
        ps__fab_tx_t *next = q->next;
        tx_release_resources(van, q);
        q = next;
    }
    while (peer->inflight != NULL) {
        ps__fab_tx_t *t = peer->inflight;
        inflight_unlink(peer, t);
        tx_release_resources(van, t);
    }
}

/* ---- posting ---- */

enum { POST_DONE, POST_AGAIN, POST_ERROR, POST_GONE };

/* Whether a same-host peer's process is gone, asked before posting to it
 * (peer lock held; `now`: the time, or 0 to read it).
 *
 * Why at all: shm (libfabric 1.17) takes the peer region's spinlock in
 * every send, and a process that died holding it (killed inside its own
 * progress) never releases it: a post to it would spin forever. So nothing
 * is posted to a peer whose process has exited.
 *
 * Why not before every post: the check is a poll() on the pidfd, ~0.5 us,
 * twice per small round trip, a quarter of shm's whole round trip. So a
 * peer heard from (a message came, a send to it completed) or found alive
 * by this check less than PS__FAB_PID_CHECK_NS (1 ms) ago is taken as
 * alive without asking; `force` (a post that the provider refused for now,
 * whose peer may have stopped taking messages) always asks. The trade: a
 * peer killed in the last millisecond of a busy exchange may still get a
 * post. That is the kind of exposure the check already had: a killed
 * process's pidfd turns readable only once its exit is complete, its
 * memory torn down first (0.1-4 ms measured here from SIGKILL, for 16-200
 * MB processes on a loaded 2-vCPU machine), and what such a post cannot
 * undo, close() bounds: it gives up on the progress thread after
 * PS__FAB_STOP_MS rather than hang. A peer quiet for a millisecond, as a
 * killed one soon is, is asked about before every post, as before. */
static int peer_dead(ps__fab_peer_t *peer, uint64_t now, int force)
{
    if (!peer->watch_pid)
        return 0;
    if (now == 0)
        now = ps_time_now_ns();
    if (!force) {
        uint64_t seen = __atomic_load_n(&peer->last_progress_ns, __ATOMIC_RELAXED);
        if (peer->alive_ns > seen)
            seen = peer->alive_ns;
        /* Signed: another thread may have stored a time later than `now`. */
        if ((int64_t)(now - seen) < (int64_t)PS__FAB_PID_CHECK_NS)
            return 0;
    }
    if (ps__fab_peer_process_gone(peer))
        return 1;
    peer->alive_ns = now;
    return 0;
}

/* Before a post (peer lock held): 1 when the peer is gone (nothing to
 * post), else 0 and the post may go. A peer in this process is asked every
 * time, and the list of open endpoints is held (*held_p) until
 * post_end(): its van cannot close the endpoint under the post
 * (fabric_local.c). Any other peer: peer_dead(). */
static int post_begin(ps__fab_peer_t *peer, uint64_t now, int force, int *held_p)
{
    *held_p = 0;
    size_t len = __atomic_load_n(&peer->local_addr_len, __ATOMIC_ACQUIRE);
    if (len == 0)
        return peer_dead(peer, now, force);
    if (!ps__fab_local_hold(peer->local_addr, len))
        return 1;
    *held_p = 1;
    return 0;
}

static void post_end(int held)
{
    if (held)
        ps__fab_local_release();
}

/* Posts tx's stages from tx->stage on (peer lock held). On POST_DONE the
 * poster's reference is still held: the caller drops it. The caller has
 * asked peer_dead() first. */
static int tx_post(ps__fab_van_t *van, ps__fab_tx_t *tx)
{
    ps__fab_peer_t *peer = tx->peer;
    fi_addr_t dest = peer->addr;
    for (; tx->stage >= 0 && tx->stage < PS__FAB_ST_DONE; tx->stage++) {
        int stage = tx->stage;
        int completes = 1;
        switch (stage) {
        case PS__FAB_ST_RMA:
            if (tx->rma_seg < 0)
                continue;
            break;
        case PS__FAB_ST_META:
            /* An inject completes nothing: no reference for it. */
            completes = !(tx->hm_len <= van->inject_size && !van->mr_local);
            break;
        case PS__FAB_ST_EXT:
            if (!(tx->flags & PS__FAB_F_EXT))
                continue;
            break;
        case PS__FAB_ST_DATA:
            if (tx->niov <= 0)
                continue;
            break;
        }
        ps__fab_op_t *op = &tx->op[stage];
        ssize_t ret = 0;
        /* Taken before the post: the completion may come at once. */
        if (completes)
            __atomic_add_fetch(&tx->refs, 1, __ATOMIC_ACQ_REL);
        ps__fab_ep_lock(van);
        switch (stage) {
        case PS__FAB_ST_RMA: {
            const ps_slice_t *s = &tx->data[tx->rma_seg];
            ret = fi_write(van->ep, ps_slice_ptr(s), s->len, tx->rma_desc, dest, tx->rma_addr,
                           tx->rma_key, op);
            break;
        }
        case PS__FAB_ST_META:
            if (!completes)
                ret = fi_inject(van->ep, tx->hm, tx->hm_len, dest);
            else
                ret = fi_send(van->ep, tx->hm, tx->hm_len, tx->hm_desc, dest, op);
            break;
        case PS__FAB_ST_EXT: {
            uint64_t tag = ps__fab_tag(PS__FAB_KIND_EXT, peer->tx_epoch, ps__fab_my_id(van),
                                       tx->seq);
            ret = fi_tsend(van->ep, tx->hm + tx->ext_off, tx->ext_len, tx->hm_desc, dest, tag,
                           op);
            break;
        }
        case PS__FAB_ST_DATA: {
            uint64_t tag = ps__fab_tag(PS__FAB_KIND_DATA, peer->tx_epoch, ps__fab_my_id(van),
                                       tx->seq);
            ret = fi_tsendv(van->ep, tx->iov, tx->desc, (size_t)tx->niov, dest, tag, op);
            break;
        }
        }
        ps__fab_ep_unlock(van);
        if (ret == 0 && stage == PS__FAB_ST_META)
            ps_stage_posted();
        if (completes) {
            if (ret != 0) {
                __atomic_sub_fetch(&tx->refs, 1, __ATOMIC_ACQ_REL);
            } else {
                __atomic_add_fetch(&van->ops_in_flight, 1, __ATOMIC_RELAXED);
                if (stage == PS__FAB_ST_RMA)
                    __atomic_add_fetch(&ps__fab_rma_writes, 1, __ATOMIC_RELAXED);
            }
        }
        if (ret == -FI_EAGAIN)
            return POST_AGAIN;
        if (ret != 0) {
            ps_error(PS_LOG_FABRIC, "posting a send to node %d: %s", peer->id,
                     ps__fab_strerror((int)ret));
            return POST_ERROR;
        }
    }
    return POST_DONE;
}

/* Posts a peer's queue in order until the provider pushes back (peer lock
 * held). Returns POST_DONE (queue empty), POST_AGAIN, POST_ERROR or
 * POST_GONE. */
static int queue_post(ps__fab_van_t *van, ps__fab_peer_t *peer)
{
    /* The provider refused the head before: its peer may have stopped
     * taking messages, so its process is asked about every time (where
     * every send is queued, when it was quiet for PS__FAB_PID_CHECK_NS). */
    int held = 0;
    if (peer->q_head != NULL && post_begin(peer, 0, !van->posts_on_loop, &held))
        return POST_GONE;
    int r = POST_DONE;
    while (peer->q_head != NULL) {
        ps__fab_tx_t *tx = peer->q_head;
        if ((r = tx_post(van, tx)) != POST_DONE)
            break;
        peer->q_head = tx->next;
        if (peer->q_head == NULL)
            peer->q_tail = NULL;
        tx->next = NULL;
        tx_unref(van, tx, 1);
    }
    post_end(held);
    return r;
}

/* Hands a peer with queued sends to the progress thread. */
static void mark_blocked(ps__fab_van_t *van, ps__fab_peer_t *peer)
{
    pthread_mutex_lock(&van->blocked_lock);
    if (!peer->in_blocked) {
        peer->in_blocked = 1;
        peer->next_blocked = van->blocked;
        __atomic_store_n(&van->blocked, peer, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&van->blocked_lock);
    ps__fab_kick(van);
}

void ps__fab_flush_blocked(ps__fab_van_t *van)
{
    pthread_mutex_lock(&van->blocked_lock);
    ps__fab_peer_t *list = van->blocked;
    __atomic_store_n(&van->blocked, NULL, __ATOMIC_SEQ_CST);
    for (ps__fab_peer_t *p = list; p != NULL; p = p->next_blocked)
        p->in_blocked = 0;
    pthread_mutex_unlock(&van->blocked_lock);

    while (list != NULL) {
        ps__fab_peer_t *peer = list;
        list = list->next_blocked;
        pthread_mutex_lock(&peer->lock);
        int r = peer->failed ? POST_DONE : queue_post(van, peer);
        pthread_mutex_unlock(&peer->lock);
        if (r == POST_AGAIN)
            mark_blocked(van, peer);
        else if (r == POST_ERROR)
            ps__fab_peer_fail(van, peer, PS_ERR_LINK_FAILED, "the provider refused a send");
        else if (r == POST_GONE)
            ps__fab_peer_fail(van, peer, PS_ERR_PEER_GONE, "its process is gone");
    }
}

/* ---- building a message ---- */

/* Where header + meta (+ inline data) live: inside the object, on the heap
 * or, for providers that need local registrations, in the pool. */
static ps_status_t tx_alloc_hm(ps__fab_van_t *van, ps__fab_tx_t *tx, size_t len)
{
    if (van->mr_local) {
        ps_status_t st = ps_rdma_buf_pool_get(van->pool, len, &tx->hm_slice);
        if (st != PS_OK)
            return st;
        tx->hm = ps_slice_ptr(&tx->hm_slice);
        tx->hm_desc = ps__fab_mr_desc(ps_rdma_buf_pool_handle(van->pool, &tx->hm_slice));
        return PS_OK;
    }
    if (len <= sizeof(tx->hm_inline)) {
        tx->hm = tx->hm_inline;
        return PS_OK;
    }
    tx->hm_heap = malloc(len);
    if (tx->hm_heap == NULL)
        return PS_ERR_NO_MEMORY;
    tx->hm = tx->hm_heap;
    return PS_OK;
}

/* A local descriptor for slice s of tx (FI_MR_LOCAL providers). */
static ps_status_t tx_desc(ps__fab_van_t *van, ps__fab_tx_t *tx, int i, void **desc_p)
{
    *desc_p = NULL;
    /* Device memory always goes with its registration (FI_MR_HMEM). */
    if (!van->mr_local && ps_slice_in_host_mem(&tx->data[i]))
        return PS_OK;
    void *h = ps_rdma_buf_pool_handle(van->pool, &tx->data[i]);
    if (h == NULL) {
        ps_status_t st = ps_rdma_mr_cache_get(van->mrc, &tx->data[i], &tx->mr[i]);
        if (st != PS_OK)
            return st;
        h = tx->mr[i]->handle;
    }
    *desc_p = ps__fab_mr_desc(h);
    return PS_OK;
}

/* What a send to a failed or detached peer returns (peer->lock held): what
 * the postoffice was or will be told of its failure, so that a request
 * sent before the report arrives fails the way those it fails do. */
static ps_status_t refused_status(const ps__fab_peer_t *peer)
{
    if (!peer->failed)
        return PS_ERR_PEER_GONE; /* detached: disconnect() after its death */
    return peer->fail_why == PS_ERR_PEER_GONE ? PS_ERR_PEER_GONE : PS_ERR_LINK_FAILED;
}

/* A small message whose bytes are all in buf[0..len) (header still to
 * fill): injected from there, no send object. PS_OK when posted;
 * PS_INPROGRESS when it must go the queued way (sends are queued for the
 * peer, or the provider refused it for now); else the link's error. */
static ps_status_t post_direct(ps__fab_van_t *van, ps__fab_peer_t *peer, ps__fab_hdr_t *hdr,
                               uint8_t *buf, size_t len)
{
    if (ps__fab_lock(van, &peer->lock) != 0)
        return PS_ERR_LINK_FAILED;
    if (peer->failed || __atomic_load_n(&peer->detached, __ATOMIC_ACQUIRE)) {
        ps_status_t st = refused_status(peer);
        pthread_mutex_unlock(&peer->lock);
        return st;
    }
    if (peer->q_head != NULL || van->posts_on_loop) {
        pthread_mutex_unlock(&peer->lock);
        return PS_INPROGRESS;
    }
    /* Busy polling keeps the loop's clock current (a driver or the
     * progress thread runs it; parked, a few ms old at most): no clock
     * read on the request's path. */
    int held;
    if (post_begin(peer, van->base.params.busy_poll ? ps__fab_round_now(van) : 0, 0, &held)) {
        pthread_mutex_unlock(&peer->lock);
        ps__fab_peer_fail(van, peer, PS_ERR_PEER_GONE, "its process is gone");
        return PS_ERR_PEER_GONE;
    }
    hdr->seq = peer->tx_seq;
    hdr->epoch = peer->tx_epoch;
    memcpy(buf, hdr, sizeof(*hdr));
    ps__fab_ep_lock(van);
    ssize_t ret = fi_inject(van->ep, buf, len, peer->addr);
    ps__fab_ep_unlock(van);
    post_end(held);
    if (ret == 0) {
        ps_stage_posted();
        peer->tx_seq++;
    }
    pthread_mutex_unlock(&peer->lock);
    if (ret == 0)
        return PS_OK;
    if (ret == -FI_EAGAIN)
        return PS_INPROGRESS;
    ps_error(PS_LOG_FABRIC, "posting a send to node %d: %s", peer->id,
             ps__fab_strerror((int)ret));
    ps__fab_peer_fail(van, peer, PS_ERR_LINK_FAILED, "the provider refused a send");
    return PS_ERR_LINK_FAILED;
}

/* Sends tx, built (its stage, flags and bytes set), to peer: its sequence
 * number, then posted, or queued behind the peer's other sends, under the
 * peer's lock. hdr is copied to the front of tx->hm with the sequence
 * number filled in. *refused_p is set when the peer's link is down
 * already: tx is then still the caller's (to release); otherwise it is
 * taken over, whatever the status. */
static ps_status_t tx_submit(ps__fab_van_t *van, ps__fab_peer_t *peer, ps__fab_tx_t *tx,
                             ps__fab_hdr_t *hdr, uint64_t total, int *refused_p)
{
    /* In order, under the peer's lock: sequence number, then post or queue. */
    ps_status_t st;
    int r = POST_DONE;
    int queued = 0;
    if (ps__fab_lock(van, &peer->lock) != 0) {
        *refused_p = 1;
        return PS_ERR_LINK_FAILED;
    }
    if (peer->failed || __atomic_load_n(&peer->detached, __ATOMIC_ACQUIRE)) {
        st = refused_status(peer);
        pthread_mutex_unlock(&peer->lock);
        *refused_p = 1;
        return st;
    }
    tx->seq = peer->tx_seq++;
    hdr->seq = tx->seq;
    hdr->epoch = peer->tx_epoch;
    memcpy(tx->hm, hdr, sizeof(*hdr));
    tx->posted_ns = ps_time_now_ns();
    inflight_link(peer, tx);
    if (peer->q_head == NULL && van->posts_on_loop) {
        peer->q_head = peer->q_tail = tx;
        queued = 1;
    } else if (peer->q_head == NULL) {
        int held;
        r = post_begin(peer, tx->posted_ns, 0, &held) ? POST_GONE : tx_post(van, tx);
        post_end(held);
        if (r == POST_AGAIN) {
            peer->q_head = peer->q_tail = tx;
            queued = 1;
        } else if (r == POST_DONE) {
            tx_unref(van, tx, 1);
        } else {
            tx->stage = PS__FAB_ST_DONE;
            tx_unref(van, tx, 1);
        }
    } else {
        peer->q_tail->next = tx;
        peer->q_tail = tx;
    }
    pthread_mutex_unlock(&peer->lock);
    if (queued)
        mark_blocked(van, peer);
    if (r == POST_ERROR) {
        ps__fab_peer_fail(van, peer, PS_ERR_LINK_FAILED, "the provider refused a send");
        return PS_ERR_LINK_FAILED;
    }
    if (r == POST_GONE) {
        ps__fab_peer_fail(van, peer, PS_ERR_PEER_GONE, "its process is gone");
        return PS_ERR_PEER_GONE;
    }
    __atomic_add_fetch(&van->base.bytes_sent, total, __ATOMIC_RELAXED);
    /* Without a wait object the progress thread may be between polls: the
     * rest of a large message needs it. */
    if (van->cq_fd < 0 && !queued && (total > van->inject_size))
        ps__fab_kick(van);
    return PS_OK;
}

ps_status_t ps__fab_send(ps__fab_van_t *van, ps__fab_peer_t *peer, const ps_msg_t *msg)
{
    uint32_t nd = msg->num_data;
    if (nd > PS_MSG_MAX_DATA)
        return PS_ERR_INVALID_ARG;

    /* The postoffice has set the sender already: the meta is copied (~700
     * bytes) only when this van has to change it. */
    int my_id = ps__fab_my_id(van);
    const ps_meta_t *m = &msg->meta;
    ps_meta_t copy;
    if (m->sender != my_id) {
        copy = *m;
        copy.sender = my_id;
        m = &copy;
    }
    uint64_t lens[PS_MSG_MAX_DATA];
    uint64_t total = 0;
    unsigned device_segs = 0; /* bits: segments in device memory */
    for (uint32_t i = 0; i < nd; i++) {
        lens[i] = msg->data[i].len;
        total += lens[i];
        if (ps_slice_in_host_mem(&msg->data[i]))
            continue;
        if (!ps_van_moves_mem(van->device_kinds, &msg->data[i])) {
            ps_error(PS_LOG_FABRIC, "send to node %d: segment %u is device memory, which this "
                     "van does not move", m->recver, i);
            return PS_ERR_UNSUPPORTED;
        }
        device_segs |= 1u << i;
    }
    if (total > van->max_msg) {
        ps_error(PS_LOG_FABRIC, "send to node %d: %llu data bytes, more than provider %s "
                 "carries in one message", m->recver, (unsigned long long)total, van->prov_name);
        return PS_ERR_TOO_LARGE;
    }

    /* Worker: offer the pull's destination for an RMA write. Small values
     * come back inside the response's meta message instead (one message,
     * no registration). */
    int attached = 0;
    if (van->use_rma && m->request && m->pull && m->val_len > PS__FAB_INLINE_MAX &&
        m->van_data_len == 0) {
        if (m != &copy) {
            copy = *m;
            m = &copy;
        }
        attach_pull(van, m->recver, &copy);
        attached = copy.van_data_len != 0;
    }

    ps__fab_hdr_t hdr;
    memset(&hdr, 0, sizeof(hdr));
    hdr.magic = PS__FAB_MAGIC;
    hdr.version = PS__FAB_VERSION;
    hdr.sender = my_id;
    int rma_seg = -1;
    uint64_t rma_addr = 0, rma_key = 0;

    /* Server: a response to a pull whose destination the worker gave (none
     * can have been given while dests_used is 0: no lookup then). */
    if (van->dests != NULL && !m->request && __atomic_load_n(&van->dests_used, __ATOMIC_ACQUIRE)) {
        ps_rdma_rdv_key_t key = {m->recver, m->app_id, m->customer_id, m->timestamp};
        ps__fab_rdv_desc_t *d = ps_rdma_rdv_take(van->dests, &key);
        if (d != NULL) {
            hdr.flags |= PS__FAB_F_RDV;
            hdr.rdv_slot = d->slot;
            if (nd > 1 && lens[1] > PS__FAB_INLINE_MAX && lens[1] <= d->len) {
                rma_seg = 1;
                rma_addr = d->addr;
                rma_key = d->key;
                hdr.flags |= PS__FAB_F_RMA;
                hdr.rma_seg = 1;
            }
            free(d);
        }
    }

    /* The compact meta form (plain data messages, no protobuf) is encoded
     * straight onto the stack, after where header and frame header go:
     * its size comes out of the encoding (asking for it first cost a
     * second pass over the meta). */
    uint8_t small[PS__FAB_STACK_HM];
    size_t fhlen = ps_frame_header_len(nd);
    size_t moff = sizeof(hdr) + fhlen;
    size_t mlen = 0;
    int fast = 0, encoded = 0;
    ps_status_t st;
    if (moff < sizeof(small) &&
        ps_meta_fast_encode(m, small + moff, sizeof(small) - moff, &mlen) == PS_OK)
        fast = encoded = 1;
    if (!fast) {
        mlen = ps_meta_fast_size(m);
        fast = mlen != 0;
    }
    ps__fab_tx_t *tx = NULL;
    if (!fast && (st = ps_meta_encoded_size(m, &mlen)) != PS_OK)
        goto fail;
    if (mlen > van->limits.max_meta_bytes) {
        ps_error(PS_LOG_FABRIC, "send to node %d: a %zu-byte meta is over PS_MAX_META_BYTES",
                 m->recver, mlen);
        st = PS_ERR_TOO_LARGE;
        goto fail;
    }

    uint64_t rest = total - (rma_seg >= 0 ? lens[rma_seg] : 0);
    size_t base = moff + mlen;
    int ext = base > PS__FAB_META_BUF;
    /* Device segments travel as they are: never copied inline. */
    unsigned device_travel = device_segs & ~(rma_seg >= 0 ? 1u << rma_seg : 0u);
    int inl = !ext && rest > 0 && rest <= PS__FAB_INLINE_MAX && base + rest <= PS__FAB_META_BUF &&
              device_travel == 0;
    if (ext) {
        hdr.flags |= PS__FAB_F_EXT;
        hdr.ext_len = (uint32_t)(fhlen + mlen);
    }
    if (inl)
        hdr.flags |= PS__FAB_F_INLINE;
    size_t hm_len = ext ? sizeof(hdr) : base + (inl ? rest : 0);

    /* One message of at most the inject size, nothing registered: built
     * on the stack and injected, no send object (the common small case). */
    if (encoded && rma_seg < 0 && !ext && (rest == 0 || inl) && !van->mr_local &&
        hm_len <= van->inject_size && hm_len <= sizeof(small)) {
        size_t at = base;
        for (uint32_t i = 0; i < nd; i++) {
            if (lens[i] == 0)
                continue;
            memcpy(small + at, ps_slice_ptr(&msg->data[i]), lens[i]);
            at += lens[i];
        }
        size_t fhw = 0;
        if ((st = ps_frame_header_build(0, (uint32_t)mlen, lens, (uint16_t)nd, &van->limits,
                                        small + sizeof(hdr), fhlen, &fhw)) != PS_OK)
            goto fail;
        st = post_direct(van, peer, &hdr, small, hm_len);
        if (st == PS_OK) {
            __atomic_add_fetch(&van->base.bytes_sent, total, __ATOMIC_RELAXED);
            return PS_OK;
        }
        if (st != PS_INPROGRESS)
            return st;
        /* Queued behind other sends, or refused for now: a send object
         * with these bytes takes the queued way below. */
        if ((tx = tx_get(van)) == NULL)
            return PS_ERR_NO_MEMORY;
        if ((st = tx_alloc_hm(van, tx, hm_len)) != PS_OK) {
            tx_put(van, tx);
            return st;
        }
        memcpy(tx->hm, small, hm_len);
        tx->hm_len = hm_len;
        tx->ext_off = sizeof(hdr);
        tx->ext_len = fhlen + mlen;
    }

    if (tx == NULL) {
        if ((tx = tx_get(van)) == NULL) {
            st = PS_ERR_NO_MEMORY;
            goto fail;
        }
        if ((st = tx_alloc_hm(van, tx, base + (inl ? rest : 0))) != PS_OK) {
            tx_put(van, tx);
            tx = NULL;
            goto fail;
        }
    }
    tx->peer = peer;
    tx->refs = 1;
    tx->rma_seg = rma_seg;
    tx->rma_addr = rma_addr;
    tx->rma_key = rma_key;
    for (int i = 0; i < PS__FAB_ST_DONE; i++) {
        tx->op[i].kind = PS__FAB_OP_SEND;
        tx->op[i].owner = tx;
    }

    if (tx->hm_len == 0) {
        /* Not built on the stack: frame header, meta, inline data. */
        size_t fhw = 0;
        st = ps_frame_header_build(0, (uint32_t)mlen, lens, (uint16_t)nd, &van->limits,
                                   tx->hm + sizeof(hdr), fhlen, &fhw);
        if (st != PS_OK)
            goto fail;
        size_t at = moff;
        size_t wrote = mlen;
        if (encoded)
            memcpy(tx->hm + at, small + moff, mlen);
        else
            st = fast ? ps_meta_fast_encode(m, tx->hm + at, mlen, &wrote)
                      : ps_meta_encode(m, tx->hm + at, mlen, &wrote);
        if (st != PS_OK)
            goto fail;
        at += wrote;
        tx->ext_off = sizeof(hdr);
        tx->ext_len = fhlen + mlen;
        tx->hm_len = ext ? sizeof(hdr) : at;
        for (uint32_t i = 0; inl && i < nd; i++) {
            if (lens[i] == 0 || (int)i == rma_seg)
                continue;
            memcpy(tx->hm + at, ps_slice_ptr(&msg->data[i]), lens[i]);
            at += lens[i];
            tx->hm_len = at;
        }
    }

    /* The data: copied inline (above), written by RMA, or one DATA
     * message. */
    int ndata = 0;
    for (uint32_t i = 0; i < nd; i++) {
        if (lens[i] == 0)
            continue;
        if ((int)i == rma_seg) {
            tx->data[i] = ps_slice_ref(&msg->data[i]);
            if ((st = tx_desc(van, tx, (int)i, &tx->rma_desc)) != PS_OK)
                goto fail;
            continue;
        }
        if (!inl)
            ndata++;
    }
    tx->num_data = nd;
    if (ndata > 0 && (size_t)ndata <= van->iov_limit) {
        for (uint32_t i = 0; i < nd; i++) {
            if (lens[i] == 0 || (int)i == rma_seg)
                continue;
            tx->data[i] = ps_slice_ref(&msg->data[i]);
            tx->iov[tx->niov].iov_base = ps_slice_ptr(&tx->data[i]);
            tx->iov[tx->niov].iov_len = lens[i];
            if ((st = tx_desc(van, tx, (int)i, &tx->desc[tx->niov])) != PS_OK)
                goto fail;
            tx->niov++;
        }
    } else if (ndata > 0 && device_travel != 0) {
        ps_error(PS_LOG_FABRIC, "send to node %d: %d data segments, some in device memory, and "
                 "provider %s takes %zu per message: device memory is not gathered by the CPU",
                 m->recver, ndata, van->prov_name, van->iov_limit);
        st = PS_ERR_UNSUPPORTED;
        goto fail;
    } else if (ndata > 0) {
        /* More segments than the provider takes in one message: gather
         * them into one buffer (the receiver splits it the same way). */
        size_t sum = 0;
        for (uint32_t i = 0; i < nd; i++)
            if (lens[i] > 0 && (int)i != rma_seg)
                sum += lens[i];
        ps_slice_t one;
        if ((st = ps_rdma_buf_pool_get(van->pool, sum, &one)) != PS_OK)
            goto fail;
        size_t off = 0;
        for (uint32_t i = 0; i < nd; i++) {
            if (lens[i] > 0 && (int)i != rma_seg) {
                memcpy((char *)ps_slice_ptr(&one) + off, ps_slice_ptr(&msg->data[i]), lens[i]);
                off += lens[i];
            }
        }
        /* The gathered buffer takes the slot of the first data segment. */
        int slot = -1;
        for (uint32_t i = 0; i < nd && slot < 0; i++)
            if (lens[i] > 0 && (int)i != rma_seg)
                slot = (int)i;
        tx->data[slot] = one;
        tx->iov[0].iov_base = ps_slice_ptr(&one);
        tx->iov[0].iov_len = sum;
        tx->desc[0] = van->mr_local ? ps__fab_mr_desc(ps_rdma_buf_pool_handle(van->pool, &one))
                                    : NULL;
        tx->niov = 1;
    }
    if (tx->niov > 0)
        hdr.flags |= PS__FAB_F_DATA;
    tx->flags = hdr.flags;
    tx->stage = rma_seg >= 0 ? PS__FAB_ST_RMA : PS__FAB_ST_META;
    int refused = 0;
    st = tx_submit(van, peer, tx, &hdr, total, &refused);
    if (!refused)
        return st;

fail:
    if (attached)
        detach_pull(van, m);
    if (tx != NULL)
        tx_release_resources(van, tx);
    return st;
}

ps_status_t ps__fab_send_lane(ps__fab_van_t *van, ps__fab_peer_t *peer, uint8_t *bytes,
                              size_t len)
{
    _Static_assert(sizeof(ps__fab_hdr_t) <= PS_LANE_VAN_HEADROOM, "room for the header");
    _Static_assert(sizeof(ps__fab_hdr_t) + PS_LANE_MAX_BYTES <= PS__FAB_META_BUF,
                   "a lane message fits a posted meta receive");
    ps__fab_hdr_t hdr;
    memset(&hdr, 0, sizeof(hdr));
    hdr.magic = PS__FAB_MAGIC;
    hdr.version = PS__FAB_VERSION;
    hdr.flags = PS__FAB_F_LANE;
    hdr.sender = ps__fab_my_id(van);
    uint8_t *buf = bytes - sizeof(hdr);
    size_t wire = sizeof(hdr) + len;
    if (!van->mr_local && wire <= van->inject_size) {
        ps_status_t st = post_direct(van, peer, &hdr, buf, wire);
        if (st == PS_OK) {
            __atomic_add_fetch(&van->base.bytes_sent, len, __ATOMIC_RELAXED);
            return PS_OK;
        }
        if (st != PS_INPROGRESS)
            return st;
    }
    /* Behind other sends, refused for now, or for a provider that injects
     * less or wants registered memory: a send object, queued in order. */
    ps__fab_tx_t *tx = tx_get(van);
    if (tx == NULL)
        return PS_ERR_NO_MEMORY;
    ps_status_t st = tx_alloc_hm(van, tx, wire);
    if (st != PS_OK) {
        tx_put(van, tx);
        return st;
    }
    memcpy(tx->hm + sizeof(hdr), bytes, len);
    tx->hm_len = wire;
    tx->peer = peer;
    tx->refs = 1;
    tx->rma_seg = -1;
    for (int i = 0; i < PS__FAB_ST_DONE; i++) {
        tx->op[i].kind = PS__FAB_OP_SEND;
        tx->op[i].owner = tx;
    }
    tx->flags = hdr.flags;
    tx->stage = PS__FAB_ST_META;
    int refused = 0;
    st = tx_submit(van, peer, tx, &hdr, len, &refused);
    if (refused)
        tx_release_resources(van, tx);
    return st;
}

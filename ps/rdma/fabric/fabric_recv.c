/*
 * The receive side of the libfabric van (progress thread only).
 *
 * A pool of meta receives stays posted (untagged: any sender). When
 * one completes, its header says who sent it and where the message stands
 * in that sender's sequence; the frame header and meta are decoded at once
 * (or, for a meta too large for a posted buffer, received next as an EXT
 * message), and every data segment gets its destination: the buffer the
 * postoffice names through recv_buffer() (a pull response lands in the
 * worker's own buffer), or a pooled one. Inline data is copied out of the
 * meta buffer, RMA-written data is already in place, the rest arrives as
 * one DATA message received straight into those destinations. The meta
 * buffer is re-posted as soon as it has been read.
 *
 * Messages of one sender are delivered in sequence order: a message that
 * waits for its data holds back the ones behind it.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/base/time.h"
#include "ps/net/codec/lane.h"
#include "ps/net/van/rx.h"
#include "ps/rdma/fabric/fabric_internal.h"

/* ---- meta receives ---- */

static int post_mrecv(ps__fab_van_t *van, ps__fab_mrecv_t *m)
{
    ps__fab_ep_lock(van);
    ssize_t ret = fi_recv(van->ep, ps_slice_ptr(&m->buf), PS__FAB_META_BUF, m->desc,
                          FI_ADDR_UNSPEC, &m->op);
    ps__fab_ep_unlock(van);
    if (ret == 0) {
        m->posted = 1;
        return 0;
    }
    if (ret != -FI_EAGAIN)
        ps_warn_ratelimited(PS_LOG_FABRIC, "posting a meta receive: %s",
                            ps__fab_strerror((int)ret));
    van->mrecv_blocked = 1;
    return (int)ret;
}

void ps__fab_flush_mrecvs(ps__fab_van_t *van)
{
    int n = van->mrecv_ndefer;
    van->mrecv_ndefer = 0;
    /* One that a retry posted meanwhile is skipped; after a refusal the
     * rest wait for the retry (post_mrecv set mrecv_blocked), which posts
     * every meta receive not posted. */
    for (int i = 0; i < n; i++) {
        ps__fab_mrecv_t *m = van->mrecv_defer[i];
        if (!m->posted && post_mrecv(van, m) != 0)
            break;
    }
}

/* A meta receive that was read: posted again later (PS__FAB_MRECV_BATCH). */
static void defer_mrecv(ps__fab_van_t *van, ps__fab_mrecv_t *m)
{
    van->mrecv_defer[van->mrecv_ndefer++] = m;
    if (van->mrecv_ndefer == PS__FAB_MRECV_BATCH)
        ps__fab_flush_mrecvs(van);
}

ps_status_t ps__fab_post_meta_recvs(ps__fab_van_t *van)
{
    for (int i = 0; i < PS__FAB_META_DEPTH; i++) {
        ps__fab_mrecv_t *m = &van->mrecv[i];
        m->op.kind = PS__FAB_OP_MRECV;
        m->op.owner = m;
        ps_status_t st = ps_rdma_buf_pool_get(van->pool, PS__FAB_META_BUF, &m->buf);
        if (st != PS_OK)
            return st;
        m->desc = ps__fab_mr_desc(ps_rdma_buf_pool_handle(van->pool, &m->buf));
        int ret = post_mrecv(van, m);
        if (ret != 0 && ret != -FI_EAGAIN) {
            ps_error(PS_LOG_FABRIC, "cannot post receives: %s", ps__fab_strerror(ret));
            return PS_ERR_DEVICE;
        }
    }
    return PS_OK;
}

/* ---- rx objects ---- */

static void rx_link(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    rx->all_prev = NULL;
    rx->all_next = van->rx_all;
    if (van->rx_all)
        van->rx_all->all_prev = rx;
    van->rx_all = rx;
}

static void rx_unlink(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    if (rx->all_prev)
        rx->all_prev->all_next = rx->all_next;
    else
        van->rx_all = rx->all_next;
    if (rx->all_next)
        rx->all_next->all_prev = rx->all_prev;
    rx->all_prev = rx->all_next = NULL;
}

/* A receive object: a kept one, else a new one. A kept one is cleared
 * only where it may hold something (~500 of its ~1700 bytes were cleared
 * per message before): not the op contexts (the provider's scratch space;
 * kind and owner are set by the caller), not the meta (the decoder writes
 * it whole before anything reads it, and ps_msg_release reads no meta
 * field unless msg.nodes_owned, which is cleared here), not the frame
 * header (parsed before anything reads it), not iov/desc (written up to
 * niov before they are posted); ext and mr[] are empty already (rx_put
 * takes only what rx_detach emptied). */
static ps__fab_rx_t *rx_get(ps__fab_van_t *van)
{
    ps__fab_rx_t *rx = van->rx_cache;
    if (rx == NULL)
        return calloc(1, sizeof(*rx));
    van->rx_cache = rx->next;
    van->rx_cached--;
    memset(&rx->peer, 0, offsetof(ps__fab_rx_t, msg) - offsetof(ps__fab_rx_t, peer));
    memset(&rx->msg.nodes, 0, sizeof(rx->msg) - offsetof(ps_msg_t, nodes));
    rx->niov = 0;
    return rx;
}

/* Keeps (up to PS__FAB_OBJ_CACHE) or frees an rx already off every list
 * whose message holds nothing any more. */
static void rx_put(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    if (van->rx_cached >= PS__FAB_OBJ_CACHE) {
        free(rx);
        return;
    }
    rx->next = van->rx_cache;
    van->rx_cache = rx;
    van->rx_cached++;
}

/* Drops the registrations of rx's receive destinations (only providers
 * that need local registrations make any: seg_dest). */
static void rx_put_mrs(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    if (!van->mr_local)
        return;
    for (int i = 0; i < PS_MSG_MAX_DATA; i++) {
        if (rx->mr[i] != NULL)
            ps_rdma_mr_cache_put(van->mrc, rx->mr[i]);
        rx->mr[i] = NULL;
    }
}

/* Takes rx off every list and drops what it holds besides its message
 * (registrations, the EXT buffer). */
static void rx_detach(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    rx_unlink(van, rx);
    rx_put_mrs(van, rx);
    if (rx->ext.buf != NULL)
        ps_slice_unref(&rx->ext);
}

static void rx_free(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    rx_detach(van, rx);
    ps_msg_release(&rx->msg);
    rx_put(van, rx);
}

void ps__fab_rx_free_all(ps__fab_van_t *van)
{
    while (van->rx_all != NULL)
        rx_free(van, van->rx_all);
    while (van->rx_cache != NULL) {
        ps__fab_rx_t *rx = van->rx_cache;
        van->rx_cache = rx->next;
        free(rx);
    }
    van->rx_cached = 0;
    van->rx_blocked = NULL;
    for (int i = 0; i < van->rxs_cap; i++)
        free(van->rxs[i]);
    free(van->rxs);
    van->rxs = NULL;
    van->rxs_cap = 0;
    for (int i = 0; i < PS__FAB_META_DEPTH; i++)
        ps_slice_unref(&van->mrecv[i].buf);
    ps_slice_unref(&van->arena);
    van->arena_off = 0;
    van->mrecv_ndefer = 0;
}

/* Inserts rx in its sender's pending list, by sequence (modulo 2^32). */
static void pending_insert(ps__fab_rxs_t *rxs, ps__fab_rx_t *rx)
{
    ps__fab_rx_t **pp = &rxs->pending;
    while (*pp != NULL && (int32_t)((*pp)->seq - rx->seq) < 0)
        pp = &(*pp)->next;
    rx->next = *pp;
    *pp = rx;
}

void ps__fab_rx_reset(ps__fab_van_t *van, ps__fab_rxs_t *rxs)
{
    ps__fab_rx_t *rx = rxs->pending;
    rxs->pending = NULL;
    while (rx != NULL) {
        ps__fab_rx_t *next = rx->next;
        rx->next = NULL;
        if (rx->parked)
            ; /* stays on van->rx_all until close */
        else if (rx->waiting > 0 || rx->blocked)
            rx->orphan = 1; /* freed when its receive completes (or at close) */
        else
            rx_free(van, rx);
        rx = next;
    }
}

/* Counts a lane message from node `sender` and hands it over. */
static void lane_deliver(ps__fab_van_t *van, int sender, const uint8_t *bytes, size_t len)
{
    /* One writer (the loop's holder): no locked add. */
    __atomic_store_n(&van->base.bytes_recv, __atomic_load_n(&van->base.bytes_recv, __ATOMIC_RELAXED) + len,
                     __ATOMIC_RELAXED);
    ps_van_deliver_lane(&van->base.cb, PS_LOG_FABRIC, sender, bytes, len);
}

/* Delivers what is next in the sender's sequence and complete. */
static void try_deliver(ps__fab_van_t *van, ps__fab_rxs_t *rxs)
{
    for (;;) {
        ps__fab_rx_t *rx = rxs->pending;
        if (rx == NULL || rx->seq != rxs->next || !rx->ready)
            return;
        rxs->pending = rx->next;
        rxs->next++;
        if (rx->flags & PS__FAB_F_LANE) {
            /* A lane message that had to wait for its turn (on_lane). */
            ps_slice_t bytes = rx->ext;
            rx->ext = (ps_slice_t)PS_SLICE_EMPTY_INIT;
            rx_detach(van, rx);
            lane_deliver(van, rx->peer->id, ps_slice_ptr(&bytes), bytes.len);
            ps_slice_unref(&bytes);
            rx_put(van, rx);
            continue;
        }
        /* Off every list, the rx is this loop's alone: its message is
         * handed over in place (not copied out, ~800 bytes), and the rx
         * kept for reuse once the callee is done with it. */
        rx_detach(van, rx);
        ps_msg_t *msg = &rx->msg;
        /* One writer (the loop's holder): no locked add. */
        __atomic_store_n(&van->base.bytes_recv,
                         __atomic_load_n(&van->base.bytes_recv, __ATOMIC_RELAXED) + rx->fh.data_total,
                         __ATOMIC_RELAXED);
        ps_van_base_deliver(&van->base, msg); /* the callee owns its references */
        rx_put(van, rx);
    }
}

/* ---- assembling a message ---- */

/* Posts the DATA receive of rx (or queues it for a retry). */
static void post_data(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    ps__fab_ep_lock(van);
    ssize_t ret = fi_trecvv(van->ep, rx->iov, rx->desc, (size_t)rx->niov, FI_ADDR_UNSPEC,
                            ps__fab_tag(PS__FAB_KIND_DATA, rx->epoch, rx->peer->id, rx->seq), 0,
                            &rx->op_data);
    ps__fab_ep_unlock(van);
    if (ret == 0) {
        rx->waiting++;
        rx->blocked = 0;
        __atomic_add_fetch(&van->ops_in_flight, 1, __ATOMIC_RELAXED);
        return;
    }
    if (ret != -FI_EAGAIN) {
        ps__fab_peer_fail(van, rx->peer, PS_ERR_LINK_FAILED, "cannot post a data receive");
        rx->orphan = 1;
        return;
    }
    if (!rx->blocked) {
        rx->blocked = PS__FAB_KIND_DATA;
        rx->next_blocked = van->rx_blocked;
        van->rx_blocked = rx;
    }
}

static void post_ext(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    void *desc = ps__fab_mr_desc(ps_rdma_buf_pool_handle(van->pool, &rx->ext));
    ps__fab_ep_lock(van);
    ssize_t ret = fi_trecv(van->ep, ps_slice_ptr(&rx->ext), rx->ext.len, desc, FI_ADDR_UNSPEC,
                           ps__fab_tag(PS__FAB_KIND_EXT, rx->epoch, rx->peer->id, rx->seq), 0,
                           &rx->op_ext);
    ps__fab_ep_unlock(van);
    if (ret == 0) {
        rx->waiting++;
        rx->blocked = 0;
        __atomic_add_fetch(&van->ops_in_flight, 1, __ATOMIC_RELAXED);
        return;
    }
    if (ret != -FI_EAGAIN) {
        ps__fab_peer_fail(van, rx->peer, PS_ERR_LINK_FAILED, "cannot post a meta receive");
        rx->orphan = 1;
        return;
    }
    if (!rx->blocked) {
        rx->blocked = PS__FAB_KIND_EXT;
        rx->next_blocked = van->rx_blocked;
        van->rx_blocked = rx;
    }
}

/* Whether segment i comes with this message: not empty, and not the one
 * an RMA write already put in place (`written`). */
static int seg_travels(const ps__fab_rx_t *rx, unsigned i, int written)
{
    return rx->fh.data_len[i] != 0 && !(written && i == (unsigned)rx->rma_seg);
}

/* One pooled block of `total` bytes for the segments in `mask`, each a
 * slice of it, in order (one pool round trip per message, not per
 * segment). *block_p is the caller's reference to the whole block. */
static ps_status_t carve_pooled(ps__fab_van_t *van, ps__fab_rx_t *rx, unsigned mask,
                                uint64_t total, ps_slice_t *block_p)
{
    ps_status_t st = ps_rdma_buf_pool_get(van->pool, total, block_p);
    if (st != PS_OK)
        return st;
    size_t off = 0;
    for (unsigned i = 0; i < rx->fh.num_data; i++) {
        if (!(mask & (1u << i)))
            continue;
        ps_slice_sub(block_p, off, rx->fh.data_len[i], &rx->msg.data[i]);
        off += rx->fh.data_len[i];
    }
    return PS_OK;
}

/* Inline segments the postoffice names no buffer for (`mask`, `total`
 * bytes): carved, message after message, out of one pooled block the loop
 * keeps (van->arena), a slice each: a pool round trip per block of
 * PS__FAB_ARENA_BYTES, not per message. A block goes back to the pool once
 * the loop has moved on to the next and every message carved from it is
 * released; what one kept message pins is at most one such block, as its
 * own pooled block (PS_RDMA_BUF_POOL_MIN_BLOCK at least) did before. */
static ps_status_t carve_arena(ps__fab_van_t *van, ps__fab_rx_t *rx, unsigned mask,
                               uint64_t total)
{
    ps_status_t st;
    if (total > PS__FAB_ARENA_BYTES) {
        ps_slice_t one;
        if ((st = carve_pooled(van, rx, mask, total, &one)) == PS_OK)
            ps_slice_unref(&one);
        return st;
    }
    if (van->arena.buf == NULL || total > van->arena.len - van->arena_off) {
        ps_slice_t fresh;
        if ((st = ps_rdma_buf_pool_get(van->pool, PS__FAB_ARENA_BYTES, &fresh)) != PS_OK)
            return st;
        ps_slice_unref(&van->arena);
        van->arena = fresh;
        van->arena_off = 0;
    }
    size_t off = van->arena_off;
    for (unsigned i = 0; i < rx->fh.num_data; i++) {
        if (!(mask & (1u << i)))
            continue;
        ps_slice_sub(&van->arena, off, rx->fh.data_len[i], &rx->msg.data[i]);
        off += rx->fh.data_len[i];
    }
    off = (off + PS__FAB_ARENA_ALIGN - 1) & ~(size_t)(PS__FAB_ARENA_ALIGN - 1);
    van->arena_off = off < van->arena.len ? off : van->arena.len;
    return PS_OK;
}

/* A destination for segment i of len bytes: the postoffice's, else pooled
 * (with want_desc; without, PS_ERR_NOT_FOUND says the caller finds one).
 * Without want_desc the van copies the bytes there: host memory only. */
static ps_status_t seg_dest(ps__fab_van_t *van, ps__fab_rx_t *rx, unsigned i, uint64_t len,
                            int want_desc, void **desc_p)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    *desc_p = NULL;
    uint32_t kinds = want_desc ? van->device_kinds : van->device_kinds ? PS_VAN_HOST_COPY : 0;
    /* Device memory is received with its registration (FI_MR_HMEM). */
    if (ps_van_recv_dest(&van->base, &rx->msg.meta, i, len, kinds, &s) == PS_OK && want_desc &&
        (van->mr_local || !ps_slice_in_host_mem(&s))) {
        ps_status_t st = ps_rdma_mr_cache_get(van->mrc, &s, &rx->mr[i]);
        if (st != PS_OK) {
            rx->mr[i] = NULL;
            ps_slice_unref(&s); /* fall back to a registered pool buffer */
        } else {
            *desc_p = ps__fab_mr_desc(rx->mr[i]->handle);
        }
    }
    if (s.buf == NULL) {
        if (!want_desc)
            return PS_ERR_NOT_FOUND; /* the caller takes a van buffer */
        ps_status_t st = ps_rdma_buf_pool_get(van->pool, len, &s);
        if (st != PS_OK)
            return st;
        *desc_p = ps__fab_mr_desc(ps_rdma_buf_pool_handle(van->pool, &s));
    }
    rx->msg.data[i] = s;
    return PS_OK;
}

/* Whether the values a message says were written into our memory may be
 * missing: an error without a context came lately (a write into our memory
 * failed, and which is not said) and its sender's process is gone or
 * exiting (the usual cause: shm copies a write from the writer's memory
 * when the target's progress reaches it, after the writer was killed). A
 * live sender's messages are taken: which write failed is unknown. */
static int rma_doubt(ps__fab_van_t *van, const ps__fab_rx_t *rx)
{
    if (van->rma_doubt_until_ns == 0)
        return 0;
    if (ps__fab_round_now(van) > van->rma_doubt_until_ns) {
        van->rma_doubt_until_ns = 0;
        return 0;
    }
    pthread_mutex_lock(&rx->peer->lock);
    int exiting = ps__fab_peer_process_exiting(rx->peer);
    pthread_mutex_unlock(&rx->peer->lock);
    return exiting;
}

/* The pull whose response this is (its values were written by RMA when
 * `written` says so). */
static ps_status_t take_pull(ps__fab_van_t *van, ps__fab_rx_t *rx, int written)
{
    ps__fab_pull_t *pull = van->pulls ? ps_rdma_slot_release(van->pulls, rx->rdv_slot) : NULL;
    const ps_meta_t *m = &rx->msg.meta;
    if (pull == NULL || pull->peer != rx->peer->id || pull->timestamp != m->timestamp ||
        pull->app_id != m->app_id || pull->customer_id != m->customer_id) {
        ps_error(PS_LOG_FABRIC, "node %d answered a pull this node does not expect (slot 0x%x, "
                 "timestamp %d)", rx->peer->id, rx->rdv_slot, m->timestamp);
        if (pull != NULL)
            ps__fab_pull_free(van, pull);
        return PS_ERR_PROTOCOL;
    }
    ps_status_t st = PS_OK;
    if (written && rma_doubt(van, rx)) {
        ps_error(PS_LOG_FABRIC, "node %d's process is gone, and a write into this node's memory "
                 "failed: its answer to pull %d is dropped", rx->peer->id, m->timestamp);
        st = PS_ERR_PEER_GONE;
    } else if (written) {
        unsigned i = rx->rma_seg;
        uint64_t len = rx->fh.data_len[i];
        if (len > pull->dest.len) {
            ps_error(PS_LOG_FABRIC, "node %d wrote %" PRIu64 " bytes into a %zu-byte pull "
                     "destination", rx->peer->id, len, pull->dest.len);
            st = PS_ERR_PROTOCOL;
        } else {
            rx->msg.data[i] = pull->dest;
            pull->dest = (ps_slice_t)PS_SLICE_EMPTY_INIT;
            ps_slice_narrow(&rx->msg.data[i], 0, len);
        }
    }
    ps__fab_pull_free(van, pull);
    return st;
}

/* Decodes frame header + meta from buf and sets up the data segments;
 * `tail` holds the inline data after them (main meta buffer only). */
static ps_status_t rx_decode(ps__fab_van_t *van, ps__fab_rx_t *rx, const uint8_t *buf,
                             size_t len)
{
    size_t need = 0;
    ps_status_t st = ps_frame_header_parse(buf, len, &van->limits, &rx->fh, &need);
    if (st != PS_OK || rx->fh.num_data > PS_MSG_MAX_DATA ||
        (size_t)rx->fh.header_len + rx->fh.meta_len > len) {
        ps_error(PS_LOG_FABRIC, "bad frame from node %d (%s)", rx->peer->id,
                 st == PS_OK ? "too many segments or truncated" : ps_status_str(st));
        return PS_ERR_PROTOCOL;
    }
    const uint8_t *mp = buf + rx->fh.header_len;
    ps_msg_t *msg = &rx->msg;
    /* Decoded in place (a copy of the meta is ~700 bytes). */
    st = ps_van_meta_decode(&van->base, mp, rx->fh.meta_len, rx->peer->id, NULL, &msg->meta);
    if (st != PS_OK)
        return PS_ERR_PROTOCOL;
    st = ps_van_msg_take_meta(msg, &msg->meta, rx->peer->id);
    if (st != PS_OK)
        return st;

    /* Server: where the answer to this pull may be written. */
    ps__fab_rdv_desc_t d;
    if (msg->meta.van_data_len == sizeof(d)) {
        memcpy(&d, msg->meta.van_data, sizeof(d));
        if (d.magic == PS__FAB_RDV_MAGIC && van->dests != NULL && msg->meta.request) {
            ps__fab_rdv_desc_t *copy = malloc(sizeof(*copy));
            ps_rdma_rdv_key_t key = {rx->peer->id, msg->meta.app_id, msg->meta.customer_id,
                                     msg->meta.timestamp};
            if (copy != NULL) {
                *copy = d;
                /* Before the put: whoever answers this request (after its
                 * delivery) sees it set. */
                __atomic_store_n(&van->dests_used, 1, __ATOMIC_RELEASE);
                if (ps_rdma_rdv_put(van->dests, &key, copy) != PS_OK)
                    free(copy);
            }
        }
        msg->meta.van_data_len = 0;
    }

    msg->num_data = rx->fh.num_data;
    int written = (rx->flags & PS__FAB_F_RMA) && rx->rma_seg < rx->fh.num_data;
    if (rx->flags & PS__FAB_F_RDV) {
        if ((st = take_pull(van, rx, written)) != PS_OK)
            return st;
    } else if (written) {
        ps_error(PS_LOG_FABRIC, "node %d wrote values without a pull to answer", rx->peer->id);
        return PS_ERR_PROTOCOL;
    }

    const uint8_t *tail = mp + rx->fh.meta_len;
    size_t tail_len = len - rx->fh.header_len - rx->fh.meta_len;
    int ndata = 0;
    uint64_t rest = 0;
    unsigned travelling = 0;
    for (unsigned i = 0; i < rx->fh.num_data; i++) {
        if (seg_travels(rx, i, written)) {
            ndata++;
            rest += rx->fh.data_len[i];
            travelling |= 1u << i;
        }
    }
    if (rx->flags & PS__FAB_F_INLINE) {
        if (rest > tail_len) {
            ps_error(PS_LOG_FABRIC, "node %d sent %zu inline bytes for %" PRIu64 " bytes of data",
                     rx->peer->id, tail_len, rest);
            return PS_ERR_PROTOCOL;
        }
        /* Segments the postoffice names no buffer for are carved out of
         * the van's current block. */
        uint64_t pooled = 0;
        unsigned need = 0;
        for (unsigned i = 0; i < rx->fh.num_data; i++) {
            if (!(travelling & (1u << i)))
                continue;
            void *unused;
            st = seg_dest(van, rx, i, rx->fh.data_len[i], 0, &unused);
            if (st == PS_ERR_NOT_FOUND) {
                pooled += rx->fh.data_len[i];
                need |= 1u << i;
            } else if (st != PS_OK) {
                return st;
            }
        }
        if (need != 0 && (st = carve_arena(van, rx, need, pooled)) != PS_OK)
            return st;
        for (unsigned i = 0; i < rx->fh.num_data; i++) {
            if (!(travelling & (1u << i)))
                continue;
            memcpy(ps_slice_ptr(&msg->data[i]), tail, rx->fh.data_len[i]);
            tail += rx->fh.data_len[i];
        }
        return PS_OK;
    }
    if (ndata == 0)
        return PS_OK;
    if (!(rx->flags & PS__FAB_F_DATA)) {
        ps_error(PS_LOG_FABRIC, "node %d announced %" PRIu64 " data bytes but sends none",
                 rx->peer->id, rest);
        return PS_ERR_PROTOCOL;
    }
    if ((size_t)ndata <= van->iov_limit) {
        for (unsigned i = 0; i < rx->fh.num_data; i++) {
            uint64_t l = rx->fh.data_len[i];
            if (!(travelling & (1u << i)))
                continue;
            if ((st = seg_dest(van, rx, i, l, 1, &rx->desc[rx->niov])) != PS_OK)
                return st;
            rx->iov[rx->niov].iov_base = ps_slice_ptr(&msg->data[i]);
            rx->iov[rx->niov].iov_len = l;
            rx->niov++;
        }
    } else {
        /* Gathered by the sender into one message: one pooled buffer, the
         * segments are slices of it. */
        ps_slice_t one;
        if ((st = carve_pooled(van, rx, travelling, rest, &one)) != PS_OK)
            return st;
        rx->iov[0].iov_base = ps_slice_ptr(&one);
        rx->iov[0].iov_len = rest;
        rx->desc[0] = ps__fab_mr_desc(ps_rdma_buf_pool_handle(van->pool, &one));
        rx->niov = 1;
        ps_slice_unref(&one);
    }
    post_data(van, rx);
    return PS_OK;
}

/* rx is complete (or failed): deliver in order, or let it go. */
static void rx_settle(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    if (rx->waiting > 0 || rx->blocked)
        return;
    if (rx->orphan) {
        rx_free(van, rx);
        return;
    }
    rx->ready = 1;
    try_deliver(van, rx->rxs);
}

/* A broken message (protocol error, failed receive): the sender's link is
 * unusable from here on. rx is in its sender's pending list, so the reset
 * frees it, orphans it while a receive of it is still posted, or leaves it
 * to close when it is parked. */
static void rx_broken(ps__fab_van_t *van, ps__fab_rx_t *rx, ps_status_t st)
{
    ps_status_t why = st == PS_ERR_PROTOCOL || st == PS_ERR_PEER_GONE ? st : PS_ERR_LINK_FAILED;
    ps__fab_peer_fail(van, rx->peer, why, ps_status_str(st));
    ps__fab_rx_reset(van, rx->rxs);
}

/* The sequence state of sender `id`, made if new. */
static ps__fab_rxs_t *rxs_get(ps__fab_van_t *van, int id)
{
    if (id >= van->rxs_cap) {
        int cap = van->rxs_cap ? van->rxs_cap : 64;
        while (cap <= id)
            cap *= 2;
        ps__fab_rxs_t **p = realloc(van->rxs, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return NULL;
        memset(p + van->rxs_cap, 0, (size_t)(cap - van->rxs_cap) * sizeof(*p));
        van->rxs = p;
        van->rxs_cap = cap;
    }
    if (van->rxs[id] == NULL)
        van->rxs[id] = calloc(1, sizeof(ps__fab_rxs_t));
    return van->rxs[id];
}

/* Sets up rx for the message hdr announces from peer and files it in the
 * sender's pending list (by sequence) and the van's list of receives. */
static void rx_start(ps__fab_van_t *van, ps__fab_rx_t *rx, ps__fab_peer_t *peer,
                     ps__fab_rxs_t *rxs, const ps__fab_hdr_t *hdr)
{
    rx->op_ext.kind = PS__FAB_OP_RXPART;
    rx->op_ext.owner = rx;
    rx->op_data.kind = PS__FAB_OP_RXPART;
    rx->op_data.owner = rx;
    rx->peer = peer;
    rx->rxs = rxs;
    rx->seq = hdr->seq;
    rx->epoch = hdr->epoch;
    rx->flags = hdr->flags;
    rx_link(van, rx);
    pending_insert(rxs, rx);
}

/* A lane message (hdr, then len bytes): handed over at once when it is
 * the next of its sender's sequence with nothing waiting (the usual case);
 * else a copy waits in the sender's pending list like any message. */
static void on_lane(ps__fab_van_t *van, ps__fab_mrecv_t *m, ps__fab_peer_t *peer,
                    ps__fab_rxs_t *rxs, const ps__fab_hdr_t *hdr, const uint8_t *bytes,
                    size_t len)
{
    if (!ps__fab_lane_valid(hdr, len)) {
        post_mrecv(van, m);
        ps_error(PS_LOG_FABRIC, "node %d sent a bad lane message (%zu bytes, flags 0x%x)",
                 hdr->sender, len, hdr->flags);
        ps__fab_peer_fail(van, peer, PS_ERR_PROTOCOL, "bad lane message");
        ps__fab_rx_reset(van, rxs);
        return;
    }
    if (hdr->seq == rxs->next && rxs->pending == NULL) {
        rxs->next++;
        lane_deliver(van, hdr->sender, bytes, len);
        defer_mrecv(van, m);
        return;
    }
    ps__fab_rx_t *rx = rx_get(van);
    if (rx == NULL || ps_rdma_buf_pool_get(van->pool, len, &rx->ext) != PS_OK) {
        free(rx);
        post_mrecv(van, m);
        ps__fab_peer_fail(van, peer, PS_ERR_LINK_FAILED, "out of memory receiving a message");
        return;
    }
    memcpy(ps_slice_ptr(&rx->ext), bytes, len);
    post_mrecv(van, m);
    rx_start(van, rx, peer, rxs, hdr);
    rx_settle(van, rx);
}

void ps__fab_on_meta(ps__fab_van_t *van, ps__fab_mrecv_t *m, size_t len, fi_addr_t src)
{
    ps_stage_found();
    m->posted = 0;
    const uint8_t *p = ps_slice_ptr(&m->buf);
    ps__fab_hdr_t hdr;
    if (len < sizeof(hdr)) {
        ps_warn_ratelimited(PS_LOG_FABRIC, "dropped a %zu-byte message: too short", len);
        post_mrecv(van, m);
        return;
    }
    memcpy(&hdr, p, sizeof(hdr));
    if (!ps__fab_hdr_valid(&hdr)) {
        ps_warn_ratelimited(PS_LOG_FABRIC, "dropped a message that is not of this protocol "
                            "(magic 0x%x, version %u, sender %d)", hdr.magic, hdr.version,
                            hdr.sender);
        post_mrecv(van, m);
        return;
    }
    ps__fab_peer_t *peer = ps__fab_peer_for_rx(van, hdr.sender);
    ps__fab_rxs_t *rxs = rxs_get(van, hdr.sender);
    if (peer == NULL || rxs == NULL) {
        ps_error(PS_LOG_FABRIC, "out of memory for node %d's state; message dropped", hdr.sender);
        post_mrecv(van, m);
        return;
    }
    __atomic_store_n(&peer->last_progress_ns, ps__fab_round_now(van), __ATOMIC_RELAXED);
    fi_addr_t known = __atomic_load_n(&peer->addr, __ATOMIC_ACQUIRE);
    /* Job secret (PS_JOB_SECRET): an RDM endpoint has no connection to run
     * a challenge-response on. The scheduler's traffic goes over the TCP
     * van, which runs it; the node table the scheduler sends there is the
     * only source of the fabric addresses we insert. So with a secret a
     * message counts only when the provider says it comes from the address
     * that table gives its claimed sender (fab_open() refuses providers
     * without FI_SOURCE); anything else is dropped with a line. */
    if (van->base.params.auth_enabled &&
        (src == FI_ADDR_NOTAVAIL || known == FI_ADDR_NOTAVAIL || src != known)) {
        ps_warn_ratelimited(PS_LOG_FABRIC, "dropped a message claiming to come from node %d: "
                            "not from the address the job's node table gives it (PS_JOB_SECRET)",
                            hdr.sender);
        post_mrecv(van, m);
        return;
    }
    if (van->have_source && src != FI_ADDR_NOTAVAIL && known != FI_ADDR_NOTAVAIL &&
        src != known) {
        ps_warn_ratelimited(PS_LOG_FABRIC, "dropped a message claiming to come from node %d "
                            "from another address", hdr.sender);
        post_mrecv(van, m);
        return;
    }
    if (__atomic_load_n(&peer->failed, __ATOMIC_ACQUIRE) && rxs->known &&
        hdr.epoch == rxs->epoch) {
        /* Its link failed (and was reported): nothing more of this epoch
         * can be delivered in order. */
        post_mrecv(van, m);
        return;
    }
    if (!rxs->known) {
        rxs->known = 1;
        rxs->epoch = hdr.epoch;
        rxs->next = 0;
    } else if (hdr.epoch != rxs->epoch) {
        if (hdr.epoch == rxs->prev_epoch) {
            ps_debug(PS_LOG_FABRIC, "dropped a late message of node %d's previous epoch",
                     hdr.sender);
            post_mrecv(van, m);
            return;
        }
        ps_info(PS_LOG_FABRIC, "node %d started over (epoch %u after %u)", hdr.sender,
                hdr.epoch, rxs->epoch);
        ps__fab_rx_reset(van, rxs);
        rxs->prev_epoch = rxs->epoch;
        rxs->epoch = hdr.epoch;
        rxs->next = 0;
    }

    if (hdr.flags & PS__FAB_F_LANE) {
        on_lane(van, m, peer, rxs, &hdr, p + sizeof(hdr), len - sizeof(hdr));
        return;
    }
    ps__fab_rx_t *rx = rx_get(van);
    if (rx == NULL) {
        post_mrecv(van, m);
        ps__fab_peer_fail(van, peer, PS_ERR_LINK_FAILED, "out of memory receiving a message");
        return;
    }
    rx_start(van, rx, peer, rxs, &hdr);
    rx->rdv_slot = hdr.rdv_slot;
    rx->rma_seg = hdr.rma_seg;

    if (hdr.flags & PS__FAB_F_EXT) {
        post_mrecv(van, m);
        if (!ps__fab_ext_len_valid(&hdr, van->limits.max_meta_bytes) ||
            ps_rdma_buf_pool_get(van->pool, hdr.ext_len, &rx->ext) != PS_OK) {
            ps_error(PS_LOG_FABRIC, "node %d announced a %u-byte meta: refused", hdr.sender,
                     hdr.ext_len);
            rx_broken(van, rx, PS_ERR_PROTOCOL);
            return;
        }
        post_ext(van, rx);
        rx_settle(van, rx);
        return;
    }
    ps_status_t st = rx_decode(van, rx, p + sizeof(hdr), len - sizeof(hdr));
    if (st != PS_OK) {
        post_mrecv(van, m);
        rx_broken(van, rx, st);
        return;
    }
    /* Nothing points into the buffer any more; it is posted again after
     * the delivery, at the loop's next idle round: off the path of the
     * answer (a post is ~300 instructions, and at least
     * PS__FAB_META_DEPTH - PS__FAB_MRECV_BATCH others stay posted
     * meanwhile). */
    rx_settle(van, rx);
    defer_mrecv(van, m);
}

/* A part of rx completed with an error. The provider may report it again
 * (rxm of libfabric 1.17 reports a receive that it cancelled when the
 * sender's connection broke twice, both FI_ECANCELED), so rx is not ours to
 * free or reuse any more: it is parked, its message, buffers and
 * registrations kept, on van->rx_all until close frees it after the
 * endpoint. Its sender's link fails (an orphan's was reset already). */
static void rx_park(ps__fab_van_t *van, ps__fab_rx_t *rx)
{
    rx->parked = 1;
    if (!rx->orphan)
        rx_broken(van, rx, PS_ERR_LINK_FAILED);
}

void ps__fab_on_rx_part(ps__fab_van_t *van, ps__fab_op_t *op, int ok)
{
    ps__fab_rx_t *rx = op->owner;
    if (rx->parked) {
        ps_debug(PS_LOG_FABRIC, "a failed receive from node %d reported again", rx->peer->id);
        return;
    }
    rx->waiting--;
    __atomic_sub_fetch(&van->ops_in_flight, 1, __ATOMIC_RELAXED);
    if (!ok) {
        rx_park(van, rx);
        return;
    }
    if (op == &rx->op_data)
        rx_put_mrs(van, rx);
    if (rx->orphan) {
        rx_settle(van, rx);
        return;
    }
    if (op == &rx->op_ext) {
        ps_slice_t ext = rx->ext;
        rx->ext = (ps_slice_t)PS_SLICE_EMPTY_INIT;
        ps_status_t st = rx_decode(van, rx, ps_slice_ptr(&ext), ext.len);
        ps_slice_unref(&ext);
        if (st != PS_OK) {
            rx_broken(van, rx, st);
            return;
        }
    }
    rx_settle(van, rx);
}

void ps__fab_meta_recv_error(ps__fab_van_t *van, ps__fab_mrecv_t *m, int err)
{
    if (!m->posted)
        return; /* reported again (see rx_park); it is not re-posted twice */
    m->posted = 0;
    if (err == FI_ECANCELED)
        return;
    if (err == FI_ETRUNC)
        ps_warn_ratelimited(PS_LOG_FABRIC, "dropped a message larger than a meta buffer (%u "
                            "bytes): a peer of another version?", PS__FAB_META_BUF);
    else
        ps_warn_ratelimited(PS_LOG_FABRIC, "a meta receive failed: %s", ps__fab_strerror(err));
    post_mrecv(van, m);
}

void ps__fab_retry_recvs(ps__fab_van_t *van)
{
    if (van->mrecv_blocked) {
        van->mrecv_blocked = 0;
        for (int i = 0; i < PS__FAB_META_DEPTH; i++) {
            if (!van->mrecv[i].posted && van->mrecv[i].buf.buf != NULL &&
                post_mrecv(van, &van->mrecv[i]) == -FI_EAGAIN)
                break;
        }
    }
    ps__fab_rx_t *list = van->rx_blocked;
    van->rx_blocked = NULL;
    while (list != NULL) {
        ps__fab_rx_t *rx = list;
        list = rx->next_blocked;
        rx->next_blocked = NULL;
        int part = rx->blocked;
        rx->blocked = 0;
        if (!rx->orphan) {
            if (part == PS__FAB_KIND_EXT)
                post_ext(van, rx);
            else
                post_data(van, rx);
        }
        rx_settle(van, rx);
    }
}

/*
 * The completion loop of the ibverbs van (ps/net/van/progress_loop.h): one
 * thread for every device's CQ. It polls while completions come; when none
 * are left it arms the CQs (ibv_req_notify_cq), polls once more to close
 * the race, and sleeps in epoll on the completion channels and the loop's
 * wake-up eventfd. With busy_poll it keeps polling for a while after the
 * last completion before it sleeps, so an idle van never burns a core.
 * (Upstream polled busily for ever, one core per process.)
 *
 * Receives (all through the devices' SRQs):
 *   SEND               an eager message, or a rendezvous control message;
 *   WRITE_WITH_IMM 0   a slave chunk on QP k > 0: counted;
 *   WRITE_WITH_IMM s   the meta of a message written into grant s.
 * With a job secret, a connection whose handshake is not done yet takes
 * nothing but the initiator's proof (auth_rx). A message is decoded (every
 * length checked against the frame limits and the buffer it is in), its
 * data handed over as slices of the receive or granted buffer (no copy), a
 * pull response's values as the worker's own destination. A completion error fails that connection with
 * PS_ERR_LINK_FAILED (the postoffice hears peer_failed); it never aborts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/van/rx.h"
#include "ps/rdma/common/memcheck.h"
#include "ps/rdma/verbs/verbs_internal.h"

#define MAX_EVENTS 16
#define ACK_BATCH 64

/* ---- delivery ---- */

static void deliver(ps__vb_van_t *van, ps__vb_conn_t *conn, ps_msg_t *msg)
{
    msg->meta.sender = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    /* The peer sends once its side is established, which may be before the
     * CM thread has seen ours: table the connection now, so that an answer
     * to this message finds it (and queues until the event). */
    if (!conn->outgoing && msg->meta.sender != PS_NODE_EMPTY &&
        __atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) == PS__VB_C_CONNECTING &&
        ps__vb_peer_add_in(van, conn, msg->meta.sender) != PS_OK) {
        ps_msg_release(msg);
        ps__vb_conn_fail(conn, PS_ERR_NO_MEMORY, "out of memory");
        return;
    }
    ps_van_base_count_recv(&van->base, ps_msg_data_bytes(msg));
    if (van->print_log) {
        char line[192];
        ps_msg_describe(msg, line, sizeof(line));
        ps_info(PS_LOG_RDMA, "received from node %d: %s", msg->meta.sender, line);
    }
    ps_van_base_deliver(&van->base, msg);
}

static void release_held(void *ctx, ps__vb_reorder_item_t *item)
{
    (void)ctx;
    ps__vb_held_t *h = item->arg;
    ps_msg_release(&h->msg);
    free(h);
}

void ps__vb_poll_drop_held(ps__vb_conn_t *conn)
{
    ps__vb_reorder_drain(&conn->reorder, release_held, NULL);
}

static void release_ready(ps__vb_van_t *van, ps__vb_conn_t *conn)
{
    ps__vb_reorder_item_t *item;
    while ((item = ps__vb_reorder_pop(&conn->reorder)) != NULL) {
        ps__vb_held_t *h = item->arg;
        ps_msg_t msg = h->msg;
        free(h);
        deliver(van, conn, &msg);
    }
}

/* Delivers now, or holds the message until its slave chunks are in. */
static void dispatch(ps__vb_van_t *van, ps__vb_conn_t *conn, ps_msg_t *msg, const ps__vb_hdr_t *h)
{
    if (conn->nqp <= 1) {
        deliver(van, conn, msg);
        return;
    }
    ps__vb_held_t *held = malloc(sizeof(*held));
    if (held == NULL) {
        /* Cannot keep order without memory: the connection is unusable. */
        ps_msg_release(msg);
        ps__vb_conn_fail(conn, PS_ERR_NO_MEMORY, "out of memory holding a message");
        return;
    }
    memset(&held->item, 0, sizeof(held->item));
    for (unsigned k = 1; k < conn->nqp; k++)
        held->item.need[k] = h->slave[k];
    held->item.arg = held;
    held->msg = *msg;
    ps__vb_reorder_push(&conn->reorder, &held->item);
    release_ready(van, conn);
}

/* ---- decoding ---- */

/* The pull record a response names, checked against it; NULL if it is not
 * this peer's answer to that request (then nothing is freed). */
static ps__vb_pull_t *take_pull(ps__vb_van_t *van, ps__vb_conn_t *conn, uint32_t slot,
                                const ps_meta_t *meta)
{
    ps__vb_pull_t *pull = ps_rdma_slot_get(van->pulls, slot);
    int peer = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    if (pull == NULL || pull->peer != peer || pull->timestamp != meta->timestamp ||
        pull->app_id != meta->app_id || pull->customer_id != meta->customer_id)
        return NULL;
    return ps_rdma_slot_release(van->pulls, slot);
}

/* Data segment `index` of `meta`, l bytes at region[off]: copied into the
 * buffer the application named for it (cb.recv_buffer; host memory only,
 * the CPU copies: a GPU buffer, named where the van moves GPU memory, is
 * left to the layer above), else a view of the region. The segment came
 * by SEND or into a grant before its meta, so it cannot be placed there
 * directly. */
static ps_status_t land(ps__vb_van_t *van, const ps_meta_t *meta, unsigned index,
                        const ps_slice_t *region, size_t off, uint64_t l, ps_slice_t *seg_p)
{
    ps_slice_t dest;
    if (ps_van_recv_dest(&van->base, meta, index, l, PS_VAN_HOST_COPY, &dest) == PS_OK) {
        memcpy(ps_slice_ptr(&dest), (const uint8_t *)ps_slice_ptr(region) + off, (size_t)l);
        *seg_p = dest;
        return PS_OK;
    }
    return ps_slice_sub(region, off, (size_t)l, seg_p);
}

/*
 * Builds a message from hdr + frame at p[0..len) whose in-buffer segments
 * lie end to end in `region` from `data_off` (capacity `data_cap` bytes),
 * but a steered one (PS__VB_HDR_STEER), which is in the region of `grant`.
 * Every length is checked first. On success *msg holds references on its
 * slices; *h_p gets the header.
 */
static ps_status_t build_msg(ps__vb_van_t *van, ps__vb_conn_t *conn, const uint8_t *p, size_t len,
                             const ps_slice_t *region, uint64_t data_off, uint64_t data_cap,
                             const ps__vb_grant_rec_t *grant, ps_msg_t *msg, ps__vb_hdr_t *h_p,
                             const char **why)
{
    ps__vb_hdr_t h;
    size_t hlen = 0;
    if (ps__vb_hdr_decode(p, len, &h, &hlen) != PS_OK) {
        *why = "bad message header";
        return PS_ERR_PROTOCOL;
    }
    if (h.nqp != conn->nqp) {
        *why = "queue pair count differs from the connection's";
        return PS_ERR_PROTOCOL;
    }
    ps_frame_header_t fh;
    size_t need = 0;
    if (h.frame_len > len - hlen ||
        ps_frame_header_parse(p + hlen, h.frame_len, &van->limits, &fh, &need) != PS_OK ||
        (uint64_t)fh.header_len + fh.meta_len != h.frame_len) {
        *why = "bad frame header";
        return PS_ERR_PROTOCOL;
    }
    if (fh.num_data > PS_MSG_MAX_DATA ||
        ((h.flags & PS__VB_HDR_RMA) && h.rma_seg >= fh.num_data)) {
        *why = "too many data segments";
        return PS_ERR_PROTOCOL;
    }
    unsigned steer_seg = 0;
    const ps_slice_t *steer = NULL;
    if (h.flags & PS__VB_HDR_STEER) {
        if (!ps__vb_grants_steered(grant, &steer_seg, &steer) || h.rma_seg != steer_seg ||
            h.rma_seg >= fh.num_data || fh.data_len[h.rma_seg] > steer->len) {
            *why = "a segment written where no region was granted";
            return PS_ERR_PROTOCOL;
        }
    }
    uint64_t in_len = 0;
    for (unsigned i = 0; i < fh.num_data; i++) {
        if (!((h.flags & (PS__VB_HDR_RMA | PS__VB_HDR_STEER)) && i == h.rma_seg))
            in_len += fh.data_len[i];
    }
    if (in_len > data_cap || (in_len > 0 && region->buf == NULL)) {
        *why = "data larger than its buffer";
        return PS_ERR_PROTOCOL;
    }
    ps_meta_t meta;
    if (ps_van_meta_decode(&van->base, p + hlen + fh.header_len, fh.meta_len,
                           __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE), conn->addr_str,
                           &meta) != PS_OK) {
        *why = "undecodable meta";
        return PS_ERR_PROTOCOL;
    }

    ps_msg_init(msg);
    /* The sender is the one the connection proved (recv_buffer is asked as
     * that one); delivery sets it again, once a hello may have named it. */
    meta.sender = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    if (ps_van_msg_take_meta(msg, &meta, meta.sender) != PS_OK) {
        *why = "out of memory";
        return PS_ERR_NO_MEMORY;
    }

    ps__vb_pull_t *pull = NULL;
    if (h.flags & (PS__VB_HDR_RMA | PS__VB_HDR_PULL_DONE)) {
        pull = take_pull(van, conn, h.rma_slot, &meta);
        if (pull == NULL && (h.flags & PS__VB_HDR_RMA)) {
            ps_msg_release(msg);
            *why = "pull response for a destination this node did not name";
            return PS_ERR_PROTOCOL;
        }
    }
    uint64_t off = data_off;
    msg->num_data = fh.num_data;
    ps_status_t st = PS_OK;
    for (unsigned i = 0; i < fh.num_data && st == PS_OK; i++) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        msg->data[i] = empty;
        uint64_t l = fh.data_len[i];
        if ((h.flags & PS__VB_HDR_RMA) && i == h.rma_seg) {
            if (l > pull->dest.len) {
                *why = "pull response larger than its destination";
                st = PS_ERR_PROTOCOL;
            } else {
                st = ps_slice_sub(&pull->dest, 0, (size_t)l, &msg->data[i]);
                if (ps_slice_mem_kind(&pull->dest) == PS_BUF_MEM_HOST)
                    PS_RDMA_DEVICE_WROTE(ps_slice_ptr(&pull->dest), l);
            }
        } else if (steer != NULL && i == steer_seg) {
            st = ps__vb_steer_land(van, &meta, i, steer, l, &msg->data[i]);
        } else if (l > 0) {
            st = land(van, &meta, i, region, (size_t)off, l, &msg->data[i]);
            off += l;
        }
    }
    ps__vb_pull_free(pull);
    if (st != PS_OK) {
        ps_msg_release(msg);
        if (*why == NULL)
            *why = "bad data segment";
        return PS_ERR_PROTOCOL;
    }

    /* A worker's pull request: remember where the response may go. */
    int peer = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
    if (meta.request && meta.pull && meta.van_data_len != 0 && peer != PS_NODE_EMPTY) {
        ps__vb_pull_desc_t d;
        if (ps__vb_pull_desc_decode(meta.van_data, meta.van_data_len, &d) == PS_OK) {
            ps__vb_pull_desc_t *copy = malloc(sizeof(*copy));
            if (copy != NULL) {
                *copy = d;
                ps_rdma_rdv_key_t key = {peer, meta.app_id, meta.customer_id, meta.timestamp};
                if (ps_rdma_rdv_put(van->dests, &key, copy) != PS_OK)
                    free(copy);
            }
        }
    }
    /* Counted as the sender counts: frame header and meta, then the data
     * at delivery. */
    ps_van_base_count_recv(&van->base, h.frame_len);
    *h_p = h;
    return PS_OK;
}

/* ---- receive handlers ---- */

static void on_ctrl(ps__vb_van_t *van, ps__vb_conn_t *conn, const uint8_t *p, size_t len)
{
    ps__vb_ctrl_t c;
    if (ps__vb_ctrl_decode(p, len, &c) != PS_OK) {
        ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "undecodable rendezvous message");
        return;
    }
    ps__vb_dev_t *dev = conn->dev;
    switch (c.type) {
    case PS__VB_MSG_RDV_START: {
        ps__vb_ctrl_t reply;
        ps__vb_steer_t steer;
        int steered = ps__vb_steer_find(van, conn, &c, &steer);
        ps_status_t st =
            ps__vb_grants_start(dev->grants, conn->serial, &c, steered ? &steer : NULL, &reply);
        if (st != PS_OK && steered) {
            ps__vb_steer_release(dev, steer.handle); /* before the buffer's last reference */
            ps_slice_unref(&steer.dest);
        }
        if (st != PS_OK) {
            ps_warn_ratelimited(PS_LOG_RDMA, "cannot grant %u + %llu bytes to %s (%s); the "
                                "message is refused", c.meta_len,
                                (unsigned long long)c.data_len, conn->addr_str,
                                st == PS_ERR_TOO_LARGE ? "larger than PS_MAX_MESSAGE_BYTES"
                                : st == PS_ERR_NO_RESOURCE
                                    ? "out of registered memory or grant slots "
                                      "(BYTEPS_ADDRESS_POOL_SIZE)"
                                    : ps_status_str(st));
            memset(&reply, 0, sizeof(reply));
            reply.type = PS__VB_MSG_RDV_GRANT;
            reply.flags = PS__VB_RDV_REFUSED;
            reply.token = c.token;
        }
        if (ps__vb_send_ctrl(conn, &reply) != PS_OK && st == PS_OK)
            (void)ps__vb_grants_drop(dev->grants, conn->serial, reply.slot);
        return;
    }
    case PS__VB_MSG_RDV_GRANT:
        ps__vb_on_grant(conn, &c);
        return;
    case PS__VB_MSG_RDV_DROP:
        if (ps__vb_grants_drop(dev->grants, conn->serial, c.slot) != PS_OK)
            ps_debug(PS_LOG_RDMA, "%s gave back a grant it does not hold", conn->addr_str);
        return;
    case PS__VB_MSG_HELLO: {
        if (conn->outgoing) {
            ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "hello on a connection we opened");
            return;
        }
        int old = __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE);
        if (old != PS_NODE_EMPTY && old != c.node_id) {
            ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "the peer announced another node id");
            return;
        }
        __atomic_store_n(&conn->peer_id, c.node_id, __ATOMIC_RELEASE);
        if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) == PS__VB_C_READY) {
            if (ps__vb_peer_add_in(van, conn, c.node_id) == PS_OK && old == PS_NODE_EMPTY)
                ps_info(PS_LOG_RDMA, "node %d announced itself on the connection from %s",
                        c.node_id, conn->addr_str);
        }
        return;
    }
    default:
        return;
    }
}

/* A SEND arrived in rx. Returns 1 if the buffer went to a message (post a
 * fresh one), 0 to repost it as it is. */
static int on_send(ps__vb_van_t *van, ps__vb_conn_t *conn, ps__vb_rx_t *rx, uint32_t len)
{
    const uint8_t *p = ps_slice_ptr(&rx->buf);
    int type = ps__vb_msg_type(p, len);
    if (type != PS__VB_MSG_EAGER) {
        if (type == 0 || type == PS__VB_MSG_META) {
            ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "a SEND that is not a ps message");
            return 0;
        }
        on_ctrl(van, conn, p, len);
        return 0;
    }
    ps__vb_hdr_t h;
    size_t hlen = 0;
    if (ps__vb_hdr_decode(p, len, &h, &hlen) != PS_OK) {
        ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "bad message header");
        return 0;
    }
    uint64_t data_off = (uint64_t)hlen + h.frame_len;
    if (data_off > len) {
        ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "message shorter than its header says");
        return 0;
    }
    ps_msg_t msg;
    const char *why = NULL;
    ps_status_t st = build_msg(van, conn, p, len, &rx->buf, data_off, len - data_off, NULL, &msg,
                               &h, &why);
    if (st != PS_OK) {
        ps__vb_conn_fail(conn, st, why != NULL ? why : "bad message");
        return 0;
    }
    dispatch(van, conn, &msg, &h);
    return 1;
}

static void on_meta(ps__vb_van_t *van, ps__vb_conn_t *conn, uint32_t slot)
{
    ps__vb_dev_t *dev = conn->dev;
    const uint8_t *meta = NULL;
    uint32_t meta_cap = 0;
    uint64_t data_cap = 0;
    ps__vb_grant_rec_t *rec =
        ps__vb_grants_filled(dev->grants, conn->serial, slot, &meta, &meta_cap, &data_cap);
    if (rec == NULL) {
        ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "a meta written into a buffer it does not hold");
        return;
    }
    ps_slice_t view = PS_SLICE_EMPTY_INIT;
    PS_RDMA_DEVICE_WROTE(meta, meta_cap);
    if (data_cap > 0) {
        if (ps__vb_grants_data(dev->grants, rec, &view) != PS_OK) {
            ps__vb_grants_done(dev->grants, rec);
            ps__vb_conn_fail(conn, PS_ERR_NO_MEMORY, "out of memory receiving a message");
            return;
        }
        PS_RDMA_DEVICE_WROTE(ps_slice_ptr(&view), view.len);
    }
    ps_msg_t msg;
    ps__vb_hdr_t h;
    const char *why = NULL;
    ps_status_t st =
        build_msg(van, conn, meta, meta_cap, &view, 0, data_cap, rec, &msg, &h, &why);
    /* The message holds what it needs of the grant; ours goes. */
    if (data_cap > 0)
        ps_slice_unref(&view);
    else
        ps__vb_grants_done(dev->grants, rec);
    if (st != PS_OK) {
        ps__vb_conn_fail(conn, st, why != NULL ? why : "bad message");
        return;
    }
    if (h.type != PS__VB_MSG_META) {
        ps_msg_release(&msg);
        ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "an eager header in a granted buffer");
        return;
    }
    dispatch(van, conn, &msg, &h);
}

/*
 * A receive on a connection whose job-secret handshake is not done. The
 * responder takes the initiator's PROOF, first on QP 0, and nothing else:
 * whatever comes before it is refused unread. The initiator takes nothing:
 * a responder that sends before it has our proof (or whose own proof was
 * wrong) is not a ps node with our secret.
 */
static void auth_rx(ps__vb_van_t *van, ps__vb_conn_t *conn, const ps__vb_qp_t *qp,
                    const struct ibv_wc *wc, ps__vb_rx_t *rx)
{
    if (conn->outgoing) {
        ps_error(PS_LOG_RDMA, "node %d at %s did not prove it holds the job secret; closing",
                 conn->expect_id, conn->addr_str);
        (void)ps__vb_auth_fail(&conn->auth);
        ps__vb_conn_fail(conn, PS_ERR_AUTH, NULL);
        return;
    }
    ps_status_t st = PS_ERR_AUTH;
    if (wc->opcode == IBV_WC_RECV && qp->index == 0)
        st = ps__vb_auth_on_proof(&conn->auth, &van->base.params.auth_key, ps_slice_ptr(&rx->buf),
                                  wc->byte_len);
    if (st == PS_OK) {
        ps_debug(PS_LOG_RDMA, "connection from %s proved the job secret", conn->addr_str);
        if (ps__vb_auth_gate(&conn->auth, PS__VB_AUTH_GATE_PROVED))
            ps__vb_conn_ready(conn);
        return;
    }
    if (st == PS_ERR_BAD_STATE && ps__vb_auth_state(&conn->auth) == PS__VB_AUTH_FAILED)
        return; /* refused already (its deadline) */
    ps__vb_conn_refuse(conn, "it does not hold the job secret");
}

static void fail_by_qp(ps__vb_van_t *van, uint32_t qp_num, enum ibv_wc_status status)
{
    ps__vb_qp_t *qp = ps__vb_qp_lookup(van, qp_num);
    if (qp == NULL)
        return;
    ps__vb_conn_t *conn = qp->conn;
    if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) != PS__VB_C_FAILED) {
        char what[160];
        snprintf(what, sizeof(what), "completion error %s on queue pair 0x%x",
                 ibv_wc_status_str(status), qp_num);
        ps__vb_conn_fail(conn, PS_ERR_LINK_FAILED, what);
    }
    ps__vb_conn_unref(conn);
}

static void handle_wc(ps__vb_van_t *van, ps__vb_dev_t *dev, const struct ibv_wc *wc)
{
    ps__vb_wr_t *w = (ps__vb_wr_t *)(uintptr_t)wc->wr_id;
    int stopping = __atomic_load_n(&van->stop, __ATOMIC_ACQUIRE);
    if (w == NULL) {
        /* An unsignaled write: its completion only comes on error. */
        if (wc->status != IBV_WC_SUCCESS && wc->status != IBV_WC_WR_FLUSH_ERR)
            fail_by_qp(van, wc->qp_num, wc->status);
        return;
    }
    if (__atomic_load_n(&w->kind, __ATOMIC_ACQUIRE) == PS__VB_WR_TX) {
        ps__vb_txwc_t *txwc = (ps__vb_txwc_t *)w;
        ps__vb_conn_t *conn = txwc->tx->conn;
        ps__vb_conn_ref(conn);
        if (wc->status != IBV_WC_SUCCESS &&
            __atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) != PS__VB_C_FAILED) {
            char what[160];
            snprintf(what, sizeof(what), "send completion error %s on queue pair 0x%x",
                     ibv_wc_status_str(wc->status), wc->qp_num);
            ps__vb_conn_fail(conn, PS_ERR_LINK_FAILED, what);
        }
        ps__vb_tx_complete(txwc, wc->status == IBV_WC_SUCCESS);
        ps__vb_conn_unref(conn);
        return;
    }
    ps__vb_rx_t *rx = (ps__vb_rx_t *)w;
    if (wc->status != IBV_WC_SUCCESS) {
        if (wc->status != IBV_WC_WR_FLUSH_ERR)
            fail_by_qp(van, wc->qp_num, wc->status);
        if (!stopping)
            (void)ps__vb_rx_post(dev, rx, 0);
        return;
    }
    ps__vb_qp_t *qp = ps__vb_qp_lookup(van, wc->qp_num);
    if (qp == NULL) {
        ps_debug(PS_LOG_RDMA, "a receive for queue pair 0x%x, already gone; dropped", wc->qp_num);
        (void)ps__vb_rx_post(dev, rx, 0);
        return;
    }
    ps__vb_conn_t *conn = qp->conn;
    int fresh = 0;
    if (wc->opcode == IBV_WC_RECV)
        PS_RDMA_DEVICE_WROTE(ps_slice_ptr(&rx->buf), wc->byte_len);
    if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) != PS__VB_C_FAILED && conn->auth_on &&
        ps__vb_auth_state(&conn->auth) != PS__VB_AUTH_DONE) {
        auth_rx(van, conn, qp, wc, rx);
    } else if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) != PS__VB_C_FAILED) {
        switch (wc->opcode) {
        case IBV_WC_RECV:
            fresh = on_send(van, conn, rx, wc->byte_len);
            break;
        case IBV_WC_RECV_RDMA_WITH_IMM: {
            uint32_t slot = 0;
            if (ps__vb_imm_decode(wc->imm_data, &slot) == PS__VB_IMM_SLAVE) {
                if (ps__vb_reorder_slave(&conn->reorder, qp->index) != PS_OK)
                    ps__vb_conn_fail(conn, PS_ERR_PROTOCOL, "a slave chunk on queue pair 0");
                else
                    release_ready(van, conn);
            } else {
                on_meta(van, conn, slot);
            }
            break;
        }
        default:
            ps_warn_ratelimited(PS_LOG_RDMA, "unexpected receive completion opcode %d from %s",
                                (int)wc->opcode, conn->addr_str);
            break;
        }
    }
    (void)ps__vb_rx_post(dev, rx, fresh);
    ps__vb_conn_unref(conn);
}

/* ---- the thread ---- */

static int poll_cqs(ps__vb_van_t *van, struct ibv_wc *wcs)
{
    int did = 0;
    int ndevs = __atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE);
    for (int i = 0; i < ndevs; i++) {
        ps__vb_dev_t *dev = van->devs[i];
        int n = ibv_poll_cq(dev->cq, PS__VB_POLL_BATCH, wcs);
        if (n < 0) {
            ps_error(PS_LOG_RDMA, "%s: ibv_poll_cq failed (%d)", dev->name, n);
            continue;
        }
        PS_RDMA_DEVICE_WROTE(wcs, (size_t)n * sizeof(*wcs));
        for (int j = 0; j < n; j++)
            handle_wc(van, dev, &wcs[j]);
        did += n;
        if (dev->rx_missing > 0) {
            /* Buffers that could not be replaced earlier. */
            dev->rx_missing = 0;
            for (uint32_t k = 0; k < dev->srq_depth; k++) {
                if (dev->rx[k].buf.buf == NULL)
                    (void)ps__vb_rx_post(dev, &dev->rx[k], 1);
            }
        }
    }
    return did;
}

static void send_regrants(ps__vb_van_t *van)
{
    int ndevs = __atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE);
    for (int i = 0; i < ndevs; i++) {
        ps__vb_dev_t *dev = van->devs[i];
        uint64_t owners[32];
        ps__vb_ctrl_t msgs[32];
        size_t n;
        while ((n = ps__vb_grants_take_regrants(dev->grants, owners, msgs, 32)) > 0) {
            for (size_t j = 0; j < n; j++) {
                ps__vb_conn_t *c = ps__vb_conn_by_serial(van, owners[j]);
                /* A region the application no longer names is not offered
                 * again: the sender then asks for a grant without it. */
                if (c != NULL && (msgs[j].flags & PS__VB_RDV_STEER) &&
                    !ps__vb_steer_still_named(van, c, &msgs[j]) &&
                    ps__vb_grants_unsteer(dev->grants, owners[j], msgs[j].slot) == PS_OK)
                    msgs[j].flags &= (uint8_t)~PS__VB_RDV_STEER;
                ps_status_t st = c != NULL ? ps__vb_send_ctrl(c, &msgs[j]) : PS_ERR_PEER_GONE;
                if (st != PS_OK)
                    (void)ps__vb_grants_drop(dev->grants, owners[j], msgs[j].slot);
                ps__vb_conn_unref(c);
            }
        }
    }
}

/* Returns 1 if some connection is still blocked. */
static int kick_blocked(ps__vb_van_t *van)
{
    pthread_mutex_lock(&van->blocked_lock);
    ps__vb_conn_t *list = van->blocked;
    van->blocked = NULL;
    for (ps__vb_conn_t *c = list; c != NULL; c = c->next_blocked)
        c->blocked = 0;
    pthread_mutex_unlock(&van->blocked_lock);
    while (list != NULL) {
        ps__vb_conn_t *c = list;
        list = c->next_blocked;
        c->next_blocked = NULL;
        ps__vb_conn_kick(c);
        ps__vb_conn_unref(c);
    }
    pthread_mutex_lock(&van->blocked_lock);
    int more = van->blocked != NULL;
    pthread_mutex_unlock(&van->blocked_lock);
    return more;
}

static void drain_events(ps__vb_van_t *van, struct epoll_event *evs, int n)
{
    for (int i = 0; i < n; i++) {
        ps__vb_dev_t *dev = evs[i].data.ptr;
        if (dev == NULL) {
            ps_van_loop_clear_wake(&van->loop);
            continue;
        }
        struct ibv_cq *cq;
        void *ctx;
        while (ibv_get_cq_event(dev->channel, &cq, &ctx) == 0) {
            if (++dev->cq_unacked >= ACK_BATCH) {
                ibv_ack_cq_events(dev->cq, dev->cq_unacked);
                dev->cq_unacked = 0;
            }
        }
    }
}

static int vb_poll(void *arg, unsigned budget)
{
    ps__vb_van_t *van = arg;
    (void)budget; /* PS__VB_POLL_BATCH per CQ */
    struct ibv_wc wcs[PS__VB_POLL_BATCH];
    int did = poll_cqs(van, wcs);
    send_regrants(van);
    van->poll_blocked = kick_blocked(van);
    return did;
}

/* Arm, then look once more: a completion between the last poll and the
 * arming would otherwise wait for the next one. */
static int vb_arm(void *arg, int64_t *timeout_ns_p)
{
    ps__vb_van_t *van = arg;
    struct ibv_wc wcs[PS__VB_POLL_BATCH];
    int ndevs = __atomic_load_n(&van->ndevs, __ATOMIC_ACQUIRE);
    for (int i = 0; i < ndevs; i++)
        (void)ibv_req_notify_cq(van->devs[i]->cq, 0);
    if (poll_cqs(van, wcs) > 0)
        return PS_VAN_LOOP_BUSY;
    int timeout_ms = van->poll_blocked ? 1 : -1;
    for (int i = 0; i < ndevs && timeout_ms < 0; i++) {
        if (van->devs[i]->rx_missing > 0)
            timeout_ms = 100;
    }
    *timeout_ns_p = timeout_ms < 0 ? -1 : (int64_t)timeout_ms * (int64_t)PS_NSEC_PER_MSEC;
    return PS_VAN_LOOP_SLEEP;
}

/* The sleep: epoll on the completion channels (whose events are acked)
 * and the wake eventfd. 0: the CQs still want a poll. */
static int vb_wait(void *arg, int64_t timeout_ns)
{
    ps__vb_van_t *van = arg;
    struct epoll_event evs[MAX_EVENTS];
    int n = ps_van_epoll_wait(van->poll_epfd, evs, MAX_EVENTS, timeout_ns, PS_LOG_RDMA);
    drain_events(van, evs, n);
    return 0;
}

static int64_t vb_outstanding(void *arg, uint64_t *moved_p)
{
    ps__vb_van_t *van = arg;
    *moved_p = 0; /* the count itself says when sends complete */
    return __atomic_load_n(&van->queued, __ATOMIC_ACQUIRE);
}

static const ps_van_loop_ops_t vb_loop_ops = {
    .size = sizeof(ps_van_loop_ops_t),
    .poll = vb_poll,
    .arm = vb_arm,
    .wait = vb_wait,
    .outstanding = vb_outstanding,
};

ps_status_t ps__vb_poll_start(ps__vb_van_t *van)
{
    const ps_van_loop_params_t lp = {
        .thread_name = "ps-rdma-cq",
        .log = PS_LOG_RDMA,
        .busy_poll = van->base.params.busy_poll,
        .yield_every = 1, /* spinning only with busy polling: yield every round */
    };
    ps_status_t st = ps_van_loop_init(&van->loop, &lp, &vb_loop_ops, van);
    if (st != PS_OK)
        return st;
    /* A waiting thread may poll the CQs itself (the progress op): what
     * vb_poll touches is the loop's, under its lock. */
    van->base.handle.loop = &van->loop;
    st = ps_van_loop_epoll_open(&van->loop, NULL, PS_LOG_RDMA, &van->poll_epfd);
    if (st != PS_OK)
        return st;
    return ps_van_loop_start(&van->loop, NULL, 0);
}

ps_status_t ps__vb_poll_add_dev(ps__vb_van_t *van, ps__vb_dev_t *dev)
{
    if (ps_van_epoll_ctl(van->poll_epfd, EPOLL_CTL_ADD, dev->channel->fd, EPOLLIN, dev) != 0) {
        ps_error(PS_LOG_RDMA, "%s: epoll_ctl for the completion channel: %m", dev->name);
        return PS_ERR_NO_RESOURCE;
    }
    return PS_OK;
}

ps_status_t ps__vb_poll_stop(ps__vb_van_t *van)
{
    if (van->loop.wakefd < 0)
        return PS_OK;
    return ps_van_loop_stop(&van->loop);
}

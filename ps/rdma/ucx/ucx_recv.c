/*
 * The receive side of the UCX van (progress thread only).
 *
 * META messages are active messages. Their handler (inside
 * ucp_worker_progress) reads the header: its cookie names the connection,
 * hence the sender, when its sequence number is the one expected next on
 * that connection (else the message is not the connection's peer's:
 * ucx_internal.h). It queues the connection's receive record, and copies
 * an eager message into the spare staging block (the last block nobody
 * else holds, kept for the next message) when that is free and large
 * enough: the common case, after which UCX reuses its buffer at once.
 * Otherwise it keeps UCX's descriptor (UCS_INPROGRESS), or a copy of its
 * own when UCX has none (data valid only during the call), and right
 * after ucp_worker_progress() returns the progress thread copies it into
 * a staging block of the buffer pool (whose lock the handler must not
 * take) and gives the descriptor back; a rendezvous message is received
 * into such a block (ucp_am_recv_data_nbx). Measured per message over
 * shared memory (callgrind): UCX's handler + ours + the taking afterwards
 * ~340 instructions this way; ~470 when every message kept its descriptor
 * (UCX then replaces the buffer, and ucp_am_data_release); the probe and
 * tagged receive before ~740. Then the frame is decoded. Small
 * segments are in the staging buffer: they are handed on as slices of it,
 * or copied where the postoffice wants them. Every larger segment follows
 * as a DATA message whose tag the receiver knows (cookie, sequence number,
 * segment index); it is received straight into the buffer recv_buffer()
 * names — a pull response lands in the worker's own buffer — or a block
 * of the van's buffer pool (ps/rdma/common/buf_pool.h). A pool block for
 * a segment above PS_RECV_PREALLOC_BYTES is allocated only once UCX has
 * matched its DATA message (ucp_tag_probe_nb), never on the META's word
 * alone: a peer that announces a big segment and sends nothing pins
 * nothing.
 *
 * Messages of one connection are delivered in the order they were sent
 * (the order META messages arrive in), whatever order their DATA messages
 * complete in. Every length is checked by the frame parser before anything
 * is allocated; a broken frame closes the connection with one log line.
 */
#include <stdlib.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/net/van/rx.h"
#include "ps/rdma/common/buf_pool.h"
#include "ps/rdma/ucx/ucx_internal.h"

/* Largest staging block kept as the spare (van->rx_spare). */
#define RX_SPARE_MAX (64u * 1024u)
/* Receive records kept for reuse: a record is larger than glibc's
 * per-thread cache serves, and calloc() of one was a measurable part of a
 * small message's cost. */
#define RX_FREE_MAX 256
/* What rx->am_data is (rx->am_kind): UCX's eager descriptor, a rendezvous
 * one, or a copy of our own (malloc). */
#define AM_DESC 0
#define AM_RNDV 1
#define AM_HEAP 2

static void rx_mark(ps__ucx_rx_t *rx)
{
    if (!rx->ready_queued) {
        rx->ready_queued = 1;
        rx->next_ready = rx->van->rx_ready;
        rx->van->rx_ready = rx;
    }
}

static void rx_req_done(ps__ucx_rx_t *rx, void *request, ucs_status_t status)
{
    unsigned i = 0;
    while (i < 1 + PS_MSG_MAX_DATA && rx->reqs[i] != request) {
        ++i;
    }
    if (i < 1 + PS_MSG_MAX_DATA) {
        rx->reqs[i] = NULL;
    } else if (rx->posting) {
        rx->done_in_post = request; /* the one being posted, not in `reqs` yet */
    }
    rx->outstanding--;
    if (status != UCS_OK && rx->status == PS_OK) {
        rx->status = status == UCS_ERR_MESSAGE_TRUNCATED ? PS_ERR_PROTOCOL : ps__ucx_status(status);
    }
}

static void on_meta(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    ps__ucx_rx_t *rx = user_data;
    (void)info;
    rx_req_done(rx, request, status);
    ucp_request_free(request);
    if (status == UCS_OK) {
        rx->meta_done = 1;
    }
    if (!rx->posting) {
        rx_mark(rx);
    }
}

static void on_data(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    ps__ucx_rx_t *rx = user_data;
    (void)info;
    rx_req_done(rx, request, status);
    ucp_request_free(request);
    if (!rx->posting) {
        rx_mark(rx);
    }
}

/* After a ucp_tag_*recv_nbx() call: 1 when its callback already ran
 * inside it (the request, if returned, is gone). */
static int rx_posted(ps__ucx_rx_t *rx)
{
    int ran = rx->done_in_post != NULL;
    rx->posting = 0;
    rx->done_in_post = NULL;
    return ran;
}

/* The staging block of a receive that is done with it: kept as the spare
 * when nobody else holds it (the postoffice let go of every slice of it
 * or never took one; ps_buf_refcount()'s acquire pairs with their
 * releasing unref, so their reads of it are over before it is written
 * again), else unreferenced. */
static void staging_put(ps__ucx_van_t *van, ps_slice_t *staging)
{
    ps_buf_t *buf = staging->buf;
    if (buf != NULL && van->rx_spare.buf == NULL && ps_buf_length(buf) <= RX_SPARE_MAX &&
        ps_buf_refcount(buf) == 1) {
        van->rx_spare.buf = buf;
        van->rx_spare.off = 0;
        van->rx_spare.len = ps_buf_length(buf);
        staging->buf = NULL;
        staging->off = staging->len = 0;
        return;
    }
    ps_slice_unref(staging);
}

/* A staging block of at least `len` (> 0) bytes: the spare, else the pool's. */
static ps_status_t staging_get(ps__ucx_van_t *van, size_t len, ps_slice_t *slice_p)
{
    if (van->rx_spare.buf != NULL && len <= van->rx_spare.len) {
        *slice_p = van->rx_spare;
        slice_p->len = len;
        van->rx_spare.buf = NULL;
        van->rx_spare.len = 0;
        return PS_OK;
    }
    return ps_rdma_buf_pool_get(van->pool, len, slice_p);
}

static void rx_unprobe(ps__ucx_van_t *van, ps__ucx_rx_t *rx);

static void rx_free(ps__ucx_van_t *van, ps__ucx_rx_t *rx)
{
    rx_unprobe(van, rx);
    if (rx->prev_all != NULL) {
        rx->prev_all->next_all = rx->next_all;
    } else {
        van->rx_all = rx->next_all;
    }
    if (rx->next_all != NULL) {
        rx->next_all->prev_all = rx->prev_all;
    }
    ps_msg_release(&rx->msg);
    staging_put(van, &rx->staging);
    if (rx->conn != NULL) {
        ps__ucx_conn_unref(rx->conn);
    }
    if (van->rx_free_count < RX_FREE_MAX) {
        rx->next = van->rx_free;
        van->rx_free = rx;
        van->rx_free_count++;
    } else {
        free(rx);
    }
}

/* A cleared receive record. Its message is releasable (no data, no
 * nodes); the meta is left as it is: rx_parse decodes into it, and
 * nothing reads it before. */
static ps__ucx_rx_t *rx_alloc(ps__ucx_van_t *van)
{
    ps__ucx_rx_t *rx = van->rx_free;
    if (rx != NULL) {
        van->rx_free = rx->next;
        van->rx_free_count--;
    } else {
        rx = malloc(sizeof(*rx));
        if (rx == NULL) {
            return NULL;
        }
    }
    memset(rx, 0, offsetof(ps__ucx_rx_t, msg));
    memset((uint8_t *)&rx->msg + sizeof(rx->msg.meta), 0, sizeof(rx->msg) - sizeof(rx->msg.meta));
    return rx;
}

static void on_meta_am(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    on_meta(request, status, NULL, user_data);
}

/* Gives back the META message's data the handler kept: to UCX (for a
 * rendezvous one, UCX then tells the sender), or to the heap. */
static void am_data_release(ps__ucx_rx_t *rx, void *data)
{
    if (rx->am_kind == AM_HEAP) {
        free(data);
    } else {
        ucp_am_data_release(rx->worker, data);
    }
}

/* Takes the META message's data the handler kept: an eager one is copied
 * into a staging block and UCX's descriptor given back; a rendezvous one
 * is received into the block. Moves the receive on (rx_mark) unless a
 * receive request is in flight. */
static void am_take_one(ps__ucx_van_t *van, ps__ucx_rx_t *rx)
{
    void *data = rx->am_data;
    size_t len = rx->staging_len;
    rx->am_data = NULL;
    if (data == NULL) {
        rx_mark(rx); /* refused in the handler (status set), or copied there */
        return;
    }
    if (staging_get(van, len != 0 ? len : 1, &rx->staging) != PS_OK) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        rx->staging = empty;
        rx->status = PS_ERR_NO_MEMORY;
        am_data_release(rx, data);
        rx_mark(rx);
        return;
    }
    if (rx->am_kind != AM_RNDV) {
        memcpy(ps_slice_ptr(&rx->staging), (const uint8_t *)data + rx->am_skip, len);
        am_data_release(rx, data);
        rx->meta_done = 1;
        rx_mark(rx);
        return;
    }
    ucp_request_param_t param;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = on_meta_am;
    param.user_data = rx;
    rx->outstanding = 1;
    rx->posting = 1;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(rx->worker, data, ps_slice_ptr(&rx->staging), len,
                                              &param);
    if (rx_posted(rx)) {
        rx_mark(rx); /* completed inside the call */
        return;
    }
    if (UCS_PTR_IS_PTR(r)) {
        rx->reqs[0] = r;
        return;
    }
    rx->outstanding = 0;
    if (UCS_PTR_IS_ERR(r)) {
        if (rx->status == PS_OK) {
            rx->status = ps__ucx_status(UCS_PTR_STATUS(r));
        }
    } else {
        rx->meta_done = 1;
    }
    rx_mark(rx);
}

int ps__ucx_am_take(ps__ucx_van_t *van)
{
    int n = 0;
    while (van->am_head != NULL) {
        ps__ucx_rx_t *rx = van->am_head;
        van->am_head = rx->next_am;
        rx->next_am = NULL;
        am_take_one(van, rx);
        n++;
    }
    van->am_tail = NULL;
    return n;
}

ucs_status_t ps__ucx_am_meta(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    const struct ps__ucx_am_arg *a = arg;
    ps__ucx_van_t *van = a->van;
    ps_stage_found();
    /* The tag is the header, or, in a small eager message, its first
     * bytes (ucx_send.c says why). */
    ucp_tag_t tag;
    uint32_t skip = 0;
    if (header_length == PS__UCX_AM_META_HDR) {
        tag = ps_get_le64(header);
    } else if (header_length == 0 && !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
               length >= PS__UCX_AM_META_HDR) {
        tag = ps_get_le64(data);
        skip = PS__UCX_AM_META_HDR;
        length -= skip;
    } else {
        ps_warn_ratelimited(PS_LOG_UCX, "message with a %zu-byte header; dropped", header_length);
        return UCS_OK;
    }
    const uint8_t *payload = (const uint8_t *)data + skip;
    uint32_t cookie = ps__ucx_tag_cookie(tag);
    uint64_t seq = ps__ucx_tag_seq(tag);
    ps__ucx_conn_t *conn = ps__ucx_conn_lookup(van, cookie);
    if (conn == NULL || conn->state == PS__UCX_DEAD) {
        ps_warn_ratelimited(PS_LOG_UCX, "message for an unknown connection (cookie %u); "
                            "dropped", cookie);
        return UCS_OK; /* a rendezvous one: UCX completes the sender's send */
    }
    if (conn->rx_broken) {
        return UCS_OK; /* out of order before: the connection is failing */
    }
    ps_status_t why = PS_OK;
    if (seq != conn->rx_seq) {
        uint64_t ahead = (seq - conn->rx_seq) & PS__UCX_SEQ_MASK;
        if (ahead == 0 || ahead > PS__UCX_ORDER_WINDOW) {
            /* Not the connection's peer (it sends in order): not to be
             * attributed, and no reason to close the connection it names. */
            ps_warn_ratelimited(PS_LOG_UCX, "message naming the connection from %s out of "
                                "sequence; dropped", conn->addr_str);
            return UCS_OK;
        }
        /* Just ahead: what UCX overtaking one of the peer's messages would
         * look like (ucx_internal.h, "Order"). Never delivered out of
         * order, never lost silently: the connection fails once the
         * messages before this one are delivered. */
        ps_error(PS_LOG_UCX, "message from %s arrived out of order (%llu ahead of the one "
                 "expected); closing the connection", conn->addr_str, (unsigned long long)ahead);
        conn->rx_broken = 1;
        why = PS_ERR_PROTOCOL;
    } else {
        conn->rx_seq = (conn->rx_seq + 1) & PS__UCX_SEQ_MASK;
    }
    if (why == PS_OK && !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && length != 0 &&
        payload[0] == PS_LANE_MAGIC && length <= PS_LANE_MAX_BYTES && conn->rx_head == NULL &&
        van->lane_n < PS__UCX_LANE_SLOTS) {
        /* A lane message with nothing of its connection ahead of it: no
         * receive record, delivered after this progress call. */
        struct ps__ucx_lane_slot *slot = &van->lane[van->lane_n++];
        slot->sender = conn->peer_id;
        slot->len = (uint32_t)length;
        memcpy(slot->bytes, payload, length);
        return UCS_OK;
    }
    ps__ucx_rx_t *rx = rx_alloc(van);
    if (rx == NULL) {
        /* Cannot happen short of memory exhaustion; the connection cannot
         * go on without this message. */
        ps_error(PS_LOG_UCX, "out of memory receiving a message from %s; its later messages "
                 "are dropped", conn->addr_str);
        conn->rx_broken = 1;
        return UCS_OK;
    }
    rx->van = van;
    rx->worker = a->worker;
    rx->tag = tag;
    rx->staging_len = length;
    rx->status = why;
    rx->next_all = van->rx_all;
    if (van->rx_all != NULL) {
        van->rx_all->prev_all = rx;
    }
    van->rx_all = rx;
    rx->conn = ps__ucx_conn_ref(conn);
    if (conn->rx_tail != NULL) {
        conn->rx_tail->next = rx;
    } else {
        conn->rx_head = rx;
    }
    conn->rx_tail = rx;
    if (van->am_tail != NULL) {
        van->am_tail->next_am = rx;
    } else {
        van->am_head = rx;
    }
    van->am_tail = rx;
    if (why == PS_OK && length > van->limits.max_message_bytes) {
        ps_error(PS_LOG_UCX, "a %zu-byte message from %s exceeds the limit of %llu bytes "
                 "(PS_MAX_MESSAGE_BYTES); closing the connection", length, conn->addr_str,
                 (unsigned long long)van->limits.max_message_bytes);
        rx->status = PS_ERR_TOO_LARGE;
        conn->rx_broken = 1;
    }
    if (rx->status != PS_OK) {
        return UCS_OK; /* UCX drops the data */
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        rx->am_data = data; /* received by ps__ucx_am_take() */
        rx->am_kind = AM_RNDV;
        return UCS_INPROGRESS;
    }
    if (van->rx_spare.buf != NULL && length != 0 && length <= van->rx_spare.len) {
        /* The common case: into the spare staging block at once (no lock),
         * and UCX reuses its buffer. */
        rx->staging = van->rx_spare;
        rx->staging.len = length;
        van->rx_spare.buf = NULL;
        van->rx_spare.len = 0;
        memcpy(ps_slice_ptr(&rx->staging), payload, length);
        rx->meta_done = 1;
        return UCS_OK;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        rx->am_data = data; /* UCX's descriptor: copied by ps__ucx_am_take() */
        rx->am_kind = AM_DESC;
        rx->am_skip = skip;
        return UCS_INPROGRESS;
    }
    /* Valid only during the call, and a staging block would be the
     * buffer pool's (its lock): a copy of our own until then. */
    rx->am_data = malloc(length != 0 ? length : 1);
    if (rx->am_data == NULL) {
        rx->status = PS_ERR_NO_MEMORY;
        return UCS_OK;
    }
    memcpy(rx->am_data, payload, length);
    rx->am_kind = AM_HEAP;
    return UCS_OK;
}

/* Where segment `i` lands: the postoffice's buffer, else a new one (else,
 * with `defer`, for a segment above PS_RECV_PREALLOC_BYTES: PS_INPROGRESS,
 * none yet). */
static ps_status_t seg_dest(ps__ucx_van_t *van, ps__ucx_rx_t *rx, unsigned i, uint64_t len,
                            int defer, ps_slice_t *slice_p)
{
    if (rx->conn != NULL &&
        ps_van_recv_dest(&van->base, &rx->msg.meta, i, len, van->device_kinds, slice_p) == PS_OK) {
        return PS_OK;
    }
    if (defer && len > van->prealloc) {
        return PS_INPROGRESS;
    }
    /* A pooled block: a value pushed again and again reuses it. */
    return ps_rdma_buf_pool_get(van->pool, len, slice_p);
}

/* Posts the receive of segment i's DATA message into rx->msg.data[i]; of
 * `matched` (a probed message) when not NULL. */
static void post_data(ps__ucx_van_t *van, ps__ucx_rx_t *rx, unsigned i, ucp_tag_message_h matched)
{
    ucp_tag_t tag = ps__ucx_tag(PS__UCX_KIND_DATA, ps__ucx_tag_cookie(rx->tag),
                                ps__ucx_tag_seq(rx->tag), i);
    ucp_request_param_t param;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv = on_data;
    param.user_data = rx;
    if (ps_slice_mem_kind(&rx->msg.data[i]) == PS_BUF_MEM_CUDA) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        param.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    rx->outstanding++;
    rx->posting = 1;
    void *ptr = rx->msg.data[i].buf != NULL ? ps_slice_ptr(&rx->msg.data[i]) : NULL;
    ucs_status_ptr_t r =
        matched != NULL
            ? ucp_tag_msg_recv_nbx(rx->worker, ptr, rx->msg.data[i].len, matched, &param)
            : ucp_tag_recv_nbx(rx->worker, ptr, rx->msg.data[i].len, tag, UINT64_MAX, &param);
    if (rx_posted(rx)) {
        return; /* completed inside the call: rx_advance(), parsing this receive, sees it */
    }
    if (UCS_PTR_IS_PTR(r)) {
        rx->reqs[1 + i] = r;
        return;
    }
    rx->outstanding--;
    if (UCS_PTR_IS_ERR(r) && rx->status == PS_OK) {
        rx->status = ps__ucx_status(UCS_PTR_STATUS(r));
    }
}

/* An announced node id on an accepted connection. */
static ps_status_t rx_hello(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int id)
{
    if (conn->outgoing) {
        return PS_OK; /* we know whom we connected to */
    }
    if (id <= 0 || id >= PS_NODE_EMPTY) {
        ps_error(PS_LOG_UCX, "connection from %s announced node id %d; closing", conn->addr_str,
                 id);
        return PS_ERR_PROTOCOL;
    }
    if (conn->peer_id == id) {
        return PS_OK;
    }
    if (conn->peer_id != PS_NODE_EMPTY) {
        ps_error(PS_LOG_UCX, "connection from %s re-announced itself as node %d after node %d; "
                 "closing", conn->addr_str, id, conn->peer_id);
        return PS_ERR_PROTOCOL;
    }
    if (!ps__ucx_may_claim(van, conn, id, conn->nonce)) {
        ps_error(PS_LOG_UCX, "connection from %s claims node id %d, which it may not; closing",
                 conn->addr_str, id);
        return PS_ERR_PROTOCOL;
    }
    ps_status_t st = ps__ucx_peer_add_in(van, conn, id);
    if (st != PS_OK) {
        return st;
    }
    ps_info(PS_LOG_UCX, "connection from %s is node %d", conn->addr_str, id);
    return PS_OK;
}

/* Decodes the META message and sets up every segment. */
static void rx_parse(ps__ucx_van_t *van, ps__ucx_rx_t *rx)
{
    rx->parsed = 1;
    const uint8_t *buf = ps_slice_ptr(&rx->staging);
    size_t len = rx->staging_len;
    const char *from = rx->conn != NULL ? rx->conn->addr_str : "an unknown sender";
    if (len != 0 && buf[0] == PS_LANE_MAGIC) {
        /* A lane message behind a receive of its connection: as it is. */
        if (len > PS_LANE_MAX_BYTES || ps__ucx_tag_low(rx->tag) != 0) {
            ps_error(PS_LOG_UCX, "bad lane message from %s (%zu bytes); closing the connection",
                     from, len);
            rx->status = PS_ERR_PROTOCOL;
        }
        rx->lane = 1;
        return;
    }
    ps_frame_header_t hdr;
    size_t need = 0;
    ps_status_t st = ps_frame_header_parse(buf, len, &van->limits, &hdr, &need);
    if (st != PS_OK || hdr.num_data > PS_MSG_MAX_DATA ||
        (size_t)hdr.header_len + hdr.meta_len > len) {
        ps_error(PS_LOG_UCX, "bad frame from %s (%s); closing the connection", from,
                 st == PS_OK ? "too many segments or short" : ps_status_str(st));
        rx->status = st == PS_ERR_TOO_LARGE ? PS_ERR_TOO_LARGE : PS_ERR_PROTOCOL;
        return;
    }
    unsigned sep = ps__ucx_tag_low(rx->tag);
    uint64_t inline_total = 0;
    for (unsigned i = 0; i < PS_MSG_MAX_DATA; ++i) {
        if ((sep & (1u << i)) && (i >= hdr.num_data || hdr.data_len[i] == 0)) {
            rx->status = PS_ERR_PROTOCOL;
        }
        if (i < hdr.num_data && !(sep & (1u << i))) {
            inline_total += hdr.data_len[i];
        }
    }
    if (rx->status != PS_OK || (uint64_t)hdr.header_len + hdr.meta_len + inline_total != len) {
        ps_error(PS_LOG_UCX, "frame from %s does not match its message (%zu bytes); closing the "
                 "connection", from, len);
        rx->status = PS_ERR_PROTOCOL;
        return;
    }
    ps_msg_t *m = &rx->msg;
    st = ps_van_meta_decode(&van->base, buf + hdr.header_len, hdr.meta_len,
                            rx->conn != NULL ? rx->conn->peer_id : PS_NODE_EMPTY, from, &m->meta);
    if (st != PS_OK) {
        rx->status = st;
        return;
    }
    if (ps__ucx_is_hello(&m->meta)) {
        rx->hello = 1;
        if (hdr.num_data != 0) {
            rx->status = PS_ERR_PROTOCOL;
        } else if (rx->conn != NULL) {
            rx->status = rx_hello(van, rx->conn, m->meta.sender);
        }
        return;
    }
    if (ps__ucx_is_bye(&m->meta)) {
        rx->bye = 1;
        rx->status = hdr.num_data != 0 ? PS_ERR_PROTOCOL : PS_OK;
        return;
    }

    /* Who sent it is who the connection proved to be, never the wire. */
    ps_status_t own = ps_van_msg_take_meta(m, &m->meta,
                                           rx->conn != NULL ? rx->conn->peer_id : PS_NODE_EMPTY);
    if (own != PS_OK) {
        rx->status = own;
        return;
    }
    m->num_data = hdr.num_data;
    size_t off = (size_t)hdr.header_len + hdr.meta_len;
    for (unsigned i = 0; i < hdr.num_data; ++i) {
        uint64_t slen = hdr.data_len[i];
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        m->data[i] = empty;
        if (slen == 0) {
            continue;
        }
        if (sep & (1u << i)) {
            st = seg_dest(van, rx, i, slen, 1, &m->data[i]);
            if (st == PS_INPROGRESS) {
                /* Its buffer once UCX matched its DATA message. */
                if (rx->probe_mask == 0) {
                    van->probe_pending++;
                }
                rx->probe_mask |= 1u << i;
                rx->probe_len[i] = slen;
                rx->outstanding++;
                continue;
            }
            if (st != PS_OK) {
                rx->status = st;
                return;
            }
            post_data(van, rx, i, NULL);
            continue;
        }
        /* Inline: a slice of the staging buffer, or a copy where the
         * postoffice wants it (host memory: the CPU copies; a CUDA buffer
         * named where UCX moves CUDA memory is left to the layer above). */
        uint32_t kinds = van->device_kinds != 0 ? PS_VAN_HOST_COPY : 0;
        if (rx->conn != NULL &&
            ps_van_recv_dest(&van->base, &m->meta, i, slen, kinds, &m->data[i]) == PS_OK) {
            memcpy(ps_slice_ptr(&m->data[i]), buf + off, slen);
            off += slen;
            continue;
        }
        st = ps_slice_sub(&rx->staging, off, slen, &m->data[i]);
        if (st != PS_OK) {
            rx->status = st;
            return;
        }
        off += slen;
    }
}

int ps__ucx_lane_deliver(ps__ucx_van_t *van)
{
    unsigned n = van->lane_n;
    uint64_t bytes = 0;
    /* A delivery never re-enters the progress loop (van.h), so no slot is
     * added while these are handed over. */
    for (unsigned i = 0; i < n; ++i) {
        bytes += van->lane[i].len;
        ps_van_deliver_lane(&van->base.cb, PS_LOG_UCX, van->lane[i].sender, van->lane[i].bytes,
                            van->lane[i].len);
    }
    van->lane_n = 0;
    __atomic_add_fetch(&van->base.bytes_recv, bytes, __ATOMIC_RELAXED);
    return (int)n;
}

static void rx_deliver_ready(ps__ucx_van_t *van, ps__ucx_conn_t *conn)
{
    while (conn->rx_head != NULL && conn->rx_head->complete) {
        ps__ucx_rx_t *rx = conn->rx_head;
        conn->rx_head = rx->next;
        if (conn->rx_head == NULL) {
            conn->rx_tail = NULL;
        }
        rx->next = NULL;
        if (rx->status != PS_OK) {
            ps_status_t why = rx->status;
            rx_free(van, rx);
            if (why != PS_ERR_CANCELLED) {
                /* A peer that reset the connection is gone (as a closed
                 * socket is for the TCP van); other failures are the link's. */
                ps__ucx_conn_fail(conn, why == PS_ERR_PROTOCOL || why == PS_ERR_TOO_LARGE
                                            ? PS_ERR_PROTOCOL
                                            : why == PS_ERR_PEER_GONE ? PS_ERR_PEER_GONE
                                                                      : PS_ERR_LINK_FAILED, 1);
            }
            return;
        }
        uint64_t bytes = rx->staging_len;
        for (uint32_t i = 0; i < rx->msg.num_data; ++i) {
            if (ps__ucx_tag_low(rx->tag) & (1u << i)) {
                bytes += rx->msg.data[i].len;
            }
        }
        __atomic_add_fetch(&van->base.bytes_recv, bytes, __ATOMIC_RELAXED);
        if (rx->hello) {
            rx_free(van, rx); /* nothing to deliver */
            continue;
        }
        if (rx->bye) {
            /* The peer closed this connection, as a TCP peer's EOF says:
             * after everything it sent before. */
            rx_free(van, rx);
            ps_debug(PS_LOG_UCX, "node %d at %s closed its connection", conn->peer_id,
                     conn->addr_str);
            ps__ucx_conn_fail(conn, PS_ERR_PEER_GONE, 1);
            return;
        }
        if (rx->lane) {
            ps_van_deliver_lane(&van->base.cb, PS_LOG_UCX, conn->peer_id,
                                ps_slice_ptr(&rx->staging), rx->staging_len);
            rx_free(van, rx);
            continue;
        }
        /* In place, no copy: the callee takes the references. */
        ps_van_base_deliver(&van->base, &rx->msg);
        rx_free(van, rx);
    }
}

/* Moves a receive on after a callback (or an immediate completion). */
static void rx_advance(ps__ucx_van_t *van, ps__ucx_rx_t *rx)
{
    if (rx->conn == NULL) {
        /* Its connection was dropped: nothing more is posted for it (its
         * segments stay unreceived), and it goes once UCX holds no request
         * of it — never before, since UCX would call back into the freed
         * receive. */
        if (rx->outstanding == 0) {
            rx_free(van, rx);
        }
        return;
    }
    if (rx->status == PS_OK && rx->meta_done && !rx->parsed) {
        rx_parse(van, rx);
    }
    if (rx->outstanding == 0 && (rx->parsed || rx->status != PS_OK)) {
        rx->complete = 1;
    }
    if (rx->complete && rx->conn->state != PS__UCX_DEAD) {
        rx_deliver_ready(van, rx->conn);
    }
}

void ps__ucx_rx_process(ps__ucx_van_t *van)
{
    while (van->rx_ready != NULL) {
        ps__ucx_rx_t *list = van->rx_ready;
        van->rx_ready = NULL;
        /* Oldest news first. */
        ps__ucx_rx_t *rev = NULL;
        while (list != NULL) {
            ps__ucx_rx_t *next = list->next_ready;
            list->next_ready = rev;
            rev = list;
            list = next;
        }
        while (rev != NULL) {
            ps__ucx_rx_t *rx = rev;
            rev = rx->next_ready;
            rx->next_ready = NULL;
            rx->ready_queued = 0;
            rx_advance(van, rx);
        }
    }
}

/* Drops rx's unmatched segments (counted as outstanding until now). */
static void rx_unprobe(ps__ucx_van_t *van, ps__ucx_rx_t *rx)
{
    if (rx->probe_mask != 0) {
        rx->outstanding -= (uint32_t)__builtin_popcount(rx->probe_mask);
        rx->probe_mask = 0;
        van->probe_pending--;
    }
}

static int rx_probe_one(ps__ucx_van_t *van, ps__ucx_rx_t *rx)
{
    int n = 0;
    for (unsigned i = 0; i < PS_MSG_MAX_DATA && rx->probe_mask != 0; ++i) {
        if (!(rx->probe_mask & (1u << i))) {
            continue;
        }
        ucp_tag_t tag = ps__ucx_tag(PS__UCX_KIND_DATA, ps__ucx_tag_cookie(rx->tag),
                                    ps__ucx_tag_seq(rx->tag), i);
        ucp_tag_recv_info_t info;
        ucp_tag_message_h msg = ucp_tag_probe_nb(rx->worker, tag, UINT64_MAX, 1, &info);
        if (msg == NULL) {
            continue;
        }
        n++;
        rx->probe_mask &= ~(1u << i);
        if (rx->probe_mask == 0) {
            van->probe_pending--;
        }
        rx->outstanding--; /* post_data() counts it again */
        uint64_t len = rx->probe_len[i];
        ps_slice_t s = PS_SLICE_EMPTY_INIT;
        if (info.length != len) {
            const char *from = rx->conn != NULL ? rx->conn->addr_str : "an unknown sender";
            ps_error(PS_LOG_UCX, "segment of %zu bytes from %s, announced as %llu; closing the "
                     "connection", info.length, from, (unsigned long long)len);
            if (rx->status == PS_OK) {
                rx->status = PS_ERR_PROTOCOL;
            }
        } else {
            ps_status_t st = ps_rdma_buf_pool_get(van->pool, len, &s);
            if (st != PS_OK && rx->status == PS_OK) {
                rx->status = st;
            }
        }
        /* Received in any case (into nothing, truncated, when it is not
         * wanted): a matched message is ours to take. */
        rx->msg.data[i] = s;
        post_data(van, rx, i, msg);
        rx_mark(rx);
    }
    return n;
}

int ps__ucx_rx_probe(ps__ucx_van_t *van)
{
    int n = 0;
    for (ps__ucx_rx_t *rx = van->rx_all; rx != NULL && van->probe_pending > 0;
         rx = rx->next_all) {
        if (rx->probe_mask != 0) {
            n += rx_probe_one(van, rx);
        }
    }
    return n;
}

static void rx_cancel(ps__ucx_van_t *van, ps__ucx_rx_t *rx)
{
    rx_unprobe(van, rx);
    for (unsigned i = 1; i < 1 + PS_MSG_MAX_DATA; ++i) {
        if (rx->reqs[i] != NULL) {
            ucp_request_cancel(rx->worker, rx->reqs[i]);
        }
    }
}

int ps__ucx_rx_drop_conn(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int deliver)
{
    int busy = 0;
    if (deliver) {
        if (van->lane_n != 0) {
            ps__ucx_lane_deliver(van); /* they came before what the receives hold */
        }
        ps__ucx_rx_process(van);
        rx_deliver_ready(van, conn);
    }
    ps__ucx_rx_t *rx = conn->rx_head;
    conn->rx_head = conn->rx_tail = NULL;
    while (rx != NULL) {
        ps__ucx_rx_t *next = rx->next;
        rx->next = NULL;
        /* Nobody to deliver to any more: rx_advance frees it once UCX has
         * given back every request of it (cancelled ones at once; one that
         * UCX could not cancel when it completes or fails). It may sit on
         * van->rx_ready, or on the list rx_process() is walking. */
        rx->conn = NULL;
        ps__ucx_conn_unref(conn);
        rx_cancel(van, rx);
        if (rx->outstanding != 0) {
            busy++;
        }
        rx_mark(rx);
        rx = next;
    }
    return busy;
}

int ps__ucx_rx_dropped_busy(ps__ucx_van_t *van)
{
    int busy = 0;
    for (ps__ucx_rx_t *rx = van->rx_all; rx != NULL; rx = rx->next_all) {
        if (rx->conn == NULL && rx->outstanding != 0) {
            busy++;
        }
    }
    return busy;
}

void ps__ucx_rx_cancel_all(ps__ucx_van_t *van)
{
    for (ps__ucx_rx_t *rx = van->rx_all; rx != NULL; rx = rx->next_all) {
        rx_cancel(van, rx);
    }
}

void ps__ucx_rx_free_all(ps__ucx_van_t *van)
{
    while (van->rx_all != NULL) {
        rx_free(van, van->rx_all);
    }
    van->rx_ready = NULL;
    ps_slice_unref(&van->rx_spare);
    while (van->rx_free != NULL) {
        ps__ucx_rx_t *rx = van->rx_free;
        van->rx_free = rx->next;
        free(rx);
    }
    van->rx_free_count = 0;
}

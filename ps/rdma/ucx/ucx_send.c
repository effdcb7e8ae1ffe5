/*
 * The send path of the UCX van.
 *
 * send() encodes header + meta into an op and posts it on the connection
 * with sends that read the user's slices directly (zero copy): one
 * META message (an active message) carrying the frame and the segments up to
 * BYTEPS_UCX_SHORT_THRESH bytes (gathered by an iovec datatype, or copied
 * behind the frame when they are tiny: one contiguous eager send), then one
 * DATA message per larger segment, which the receiver lands straight in
 * the buffer its postoffice names. The op holds references on the slices
 * until UCX has finished every request (a completion callback, or at once
 * when the sends completed inline).
 *
 * A message small enough for one eager META (its segments all inline, and
 * with the frame within PS__UCX_HM_INLINE bytes: the usual push, pull or
 * response of a few values) takes a shorter way, send_small(): framed on
 * the caller's stack and handed to UCX to be sent at once or not at all;
 * only what UCX refuses becomes an op. A lane message (send_lane,
 * ps/net/codec/lane.h) is such a message whose frame the postoffice made.
 *
 * Order: messages are posted under the connection's lock, so sequence
 * numbers and UCX's order agree. Until the handshake completes, ops wait
 * in the connection's queue and the progress thread posts them when the
 * ACK arrives. send() never blocks on the network.
 */
#include <stdlib.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/net/codec/lane.h"
#include "ps/rdma/ucx/ucx_internal.h"

static ps_status_t op_new(ps__ucx_van_t *van, ps__ucx_op_t **op_p)
{
    ps__ucx_op_t *op = __atomic_exchange_n(&van->op_spare, NULL, __ATOMIC_ACQUIRE);
    if (op == NULL) {
        ps_status_t st = ps_mpool_get(&van->ops, (void **)&op);
        if (st != PS_OK) {
            return st;
        }
    }
    /* What release reads; the rest is written before it is read. */
    op->on_inflight = 0;
    op->conn = NULL;
    op->failed = 0;
    op->sep_mask = 0;
    op->ref_mask = 0;
    op->num_data = 0;
    op->hm = NULL;
    __atomic_add_fetch(&van->inflight_ops, 1, __ATOMIC_RELAXED);
    *op_p = op;
    return PS_OK;
}

/* An op back to the spare slot, else to the pool. */
static void op_free(ps__ucx_van_t *van, ps__ucx_op_t *op)
{
    ps__ucx_op_t *none = NULL;
    if (!__atomic_compare_exchange_n(&van->op_spare, &none, op, 0, __ATOMIC_RELEASE,
                                     __ATOMIC_RELAXED)) {
        ps_mpool_put(&van->ops, op);
    }
}

void ps__ucx_op_spare_free(ps__ucx_van_t *van)
{
    ps__ucx_op_t *op = __atomic_exchange_n(&van->op_spare, NULL, __ATOMIC_ACQUIRE);
    if (op != NULL) {
        ps_mpool_put(&van->ops, op);
    }
}

void ps__ucx_op_release(ps__ucx_van_t *van, ps__ucx_op_t *op)
{
    if (op->on_inflight) {
        pthread_mutex_lock(&van->ops_lock);
        if (op->prev_fl != NULL) {
            op->prev_fl->next_fl = op->next_fl;
        } else {
            van->inflight = op->next_fl;
        }
        if (op->next_fl != NULL) {
            op->next_fl->prev_fl = op->prev_fl;
        }
        pthread_mutex_unlock(&van->ops_lock);
    }
    for (unsigned m = op->ref_mask; m != 0; m &= m - 1) {
        ps_slice_unref(&op->data[__builtin_ctz(m)]);
    }
    if (op->hm != NULL && op->hm != op->hm_inline) {
        free(op->hm);
    }
    if (op->conn != NULL) {
        ps__ucx_conn_unref(op->conn);
    }
    op_free(van, op);
    __atomic_sub_fetch(&van->inflight_ops, 1, __ATOMIC_RELEASE);
}

int ps__ucx_conn_sends_busy(ps__ucx_van_t *van, const ps__ucx_conn_t *conn)
{
    int busy = 0;
    pthread_mutex_lock(&van->ops_lock);
    for (const ps__ucx_op_t *op = van->inflight; op != NULL; op = op->next_fl) {
        /* Finished ones (pending 0) wait on the done list to be released. */
        if (op->conn == conn && __atomic_load_n(&op->pending, __ATOMIC_ACQUIRE) != 0) {
            busy++;
        }
    }
    pthread_mutex_unlock(&van->ops_lock);
    return busy;
}

void ps__ucx_ops_free_list(ps__ucx_van_t *van, ps__ucx_op_t *list)
{
    while (list != NULL) {
        ps__ucx_op_t *next = list->next;
        ps__ucx_op_release(van, list);
        list = next;
    }
}

/* Drops the poster's hold on an op; the last hold releases it. */
static void op_put(ps__ucx_van_t *van, ps__ucx_op_t *op)
{
    if (__atomic_sub_fetch(&op->pending, 1, __ATOMIC_ACQ_REL) == 0) {
        ps__ucx_op_release(van, op);
    }
}

static void on_sent(void *request, ucs_status_t status, void *user_data)
{
    ps__ucx_op_t *op = user_data;
    ucp_request_free(request);
    if (status != UCS_OK) {
        __atomic_store_n(&op->failed, (int)status, __ATOMIC_RELAXED);
    }
    if (__atomic_sub_fetch(&op->pending, 1, __ATOMIC_ACQ_REL) == 0) {
        /* Released by the progress thread, outside UCX's lock: a slice's
         * release function is the user's code. */
        ps__ucx_van_t *van = op->conn->van;
        pthread_mutex_lock(&van->ev_lock);
        op->next = van->done_ops;
        __atomic_store_n(&van->done_ops, op, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&van->ev_lock);
    }
}

/* How a message goes out (post_one). */
enum {
    SEND_DATA,      /* tagged */
    SEND_META,      /* an active message, the tag its header */
    SEND_META_SELF, /* an active message whose data starts with the tag (buf is op->am_hdr) */
};

/* Largest frame sent with the tag in front of it rather than as the
 * active message's header: UCX 1.13's ucp_am_send_nbx costs ~340
 * instructions per small message over shared memory without a user
 * header, ~390 with one (callgrind; a tagged send ~210: UCP's AM short
 * path always gathers an iovec). With the tag in the data the message
 * must stay eager (the handler of a rendezvous one does not see its
 * data), which is what a message this small is anyway. */
#define SELF_MAX PS__UCX_HM_INLINE

/* Sends a META whose data starts with its tag (SEND_META_SELF): buf holds
 * PS__UCX_AM_META_HDR bytes of room for the tag, then the frame; len
 * counts both. Eager, as such a message must be. */
static ucs_status_ptr_t send_meta_self(ucp_ep_h ep, uint8_t *buf, size_t len, ucp_tag_t tag,
                                       ucp_request_param_t *param)
{
    ps_put_le64(buf, tag);
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param->flags = UCP_AM_SEND_FLAG_EAGER;
    return ucp_am_send_nbx(ep, PS__UCX_AM_META_ID, NULL, 0, buf, len, param);
}

/* One send of the op. The op's hold is taken before UCX can call back;
 * `cuda`: buf is CUDA memory. Returns 0 on an immediate error. */
static int post_one(ps__ucx_op_t *op, ucp_ep_h ep, const void *buf, size_t count,
                    ucp_datatype_t dt, ucp_tag_t tag, int how, int cuda)
{
    ucp_request_param_t param;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.send = on_sent;
    param.user_data = op;
    param.datatype = dt;
    if (cuda) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        param.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    __atomic_add_fetch(&op->pending, 1, __ATOMIC_RELAXED);
    ucs_status_ptr_t r;
    /* The tag must stay valid until the send completes: it is in the op,
     * which lives until then. */
    if (how == SEND_META_SELF) {
        r = send_meta_self(ep, op->am_hdr, count, tag, &param);
    } else if (how == SEND_META) {
        ps_put_le64(op->am_hdr, tag);
        r = ucp_am_send_nbx(ep, PS__UCX_AM_META_ID, op->am_hdr, sizeof(op->am_hdr), buf, count,
                            &param);
    } else {
        r = ucp_tag_send_nbx(ep, buf, count, tag, &param);
    }
    if (how != SEND_DATA && !UCS_PTR_IS_ERR(r)) {
        ps_stage_posted();
    }
    if (UCS_PTR_IS_PTR(r)) {
        return 1;
    }
    __atomic_sub_fetch(&op->pending, 1, __ATOMIC_RELAXED);
    if (UCS_PTR_IS_ERR(r)) {
        __atomic_store_n(&op->failed, (int)UCS_PTR_STATUS(r), __ATOMIC_RELAXED);
        return 0;
    }
    return 1;
}

/* Posts the op on a READY connection (conn->lock held). The caller drops
 * the poster's hold (op_put) after unlocking. Returns 1 when UCX took all
 * of it at once (no request left in flight). */
static int post(ps__ucx_conn_t *conn, ps__ucx_op_t *op)
{
    ps__ucx_van_t *van = conn->van;
    uint64_t seq = conn->seq++;
    uint32_t cookie = conn->remote_cookie;
    ucp_ep_h ep = conn->send_ep;
    op->pending = 1;

    op->iov[0].buffer = op->hm;
    op->iov[0].length = op->hm_len;
    op->iovcnt = 1;
    for (uint32_t i = 0; !op->folded && i < op->num_data; ++i) {
        if (!(op->sep_mask & (1u << i)) && op->data[i].len != 0) {
            op->iov[op->iovcnt].buffer = ps_slice_ptr(&op->data[i]);
            op->iov[op->iovcnt].length = op->data[i].len;
            op->iovcnt++;
        }
    }
    int ok;
    ucp_tag_t tag = ps__ucx_tag(PS__UCX_KIND_META, cookie, seq, op->sep_mask);
    if (op->iovcnt == 1 && op->hm == op->hm_inline && op->hm_len <= SELF_MAX) {
        ok = post_one(op, ep, op->am_hdr, sizeof(op->am_hdr) + op->hm_len, ucp_dt_make_contig(1),
                      tag, SEND_META_SELF, 0);
    } else if (op->iovcnt == 1) {
        ok = post_one(op, ep, op->hm, op->hm_len, ucp_dt_make_contig(1), tag, SEND_META, 0);
    } else {
        ok = post_one(op, ep, op->iov, op->iovcnt, ucp_dt_make_iov(), tag, SEND_META, 0);
    }
    for (uint32_t i = 0; ok && i < op->num_data; ++i) {
        if (op->sep_mask & (1u << i)) {
            tag = ps__ucx_tag(PS__UCX_KIND_DATA, cookie, seq, i);
            ok = post_one(op, ep, ps_slice_ptr(&op->data[i]), op->data[i].len,
                          ucp_dt_make_contig(1), tag, SEND_DATA,
                          ps_slice_mem_kind(&op->data[i]) == PS_BUF_MEM_CUDA);
        }
    }
    __atomic_add_fetch(&van->base.bytes_sent, op->bytes, __ATOMIC_RELAXED);
    if (!ok) {
        /* The endpoint refused the send: the connection is broken. The
         * progress thread tears it down (never from a sender's thread). */
        ps__ucx_ev_t *ev = calloc(1, sizeof(*ev));
        if (ev != NULL) {
            ev->kind = PS__UCX_EV_EP_ERROR;
            ev->conn = ps__ucx_conn_ref(conn);
            ev->status = (ucs_status_t)__atomic_load_n(&op->failed, __ATOMIC_RELAXED);
            ps__ucx_post_event(van, ev);
        }
    }
    int in_flight = __atomic_load_n(&op->pending, __ATOMIC_ACQUIRE) > 1;
    if (in_flight) {
        /* UCX still works on it: reachable at close(), and the progress
         * thread must be awake to move it. */
        pthread_mutex_lock(&van->ops_lock);
        op->on_inflight = 1;
        op->prev_fl = NULL;
        op->next_fl = van->inflight;
        if (van->inflight != NULL) {
            van->inflight->prev_fl = op;
        }
        van->inflight = op;
        pthread_mutex_unlock(&van->ops_lock);
        /* Pairs with the progress thread's `sleeping` then `posted`. */
        __atomic_add_fetch(&van->posted, 1, __ATOMIC_SEQ_CST);
        ps_van_loop_kick(&van->loop);
    }
    return ok && !in_flight;
}

ps__ucx_op_t *ps__ucx_conn_post_queued(ps__ucx_conn_t *conn)
{
    ps__ucx_op_t *posted = NULL;
    while (conn->q_head != NULL) {
        ps__ucx_op_t *op = conn->q_head;
        conn->q_head = op->next;
        op->next = posted;
        posted = op;
        (void)post(conn, op);
    }
    conn->q_tail = NULL;
    return posted;
}

void ps__ucx_ops_put_list(ps__ucx_van_t *van, ps__ucx_op_t *list)
{
    while (list != NULL) {
        ps__ucx_op_t *next = list->next;
        list->next = NULL;
        op_put(van, list);
        list = next;
    }
}

ps_status_t ps__ucx_conn_submit(ps__ucx_conn_t *conn, ps__ucx_op_t *op, int *sent_p)
{
    ps__ucx_van_t *van = conn->van;
    op->conn = conn; /* the caller's reference */
    if (sent_p != NULL) {
        *sent_p = 0;
    }
    pthread_mutex_lock(&conn->lock);
    if (conn->state == PS__UCX_DEAD) {
        pthread_mutex_unlock(&conn->lock);
        ps__ucx_op_release(van, op);
        return PS_ERR_PEER_GONE;
    }
    if (conn->state != PS__UCX_READY || conn->q_head != NULL) {
        op->next = NULL;
        if (conn->q_tail != NULL) {
            conn->q_tail->next = op;
        } else {
            conn->q_head = op;
        }
        conn->q_tail = op;
        pthread_mutex_unlock(&conn->lock);
        return PS_OK;
    }
    int sent = post(conn, op);
    pthread_mutex_unlock(&conn->lock);
    op_put(van, op);
    if (sent_p != NULL) {
        *sent_p = sent;
    }
    return PS_OK;
}

void ps__ucx_process_done(ps__ucx_van_t *van)
{
    if (__atomic_load_n(&van->done_ops, __ATOMIC_ACQUIRE) == NULL) {
        return; /* every turn of the loop looks: no lock while there is nothing */
    }
    pthread_mutex_lock(&van->ev_lock);
    ps__ucx_op_t *list = van->done_ops;
    __atomic_store_n(&van->done_ops, NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&van->ev_lock);
    while (list != NULL) {
        ps__ucx_op_t *op = list;
        list = op->next;
        int failed = __atomic_load_n(&op->failed, __ATOMIC_RELAXED);
        if (failed != UCS_OK && failed != UCS_ERR_CANCELED && op->conn->state != PS__UCX_DEAD &&
            van->worker != NULL) {
            ps_warn(PS_LOG_UCX, "sending to node %d at %s failed: %s", op->conn->peer_id,
                    op->conn->addr_str, ucs_status_string((ucs_status_t)failed));
            ps_status_t why = ps__ucx_status((ucs_status_t)failed);
            ps__ucx_conn_fail(op->conn, why == PS_ERR_PEER_GONE ? why : PS_ERR_LINK_FAILED, 1);
        }
        ps__ucx_op_release(van, op);
    }
}

/* Fills an op with the frame of `meta` and references on the segments UCX
 * will read. */
static ps_status_t op_fill(ps__ucx_van_t *van, ps__ucx_op_t *op, const ps_meta_t *meta,
                           const ps_slice_t *data, uint32_t num_data)
{
    uint64_t lens[PS_MSG_MAX_DATA] = {0};
    uint64_t bytes = 0;
    size_t fold = 0;          /* bytes of the inline segments */
    unsigned sep = 0;
    for (uint32_t i = 0; i < num_data; ++i) {
        lens[i] = data[i].len;
        bytes += data[i].len;
        /* Device memory goes as its own DATA message, which UCX reads
         * (the CPU never folds or gathers it). */
        if (data[i].len > van->inline_max || !ps_slice_in_host_mem(&data[i])) {
            sep |= 1u << i;
        } else {
            fold += data[i].len;
        }
    }
    uint8_t *hm, *heap = NULL;
    size_t hm_len;
    ps_status_t st = ps__ucx_encode_frame(van, meta, lens, num_data, op->hm_inline,
                                          sizeof(op->hm_inline), &hm, &hm_len, &heap);
    if (st != PS_OK) {
        return st;
    }
    op->hm = hm;
    op->bytes = hm_len + bytes;
    op->sep_mask = sep;
    op->num_data = num_data;
    /* Small inline segments are copied behind the frame, so the META
     * message is one contiguous buffer: UCX then sends it eagerly, most
     * often at once and without a request, where an iovec would take
     * its slower generic path. Copied, they need no reference. */
    op->folded = hm == op->hm_inline && fold != 0 && fold <= PS__UCX_FOLD_MAX &&
                 hm_len + fold <= sizeof(op->hm_inline);
    unsigned refs = (1u << num_data) - 1;
    if (op->folded) {
        for (uint32_t i = 0; i < num_data; ++i) {
            if (!(sep & (1u << i)) && data[i].len != 0) {
                memcpy(op->hm_inline + hm_len, ps_slice_ptr(&data[i]), data[i].len);
                hm_len += data[i].len;
            }
        }
        refs = sep;
    }
    op->hm_len = hm_len;
    for (unsigned m = refs; m != 0; m &= m - 1) {
        unsigned i = (unsigned)__builtin_ctz(m);
        op->data[i] = ps_slice_ref(&data[i]);
    }
    op->ref_mask = refs;
    return PS_OK;
}

ps_status_t ps__ucx_note_op(ps__ucx_van_t *van, const ps_meta_t *meta, ps__ucx_op_t **op_p)
{
    ps__ucx_op_t *op;
    ps_status_t st = op_new(van, &op);
    if (st != PS_OK) {
        return st;
    }
    st = op_fill(van, op, meta, NULL, 0);
    if (st != PS_OK) {
        ps__ucx_op_release(van, op);
        return st;
    }
    *op_p = op;
    return PS_OK;
}

/* Sends a message through an op (op_fill, ps__ucx_conn_submit). */
static ps_status_t send_op(ps__ucx_van_t *van, int recver, const ps_meta_t *meta,
                           const ps_slice_t *data, uint32_t num_data)
{
    ps__ucx_op_t *op;
    ps_status_t st = op_new(van, &op);
    if (st != PS_OK) {
        ps_warn_ratelimited(PS_LOG_UCX, "send to node %d: %s", recver, ps_status_str(st));
        return st;
    }
    st = op_fill(van, op, meta, data, num_data);
    if (st != PS_OK) {
        ps__ucx_op_release(van, op);
        return st;
    }
    ps__ucx_conn_t *conn = ps__ucx_peer_send_conn(van, recver);
    if (conn == NULL) {
        ps__ucx_op_release(van, op);
        return ps__ucx_peer_unconnected(van, recver);
    }
    return ps__ucx_conn_submit(conn, op, NULL); /* takes our reference on conn */
}

/* ---- small messages: sent at once, or made an op ---- */

/* A small META message as its eager active message's data: the tag, then
 * the frame with the segments behind it (SEND_META_SELF). */
typedef struct {
    uint8_t bytes[PS__UCX_AM_META_HDR + PS__UCX_HM_INLINE];
    size_t frame_len; /* behind the tag */
} small_msg_t;

/* Frames a message that can go as one small eager META into sm. Returns
 * PS_OK with sm->frame_len 0 when it cannot (a segment goes as DATA, the
 * segments or the frame are too long): the op path takes it. An error is
 * the frame's own (the op path would fail the same way). */
static ps_status_t frame_small(ps__ucx_van_t *van, const ps_meta_t *meta, const ps_slice_t *data,
                               uint32_t num_data, small_msg_t *sm)
{
    uint64_t lens[PS_MSG_MAX_DATA];
    uint64_t fold = 0;
    sm->frame_len = 0;
    for (uint32_t i = 0; i < num_data; ++i) {
        lens[i] = data[i].len;
        /* Device memory is UCX's to read, never copied by the CPU. */
        if (lens[i] > van->inline_max || !ps_slice_in_host_mem(&data[i])) {
            return PS_OK;
        }
        fold += lens[i];
    }
    if (fold > PS__UCX_FOLD_MAX) {
        return PS_OK;
    }
    uint8_t *frame = sm->bytes + PS__UCX_AM_META_HDR, *hm, *heap = NULL;
    size_t len;
    ps_status_t st = ps__ucx_encode_frame(van, meta, lens, num_data, frame, PS__UCX_HM_INLINE, &hm,
                                          &len, &heap);
    if (st != PS_OK || heap != NULL || len + fold > PS__UCX_HM_INLINE) {
        free(heap); /* a long meta (a node list): the op path frames it again */
        return st;
    }
    for (uint32_t i = 0; i < num_data; ++i) {
        if (lens[i] != 0) {
            memcpy(frame + len, ps_slice_ptr(&data[i]), lens[i]);
            len += lens[i];
        }
    }
    sm->frame_len = len;
    return PS_OK;
}

/* Below this length (tag included) send_small() never stops asking UCX to
 * send a META at once: every UCX transport's short messages are longer
 * (`ucx_info -d`: am_short up to 100 bytes for posix and sysv, 8 KiB for
 * tcp), so a refusal there is a full FIFO, not the length. */
#define SEND_NOW_FLOOR 64

/* Sends a framed small message to node `recver`: bytes holds
 * PS__UCX_AM_META_HDR bytes of room for the tag, then frame_len bytes of
 * frame (at most PS__UCX_HM_INLINE). On a READY connection
 * with nothing queued, UCX is asked to send it at once or not at all
 * (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: a short message is copied into the
 * transport, the shared-memory FIFO or the socket, before ucp_am_send_nbx
 * returns; anything else is UCS_ERR_NO_RESOURCE with nothing sent). Sent
 * so, it needs no op, no reference on the connection and no completion:
 * ~270 instructions and 9 atomic read-modify-writes fewer per message than
 * an op (tools/bench/path_instr.sh). What UCX refuses (its FIFO is full,
 * the connection is not ready or broken, the message is above the
 * transport's short-message limit) becomes an op and goes the usual way,
 * which queues it or reports the error. When UCX then sends that op at
 * once, the refusal was the length: the connection stops asking for that
 * length and above (conn->now_max), so a message just too long for a short
 * send pays for one refusal, not one per message. UCX keeps the order of
 * an endpoint's short sends and its queued ones (a short send is refused
 * while anything waits before it). */
static ps_status_t send_small(ps__ucx_van_t *van, int recver, uint8_t *bytes, size_t frame_len)
{
    size_t wire = PS__UCX_AM_META_HDR + frame_len;
    int asked = 0, sent = 0;
    pthread_rwlock_rdlock(&van->peers.lock);
    ps__ucx_conn_t *conn = ps__ucx_peer_send_conn_locked(van, recver);
    if (conn != NULL && wire <= __atomic_load_n(&conn->now_max, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&conn->lock);
        if (conn->state == PS__UCX_READY && conn->q_head == NULL) {
            ucp_request_param_t param;
            param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
            ucs_status_ptr_t r = send_meta_self(
                conn->send_ep, bytes, wire,
                ps__ucx_tag(PS__UCX_KIND_META, conn->remote_cookie, conn->seq, 0), &param);
            /* (Never a request with FORCE_IMM_CMPL: UCS_OK or an error.) */
            asked = 1;
            sent = r == NULL;
            conn->seq += (uint64_t)sent;
        }
        pthread_mutex_unlock(&conn->lock);
    }
    if (conn != NULL && !sent) {
        ps__ucx_conn_ref(conn); /* the op's */
    }
    pthread_rwlock_unlock(&van->peers.lock);
    if (sent) {
        ps_stage_posted();
        __atomic_add_fetch(&van->base.bytes_sent, frame_len, __ATOMIC_RELAXED);
        return PS_OK;
    }
    if (conn == NULL) {
        return ps__ucx_peer_unconnected(van, recver);
    }
    ps__ucx_op_t *op;
    ps_status_t st = op_new(van, &op);
    if (st != PS_OK) {
        ps__ucx_conn_unref(conn);
        ps_warn_ratelimited(PS_LOG_UCX, "send to node %d: %s", recver, ps_status_str(st));
        return st;
    }
    memcpy(op->hm_inline, bytes + PS__UCX_AM_META_HDR, frame_len);
    op->hm = op->hm_inline;
    op->hm_len = frame_len;
    op->bytes = frame_len;
    op->folded = 1; /* the segments are in hm_inline: num_data 0, nothing referenced */
    if (!asked) {
        return ps__ucx_conn_submit(conn, op, NULL); /* takes our reference on conn */
    }
    int sent_later = 0;
    ps__ucx_conn_ref(conn); /* across the submit, which may release the op's */
    st = ps__ucx_conn_submit(conn, op, &sent_later);
    if (sent_later && wire >= SEND_NOW_FLOOR) {
        /* Only ever lowered (a lower value a racing sender set stays). */
        uint32_t cur = __atomic_load_n(&conn->now_max, __ATOMIC_RELAXED);
        while (wire <= cur && !__atomic_compare_exchange_n(&conn->now_max, &cur,
                                                           (uint32_t)wire - 1, 0,
                                                           __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    ps__ucx_conn_unref(conn);
    return st;
}

ps_status_t ps__ucx_send(ps_van_t *v, const ps_msg_t *msg)
{
    ps__ucx_van_t *van = ps__ucx_of(v);
    ps_meta_t with_nodes;
    const ps_meta_t *meta;
    ps_status_t st = ps_van_send_prepare(&van->base, msg, van->device_kinds, &with_nodes, &meta);
    if (st != PS_OK) {
        return st;
    }
    int recver = meta->recver;
    small_msg_t sm;
    st = frame_small(van, meta, msg->data, msg->num_data, &sm);
    if (st != PS_OK) {
        return st;
    }
    if (sm.frame_len != 0) {
        st = send_small(van, recver, sm.bytes, sm.frame_len);
    } else {
        st = send_op(van, recver, meta, msg->data, msg->num_data);
    }
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level) && st == PS_OK) {
        char line[192];
        ps_msg_describe(msg, line, sizeof(line));
        ps_trace(PS_LOG_UCX, "sent %s", line);
    }
    return st;
}

ps_status_t ps__ucx_send_lane(ps_van_t *v, int recver, uint8_t *bytes, size_t len)
{
    ps__ucx_van_t *van = ps__ucx_of(v);
    _Static_assert(PS_LANE_VAN_HEADROOM >= PS__UCX_AM_META_HDR, "room for the tag");
    _Static_assert(PS_LANE_MAX_BYTES <= PS__UCX_HM_INLINE, "a lane message is a small META");
    if (bytes == NULL || len < PS_LANE_HDR_LEN || len > PS_LANE_MAX_BYTES ||
        bytes[0] != PS_LANE_MAGIC) {
        return PS_ERR_INVALID_ARG;
    }
    if (ps_van_check_recver(&van->base, recver, "send_lane") != PS_OK) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = send_small(van, recver, bytes - PS__UCX_AM_META_HDR, len);
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level) && st == PS_OK) {
        ps_trace(PS_LOG_UCX, "sent a %zu-byte lane message to node %d", len, recver);
    }
    return st;
}

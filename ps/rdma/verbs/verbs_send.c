/*
 * The send path of the ibverbs van.
 *
 * send() turns a message into a tx: the frame (header + meta, encoded
 * once), references on the data slices, and what the message needs from
 * the protocol:
 *   - a worker's pull request gets a pull descriptor in van_data: the
 *     destination the postoffice names (recv_buffer, asked with the
 *     response's identity) is registered and given a slot;
 *   - a server's pull response to such a request writes its values
 *     (segment 1) straight into that destination (RDMA write) and says so
 *     in the header (PS__VB_HDR_RMA), or, when it cannot, frees the slot
 *     (PS__VB_HDR_PULL_DONE);
 *   - what remains travels in the receiver's memory: in the SEND itself
 *     when header + frame + data fit a receive buffer (eager; inline when
 *     small), else in a granted buffer (rendezvous: RDV_START, RDV_GRANT,
 *     RDMA writes of the data, then the header + frame written with
 *     immediate = grant slot).
 * The tx joins its connection's queue; posting happens in queue order, so
 * messages to one peer arrive in send order. A message waiting for a grant
 * holds back the ones behind it (as a TCP stream would). Rendezvous
 * control messages have their own queue ahead of messages.
 *
 * Work requests: every tx posts, per QP it uses, a chain whose last WR is
 * signaled and names the tx (wr_id = &tx->wc[qp], with the chain's length);
 * earlier WRs are unsignaled (wr_id 0). Room is checked before posting: the
 * QP's send queue depth and the device CQ's room for signaled WRs. What
 * does not fit waits, and the poller kicks the connection when completions
 * free room.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/net/codec/codec.h"
#include "ps/net/van/rx.h"
#include "ps/rdma/verbs/verbs_internal.h"

/* Most WRs one tx posts: data chunks, pull-response chunks, the meta. */
#define MAX_WRS (2 * PS__VB_MAX_CHUNKS + 1)

typedef enum {
    POST_OK = 0,
    POST_AGAIN = 1, /* no room now: retry after completions */
    POST_DROP = 2,  /* this message cannot be sent: dropped (logged) */
    POST_FAIL = 3,  /* the connection is broken */
} post_result_t;

/* ---- tx lifetime ---- */

static ps__vb_tx_t *tx_new(ps__vb_conn_t *conn)
{
    ps__vb_tx_t *tx = calloc(1, sizeof(*tx));
    if (tx == NULL)
        return NULL;
    ps__vb_van_t *van = conn->van;
    tx->conn = conn;
    ps__vb_conn_ref(conn);
    tx->refs = 1;
    tx->rma_seg = -1;
    tx->steer_seg = -1;
    for (unsigned i = 0; i < PS__VB_MAX_QP; i++) {
        tx->wc[i].wr.kind = PS__VB_WR_TX;
        tx->wc[i].tx = tx;
        tx->wc[i].qp = (uint16_t)i;
    }
    pthread_mutex_lock(&van->txs_lock);
    tx->all_next = van->txs;
    if (van->txs != NULL)
        van->txs->all_prev = tx;
    van->txs = tx;
    pthread_mutex_unlock(&van->txs_lock);
    __atomic_add_fetch(&van->queued, 1, __ATOMIC_RELAXED);
    return tx;
}

static void tx_free(ps__vb_tx_t *tx)
{
    ps__vb_conn_t *conn = tx->conn;
    ps__vb_van_t *van = conn->van;
    pthread_mutex_lock(&van->txs_lock);
    if (tx->all_prev != NULL)
        tx->all_prev->all_next = tx->all_next;
    else if (van->txs == tx)
        van->txs = tx->all_next;
    if (tx->all_next != NULL)
        tx->all_next->all_prev = tx->all_prev;
    pthread_mutex_unlock(&van->txs_lock);
    for (uint32_t i = 0; i < tx->num_data; i++) {
        if (tx->mr[i] != NULL && conn->dev != NULL)
            ps_rdma_mr_cache_put(conn->dev->mrc, tx->mr[i]);
        ps_slice_unref(&tx->data[i]);
    }
    ps_slice_unref(&tx->bounce);
    ps_slice_unref(&tx->dbounce);
    free(tx->fm_heap);
    __atomic_sub_fetch(&van->queued, 1, __ATOMIC_RELEASE);
    ps__vb_conn_unref(conn);
    free(tx);
}

void ps__vb_tx_release(ps__vb_tx_t *tx)
{
    if (tx != NULL && __atomic_sub_fetch(&tx->refs, 1, __ATOMIC_ACQ_REL) == 0)
        tx_free(tx);
}

ps__vb_tx_t *ps__vb_conn_take_queues(ps__vb_conn_t *conn)
{
    ps__vb_tx_t *list = conn->ctrl_head;
    if (conn->ctrl_tail != NULL)
        conn->ctrl_tail->next = conn->q_head;
    else
        list = conn->q_head;
    conn->ctrl_head = conn->ctrl_tail = NULL;
    conn->q_head = conn->q_tail = NULL;
    conn->waiting = 0;
    return list;
}

void ps__vb_tx_release_list(ps__vb_tx_t *list)
{
    while (list != NULL) {
        ps__vb_tx_t *tx = list;
        list = tx->next;
        tx->next = NULL;
        ps__vb_tx_release(tx);
    }
}

void ps__vb_tx_free_all(ps__vb_van_t *van)
{
    /* close(): the QPs are destroyed, no completion will come. */
    for (;;) {
        pthread_mutex_lock(&van->txs_lock);
        ps__vb_tx_t *tx = van->txs;
        pthread_mutex_unlock(&van->txs_lock);
        if (tx == NULL)
            break;
        tx_free(tx);
    }
}

/* ---- helpers ---- */

static void push_tail(ps__vb_tx_t **head, ps__vb_tx_t **tail, ps__vb_tx_t *tx)
{
    tx->next = NULL;
    if (*tail != NULL)
        (*tail)->next = tx;
    else
        *head = tx;
    *tail = tx;
}

static ps__vb_tx_t *pop_head(ps__vb_tx_t **head, ps__vb_tx_t **tail)
{
    ps__vb_tx_t *tx = *head;
    if (tx != NULL) {
        *head = tx->next;
        if (*head == NULL)
            *tail = NULL;
        tx->next = NULL;
    }
    return tx;
}

static void mark_blocked(ps__vb_conn_t *conn)
{
    ps__vb_van_t *van = conn->van;
    pthread_mutex_lock(&van->blocked_lock);
    if (!conn->blocked) {
        conn->blocked = 1;
        ps__vb_conn_ref(conn);
        conn->next_blocked = van->blocked;
        van->blocked = conn;
    }
    pthread_mutex_unlock(&van->blocked_lock);
}

/* Work requests being built for one tx. */
typedef struct {
    struct ibv_send_wr wr[MAX_WRS];
    struct ibv_sge sge[MAX_WRS][PS__VB_MAX_SGE];
    int n;
    int per_qp[PS__VB_MAX_QP];   /* WRs per QP */
    int slaves[PS__VB_MAX_QP];   /* slave writes (with imm 0) per QP */
} wrs_t;

/* The connection's scratch WRs, emptied (conn->lock held; posting is
 * serialised per connection). NULL without memory. */
static wrs_t *wrs_get(ps__vb_conn_t *conn)
{
    if (conn->wrs == NULL)
        conn->wrs = malloc(sizeof(wrs_t));
    wrs_t *w = conn->wrs;
    if (w != NULL) {
        w->n = 0;
        memset(w->per_qp, 0, sizeof(w->per_qp));
        memset(w->slaves, 0, sizeof(w->slaves));
    }
    return w;
}

static struct ibv_send_wr *wr_add(wrs_t *w, unsigned qp)
{
    if (w->n >= MAX_WRS)
        return NULL;
    struct ibv_send_wr *wr = &w->wr[w->n];
    memset(wr, 0, sizeof(*wr));
    wr->sg_list = w->sge[w->n];
    /* The QP index rides in wr_id until the chains are linked. */
    wr->wr_id = qp;
    w->n++;
    w->per_qp[qp]++;
    return wr;
}

/* ---- local keys of the data ---- */

/* Registers what travels by RDMA write (the in-buffer segments of a
 * rendezvous and the pull-response segment), once per tx. Host memory that
 * cannot be registered is copied into a registered bounce buffer instead. */
static post_result_t prepare_keys(ps__vb_conn_t *conn, ps__vb_tx_t *tx, int in_buffer,
                                  uint32_t *lkeys, uint32_t *dbounce_lkey)
{
    ps__vb_dev_t *dev = conn->dev;
    int need_copy = 0;
    for (uint32_t i = 0; i < tx->num_data; i++) {
        lkeys[i] = 0;
        if (tx->lens[i] == 0)
            continue;
        int is_rma = (int)i == tx->rma_seg;
        if (!is_rma && !in_buffer)
            continue;
        if (!is_rma && tx->dbounce.buf != NULL)
            continue;
        if (tx->mr[i] == NULL) {
            ps_status_t st = ps__vb_slice_lkey(dev, &tx->data[i], &lkeys[i], &tx->mr[i]);
            if (st == PS_OK)
                continue;
            if (!ps_slice_in_host_mem(&tx->data[i])) {
                /* The CPU must not read device memory into a bounce. */
                ps_error(PS_LOG_RDMA, "send to %s: device memory of segment %u cannot be "
                         "registered (%s); message dropped", conn->addr_str, i,
                         ps_status_str(st));
                return POST_DROP;
            }
            if (is_rma) {
                /* The pull response goes through the buffer instead. */
                tx->rma_seg = -1;
                tx->hdr_flags = PS__VB_HDR_PULL_DONE;
                tx->in_len += tx->lens[i];
                need_copy = 1;
                continue;
            }
            need_copy = 1;
        } else {
            lkeys[i] = ps__vb_mr_lkey(tx->mr[i]->handle);
        }
    }
    if (need_copy && in_buffer && tx->dbounce.buf == NULL && tx->in_len > 0) {
        ps_slice_t b;
        uint32_t lkey;
        ps_status_t st = ps__vb_pool_get(dev, (size_t)tx->in_len, &b, &lkey);
        if (st != PS_OK) {
            ps_error(PS_LOG_RDMA, "send to %s: no registered memory for %llu bytes (%s); message "
                     "dropped", conn->addr_str, (unsigned long long)tx->in_len,
                     ps_status_str(st));
            return POST_DROP;
        }
        uint64_t off = 0;
        for (uint32_t i = 0; i < tx->num_data; i++) {
            if ((int)i == tx->rma_seg || tx->lens[i] == 0)
                continue;
            memcpy((char *)ps_slice_ptr(&b) + off, ps_slice_ptr(&tx->data[i]), tx->lens[i]);
            off += tx->lens[i];
        }
        tx->dbounce = b;
        *dbounce_lkey = lkey;
    } else if (tx->dbounce.buf != NULL) {
        void *h = ps_rdma_buf_pool_handle(dev->pool, &tx->dbounce);
        *dbounce_lkey = h != NULL ? ps__vb_mr_lkey(h) : 0;
    }
    return POST_OK;
}

/* Adds the writes of `total` bytes to (raddr, rkey), split across QPs.
 * The source is either the segments (lens/ptrs/lkeys, end to end) or
 * one contiguous buffer when nseg is 0. */
static post_result_t add_writes(ps__vb_conn_t *conn, wrs_t *w, uint64_t total, uint64_t raddr,
                                uint32_t rkey, const uint64_t *lens, void *const *ptrs,
                                const uint32_t *lkeys, unsigned nseg, void *contig,
                                uint32_t contig_lkey)
{
    if (total == 0)
        return POST_OK;
    ps__vb_chunk_t chunks[PS__VB_MAX_CHUNKS];
    unsigned nc = 0;
    if (ps__vb_split(total, conn->nqp, PS__VB_SPLIT_MIN, PS__VB_MAX_WR_BYTES, chunks,
                     PS__VB_MAX_CHUNKS, &nc) != PS_OK)
        return POST_DROP;
    for (unsigned c = 0; c < nc; c++) {
        struct ibv_send_wr *wr = wr_add(w, chunks[c].qp);
        if (wr == NULL)
            return POST_DROP;
        if (nseg == 0) {
            wr->sg_list[0].addr = (uint64_t)(uintptr_t)contig + chunks[c].off;
            wr->sg_list[0].length = (uint32_t)chunks[c].len;
            wr->sg_list[0].lkey = contig_lkey;
            wr->num_sge = 1;
        } else {
            ps__vb_piece_t pieces[PS__VB_MAX_SGE];
            unsigned np = 0;
            if (ps__vb_pieces(lens, nseg, chunks[c].off, chunks[c].len, pieces,
                              conn->dev->max_sge, &np) != PS_OK)
                return POST_DROP;
            for (unsigned p = 0; p < np; p++) {
                wr->sg_list[p].addr = (uint64_t)(uintptr_t)ptrs[pieces[p].seg] + pieces[p].off;
                wr->sg_list[p].length = (uint32_t)pieces[p].len;
                wr->sg_list[p].lkey = lkeys[pieces[p].seg];
            }
            wr->num_sge = (int)np;
        }
        wr->wr.rdma.remote_addr = raddr + chunks[c].off;
        wr->wr.rdma.rkey = rkey;
        if (chunks[c].qp == 0) {
            wr->opcode = IBV_WR_RDMA_WRITE;
        } else {
            /* Counted by the receiver on that QP. */
            wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr->imm_data = ps__vb_imm_slave();
            w->slaves[chunks[c].qp]++;
        }
    }
    return POST_OK;
}

/* Links the WRs per QP, checks room, posts. The header (slave counters)
 * is encoded by `finish` once the counts are known, before posting. */
static post_result_t post_wrs(ps__vb_conn_t *conn, ps__vb_tx_t *tx, wrs_t *w)
{
    ps__vb_dev_t *dev = conn->dev;
    int signaled = 0;
    for (unsigned q = 0; q < conn->nqp; q++) {
        if (w->per_qp[q] == 0)
            continue;
        if (conn->qp[q].qp == NULL)
            return POST_FAIL;
        if (conn->qp[q].sq_used + (uint32_t)w->per_qp[q] > conn->qp[q].sq_depth) {
            if ((uint32_t)w->per_qp[q] > conn->qp[q].sq_depth)
                return POST_DROP; /* can never fit */
            return POST_AGAIN;
        }
        signaled++;
    }
    if (__atomic_sub_fetch(&dev->cq_room, signaled, __ATOMIC_ACQ_REL) < 0) {
        __atomic_add_fetch(&dev->cq_room, signaled, __ATOMIC_ACQ_REL);
        return POST_AGAIN;
    }
    /* Chain per QP in build order; the last WR of each chain is signaled. */
    struct ibv_send_wr *head[PS__VB_MAX_QP] = {0}, *tail[PS__VB_MAX_QP] = {0};
    for (int i = 0; i < w->n; i++) {
        struct ibv_send_wr *wr = &w->wr[i];
        unsigned q = (unsigned)wr->wr_id;
        wr->wr_id = 0;
        wr->next = NULL;
        if (tail[q] != NULL)
            tail[q]->next = wr;
        else
            head[q] = wr;
        tail[q] = wr;
    }
    /* Slave QPs first: their chunks are counted by the receiver; the meta
     * on QP 0 names the counts. Order across QPs does not matter. */
    for (unsigned k = conn->nqp; k-- > 0;) {
        if (head[k] == NULL)
            continue;
        tail[k]->send_flags |= IBV_SEND_SIGNALED;
        tx->wc[k].nwr = (uint16_t)w->per_qp[k];
        tail[k]->wr_id = (uint64_t)(uintptr_t)&tx->wc[k].wr;
        __atomic_add_fetch(&tx->refs, 1, __ATOMIC_RELAXED);
        /* What the device orders (post, then its completion on the
         * poller) said to the compiler and to TSan: handle_wc() loads it
         * with acquire, after every write to tx before this post. */
        __atomic_store_n(&tx->wc[k].wr.kind, PS__VB_WR_TX, __ATOMIC_RELEASE);
        struct ibv_send_wr *bad = NULL;
        int rc = ibv_post_send(conn->qp[k].qp, head[k], &bad);
        if (rc != 0) {
            /* The signaled WR is last in the chain: it was not posted. */
            __atomic_sub_fetch(&tx->refs, 1, __ATOMIC_RELAXED);
            int posted = 0;
            for (struct ibv_send_wr *p = head[k]; p != NULL && p != bad; p = p->next)
                posted++;
            conn->qp[k].sq_used += (uint32_t)posted;
            /* Give back the CQ room of this and the remaining chains. */
            int left = 0;
            for (unsigned j = 0; j <= k; j++)
                left += head[j] != NULL;
            __atomic_add_fetch(&dev->cq_room, left, __ATOMIC_ACQ_REL);
            ps_error(PS_LOG_RDMA, "ibv_post_send on queue pair 0x%x to %s: %s", conn->qp[k].qp_num,
                     conn->addr_str, strerror(rc));
            return POST_FAIL;
        }
        conn->qp[k].sq_used += (uint32_t)w->per_qp[k];
    }
    return POST_OK;
}

/* The header in front of the frame, with the slave counters after this
 * tx's slave writes. */
static size_t make_hdr(ps__vb_conn_t *conn, ps__vb_tx_t *tx, const wrs_t *w, uint8_t type,
                       uint8_t *buf, size_t cap)
{
    ps__vb_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.type = type;
    h.flags = tx->hdr_flags;
    h.rma_seg = tx->rma_seg >= 0 ? (uint8_t)tx->rma_seg : 0;
    if (tx->steer_seg >= 0) {
        h.flags |= PS__VB_HDR_STEER;
        h.rma_seg = (uint8_t)tx->steer_seg;
    }
    h.rma_slot = tx->rma_slot;
    h.nqp = (uint8_t)conn->nqp;
    h.frame_len = (uint32_t)tx->fm_len;
    for (unsigned k = 1; k < conn->nqp; k++)
        h.slave[k] = conn->qp[k].slave_sent + (uint32_t)w->slaves[k];
    size_t len = 0;
    if (ps__vb_hdr_encode(&h, buf, cap, &len) != PS_OK)
        return 0;
    return len;
}

static void commit_slaves(ps__vb_conn_t *conn, const wrs_t *w)
{
    for (unsigned k = 1; k < conn->nqp; k++)
        conn->qp[k].slave_sent += (uint32_t)w->slaves[k];
}

/* The pull-response writes into the worker's destination. */
static post_result_t add_rma(ps__vb_conn_t *conn, ps__vb_tx_t *tx, wrs_t *w, const uint32_t *lkeys)
{
    if (tx->rma_seg < 0)
        return POST_OK;
    unsigned s = (unsigned)tx->rma_seg;
    uint64_t len = tx->lens[s];
    void *ptr = ps_slice_ptr(&tx->data[s]);
    return add_writes(conn, w, len, tx->rma_addr, tx->rma_rkey, &len, &ptr, &lkeys[s], 1, NULL, 0);
}

/* ---- eager: one SEND ---- */

static post_result_t post_eager(ps__vb_conn_t *conn, ps__vb_tx_t *tx)
{
    ps__vb_dev_t *dev = conn->dev;
    uint32_t lkeys[PS_MSG_MAX_DATA];
    uint32_t unused = 0;
    post_result_t r = prepare_keys(conn, tx, 0, lkeys, &unused);
    if (r != POST_OK)
        return r;
    wrs_t *w = wrs_get(conn);
    if (w == NULL)
        return POST_AGAIN;
    if ((r = add_rma(conn, tx, w, lkeys)) != POST_OK)
        goto out;

    uint8_t hdr[PS__VB_HDR_FIXED + 4 * PS__VB_MAX_QP];
    size_t hlen = make_hdr(conn, tx, w, PS__VB_MSG_EAGER, hdr, sizeof(hdr));
    uint64_t total = hlen + tx->fm_len + tx->in_len;
    if (hlen == 0 || total > PS__VB_RX_BLOCK) {
        /* prepare_keys moved the pull values into the buffer: too big now. */
        r = POST_DROP;
        goto out;
    }
    struct ibv_send_wr *wr = wr_add(w, 0);
    if (wr == NULL) {
        r = POST_DROP;
        goto out;
    }
    wr->opcode = IBV_WR_SEND;
    unsigned nsge = 2;
    for (uint32_t i = 0; i < tx->num_data; i++)
        nsge += (int)i != tx->rma_seg && tx->lens[i] != 0;
    if (total <= __atomic_load_n(&dev->max_inline, __ATOMIC_ACQUIRE) && nsge <= dev->max_sge) {
        /* Inline: the device copies at post time; no keys needed. The
         * header lives in the tx (posting is synchronous for inline data,
         * but keep it valid anyway). */
        memcpy(tx->ctrl_buf, hdr, hlen);
        wr->send_flags = IBV_SEND_INLINE;
        unsigned n = 0;
        wr->sg_list[n].addr = (uint64_t)(uintptr_t)tx->ctrl_buf;
        wr->sg_list[n++].length = (uint32_t)hlen;
        wr->sg_list[n].addr = (uint64_t)(uintptr_t)tx->fm;
        wr->sg_list[n++].length = (uint32_t)tx->fm_len;
        for (uint32_t i = 0; i < tx->num_data; i++) {
            if ((int)i == tx->rma_seg || tx->lens[i] == 0)
                continue;
            wr->sg_list[n].addr = (uint64_t)(uintptr_t)ps_slice_ptr(&tx->data[i]);
            wr->sg_list[n++].length = (uint32_t)tx->lens[i];
        }
        wr->num_sge = (int)n;
    } else {
        if (tx->bounce.buf == NULL) {
            ps_slice_t b;
            uint32_t lkey;
            if (ps__vb_pool_get(dev, PS__VB_RX_BLOCK, &b, &lkey) != PS_OK) {
                r = POST_AGAIN;
                goto out;
            }
            tx->bounce = b;
        }
        void *h = ps_rdma_buf_pool_handle(dev->pool, &tx->bounce);
        char *p = ps_slice_ptr(&tx->bounce);
        memcpy(p, hdr, hlen);
        memcpy(p + hlen, tx->fm, tx->fm_len);
        uint64_t off = hlen + tx->fm_len;
        for (uint32_t i = 0; i < tx->num_data; i++) {
            if ((int)i == tx->rma_seg || tx->lens[i] == 0)
                continue;
            memcpy(p + off, ps_slice_ptr(&tx->data[i]), tx->lens[i]);
            off += tx->lens[i];
        }
        wr->sg_list[0].addr = (uint64_t)(uintptr_t)p;
        wr->sg_list[0].length = (uint32_t)total;
        wr->sg_list[0].lkey = h != NULL ? ps__vb_mr_lkey(h) : 0;
        wr->num_sge = 1;
    }
    r = post_wrs(conn, tx, w);
    if (r == POST_OK)
        commit_slaves(conn, w);
out:
    return r;
}

/* ---- rendezvous: data and meta written into a grant ---- */

/* What tx needs of a grant (conn->lock held). */
static void tx_need(const ps__vb_conn_t *conn, const ps__vb_tx_t *tx, ps__vb_need_t *n)
{
    n->meta_len =
        (uint32_t)(ps__vb_hdr_len(&(ps__vb_hdr_t){.nqp = (uint8_t)conn->nqp}) + tx->fm_len);
    n->data_len = tx->in_len;
    n->app_id = tx->app_id;
    n->customer_id = tx->customer_id;
    n->num_data = tx->num_data;
    n->seg_len = tx->steerable ? tx->lens : NULL;
}

static post_result_t post_rdv(ps__vb_conn_t *conn, ps__vb_tx_t *tx)
{
    ps__vb_dev_t *dev = conn->dev;
    uint32_t lkeys[PS_MSG_MAX_DATA];
    uint32_t dlkey = 0;
    post_result_t r = prepare_keys(conn, tx, 1, lkeys, &dlkey);
    if (r != POST_OK)
        return r;
    ps__vb_need_t need;
    tx_need(conn, tx, &need);
    ps__vb_fit_t fit = ps__vb_grant_fit(&tx->grant, &need);
    if (fit == PS__VB_FIT_NO) {
        /* The pull values had to move into the buffer (prepare_keys) and
         * no longer fit the grant. Rare; drop rather than overrun. */
        ps_error(PS_LOG_RDMA, "send to %s: %llu bytes do not fit the granted %llu; message "
                 "dropped", conn->addr_str, (unsigned long long)tx->in_len,
                 (unsigned long long)tx->grant.data_cap);
        return POST_DROP;
    }
    tx->steer_seg = fit == PS__VB_FIT_STEER ? (int8_t)tx->grant.steer_seg : -1;
    wrs_t *w = wrs_get(conn);
    if (w == NULL)
        return POST_AGAIN;
    if ((r = add_rma(conn, tx, w, lkeys)) != POST_OK)
        goto out;

    /* The in-buffer segments, end to end from the grant's data region,
     * but a steered one, which goes to its own region. Their bytes come
     * from the segments, or from the registered copy of them all. */
    uint64_t lens[PS_MSG_MAX_DATA + 1];
    void *ptrs[PS_MSG_MAX_DATA + 1];
    uint32_t keys[PS_MSG_MAX_DATA + 1];
    unsigned n = 0;
    uint64_t rest = tx->in_len;
    void *steer_ptr = NULL;
    uint32_t steer_lkey = 0;
    if (tx->dbounce.buf != NULL) {
        char *b = ps_slice_ptr(&tx->dbounce);
        uint64_t before = 0;
        for (int i = 0; i < tx->steer_seg; i++)
            before += i == tx->rma_seg ? 0 : tx->lens[i];
        lens[n] = tx->steer_seg >= 0 ? before : tx->in_len;
        ptrs[n] = b;
        keys[n++] = dlkey;
        if (tx->steer_seg >= 0) {
            uint64_t l = tx->lens[tx->steer_seg];
            steer_ptr = b + before;
            steer_lkey = dlkey;
            lens[n] = tx->in_len - before - l;
            ptrs[n] = b + before + l;
            keys[n++] = dlkey;
        }
    } else {
        for (uint32_t i = 0; i < tx->num_data; i++) {
            if ((int)i == tx->rma_seg)
                continue;
            if ((int)i == tx->steer_seg) {
                steer_ptr = ps_slice_ptr(&tx->data[i]);
                steer_lkey = lkeys[i];
                continue;
            }
            lens[n] = tx->lens[i];
            ptrs[n] = ps_slice_ptr(&tx->data[i]);
            keys[n++] = lkeys[i];
        }
    }
    if (tx->steer_seg >= 0) {
        uint64_t l = tx->lens[tx->steer_seg];
        rest -= l;
        r = add_writes(conn, w, l, tx->grant.steer_addr, tx->grant.steer_rkey, &l, &steer_ptr,
                       &steer_lkey, 1, NULL, 0);
        if (r != POST_OK)
            goto out;
    }
    r = add_writes(conn, w, rest, tx->grant.data_addr, tx->grant.data_rkey, lens, ptrs, keys, n,
                   NULL, 0);
    if (r != POST_OK)
        goto out;

    uint8_t hdr[PS__VB_HDR_FIXED + 4 * PS__VB_MAX_QP];
    size_t hlen = make_hdr(conn, tx, w, PS__VB_MSG_META, hdr, sizeof(hdr));
    uint64_t mlen = hlen + tx->fm_len;
    if (hlen == 0 || mlen > tx->grant.meta_cap) {
        r = POST_DROP;
        goto out;
    }
    struct ibv_send_wr *wr = wr_add(w, 0);
    if (wr == NULL) {
        r = POST_DROP;
        goto out;
    }
    wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr->imm_data = ps__vb_imm_meta(tx->grant.slot);
    wr->wr.rdma.remote_addr = tx->grant.meta_addr;
    wr->wr.rdma.rkey = tx->grant.meta_rkey;
    if (mlen <= __atomic_load_n(&dev->max_inline, __ATOMIC_ACQUIRE)) {
        memcpy(tx->ctrl_buf, hdr, hlen);
        wr->send_flags = IBV_SEND_INLINE;
        wr->sg_list[0].addr = (uint64_t)(uintptr_t)tx->ctrl_buf;
        wr->sg_list[0].length = (uint32_t)hlen;
        wr->sg_list[1].addr = (uint64_t)(uintptr_t)tx->fm;
        wr->sg_list[1].length = (uint32_t)tx->fm_len;
        wr->num_sge = 2;
    } else {
        if (tx->bounce.buf == NULL) {
            ps_slice_t b;
            if (ps__vb_pool_get(dev, (size_t)mlen, &b, NULL) != PS_OK) {
                r = POST_AGAIN;
                goto out;
            }
            tx->bounce = b;
        }
        void *h = ps_rdma_buf_pool_handle(dev->pool, &tx->bounce);
        char *p = ps_slice_ptr(&tx->bounce);
        memcpy(p, hdr, hlen);
        memcpy(p + hlen, tx->fm, tx->fm_len);
        wr->sg_list[0].addr = (uint64_t)(uintptr_t)p;
        wr->sg_list[0].length = (uint32_t)mlen;
        wr->sg_list[0].lkey = h != NULL ? ps__vb_mr_lkey(h) : 0;
        wr->num_sge = 1;
    }
    r = post_wrs(conn, tx, w);
    if (r == POST_OK)
        commit_slaves(conn, w);
out:
    return r;
}

/* ---- control messages ---- */

static post_result_t post_ctrl(ps__vb_conn_t *conn, ps__vb_tx_t *tx)
{
    ps__vb_dev_t *dev = conn->dev;
    wrs_t *w = wrs_get(conn);
    if (w == NULL)
        return POST_AGAIN;
    struct ibv_send_wr *wr = wr_add(w, 0);
    wr->opcode = IBV_WR_SEND;
    if (tx->ctrl_len <= __atomic_load_n(&dev->max_inline, __ATOMIC_ACQUIRE)) {
        wr->send_flags = IBV_SEND_INLINE;
        wr->sg_list[0].addr = (uint64_t)(uintptr_t)tx->ctrl_buf;
        wr->sg_list[0].length = tx->ctrl_len;
    } else {
        if (tx->bounce.buf == NULL) {
            ps_slice_t b;
            if (ps__vb_pool_get(dev, tx->ctrl_len, &b, NULL) != PS_OK)
                return POST_AGAIN;
            tx->bounce = b;
            memcpy(ps_slice_ptr(&b), tx->ctrl_buf, tx->ctrl_len);
        }
        void *h = ps_rdma_buf_pool_handle(dev->pool, &tx->bounce);
        wr->sg_list[0].addr = (uint64_t)(uintptr_t)ps_slice_ptr(&tx->bounce);
        wr->sg_list[0].length = tx->ctrl_len;
        wr->sg_list[0].lkey = h != NULL ? ps__vb_mr_lkey(h) : 0;
    }
    wr->num_sge = 1;
    return post_wrs(conn, tx, w);
}

/* Queues a control message (conn->lock held). */
static ps_status_t queue_ctrl(ps__vb_conn_t *conn, const ps__vb_ctrl_t *c)
{
    ps__vb_tx_t *tx = tx_new(conn);
    if (tx == NULL)
        return PS_ERR_NO_MEMORY;
    tx->is_ctrl = 1;
    size_t len = 0;
    ps_status_t st = ps__vb_ctrl_encode(c, tx->ctrl_buf, sizeof(tx->ctrl_buf), &len);
    if (st != PS_OK) {
        ps__vb_tx_release(tx);
        return st;
    }
    tx->ctrl_len = (uint32_t)len;
    push_tail(&conn->ctrl_head, &conn->ctrl_tail, tx);
    return PS_OK;
}

/* ---- the pump ---- */

static const char *post_str(post_result_t r)
{
    return r == POST_AGAIN ? "no room" : r == POST_DROP ? "dropped" : "failed";
}

/* Posts queued work in order while there is room (conn->lock held).
 * Returns POST_FAIL when the connection must be failed (by the caller,
 * after unlocking). */
static post_result_t pump(ps__vb_conn_t *conn)
{
    if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) != PS__VB_C_READY || conn->dev == NULL)
        return POST_OK;
    ps__vb_van_t *van = conn->van;
    while (conn->ctrl_head != NULL) {
        post_result_t r = post_ctrl(conn, conn->ctrl_head);
        if (r == POST_AGAIN) {
            mark_blocked(conn);
            return POST_OK;
        }
        if (r == POST_FAIL)
            return r;
        ps__vb_tx_release(pop_head(&conn->ctrl_head, &conn->ctrl_tail));
    }
    while (conn->q_head != NULL && !conn->waiting) {
        ps__vb_tx_t *tx = conn->q_head;
        if (tx->rma_seg >= 0 && tx->mr[tx->rma_seg] == NULL) {
            /* Register the pull destination's source first: if it cannot
             * be, the values go in the buffer and the path may change. */
            uint32_t lk[PS_MSG_MAX_DATA], dlk = 0;
            if (prepare_keys(conn, tx, 0, lk, &dlk) == POST_DROP) {
                ps__vb_tx_release(pop_head(&conn->q_head, &conn->q_tail));
                continue;
            }
        }
        uint64_t eager_len = ps__vb_hdr_len(&(ps__vb_hdr_t){.nqp = (uint8_t)conn->nqp}) +
                             tx->fm_len + tx->in_len;
        post_result_t r;
        /* Device memory never goes eagerly: the CPU would read it. */
        if (eager_len <= PS__VB_RX_BLOCK &&
            ps__vb_eager_data_ok(tx->data, tx->num_data, tx->rma_seg)) {
            r = post_eager(conn, tx);
        } else {
            if (tx->state == PS__VB_TX_QUEUED) {
                ps__vb_need_t need;
                tx_need(conn, tx, &need);
                ps__vb_grant_t g;
                ps__vb_gc_result_t gr =
                    tx->cacheable ? ps__vb_gcache_take(&conn->gcache, tx->key, tx->dir, &need, &g)
                                  : PS__VB_GC_MISS;
                if (gr == PS__VB_GC_HIT) {
                    tx->grant = g;
                    tx->state = PS__VB_TX_POSTED;
                } else {
                    ps__vb_ctrl_t c;
                    memset(&c, 0, sizeof(c));
                    c.type = PS__VB_MSG_RDV_START;
                    c.token = ++conn->next_token;
                    if (c.token == 0)
                        c.token = ++conn->next_token;
                    c.key = tx->key;
                    c.dir = tx->dir;
                    c.flags = tx->cacheable ? PS__VB_RDV_CACHEABLE : 0;
                    c.slot = gr == PS__VB_GC_TOO_SMALL ? g.slot : 0;
                    c.meta_len = need.meta_len;
                    c.data_len = tx->in_len;
                    if (tx->steerable) {
                        c.flags |= PS__VB_RDV_STEER;
                        c.app_id = tx->app_id;
                        c.customer_id = tx->customer_id;
                        c.is_tensor = tx->is_tensor;
                        c.num_data = (uint8_t)tx->num_data;
                        for (uint32_t i = 0; i < tx->num_data; i++)
                            c.seg_len[i] = tx->lens[i];
                    }
                    if (queue_ctrl(conn, &c) != PS_OK) {
                        mark_blocked(conn);
                        return POST_OK;
                    }
                    tx->token = c.token;
                    tx->state = PS__VB_TX_WAIT;
                    conn->waiting = 1;
                    conn->wait_token = c.token;
                    /* Send the start now. */
                    return pump(conn);
                }
            }
            r = post_rdv(conn, tx);
        }
        if (r == POST_AGAIN) {
            mark_blocked(conn);
            return POST_OK;
        }
        if (r == POST_FAIL)
            return r;
        if (r == POST_DROP) {
            ps_warn_ratelimited(PS_LOG_RDMA, "a message to %s was %s", conn->addr_str,
                                post_str(r));
            if (tx->state == PS__VB_TX_POSTED && tx->grant.slot != 0) {
                /* Its grant will not be written: give it back. */
                ps__vb_ctrl_t d;
                memset(&d, 0, sizeof(d));
                d.type = PS__VB_MSG_RDV_DROP;
                d.slot = tx->grant.slot;
                (void)queue_ctrl(conn, &d);
            }
        } else {
            __atomic_add_fetch(&van->base.bytes_sent, tx->fm_len + tx->in_len +
                                                     (tx->rma_seg >= 0 ? tx->lens[tx->rma_seg] : 0),
                               __ATOMIC_RELAXED);
        }
        ps__vb_tx_release(pop_head(&conn->q_head, &conn->q_tail));
    }
    return POST_OK;
}

void ps__vb_conn_kick(ps__vb_conn_t *conn)
{
    pthread_mutex_lock(&conn->lock);
    post_result_t r = pump(conn);
    pthread_mutex_unlock(&conn->lock);
    if (r == POST_FAIL)
        ps__vb_conn_fail(conn, PS_ERR_LINK_FAILED, "posting a work request failed");
}

ps_status_t ps__vb_send_ctrl(ps__vb_conn_t *conn, const ps__vb_ctrl_t *c)
{
    if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) == PS__VB_C_FAILED)
        return PS_ERR_PEER_GONE;
    pthread_mutex_lock(&conn->lock);
    ps_status_t st = queue_ctrl(conn, c);
    post_result_t r = st == PS_OK ? pump(conn) : POST_OK;
    pthread_mutex_unlock(&conn->lock);
    if (r == POST_FAIL) {
        ps__vb_conn_fail(conn, PS_ERR_LINK_FAILED, "posting a work request failed");
        return PS_ERR_LINK_FAILED;
    }
    return st;
}

ps_status_t ps__vb_send_first(ps__vb_conn_t *conn, const void *msg, size_t len)
{
    if (msg == NULL || len == 0 || len > PS__VB_CTRL_LEN)
        return PS_ERR_INVALID_ARG;
    if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) == PS__VB_C_FAILED)
        return PS_ERR_PEER_GONE;
    pthread_mutex_lock(&conn->lock);
    ps__vb_tx_t *tx = conn->dev != NULL ? tx_new(conn) : NULL;
    if (tx == NULL) {
        pthread_mutex_unlock(&conn->lock);
        return conn->dev != NULL ? PS_ERR_NO_MEMORY : PS_ERR_BAD_STATE;
    }
    tx->is_ctrl = 1;
    memcpy(tx->ctrl_buf, msg, len);
    tx->ctrl_len = (uint32_t)len;
    /* At the head: nothing is queued ahead of it before the connection is
     * up, and nothing was posted (pump posts only when READY). */
    tx->next = conn->ctrl_head;
    conn->ctrl_head = tx;
    if (conn->ctrl_tail == NULL)
        conn->ctrl_tail = tx;
    post_result_t r = post_ctrl(conn, tx);
    if (r == POST_OK)
        ps__vb_tx_release(pop_head(&conn->ctrl_head, &conn->ctrl_tail));
    else if (r == POST_AGAIN)
        mark_blocked(conn); /* stays first; pump posts it once READY */
    pthread_mutex_unlock(&conn->lock);
    return r == POST_FAIL || r == POST_DROP ? PS_ERR_LINK_FAILED : PS_OK;
}

static int tx_fits(const ps__vb_conn_t *conn, const ps__vb_tx_t *tx, const ps__vb_grant_t *g)
{
    ps__vb_need_t need;
    tx_need(conn, tx, &need);
    return ps__vb_grant_fit(g, &need) != PS__VB_FIT_NO;
}

void ps__vb_on_grant(ps__vb_conn_t *conn, const ps__vb_ctrl_t *c)
{
    ps__vb_grant_t g;
    ps__vb_grant_from_ctrl(c, &g);
    post_result_t r = POST_OK;
    ps__vb_tx_t *dropped = NULL;
    pthread_mutex_lock(&conn->lock);
    if (c->flags & PS__VB_RDV_REGRANT) {
        ps__vb_grant_t ev;
        if (ps__vb_gcache_put(&conn->gcache, c->key, c->dir, &g, &ev)) {
            ps__vb_ctrl_t d;
            memset(&d, 0, sizeof(d));
            d.type = PS__VB_MSG_RDV_DROP;
            d.slot = ev.slot;
            (void)queue_ctrl(conn, &d);
        }
    } else if (conn->waiting && c->token == conn->wait_token && conn->q_head != NULL &&
               conn->q_head->state == PS__VB_TX_WAIT) {
        ps__vb_tx_t *tx = conn->q_head;
        conn->waiting = 0;
        if (c->flags & PS__VB_RDV_REFUSED) {
            ps_error(PS_LOG_RDMA, "node %d at %s has no buffer for a message of %llu bytes "
                     "(see its log); message dropped",
                     __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE), conn->addr_str,
                     (unsigned long long)tx->in_len);
            dropped = pop_head(&conn->q_head, &conn->q_tail);
        } else if (!tx_fits(conn, tx, &g)) {
            ps_error(PS_LOG_RDMA, "node %d at %s granted less than asked; message dropped",
                     __atomic_load_n(&conn->peer_id, __ATOMIC_ACQUIRE), conn->addr_str);
            dropped = pop_head(&conn->q_head, &conn->q_tail);
            ps__vb_ctrl_t d;
            memset(&d, 0, sizeof(d));
            d.type = PS__VB_MSG_RDV_DROP;
            d.slot = g.slot;
            (void)queue_ctrl(conn, &d);
        } else {
            tx->grant = g;
            tx->state = PS__VB_TX_POSTED;
        }
    } else if (!(c->flags & PS__VB_RDV_REFUSED)) {
        /* A grant nobody waits for (its message was dropped): give it back. */
        ps__vb_ctrl_t d;
        memset(&d, 0, sizeof(d));
        d.type = PS__VB_MSG_RDV_DROP;
        d.slot = g.slot;
        (void)queue_ctrl(conn, &d);
    }
    r = pump(conn);
    pthread_mutex_unlock(&conn->lock);
    ps__vb_tx_release(dropped);
    if (r == POST_FAIL)
        ps__vb_conn_fail(conn, PS_ERR_LINK_FAILED, "posting a work request failed");
}

void ps__vb_tx_complete(ps__vb_txwc_t *wc, int ok)
{
    ps__vb_tx_t *tx = wc->tx;
    ps__vb_conn_t *conn = tx->conn;
    pthread_mutex_lock(&conn->lock);
    ps__vb_qp_t *qp = &conn->qp[wc->qp];
    qp->sq_used = qp->sq_used >= wc->nwr ? qp->sq_used - wc->nwr : 0;
    pthread_mutex_unlock(&conn->lock);
    if (conn->dev != NULL)
        __atomic_add_fetch(&conn->dev->cq_room, 1, __ATOMIC_ACQ_REL);
    (void)ok;
    ps__vb_tx_release(tx);
}

/* ---- send() ---- */

/* The worker side of a pull: registers the destination the postoffice
 * names for the response and describes it in van_data. */
static uint32_t pull_prepare(ps__vb_van_t *van, ps__vb_conn_t *conn, ps_meta_t *m)
{
    if (van->base.cb.recv_buffer == NULL || conn->dev == NULL || m->van_data_len != 0)
        return 0;
    ps_meta_t rm = *m;
    rm.request = false;
    rm.push = false;
    rm.sender = m->recver;
    rm.recver = ps__vb_my_id(van);
    rm.body = NULL;
    rm.body_len = 0;
    rm.control.cmd = PS_CTRL_EMPTY;
    rm.control.nodes = NULL;
    rm.control.num_nodes = 0;
    ps_slice_t dest = PS_SLICE_EMPTY_INIT;
    /* Device memory too: the NIC writes it when the cache can register it. */
    if (ps_van_recv_dest(&van->base, &rm, 1, m->val_len, PS_VAN_DEVICE_ANY, &dest) != PS_OK)
        return 0;
    ps_rdma_mr_t *mr = NULL;
    if (ps_rdma_mr_cache_get(conn->dev->mrc, &dest, &mr) != PS_OK) {
        /* Logged by the cache; the response comes through a buffer. */
        ps_slice_unref(&dest);
        return 0;
    }
    ps__vb_pull_t *pull = calloc(1, sizeof(*pull));
    uint32_t slot = 0;
    if (pull == NULL) {
        ps_rdma_mr_cache_put(conn->dev->mrc, mr);
        ps_slice_unref(&dest);
        return 0;
    }
    pull->peer = m->recver;
    pull->app_id = m->app_id;
    pull->customer_id = m->customer_id;
    pull->timestamp = m->timestamp;
    pull->dest = dest;
    pull->mr = mr;
    pull->dev = conn->dev;
    if (ps_rdma_slot_alloc(van->pulls, pull, &slot) != PS_OK) {
        ps__vb_pull_free(pull);
        return 0;
    }
    ps__vb_pull_desc_t d;
    d.slot = slot;
    d.rkey = ps__vb_mr_rkey(mr->handle);
    d.addr = (uint64_t)(uintptr_t)ps_slice_ptr(&dest);
    d.len = m->val_len;
    if (ps__vb_pull_desc_encode(&d, m->van_data, sizeof(m->van_data), &m->van_data_len) != PS_OK) {
        ps__vb_pull_free(ps_rdma_slot_release(van->pulls, slot));
        return 0;
    }
    return slot;
}

/* Frame header + meta into the tx (inline buffer or heap). */
static ps_status_t encode_fm(ps__vb_van_t *van, ps__vb_tx_t *tx, const ps_meta_t *meta)
{
    size_t hlen = ps_frame_header_len(tx->num_data);
    size_t mlen = 0;
    ps_status_t st = PS_ERR_TOO_LARGE;
    uint8_t *buf = tx->fm_inline;
    if (sizeof(tx->fm_inline) > hlen)
        st = ps_meta_encode(meta, buf + hlen, sizeof(tx->fm_inline) - hlen, &mlen);
    if (st == PS_ERR_TOO_LARGE) {
        size_t need;
        if ((st = ps_meta_encoded_size(meta, &need)) != PS_OK)
            return st;
        if (need > van->limits.max_meta_bytes) {
            ps_error(PS_LOG_RDMA, "meta of %zu bytes exceeds the limit of %u (PS_MAX_META_BYTES)",
                     need, van->limits.max_meta_bytes);
            return PS_ERR_TOO_LARGE;
        }
        tx->fm_heap = malloc(hlen + need);
        if (tx->fm_heap == NULL)
            return PS_ERR_NO_MEMORY;
        buf = tx->fm_heap;
        st = ps_meta_encode(meta, buf + hlen, need, &mlen);
    }
    if (st != PS_OK)
        return st;
    size_t got = 0;
    st = ps_frame_header_build(0, (uint32_t)mlen, tx->lens, (uint16_t)tx->num_data, &van->limits,
                               buf, hlen, &got);
    if (st != PS_OK) {
        ps_error(PS_LOG_RDMA, "send: the message breaks the frame limits (%s)", ps_status_str(st));
        return st;
    }
    tx->fm = buf;
    tx->fm_len = hlen + mlen;
    return PS_OK;
}

ps_status_t ps__vb_send(ps_van_t *v, const ps_msg_t *msg)
{
    ps__vb_van_t *van = ps__vb_of(v);
    if (msg == NULL || msg->num_data > PS_MSG_MAX_DATA)
        return PS_ERR_INVALID_ARG;
    int recver = msg->meta.recver;
    if (ps_van_check_recver(&van->base, recver, "send") != PS_OK)
        return PS_ERR_INVALID_ARG;
    if (msg->meta.van_data_len != 0 &&
        ps__vb_pull_desc_decode(msg->meta.van_data, msg->meta.van_data_len,
                                &(ps__vb_pull_desc_t){0}) != PS_ERR_NOT_FOUND) {
        ps_error(PS_LOG_RDMA, "send: van_data carries the ibverbs van's pull descriptor tag");
        return PS_ERR_INVALID_ARG;
    }
    ps__vb_conn_t *conn = ps__vb_peer_send_conn(van, recver);
    if (conn == NULL) {
        return ps_van_unconnected(&van->base, recver, ps__vb_peer_lost(van, recver));
    }
    ps__vb_tx_t *tx = tx_new(conn);
    ps__vb_conn_unref(conn); /* the tx holds one */
    if (tx == NULL)
        return PS_ERR_NO_MEMORY;

    ps_meta_t m = msg->meta;
    if (m.control.num_nodes == 0 && msg->num_nodes != 0) {
        m.control.nodes = msg->nodes;
        m.control.num_nodes = msg->num_nodes;
    }
    tx->num_data = msg->num_data;
    for (uint32_t i = 0; i < msg->num_data; i++) {
        tx->data[i] = ps_slice_ref(&msg->data[i]);
        tx->lens[i] = msg->data[i].len;
    }
    int is_control = ps_meta_is_control(&m);
    uint32_t pull_slot = 0;
    if (!is_control && m.request && m.pull && m.val_len > 0)
        pull_slot = pull_prepare(van, conn, &m);
    if (!is_control && !m.request && m.pull) {
        ps_rdma_rdv_key_t key = {recver, m.app_id, m.customer_id, m.timestamp};
        ps__vb_pull_desc_t *d = ps_rdma_rdv_take(van->dests, &key);
        if (d != NULL) {
            tx->rma_slot = d->slot;
            if (msg->num_data >= 2 && tx->lens[1] > 0 && tx->lens[1] <= d->len &&
                conn->dev != NULL) {
                tx->rma_seg = 1;
                tx->rma_addr = d->addr;
                tx->rma_rkey = d->rkey;
                tx->hdr_flags = PS__VB_HDR_RMA;
            } else {
                tx->hdr_flags = PS__VB_HDR_PULL_DONE;
            }
            free(d);
        }
    }
    tx->in_len = 0;
    for (uint32_t i = 0; i < tx->num_data; i++) {
        if ((int)i != tx->rma_seg)
            tx->in_len += tx->lens[i];
    }
    tx->key = m.key;
    tx->dir = (uint8_t)((m.request ? PS__VB_DIR_REQUEST : 0) | (m.push ? PS__VB_DIR_PUSH : 0));
    tx->app_id = m.app_id;
    tx->customer_id = m.customer_id;
    tx->is_tensor = m.is_tensor ? 1 : 0;
    /* A request's segments may land in a buffer the receiver names (a
     * server's registered receive buffer): its START says whom it is for.
     * Responses are claimed by timestamp, which a reused grant cannot
     * carry; they use the pull descriptor instead. */
    tx->steerable = !is_control && m.request && tx->rma_seg < 0 && tx->num_data > 0;
    /* Data messages reuse grants per (key, direction), as upstream did;
     * control messages and the simple app take one-shot buffers. */
    tx->cacheable = !is_control && !m.simple_app && tx->in_len > 0;

    ps_status_t st = encode_fm(van, tx, &m);
    if (st != PS_OK) {
        if (pull_slot != 0)
            ps__vb_pull_free(ps_rdma_slot_release(van->pulls, pull_slot));
        ps__vb_tx_release(tx);
        return st;
    }
    if (van->print_log) {
        char line[192];
        ps_msg_describe(msg, line, sizeof(line));
        ps_info(PS_LOG_RDMA, "send to node %d: %s", recver, line);
    }

    pthread_mutex_lock(&conn->lock);
    if (__atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) == PS__VB_C_FAILED) {
        pthread_mutex_unlock(&conn->lock);
        ps__vb_tx_release(tx);
        return PS_ERR_PEER_GONE;
    }
    push_tail(&conn->q_head, &conn->q_tail, tx);
    post_result_t r = pump(conn);
    pthread_mutex_unlock(&conn->lock);
    if (r == POST_FAIL) {
        ps__vb_conn_fail(conn, PS_ERR_LINK_FAILED, "posting a work request failed");
        return PS_ERR_LINK_FAILED;
    }
    return PS_OK;
}

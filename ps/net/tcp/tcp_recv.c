/*
 * The receive side of a TCP connection: an incremental state machine
 * (header -> meta -> each data segment) run by the progress thread.
 *
 * Bytes are read into a per-connection staging buffer, where small frames
 * arrive many to one read and are parsed in place. A data segment gets its
 * destination as soon as the meta is decoded: the buffer the postoffice
 * names through recv_buffer() (a pull response lands in the worker's own
 * buffer), or a pooled one. The rest of a segment is then read straight
 * into that destination with readv(), whose second iovec catches the next
 * frame's first bytes in the staging buffer.
 *
 * Every length is checked by the frame parser before anything is
 * allocated; a frame that breaks the format or the limits closes the
 * connection with one log line, and nothing else is affected.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/net/tcp/tcp_internal.h"
#include "ps/net/van/rx.h"

void ps__tcp_rx_reset(ps__tcp_conn_t *conn)
{
    ps_msg_release(&conn->rmsg);
    ps_msg_init(&conn->rmsg);
    conn->phase = PS__TCP_RX_HEADER;
    conn->npiece = 0;
    conn->piece_idx = 0;
    conn->piece_off = 0;
    conn->stripe_left = 0;
    conn->stripe_unassigned = 0;
}

void ps__tcp_stripe_range(uint64_t total, int n, int i, uint64_t *off_p, uint64_t *len_p)
{
    /* Page-sized cuts: each chunk lands on a page boundary of the data. */
    uint64_t chunk = (total / (uint64_t)n) & ~(uint64_t)4095;
    *off_p = chunk * (uint64_t)i;
    *len_p = i == n - 1 ? total - chunk * (uint64_t)(n - 1) : chunk;
}

/* Reading on or off (striping waits): under the send lock, which guards
 * the epoll registration. */
static void rx_enable(ps__tcp_conn_t *conn, int on)
{
    pthread_mutex_lock(&conn->send_lock);
    if (conn->state == PS__TCP_READY && conn->rx_off == on) {
        conn->rx_off = !on;
        ps__tcp_set_epoll(conn, conn->epoll_out);
    }
    pthread_mutex_unlock(&conn->send_lock);
}

/* Whether this stream belongs to a striped group that we receive. */
static int rx_striped_group(const ps__tcp_conn_t *conn)
{
    return !conn->outgoing && conn->hello_seen && conn->nstreams > 1;
}

/* Stream `i` of conn's group (same nonce, accepted, identified by hello). */
static ps__tcp_conn_t *rx_sibling(ps__tcp_conn_t *conn, int i)
{
    for (ps__tcp_conn_t *c = conn->van->conns; c != NULL; c = c->next) {
        if (c->stream == i && c->nonce == conn->nonce && rx_striped_group(c) &&
            c->state == PS__TCP_READY && c->peer_id == conn->peer_id) {
            return c;
        }
    }
    return NULL;
}

/* Points conn's pieces at bytes [off, off + len) of msg's data, whose
 * segments have the lengths `lens` (a segment's buffer may be smaller
 * while it grows: the piece's cap). */
static void rx_set_pieces(ps__tcp_conn_t *conn, const ps_msg_t *msg, const uint64_t *lens,
                          uint64_t off, uint64_t len)
{
    conn->npiece = 0;
    conn->piece_idx = 0;
    conn->piece_off = 0;
    uint64_t start = 0;
    for (uint32_t s = 0; s < msg->num_data && len > 0; ++s) {
        uint64_t slen = lens[s];
        if (off < start + slen) {
            uint64_t in = off - start;
            uint64_t take = slen - in < len ? slen - in : len;
            uint64_t have = msg->data[s].len > in ? msg->data[s].len - in : 0;
            ps__tcp_piece_t *pc = &conn->piece[conn->npiece];
            pc->ptr = (uint8_t *)ps_slice_ptr(&msg->data[s]) + in;
            pc->len = take;
            pc->cap = have < take ? have : take;
            pc->seg = (int)s;
            pc->reports = in == 0 && conn->phase != PS__TCP_RX_CHUNK;
            conn->npiece++;
            off += take;
            len -= take;
        }
        start += slen;
    }
}

/* Stream 0 `s0` hands chunk i of its striped frame to stream `sib`. */
static void rx_give_chunk(ps__tcp_conn_t *s0, ps__tcp_conn_t *sib, int i)
{
    uint64_t off, len;
    ps__tcp_stripe_range(s0->hdr.data_total, s0->nstreams, i, &off, &len);
    rx_set_pieces(sib, &s0->rmsg, s0->hdr.data_len, off, len);
    s0->stripe_unassigned &= ~(1u << i);
}

/* Conns with bytes staged that nobody will read for them (no epoll event
 * will come): the loop runs them before the round ends. */
static void rx_mark_ready(ps__tcp_conn_t *conn)
{
    if (!conn->rx_ready) {
        conn->rx_ready = 1;
        conn->next_ready = conn->van->rx_ready;
        conn->van->rx_ready = conn;
    }
}

void ps__tcp_run_ready(ps__tcp_van_t *van)
{
    while (van->rx_ready != NULL) {
        ps__tcp_conn_t *conn = van->rx_ready;
        van->rx_ready = conn->next_ready;
        conn->next_ready = NULL;
        conn->rx_ready = 0;
        if (conn->state == PS__TCP_READY) {
            ps__tcp_on_readable(conn);
        }
    }
}

/* A chunk of s0's striped frame is complete. */
static void rx_chunk_done(ps__tcp_conn_t *s0);

/* Makes the staging buffer able to hold `need` bytes from rstart. */
static ps_status_t rx_make_room(ps__tcp_conn_t *conn, size_t need)
{
    size_t have = conn->rend - conn->rstart;
    if (conn->rstart + need <= conn->rcap) {
        return PS_OK;
    }
    if (need <= conn->rcap) {
        memmove(conn->rbuf, conn->rbuf + conn->rstart, have);
        conn->rstart = 0;
        conn->rend = have;
        return PS_OK;
    }
    /* A meta bigger than the staging buffer (within the limits already
     * checked). What the header announces is only a claim: the buffer
     * doubles as the bytes fill it, so a peer that announces a big meta
     * and stalls pins no more than it sent. */
    if (conn->rstart > 0) {
        memmove(conn->rbuf, conn->rbuf + conn->rstart, have);
        conn->rstart = 0;
        conn->rend = have;
    }
    if (have < conn->rcap) {
        return PS_OK; /* room left: read more first */
    }
    size_t grow = conn->rcap * 2 < need ? conn->rcap * 2 : need;
    uint8_t *nb = malloc(grow);
    if (nb == NULL) {
        ps_error(PS_LOG_TCP, "cannot allocate %zu bytes for a frame from %s", grow,
                 conn->addr_str);
        return PS_ERR_NO_MEMORY;
    }
    memcpy(nb, conn->rbuf + conn->rstart, have);
    free(conn->rbuf);
    conn->rbuf = nb;
    conn->rcap = grow;
    conn->rstart = 0;
    conn->rend = have;
    return PS_OK;
}

/* Whether this connection may speak for node `id`. With a job secret, it
 * is held to the id it proved the secret under (tcp_auth.c). With or
 * without one, an id that a live connection from another connect() (its
 * own nonce) already speaks for is refused: a stranger cannot take over a
 * running node's id next to it. (A node that really restarts gets its id
 * only after the scheduler declared the old process dead, and every node
 * disconnected it.) */
static int rx_may_claim(ps__tcp_van_t *van, ps__tcp_conn_t *conn, int id, uint64_t nonce)
{
    if (id != PS_NODE_EMPTY && (id <= 0 || id >= PS_NODE_EMPTY)) {
        return 0;
    }
    if (!ps__tcp_auth_claim_ok(conn, id)) {
        return 0;
    }
    if (id == PS_NODE_EMPTY || conn->peer_id == id) {
        return 1;
    }
    int taken = 0;
    pthread_rwlock_rdlock(&van->sock.peers.lock);
    ps__tcp_peer_t *p = ps_van_peer_table_get(&van->sock.peers, id, 0);
    for (int i = 0; p != NULL && i < p->num_in; ++i) {
        if (p->in[i] != conn && p->in[i]->nonce != nonce) {
            taken = 1;
        }
    }
    pthread_rwlock_unlock(&van->sock.peers.lock);
    return !taken;
}

static ps_status_t rx_hello(ps__tcp_conn_t *conn, int id, uint64_t nonce, int stream,
                            int nstreams)
{
    ps__tcp_van_t *van = conn->van;
    if (conn->outgoing) {
        /* We know who we connected to; a hello may only confirm it. */
        if (id != conn->peer_id) {
            ps_error(PS_LOG_TCP, "connection to node %d at %s: peer announced itself as node %d; closing",
                     conn->peer_id, conn->addr_str, id);
            return PS_ERR_PROTOCOL;
        }
        return PS_OK;
    }
    if (!rx_may_claim(van, conn, id, nonce)) {
        ps_error(PS_LOG_TCP, "connection from %s claims node id %d, which it may not; closing",
                 conn->addr_str, id);
        return PS_ERR_AUTH;
    }
    if (conn->peer_id != PS_NODE_EMPTY && id != conn->peer_id) {
        ps_error(PS_LOG_TCP, "connection from %s re-announced itself as node %d after node %d; closing",
                 conn->addr_str, id, conn->peer_id);
        return PS_ERR_PROTOCOL;
    }
    if (nstreams < 1 || nstreams > PS__TCP_MAX_STREAMS || stream < 0 || stream >= nstreams ||
        (conn->hello_seen && (stream != conn->stream || nstreams != conn->nstreams))) {
        ps_error(PS_LOG_TCP, "connection from %s announced stream %d of %d; closing",
                 conn->addr_str, stream, nstreams);
        return PS_ERR_PROTOCOL;
    }
    if (!conn->hello_seen) {
        /* Once: a re-announcement only confirms them, and senders read
         * nstreams of identified connections (under the peer table's lock). */
        conn->hello_seen = 1;
        conn->nonce = nonce;
        conn->stream = stream;
        conn->nstreams = nstreams;
        ps__tcp_admitted(conn); /* the secret, if any, came first */
    }
    if (id != PS_NODE_EMPTY && conn->peer_id == PS_NODE_EMPTY) {
        ps_status_t st = ps__tcp_peer_add_in(van, conn, id);
        if (st != PS_OK) {
            return st;
        }
        ps_info(PS_LOG_TCP, "node %d connected from %s (stream %d of %d)", id, conn->addr_str,
                stream, nstreams);
    } else if (id == PS_NODE_EMPTY) {
        ps_info(PS_LOG_TCP, "unassigned node connected from %s (nonce 0x%llx)", conn->addr_str,
                (unsigned long long)nonce);
    }
    return PS_OK;
}

/* Decodes the meta of the current frame; either handles a hello or sets
 * up conn->rmsg for the data segments. */
static ps_status_t rx_meta(ps__tcp_conn_t *conn, const uint8_t *p, size_t len, int *hello_p)
{
    ps__tcp_van_t *van = conn->van;
    ps_meta_t meta;
    ps_status_t st = ps_van_meta_decode(&van->base, p, len, conn->peer_id, conn->addr_str, &meta);
    if (st != PS_OK) {
        return PS_ERR_PROTOCOL;
    }

    /* Job secret (tcp_auth.c): its handshake frames, and nothing from a
     * connection that has not finished it. */
    int consumed = 0;
    st = ps__tcp_auth_rx(conn, &meta, &consumed);
    if (st != PS_OK || consumed) {
        *hello_p = 1; /* no data follows */
        return st;
    }

    uint64_t nonce;
    int stream, nstreams;
    if (ps__tcp_parse_hello(&meta, &nonce, &stream, &nstreams)) {
        if (conn->hdr.num_data != 0) {
            ps_error(PS_LOG_TCP, "hello with data from %s; closing", conn->addr_str);
            return PS_ERR_PROTOCOL;
        }
        *hello_p = 1;
        return rx_hello(conn, meta.sender, nonce, stream, nstreams);
    }
    if (!conn->outgoing && !conn->hello_seen) {
        ps_error(PS_LOG_TCP, "first frame from %s is not a hello; closing", conn->addr_str);
        return PS_ERR_PROTOCOL;
    }
    *hello_p = 0;

    ps_msg_t *m = &conn->rmsg;
    /* Who sent it is who the connection proved to be, never the wire. */
    st = ps_van_msg_take_meta(m, &meta, conn->peer_id);
    if (st != PS_OK) {
        return st;
    }
    m->num_data = conn->hdr.num_data;
    for (uint32_t i = 0; i < m->num_data; ++i) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        m->data[i] = empty;
    }
    return PS_OK;
}

/* Picks where segment `seg` lands. A van buffer for a segment bigger
 * than PS_RECV_PREALLOC_BYTES starts at that size when `grow` allows (the
 * stream fills it in order) and doubles as the bytes come: a length on
 * the wire is a claim, not a reason to allocate. */
static ps_status_t rx_seg_dest(ps__tcp_conn_t *conn, uint32_t seg, int grow)
{
    ps__tcp_van_t *van = conn->van;
    uint64_t len = conn->hdr.data_len[seg];
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    if (ps_van_recv_dest(&van->base, &conn->rmsg.meta, seg, len, 0, &s) != PS_OK) {
        uint64_t first = grow && len > van->prealloc ? van->prealloc : len;
        ps_status_t st = ps_van_rx_pool_get(van->sock.pool, first, &s);
        if (st != PS_OK) {
            return st;
        }
    }
    conn->rmsg.data[seg] = s;
    return PS_OK;
}

/* The meta is decoded: every segment gets its destination now, and this
 * stream its pieces to fill (all the data, or chunk 0 of a striped frame,
 * whose other chunks go to the group's other streams). */
static ps_status_t rx_setup_data(ps__tcp_conn_t *conn)
{
    uint64_t total = conn->hdr.data_total;
    int striped = rx_striped_group(conn) && conn->stream == 0 && total >= PS__TCP_STRIPE_MIN;
    for (uint32_t i = 0; i < conn->hdr.num_data; ++i) {
        if (conn->hdr.data_len[i] != 0) {
            /* Striped chunks land out of order: full buffers. */
            ps_status_t st = rx_seg_dest(conn, i, !striped);
            if (st != PS_OK) {
                return st;
            }
        }
    }
    if (!striped) {
        rx_set_pieces(conn, &conn->rmsg, conn->hdr.data_len, 0, total);
        return PS_OK;
    }
    uint64_t off, len;
    ps__tcp_stripe_range(total, conn->nstreams, 0, &off, &len);
    rx_set_pieces(conn, &conn->rmsg, conn->hdr.data_len, off, len);
    conn->stripe_left = conn->nstreams;
    conn->stripe_unassigned = 0;
    for (int i = 1; i < conn->nstreams; ++i) {
        conn->stripe_unassigned |= 1u << i;
        ps__tcp_conn_t *sib = rx_sibling(conn, i);
        if (sib != NULL && sib->phase == PS__TCP_RX_CHUNK && sib->npiece == 0) {
            rx_give_chunk(conn, sib, i);
            rx_enable(sib, 1);
            rx_mark_ready(sib); /* its first bytes may be staged already */
        }
    }
    return PS_OK;
}

static void rx_deliver(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    ps_msg_t msg = conn->rmsg;
    ps_msg_init(&conn->rmsg);
    conn->phase = PS__TCP_RX_HEADER;
    conn->npiece = 0;
    conn->piece_idx = 0;
    conn->piece_off = 0;
    ps_van_base_deliver(&van->base, &msg);
}

/* The current piece's buffer is full and more of it has arrived: a buffer
 * twice the size (at most the segment's) takes over, with what it held. */
static ps_status_t rx_piece_grow(ps__tcp_conn_t *conn, ps__tcp_piece_t *pc)
{
    ps__tcp_van_t *van = conn->van;
    uint64_t cap = pc->cap * 2 < pc->len ? pc->cap * 2 : pc->len;
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    ps_status_t st = ps_van_rx_pool_get(van->sock.pool, cap, &s);
    if (st != PS_OK) {
        ps_error(PS_LOG_TCP, "cannot grow a receive buffer to %llu bytes for %s (%s)",
                 (unsigned long long)cap, conn->addr_str, ps_status_str(st));
        return st;
    }
    memcpy(ps_slice_ptr(&s), pc->ptr, (size_t)conn->piece_off);
    ps_slice_unref(&conn->rmsg.data[pc->seg]);
    conn->rmsg.data[pc->seg] = s;
    pc->ptr = ps_slice_ptr(&s);
    pc->cap = cap;
    return PS_OK;
}

/* Tells the destination's owner how far piece pc is written. */
static void rx_report(const ps__tcp_conn_t *conn, const ps__tcp_piece_t *pc)
{
    if (pc->reports) {
        ps_slice_filled(&conn->rmsg.data[pc->seg], (size_t)conn->piece_off);
    }
}

/* Copies staged bytes into the pieces; 1 once every piece is full, 0 when
 * more bytes are needed (or there are no pieces: a chunk stream idle), -1
 * when a buffer could not grow (logged). */
static int rx_fill_pieces(ps__tcp_conn_t *conn)
{
    if (conn->npiece == 0) {
        return conn->phase == PS__TCP_RX_DATA; /* a frame without data */
    }
    while (conn->piece_idx < conn->npiece) {
        ps__tcp_piece_t *pc = &conn->piece[conn->piece_idx];
        if (conn->piece_off == pc->len) {
            conn->piece_idx++;
            conn->piece_off = 0;
            continue;
        }
        size_t avail = conn->rend - conn->rstart;
        if (avail == 0) {
            return 0;
        }
        if (conn->piece_off == pc->cap && rx_piece_grow(conn, pc) != PS_OK) {
            return -1;
        }
        uint64_t want = pc->cap - conn->piece_off;
        size_t take = avail < want ? avail : (size_t)want;
        memcpy(pc->ptr + conn->piece_off, conn->rbuf + conn->rstart, take);
        conn->rstart += take;
        conn->piece_off += take;
        rx_report(conn, pc);
    }
    return 1;
}

/* Parses what is staged, filling segments and delivering complete
 * messages. PS_OK means "need more bytes"; an error means the stream is
 * broken (already logged). */
static ps_status_t rx_consume(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    for (;;) {
        if (conn->state == PS__TCP_DEAD) {
            return PS_OK; /* a callback tore it down */
        }
        size_t avail = conn->rend - conn->rstart;
        switch (conn->phase) {
        case PS__TCP_RX_HEADER: {
            if (avail == 0) {
                return PS_OK;
            }
            size_t need = 0;
            ps_status_t st = ps_frame_header_parse(conn->rbuf + conn->rstart, avail,
                                                   &van->limits, &conn->hdr, &need);
            if (st == PS_INPROGRESS) {
                return rx_make_room(conn, need);
            }
            if (st != PS_OK) {
                ps_error(PS_LOG_TCP, "bad frame header from %s (%s); closing the connection",
                         conn->addr_str, ps_status_str(st));
                return st == PS_ERR_TOO_LARGE ? PS_ERR_TOO_LARGE : PS_ERR_PROTOCOL;
            }
            if (conn->hdr.num_data > PS_MSG_MAX_DATA) {
                ps_error(PS_LOG_TCP, "frame from %s has %u data segments, more than %d; closing",
                         conn->addr_str, conn->hdr.num_data, PS_MSG_MAX_DATA);
                return PS_ERR_TOO_LARGE;
            }
            if (conn->admit_pending &&
                ((size_t)conn->hdr.header_len + conn->hdr.meta_len > PS_VAN_PREAUTH_BYTES ||
                 conn->hdr.data_total != 0)) {
                /* Before the handshake only the hello and the secret's
                 * frames come, all small and without data. */
                ps_error(PS_LOG_TCP, "frame of %llu bytes from %s before its handshake; closing",
                         (unsigned long long)(conn->hdr.header_len + conn->hdr.meta_len +
                                              conn->hdr.data_total),
                         conn->addr_str);
                return PS_ERR_TOO_LARGE;
            }
            conn->phase = PS__TCP_RX_META;
            break;
        }
        case PS__TCP_RX_META: {
            size_t need = (size_t)conn->hdr.header_len + conn->hdr.meta_len;
            if (avail < need) {
                return rx_make_room(conn, need);
            }
            int hello = 0;
            ps_status_t st = rx_meta(conn, conn->rbuf + conn->rstart + conn->hdr.header_len,
                                     conn->hdr.meta_len, &hello);
            conn->rstart += need;
            if (st != PS_OK) {
                return st;
            }
            if (hello) {
                /* After its hello, a stream > 0 of a striped group only
                 * ever carries chunks. */
                conn->phase = rx_striped_group(conn) && conn->stream > 0 ? PS__TCP_RX_CHUNK
                                                                         : PS__TCP_RX_HEADER;
                if (conn->phase == PS__TCP_RX_CHUNK) {
                    ps__tcp_conn_t *s0 = rx_sibling(conn, 0);
                    if (s0 != NULL && (s0->stripe_unassigned & (1u << conn->stream))) {
                        rx_give_chunk(s0, conn, conn->stream);
                    }
                }
                break;
            }
            st = rx_setup_data(conn);
            if (st != PS_OK) {
                return st;
            }
            conn->phase = PS__TCP_RX_DATA;
            break;
        }
        case PS__TCP_RX_DATA:
        case PS__TCP_RX_CHUNK: {
            int full = rx_fill_pieces(conn);
            if (full < 0) {
                return PS_ERR_NO_MEMORY;
            }
            if (!full) {
                if (conn->phase == PS__TCP_RX_CHUNK && conn->npiece == 0) {
                    rx_enable(conn, 0); /* nothing to fill until stream 0 says */
                }
                return PS_OK;
            }
            if (conn->phase == PS__TCP_RX_CHUNK) {
                conn->npiece = 0;
                ps__tcp_conn_t *s0 = rx_sibling(conn, 0);
                if (s0 != NULL) {
                    rx_chunk_done(s0);
                }
                break;
            }
            if (conn->stripe_left > 0 && --conn->stripe_left > 0) {
                /* Our chunk is in; the others are still coming. Nothing
                 * after this frame may be delivered before it. */
                conn->phase = PS__TCP_RX_STRIPE_WAIT;
                rx_enable(conn, 0);
                return PS_OK;
            }
            rx_deliver(conn);
            break;
        }
        case PS__TCP_RX_STRIPE_WAIT:
            return PS_OK;
        }
    }
}

static void rx_chunk_done(ps__tcp_conn_t *s0)
{
    if (s0->stripe_left > 0 && --s0->stripe_left == 0 && s0->phase == PS__TCP_RX_STRIPE_WAIT) {
        rx_deliver(s0);
        rx_enable(s0, 1);
        rx_mark_ready(s0); /* the next frames may be staged already */
    }
}

/* Before going back to epoll: while the rest of a large frame is on its
 * way, ask the kernel not to wake us for every packet (SO_RCVLOWAT), but
 * only once a good chunk of it is there. Never more than the frame still
 * needs, so the wait always ends; back to the default for headers. */
static void rx_set_lowat(ps__tcp_conn_t *conn)
{
    uint64_t need = 0;
    if (conn->phase == PS__TCP_RX_DATA || conn->phase == PS__TCP_RX_CHUNK) {
        for (uint32_t i = conn->piece_idx; i < conn->npiece; ++i) {
            need += conn->piece[i].len;
        }
        need -= conn->piece_off;
        uint64_t staged = conn->rend - conn->rstart;
        need = need > staged ? need - staged : 0;
    }
    int want = 0;
    if (need >= PS__TCP_LOWAT_MIN) {
        want = need > PS__TCP_LOWAT_MAX ? (int)PS__TCP_LOWAT_MAX : (int)need;
    }
    if (want == conn->rcvlowat) {
        return;
    }
    int v = want > 0 ? want : 1;
    if (setsockopt(conn->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0) {
        conn->rcvlowat = want;
    }
}

void ps__tcp_on_readable(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    size_t budget = PS__TCP_READ_BUDGET;
    int short_read = 0;
    for (;;) {
        ps_status_t st = rx_consume(conn);
        if (conn->state == PS__TCP_DEAD) {
            return;
        }
        if (st != PS_OK) {
            ps__tcp_conn_fail(conn, st, 1);
            return;
        }
        if (conn->phase == PS__TCP_RX_STRIPE_WAIT ||
            (conn->phase == PS__TCP_RX_CHUNK && conn->npiece == 0)) {
            /* Striping: this stream waits for the others. No low-water
             * mark left over from its last chunk may outlast the wait (a
             * smaller next chunk would never wake us). */
            rx_set_lowat(conn);
            return;
        }
        if (short_read || budget == 0) {
            /* Level-triggered epoll brings us back if more is there. */
            rx_set_lowat(conn);
            return;
        }
        if (conn->rstart == conn->rend) {
            conn->rstart = conn->rend = 0;
        }
        struct iovec iov[2];
        int cnt = 0;
        size_t direct = 0;
        int stepped = 0; /* the piece goes on past this read: no staging */
        if ((conn->phase == PS__TCP_RX_DATA || conn->phase == PS__TCP_RX_CHUNK) &&
            conn->piece_idx < conn->npiece) {
            ps__tcp_piece_t *pc = &conn->piece[conn->piece_idx];
            if (conn->piece_off == pc->cap && pc->cap < pc->len &&
                rx_piece_grow(conn, pc) != PS_OK) {
                ps__tcp_conn_fail(conn, PS_ERR_NO_MEMORY, 1);
                return;
            }
            direct = (size_t)(pc->cap - conn->piece_off);
            if (direct > budget) {
                direct = budget;
            }
            /* Someone works on the front as it arrives: read in steps,
             * so that the work overlaps the reads after it. */
            if (direct > PS_SLICE_FILL_STEP && pc->reports &&
                ps_slice_fill_watched(&conn->rmsg.data[pc->seg])) {
                direct = PS_SLICE_FILL_STEP;
                stepped = 1;
            }
            iov[cnt].iov_base = pc->ptr + conn->piece_off;
            iov[cnt].iov_len = direct;
            cnt++;
        }
        if (conn->rend == conn->rcap && conn->rstart > 0) {
            size_t have = conn->rend - conn->rstart;
            memmove(conn->rbuf, conn->rbuf + conn->rstart, have);
            conn->rstart = 0;
            conn->rend = have;
        }
        if (conn->rcap > conn->rend && !stepped) {
            size_t room = conn->rcap - conn->rend;
            if (direct >= PS__TCP_LOWAT_MIN && room > PS__TCP_DIRECT_STAGING) {
                room = PS__TCP_DIRECT_STAGING;
            }
            iov[cnt].iov_base = conn->rbuf + conn->rend;
            iov[cnt].iov_len = room;
            cnt++;
        }
        size_t requested = 0;
        for (int i = 0; i < cnt; ++i) {
            requested += iov[i].iov_len;
        }
        ssize_t n = readv(conn->fd, iov, cnt);
        if (n > 0)
            ps_stage_found();
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                rx_set_lowat(conn);
                return;
            }
            int err = errno;
            if (ps__tcp_auth_cut(conn) != PS_OK) { /* job secret: it hung up on our handshake */
                ps__tcp_conn_fail(conn, PS_ERR_AUTH, 1);
                return;
            }
            ps_warn(PS_LOG_TCP, "connection %s %s: %s", conn->peer_id == PS_NODE_EMPTY ? "from" : "with",
                    conn->addr_str, strerror(err));
            ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
            return;
        }
        if (n == 0) {
            if (ps__tcp_auth_cut(conn) != PS_OK) { /* job secret: it hung up on our handshake */
                ps__tcp_conn_fail(conn, PS_ERR_AUTH, 1);
                return;
            }
            int mid = conn->phase != PS__TCP_RX_HEADER || conn->rend != conn->rstart;
            if (conn->peer_id != PS_NODE_EMPTY) {
                ps_info(PS_LOG_TCP, "node %d at %s closed the connection%s", conn->peer_id,
                        conn->addr_str, mid ? " in the middle of a frame" : "");
            } else if (mid) {
                /* A stranger's truncated frame (hostile-input tests): worth
                 * the one line a broken frame gets, not just info. */
                ps_warn(PS_LOG_TCP, "connection from %s closed in the middle of a frame",
                        conn->addr_str);
            } else {
                ps_info(PS_LOG_TCP, "connection from %s closed", conn->addr_str);
            }
            ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
            return;
        }
        __atomic_add_fetch(&van->base.bytes_recv, (uint64_t)n, __ATOMIC_RELAXED);
        size_t got = (size_t)n;
        if (direct != 0) {
            size_t d = got < direct ? got : direct;
            conn->piece_off += d;
            got -= d;
            rx_report(conn, &conn->piece[conn->piece_idx]);
        }
        conn->rend += got;
        short_read = (size_t)n < requested;
        budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
    }
}

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
#include "ps/net/codec/codec.h"
#include "ps/net/tcp/tcp_internal.h"

/* Most nodes one control message may list (the scratch array grows to
 * this many as needed). */
#define RX_MAX_NODES 8192

void ps__tcp_rx_reset(ps__tcp_conn_t *conn)
{
    ps_msg_release(&conn->rmsg);
    ps_msg_init(&conn->rmsg);
    conn->phase = PS__TCP_RX_HEADER;
    conn->seg = 0;
    conn->seg_off = 0;
    conn->seg_ptr = NULL;
}

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
     * checked): grow to fit it. */
    uint8_t *nb = malloc(need);
    if (nb == NULL) {
        ps_error(PS_LOG_TCP, "cannot allocate %zu bytes for a frame from %s", need,
                 conn->addr_str);
        return PS_ERR_NO_MEMORY;
    }
    memcpy(nb, conn->rbuf + conn->rstart, have);
    free(conn->rbuf);
    conn->rbuf = nb;
    conn->rcap = need;
    conn->rstart = 0;
    conn->rend = have;
    return PS_OK;
}

/* Whether this connection may speak for node `id`. This is the hook for
 * authenticating peers (PS_JOB_SECRET); today any well-formed id is
 * accepted, as upstream does. */
static int rx_may_claim(ps__tcp_van_t *van, ps__tcp_conn_t *conn, int id)
{
    (void)van;
    (void)conn;
    return id == PS_NODE_EMPTY || (id > 0 && id < PS_NODE_EMPTY);
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
    if (!rx_may_claim(van, conn, id)) {
        ps_error(PS_LOG_TCP, "connection from %s claims node id %d, which it may not; closing",
                 conn->addr_str, id);
        return PS_ERR_AUTH;
    }
    if (conn->peer_id != PS_NODE_EMPTY && id != conn->peer_id) {
        ps_error(PS_LOG_TCP, "connection from %s re-announced itself as node %d after node %d; closing",
                 conn->addr_str, id, conn->peer_id);
        return PS_ERR_PROTOCOL;
    }
    conn->hello_seen = 1;
    conn->nonce = nonce;
    conn->stream = stream;
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
    ps_status_t st = ps_meta_decode_grow(p, len, &meta, &van->scratch_nodes, &van->scratch_cap,
                                         RX_MAX_NODES);
    if (st != PS_OK) {
        /* The codec logged why (rate-limited). */
        ps_error(PS_LOG_TCP, "undecodable meta from %s (%s); closing the connection",
                 conn->addr_str, ps_status_str(st));
        return PS_ERR_PROTOCOL;
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
    m->meta = meta;
    /* Who sent it is who the connection proved to be, never the wire. */
    m->meta.sender = conn->peer_id;
    size_t nn = meta.control.num_nodes;
    size_t bl = meta.body_len;
    m->meta.control.nodes = NULL;
    m->meta.body = NULL;
    if (nn != 0 || bl != 0) {
        /* The node list and the body point into the staging buffer; the
         * message gets its own copy (one allocation, freed with it). */
        uint8_t *block = malloc(nn * sizeof(ps_node_t) + bl);
        if (block == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        if (nn != 0) {
            memcpy(block, meta.control.nodes, nn * sizeof(ps_node_t));
            m->meta.control.nodes = (ps_node_t *)(void *)block;
        }
        if (bl != 0) {
            memcpy(block + nn * sizeof(ps_node_t), meta.body, bl);
            m->meta.body = block + nn * sizeof(ps_node_t);
        }
        m->nodes = (ps_node_t *)(void *)block;
        m->num_nodes = (uint32_t)nn;
        m->nodes_owned = 1;
    }
    m->num_data = conn->hdr.num_data;
    for (uint32_t i = 0; i < m->num_data; ++i) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        m->data[i] = empty;
    }
    return PS_OK;
}

/* Picks where segment conn->seg lands. */
static ps_status_t rx_seg_dest(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    uint64_t len = conn->hdr.data_len[conn->seg];
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    int have = 0;
    if (van->cb.recv_buffer != NULL) {
        ps_status_t st = van->cb.recv_buffer(van->cb.arg, &conn->rmsg.meta, conn->seg, len, &s);
        if (st == PS_OK) {
            ps_buf_mem_t kind = ps_slice_mem_kind(&s);
            if (s.len < len || s.buf == NULL ||
                (kind != PS_BUF_MEM_HOST && kind != PS_BUF_MEM_SHM)) {
                ps_warn_ratelimited(PS_LOG_TCP,
                                    "recv_buffer gave %zu bytes of memory kind %d for a %llu-byte segment; using a van buffer",
                                    s.len, (int)kind, (unsigned long long)len);
                ps_slice_unref(&s);
            } else {
                ps_slice_narrow(&s, 0, len);
                have = 1;
            }
        }
    }
    if (!have) {
        ps_status_t st = ps__tcp_pool_get(van->pool, len, &s);
        if (st != PS_OK) {
            return st;
        }
    }
    conn->rmsg.data[conn->seg] = s;
    conn->seg_ptr = ps_slice_ptr(&s);
    conn->seg_off = 0;
    return PS_OK;
}

static void rx_deliver(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    ps_msg_t msg = conn->rmsg;
    ps_msg_init(&conn->rmsg);
    conn->phase = PS__TCP_RX_HEADER;
    conn->seg = 0;
    conn->seg_ptr = NULL;
    conn->seg_off = 0;
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level)) {
        char line[192];
        ps_msg_describe(&msg, line, sizeof(line));
        ps_trace(PS_LOG_TCP, "received %s", line);
    }
    if (van->cb.deliver != NULL) {
        van->cb.deliver(van->cb.arg, &msg);
    } else {
        ps_msg_release(&msg);
    }
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
            conn->seg = 0;
            conn->seg_ptr = NULL;
            conn->seg_off = 0;
            conn->phase = hello ? PS__TCP_RX_HEADER : PS__TCP_RX_DATA;
            break;
        }
        case PS__TCP_RX_DATA: {
            while (conn->seg < conn->hdr.num_data) {
                uint64_t len = conn->hdr.data_len[conn->seg];
                if (len == 0) {
                    conn->seg++;
                    continue;
                }
                if (conn->seg_ptr == NULL) {
                    ps_status_t st = rx_seg_dest(conn);
                    if (st != PS_OK) {
                        return st;
                    }
                }
                uint64_t want = len - conn->seg_off;
                size_t take = avail < want ? avail : (size_t)want;
                if (take != 0) {
                    memcpy(conn->seg_ptr + conn->seg_off, conn->rbuf + conn->rstart, take);
                    conn->rstart += take;
                    conn->seg_off += take;
                    avail -= take;
                }
                if (conn->seg_off < len) {
                    return PS_OK;
                }
                conn->seg++;
                conn->seg_ptr = NULL;
                conn->seg_off = 0;
            }
            rx_deliver(conn);
            break;
        }
        }
    }
}

/* Before going back to epoll: while the rest of a large frame is on its
 * way, ask the kernel not to wake us for every packet (SO_RCVLOWAT), but
 * only once a good chunk of it is there. Never more than the frame still
 * needs, so the wait always ends; back to the default for headers. */
static void rx_set_lowat(ps__tcp_conn_t *conn)
{
    uint64_t need = 0;
    if (conn->phase == PS__TCP_RX_DATA) {
        for (uint32_t i = conn->seg; i < conn->hdr.num_data; ++i) {
            need += conn->hdr.data_len[i];
        }
        need -= conn->seg_off;
        need -= conn->rend - conn->rstart;
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
        if (conn->phase == PS__TCP_RX_DATA && conn->seg_ptr != NULL) {
            direct = (size_t)(conn->hdr.data_len[conn->seg] - conn->seg_off);
            if (direct > budget) {
                direct = budget;
            }
            iov[cnt].iov_base = conn->seg_ptr + conn->seg_off;
            iov[cnt].iov_len = direct;
            cnt++;
        }
        if (conn->rend == conn->rcap && conn->rstart > 0) {
            size_t have = conn->rend - conn->rstart;
            memmove(conn->rbuf, conn->rbuf + conn->rstart, have);
            conn->rstart = 0;
            conn->rend = have;
        }
        if (conn->rcap > conn->rend) {
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
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                rx_set_lowat(conn);
                return;
            }
            int err = errno;
            ps_warn(PS_LOG_TCP, "connection %s %s: %s", conn->peer_id == PS_NODE_EMPTY ? "from" : "with",
                    conn->addr_str, strerror(err));
            ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
            return;
        }
        if (n == 0) {
            int mid = conn->phase != PS__TCP_RX_HEADER || conn->rend != conn->rstart;
            if (conn->peer_id != PS_NODE_EMPTY) {
                ps_info(PS_LOG_TCP, "node %d at %s closed the connection%s", conn->peer_id,
                        conn->addr_str, mid ? " in the middle of a frame" : "");
            } else {
                ps_info(PS_LOG_TCP, "connection from %s closed%s", conn->addr_str,
                        mid ? " in the middle of a frame" : "");
            }
            ps__tcp_conn_fail(conn, PS_ERR_PEER_GONE, 1);
            return;
        }
        __atomic_add_fetch(&van->bytes_recv, (uint64_t)n, __ATOMIC_RELAXED);
        size_t got = (size_t)n;
        if (direct != 0) {
            size_t d = got < direct ? got : direct;
            conn->seg_off += d;
            got -= d;
        }
        conn->rend += got;
        short_read = (size_t)n < requested;
        budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
    }
}

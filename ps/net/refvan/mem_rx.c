/*
 * The mem van's receive side: a connection's bytes, parsed as they come
 * into frame header, meta and segments (or a lane message). The segments
 * are copied from the
 * pipe straight into the buffers recv_buffer() names, or into slices of
 * the van's own.
 */
#include <stdlib.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/net/codec/lane.h"
#include "ps/net/refvan/mem_internal.h"
#include "ps/net/van/rx.h"

void ps__mem_rx_reset(ps__mem_conn_t *conn)
{
    conn->phase = PS__MEM_RX_HEADER;
    conn->rlen = 0;
    conn->need = PS_FRAME_COMPACT_MIN_LEN;
    conn->rseg = 0;
    conn->roff = 0;
}

int ps__mem_is_hello(const ps_meta_t *meta)
{
    return meta->van_data_len >= 5 && memcmp(meta->van_data, PS__MEM_HELLO_TAG, 5) == 0;
}

/* Reads from the pipe until rbuf holds conn->need bytes. 1: it does. */
static int fill(ps__mem_conn_t *conn, int *eof_p)
{
    if (conn->rcap < conn->need) {
        uint8_t *b = realloc(conn->rbuf, conn->need);
        if (b == NULL) {
            return -1;
        }
        conn->rbuf = b;
        conn->rcap = conn->need;
    }
    size_t n = ps__mem_link_read(conn, conn->rbuf + conn->rlen, conn->need - conn->rlen, eof_p);
    conn->rlen += n;
    ps_van_base_count_recv(&conn->van->base, n);
    return conn->rlen == conn->need;
}

/* Where segment `i` lands: the caller's buffer when it names one the van
 * can use (ps_van_recv_dest), else a slice of the van's. */
static ps_status_t seg_dest(ps__mem_conn_t *conn, uint32_t i)
{
    uint64_t len = conn->hdr.data_len[i];
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    ps_status_t st = PS_OK;
    if (len != 0 &&
        ps_van_recv_dest(&conn->van->base, &conn->rmsg.meta, i, len, 0, &s) == PS_ERR_NOT_FOUND) {
        st = ps_slice_alloc(len, 0, &s);
    }
    conn->rmsg.data[i] = s;
    return st;
}

/* Header and meta are in rbuf: a hello, or the message whose segments
 * follow. */
static ps_status_t on_meta(ps__mem_conn_t *conn)
{
    ps__mem_van_t *van = conn->van;
    const uint8_t *p = conn->rbuf + conn->hdr.header_len;
    size_t len = conn->hdr.meta_len;
    ps_meta_t meta;
    ps_status_t st = ps_van_meta_decode(&van->base, p, len, conn->peer_id, NULL, &meta);
    if (st != PS_OK) {
        return st; /* logged */
    }
    if (ps__mem_is_hello(&meta)) {
        int32_t id = (int32_t)ps_get_le32(meta.van_data + 6);
        if (conn->outgoing || conn->hdr.num_data != 0 || meta.van_data_len != PS__MEM_HELLO_LEN ||
            id <= 0 || id > PS_NODE_EMPTY) {
            ps_error(PS_LOG_VAN, "mem: malformed hello; closing the connection");
            return PS_ERR_PROTOCOL;
        }
        ps__mem_set_peer(conn, id);
        conn->hello_seen = 1;
        ps__mem_rx_reset(conn);
        return PS_OK;
    }
    if (!conn->outgoing && !conn->hello_seen) {
        ps_error(PS_LOG_VAN, "mem: first frame is not a hello; closing the connection");
        return PS_ERR_PROTOCOL;
    }
    /* Who sent it is who the connection proved to be, never the wire. */
    st = ps_van_msg_take_meta(&conn->rmsg, &meta, conn->peer_id);
    conn->rmsg.num_data = conn->hdr.num_data;
    for (uint32_t i = 0; i < conn->hdr.num_data; ++i) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        conn->rmsg.data[i] = empty;
    }
    for (uint32_t i = 0; i < conn->hdr.num_data && st == PS_OK; ++i) {
        st = seg_dest(conn, i);
    }
    conn->phase = PS__MEM_RX_DATA;
    conn->rseg = 0;
    conn->roff = 0;
    return st;
}

/* rbuf starts a lane message: its length says how much more to read
 * (the shortest frame's bytes read so far never pass its end). */
static ps_status_t on_lane_prefix(ps__mem_conn_t *conn)
{
    size_t len = ps_get_le16(conn->rbuf + 1);
    if (len < PS_LANE_HDR_LEN || len > PS_LANE_MAX_BYTES ||
        (!conn->outgoing && !conn->hello_seen)) {
        ps_error(PS_LOG_VAN, "mem: malformed lane message; closing the connection");
        return PS_ERR_PROTOCOL;
    }
    conn->phase = PS__MEM_RX_LANE;
    conn->need = PS__MEM_LANE_PREFIX + len;
    return PS_OK;
}

/* Copies segment bytes from the pipe; 1 when the message is complete. */
static int fill_data(ps__mem_conn_t *conn, int *eof_p)
{
    while (conn->rseg < conn->hdr.num_data) {
        uint64_t len = conn->hdr.data_len[conn->rseg];
        if (conn->roff < len) {
            uint8_t *dst = (uint8_t *)ps_slice_ptr(&conn->rmsg.data[conn->rseg]) + conn->roff;
            size_t n = ps__mem_link_read(conn, dst, (size_t)(len - conn->roff), eof_p);
            ps_van_base_count_recv(&conn->van->base, n);
            conn->roff += n;
            if (conn->roff < len) {
                return 0;
            }
        }
        conn->rseg++;
        conn->roff = 0;
    }
    return 1;
}

ps_status_t ps__mem_rx(ps__mem_conn_t *conn, unsigned budget, int *events_p)
{
    const ps_frame_limits_t *limits = &conn->van->limits;
    int eof = 0;
    for (unsigned done = 0; done < budget;) {
        int r;
        if (conn->phase == PS__MEM_RX_HEADER) {
            if ((r = fill(conn, &eof)) <= 0) {
                return r < 0 ? PS_ERR_NO_MEMORY : eof ? PS_ERR_PEER_GONE : PS_OK;
            }
            if (conn->rbuf[0] == PS_LANE_MAGIC) {
                ps_status_t st = on_lane_prefix(conn);
                if (st != PS_OK) {
                    return st;
                }
                continue;
            }
            size_t need = 0;
            ps_status_t st = ps_frame_header_parse(conn->rbuf, conn->rlen, limits, &conn->hdr,
                                                   &need);
            if (st == PS_INPROGRESS) {
                conn->need = need;
                continue;
            }
            if (st != PS_OK) {
                ps_error(PS_LOG_VAN, "mem: bad frame header (%s); closing the connection",
                         ps_status_str(st));
                return PS_ERR_PROTOCOL;
            }
            conn->phase = PS__MEM_RX_META;
            conn->need = (size_t)conn->hdr.header_len + conn->hdr.meta_len;
        } else if (conn->phase == PS__MEM_RX_META) {
            if ((r = fill(conn, &eof)) <= 0) {
                return r < 0 ? PS_ERR_NO_MEMORY : eof ? PS_ERR_PEER_GONE : PS_OK;
            }
            ps_status_t st = on_meta(conn);
            if (st != PS_OK) {
                return st;
            }
            ++*events_p;
        } else if (conn->phase == PS__MEM_RX_LANE) {
            if ((r = fill(conn, &eof)) <= 0) {
                return r < 0 ? PS_ERR_NO_MEMORY : eof ? PS_ERR_PEER_GONE : PS_OK;
            }
            ps_van_deliver_lane(&conn->van->base.cb, PS_LOG_VAN, conn->peer_id,
                                conn->rbuf + PS__MEM_LANE_PREFIX, conn->rlen - PS__MEM_LANE_PREFIX);
            ps__mem_rx_reset(conn);
            ++*events_p;
            ++done;
        } else {
            if (!fill_data(conn, &eof)) {
                return eof ? PS_ERR_PEER_GONE : PS_OK;
            }
            ps_msg_t msg = conn->rmsg;
            ps_msg_init(&conn->rmsg);
            ps__mem_rx_reset(conn);
            ps_van_base_deliver(&conn->van->base, &msg);
            ++*events_p;
            ++done;
        }
    }
    return PS_OK;
}

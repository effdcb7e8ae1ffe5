/*
 * The receive steps of rx.h.
 */
#include "ps/net/van/rx.h"

#include <inttypes.h>
#include <stdlib.h>

#include "ps/net/codec/codec.h"
#include "ps/net/codec/meta_fast.h"

/* A first node list that holds the table of a job of this size: most
 * control messages then decode at the first try. */
#define RX_FIRST_NODES 64

ps_status_t ps_van_meta_decode(ps_van_base_t *base, const uint8_t *p, size_t len, int peer_id,
                               const char *addr, ps_meta_t *meta_p)
{
    ps_status_t st;
    if (ps_meta_is_fast(p, len)) {
        st = ps_meta_fast_decode(p, len, meta_p);
    } else {
        if (base->rx_nodes_cap == 0) {
            ps_node_t *nodes = malloc(RX_FIRST_NODES * sizeof(*nodes));
            if (nodes != NULL) {
                base->rx_nodes = nodes;
                base->rx_nodes_cap = RX_FIRST_NODES;
            }
        }
        st = ps_meta_decode_grow(p, len, meta_p, &base->rx_nodes, &base->rx_nodes_cap,
                                 PS_VAN_RX_MAX_NODES);
    }
    if (st == PS_OK) {
        return PS_OK;
    }
    /* The codec logged why (rate-limited). */
    char name[96];
    ps_error(base->log, "undecodable meta from %s (%s); closing the connection",
             ps_van_peer_name(peer_id, addr, name, sizeof(name)), ps_status_str(st));
    return st == PS_ERR_NO_MEMORY ? st : PS_ERR_PROTOCOL;
}

ps_status_t ps_van_recv_dest(const ps_van_base_t *base, const ps_meta_t *meta, unsigned index,
                             uint64_t len, uint32_t device_kinds, ps_slice_t *slice_p)
{
    if (base->cb.recv_buffer == NULL) {
        return PS_ERR_NOT_FOUND;
    }
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    if (base->cb.recv_buffer(base->cb.arg, meta, index, len, &s) != PS_OK) {
        return PS_ERR_NOT_FOUND;
    }
    ps_buf_mem_t kind = ps_slice_mem_kind(&s);
    int short_buf = s.buf == NULL || s.len < len;
    if (short_buf || !ps_van_moves_kind(device_kinds, kind)) {
        if (short_buf || device_kinds != PS_VAN_HOST_COPY)
            ps_warn_ratelimited(base->log,
                                "recv_buffer gave %zu bytes of memory kind %d for a "
                                "%" PRIu64 "-byte segment; using a van buffer",
                                s.len, (int)kind, len);
        ps_slice_unref(&s);
        return PS_ERR_NOT_FOUND;
    }
    ps_slice_narrow(&s, 0, (size_t)len);
    *slice_p = s;
    return PS_OK;
}

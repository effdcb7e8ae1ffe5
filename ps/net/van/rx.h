/*
 * The receive steps every van takes the same way once a frame's meta is in
 * its buffer: decoding the meta in whichever encoding the sender chose,
 * and choosing where each data segment lands.
 */
#ifndef PS_NET_VAN_RX_H_
#define PS_NET_VAN_RX_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/van/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most nodes a received meta may list. */
#define PS_VAN_RX_MAX_NODES 8192

/*
 * Decodes the meta at p[0..len) — the compact form (meta_fast.h) or the
 * codec's (codec.h) — into *meta_p: its body points into p, its node list
 * into the base's scratch, good until the next decode. A meta that does
 * not decode is logged with the peer's name (ps_van_peer_name(); addr may
 * be NULL) and answered PS_ERR_PROTOCOL, or PS_ERR_NO_MEMORY when the node
 * list found no room: the van closes the connection either way.
 */
ps_status_t ps_van_meta_decode(ps_van_base_t *base, const uint8_t *p, size_t len, int peer_id,
                               const char *addr, ps_meta_t *meta_p);

/*
 * Where data segment `index` (len bytes) of the message `meta` lands, asked
 * of cb.recv_buffer: PS_OK with *slice_p, a reference narrowed to len
 * bytes, that the van writes into. PS_ERR_NOT_FOUND when the van takes its
 * own buffer instead: no callback, the callback named none, or it named one
 * the van cannot use — shorter than len, or device memory of a kind not in
 * `device_kinds` (PS_VAN_DEVICE bits, base.h: the CPU must not write it;
 * the layer above copies the delivered bytes there). Those are logged
 * (rate-limited; a device buffer refused under PS_VAN_HOST_COPY is not)
 * and released.
 */
ps_status_t ps_van_recv_dest(const ps_van_base_t *base, const ps_meta_t *meta, unsigned index,
                             uint64_t len, uint32_t device_kinds, ps_slice_t *slice_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_RX_H_ */

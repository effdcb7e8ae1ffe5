/*
 * What the UCX van puts on the wire besides the user's bytes.
 *
 * A META message is an active message (PS__UCX_AM_META_ID) whose 8-byte
 * header is its tag (ucx_internal.h) little-endian — or, with no header,
 * whose data starts with the tag (a small one, always eager) — and whose
 * data (after that) is a ps frame (ps/net/codec/frame.h: header with every
 * segment's length, then the encoded meta) followed by the segments small
 * enough to ride along (the tag says which did not; each of those follows
 * as its own tagged DATA message, received straight into its
 * destination).
 *
 * HELLO / ACK and the re-announcement of the node id: ucx_hs.c.
 */
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame_encode.h"
#include "ps/rdma/ucx/ucx_internal.h"

ps_status_t ps__ucx_encode_frame(ps__ucx_van_t *van, const ps_meta_t *meta, const uint64_t *lens,
                                 uint32_t num_data, uint8_t *buf, size_t cap, uint8_t **hm_p,
                                 size_t *len_p, uint8_t **heap_p)
{
    return ps_frame_encode_head(meta, lens, num_data, &van->limits, PS_LOG_UCX, buf, cap, hm_p,
                                len_p, heap_p);
}

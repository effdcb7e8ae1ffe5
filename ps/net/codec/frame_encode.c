/*
 * The frame header and meta of a message in one buffer (frame_encode.h).
 */
#include "ps/net/codec/frame_encode.h"

#include <stdlib.h>

#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame_internal.h"
#include "ps/net/codec/meta_fast.h"
#include "ps/net/codec/meta_fast_internal.h"

ps_status_t ps_frame_encode_head(const ps_meta_t *meta, const uint64_t *lens, uint32_t num_data,
                                 const ps_frame_limits_t *limits, ps_log_component_t comp,
                                 uint8_t *buf, size_t cap, uint8_t **frame_p, size_t *len_p,
                                 uint8_t **heap_p)
{
    size_t hlen = ps_frame_header_len(num_data);
    /* The usual case, a plain data message whose frame is within limits and
     * fits: header and compact meta written in one pass. Anything else takes
     * the general path below, which also says what is wrong. */
    size_t fast = ps__meta_fast_size(meta);
    if (fast != 0 && cap > hlen && fast <= cap - hlen && limits != NULL &&
        ps__frame_fits(limits, (uint32_t)fast, lens, num_data)) {
        ps__frame_header_write(buf, 0, (uint32_t)fast, lens, (uint16_t)num_data);
        ps__meta_fast_write(meta, buf + hlen);
        *frame_p = buf;
        *len_p = hlen + fast;
        *heap_p = NULL;
        return PS_OK;
    }
    size_t mlen = 0;
    uint8_t *out = buf;
    uint8_t *heap = NULL;
    ps_status_t st = PS_ERR_TOO_LARGE;
    if (cap > hlen) {
        /* A plain data message takes the compact form, no protobuf; the
         * rest (PS_ERR_UNSUPPORTED), or a compact form without room, nanopb. */
        st = ps_meta_fast_encode(meta, buf + hlen, cap - hlen, &mlen);
        if (st != PS_OK) {
            st = ps_meta_encode(meta, buf + hlen, cap - hlen, &mlen);
        }
    }
    if (st == PS_ERR_TOO_LARGE) {
        /* A big meta (a control message's node list): size it, then encode
         * into a buffer of its own. */
        size_t need;
        st = ps_meta_encoded_size(meta, &need);
        if (st != PS_OK) {
            return st;
        }
        if (need > limits->max_meta_bytes) {
            ps_error(comp, "meta of %zu bytes exceeds the limit of %u (PS_MAX_META_BYTES)", need,
                     limits->max_meta_bytes);
            return PS_ERR_TOO_LARGE;
        }
        heap = malloc(hlen + need);
        if (heap == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        st = ps_meta_encode(meta, heap + hlen, need, &mlen);
        out = heap;
    }
    if (st != PS_OK) {
        free(heap);
        return st;
    }
    size_t written;
    st = ps_frame_header_build(0, (uint32_t)mlen, lens, (uint16_t)num_data, limits, out, hlen,
                               &written);
    if (st != PS_OK) {
        ps_error(comp, "cannot frame a message of %u segments: %s", num_data, ps_status_str(st));
        free(heap);
        return st;
    }
    *frame_p = out;
    *len_p = hlen + mlen;
    *heap_p = heap;
    return PS_OK;
}

/*
 * The frame header and meta of a message in one buffer (frame_encode.h).
 */
#include "ps/net/codec/frame_encode.h"

#include <stdlib.h>
#include <string.h>

#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame_internal.h"
#include "ps/net/codec/meta_fast.h"
#include "ps/net/codec/meta_fast_internal.h"

ps_status_t ps_frame_encode_head(const ps_meta_t *meta, const uint64_t *lens, uint32_t num_data,
                                 const ps_frame_limits_t *limits, ps_log_component_t comp,
                                 uint8_t *buf, size_t cap, uint8_t **frame_p, size_t *len_p,
                                 uint8_t **heap_p)
{
    ps_frame_limits_t defaults;
    if (limits == NULL) {
        defaults = ps_frame_limits_default();
        limits = &defaults;
    }
    size_t hlen = ps_frame_header_len(num_data);
    /* The usual case, a plain data message whose frame is within limits and
     * fits: the compact header and the compact meta (frame.h, meta_fast.h)
     * written in one pass, a small message in a few dozen bytes. Anything
     * else takes the general path below, which also says what is wrong. */
    size_t fast = ps__meta_compact_size(meta);
    if (fast != 0 && num_data <= limits->max_segments &&
        limits->max_segments <= PS_FRAME_MAX_SEGMENTS && (num_data == 0 || lens != NULL)) {
        /* The segment lengths' varints and their sum (no overflow). */
        size_t lens_len = 0;
        uint64_t data_total = 0;
        int wrapped = 0;
        for (uint32_t i = 0; i < num_data; i++) {
            lens_len += ps__varint_len(lens[i]);
            wrapped |= __builtin_add_overflow(data_total, lens[i], &data_total);
        }
        /* The meta goes after a header with a 1-byte meta_len (< 128), moved
         * up a byte when it is longer (< 2^14 always: a 2-byte varint). The
         * writer's 8-byte stores need 8 bytes of room past the longest meta. */
        size_t chl = PS_FRAME_COMPACT_FIXED_LEN + 1 + lens_len;
        size_t most = fast - PS_META_FAST_FIXED_LEN + PS_META_COMPACT_MAX_FIXED + 8;
        _Static_assert(PS_META_COMPACT_MAX_FIXED + PS_META_MAX_DATA + PS_META_FAST_BODY_MAX <
                           (1u << 14),
                       "a compact meta's length is a varint of at most 2 bytes");
        if (!wrapped && chl < hlen && cap > chl && most < cap - chl) {
            uint8_t *mp = buf + chl;
            size_t mlen = (size_t)(ps__meta_compact_write(meta, mp) - mp);
            if (mlen >= 0x80) {
                memmove(mp + 1, mp, mlen);
                chl++;
            }
            /* ps__frame_fits_len(), with the sum above. */
            uint64_t max = limits->max_message_bytes;
            if (mlen <= limits->max_meta_bytes && chl + mlen <= max &&
                data_total <= max - chl - mlen) {
                ps__frame_compact_write(buf, (uint32_t)mlen, lens, (uint16_t)num_data);
                *frame_p = buf;
                *len_p = chl + mlen;
                *heap_p = NULL;
                return PS_OK;
            }
        }
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

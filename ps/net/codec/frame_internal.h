/*
 * Inside the codec: the frame header's limit test and writer, inline so
 * that ps_frame_encode_head() (frame_encode.c) builds a plain message's
 * header and meta in one pass. ps_frame_header_build() (frame.c) is the
 * public form, which also says what is wrong.
 */
#ifndef PS_NET_CODEC_FRAME_INTERNAL_H_
#define PS_NET_CODEC_FRAME_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/endian.h"
#include "ps/net/codec/frame.h"

/* 1 when ps_frame_header_build(0, meta_len, data_len, num_data, lim, ...)
 * with room for the header would succeed: lim in range, data_len there,
 * meta, segment count and the whole frame within lim. Logs nothing. */
static inline int ps__frame_fits(const ps_frame_limits_t *lim, uint32_t meta_len,
                                 const uint64_t *data_len, uint32_t num_data)
{
    if (lim->max_segments > PS_FRAME_MAX_SEGMENTS || num_data > lim->max_segments ||
        meta_len > lim->max_meta_bytes || (num_data != 0 && data_len == NULL)) {
        return 0;
    }
    uint64_t max = lim->max_message_bytes;
    uint64_t total = ps_frame_header_len(num_data);
    if (total > max || meta_len > max - total) {
        return 0;
    }
    total += meta_len;
    for (uint32_t i = 0; i < num_data; i++) {
        /* total <= max holds here. */
        if (data_len[i] > max - total) {
            return 0;
        }
        total += data_len[i];
    }
    return 1;
}

/* The first 8 and the next 8 bytes of a header, as little-endian words:
 * magic | version << 32 | flags << 48, and meta_len | num_data << 32 (the
 * reserved field, 0, on top). */
static inline uint64_t ps__frame_word0(uint16_t flags)
{
    return PS_FRAME_MAGIC | ((uint64_t)PS_FRAME_VERSION << 32) | ((uint64_t)flags << 48);
}

static inline uint64_t ps__frame_word1(uint32_t meta_len, uint16_t num_data)
{
    return meta_len | ((uint64_t)num_data << 32);
}

/* Writes a header (ps_frame_header_len(num_data) bytes) into buf. */
static inline void ps__frame_header_write(uint8_t *buf, uint16_t flags, uint32_t meta_len,
                                          const uint64_t *data_len, uint16_t num_data)
{
    ps_put_le64(buf, ps__frame_word0(flags));
    ps_put_le64(buf + 8, ps__frame_word1(meta_len, num_data));
    buf += PS_FRAME_FIXED_LEN;
    for (uint16_t i = 0; i < num_data; i++) {
        ps_put_le64(buf + PS_FRAME_SEGMENT_LEN * i, data_len[i]);
    }
}

#endif /* PS_NET_CODEC_FRAME_INTERNAL_H_ */

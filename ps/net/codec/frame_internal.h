/*
 * Inside the codec: the frame header's limit test and the writers of both
 * header forms, inline so that ps_frame_encode_head() (frame_encode.c)
 * builds a plain message's header and meta in one pass.
 * ps_frame_header_build() and ps_frame_header_build_compact() (frame.c)
 * are the public forms, which also say what is wrong.
 */
#ifndef PS_NET_CODEC_FRAME_INTERNAL_H_
#define PS_NET_CODEC_FRAME_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/endian.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/varint_internal.h"

/* 1 when a frame with a header of header_len bytes (either form), meta_len
 * bytes of meta and num_data segments of data_len[i] bytes is within lim
 * (in range itself): what ps_frame_header_build() and
 * ps_frame_header_build_compact() check. Logs nothing. */
static inline int ps__frame_fits_len(const ps_frame_limits_t *lim, size_t header_len,
                                     uint32_t meta_len, const uint64_t *data_len,
                                     uint32_t num_data)
{
    if (lim->max_segments > PS_FRAME_MAX_SEGMENTS || num_data > lim->max_segments ||
        meta_len > lim->max_meta_bytes || (num_data != 0 && data_len == NULL)) {
        return 0;
    }
    uint64_t max = lim->max_message_bytes;
    uint64_t total = header_len;
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

/* The length of the compact header of a frame with meta_len bytes of meta
 * and num_data segments. */
static inline size_t ps__frame_compact_len(uint32_t meta_len, const uint64_t *data_len,
                                           uint32_t num_data)
{
    size_t len = PS_FRAME_COMPACT_FIXED_LEN + ps__varint_len(meta_len);
    for (uint32_t i = 0; i < num_data; i++) {
        len += ps__varint_len(data_len[i]);
    }
    return len;
}

/* Writes a compact header (ps__frame_compact_len() bytes) into buf;
 * returns the byte after it. */
static inline uint8_t *ps__frame_compact_write(uint8_t *buf, uint32_t meta_len,
                                               const uint64_t *data_len, uint16_t num_data)
{
    buf[0] = PS_FRAME_COMPACT_MAGIC0;
    buf[1] = PS_FRAME_COMPACT_MAGIC1;
    buf[2] = PS_FRAME_COMPACT_VERSION;
    buf[3] = (uint8_t)num_data;
    uint8_t *p = ps__varint_put(buf + PS_FRAME_COMPACT_FIXED_LEN, meta_len);
    for (uint16_t i = 0; i < num_data; i++) {
        p = ps__varint_put(p, data_len[i]);
    }
    return p;
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

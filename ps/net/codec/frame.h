/*
 * The frame every van sends: a fixed little-endian header, the encoded meta,
 * then the data segments as they are (never re-encoded).
 *
 *   offset  size  field
 *        0     4  magic      "PSF1" (bytes 'P' 'S' 'F' '1')
 *        4     2  version    PS_FRAME_VERSION
 *        6     2  flags      none defined in version 1: must be 0
 *        8     4  meta_len   bytes of encoded meta after the header
 *       12     2  num_data   data segments after the meta
 *       14     2  reserved   must be 0
 *       16  8*num_data       the length of each data segment (u64)
 *   header_len = 16 + 8*num_data, then meta_len bytes of meta, then the
 *   segments back to back.
 *
 * The compact header (the same frame, a shorter header; what
 * ps_frame_encode_head() sends when it is not longer than the above):
 *
 *   offset  size  field
 *        0     2  magic      "ps" (bytes 'p' 's'; PS_FRAME_COMPACT_MAGIC0/1)
 *        2     1  version    PS_FRAME_COMPACT_VERSION (no flags defined)
 *        3     1  num_data   data segments after the meta
 *        4   1-5  meta_len   LEB128 varint (u32)
 *            1-10 the length of each data segment, LEB128 varint (u64)
 *   header_len = 4 + the varints' bytes (5 for a frame without data). Every
 *   varint must be in its shortest form (no trailing 0x80 00 groups).
 *
 * A receiver accepts both; hdr.header_len says where the meta starts. The
 * same limits apply to both.
 *
 * The parser checks every field against limits as soon as its bytes are there
 * and before the caller allocates anything: a stream reader can hand it the
 * bytes it has so far and gets either the header, "need N bytes" or a verdict
 * that closes the connection.
 */
#ifndef PS_NET_CODEC_FRAME_H_
#define PS_NET_CODEC_FRAME_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_FRAME_MAGIC 0x31465350u /* "PSF1" read as a little-endian u32 */
#define PS_FRAME_VERSION 1
#define PS_FRAME_FIXED_LEN 16
#define PS_FRAME_SEGMENT_LEN 8
/* Hard ceiling of ps_frame_limits_t.max_segments (= PS_META_MAX_DATA). */
#define PS_FRAME_MAX_SEGMENTS 64
#define PS_FRAME_MAX_HEADER_LEN \
    (PS_FRAME_FIXED_LEN + PS_FRAME_SEGMENT_LEN * PS_FRAME_MAX_SEGMENTS)

#define PS_FRAME_COMPACT_MAGIC0 0x70u /* 'p' */
#define PS_FRAME_COMPACT_MAGIC1 0x73u /* 's' */
#define PS_FRAME_COMPACT_VERSION 1
#define PS_FRAME_COMPACT_FIXED_LEN 4
/* The shortest compact header (no segments, meta_len < 128), and so the
 * shortest frame of either form. */
#define PS_FRAME_COMPACT_MIN_LEN 5

#define PS_FRAME_DEFAULT_MAX_META (1u << 20)          /* 1 MiB */
#define PS_FRAME_DEFAULT_MAX_SEGMENTS 16u
#define PS_FRAME_DEFAULT_MAX_MESSAGE (4ull << 30)     /* 4 GiB */

/* What a peer may send; filled from the config table by the caller. */
typedef struct {
    uint32_t max_meta_bytes;
    uint32_t max_segments;      /* at most PS_FRAME_MAX_SEGMENTS */
    uint64_t max_message_bytes; /* the whole frame: header, meta and data */
} ps_frame_limits_t;

/* The defaults above: 1 MiB of meta, 16 segments, 4 GiB per frame. */
ps_frame_limits_t ps_frame_limits_default(void);

typedef struct {
    uint16_t flags;
    uint16_t num_data;
    uint32_t meta_len;
    uint64_t data_len[PS_FRAME_MAX_SEGMENTS]; /* num_data entries */
    /* Derived by the parser. */
    uint32_t header_len; /* PS_FRAME_FIXED_LEN + 8 * num_data, or the compact
                          * header's length: never assume either */
    uint64_t data_total; /* sum of data_len */
    uint64_t frame_len;  /* header_len + meta_len + data_total */
} ps_frame_header_t;

/* The length of a "PSF1" header (the compact one is never longer when
 * ps_frame_encode_head() writes it: a sender may size buffers with this). */
static inline size_t ps_frame_header_len(size_t num_data)
{
    return PS_FRAME_FIXED_LEN + PS_FRAME_SEGMENT_LEN * num_data;
}

/*
 * Writes the header of a frame with meta_len bytes of meta and num_data
 * segments of data_len[i] bytes into buf[0..cap); *len_p = header bytes.
 * The frame must be within limits (NULL: the defaults), so that a sender
 * fails where a receiver with the same limits would refuse it.
 *   PS_ERR_TOO_LARGE    the frame breaks a limit, or cap is too small.
 *   PS_ERR_INVALID_ARG  flags != 0, data_len NULL with num_data > 0, limits
 *                       out of range.
 */
ps_status_t ps_frame_header_build(uint16_t flags, uint32_t meta_len,
                                  const uint64_t *data_len, uint16_t num_data,
                                  const ps_frame_limits_t *limits, void *buf,
                                  size_t cap, size_t *len_p);

/*
 * As ps_frame_header_build() (same limits, same statuses), in the compact
 * form; *len_p is its length (at most PS_FRAME_COMPACT_FIXED_LEN + 5 +
 * 10 * num_data).
 */
ps_status_t ps_frame_header_build_compact(uint32_t meta_len, const uint64_t *data_len,
                                          uint16_t num_data, const ps_frame_limits_t *limits,
                                          void *buf, size_t cap, size_t *len_p);

/*
 * Parses and checks the header (either form) at the start of buf[0..len)
 * against limits (NULL: the defaults). Only the bytes present are read.
 *   PS_OK               *hdr_p holds the header (hdr_p->header_len bytes).
 *   PS_INPROGRESS       every byte present is valid so far, and buf must hold
 *                       *need_p bytes (> len) before the next call can say
 *                       more. *hdr_p is untouched. *need_p never passes the
 *                       header's real length: inside a compact header it is
 *                       the least that can still be missing (a varint's
 *                       next byte plus one byte per segment length to come);
 *                       for an empty buffer PS_FRAME_COMPACT_MIN_LEN.
 *   PS_ERR_PROTOCOL     wrong magic or version, unknown flags, reserved != 0,
 *                       a varint that is overlong or too large for its field.
 *   PS_ERR_TOO_LARGE    meta_len, num_data, a segment or the frame exceeds
 *                       its limit.
 *   PS_ERR_INVALID_ARG  limits out of range.
 */
ps_status_t ps_frame_header_parse(const void *buf, size_t len,
                                  const ps_frame_limits_t *limits,
                                  ps_frame_header_t *hdr_p, size_t *need_p);

/* A whole frame in one buffer; the pointers point into it. */
typedef struct {
    ps_frame_header_t hdr;
    const uint8_t *meta; /* hdr.meta_len bytes */
    const uint8_t *data[PS_FRAME_MAX_SEGMENTS]; /* hdr.data_len[i] bytes each */
} ps_frame_view_t;

/*
 * As ps_frame_header_parse(), then locates the meta and the segments of a
 * frame held whole in buf. PS_INPROGRESS with *need_p = hdr.frame_len when
 * the header is complete but the rest is not. Bytes after frame_len (the
 * next frame) are left alone.
 */
ps_status_t ps_frame_parse(const void *buf, size_t len,
                           const ps_frame_limits_t *limits,
                           ps_frame_view_t *view_p, size_t *need_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_CODEC_FRAME_H_ */

#include "ps/net/codec/frame.h"

#include <stdbool.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/base/log.h"
#include "ps/net/codec/frame_internal.h"

/* Known flag bits of this version; a peer setting another one speaks a
 * protocol we do not. */
#define PS_FRAME_FLAGS_KNOWN 0u

ps_frame_limits_t ps_frame_limits_default(void)
{
    ps_frame_limits_t limits = {
        .max_meta_bytes = PS_FRAME_DEFAULT_MAX_META,
        .max_segments = PS_FRAME_DEFAULT_MAX_SEGMENTS,
        .max_message_bytes = PS_FRAME_DEFAULT_MAX_MESSAGE,
    };
    return limits;
}

/* The limits to apply: `limits`, or the defaults (into *storage) for NULL.
 * NULL when they are out of range (logged). Not copied otherwise: every
 * message passes here. */
static const ps_frame_limits_t *resolve_limits(const ps_frame_limits_t *limits,
                                               ps_frame_limits_t *storage)
{
    if (limits == NULL) {
        *storage = ps_frame_limits_default();
        return storage;
    }
    if (limits->max_segments > PS_FRAME_MAX_SEGMENTS) {
        ps_error(PS_LOG_CODEC, "frame limits: %u segments, at most %u are supported",
                 limits->max_segments, PS_FRAME_MAX_SEGMENTS);
        return NULL;
    }
    return limits;
}

/* Adds n to *total unless that passes max (checked without overflow). */
static inline bool add_within(uint64_t *total, uint64_t n, uint64_t max)
{
    if (*total > max || n > max - *total)
        return false;
    *total += n;
    return true;
}

/* What both header forms check before they are written, each refusal
 * logged: the meta and segment limits, the whole frame (a header of
 * header_len bytes, the meta, the segments) against the message limit,
 * and room for the header in buf. Inlined: the fabric van builds a header
 * per message with ps_frame_header_build(). */
static inline __attribute__((always_inline)) ps_status_t
check_build(const ps_frame_limits_t *lim, size_t header_len, uint32_t meta_len,
            const uint64_t *data_len, uint16_t num_data, size_t cap)
{
    if (!ps__frame_fits_len(lim, header_len, meta_len, data_len, num_data)) {
        /* Which limit: the one test above, told apart only on refusal. */
        if (meta_len > lim->max_meta_bytes || num_data > lim->max_segments)
            ps_error(PS_LOG_CODEC,
                     "cannot build frame: meta %u bytes (max %u), %u segments (max %u)",
                     meta_len, lim->max_meta_bytes, num_data, lim->max_segments);
        else
            ps_error(PS_LOG_CODEC, "cannot build frame: more than %llu bytes",
                     (unsigned long long)lim->max_message_bytes);
        return PS_ERR_TOO_LARGE;
    }
    if (cap < header_len) {
        ps_error(PS_LOG_CODEC, "cannot build frame header: needs %zu bytes, buffer has %zu",
                 header_len, cap);
        return PS_ERR_TOO_LARGE;
    }
    return PS_OK;
}

ps_status_t ps_frame_header_build(uint16_t flags, uint32_t meta_len,
                                  const uint64_t *data_len, uint16_t num_data,
                                  const ps_frame_limits_t *limits, void *buf,
                                  size_t cap, size_t *len_p)
{
    ps_frame_limits_t storage;
    const ps_frame_limits_t *lim = resolve_limits(limits, &storage);

    if (lim == NULL)
        return PS_ERR_INVALID_ARG;
    if ((flags & ~PS_FRAME_FLAGS_KNOWN) != 0 || (num_data != 0 && data_len == NULL) ||
        (buf == NULL && cap != 0)) {
        ps_error(PS_LOG_CODEC, "cannot build frame header: flags 0x%x, %u segments",
                 flags, num_data);
        return PS_ERR_INVALID_ARG;
    }
    size_t header_len = ps_frame_header_len(num_data);
    ps_status_t status = check_build(lim, header_len, meta_len, data_len, num_data, cap);
    if (status != PS_OK)
        return status;
    ps__frame_header_write(buf, flags, meta_len, data_len, num_data);
    *len_p = header_len;
    return PS_OK;
}

ps_status_t ps_frame_header_build_compact(uint32_t meta_len, const uint64_t *data_len,
                                          uint16_t num_data, const ps_frame_limits_t *limits,
                                          void *buf, size_t cap, size_t *len_p)
{
    ps_frame_limits_t storage;
    const ps_frame_limits_t *lim = resolve_limits(limits, &storage);

    if (lim == NULL)
        return PS_ERR_INVALID_ARG;
    if ((num_data != 0 && data_len == NULL) || (buf == NULL && cap != 0)) {
        ps_error(PS_LOG_CODEC, "cannot build compact frame header: %u segments", num_data);
        return PS_ERR_INVALID_ARG;
    }
    size_t header_len = ps__frame_compact_len(meta_len, data_len, num_data);
    ps_status_t status = check_build(lim, header_len, meta_len, data_len, num_data, cap);
    if (status != PS_OK)
        return status;
    ps__frame_compact_write(buf, meta_len, data_len, num_data);
    *len_p = header_len;
    return PS_OK;
}

/* Out of line, so that the parser's common path does not carry it. */
__attribute__((noinline, cold)) static ps_status_t refuse_too_large(uint64_t max)
{
    ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: more than %llu bytes",
                        (unsigned long long)max);
    return PS_ERR_TOO_LARGE;
}

/* Judges the fixed fields present in buf[0..len), each as soon as it is
 * complete, so garbage is refused after four bytes rather than after a
 * whole header's worth; logs what it refuses. Out of line: only short
 * or refused headers come here. */
__attribute__((noinline, cold)) static ps_status_t
check_fixed_prefix(const uint8_t *p, size_t len, const ps_frame_limits_t *lim)
{
    if (len >= 4 && ps_get_le32(p) != PS_FRAME_MAGIC) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: bad magic 0x%08x",
                            ps_get_le32(p));
        return PS_ERR_PROTOCOL;
    }
    if (len >= 6 && ps_get_le16(p + 4) != PS_FRAME_VERSION) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: version %u, expected %u",
                            ps_get_le16(p + 4), PS_FRAME_VERSION);
        return PS_ERR_PROTOCOL;
    }
    if (len >= 8 && (ps_get_le16(p + 6) & ~PS_FRAME_FLAGS_KNOWN) != 0) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: unknown flags 0x%x",
                            ps_get_le16(p + 6));
        return PS_ERR_PROTOCOL;
    }
    if (len >= 12 && ps_get_le32(p + 8) > lim->max_meta_bytes) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: meta of %u bytes, limit %u",
                            ps_get_le32(p + 8), lim->max_meta_bytes);
        return PS_ERR_TOO_LARGE;
    }
    if (len >= 14 && ps_get_le16(p + 12) > lim->max_segments) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: %u data segments, limit %u",
                            ps_get_le16(p + 12), lim->max_segments);
        return PS_ERR_TOO_LARGE;
    }
    if (len >= 16 && ps_get_le16(p + 14) != 0) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: reserved field 0x%x",
                            ps_get_le16(p + 14));
        return PS_ERR_PROTOCOL;
    }
    return PS_OK;
}

/* The compact header (frame.h) at p[0..len), len >= 1, p[0] its first
 * magic byte: each field judged as soon as it is there, as for "PSF1". */
static ps_status_t parse_compact(const uint8_t *p, size_t len, const ps_frame_limits_t *lim,
                                 ps_frame_header_t *hdr_p, size_t *need_p)
{
    if (len < PS_FRAME_COMPACT_FIXED_LEN || p[1] != PS_FRAME_COMPACT_MAGIC1 ||
        p[2] != PS_FRAME_COMPACT_VERSION || p[3] > lim->max_segments) {
        if (len >= 2 && p[1] != PS_FRAME_COMPACT_MAGIC1) {
            ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: bad magic 0x%02x%02x", p[0],
                                p[1]);
            return PS_ERR_PROTOCOL;
        }
        if (len >= 3 && p[2] != PS_FRAME_COMPACT_VERSION) {
            ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: compact version %u, expected %u",
                                p[2], PS_FRAME_COMPACT_VERSION);
            return PS_ERR_PROTOCOL;
        }
        if (len >= 4 && p[3] > lim->max_segments) {
            ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: %u data segments, limit %u",
                                p[3], lim->max_segments);
            return PS_ERR_TOO_LARGE;
        }
        *need_p = PS_FRAME_COMPACT_MIN_LEN;
        return PS_INPROGRESS;
    }
    uint32_t num_data = p[3];
    size_t off = PS_FRAME_COMPACT_FIXED_LEN;
    uint64_t v = 0;
    int n = ps__varint_get(p + off, len - off, &v);
    if (n < 0 || (n == 0 && len - off >= 5) || v > UINT32_MAX) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: bad meta length");
        return PS_ERR_PROTOCOL;
    }
    if (n == 0) {
        /* The varint's next byte, and a byte per segment length at least. */
        *need_p = len + 1 + num_data;
        return PS_INPROGRESS;
    }
    if (v > lim->max_meta_bytes) {
        ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: meta of %llu bytes, limit %u",
                            (unsigned long long)v, lim->max_meta_bytes);
        return PS_ERR_TOO_LARGE;
    }
    uint32_t meta_len = (uint32_t)v;
    off += (size_t)n;
    uint64_t max = lim->max_message_bytes;
    /* The frame so far: what the header has said and its own bytes. */
    uint64_t total = off;
    uint64_t lens[PS_FRAME_MAX_SEGMENTS];
    if (!add_within(&total, meta_len, max))
        return refuse_too_large(max);
    /* The lengths go straight to *hdr_p when they are all there whatever
     * their size (no PS_INPROGRESS, which must leave it untouched). */
    uint64_t *dst = len - off >= (size_t)PS__VARINT_MAX_LEN * num_data ? hdr_p->data_len : lens;
    for (uint32_t i = 0; i < num_data; i++) {
        n = ps__varint_get(p + off, len - off, &v);
        if (n < 0) {
            ps_warn_ratelimited(PS_LOG_CODEC, "rejecting frame: bad length of segment %u", i);
            return PS_ERR_PROTOCOL;
        }
        if (n == 0) {
            *need_p = len + 1 + (num_data - i - 1);
            return PS_INPROGRESS;
        }
        off += (size_t)n;
        dst[i] = v;
        if (__builtin_add_overflow(total, v + (uint64_t)n, &total) || v > UINT64_MAX - 10 ||
            total > max)
            return refuse_too_large(max);
    }
#if SIZE_MAX < UINT64_MAX
    if (total > SIZE_MAX)
        return refuse_too_large(max);
#endif
    hdr_p->flags = 0;
    hdr_p->num_data = (uint16_t)num_data;
    hdr_p->meta_len = meta_len;
    if (dst == lens) {
        for (uint32_t i = 0; i < num_data; i++)
            hdr_p->data_len[i] = lens[i];
    }
    hdr_p->header_len = (uint32_t)off;
    hdr_p->data_total = total - off - meta_len;
    hdr_p->frame_len = total;
    return PS_OK;
}

ps_status_t ps_frame_header_parse(const void *buf, size_t len,
                                  const ps_frame_limits_t *limits,
                                  ps_frame_header_t *hdr_p, size_t *need_p)
{
    const uint8_t *p = buf;
    ps_frame_limits_t storage;
    uint16_t num_data;
    uint32_t meta_len;
    size_t header_len;
    uint64_t total;
    const ps_frame_limits_t *lim = resolve_limits(limits, &storage);

    if (lim == NULL)
        return PS_ERR_INVALID_ARG;
    if (buf == NULL && len != 0) {
        ps_error(PS_LOG_CODEC, "cannot parse frame header: NULL buffer with a length");
        return PS_ERR_INVALID_ARG;
    }
    if (len == 0) {
        /* Either form: a compact frame may be this short. */
        *need_p = PS_FRAME_COMPACT_MIN_LEN;
        return PS_INPROGRESS;
    }
    if (p[0] == PS_FRAME_COMPACT_MAGIC0)
        return parse_compact(p, len, lim, hdr_p, need_p);

    /* A whole fixed part that is valid, the usual case, is judged as two
     * words; anything else goes field by field (check_fixed_prefix), which
     * names what is wrong. Both accept exactly the same bytes. */
    uint64_t w0 = 0;
    uint64_t w1 = 0;
    if (len >= PS_FRAME_FIXED_LEN) {
        w0 = ps_get_le64(p);
        w1 = ps_get_le64(p + 8);
    }
    if (len < PS_FRAME_FIXED_LEN ||
        (w0 & ~((uint64_t)(uint16_t)PS_FRAME_FLAGS_KNOWN << 48)) != ps__frame_word0(0) ||
        (uint32_t)w1 > lim->max_meta_bytes || (uint16_t)(w1 >> 32) > lim->max_segments ||
        (w1 >> 48) != 0) {
        ps_status_t status = check_fixed_prefix(p, len, lim);
        if (status != PS_OK)
            return status;
        if (len < PS_FRAME_FIXED_LEN) {
            *need_p = PS_FRAME_FIXED_LEN;
            return PS_INPROGRESS;
        }
    }

    meta_len = (uint32_t)w1;
    num_data = (uint16_t)(w1 >> 32);
    header_len = ps_frame_header_len(num_data);
    uint64_t max = lim->max_message_bytes;
    total = header_len;
    if (!add_within(&total, meta_len, max))
        goto too_large;
    /* The segment lengths present so far, even if the header is not whole. */
    size_t present = len < header_len ? (len - PS_FRAME_FIXED_LEN) / PS_FRAME_SEGMENT_LEN
                                      : num_data;
    for (size_t i = 0; i < present; i++) {
        if (!add_within(&total, ps_get_le64(p + PS_FRAME_FIXED_LEN + PS_FRAME_SEGMENT_LEN * i),
                        max))
            goto too_large;
    }
#if SIZE_MAX < UINT64_MAX
    if (total > SIZE_MAX)
        goto too_large;
#endif
    if (len < header_len) {
        *need_p = header_len;
        return PS_INPROGRESS;
    }

    hdr_p->flags = (uint16_t)(w0 >> 48);
    hdr_p->num_data = num_data;
    hdr_p->meta_len = meta_len;
    for (uint16_t i = 0; i < num_data; i++)
        hdr_p->data_len[i] = ps_get_le64(p + PS_FRAME_FIXED_LEN + PS_FRAME_SEGMENT_LEN * i);
    hdr_p->header_len = (uint32_t)header_len;
    hdr_p->data_total = total - header_len - meta_len;
    hdr_p->frame_len = total;
    return PS_OK;

too_large:
    return refuse_too_large(max);
}

ps_status_t ps_frame_parse(const void *buf, size_t len,
                           const ps_frame_limits_t *limits,
                           ps_frame_view_t *view_p, size_t *need_p)
{
    ps_frame_header_t hdr;
    const uint8_t *p = buf;
    size_t off;
    ps_status_t status = ps_frame_header_parse(buf, len, limits, &hdr, need_p);

    if (status != PS_OK)
        return status;
    if (len < hdr.frame_len) {
        *need_p = (size_t)hdr.frame_len;
        return PS_INPROGRESS;
    }
    view_p->hdr = hdr;
    view_p->meta = p + hdr.header_len;
    off = hdr.header_len + (size_t)hdr.meta_len;
    for (uint16_t i = 0; i < hdr.num_data; i++) {
        view_p->data[i] = p + off;
        off += (size_t)hdr.data_len[i];
    }
    return PS_OK;
}

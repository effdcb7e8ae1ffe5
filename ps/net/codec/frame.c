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

ps_status_t ps_frame_header_build(uint16_t flags, uint32_t meta_len,
                                  const uint64_t *data_len, uint16_t num_data,
                                  const ps_frame_limits_t *limits, void *buf,
                                  size_t cap, size_t *len_p)
{
    ps_frame_limits_t storage;
    size_t header_len = ps_frame_header_len(num_data);
    uint64_t total;
    uint8_t *p = buf;
    const ps_frame_limits_t *lim = resolve_limits(limits, &storage);

    if (lim == NULL)
        return PS_ERR_INVALID_ARG;
    if ((flags & ~PS_FRAME_FLAGS_KNOWN) != 0 || (num_data != 0 && data_len == NULL) ||
        (buf == NULL && cap != 0)) {
        ps_error(PS_LOG_CODEC, "cannot build frame header: flags 0x%x, %u segments",
                 flags, num_data);
        return PS_ERR_INVALID_ARG;
    }
    if (meta_len > lim->max_meta_bytes || num_data > lim->max_segments) {
        ps_error(PS_LOG_CODEC,
                 "cannot build frame: meta %u bytes (max %u), %u segments (max %u)",
                 meta_len, lim->max_meta_bytes, num_data, lim->max_segments);
        return PS_ERR_TOO_LARGE;
    }
    uint64_t max = lim->max_message_bytes;
    total = header_len;
    if (!add_within(&total, meta_len, max))
        goto too_large;
    for (uint16_t i = 0; i < num_data; i++) {
        if (!add_within(&total, data_len[i], max))
            goto too_large;
    }
    if (cap < header_len) {
        ps_error(PS_LOG_CODEC, "cannot build frame header: needs %zu bytes, buffer has %zu",
                 header_len, cap);
        return PS_ERR_TOO_LARGE;
    }

    ps__frame_header_write(p, flags, meta_len, data_len, num_data);
    *len_p = header_len;
    return PS_OK;

too_large:
    ps_error(PS_LOG_CODEC, "cannot build frame: more than %llu bytes",
             (unsigned long long)max);
    return PS_ERR_TOO_LARGE;
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

/*
 * A message's frame header and meta in one buffer, as the tcp and ucx vans
 * send them ahead of the data segments: the compact meta for a plain data
 * message, nanopb for everything else, and a buffer of its own for a meta
 * too large for the caller's. (The fabric van writes "PSF1" and the
 * version-1 fast meta itself: on its shared-memory provider the compact
 * forms' extra decoding cost more time than their fewer bytes saved.)
 */
#ifndef PS_NET_CODEC_FRAME_ENCODE_H_
#define PS_NET_CODEC_FRAME_ENCODE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Encodes the header (num_data segments of `lens`) and `meta` into buf[cap]
 * when they fit, else into a new heap buffer (*heap_p, the caller frees it;
 * NULL otherwise). *frame_p is where they start, *len_p their length, never
 * more than ps_frame_header_len(num_data) + the meta's other encodings.
 * A plain data meta goes in the compact header and compact meta (frame.h,
 * meta_fast.h) when buf holds the longest compact meta after the header
 * with 8 bytes to spare (PS_META_COMPACT_MAX_FIXED + types + body + 8), and
 * the compact header is shorter than "PSF1"'s; else as before:
 * "PSF1" and the version-1 fast meta, or protobuf for other metas. limits
 * NULL: the defaults.
 * PS_ERR_TOO_LARGE for a meta above limits->max_meta_bytes; errors are
 * logged under `comp` (the van's component). */
ps_status_t ps_frame_encode_head(const ps_meta_t *meta, const uint64_t *lens, uint32_t num_data,
                                 const ps_frame_limits_t *limits, ps_log_component_t comp,
                                 uint8_t *buf, size_t cap, uint8_t **frame_p, size_t *len_p,
                                 uint8_t **heap_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_CODEC_FRAME_ENCODE_H_ */

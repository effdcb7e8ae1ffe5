/*
 * A compact fixed-layout encoding for the metas of plain data messages
 * (KV push/pull requests and responses, simple-app messages): no control
 * command, no node list, no tensor, trace, QP or van fields. The compact
 * form (version 2) also carries tensor messages (the AF app's dtype and
 * shape), but no traces. Encoding and
 * decoding it costs a few dozen ns, where the protobuf codec (codec.h)
 * costs microseconds; a van uses it for such metas and codec.h for every
 * other one.
 *
 * Layout (little-endian):
 *   0  u8   0x00 marker: never the first byte of a protobuf encoding (a
 *           tag's first byte is 0 only for field 0, which does not exist),
 *           so a receiver tells the two apart by the first byte
 *   1  u8   PS_META_FAST_VERSION
 *   2  u8   flags: bit 0 request, 1 push, 2 pull, 3 simple_app
 *   3  u8   num_data_types (<= PS_META_MAX_DATA)
 *   4  i32  head, app_id, customer_id, timestamp, sender, recver,
 *           src_dev_type, src_dev_id, dst_dev_type, dst_dev_id, option,
 *           sid, priority (13 x 4 bytes)
 *  56  u64  data_size, key, addr, val_len
 *  88  u32  body_len (<= PS_META_FAST_BODY_MAX)
 *  92  u8   data_types[num_data_types], then body_len bytes of body
 *
 * The compact form (version 2) carries the same fields, those at their
 * default left out (what ps_frame_encode_head() sends):
 *   0  u8   0x00 marker, as above
 *   1  u8   PS_META_COMPACT_VERSION
 *   2  u8   flags, as above
 *   3  u16  presence bitmap: bit i set when field i follows, in this order,
 *           each a LEB128 varint:
 *      0 timestamp   1 sender   2 recver (the i32 as a u32: never negative
 *        in practice, a negative one takes 5 bytes)   3 head (zigzag of the
 *        i32)   4 app_id   5 customer_id (as a u32)
 *      6 data_size   7 key   8 addr   9 val_len (u64)
 *     10 num_data_types (1..PS_META_MAX_DATA)
 *     11 the rarer fields: a byte follows (not 0) with bit j set when rare
 *        field j follows, each a varint: 0 body_len (1..PS_META_FAST_BODY_MAX),
 *        1 option, 2 sid, 3 priority (zigzag), 4 src_dev_type
 *        (1..PS_DEV_TYPE_COUNT-1), 5 src_dev_id (zigzag of id + 1),
 *        6 dst_dev_type, 7 dst_dev_id (as 4, 5)
 *     12 a tensor (is_tensor): varints dtype (zigzag of the int8), ndim
 *        (0..PS_META_MAX_SHAPE), then ndim shape entries (zigzag of the
 *        int64); these may be 0
 *     13..15 must be 0
 *   then u8 data_types[num_data_types], then body_len bytes of body.
 * A field left out is 0 (-1 for the device ids), so a present one is never
 * 0 on the wire; varints are in their shortest form: every meta has exactly
 * one compact encoding. A KV request of one key is 20-30 bytes.
 */
#ifndef PS_NET_CODEC_META_FAST_H_
#define PS_NET_CODEC_META_FAST_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_META_FAST_VERSION 1
#define PS_META_FAST_FIXED_LEN 92
#define PS_META_COMPACT_VERSION 2
/* The longest compact form of a meta, but for its data types and body. */
#define PS_META_COMPACT_MAX_FIXED 189 /* 5 + 6*5 + 4*10 + 1 + 1 + 2 + 3*5 + 2*(1 + 5) \
                                         + 2 + 1 + 8*10 (a tensor's dtype, ndim, shape) */
/* Bodies longer than this take the protobuf path. */
#define PS_META_FAST_BODY_MAX 4096

/* Bytes the fast form of `meta` takes, or 0 when the meta is not plain
 * (then use ps_meta_encode). */
size_t ps_meta_fast_size(const ps_meta_t *meta);

/* Writes the fast form into buf[0..cap). PS_ERR_UNSUPPORTED for a meta
 * that is not plain, PS_ERR_TOO_LARGE when cap is too small. */
ps_status_t ps_meta_fast_encode(const ps_meta_t *meta, uint8_t *buf, size_t cap,
                                size_t *len_p);

/* As ps_meta_fast_encode(), in the compact form (version 2), which takes at
 * most PS_META_COMPACT_MAX_FIXED + num_data_types + body_len bytes. */
ps_status_t ps_meta_compact_encode(const ps_meta_t *meta, uint8_t *buf, size_t cap,
                                   size_t *len_p);

/* 1 if an encoded meta is in the fast form, either version (its first byte
 * is 0x00). */
static inline int ps_meta_is_fast(const uint8_t *buf, size_t len)
{
    return len > 0 && buf[0] == 0;
}

/* Decodes the fast form, either version (the same meta from both);
 * meta->body points into buf. PS_ERR_PROTOCOL for anything that is not
 * exactly one well-formed fast meta: in the compact form also a truncated
 * or overlong varint, a value out of its field's range or present at its
 * default, an unknown bitmap bit, bytes left over. */
ps_status_t ps_meta_fast_decode(const uint8_t *buf, size_t len, ps_meta_t *meta_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_CODEC_META_FAST_H_ */

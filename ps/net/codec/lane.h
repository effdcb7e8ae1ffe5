/*
 * The small lane's wire header. A small message of an app that has a
 * compact form of its own (a KV request or response of a few values) can
 * skip the meta, the frame and the message object altogether: the app
 * writes its payload, the postoffice puts this header in front, a van that
 * has a send_lane op (ps/net/van/van.h) sends the bytes as one message,
 * and the receiving postoffice hands the payload to the customer the
 * header names. What it saves is the generic path's cost per message
 * (docs/PERF.md, "The small lane"): building and encoding a 672-byte meta,
 * decoding it, steering segments, and a message object at every layer.
 *
 * Layout (little-endian, 8 bytes, so that a payload behind it starts
 * 8-byte aligned in an aligned buffer):
 *   0  u8   PS_LANE_MAGIC ('q'): never the first byte of a frame (frame.h:
 *           'P' or 'p'), so a van that receives both tells them apart
 *   1  u8   PS_LANE_VERSION
 *   2  u16  app_id
 *   4  u16  customer_id
 *   6  u16  reserved, 0
 * then the payload, whose form is the app's.
 */
#ifndef PS_NET_CODEC_LANE_H_
#define PS_NET_CODEC_LANE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/endian.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_LANE_MAGIC 0x71u /* 'q' */
#define PS_LANE_VERSION 1u
#define PS_LANE_HDR_LEN 8u
/* The longest lane message, header included. */
#define PS_LANE_MAX_BYTES 512u
#define PS_LANE_MAX_PAYLOAD (PS_LANE_MAX_BYTES - PS_LANE_HDR_LEN)
/* What a van may write in front of the header (ps_van_ops_t.send_lane):
 * the UCX van's 8-byte tag, the fabric van's 32-byte header. */
#define PS_LANE_VAN_HEADROOM 32u
/* What a sender leaves free in front of its payload: the header's and the
 * van's room. */
#define PS_LANE_HEADROOM (PS_LANE_VAN_HEADROOM + PS_LANE_HDR_LEN)
/* The largest app or customer id the header carries. */
#define PS_LANE_MAX_ID 0xffff

static inline void ps_lane_hdr_write(uint8_t *p, int app_id, int customer_id)
{
    p[0] = PS_LANE_MAGIC;
    p[1] = PS_LANE_VERSION;
    ps_put_le16(p + 2, (uint16_t)app_id);
    ps_put_le16(p + 4, (uint16_t)customer_id);
    ps_put_le16(p + 6, 0);
}

/* 1 when a lane message of len bytes (header included) is one a receiver
 * takes: a header, and no more than PS_LANE_MAX_BYTES. The postoffice
 * drops any other before a customer sees its payload, so that a lane
 * function may count on len - PS_LANE_HDR_LEN <= PS_LANE_MAX_PAYLOAD. */
static inline int ps_lane_len_ok(size_t len)
{
    return len >= PS_LANE_HDR_LEN && len <= PS_LANE_MAX_BYTES;
}

/* 1 when bytes[0..len) start with a lane header this version reads (its
 * ids then in *app_id_p and *customer_id_p), else 0. */
static inline int ps_lane_hdr_read(const uint8_t *p, size_t len, int *app_id_p,
                                   int *customer_id_p)
{
    if (len < PS_LANE_HDR_LEN || p[0] != PS_LANE_MAGIC || p[1] != PS_LANE_VERSION ||
        ps_get_le16(p + 6) != 0) {
        return 0;
    }
    *app_id_p = ps_get_le16(p + 2);
    *customer_id_p = ps_get_le16(p + 4);
    return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_CODEC_LANE_H_ */

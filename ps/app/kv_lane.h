/*
 * The KV app's small-lane form (ps/net/codec/lane.h): a request or response
 * whose keys and values fit in one lane message, written and read in one
 * pass with no meta, frame or message object. The worker sends it to a
 * single server when the postoffice has a lane; the server answers in it
 * when the answer fits. Either side accepts both forms.
 *
 * It carries what the two ends use and no more (the message crosses between
 * cores, and every cache line it spans is paid for there): a one-key
 * request or answer with an 8-byte value is 40 bytes with the lane header,
 * 48 with the UCX van's tag. No addr or option (they name a transport's RDMA
 * destination, which a lane message never has; a handler sees 0), no value
 * length (what the payload's length leaves after keys and lengths), and the
 * key a request names is its first key. A response's key, addr, option and
 * val_len, which the worker does not read, are left out.
 *
 * Payload layout (little-endian; 16 bytes, then the data, the keys 8-byte
 * aligned behind the lane header):
 *    0  u8   flags: bit 0 request, 1 push, 2 pull, 3 lens follow
 *    1  u8   data type of the values
 *    2  u16  num_keys
 *    4  i32  timestamp
 *    8  i32  cmd (upstream's head)
 *   12  u32  val_len: bytes the worker expects back (a pull) or pushes
 *   16  u64  keys[num_keys], then the values, then (bit 3) i32 lens[num_keys]
 * The values are what the length of the payload leaves for them.
 */
#ifndef PS_APP_KV_LANE_H_
#define PS_APP_KV_LANE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__KV_LANE_FIXED 16

typedef struct {
    int32_t timestamp;
    int32_t cmd;
    uint32_t val_len;
    int request;
    int push;
    int pull;
    ps_data_type_t type;
    size_t num_keys;
    const void *keys; /* num_keys * 8 bytes */
    const void *vals;
    size_t vals_len;
    const void *lens; /* NULL, or num_keys * 4 bytes */
} ps__kv_lane_msg_t;

/* The functions are inline: the worker and the server write and read one
 * payload per small request, and calls passing the message as a struct
 * cost more than the work. */

enum {
    PS__KV_LANE_REQUEST = 1u << 0,
    PS__KV_LANE_PUSH = 1u << 1,
    PS__KV_LANE_PULL = 1u << 2,
    PS__KV_LANE_LENS = 1u << 3,
    PS__KV_LANE_KNOWN = 0x0fu,
};

/* The payload length of a message of num_keys keys and vals_len value
 * bytes, with or without lens; 0 when it cannot be one (more keys than
 * the form counts). */
static inline size_t ps__kv_lane_size(size_t num_keys, size_t vals_len, int has_lens)
{
    if (num_keys > UINT16_MAX)
        return 0;
    return PS__KV_LANE_FIXED + num_keys * 8 + vals_len + (has_lens ? num_keys * 4 : 0);
}

/* Writes m as a payload of ps__kv_lane_size() bytes into buf. */
static inline void ps__kv_lane_write(uint8_t *buf, const ps__kv_lane_msg_t *m)
{
    buf[0] = (uint8_t)((m->request ? PS__KV_LANE_REQUEST : 0) | (m->push ? PS__KV_LANE_PUSH : 0) |
                       (m->pull ? PS__KV_LANE_PULL : 0) | (m->lens != NULL ? PS__KV_LANE_LENS : 0));
    buf[1] = (uint8_t)m->type;
    ps_put_le16(buf + 2, (uint16_t)m->num_keys);
    ps_put_le32(buf + 4, (uint32_t)m->timestamp);
    ps_put_le32(buf + 8, (uint32_t)m->cmd);
    ps_put_le32(buf + 12, m->val_len);
    uint8_t *p = buf + PS__KV_LANE_FIXED;
    /* Keys and lengths as the host holds them: the lane, like the rest of
     * ps, runs between little-endian hosts (ps/base/endian.h). */
    if (m->num_keys != 0)
        memcpy(p, m->keys, m->num_keys * 8);
    p += m->num_keys * 8;
    if (m->vals_len != 0)
        memcpy(p, m->vals, m->vals_len);
    p += m->vals_len;
    if (m->lens != NULL && m->num_keys != 0)
        memcpy(p, m->lens, m->num_keys * 4);
}

/* Reads a payload: *m's pointers point into buf. PS_ERR_PROTOCOL for
 * anything that is not exactly one well-formed payload. */
static inline ps_status_t ps__kv_lane_read(const uint8_t *buf, size_t len, ps__kv_lane_msg_t *m)
{
    if (len < PS__KV_LANE_FIXED)
        return PS_ERR_PROTOCOL;
    unsigned flags = buf[0];
    size_t nk = ps_get_le16(buf + 2);
    int has_lens = (flags & PS__KV_LANE_LENS) != 0;
    size_t keyed = PS__KV_LANE_FIXED + nk * (8 + (has_lens ? 4 : 0));
    if ((flags & ~PS__KV_LANE_KNOWN) != 0 || buf[1] >= PS_DATA_TYPE_COUNT || keyed > len)
        return PS_ERR_PROTOCOL;
    size_t vl = len - keyed;
    m->request = (flags & PS__KV_LANE_REQUEST) != 0;
    m->push = (flags & PS__KV_LANE_PUSH) != 0;
    m->pull = (flags & PS__KV_LANE_PULL) != 0;
    m->type = (ps_data_type_t)buf[1];
    m->num_keys = nk;
    m->timestamp = (int32_t)ps_get_le32(buf + 4);
    m->cmd = (int32_t)ps_get_le32(buf + 8);
    m->val_len = ps_get_le32(buf + 12);
    m->keys = buf + PS__KV_LANE_FIXED;
    m->vals = buf + PS__KV_LANE_FIXED + nk * 8;
    m->vals_len = vl;
    m->lens = has_lens ? buf + PS__KV_LANE_FIXED + nk * 8 + vl : NULL;
    return PS_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_LANE_H_ */

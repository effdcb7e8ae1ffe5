/*
 * The KV app's small-lane form (ps/net/codec/lane.h): a request or response
 * whose keys and values fit in one lane message, written and read in one
 * pass with no meta, frame or message object. The worker sends it to a
 * single server when the postoffice has a lane; the server answers in it
 * when the answer fits. Either side accepts both forms.
 *
 * Payload layout (little-endian; 48 bytes, then the data, the keys 8-byte
 * aligned behind the lane header):
 *    0  i32  timestamp
 *    4  i32  cmd (upstream's head)
 *    8  i32  option (echoed by the server)
 *   12  u32  vals_len: value bytes
 *   16  u64  key (the first key the request named)
 *   24  u64  addr (the worker's value buffer, echoed)
 *   32  u64  val_len (bytes the worker expects back, or pushes)
 *   40  u8   flags: bit 0 request, 1 push, 2 pull, 3 lens follow
 *   41  u8   data type of the values
 *   42  u16  num_keys
 *   44  u32  0
 *   48  u64  keys[num_keys], then vals_len bytes of values, then (bit 3)
 *            i32 lens[num_keys]
 * A payload is exactly that long.
 */
#ifndef PS_APP_KV_LANE_H_
#define PS_APP_KV_LANE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__KV_LANE_FIXED 48

typedef struct {
    int32_t timestamp;
    int32_t cmd;
    int32_t option;
    uint64_t key;
    uint64_t addr;
    uint64_t val_len;
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

/* The payload length of a message of num_keys keys and vals_len value
 * bytes, with or without lens; 0 when it cannot be one (too many keys or
 * bytes for the form's fields). */
size_t ps__kv_lane_size(size_t num_keys, size_t vals_len, int has_lens);

/* Writes m as a payload of ps__kv_lane_size() bytes into buf. */
void ps__kv_lane_write(uint8_t *buf, const ps__kv_lane_msg_t *m);

/* Reads a payload: *m's pointers point into buf. PS_ERR_PROTOCOL for
 * anything that is not exactly one well-formed payload. */
ps_status_t ps__kv_lane_read(const uint8_t *buf, size_t len, ps__kv_lane_msg_t *m);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_LANE_H_ */

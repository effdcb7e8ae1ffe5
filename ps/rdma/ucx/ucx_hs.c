/*
 * The UCX van's handshake records (ucx_hs.h).
 *
 * HELLO / ACK (and the job-secret steps) are records on the handshake
 * socket (ucx_boot.c), little-endian:
 *   body length u32 | header | payload
 *   header: "PSUX" | version u8 | type u8 | 0 u16 | node id i32 |
 *     cookie u32 | nonce u64 | seq0 u64 (PS__UCX_HS_LEN bytes; seq0: the
 *     sequence number the sender expects on the first META message to it,
 *     ucx_internal.h)
 *   payload of HELLO / ACK: ctl_len u16 | data_len u16 | the control
 *     worker's address | the data worker's address (may be empty)
 *   payload of a job-secret step: the step's body (ps/net/van/handshake.h)
 *
 * A re-announcement of the node id (set_node_id) is a META message without
 * data whose meta carries "PSUCXH" + version in van_data and the id in
 * `sender`; a goodbye (the sender closes the connection) the same with a
 * 'B' behind. send() refuses messages whose van_data carries that tag, so
 * neither can be forged through the API.
 */
#include "ps/rdma/ucx/ucx_hs.h"

#include <string.h>

#include "ps/base/endian.h"

#define HS_MAGIC "PSUX"
#define HS_VERSION 3
#define HELLO_TAG PS__UCX_HELLO_TAG
#define HELLO_TAG_LEN (sizeof(PS__UCX_HELLO_TAG) - 1)
#define HELLO_VERSION 1
#define HELLO_LEN (HELLO_TAG_LEN + 1)

void ps__ucx_hs_pack(uint8_t *out, int type, int node_id, uint32_t cookie, uint64_t nonce,
                     uint64_t seq0)
{
    memcpy(out, HS_MAGIC, 4);
    out[4] = HS_VERSION;
    out[5] = (uint8_t)type;
    out[6] = out[7] = 0;
    ps_put_le32(out + 8, (uint32_t)node_id);
    ps_put_le32(out + 12, cookie);
    ps_put_le64(out + 16, nonce);
    ps_put_le64(out + 24, seq0);
}

int ps__ucx_hs_parse(const uint8_t *in, size_t len, int *type_p, int *node_id_p, uint32_t *cookie_p,
                     uint64_t *nonce_p, uint64_t *seq0_p)
{
    if (len != PS__UCX_HS_LEN || memcmp(in, HS_MAGIC, 4) != 0 || in[4] != HS_VERSION ||
        in[5] < PS__UCX_HS_HELLO || in[5] > PS__UCX_HS_AUTH_REFUSED) { /* + job-secret steps */
        return 0;
    }
    *type_p = in[5];
    *node_id_p = (int)(int32_t)ps_get_le32(in + 8);
    *cookie_p = ps_get_le32(in + 12);
    *nonce_p = ps_get_le64(in + 16);
    *seq0_p = ps_get_le64(in + 24);
    return 1;
}

int ps__ucx_rec_complete(const uint8_t *in, size_t have, size_t *total_p)
{
    if (have < PS__UCX_REC_PREFIX) {
        return 0;
    }
    uint32_t body = ps_get_le32(in);
    if (body < PS__UCX_HS_LEN || body > PS__UCX_REC_MAX - PS__UCX_REC_PREFIX) {
        return -1;
    }
    *total_p = PS__UCX_REC_PREFIX + (size_t)body;
    return have >= *total_p;
}

void ps__ucx_rec_pack(uint8_t *out, size_t payload_len, int type, int node_id, uint32_t cookie,
                      uint64_t nonce, uint64_t seq0)
{
    ps_put_le32(out, (uint32_t)(PS__UCX_HS_LEN + payload_len));
    ps__ucx_hs_pack(out + PS__UCX_REC_PREFIX, type, node_id, cookie, nonce, seq0);
}

size_t ps__ucx_addrs_pack(uint8_t *out, size_t cap, const void *ctl, size_t ctl_len,
                          const void *data, size_t data_len)
{
    size_t len = PS__UCX_ADDRS_HDR + ctl_len + data_len;
    if (ctl_len == 0 || ctl_len > PS__UCX_MAX_ADDR || data_len > PS__UCX_MAX_ADDR || len > cap) {
        return 0;
    }
    ps_put_le16(out, (uint16_t)ctl_len);
    ps_put_le16(out + 2, (uint16_t)data_len);
    memcpy(out + PS__UCX_ADDRS_HDR, ctl, ctl_len);
    if (data_len != 0) {
        memcpy(out + PS__UCX_ADDRS_HDR + ctl_len, data, data_len);
    }
    return len;
}

int ps__ucx_addrs_parse(const uint8_t *in, size_t len, const uint8_t **ctl_p, size_t *ctl_len_p,
                        const uint8_t **data_p, size_t *data_len_p)
{
    if (len < PS__UCX_ADDRS_HDR) {
        return 0;
    }
    size_t ctl_len = ps_get_le16(in), data_len = ps_get_le16(in + 2);
    if (ctl_len == 0 || ctl_len > PS__UCX_MAX_ADDR || data_len > PS__UCX_MAX_ADDR ||
        len != PS__UCX_ADDRS_HDR + ctl_len + data_len) {
        return 0;
    }
    *ctl_p = in + PS__UCX_ADDRS_HDR;
    *ctl_len_p = ctl_len;
    *data_p = data_len != 0 ? in + PS__UCX_ADDRS_HDR + ctl_len : NULL;
    *data_len_p = data_len;
    return 1;
}

void ps__ucx_hello_meta(ps_meta_t *meta, int my_id)
{
    ps_meta_init(meta);
    meta->sender = my_id;
    memcpy(meta->van_data, HELLO_TAG, HELLO_TAG_LEN);
    meta->van_data[HELLO_TAG_LEN] = HELLO_VERSION;
    meta->van_data_len = HELLO_LEN;
}

int ps__ucx_looks_like_hello(const ps_meta_t *meta)
{
    return meta->van_data_len >= HELLO_TAG_LEN &&
           memcmp(meta->van_data, HELLO_TAG, HELLO_TAG_LEN) == 0;
}

int ps__ucx_is_hello(const ps_meta_t *meta)
{
    return meta->van_data_len == HELLO_LEN && ps__ucx_looks_like_hello(meta) &&
           meta->van_data[HELLO_TAG_LEN] == HELLO_VERSION && !ps_meta_is_control(meta);
}

void ps__ucx_bye_meta(ps_meta_t *meta, int my_id)
{
    ps__ucx_hello_meta(meta, my_id);
    meta->van_data[HELLO_LEN] = 'B';
    meta->van_data_len = HELLO_LEN + 1;
}

int ps__ucx_is_bye(const ps_meta_t *meta)
{
    return meta->van_data_len == HELLO_LEN + 1 && ps__ucx_looks_like_hello(meta) &&
           meta->van_data[HELLO_TAG_LEN] == HELLO_VERSION && meta->van_data[HELLO_LEN] == 'B' &&
           !ps_meta_is_control(meta);
}

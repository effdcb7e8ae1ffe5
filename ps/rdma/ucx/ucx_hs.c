/*
 * The UCX van's handshake records (ucx_hs.h).
 *
 * HELLO / ACK (and the job-secret steps) are active messages of
 * PS__UCX_HS_LEN bytes:
 *   "PSUX" | version u8 | type u8 | 0 u16 | node id i32 | cookie u32 |
 *   nonce u64 | seq0 u64, little-endian (seq0: the sequence number the
 *   sender expects on the first tagged message to it, ucx_internal.h).
 *
 * A re-announcement of the node id (set_node_id) is a META message without
 * data whose meta carries "PSUCXH" + version in van_data and the id in
 * `sender`; send() refuses messages whose van_data carries that tag, so it
 * cannot be forged through the API.
 */
#include "ps/rdma/ucx/ucx_hs.h"

#include <string.h>

#include "ps/base/endian.h"

#define HS_MAGIC "PSUX"
#define HS_VERSION 2
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

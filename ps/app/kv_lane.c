/*
 * The KV app's small-lane form (kv_lane.h).
 */
#include "ps/app/kv_lane.h"

#include <string.h>

#include "ps/base/endian.h"

enum {
    FLAG_REQUEST = 1u << 0,
    FLAG_PUSH = 1u << 1,
    FLAG_PULL = 1u << 2,
    FLAG_LENS = 1u << 3,
    FLAGS_KNOWN = 0x0fu,
};

size_t ps__kv_lane_size(size_t num_keys, size_t vals_len, int has_lens)
{
    if (num_keys > UINT16_MAX || vals_len > UINT32_MAX)
        return 0;
    return PS__KV_LANE_FIXED + num_keys * 8 + vals_len + (has_lens ? num_keys * 4 : 0);
}

void ps__kv_lane_write(uint8_t *buf, const ps__kv_lane_msg_t *m)
{
    ps_put_le32(buf, (uint32_t)m->timestamp);
    ps_put_le32(buf + 4, (uint32_t)m->cmd);
    ps_put_le32(buf + 8, (uint32_t)m->option);
    ps_put_le32(buf + 12, (uint32_t)m->vals_len);
    ps_put_le64(buf + 16, m->key);
    ps_put_le64(buf + 24, m->addr);
    ps_put_le64(buf + 32, m->val_len);
    buf[40] = (uint8_t)((m->request ? FLAG_REQUEST : 0) | (m->push ? FLAG_PUSH : 0) |
                        (m->pull ? FLAG_PULL : 0) | (m->lens != NULL ? FLAG_LENS : 0));
    buf[41] = (uint8_t)m->type;
    ps_put_le16(buf + 42, (uint16_t)m->num_keys);
    ps_put_le32(buf + 44, 0);
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

ps_status_t ps__kv_lane_read(const uint8_t *buf, size_t len, ps__kv_lane_msg_t *m)
{
    if (len < PS__KV_LANE_FIXED)
        return PS_ERR_PROTOCOL;
    unsigned flags = buf[40];
    size_t nk = ps_get_le16(buf + 42);
    size_t vl = ps_get_le32(buf + 12);
    int has_lens = (flags & FLAG_LENS) != 0;
    if ((flags & ~FLAGS_KNOWN) != 0 || buf[41] >= PS_DATA_TYPE_COUNT ||
        ps_get_le32(buf + 44) != 0 || ps__kv_lane_size(nk, vl, has_lens) != len)
        return PS_ERR_PROTOCOL;
    m->timestamp = (int32_t)ps_get_le32(buf);
    m->cmd = (int32_t)ps_get_le32(buf + 4);
    m->option = (int32_t)ps_get_le32(buf + 8);
    m->key = ps_get_le64(buf + 16);
    m->addr = ps_get_le64(buf + 24);
    m->val_len = ps_get_le64(buf + 32);
    m->request = (flags & FLAG_REQUEST) != 0;
    m->push = (flags & FLAG_PUSH) != 0;
    m->pull = (flags & FLAG_PULL) != 0;
    m->type = (ps_data_type_t)buf[41];
    m->num_keys = nk;
    m->keys = buf + PS__KV_LANE_FIXED;
    m->vals = buf + PS__KV_LANE_FIXED + nk * 8;
    m->vals_len = vl;
    m->lens = has_lens ? buf + PS__KV_LANE_FIXED + nk * 8 + vl : NULL;
    return PS_OK;
}

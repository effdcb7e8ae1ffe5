/*
 * Encoders and decoders of verbs_wire.h. Little-endian byte by byte; every
 * decoder checks lengths first, then magic and version, then ranges.
 */
#include "ps/rdma/verbs/verbs_wire.h"

#include <arpa/inet.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/net/codec/message.h"

#define CONN_MAGIC 0x43565350u /* "PSVC" */
#define MSG_MAGIC 0x4d565350u  /* "PSVM" */
#define PULL_MAGIC 0x50565350u /* "PSVP" */

/* ---- little-endian helpers ---- */

static int valid_node_id(int32_t id)
{
    return id == PS_NODE_EMPTY || (id > 0 && id < PS_NODE_EMPTY);
}

/* ---- private data ----
 *  0 magic u32 | 4 version u16 | 6 flags u16 | 8 node_id i32 | 12 qp_index u8 |
 * 13 qp_count u8 | 14 reserved u16 | 16 nonce u64 | 24 max_inline u32 */

ps_status_t ps__vb_conn_data_encode(const ps__vb_conn_data_t *d, void *buf, size_t cap,
                                    size_t *len_p)
{
    if (d == NULL || buf == NULL || len_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (cap < PS__VB_CONN_DATA_LEN)
        return PS_ERR_TOO_LARGE;
    if (d->qp_count == 0 || d->qp_count > PS__VB_MAX_QP || d->qp_index >= d->qp_count ||
        !valid_node_id(d->node_id))
        return PS_ERR_INVALID_ARG;
    uint8_t *p = buf;
    ps_put_le32(p, CONN_MAGIC);
    ps_put_le16(p + 4, PS__VB_VERSION);
    ps_put_le16(p + 6, d->flags);
    ps_put_le32(p + 8, (uint32_t)d->node_id);
    p[12] = d->qp_index;
    p[13] = d->qp_count;
    ps_put_le16(p + 14, 0);
    ps_put_le64(p + 16, d->nonce);
    ps_put_le32(p + 24, d->max_inline);
    *len_p = PS__VB_CONN_DATA_LEN;
    return PS_OK;
}

ps_status_t ps__vb_conn_data_decode(const void *buf, size_t len, ps__vb_conn_data_t *d_p)
{
    if (d_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (buf == NULL || len < PS__VB_CONN_DATA_LEN)
        return PS_ERR_PROTOCOL;
    const uint8_t *p = buf;
    if (ps_get_le32(p) != CONN_MAGIC || ps_get_le16(p + 4) != PS__VB_VERSION)
        return PS_ERR_PROTOCOL;
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.flags = ps_get_le16(p + 6);
    d.node_id = (int32_t)ps_get_le32(p + 8);
    d.qp_index = p[12];
    d.qp_count = p[13];
    d.nonce = ps_get_le64(p + 16);
    d.max_inline = ps_get_le32(p + 24);
    if (d.qp_count == 0 || d.qp_count > PS__VB_MAX_QP || d.qp_index >= d.qp_count ||
        !valid_node_id(d.node_id))
        return PS_ERR_PROTOCOL;
    *d_p = d;
    return PS_OK;
}

/* ---- immediate data ---- */

uint32_t ps__vb_imm_meta(uint32_t slot)
{
    return htonl(slot);
}

uint32_t ps__vb_imm_slave(void)
{
    return htonl(0);
}

ps__vb_imm_kind_t ps__vb_imm_decode(uint32_t imm_be, uint32_t *slot_p)
{
    uint32_t v = ntohl(imm_be);
    if (v == 0)
        return PS__VB_IMM_SLAVE;
    if (slot_p != NULL)
        *slot_p = v;
    return PS__VB_IMM_META;
}

/* ---- message header ----
 *  0 magic u32 | 4 type u8 | 5 flags u8 | 6 rma_seg u8 | 7 nqp u8 |
 *  8 rma_slot u32 | 12 frame_len u32 | 16 slave[1..nqp-1] u32 each */

size_t ps__vb_hdr_len(const ps__vb_hdr_t *h)
{
    unsigned n = h->nqp > 1 ? h->nqp - 1u : 0u;
    return PS__VB_HDR_FIXED + 4u * n;
}

ps_status_t ps__vb_hdr_encode(const ps__vb_hdr_t *h, void *buf, size_t cap, size_t *len_p)
{
    if (h == NULL || buf == NULL || len_p == NULL)
        return PS_ERR_INVALID_ARG;
    if ((h->type != PS__VB_MSG_EAGER && h->type != PS__VB_MSG_META) || h->nqp == 0 ||
        h->nqp > PS__VB_MAX_QP)
        return PS_ERR_INVALID_ARG;
    size_t need = ps__vb_hdr_len(h);
    if (cap < need)
        return PS_ERR_TOO_LARGE;
    uint8_t *p = buf;
    ps_put_le32(p, MSG_MAGIC);
    p[4] = h->type;
    p[5] = h->flags;
    p[6] = h->rma_seg;
    p[7] = h->nqp;
    ps_put_le32(p + 8, h->rma_slot);
    ps_put_le32(p + 12, h->frame_len);
    for (unsigned k = 1; k < h->nqp; k++)
        ps_put_le32(p + PS__VB_HDR_FIXED + 4 * (k - 1), h->slave[k]);
    *len_p = need;
    return PS_OK;
}

ps_status_t ps__vb_hdr_decode(const void *buf, size_t len, ps__vb_hdr_t *h_p, size_t *len_p)
{
    if (h_p == NULL || len_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (buf == NULL || len < PS__VB_HDR_FIXED)
        return PS_ERR_PROTOCOL;
    const uint8_t *p = buf;
    if (ps_get_le32(p) != MSG_MAGIC)
        return PS_ERR_PROTOCOL;
    ps__vb_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.type = p[4];
    h.flags = p[5];
    h.rma_seg = p[6];
    h.nqp = p[7];
    h.rma_slot = ps_get_le32(p + 8);
    h.frame_len = ps_get_le32(p + 12);
    if ((h.type != PS__VB_MSG_EAGER && h.type != PS__VB_MSG_META) || h.nqp == 0 ||
        h.nqp > PS__VB_MAX_QP ||
        (h.flags & ~(PS__VB_HDR_RMA | PS__VB_HDR_PULL_DONE | PS__VB_HDR_STEER)) != 0)
        return PS_ERR_PROTOCOL;
    if ((h.flags & (PS__VB_HDR_RMA | PS__VB_HDR_PULL_DONE)) && h.rma_slot == 0)
        return PS_ERR_PROTOCOL;
    /* A steered segment is part of a request, never of a pull response. */
    if ((h.flags & PS__VB_HDR_STEER) &&
        (h.type != PS__VB_MSG_META || (h.flags & (PS__VB_HDR_RMA | PS__VB_HDR_PULL_DONE)) ||
         h.rma_slot != 0 || h.rma_seg >= PS__VB_MAX_SEGS))
        return PS_ERR_PROTOCOL;
    size_t need = ps__vb_hdr_len(&h);
    if (len < need)
        return PS_ERR_PROTOCOL;
    for (unsigned k = 1; k < h.nqp; k++)
        h.slave[k] = ps_get_le32(p + PS__VB_HDR_FIXED + 4 * (k - 1));
    *h_p = h;
    *len_p = need;
    return PS_OK;
}

int ps__vb_msg_type(const void *buf, size_t len)
{
    if (buf == NULL || len < 5)
        return 0;
    const uint8_t *p = buf;
    if (ps_get_le32(p) != MSG_MAGIC)
        return 0;
    return p[4];
}

/* ---- control messages ----
 *  0 magic u32 | 4 type u8 | 5 dir u8 | 6 flags u8 | 7 reserved u8 |
 *  8 token u32 | 12 slot u32 | 16 node_id i32 | 20 meta_len u32 |
 * 24 key u64 | 32 data_len u64 | 40 meta_addr u64 | 48 data_addr u64 |
 * 56 meta_rkey u32 | 60 data_rkey u32
 * and with PS__VB_RDV_STEER:
 * 64 app_id i32 | 68 customer_id i32 | 72 is_tensor u8 | 73 num_data u8 |
 * 74 steer_seg u8 | 75 reserved u8 | 76 steer_rkey u32 | 80 seg_len[4] u64 |
 * 112 steer_addr u64 | 120 steer_len u64 */

static int ctrl_type_ok(uint8_t t)
{
    return t == PS__VB_MSG_RDV_START || t == PS__VB_MSG_RDV_GRANT ||
           t == PS__VB_MSG_RDV_DROP || t == PS__VB_MSG_HELLO;
}

ps_status_t ps__vb_ctrl_encode(const ps__vb_ctrl_t *c, void *buf, size_t cap, size_t *len_p)
{
    if (c == NULL || buf == NULL || len_p == NULL || !ctrl_type_ok(c->type))
        return PS_ERR_INVALID_ARG;
    int steer = (c->flags & PS__VB_RDV_STEER) != 0;
    if (steer && c->type != PS__VB_MSG_RDV_START && c->type != PS__VB_MSG_RDV_GRANT)
        return PS_ERR_INVALID_ARG;
    if (cap < (steer ? PS__VB_CTRL_STEER_LEN : PS__VB_CTRL_LEN))
        return PS_ERR_TOO_LARGE;
    uint8_t *p = buf;
    ps_put_le32(p, MSG_MAGIC);
    p[4] = c->type;
    p[5] = c->dir;
    p[6] = c->flags;
    p[7] = 0;
    ps_put_le32(p + 8, c->token);
    ps_put_le32(p + 12, c->slot);
    ps_put_le32(p + 16, (uint32_t)c->node_id);
    ps_put_le32(p + 20, c->meta_len);
    ps_put_le64(p + 24, c->key);
    ps_put_le64(p + 32, c->data_len);
    ps_put_le64(p + 40, c->meta_addr);
    ps_put_le64(p + 48, c->data_addr);
    ps_put_le32(p + 56, c->meta_rkey);
    ps_put_le32(p + 60, c->data_rkey);
    if (!steer) {
        *len_p = PS__VB_CTRL_LEN;
        return PS_OK;
    }
    ps_put_le32(p + 64, (uint32_t)c->app_id);
    ps_put_le32(p + 68, (uint32_t)c->customer_id);
    p[72] = c->is_tensor;
    p[73] = c->num_data;
    p[74] = c->steer_seg;
    p[75] = 0;
    ps_put_le32(p + 76, c->steer_rkey);
    for (unsigned i = 0; i < PS__VB_MAX_SEGS; i++)
        ps_put_le64(p + 80 + 8 * i, c->seg_len[i]);
    ps_put_le64(p + 112, c->steer_addr);
    ps_put_le64(p + 120, c->steer_len);
    *len_p = PS__VB_CTRL_STEER_LEN;
    return PS_OK;
}

/* The steering fields of a START or GRANT at p (PS__VB_CTRL_STEER_LEN
 * bytes), checked: a START's segment lengths add up to its data_len, a
 * GRANT names one non-empty region. */
static ps_status_t steer_decode(const uint8_t *p, ps__vb_ctrl_t *c)
{
    c->app_id = (int32_t)ps_get_le32(p + 64);
    c->customer_id = (int32_t)ps_get_le32(p + 68);
    c->is_tensor = p[72];
    c->num_data = p[73];
    c->steer_seg = p[74];
    c->steer_rkey = ps_get_le32(p + 76);
    for (unsigned i = 0; i < PS__VB_MAX_SEGS; i++)
        c->seg_len[i] = ps_get_le64(p + 80 + 8 * i);
    c->steer_addr = ps_get_le64(p + 112);
    c->steer_len = ps_get_le64(p + 120);
    if (p[75] != 0 || c->is_tensor > 1)
        return PS_ERR_PROTOCOL;
    if (c->type == PS__VB_MSG_RDV_START) {
        if (c->num_data == 0 || c->num_data > PS__VB_MAX_SEGS)
            return PS_ERR_PROTOCOL;
        uint64_t sum = 0;
        for (unsigned i = 0; i < PS__VB_MAX_SEGS; i++) {
            if (i >= c->num_data && c->seg_len[i] != 0)
                return PS_ERR_PROTOCOL;
            if (c->seg_len[i] > UINT64_MAX - sum)
                return PS_ERR_PROTOCOL;
            sum += c->seg_len[i];
        }
        return sum == c->data_len ? PS_OK : PS_ERR_PROTOCOL;
    }
    if (c->type != PS__VB_MSG_RDV_GRANT || (c->flags & PS__VB_RDV_REFUSED) ||
        c->steer_seg >= PS__VB_MAX_SEGS || c->steer_len == 0 || c->steer_addr == 0)
        return PS_ERR_PROTOCOL;
    return PS_OK;
}

ps_status_t ps__vb_ctrl_decode(const void *buf, size_t len, ps__vb_ctrl_t *c_p)
{
    if (c_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (buf == NULL || len < PS__VB_CTRL_LEN)
        return PS_ERR_PROTOCOL;
    const uint8_t *p = buf;
    if (ps_get_le32(p) != MSG_MAGIC || !ctrl_type_ok(p[4]) || p[7] != 0)
        return PS_ERR_PROTOCOL;
    ps__vb_ctrl_t c;
    memset(&c, 0, sizeof(c));
    c.type = p[4];
    c.dir = p[5];
    c.flags = p[6];
    c.token = ps_get_le32(p + 8);
    c.slot = ps_get_le32(p + 12);
    c.node_id = (int32_t)ps_get_le32(p + 16);
    c.meta_len = ps_get_le32(p + 20);
    c.key = ps_get_le64(p + 24);
    c.data_len = ps_get_le64(p + 32);
    c.meta_addr = ps_get_le64(p + 40);
    c.data_addr = ps_get_le64(p + 48);
    c.meta_rkey = ps_get_le32(p + 56);
    c.data_rkey = ps_get_le32(p + 60);
    if (c.dir > 3 || (c.flags & ~(PS__VB_RDV_CACHEABLE | PS__VB_RDV_REGRANT |
                                  PS__VB_RDV_REFUSED | PS__VB_RDV_STEER)) != 0)
        return PS_ERR_PROTOCOL;
    if ((c.flags & PS__VB_RDV_STEER) &&
        (len < PS__VB_CTRL_STEER_LEN || steer_decode(p, &c) != PS_OK))
        return PS_ERR_PROTOCOL;
    switch (c.type) {
    case PS__VB_MSG_RDV_GRANT:
        /* A grant names a slot, a refusal none; a re-grant is never a
         * refusal. */
        if ((c.flags & PS__VB_RDV_REFUSED) ? (c.slot != 0 || (c.flags & PS__VB_RDV_REGRANT))
                                           : c.slot == 0)
            return PS_ERR_PROTOCOL;
        break;
    case PS__VB_MSG_RDV_DROP:
        if (c.slot == 0)
            return PS_ERR_PROTOCOL;
        break;
    case PS__VB_MSG_HELLO:
        if (!valid_node_id(c.node_id) || c.node_id == PS_NODE_EMPTY)
            return PS_ERR_PROTOCOL;
        break;
    default:
        break;
    }
    *c_p = c;
    return PS_OK;
}

/* ---- pull descriptor ----
 *  0 magic u32 | 4 slot u32 | 8 addr u64 | 16 len u64 | 24 rkey u32 |
 * 28 version u16 | 30 reserved u16 */

ps_status_t ps__vb_pull_desc_encode(const ps__vb_pull_desc_t *d, uint8_t *van_data,
                                    size_t cap, uint32_t *len_p)
{
    if (d == NULL || van_data == NULL || len_p == NULL || d->slot == 0)
        return PS_ERR_INVALID_ARG;
    if (cap < PS__VB_PULL_DESC_LEN)
        return PS_ERR_TOO_LARGE;
    ps_put_le32(van_data, PULL_MAGIC);
    ps_put_le32(van_data + 4, d->slot);
    ps_put_le64(van_data + 8, d->addr);
    ps_put_le64(van_data + 16, d->len);
    ps_put_le32(van_data + 24, d->rkey);
    ps_put_le16(van_data + 28, PS__VB_VERSION);
    ps_put_le16(van_data + 30, 0);
    *len_p = PS__VB_PULL_DESC_LEN;
    return PS_OK;
}

ps_status_t ps__vb_pull_desc_decode(const uint8_t *van_data, size_t len,
                                    ps__vb_pull_desc_t *d_p)
{
    if (d_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (van_data == NULL || len < 4 || ps_get_le32(van_data) != PULL_MAGIC)
        return PS_ERR_NOT_FOUND;
    if (len != PS__VB_PULL_DESC_LEN || ps_get_le16(van_data + 28) != PS__VB_VERSION ||
        ps_get_le16(van_data + 30) != 0)
        return PS_ERR_PROTOCOL;
    ps__vb_pull_desc_t d;
    d.slot = ps_get_le32(van_data + 4);
    d.addr = ps_get_le64(van_data + 8);
    d.len = ps_get_le64(van_data + 16);
    d.rkey = ps_get_le32(van_data + 24);
    if (d.slot == 0 || d.len == 0 || d.addr + d.len < d.addr)
        return PS_ERR_PROTOCOL;
    *d_p = d;
    return PS_OK;
}

int ps__vb_eager_data_ok(const ps_slice_t *data, uint32_t num_data, int skip_seg)
{
    for (uint32_t i = 0; i < num_data; i++) {
        if ((int)i != skip_seg && !ps_slice_in_host_mem(&data[i]))
            return 0;
    }
    return 1;
}

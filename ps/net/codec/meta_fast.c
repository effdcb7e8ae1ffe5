/*
 * The fast meta form of meta_fast.h.
 *
 * Every plain data message is encoded and decoded once per hop, so the
 * code is written for few instructions: the "is it plain?" test ORs the
 * fields a plain meta leaves at zero into one word and tests it once, and
 * fields go between the meta and the wire one by one (ps_put_le32 and
 * friends become single moves) with no staging arrays. The test and the
 * writer are in meta_fast_internal.h, shared with frame_encode.c.
 */
#include "ps/net/codec/meta_fast.h"

#include <stddef.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/net/codec/meta_fast_internal.h"

/* The decoder writes every field before `control` itself. */
_Static_assert(offsetof(ps_meta_t, control) > offsetof(ps_meta_t, priority) &&
                   offsetof(ps_meta_t, control) > offsetof(ps_meta_t, val_len) &&
                   offsetof(ps_meta_t, control) > offsetof(ps_meta_t, dst_dev_id),
               "the fast form's fields come before the control part");
_Static_assert(sizeof(bool) == 1 && offsetof(ps_meta_t, push) == offsetof(ps_meta_t, request) + 1 &&
                   offsetof(ps_meta_t, pull) == offsetof(ps_meta_t, request) + 2 &&
                   offsetof(ps_meta_t, simple_app) == offsetof(ps_meta_t, request) + 3 &&
                   PS__MF_REQUEST == 1 && PS__MF_PUSH == 2 && PS__MF_PULL == 4 &&
                   PS__MF_SIMPLE_APP == 8,
               "the flags' bools are four bytes in flag order");

size_t ps_meta_fast_size(const ps_meta_t *m)
{
    return ps__meta_fast_size(m);
}

ps_status_t ps_meta_fast_encode(const ps_meta_t *m, uint8_t *buf, size_t cap, size_t *len_p)
{
    size_t len = ps__meta_fast_size(m);
    if (len == 0) {
        return PS_ERR_UNSUPPORTED;
    }
    if (len > cap) {
        return PS_ERR_TOO_LARGE;
    }
    ps__meta_fast_write(m, buf);
    *len_p = len;
    return PS_OK;
}

ps_status_t ps_meta_fast_decode(const uint8_t *buf, size_t len, ps_meta_t *meta_p)
{
    if (len < PS_META_FAST_FIXED_LEN || buf[0] != 0 || buf[1] != PS_META_FAST_VERSION ||
        (buf[2] & ~PS__MF_FLAGS_KNOWN) != 0 || buf[3] > PS_META_MAX_DATA) {
        return PS_ERR_PROTOCOL;
    }
    uint32_t ntypes = buf[3];
    uint32_t body_len = ps_get_le32(buf + PS__MF_OFF_BODY_LEN);
    uint32_t src_dev_type = ps_get_le32(buf + PS__MF_OFF_SRC_DEV_TYPE);
    uint32_t dst_dev_type = ps_get_le32(buf + PS__MF_OFF_DST_DEV_TYPE);
    if (body_len > PS_META_FAST_BODY_MAX ||
        len != PS_META_FAST_FIXED_LEN + (size_t)ntypes + body_len ||
        src_dev_type >= PS_DEV_TYPE_COUNT || dst_dev_type >= PS_DEV_TYPE_COUNT) {
        return PS_ERR_PROTOCOL;
    }
    const uint8_t *types = buf + PS_META_FAST_FIXED_LEN;
    for (uint32_t i = 0; i < ntypes; ++i) {
        if (types[i] >= PS_DATA_TYPE_COUNT) {
            return PS_ERR_PROTOCOL;
        }
    }

    /* What ps_meta_init() and then setting every field the form carries
     * would give, without clearing those fields first: ps_meta_init()'s
     * non-zero defaults are all among them, so only the data types past
     * ntypes and everything from the control part on are left to zero. */
    ps_meta_t *m = meta_p;
    memset(m->data_types + ntypes, 0, sizeof(m->data_types) - ntypes * sizeof(m->data_types[0]));
    memset(&m->control, 0, sizeof(*m) - offsetof(ps_meta_t, control));
    uint8_t flags = buf[2];
#if PS__MF_HOST_LE
    /* Flag bit i to byte i (the bools request, push, pull, simple_app in
     * that order): the four shifted copies of flags (< 16) do not overlap. */
    uint32_t bools = ((uint32_t)flags * 0x00204081u) & 0x01010101u;
    memcpy(PS__MF_AT(m, request), &bools, sizeof(bools));
#else
    m->request = (flags & PS__MF_REQUEST) != 0;
    m->push = (flags & PS__MF_PUSH) != 0;
    m->pull = (flags & PS__MF_PULL) != 0;
    m->simple_app = (flags & PS__MF_SIMPLE_APP) != 0;
#endif
    const uint8_t *p = buf + PS__MF_OFF_HEAD;
#if PS__MF_HOST_LE
    memcpy(PS__MF_AT(m, head), p, PS__MF_RUN_I32A_LEN);
    memcpy(PS__MF_AT(m, src_dev_type), buf + PS__MF_OFF_SRC_DEV_TYPE, PS__MF_RUN_I32B_LEN);
    memcpy(PS__MF_AT(m, option), buf + PS__MF_OFF_OPTION, PS__MF_RUN_I32C_LEN);
    memcpy(PS__MF_AT(m, data_size), buf + PS__MF_OFF_DATA_SIZE, PS__MF_RUN_U64_LEN);
#else
    m->head = (int32_t)ps_get_le32(p);
    m->app_id = (int32_t)ps_get_le32(p + 4);
    m->customer_id = (int32_t)ps_get_le32(p + 8);
    m->timestamp = (int32_t)ps_get_le32(p + 12);
    m->sender = (int32_t)ps_get_le32(p + 16);
    m->recver = (int32_t)ps_get_le32(p + 20);
    m->src_dev_type = (ps_device_type_t)src_dev_type;
    m->src_dev_id = (int32_t)ps_get_le32(p + 28);
    m->dst_dev_type = (ps_device_type_t)dst_dev_type;
    m->dst_dev_id = (int32_t)ps_get_le32(p + 36);
    m->option = (int32_t)ps_get_le32(p + 40);
    m->sid = (int32_t)ps_get_le32(p + 44);
    m->priority = (int32_t)ps_get_le32(p + 48);
    m->data_size = ps_get_le64(buf + PS__MF_OFF_DATA_SIZE);
    m->key = ps_get_le64(buf + PS__MF_OFF_DATA_SIZE + 8);
    m->addr = ps_get_le64(buf + PS__MF_OFF_DATA_SIZE + 16);
    m->val_len = ps_get_le64(buf + PS__MF_OFF_DATA_SIZE + 24);
#endif
    m->num_data_types = ntypes;
    for (uint32_t i = 0; i < ntypes; ++i) {
        m->data_types[i] = (ps_data_type_t)types[i];
    }
    m->body_len = body_len;
    m->body = body_len != 0 ? types + ntypes : NULL;
    return PS_OK;
}

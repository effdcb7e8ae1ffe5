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

ps_status_t ps_meta_compact_encode(const ps_meta_t *m, uint8_t *buf, size_t cap, size_t *len_p)
{
    size_t fast = ps__meta_compact_size(m);
    if (fast == 0) {
        return PS_ERR_UNSUPPORTED;
    }
    /* Written in place when the longest form fits (with the 8 bytes of
     * room the writer's stores need), else staged. */
    size_t most = fast - PS_META_FAST_FIXED_LEN + PS_META_COMPACT_MAX_FIXED + 8;
    if (most <= cap) {
        *len_p = (size_t)(ps__meta_compact_write(m, buf) - buf);
        return PS_OK;
    }
    uint8_t stage[PS_META_COMPACT_MAX_FIXED + PS_META_MAX_DATA + PS_META_FAST_BODY_MAX + 8];
    size_t len = (size_t)(ps__meta_compact_write(m, stage) - stage);
    if (len > cap) {
        return PS_ERR_TOO_LARGE;
    }
    memcpy(buf, stage, len);
    *len_p = len;
    return PS_OK;
}

/* What ps_meta_fast_decode() writes besides the fields the form carries:
 * ps_meta_init()'s non-zero defaults are all among those, so only the data
 * types past ntypes and everything from the control part on. */
static inline void clear_rest(ps_meta_t *m, uint32_t ntypes)
{
    memset(m->data_types + ntypes, 0, sizeof(m->data_types) - ntypes * sizeof(m->data_types[0]));
    memset(&m->control, 0, sizeof(*m) - offsetof(ps_meta_t, control));
}

/* The flags byte (checked) into the four bools. */
static inline void set_flags(ps_meta_t *m, uint8_t flags)
{
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
}

/* 1 when each of the n data types at `types` (a byte each) is known. */
static inline int types_valid(const uint8_t *types, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        if (types[i] >= PS_DATA_TYPE_COUNT) {
            return 0;
        }
    }
    return 1;
}

/* The data types (checked) and the body behind them, as both forms end. */
static inline void set_tail(ps_meta_t *m, const uint8_t *types, uint32_t ntypes,
                            uint32_t body_len)
{
    m->num_data_types = ntypes;
    for (uint32_t i = 0; i < ntypes; ++i) {
        m->data_types[i] = (ps_data_type_t)types[i];
    }
    m->body_len = body_len;
    m->body = body_len != 0 ? types + ntypes : NULL;
}

/* Reads the varint of a field whose bit is set into var, which must be in
 * 1..max (0 is left out, never sent); returns PS_ERR_PROTOCOL from the
 * caller for anything else. One byte, the usual case, inline (max is at
 * least 127 for every field but the device types). */
/* The largest value a field takes in one byte: below 0x80 and its max. */
#define MC_ONE_BYTE_MAX(max) ((max) < 0x7f ? (unsigned)(max) : 0x7fu)
#define MC_GET(var, max)                                                 \
    do {                                                                 \
        if (p < end && (uint8_t)(*p - 1) < MC_ONE_BYTE_MAX(max)) {        \
            var = *p++;                                                  \
        } else {                                                         \
            int n_ = ps__varint_get(p, (size_t)(end - p), &var);         \
            if (n_ <= 0 || var == 0 || var > (max)) {                    \
                return PS_ERR_PROTOCOL;                                  \
            }                                                            \
            p += n_;                                                     \
        }                                                                \
    } while (0)
#define MC_FIELD(bits, bit, var, max) \
    uint64_t var = 0;                 \
    if ((bits) & (1u << (bit))) {     \
        MC_GET(var, max);             \
    }

/* The compact form (buf[0] 0, buf[1] PS_META_COMPACT_VERSION). */
static ps_status_t decode_compact(const uint8_t *buf, size_t len, ps_meta_t *m)
{
    if (len < PS__MC_OFF_FIELDS || (buf[2] & ~PS__MF_FLAGS_KNOWN) != 0) {
        return PS_ERR_PROTOCOL;
    }
    uint32_t bitmap = ps_get_le16(buf + PS__MC_OFF_BITMAP);
    if ((bitmap & ~PS__MC_BITMAP_KNOWN) != 0) {
        return PS_ERR_PROTOCOL;
    }
    const uint8_t *p = buf + PS__MC_OFF_FIELDS;
    const uint8_t *end = buf + len;
    MC_FIELD(bitmap, 0, timestamp, UINT32_MAX);
    MC_FIELD(bitmap, 1, sender, UINT32_MAX);
    MC_FIELD(bitmap, 2, recver, UINT32_MAX);
    MC_FIELD(bitmap, 3, head, UINT32_MAX);
    MC_FIELD(bitmap, 4, app_id, UINT32_MAX);
    MC_FIELD(bitmap, 5, customer_id, UINT32_MAX);
    MC_FIELD(bitmap, 6, data_size, UINT64_MAX);
    MC_FIELD(bitmap, 7, key, UINT64_MAX);
    MC_FIELD(bitmap, 8, addr, UINT64_MAX);
    MC_FIELD(bitmap, 9, val_len, UINT64_MAX);
    MC_FIELD(bitmap, 10, ntypes, PS_META_MAX_DATA);
    uint64_t body_len = 0, option = 0, sid = 0, priority = 0;
    uint64_t src_type = 0, src_id = 0, dst_type = 0, dst_id = 0;
    if (bitmap & PS__MC_RARE) {
        if (p == end || *p == 0) {
            return PS_ERR_PROTOCOL;
        }
        uint32_t rare = *p++;
        if (rare & 1u) MC_GET(body_len, PS_META_FAST_BODY_MAX);
        if (rare & 2u) MC_GET(option, UINT32_MAX);
        if (rare & 4u) MC_GET(sid, UINT32_MAX);
        if (rare & 8u) MC_GET(priority, UINT32_MAX);
        if (rare & 16u) MC_GET(src_type, PS_DEV_TYPE_COUNT - 1);
        if (rare & 32u) MC_GET(src_id, UINT32_MAX);
        if (rare & 64u) MC_GET(dst_type, PS_DEV_TYPE_COUNT - 1);
        if (rare & 128u) MC_GET(dst_id, UINT32_MAX);
    }
    /* A tensor's block: values that may be 0, each in its shortest form. */
    uint64_t dtype = 0, ndim = 0, shape[PS_META_MAX_SHAPE];
    if (bitmap & PS__MC_TENSOR) {
        int n = ps__varint_get(p, (size_t)(end - p), &dtype);
        if (n <= 0 || dtype > UINT8_MAX || ps__unzigzag32((uint32_t)dtype) < INT8_MIN ||
            ps__unzigzag32((uint32_t)dtype) > INT8_MAX) {
            return PS_ERR_PROTOCOL;
        }
        p += n;
        n = ps__varint_get(p, (size_t)(end - p), &ndim);
        if (n <= 0 || ndim > PS_META_MAX_SHAPE) {
            return PS_ERR_PROTOCOL;
        }
        p += n;
        for (uint64_t i = 0; i < ndim; ++i) {
            n = ps__varint_get(p, (size_t)(end - p), &shape[i]);
            if (n <= 0) {
                return PS_ERR_PROTOCOL;
            }
            p += n;
        }
    }
    if ((size_t)(end - p) != ntypes + body_len || !types_valid(p, (uint32_t)ntypes)) {
        return PS_ERR_PROTOCOL;
    }

    clear_rest(m, (uint32_t)ntypes);
    if (bitmap & PS__MC_TENSOR) {
        m->is_tensor = true;
        m->dtype = (int8_t)ps__unzigzag32((uint32_t)dtype);
        m->ndim = (uint32_t)ndim;
        for (uint64_t i = 0; i < ndim; ++i) {
            m->shape[i] = ps__unzigzag64(shape[i]);
        }
    }
    set_flags(m, buf[2]);
    m->head = ps__unzigzag32((uint32_t)head);
    m->app_id = (int32_t)(uint32_t)app_id;
    m->customer_id = (int32_t)(uint32_t)customer_id;
    m->timestamp = (int32_t)(uint32_t)timestamp;
    m->sender = (int32_t)(uint32_t)sender;
    m->recver = (int32_t)(uint32_t)recver;
    m->src_dev_type = (ps_device_type_t)src_type;
    m->src_dev_id = (int32_t)((uint32_t)ps__unzigzag32((uint32_t)src_id) - 1u);
    m->dst_dev_type = (ps_device_type_t)dst_type;
    m->dst_dev_id = (int32_t)((uint32_t)ps__unzigzag32((uint32_t)dst_id) - 1u);
    m->option = ps__unzigzag32((uint32_t)option);
    m->sid = ps__unzigzag32((uint32_t)sid);
    m->priority = ps__unzigzag32((uint32_t)priority);
    m->data_size = data_size;
    m->key = key;
    m->addr = addr;
    m->val_len = val_len;
    set_tail(m, p, (uint32_t)ntypes, (uint32_t)body_len);
    return PS_OK;
}
#undef MC_FIELD
#undef MC_GET
#undef MC_ONE_BYTE_MAX

ps_status_t ps_meta_fast_decode(const uint8_t *buf, size_t len, ps_meta_t *meta_p)
{
    if (len >= 2 && buf[1] == PS_META_COMPACT_VERSION && buf[0] == 0) {
        return decode_compact(buf, len, meta_p);
    }
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
    if (!types_valid(types, ntypes)) {
        return PS_ERR_PROTOCOL;
    }

    /* What ps_meta_init() and then setting every field the form carries
     * would give, without clearing those fields first (clear_rest). */
    ps_meta_t *m = meta_p;
    clear_rest(m, ntypes);
    set_flags(m, buf[2]);
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
    set_tail(m, types, ntypes, body_len);
    return PS_OK;
}

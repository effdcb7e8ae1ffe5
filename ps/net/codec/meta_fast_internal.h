/*
 * Inside the codec: the fast meta form's "is it plain" test and its writer,
 * inline so that ps_frame_encode_head() (frame_encode.c) puts a frame header
 * and a fast meta into one buffer without a call per piece. meta_fast.c
 * defines the public functions with them.
 */
#ifndef PS_NET_CODEC_META_FAST_INTERNAL_H_
#define PS_NET_CODEC_META_FAST_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/net/codec/message.h"
#include "ps/net/codec/meta_fast.h"
#include "ps/net/codec/varint_internal.h"

#define PS__MF_REQUEST 1u
#define PS__MF_PUSH 2u
#define PS__MF_PULL 4u
#define PS__MF_SIMPLE_APP 8u
#define PS__MF_FLAGS_KNOWN (PS__MF_REQUEST | PS__MF_PUSH | PS__MF_PULL | PS__MF_SIMPLE_APP)

/* Wire offsets (meta_fast.h). */
#define PS__MF_OFF_HEAD 4
#define PS__MF_OFF_SRC_DEV_TYPE (PS__MF_OFF_HEAD + 4 * 6)
#define PS__MF_OFF_DST_DEV_TYPE (PS__MF_OFF_HEAD + 4 * 8)
#define PS__MF_OFF_DATA_SIZE 56
#define PS__MF_OFF_BODY_LEN 88

/* The wire's fields come in four runs that are also runs of ps_meta_t (no
 * padding inside): head..recver, src_dev_type..dst_dev_id, option..priority
 * and data_size..val_len. On a little-endian host each run is one copy. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PS__MF_HOST_LE 1
#else
#define PS__MF_HOST_LE 0
#endif
#define PS__MF_RUN_I32A_LEN (6 * 4)  /* head .. recver */
#define PS__MF_RUN_I32B_LEN (4 * 4)  /* src_dev_type .. dst_dev_id */
#define PS__MF_RUN_I32C_LEN (3 * 4)  /* option .. priority */
#define PS__MF_RUN_U64_LEN (4 * 8)   /* data_size .. val_len */
#define PS__MF_OFF_OPTION (PS__MF_OFF_HEAD + 4 * 10)
_Static_assert(sizeof(ps_device_type_t) == 4, "device types are 32-bit on the wire and here");
_Static_assert(offsetof(ps_meta_t, recver) - offsetof(ps_meta_t, head) == 5 * 4 &&
                   offsetof(ps_meta_t, dst_dev_id) - offsetof(ps_meta_t, src_dev_type) == 3 * 4 &&
                   offsetof(ps_meta_t, priority) - offsetof(ps_meta_t, option) == 2 * 4 &&
                   offsetof(ps_meta_t, val_len) - offsetof(ps_meta_t, data_size) == 3 * 8,
               "the fast form's runs of fields are runs of ps_meta_t");
#define PS__MF_AT(m, field) ((uint8_t *)(m) + offsetof(ps_meta_t, field))
#define PS__MF_AT_CONST(m, field) ((const uint8_t *)(m) + offsetof(ps_meta_t, field))

/* shape, request_trace and response_trace are one run of u64 words with no
 * padding between them, checked for zero as one block. */
#define PS__MF_ZERO_RUN_OFF offsetof(ps_meta_t, shape)
#define PS__MF_ZERO_RUN_END (offsetof(ps_meta_t, response_trace) + sizeof(ps_trace_t))
#define PS__MF_ZERO_RUN_WORDS ((PS__MF_ZERO_RUN_END - PS__MF_ZERO_RUN_OFF) / sizeof(uint64_t))
_Static_assert(offsetof(ps_meta_t, request_trace) ==
                   offsetof(ps_meta_t, shape) + sizeof(((ps_meta_t *)0)->shape),
               "the trace follows the shape");
_Static_assert(offsetof(ps_meta_t, response_trace) ==
                   offsetof(ps_meta_t, request_trace) + sizeof(ps_trace_t),
               "the response trace follows the request trace");
_Static_assert(sizeof(ps_trace_t) % sizeof(uint64_t) == 0 &&
                   PS__MF_ZERO_RUN_OFF % sizeof(uint64_t) == 0,
               "whole aligned words");

/* The OR of the words [off, end) of m; whole words, no early exit. */
static inline uint64_t ps__meta_words_or(const ps_meta_t *m, size_t off, size_t end)
{
    const uint8_t *run = (const uint8_t *)m + off;
    uint64_t acc = 0;
#pragma GCC unroll 32
    for (size_t i = 0; i < (end - off) / sizeof(uint64_t); ++i) {
        uint64_t w;
        memcpy(&w, run + i * sizeof(w), sizeof(w));
        acc |= w;
    }
    return acc;
}

/* 0 when every word of the shape and the traces is 0. */
static inline uint64_t ps__meta_fast_zero_run(const ps_meta_t *m)
{
    return ps__meta_words_or(m, PS__MF_ZERO_RUN_OFF, PS__MF_ZERO_RUN_END);
}

/* The bound of both forms for m, given `other`, the OR of the tensor and
 * trace fields each form checks itself; 0 when m is not plain. */
static inline size_t ps__meta_plain_size(const ps_meta_t *m, uint64_t other)
{
    /* Everything a plain meta leaves at zero, in one word. */
    uint64_t extra = (uint64_t)m->control.cmd | m->control.num_nodes |
                     (uint32_t)m->control.barrier_group | m->control.msg_sig |
                     m->num_slave_qp_counters | m->slave_qp_num | m->van_data_len | other;
    uint32_t ntypes = m->num_data_types;
    size_t body_len = m->body_len;
    if (extra != 0 || ntypes > PS_META_MAX_DATA || body_len > PS_META_FAST_BODY_MAX ||
        (body_len != 0 && m->body == NULL) ||
        (unsigned)m->src_dev_type >= PS_DEV_TYPE_COUNT ||
        (unsigned)m->dst_dev_type >= PS_DEV_TYPE_COUNT) {
        return 0;
    }
    for (uint32_t i = 0; i < ntypes; ++i) {
        if ((unsigned)m->data_types[i] >= PS_DATA_TYPE_COUNT) {
            return 0;
        }
    }
    return PS_META_FAST_FIXED_LEN + ntypes + body_len;
}

/* ps_meta_fast_size(), inline for the encoders: no tensor, no trace. */
static inline size_t ps__meta_fast_size(const ps_meta_t *m)
{
    return ps__meta_plain_size(m, (uint64_t)m->is_tensor | (uint8_t)m->dtype | m->ndim |
                                      ps__meta_fast_zero_run(m));
}

/* The flags byte of both versions. */
static inline uint8_t ps__meta_fast_flags(const ps_meta_t *m)
{
    return (uint8_t)((m->request ? PS__MF_REQUEST : 0) | (m->push ? PS__MF_PUSH : 0) |
                     (m->pull ? PS__MF_PULL : 0) | (m->simple_app ? PS__MF_SIMPLE_APP : 0));
}

/* The compact form's bitmap (meta_fast.h). */
#define PS__MC_OFF_BITMAP 3
#define PS__MC_OFF_FIELDS 5
#define PS__MC_RARE 0x0800u
#define PS__MC_TENSOR 0x1000u
#define PS__MC_BITMAP_KNOWN 0x1fffu

/* ps__meta_fast_size() for the compact form, which also carries tensor
 * metas (is_tensor set, at most PS_META_MAX_SHAPE dimensions, nothing set
 * past them) but no traces: the same bound, or 0. */
static inline size_t ps__meta_compact_size(const ps_meta_t *m)
{
    if (!m->is_tensor) {
        return ps__meta_fast_size(m);
    }
    if (m->ndim > PS_META_MAX_SHAPE) {
        return 0;
    }
    /* The shape past ndim and the traces must be 0. */
    uint64_t past = ps__meta_words_or(m, offsetof(ps_meta_t, shape) + m->ndim * sizeof(m->shape[0]),
                                      PS__MF_ZERO_RUN_END);
    return ps__meta_plain_size(m, past);
}

/* Both forms end the same way: the data types, a byte each, then the
 * body. Writes them at p; returns the byte after. */
static inline uint8_t *ps__meta_tail_write(const ps_meta_t *m, uint8_t *p)
{
    uint32_t ntypes = m->num_data_types;
    for (uint32_t i = 0; i < ntypes; ++i) {
        p[i] = (uint8_t)m->data_types[i];
    }
    p += ntypes;
    if (m->body_len != 0) {
        memcpy(p, m->body, m->body_len);
        p += m->body_len;
    }
    return p;
}

/* A device id on the compact wire: -1 (the default) is 0. */
static inline uint32_t ps__mc_dev_id(int32_t id)
{
    return ps__zigzag32((int32_t)((uint32_t)id + 1u));
}

/* Writes the compact form of m, which must be plain (ps__meta_compact_size()
 * not 0), into buf, which must hold PS_META_COMPACT_MAX_FIXED +
 * num_data_types + body_len + 8 bytes (the varints are written with 8-byte
 * stores); returns the byte after it. One pass:
 * each field is written when not at its default, and its bit set. */
static inline uint8_t *ps__meta_compact_write(const ps_meta_t *m, uint8_t *buf)
{
    uint32_t bitmap = 0;
    uint8_t *p = buf + PS__MC_OFF_FIELDS;
#define PS__MC_PUT(bit, value)                     \
    do {                                           \
        uint64_t x_ = (value);                     \
        if (x_ != 0) {                             \
            bitmap |= 1u << (bit);                 \
            p = ps__varint_put_fast(p, x_);        \
        }                                          \
    } while (0)
    PS__MC_PUT(0, (uint32_t)m->timestamp);
    PS__MC_PUT(1, (uint32_t)m->sender);
    PS__MC_PUT(2, (uint32_t)m->recver);
    PS__MC_PUT(3, ps__zigzag32(m->head));
    PS__MC_PUT(4, (uint32_t)m->app_id);
    PS__MC_PUT(5, (uint32_t)m->customer_id);
    PS__MC_PUT(6, m->data_size);
    PS__MC_PUT(7, m->key);
    PS__MC_PUT(8, m->addr);
    PS__MC_PUT(9, m->val_len);
    PS__MC_PUT(10, m->num_data_types);
    /* The rare fields, tested at once (device ids -1 is their default). */
    if ((m->body_len | (uint32_t)m->option | (uint32_t)m->sid | (uint32_t)m->priority |
         (uint32_t)m->src_dev_type | (uint32_t)m->dst_dev_type |
         ((uint32_t)m->src_dev_id + 1u) | ((uint32_t)m->dst_dev_id + 1u)) != 0) {
        uint8_t *rare = p++;
        uint32_t outer = bitmap;
        bitmap = 0;
        PS__MC_PUT(0, m->body_len);
        PS__MC_PUT(1, ps__zigzag32(m->option));
        PS__MC_PUT(2, ps__zigzag32(m->sid));
        PS__MC_PUT(3, ps__zigzag32(m->priority));
        PS__MC_PUT(4, (uint32_t)m->src_dev_type);
        PS__MC_PUT(5, ps__mc_dev_id(m->src_dev_id));
        PS__MC_PUT(6, (uint32_t)m->dst_dev_type);
        PS__MC_PUT(7, ps__mc_dev_id(m->dst_dev_id));
        *rare = (uint8_t)bitmap;
        bitmap = outer | PS__MC_RARE;
    }
    if (m->is_tensor) {
        bitmap |= PS__MC_TENSOR;
        p = ps__varint_put_fast(p, ps__zigzag32(m->dtype));
        p = ps__varint_put_fast(p, m->ndim);
        for (uint32_t i = 0; i < m->ndim; ++i) {
            p = ps__varint_put_fast(p, ps__zigzag64(m->shape[i]));
        }
    }
#undef PS__MC_PUT
    buf[0] = 0;
    buf[1] = PS_META_COMPACT_VERSION;
    buf[2] = ps__meta_fast_flags(m);
    ps_put_le16(buf + PS__MC_OFF_BITMAP, (uint16_t)bitmap);
    return ps__meta_tail_write(m, p);
}

/* Writes the fast form of m, which must be plain (ps__meta_fast_size() not
 * 0), into buf, which must hold ps__meta_fast_size() bytes. */
static inline void ps__meta_fast_write(const ps_meta_t *m, uint8_t *buf)
{
    uint32_t ntypes = m->num_data_types;
    buf[0] = 0;
    buf[1] = PS_META_FAST_VERSION;
    buf[2] = ps__meta_fast_flags(m);
    buf[3] = (uint8_t)ntypes;
    uint8_t *p = buf + PS__MF_OFF_HEAD;
#if PS__MF_HOST_LE
    memcpy(p, PS__MF_AT_CONST(m, head), PS__MF_RUN_I32A_LEN);
    memcpy(buf + PS__MF_OFF_SRC_DEV_TYPE, PS__MF_AT_CONST(m, src_dev_type), PS__MF_RUN_I32B_LEN);
    memcpy(buf + PS__MF_OFF_OPTION, PS__MF_AT_CONST(m, option), PS__MF_RUN_I32C_LEN);
    memcpy(buf + PS__MF_OFF_DATA_SIZE, PS__MF_AT_CONST(m, data_size), PS__MF_RUN_U64_LEN);
#else
    ps_put_le32(p, (uint32_t)m->head);
    ps_put_le32(p + 4, (uint32_t)m->app_id);
    ps_put_le32(p + 8, (uint32_t)m->customer_id);
    ps_put_le32(p + 12, (uint32_t)m->timestamp);
    ps_put_le32(p + 16, (uint32_t)m->sender);
    ps_put_le32(p + 20, (uint32_t)m->recver);
    ps_put_le32(p + 24, (uint32_t)m->src_dev_type);
    ps_put_le32(p + 28, (uint32_t)m->src_dev_id);
    ps_put_le32(p + 32, (uint32_t)m->dst_dev_type);
    ps_put_le32(p + 36, (uint32_t)m->dst_dev_id);
    ps_put_le32(p + 40, (uint32_t)m->option);
    ps_put_le32(p + 44, (uint32_t)m->sid);
    ps_put_le32(p + 48, (uint32_t)m->priority);
    ps_put_le64(buf + PS__MF_OFF_DATA_SIZE, m->data_size);
    ps_put_le64(buf + PS__MF_OFF_DATA_SIZE + 8, m->key);
    ps_put_le64(buf + PS__MF_OFF_DATA_SIZE + 16, m->addr);
    ps_put_le64(buf + PS__MF_OFF_DATA_SIZE + 24, m->val_len);
#endif
    ps_put_le32(buf + PS__MF_OFF_BODY_LEN, (uint32_t)m->body_len);
    (void)ps__meta_tail_write(m, buf + PS_META_FAST_FIXED_LEN);
}

#endif /* PS_NET_CODEC_META_FAST_INTERNAL_H_ */

/*
 * The AF tensor type's helpers and the AF wire form (af_wire.h).
 */
#include "ps/app/af_wire.h"

#include <string.h>

#include "ps/base/endian.h"

/* A tensor's shape travels in the meta's shape array. */
_Static_assert(PS_AF_MAX_DIMS == PS_META_MAX_SHAPE, "AF dims and the meta's shape differ");

size_t ps_af_dtype_size(int dtype)
{
    switch (dtype) {
    case PS_AF_UINT8:
    case PS_AF_INT8:
        return 1;
    case PS_AF_INT16:
    case PS_AF_FLOAT16:
    case PS_AF_BFLOAT16:
        return 2;
    case PS_AF_INT32:
    case PS_AF_FLOAT32:
        return 4;
    case PS_AF_INT64:
    case PS_AF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *ps_af_dtype_str(int dtype)
{
    switch (dtype) {
    case PS_AF_UINT8:
        return "uint8";
    case PS_AF_INT8:
        return "int8";
    case PS_AF_INT16:
        return "int16";
    case PS_AF_INT32:
        return "int32";
    case PS_AF_INT64:
        return "int64";
    case PS_AF_FLOAT16:
        return "float16";
    case PS_AF_FLOAT32:
        return "float32";
    case PS_AF_FLOAT64:
        return "float64";
    case PS_AF_BFLOAT16:
        return "bfloat16";
    default:
        return "unknown";
    }
}

void ps_af_tensor_init(ps_af_tensor_t *t, uint64_t key, void *data, int dtype, uint32_t ndim,
                       const int64_t *shape)
{
    memset(t, 0, sizeof(*t));
    t->key = key;
    t->data = data;
    t->mem_kind = PS_MEM_HOST;
    t->dtype = dtype;
    t->ndim = ndim;
    for (uint32_t i = 0; i < ndim && i < PS_AF_MAX_DIMS; i++)
        t->shape[i] = shape[i];
}

static ps_status_t shape_bytes(int dtype, uint32_t ndim, const int64_t *shape, uint64_t *bytes_p)
{
    uint64_t n = ps_af_dtype_size(dtype);
    if (n == 0 || ndim > PS_AF_MAX_DIMS)
        return PS_ERR_INVALID_ARG;
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return PS_ERR_INVALID_ARG;
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > UINT64_MAX / d)
            return PS_ERR_INVALID_ARG;
        n *= d;
    }
    *bytes_p = n;
    return PS_OK;
}

ps_status_t ps_af_tensor_bytes(const ps_af_tensor_t *t, uint64_t *bytes_p)
{
    if (!t || !bytes_p)
        return PS_ERR_INVALID_ARG;
    return shape_bytes(t->dtype, t->ndim, t->shape, bytes_p);
}

void ps__af_hdr_write(uint8_t out[PS__AF_HDR_LEN], const ps__af_hdr_t *h)
{
    ps_put_le32(out, PS__AF_MAGIC);
    ps_put_le32(out + 4, h->index);
    ps_put_le32(out + 8, h->count);
    ps_put_le32(out + 12, h->num_push);
    ps_put_le64(out + 16, h->seq);
}

ps_status_t ps__af_hdr_read(const uint8_t *body, size_t len, ps__af_hdr_t *h_p)
{
    if (!body || len != PS__AF_HDR_LEN || ps_get_le32(body) != PS__AF_MAGIC)
        return PS_ERR_PROTOCOL;
    ps__af_hdr_t h = {
        .index = ps_get_le32(body + 4),
        .count = ps_get_le32(body + 8),
        .num_push = ps_get_le32(body + 12),
        .seq = ps_get_le64(body + 16),
    };
    if (h.count == 0 || h.count > PS__AF_MAX_BATCH_MSGS || h.index >= h.count ||
        h.num_push > h.count)
        return PS_ERR_PROTOCOL;
    *h_p = h;
    return PS_OK;
}

int ps__af_flag(uint32_t index, uint32_t count)
{
    if (count <= 1)
        return PS_AF_FLAG_SINGLE;
    if (index == 0)
        return PS_AF_FLAG_BATCH_START;
    return index + 1 == count ? PS_AF_FLAG_BATCH_END : PS_AF_FLAG_BATCH_MIDDLE;
}

void ps__af_meta_set_tensor(ps_meta_t *meta, const ps_af_tensor_t *t)
{
    meta->is_tensor = true;
    meta->key = t->key;
    meta->dtype = (int8_t)t->dtype;
    meta->ndim = t->ndim;
    for (uint32_t i = 0; i < t->ndim && i < PS_AF_MAX_DIMS; i++)
        meta->shape[i] = t->shape[i];
}

ps_status_t ps__af_meta_get_tensor(const ps_meta_t *meta, ps_af_tensor_t *t, uint64_t *bytes_p)
{
    if (!meta->is_tensor || meta->ndim > PS_AF_MAX_DIMS)
        return PS_ERR_PROTOCOL;
    uint64_t bytes;
    if (shape_bytes(meta->dtype, meta->ndim, meta->shape, &bytes) != PS_OK)
        return PS_ERR_PROTOCOL;
    ps_af_tensor_init(t, meta->key, NULL, meta->dtype, meta->ndim, meta->shape);
    *bytes_p = bytes;
    return PS_OK;
}

/*
 * Element-wise summation of values by data type, and the 16-bit float
 * conversions it needs (IEEE binary16 and bfloat16).
 *
 * Integers wrap modulo 2^bits (two's complement for the signed types), so a
 * sum never has undefined behaviour whatever the workers push. FLOAT16 and
 * BFLOAT16 are summed in float and rounded back to nearest, ties to even;
 * float carries enough bits (24 >= 2*11+2) that this equals rounding the
 * exact sum once.
 */
#ifndef PS_APP_KV_SUM_H_
#define PS_APP_KV_SUM_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

float ps_half_to_float(uint16_t h);
/* Round to nearest, ties to even; overflow gives infinity, NaN stays NaN
 * (quiet, sign kept). */
uint16_t ps_float_to_half(float f);

float ps_bf16_to_float(uint16_t b);
uint16_t ps_float_to_bf16(float f);

/* 1 if values of `type` are summed, 0 if a push replaces them (CHAR,
 * OTHER, unknown types). */
int ps_kv_type_summable(ps_data_type_t type);

/* dst[i] += src[i] for the `bytes / size(type)` elements of `type`. Either
 * pointer may be unaligned. PS_ERR_INVALID_ARG for a type that is not
 * summable or bytes not a multiple of the element size. */
ps_status_t ps_kv_sum(ps_data_type_t type, void *dst, const void *src, size_t bytes);

/* dst[i] = a[i] + b[i]: the same sum out of place (one pass instead of a
 * copy and a sum). dst may be a or b (then it is ps_kv_sum) but must not
 * overlap them otherwise. */
ps_status_t ps_kv_sum3(ps_data_type_t type, void *dst, const void *a, const void *b,
                       size_t bytes);

/* The kernels come in levels; ps_kv_sum / ps_kv_sum3 use the best one the
 * CPU has (checked once at run time). Every level gives the same bits for
 * every input except NaN payloads (a NaN stays a NaN). The levels are
 * public so that tests compare them and benchmarks time them. */
typedef enum {
    PS_KV_SUM_SCALAR = 0, /* one element at a time: the reference */
    PS_KV_SUM_VEC128 = 1, /* 16-byte vectors (SSE2 on x86-64; FLOAT16 stays scalar) */
    PS_KV_SUM_AVX2 = 2,   /* 32-byte AVX2 vectors, FLOAT16 through F16C (x86-64 only) */
} ps_kv_sum_level_t;
#define PS_KV_SUM_LEVEL_COUNT 3

/* The level ps_kv_sum uses. */
ps_kv_sum_level_t ps_kv_sum_level(void);
/* 1 if this CPU (and build) can run `level`. */
int ps_kv_sum_level_supported(ps_kv_sum_level_t level);
/* "scalar", "vec128", "avx2"; "unknown" otherwise. */
const char *ps_kv_sum_level_name(ps_kv_sum_level_t level);
/* ps_kv_sum3 at a given level; PS_ERR_UNSUPPORTED when the CPU lacks it. */
ps_status_t ps_kv_sum3_at(ps_kv_sum_level_t level, ps_data_type_t type, void *dst,
                          const void *a, const void *b, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_SUM_H_ */

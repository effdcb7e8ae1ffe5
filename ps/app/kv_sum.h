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

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_SUM_H_ */

#include "ps/app/kv_sum.h"

#include <string.h>

static inline uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float ps_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0) {
        /* Zero or subnormal: mant * 2^-24, exact in float. */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 0x1f) /* infinity, or NaN with its payload kept */
        return bits_float(sign | 0x7f800000u | (mant << 13));
    return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t ps_float_to_half(float f)
{
    uint32_t bits = float_bits(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    int32_t exp = (int32_t)((bits >> 23) & 0xffu);
    uint32_t mant = bits & 0x7fffffu;

    if (exp == 0xff) {
        if (mant) /* NaN: quiet, top payload bits kept */
            return (uint16_t)(sign | 0x7e00u | (mant >> 13));
        return (uint16_t)(sign | 0x7c00u);
    }

    int32_t e = exp - 127 + 15; /* biased half exponent */
    if (e >= 0x1f)              /* >= 2^16: beyond even the rounding range */
        return (uint16_t)(sign | 0x7c00u);

    if (e <= 0) {
        /* Subnormal half (or zero): hm = round(1.mant * 2^(exp-127) / 2^-24). */
        uint32_t shift = (uint32_t)(126 - exp); /* >= 14 here */
        if (shift >= 25)                        /* below half the smallest subnormal */
            return sign;
        uint32_t m = mant | 0x800000u;
        uint32_t hm = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (hm & 1u)))
            hm++; /* may carry into the smallest normal: still right */
        return (uint16_t)(sign | hm);
    }

    uint32_t hm = mant >> 13;
    uint32_t rem = mant & 0x1fffu;
    uint32_t h = ((uint32_t)e << 10) | hm;
    if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u)))
        h++; /* a carry into the exponent is right, up to infinity */
    return (uint16_t)(sign | h);
}

float ps_bf16_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

uint16_t ps_float_to_bf16(float f)
{
    uint32_t bits = float_bits(f);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu))
        return (uint16_t)((bits >> 16) | 0x40u); /* quiet NaN */
    /* Round to nearest even: add 0x7fff plus the lowest kept bit; overflow
     * carries into infinity as it should. */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

int ps_kv_type_summable(ps_data_type_t type)
{
    switch (type) {
    case PS_DATA_INT8:
    case PS_DATA_INT16:
    case PS_DATA_INT32:
    case PS_DATA_INT64:
    case PS_DATA_UINT8:
    case PS_DATA_UINT16:
    case PS_DATA_UINT32:
    case PS_DATA_UINT64:
    case PS_DATA_FLOAT:
    case PS_DATA_DOUBLE:
    case PS_DATA_FLOAT16:
    case PS_DATA_BFLOAT16:
        return 1;
    default:
        return 0;
    }
}

/* Integer sums go through the unsigned type of the same width: wrapping is
 * defined there, and the bit pattern is the two's-complement sum. memcpy
 * loads and stores allow any alignment and compile to plain moves. */
#define SUM_UNSIGNED(_t)                                           \
    do {                                                           \
        unsigned char *d = dst;                                    \
        const unsigned char *s = src;                              \
        for (size_t i = 0; i < n; i++) {                           \
            _t a, b;                                               \
            memcpy(&a, d + i * sizeof(_t), sizeof(_t));            \
            memcpy(&b, s + i * sizeof(_t), sizeof(_t));            \
            a = (_t)(a + b);                                       \
            memcpy(d + i * sizeof(_t), &a, sizeof(_t));            \
        }                                                          \
    } while (0)

#define SUM_FP(_t)                                                 \
    do {                                                           \
        unsigned char *d = dst;                                    \
        const unsigned char *s = src;                              \
        for (size_t i = 0; i < n; i++) {                           \
            _t a, b;                                               \
            memcpy(&a, d + i * sizeof(_t), sizeof(_t));            \
            memcpy(&b, s + i * sizeof(_t), sizeof(_t));            \
            a = a + b;                                             \
            memcpy(d + i * sizeof(_t), &a, sizeof(_t));            \
        }                                                          \
    } while (0)

#define SUM_HALF(_to_float, _from_float)                           \
    do {                                                           \
        unsigned char *d = dst;                                    \
        const unsigned char *s = src;                              \
        for (size_t i = 0; i < n; i++) {                           \
            uint16_t a, b;                                         \
            memcpy(&a, d + i * 2, 2);                              \
            memcpy(&b, s + i * 2, 2);                              \
            a = _from_float(_to_float(a) + _to_float(b));          \
            memcpy(d + i * 2, &a, 2);                              \
        }                                                          \
    } while (0)

ps_status_t ps_kv_sum(ps_data_type_t type, void *dst, const void *src, size_t bytes)
{
    size_t es = ps_data_type_size(type);
    if (!ps_kv_type_summable(type) || es == 0 || bytes % es != 0)
        return PS_ERR_INVALID_ARG;
    size_t n = bytes / es;
    if (n == 0)
        return PS_OK;

    switch (type) {
    case PS_DATA_INT8:
    case PS_DATA_UINT8:
        SUM_UNSIGNED(uint8_t);
        break;
    case PS_DATA_INT16:
    case PS_DATA_UINT16:
        SUM_UNSIGNED(uint16_t);
        break;
    case PS_DATA_INT32:
    case PS_DATA_UINT32:
        SUM_UNSIGNED(uint32_t);
        break;
    case PS_DATA_INT64:
    case PS_DATA_UINT64:
        SUM_UNSIGNED(uint64_t);
        break;
    case PS_DATA_FLOAT:
        SUM_FP(float);
        break;
    case PS_DATA_DOUBLE:
        SUM_FP(double);
        break;
    case PS_DATA_FLOAT16:
        SUM_HALF(ps_half_to_float, ps_float_to_half);
        break;
    case PS_DATA_BFLOAT16:
        SUM_HALF(ps_bf16_to_float, ps_float_to_bf16);
        break;
    default:
        return PS_ERR_INVALID_ARG;
    }
    return PS_OK;
}

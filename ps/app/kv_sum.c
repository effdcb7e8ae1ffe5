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

/* ---- kernels ----
 *
 * One kernel per element class: dst[i] = a[i] + b[i] over n elements, dst
 * equal to a or b allowed (every element is loaded before it is stored).
 * Integer sums go through the unsigned type of the same width: wrapping is
 * defined there, and the bit pattern is the two's-complement sum. memcpy
 * loads and stores allow any alignment and compile to plain (vector) moves.
 *
 * The vector levels use GCC/Clang vector extensions (the same source for
 * 16- and 32-byte vectors; the AVX2 copies are compiled for that target and
 * chosen at run time) and F16C for FLOAT16, so they vectorise whatever the
 * optimisation level, and give the scalar kernels' bits: the float
 * operations are the same IEEE operations, element by element.
 */

typedef void (*sum_kernel_t)(void *dst, const void *a, const void *b, size_t n);

enum { K_U8, K_U16, K_U32, K_U64, K_F32, K_F64, K_F16, K_BF16, K_COUNT };

#define SCALAR_SUM(_name, _t)                                                \
    static void _name(void *dst, const void *a, const void *b, size_t n)    \
    {                                                                        \
        unsigned char *d = dst;                                              \
        const unsigned char *x = a, *y = b;                                  \
        for (size_t i = 0; i < n; i++) {                                     \
            _t p, q;                                                         \
            memcpy(&p, x + i * sizeof(_t), sizeof(_t));                      \
            memcpy(&q, y + i * sizeof(_t), sizeof(_t));                      \
            p = (_t)(p + q);                                                 \
            memcpy(d + i * sizeof(_t), &p, sizeof(_t));                      \
        }                                                                    \
    }

#define SCALAR_HALF(_name, _to_float, _from_float)                           \
    static void _name(void *dst, const void *a, const void *b, size_t n)    \
    {                                                                        \
        unsigned char *d = dst;                                              \
        const unsigned char *x = a, *y = b;                                  \
        for (size_t i = 0; i < n; i++) {                                     \
            uint16_t p, q;                                                   \
            memcpy(&p, x + i * 2, 2);                                        \
            memcpy(&q, y + i * 2, 2);                                        \
            p = _from_float(_to_float(p) + _to_float(q));                    \
            memcpy(d + i * 2, &p, 2);                                        \
        }                                                                    \
    }

SCALAR_SUM(sum_u8_scalar, uint8_t)
SCALAR_SUM(sum_u16_scalar, uint16_t)
SCALAR_SUM(sum_u32_scalar, uint32_t)
SCALAR_SUM(sum_u64_scalar, uint64_t)
SCALAR_SUM(sum_f32_scalar, float)
SCALAR_SUM(sum_f64_scalar, double)
SCALAR_HALF(sum_f16_scalar, ps_half_to_float, ps_float_to_half)
SCALAR_HALF(sum_bf16_scalar, ps_bf16_to_float, ps_float_to_bf16)

#define VLOAD(_v, _p) __builtin_memcpy(&(_v), (_p), sizeof(_v))
#define VSTORE(_p, _v) __builtin_memcpy((_p), &(_v), sizeof(_v))

/* Four vectors per step (loads first, so dst may be a or b), then one
 * vector per step, then the scalar kernel for the tail. */
#define VECTOR_SUM(_name, _attr, _t, _vt, _tail)                             \
    _attr static void _name(void *dst, const void *a, const void *b, size_t n) \
    {                                                                        \
        unsigned char *d = dst;                                              \
        const unsigned char *x = a, *y = b;                                  \
        const size_t vb = sizeof(_vt);                                       \
        const size_t bytes = n * sizeof(_t);                                 \
        size_t i = 0;                                                        \
        for (; i + 4 * vb <= bytes; i += 4 * vb) {                           \
            _vt a0, a1, a2, a3, b0, b1, b2, b3;                              \
            VLOAD(a0, x + i);                                                \
            VLOAD(a1, x + i + vb);                                           \
            VLOAD(a2, x + i + 2 * vb);                                       \
            VLOAD(a3, x + i + 3 * vb);                                       \
            VLOAD(b0, y + i);                                                \
            VLOAD(b1, y + i + vb);                                           \
            VLOAD(b2, y + i + 2 * vb);                                       \
            VLOAD(b3, y + i + 3 * vb);                                       \
            a0 += b0;                                                        \
            a1 += b1;                                                        \
            a2 += b2;                                                        \
            a3 += b3;                                                        \
            VSTORE(d + i, a0);                                               \
            VSTORE(d + i + vb, a1);                                          \
            VSTORE(d + i + 2 * vb, a2);                                      \
            VSTORE(d + i + 3 * vb, a3);                                      \
        }                                                                    \
        for (; i + vb <= bytes; i += vb) {                                   \
            _vt p, q;                                                        \
            VLOAD(p, x + i);                                                 \
            VLOAD(q, y + i);                                                 \
            p += q;                                                          \
            VSTORE(d + i, p);                                                \
        }                                                                    \
        if (i < bytes)                                                       \
            _tail(d + i, x + i, y + i, (bytes - i) / sizeof(_t));            \
    }

/* BFLOAT16: widen to float (a shift), add, round to nearest even as
 * ps_float_to_bf16 does, with the same quiet-NaN rule, narrow. The NaN test
 * is on the bits ((u & 0x7fffffff) > 0x7f800000, a signed compare of
 * non-negative values), which every vector ISA has. */
#define VECTOR_BF16(_name, _attr, _u16v, _u32v, _i32v, _f32v)               \
    _attr static void _name(void *dst, const void *a, const void *b, size_t n) \
    {                                                                        \
        unsigned char *d = dst;                                              \
        const unsigned char *x = a, *y = b;                                  \
        const size_t per = sizeof(_u16v) / 2;                                \
        size_t i = 0;                                                        \
        for (; i + per <= n; i += per) {                                     \
            _u16v ha, hb;                                                    \
            VLOAD(ha, x + 2 * i);                                            \
            VLOAD(hb, y + 2 * i);                                            \
            _u32v wa = __builtin_convertvector(ha, _u32v) << 16;             \
            _u32v wb = __builtin_convertvector(hb, _u32v) << 16;             \
            _f32v s = (_f32v)wa + (_f32v)wb;                                 \
            _u32v u = (_u32v)s;                                              \
            _u32v nan = (_u32v)((_i32v)(u & 0x7fffffffu) > 0x7f800000);      \
            _u32v r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                \
            _u32v q = (u >> 16) | 0x40u;                                     \
            r = (r & ~nan) | (q & nan);                                      \
            _u16v out = __builtin_convertvector(r, _u16v);                   \
            VSTORE(d + 2 * i, out);                                          \
        }                                                                    \
        if (i < n)                                                           \
            sum_bf16_scalar(d + 2 * i, x + 2 * i, y + 2 * i, n - i);         \
    }

typedef uint8_t u8x16_t __attribute__((vector_size(16)));
typedef uint16_t u16x8_t __attribute__((vector_size(16)));
typedef uint32_t u32x4_t __attribute__((vector_size(16)));
typedef uint64_t u64x2_t __attribute__((vector_size(16)));
typedef float f32x4_t __attribute__((vector_size(16)));
typedef double f64x2_t __attribute__((vector_size(16)));
typedef uint16_t u16x4_t __attribute__((vector_size(8)));
typedef int32_t i32x4_t __attribute__((vector_size(16)));

#define NO_ATTR
VECTOR_SUM(sum_u8_v128, NO_ATTR, uint8_t, u8x16_t, sum_u8_scalar)
VECTOR_SUM(sum_u16_v128, NO_ATTR, uint16_t, u16x8_t, sum_u16_scalar)
VECTOR_SUM(sum_u32_v128, NO_ATTR, uint32_t, u32x4_t, sum_u32_scalar)
VECTOR_SUM(sum_u64_v128, NO_ATTR, uint64_t, u64x2_t, sum_u64_scalar)
VECTOR_SUM(sum_f32_v128, NO_ATTR, float, f32x4_t, sum_f32_scalar)
VECTOR_SUM(sum_f64_v128, NO_ATTR, double, f64x2_t, sum_f64_scalar)
#if !defined(__x86_64__)
VECTOR_BF16(sum_bf16_v128, NO_ATTR, u16x4_t, u32x4_t, i32x4_t, f32x4_t)
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_KERNELS 1
#include <cpuid.h>
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))

typedef uint8_t u8x32_t __attribute__((vector_size(32)));
typedef uint16_t u16x16_t __attribute__((vector_size(32)));
typedef uint32_t u32x8_t __attribute__((vector_size(32)));
typedef int32_t i32x8_t __attribute__((vector_size(32)));
typedef uint64_t u64x4_t __attribute__((vector_size(32)));
typedef float f32x8_t __attribute__((vector_size(32)));
typedef double f64x4_t __attribute__((vector_size(32)));

VECTOR_SUM(sum_u8_avx2, AVX2, uint8_t, u8x32_t, sum_u8_scalar)
VECTOR_SUM(sum_u16_avx2, AVX2, uint16_t, u16x16_t, sum_u16_scalar)
VECTOR_SUM(sum_u32_avx2, AVX2, uint32_t, u32x8_t, sum_u32_scalar)
VECTOR_SUM(sum_u64_avx2, AVX2, uint64_t, u64x4_t, sum_u64_scalar)
VECTOR_SUM(sum_f32_avx2, AVX2, float, f32x8_t, sum_f32_scalar)
VECTOR_SUM(sum_f64_avx2, AVX2, double, f64x4_t, sum_f64_scalar)
/* BFLOAT16 on x86: interleaving with zeros puts each bfloat16 in the top
 * half of a 32-bit lane, which is its float; the rounded result's top half
 * (an arithmetic shift keeps it in int16 range) packs back with a signed
 * pack, which undoes the interleave's lane order. Rounding as
 * ps_float_to_bf16. Its NaN rule needs no code here: a NaN sum of two
 * bfloat16 values is one of them, quieted, or the default NaN, so its low
 * 16 bits are zero (the rounding cannot carry) and its quiet bit is set,
 * which is what ps_float_to_bf16 returns for it (checked exhaustively by
 * the tests). */
#define BF16_ROUND(_pfx, _bits, _type, _s, _out)                                \
    do {                                                                         \
        _type u_ = _pfx##_castps_si##_bits(_s);                                  \
        _type r_ = _pfx##_add_epi32(                                             \
            _pfx##_add_epi32(u_, _pfx##_set1_epi32(0x7fff)),                     \
            _pfx##_and_si##_bits(_pfx##_srli_epi32(u_, 16), _pfx##_set1_epi32(1))); \
        (_out) = _pfx##_srai_epi32(r_, 16);                                      \
    } while (0)

AVX2 static void sum_bf16_avx2(void *dst, const void *a, const void *b, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *x = a, *y = b;
    const __m256i zero = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i va = _mm256_loadu_si256((const __m256i *)(const void *)(x + 2 * i));
        __m256i vb = _mm256_loadu_si256((const __m256i *)(const void *)(y + 2 * i));
        __m256 lo = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, va)),
                                  _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, vb)));
        __m256 hi = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, va)),
                                  _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, vb)));
        __m256i rl, rh;
        BF16_ROUND(_mm256, 256, __m256i, lo, rl);
        BF16_ROUND(_mm256, 256, __m256i, hi, rh);
        _mm256_storeu_si256((__m256i *)(void *)(d + 2 * i), _mm256_packs_epi32(rl, rh));
    }
    if (i < n)
        sum_bf16_scalar(d + 2 * i, x + 2 * i, y + 2 * i, n - i);
}

/* FLOAT16 through F16C: exact widening, a float add, and the hardware's
 * round-to-nearest-even narrowing (the same as ps_float_to_half, NaNs
 * quieted with their top payload bits kept). */
AVX2 static void sum_f16_avx2(void *dst, const void *a, const void *b, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *x = a, *y = b;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a0 = _mm_loadu_si128((const __m128i *)(const void *)(x + 2 * i));
        __m128i a1 = _mm_loadu_si128((const __m128i *)(const void *)(x + 2 * i + 16));
        __m128i b0 = _mm_loadu_si128((const __m128i *)(const void *)(y + 2 * i));
        __m128i b1 = _mm_loadu_si128((const __m128i *)(const void *)(y + 2 * i + 16));
        __m256 s0 = _mm256_add_ps(_mm256_cvtph_ps(a0), _mm256_cvtph_ps(b0));
        __m256 s1 = _mm256_add_ps(_mm256_cvtph_ps(a1), _mm256_cvtph_ps(b1));
        _mm_storeu_si128((__m128i *)(void *)(d + 2 * i),
                         _mm256_cvtps_ph(s0, _MM_FROUND_TO_NEAREST_INT));
        _mm_storeu_si128((__m128i *)(void *)(d + 2 * i + 16),
                         _mm256_cvtps_ph(s1, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i + 8 <= n; i += 8) {
        __m128i p = _mm_loadu_si128((const __m128i *)(const void *)(x + 2 * i));
        __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(y + 2 * i));
        __m256 s = _mm256_add_ps(_mm256_cvtph_ps(p), _mm256_cvtph_ps(q));
        _mm_storeu_si128((__m128i *)(void *)(d + 2 * i),
                         _mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT));
    }
    if (i < n)
        sum_f16_scalar(d + 2 * i, x + 2 * i, y + 2 * i, n - i);
}
#endif

#ifdef HAVE_AVX2_KERNELS
static void sum_bf16_v128(void *dst, const void *a, const void *b, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *x = a, *y = b;
    const __m128i zero = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i va = _mm_loadu_si128((const __m128i *)(const void *)(x + 2 * i));
        __m128i vb = _mm_loadu_si128((const __m128i *)(const void *)(y + 2 * i));
        __m128 lo = _mm_add_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(zero, va)),
                               _mm_castsi128_ps(_mm_unpacklo_epi16(zero, vb)));
        __m128 hi = _mm_add_ps(_mm_castsi128_ps(_mm_unpackhi_epi16(zero, va)),
                               _mm_castsi128_ps(_mm_unpackhi_epi16(zero, vb)));
        __m128i rl, rh;
        BF16_ROUND(_mm, 128, __m128i, lo, rl);
        BF16_ROUND(_mm, 128, __m128i, hi, rh);
        _mm_storeu_si128((__m128i *)(void *)(d + 2 * i), _mm_packs_epi32(rl, rh));
    }
    if (i < n)
        sum_bf16_scalar(d + 2 * i, x + 2 * i, y + 2 * i, n - i);
}
#endif

static const sum_kernel_t k_kernels[PS_KV_SUM_LEVEL_COUNT][K_COUNT] = {
    [PS_KV_SUM_SCALAR] = {
        [K_U8] = sum_u8_scalar, [K_U16] = sum_u16_scalar, [K_U32] = sum_u32_scalar,
        [K_U64] = sum_u64_scalar, [K_F32] = sum_f32_scalar, [K_F64] = sum_f64_scalar,
        [K_F16] = sum_f16_scalar, [K_BF16] = sum_bf16_scalar,
    },
    [PS_KV_SUM_VEC128] = {
        [K_U8] = sum_u8_v128, [K_U16] = sum_u16_v128, [K_U32] = sum_u32_v128,
        [K_U64] = sum_u64_v128, [K_F32] = sum_f32_v128, [K_F64] = sum_f64_v128,
        [K_F16] = sum_f16_scalar, [K_BF16] = sum_bf16_v128,
    },
#ifdef HAVE_AVX2_KERNELS
    [PS_KV_SUM_AVX2] = {
        [K_U8] = sum_u8_avx2, [K_U16] = sum_u16_avx2, [K_U32] = sum_u32_avx2,
        [K_U64] = sum_u64_avx2, [K_F32] = sum_f32_avx2, [K_F64] = sum_f64_avx2,
        [K_F16] = sum_f16_avx2, [K_BF16] = sum_bf16_avx2,
    },
#else
    /* Never chosen (ps_kv_sum_level_supported says 0); no empty slots. */
    [PS_KV_SUM_AVX2] = {
        [K_U8] = sum_u8_v128, [K_U16] = sum_u16_v128, [K_U32] = sum_u32_v128,
        [K_U64] = sum_u64_v128, [K_F32] = sum_f32_v128, [K_F64] = sum_f64_v128,
        [K_F16] = sum_f16_scalar, [K_BF16] = sum_bf16_v128,
    },
#endif
};

/* ---- level selection ---- */

static int detect_level(void)
{
#ifdef HAVE_AVX2_KERNELS
    /* avx2 also checks that the OS saves the YMM state, which F16C needs
     * too; F16C itself from CPUID leaf 1 (clang's builtin lacks it). */
    unsigned eax, ebx, ecx, edx;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
        (ecx & bit_F16C))
        return PS_KV_SUM_AVX2;
#endif
    return PS_KV_SUM_VEC128;
}

/* Detected once; racing first callers compute the same value. */
static int g_level = -1;

ps_kv_sum_level_t ps_kv_sum_level(void)
{
    int level = __atomic_load_n(&g_level, __ATOMIC_RELAXED);
    if (level < 0) {
        level = detect_level();
        __atomic_store_n(&g_level, level, __ATOMIC_RELAXED);
    }
    return (ps_kv_sum_level_t)level;
}

int ps_kv_sum_level_supported(ps_kv_sum_level_t level)
{
    return (int)level >= 0 && (int)level <= (int)ps_kv_sum_level();
}

const char *ps_kv_sum_level_name(ps_kv_sum_level_t level)
{
    switch (level) {
    case PS_KV_SUM_SCALAR:
        return "scalar";
    case PS_KV_SUM_VEC128:
        return "vec128";
    case PS_KV_SUM_AVX2:
        return "avx2";
    }
    return "unknown";
}

/* ---- entry points ---- */

static int kernel_class(ps_data_type_t type)
{
    switch (type) {
    case PS_DATA_INT8:
    case PS_DATA_UINT8:
        return K_U8;
    case PS_DATA_INT16:
    case PS_DATA_UINT16:
        return K_U16;
    case PS_DATA_INT32:
    case PS_DATA_UINT32:
        return K_U32;
    case PS_DATA_INT64:
    case PS_DATA_UINT64:
        return K_U64;
    case PS_DATA_FLOAT:
        return K_F32;
    case PS_DATA_DOUBLE:
        return K_F64;
    case PS_DATA_FLOAT16:
        return K_F16;
    case PS_DATA_BFLOAT16:
        return K_BF16;
    default:
        return -1;
    }
}

ps_status_t ps_kv_sum3_at(ps_kv_sum_level_t level, ps_data_type_t type, void *dst,
                          const void *a, const void *b, size_t bytes)
{
    size_t es = ps_data_type_size(type);
    int k = kernel_class(type);
    if (k < 0 || es == 0 || bytes % es != 0)
        return PS_ERR_INVALID_ARG;
    if (!ps_kv_sum_level_supported(level))
        return PS_ERR_UNSUPPORTED;
    if (bytes == 0)
        return PS_OK;
    if (!dst || !a || !b)
        return PS_ERR_INVALID_ARG;
    k_kernels[level][k](dst, a, b, bytes / es);
    return PS_OK;
}

ps_status_t ps_kv_sum3(ps_data_type_t type, void *dst, const void *a, const void *b,
                       size_t bytes)
{
    return ps_kv_sum3_at(ps_kv_sum_level(), type, dst, a, b, bytes);
}

ps_status_t ps_kv_sum(ps_data_type_t type, void *dst, const void *src, size_t bytes)
{
    return ps_kv_sum3_at(ps_kv_sum_level(), type, dst, dst, src, bytes);
}

// FLOAT16 / BFLOAT16 conversions and typed summation against references
// computed in double precision, independently of the code under test.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ps/app/kv_sum.h"

namespace {

// Rounds x to the nearest value of a binary format with p significand bits
// (implicit bit included) and normal exponents [emin, emax], ties to even,
// overflowing to infinity. Exact in double for both 16-bit formats.
double RoundToFormat(double x, int p, int emin, int emax)
{
    if (!std::isfinite(x) || x == 0)
        return x;
    int e;
    std::frexp(x, &e);  // |x| = m * 2^e, m in [0.5, 1)
    int E = e - 1;
    if (E < emin)
        E = emin;  // subnormal: fixed quantum
    double ulp = std::ldexp(1.0, E - (p - 1));
    double y = std::nearbyint(x / ulp) * ulp;  // default mode: nearest, ties to even
    double maxv = std::ldexp(2.0 - std::ldexp(1.0, 1 - p), emax);
    if (std::fabs(y) > maxv)
        return std::copysign(INFINITY, x);
    return y;
}

double HalfRef(double x) { return RoundToFormat(x, 11, -14, 15); }
double Bf16Ref(double x) { return RoundToFormat(x, 8, -126, 127); }

// The value of a binary16 bit pattern, decoded from its definition.
double DecodeHalf(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = std::ldexp((double)mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = std::ldexp(1.0 + mant / 1024.0, exp - 15);
    return sign ? -v : v;
}

float FloatFromBits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Same value (NaN matches NaN), and same sign for zeros.
void ExpectSame(double want, double got, const char *what, double input)
{
    if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << what << " of " << input;
        return;
    }
    EXPECT_EQ(want, got) << what << " of " << input;
    EXPECT_EQ(std::signbit(want), std::signbit(got)) << what << " of " << input;
}

TEST(Half, DecodesEveryPattern)
{
    for (uint32_t h = 0; h < 0x10000; h++)
        ExpectSame(DecodeHalf((uint16_t)h), ps_half_to_float((uint16_t)h), "half_to_float", h);
}

TEST(Half, EveryPatternRoundTrips)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t back = ps_float_to_half(ps_half_to_float((uint16_t)h));
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan) {
            EXPECT_EQ(0x7c00, back & 0x7c00) << h;
            EXPECT_NE(0, back & 0x3ff) << h;
            EXPECT_EQ(h & 0x8000, back & 0x8000u) << h;
        } else {
            EXPECT_EQ(h, back);
        }
    }
}

TEST(Half, RoundsTiesToEvenAtEveryMidpoint)
{
    // Between each pair of adjacent finite halves: the midpoint (a tie) and
    // the floats just either side of it.
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double a = DecodeHalf((uint16_t)h), b = DecodeHalf((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2);  // 12 significant bits: exact
        for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
            for (float s : {x, -x})
                ExpectSame(HalfRef(s), ps_half_to_float(ps_float_to_half(s)), "float_to_half", s);
        }
    }
}

TEST(Half, OverflowUnderflowAndSpecials)
{
    const float cases[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, INFINITY,
                           0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1p-26f, 0x1.8p-24f,
                           0x1p-14f, 0x1.ffcp-15f, 0.0f, 1e-40f, FloatFromBits(1)};
    for (float c : cases) {
        for (float s : {c, -c})
            ExpectSame(HalfRef(s), ps_half_to_float(ps_float_to_half(s)), "float_to_half", s);
    }
    EXPECT_TRUE(std::isnan(ps_half_to_float(ps_float_to_half(NAN))));
    EXPECT_EQ(0x7c00, ps_float_to_half(INFINITY));
    EXPECT_EQ(0xfc00, ps_float_to_half(-INFINITY));
}

TEST(Half, RandomFloatsAcrossTheRange)
{
    std::mt19937 rng(3);
    for (int i = 0; i < 1000000; i++) {
        // Exponents around the half range, so all regimes are hit.
        uint32_t exp = 127 - 30 + rng() % 50;
        uint32_t bits = (rng() & 0x807fffffu) | (exp << 23);
        float f = FloatFromBits(bits);
        ExpectSame(HalfRef(f), ps_half_to_float(ps_float_to_half(f)), "float_to_half", f);
        if (HasFailure())
            return;
    }
}

TEST(Bf16, ConversionMatchesReference)
{
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = ps_bf16_to_float((uint16_t)b);
        uint32_t bits;
        memcpy(&bits, &f, 4);
        EXPECT_EQ(b << 16, bits);
        bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
        if (!nan) {
            EXPECT_EQ(b, ps_float_to_bf16(f));
        }
    }
    std::mt19937 rng(4);
    for (int i = 0; i < 1000000; i++) {
        float f = FloatFromBits(rng());
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(ps_bf16_to_float(ps_float_to_bf16(f))));
            continue;
        }
        ExpectSame(Bf16Ref(f), ps_bf16_to_float(ps_float_to_bf16(f)), "float_to_bf16", f);
        if (HasFailure())
            return;
    }
    // Ties: the bf16 midpoint of 1 and its successor goes to 1 (even), the
    // next one up to the odd neighbour's successor.
    EXPECT_EQ(0x3f80, ps_float_to_bf16(FloatFromBits(0x3f808000u)));
    EXPECT_EQ(0x3f82, ps_float_to_bf16(FloatFromBits(0x3f818000u)));
    EXPECT_EQ(0x7f80, ps_float_to_bf16(FloatFromBits(0x7f7f8000u)));  // rounds up to inf
}

void SumFinite16(ps_data_type_t type, float (*from)(uint16_t), double (*ref)(double),
                 uint32_t exp_mask, int seed)
{
    std::mt19937 rng(seed);
    const size_t n = 4096;
    std::vector<uint16_t> a(n), b(n), orig;
    for (size_t i = 0; i < n; i++) {
        do {
            a[i] = (uint16_t)rng();
        } while ((a[i] & exp_mask) == exp_mask);  // finite only
        do {
            b[i] = (uint16_t)rng();
        } while ((b[i] & exp_mask) == exp_mask);
    }
    // Make some exact cancellations and some same-magnitude pairs.
    for (size_t i = 0; i < n; i += 64) {
        b[i] = a[i] ^ 0x8000;
        b[i + 1] = a[i + 1];
    }
    orig = a;
    ASSERT_EQ(PS_OK, ps_kv_sum(type, a.data(), b.data(), n * 2));
    for (size_t i = 0; i < n; i++) {
        double exact = (double)from(orig[i]) + (double)from(b[i]);
        ExpectSame(ref(exact), from(a[i]), "sum", exact);
        if (::testing::Test::HasFailure())
            return;
    }
}

TEST(KvSum, Float16MatchesCorrectlyRoundedSum)
{
    SumFinite16(PS_DATA_FLOAT16, ps_half_to_float, HalfRef, 0x7c00, 5);
}

TEST(KvSum, Bfloat16MatchesCorrectlyRoundedSum)
{
    SumFinite16(PS_DATA_BFLOAT16, ps_bf16_to_float, Bf16Ref, 0x7f80, 6);
}

TEST(KvSum, Float16ManySmallTermsStayExact)
{
    // 8 workers pushing small integers: every partial sum is exact in fp16.
    uint16_t acc = ps_float_to_half(0.0f);
    double want = 0;
    for (int w = 0; w < 8; w++) {
        float v = (float)(w * 3 - 11);
        uint16_t h = ps_float_to_half(v);
        ASSERT_EQ(PS_OK, ps_kv_sum(PS_DATA_FLOAT16, &acc, &h, 2));
        want += v;
    }
    EXPECT_EQ(want, ps_half_to_float(acc));
}

template <typename T>
void CheckIntegerWrap(ps_data_type_t type)
{
    std::mt19937_64 rng(7);
    const size_t n = 257;
    // One byte of offset: the sum must handle unaligned values.
    std::vector<unsigned char> a(n * sizeof(T) + 1), b(n * sizeof(T) + 1);
    std::vector<T> av(n), bv(n);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = rng(), y = rng();
        memcpy(&av[i], &x, sizeof(T));
        memcpy(&bv[i], &y, sizeof(T));
    }
    av[0] = std::numeric_limits<T>::max();
    bv[0] = 1;
    memcpy(a.data() + 1, av.data(), n * sizeof(T));
    memcpy(b.data() + 1, bv.data(), n * sizeof(T));
    ASSERT_EQ(PS_OK, ps_kv_sum(type, a.data() + 1, b.data() + 1, n * sizeof(T)));
    for (size_t i = 0; i < n; i++) {
        // The two's-complement sum, computed in unsigned 64-bit arithmetic.
        uint64_t ua = 0, ub = 0;
        memcpy(&ua, &av[i], sizeof(T));
        memcpy(&ub, &bv[i], sizeof(T));
        uint64_t us = ua + ub;
        T want;
        memcpy(&want, &us, sizeof(T));
        T got;
        memcpy(&got, a.data() + 1 + i * sizeof(T), sizeof(T));
        ASSERT_EQ(want, got) << "element " << i;
    }
}

TEST(KvSum, IntegersWrap)
{
    CheckIntegerWrap<int8_t>(PS_DATA_INT8);
    CheckIntegerWrap<int16_t>(PS_DATA_INT16);
    CheckIntegerWrap<int32_t>(PS_DATA_INT32);
    CheckIntegerWrap<int64_t>(PS_DATA_INT64);
    CheckIntegerWrap<uint8_t>(PS_DATA_UINT8);
    CheckIntegerWrap<uint16_t>(PS_DATA_UINT16);
    CheckIntegerWrap<uint32_t>(PS_DATA_UINT32);
    CheckIntegerWrap<uint64_t>(PS_DATA_UINT64);
}

TEST(KvSum, FloatAndDouble)
{
    float fa[] = {1.5f, -2.25f, 1e30f, 3.0f};
    float fb[] = {0.25f, 2.25f, 1e30f, -0.5f};
    ASSERT_EQ(PS_OK, ps_kv_sum(PS_DATA_FLOAT, fa, fb, sizeof(fa)));
    EXPECT_EQ(1.75f, fa[0]);
    EXPECT_EQ(0.0f, fa[1]);
    EXPECT_EQ(2e30f, fa[2]);
    EXPECT_EQ(2.5f, fa[3]);
    double da[] = {1.0, 0.1};
    double db[] = {2.0, 0.2};
    ASSERT_EQ(PS_OK, ps_kv_sum(PS_DATA_DOUBLE, da, db, sizeof(da)));
    EXPECT_EQ(3.0, da[0]);
    EXPECT_EQ(0.1 + 0.2, da[1]);
}

TEST(KvSum, RejectsWhatItCannotSum)
{
    char a[8] = {0}, b[8] = {0};
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_sum(PS_DATA_CHAR, a, b, 8));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_sum(PS_DATA_OTHER, a, b, 8));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_sum(PS_DATA_INT32, a, b, 6));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_sum((ps_data_type_t)99, a, b, 8));
    EXPECT_EQ(PS_OK, ps_kv_sum(PS_DATA_DOUBLE, a, b, 0));
    EXPECT_EQ(0, ps_kv_type_summable(PS_DATA_CHAR));
    EXPECT_EQ(1, ps_kv_type_summable(PS_DATA_BFLOAT16));
}

}  // namespace

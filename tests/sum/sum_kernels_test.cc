// The summation kernels of every level against a reference computed in
// higher precision (double, rounded once to the type, round-to-nearest-even
// written out here independently of the library's conversions), and
// against each other bit for bit; any alignment, in place or not.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ps/app/kv_sum.h"

namespace {

// Half and bfloat16 values as double (exact), decoded independently.
double HalfToDouble(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = std::ldexp(mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = std::ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

double Bf16ToDouble(uint16_t b)
{
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round x to a binary format with `mant` stored bits, minimum normal
// exponent `emin`, largest finite `maxv` (nearest, ties to even). Returns
// the rounded value as double (representable exactly in the format).
double RoundTo(double x, int mant, int emin, double maxv)
{
    if (std::isnan(x) || std::isinf(x) || x == 0)
        return x;
    double ax = std::fabs(x);
    int e = std::ilogb(ax);
    if (e < emin)
        e = emin;
    double ulp = std::ldexp(1.0, e - mant);
    double q = std::nearbyint(ax / ulp); // exact scaling; FE_TONEAREST: ties to even
    double r = q * ulp;
    // Overflow: beyond max + half an ulp of max rounds to infinity.
    double half_ulp_max = std::ldexp(1.0, std::ilogb(maxv) - mant - 1);
    if (ax >= maxv + half_ulp_max)
        r = INFINITY;
    else if (r > maxv)
        r = maxv; // cannot happen for RNE below the threshold, kept for safety
    return x < 0 ? -r : r;
}

double RefHalf(double x) { return RoundTo(x, 10, -14, 65504.0); }
double RefBf16(double x) { return RoundTo(x, 7, -126, std::ldexp(255.0 / 128.0, 127)); }

struct TypeCase {
    ps_data_type_t type;
    size_t size;
};

const TypeCase kTypes[] = {
    {PS_DATA_INT8, 1},   {PS_DATA_UINT8, 1},  {PS_DATA_INT16, 2},   {PS_DATA_UINT16, 2},
    {PS_DATA_INT32, 4},  {PS_DATA_UINT32, 4}, {PS_DATA_INT64, 8},   {PS_DATA_UINT64, 8},
    {PS_DATA_FLOAT, 4},  {PS_DATA_DOUBLE, 8}, {PS_DATA_FLOAT16, 2}, {PS_DATA_BFLOAT16, 2},
};

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937_64 &rng)
{
    std::vector<uint8_t> v(n);
    for (auto &b : v)
        b = static_cast<uint8_t>(rng());
    return v;
}

bool IsNan(ps_data_type_t t, const uint8_t *p)
{
    uint16_t h;
    switch (t) {
    case PS_DATA_FLOAT: {
        float f;
        std::memcpy(&f, p, 4);
        return std::isnan(f);
    }
    case PS_DATA_DOUBLE: {
        double d;
        std::memcpy(&d, p, 8);
        return std::isnan(d);
    }
    case PS_DATA_FLOAT16:
        std::memcpy(&h, p, 2);
        return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    case PS_DATA_BFLOAT16:
        std::memcpy(&h, p, 2);
        return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    default:
        return false;
    }
}

// Element i of dst must equal the reference sum of a[i] and b[i].
void CheckElement(ps_data_type_t t, size_t es, const uint8_t *a, const uint8_t *b,
                  const uint8_t *got, size_t i)
{
    const uint8_t *pa = a + i * es, *pb = b + i * es, *pg = got + i * es;
    switch (t) {
    case PS_DATA_FLOAT: {
        float x, y, g;
        std::memcpy(&x, pa, 4);
        std::memcpy(&y, pb, 4);
        std::memcpy(&g, pg, 4);
        float want = static_cast<float>(static_cast<double>(x) + static_cast<double>(y));
        if (std::isnan(want))
            ASSERT_TRUE(std::isnan(g)) << i;
        else
            ASSERT_EQ(0, std::memcmp(&want, &g, 4)) << i << ": " << x << " + " << y;
        break;
    }
    case PS_DATA_DOUBLE: {
        double x, y, g;
        std::memcpy(&x, pa, 8);
        std::memcpy(&y, pb, 8);
        std::memcpy(&g, pg, 8);
        double want = x + y;
        if (std::isnan(want))
            ASSERT_TRUE(std::isnan(g)) << i;
        else
            ASSERT_EQ(0, std::memcmp(&want, &g, 8)) << i;
        break;
    }
    case PS_DATA_FLOAT16:
    case PS_DATA_BFLOAT16: {
        uint16_t x, y, g;
        std::memcpy(&x, pa, 2);
        std::memcpy(&y, pb, 2);
        std::memcpy(&g, pg, 2);
        bool half = t == PS_DATA_FLOAT16;
        double dx = half ? HalfToDouble(x) : Bf16ToDouble(x);
        double dy = half ? HalfToDouble(y) : Bf16ToDouble(y);
        double want = half ? RefHalf(dx + dy) : RefBf16(dx + dy);
        double dg = half ? HalfToDouble(g) : Bf16ToDouble(g);
        if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(dg)) << i << ": " << std::hex << x << " + " << y;
        } else {
            ASSERT_EQ(want, dg) << i << ": " << std::hex << x << " + " << y << " gave " << g;
            ASSERT_EQ(std::signbit(want), std::signbit(dg)) << i;
        }
        break;
    }
    default: {
        uint64_t x = 0, y = 0, g = 0;
        std::memcpy(&x, pa, es);
        std::memcpy(&y, pb, es);
        std::memcpy(&g, pg, es);
        uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
        ASSERT_EQ((x + y) & mask, g) << i;
    }
    }
}

std::vector<ps_kv_sum_level_t> Levels()
{
    std::vector<ps_kv_sum_level_t> v;
    for (int l = 0; l < PS_KV_SUM_LEVEL_COUNT; l++)
        if (ps_kv_sum_level_supported(static_cast<ps_kv_sum_level_t>(l)))
            v.push_back(static_cast<ps_kv_sum_level_t>(l));
    return v;
}

TEST(SumKernels, ReportsLevels)
{
    EXPECT_TRUE(ps_kv_sum_level_supported(PS_KV_SUM_SCALAR));
    EXPECT_TRUE(ps_kv_sum_level_supported(PS_KV_SUM_VEC128));
    EXPECT_TRUE(ps_kv_sum_level_supported(ps_kv_sum_level()));
    std::printf("kernels: %s\n", ps_kv_sum_level_name(ps_kv_sum_level()));
    EXPECT_STREQ("unknown", ps_kv_sum_level_name(static_cast<ps_kv_sum_level_t>(9)));
    uint8_t a[4] = {0}, b[4] = {0};
    EXPECT_EQ(PS_ERR_UNSUPPORTED,
              ps_kv_sum3_at(static_cast<ps_kv_sum_level_t>(9), PS_DATA_FLOAT, a, a, b, 4));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_sum3(PS_DATA_CHAR, a, a, b, 4));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_sum3(PS_DATA_FLOAT, a, a, b, 3));
}

// Every level, every type, every length up to 3 vectors of 4 plus a tail,
// unaligned, out of place and in place (dst = a, dst = b).
TEST(SumKernels, EveryLevelMatchesTheReference)
{
    ASSERT_EQ(FE_TONEAREST, std::fegetround());
    std::mt19937_64 rng(7);
    for (ps_kv_sum_level_t level : Levels()) {
        for (const TypeCase &tc : kTypes) {
            for (size_t n = 0; n <= 200; n += (n < 70 ? 1 : 13)) {
                for (size_t misalign = 0; misalign < 3; misalign++) {
                    size_t bytes = n * tc.size;
                    auto a = RandomBytes(bytes + 3, rng), b = RandomBytes(bytes + 3, rng);
                    std::vector<uint8_t> d(bytes + 3);
                    const uint8_t *pa = a.data() + misalign, *pb = b.data() + (2 - misalign);
                    uint8_t *pd = d.data() + (misalign + 1) % 3;
                    ASSERT_EQ(PS_OK, ps_kv_sum3_at(level, tc.type, pd, pa, pb, bytes));
                    for (size_t i = 0; i < n; i++)
                        CheckElement(tc.type, tc.size, pa, pb, pd, i);

                    std::vector<uint8_t> inplace(pa, pa + bytes);
                    ASSERT_EQ(PS_OK, ps_kv_sum3_at(level, tc.type, inplace.data(), inplace.data(),
                                                   pb, bytes));
                    if (bytes) {
                        ASSERT_EQ(0, std::memcmp(inplace.data(), pd, bytes));
                    }
                    std::vector<uint8_t> inplace_b(pb, pb + bytes);
                    ASSERT_EQ(PS_OK, ps_kv_sum3_at(level, tc.type, inplace_b.data(), pa,
                                                   inplace_b.data(), bytes));
                    // a + b == b + a except for which NaN payload wins.
                    for (size_t i = 0; i < n; i++) {
                        if (!IsNan(tc.type, pd + i * tc.size)) {
                            ASSERT_EQ(0, std::memcmp(inplace_b.data() + i * tc.size,
                                                     pd + i * tc.size, tc.size));
                        }
                    }
                }
            }
        }
    }
}

// The 16-bit float kernels over every pattern of one operand (including
// subnormals, infinities, NaNs, overflow and ties).
TEST(SumKernels, SixteenBitFloatsEveryPatternEveryLevel)
{
    std::mt19937_64 rng(11);
    const size_t n = 65536;
    std::vector<uint16_t> a(n), b(n), d(n), scalar(n);
    for (size_t i = 0; i < n; i++) {
        a[i] = static_cast<uint16_t>(i);
        b[i] = static_cast<uint16_t>(rng());
    }
    for (ps_data_type_t t : {PS_DATA_FLOAT16, PS_DATA_BFLOAT16}) {
        ASSERT_EQ(PS_OK, ps_kv_sum3_at(PS_KV_SUM_SCALAR, t, scalar.data(), a.data(), b.data(),
                                       2 * n));
        for (ps_kv_sum_level_t level : Levels()) {
            ASSERT_EQ(PS_OK, ps_kv_sum3_at(level, t, d.data(), a.data(), b.data(), 2 * n));
            for (size_t i = 0; i < n; i++) {
                CheckElement(t, 2, reinterpret_cast<const uint8_t *>(a.data()),
                             reinterpret_cast<const uint8_t *>(b.data()),
                             reinterpret_cast<const uint8_t *>(d.data()), i);
                if (!IsNan(t, reinterpret_cast<const uint8_t *>(&d[i]))) {
                    ASSERT_EQ(scalar[i], d[i]) << "level " << level << " element " << i;
                }
            }
        }
    }
}

// Many terms: each addition rounds once, so the result is the running sum
// rounded at every step; with small integers (exact) it is the exact sum.
TEST(SumKernels, AccumulatingExactValuesStaysExact)
{
    for (ps_kv_sum_level_t level : Levels()) {
        std::vector<uint16_t> acc_h(37, 0), acc_b(37, 0);
        std::vector<float> acc_f(37, 0.0f);
        for (int k = 1; k <= 64; k++) {
            std::vector<uint16_t> h(37), bf(37);
            std::vector<float> f(37);
            for (int i = 0; i < 37; i++) {
                f[i] = static_cast<float>((k * 7 + i) % 9) - 4.0f;
                h[i] = ps_float_to_half(f[i]);
                bf[i] = ps_float_to_bf16(f[i]);
            }
            ASSERT_EQ(PS_OK, ps_kv_sum3_at(level, PS_DATA_FLOAT16, acc_h.data(), acc_h.data(),
                                           h.data(), 2 * 37));
            ASSERT_EQ(PS_OK, ps_kv_sum3_at(level, PS_DATA_BFLOAT16, acc_b.data(), acc_b.data(),
                                           bf.data(), 2 * 37));
            ASSERT_EQ(PS_OK, ps_kv_sum3_at(level, PS_DATA_FLOAT, acc_f.data(), acc_f.data(),
                                           f.data(), 4 * 37));
        }
        for (int i = 0; i < 37; i++) {
            double exact = 0;
            for (int k = 1; k <= 64; k++)
                exact += ((k * 7 + i) % 9) - 4.0;
            EXPECT_EQ(exact, HalfToDouble(acc_h[i]));
            EXPECT_EQ(exact, Bf16ToDouble(acc_b[i]));
            EXPECT_EQ(exact, acc_f[i]);
        }
    }
}

} // namespace

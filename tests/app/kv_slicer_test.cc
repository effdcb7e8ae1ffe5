// The KV slicer against a brute-force reference: every key goes to the one
// range holding it, values follow the keys (uniform or per-key lengths), and
// empty shares stay empty.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ps/app/kv_slicer.h"

namespace {

// Upstream's ranges: server i owns [MAX/n*i, MAX/n*(i+1)).
std::vector<ps_kv_range_t> UpstreamRanges(int n)
{
    std::vector<ps_kv_range_t> r(n);
    uint64_t step = UINT64_MAX / (uint64_t)n;
    for (int i = 0; i < n; i++) {
        r[i].begin = step * (uint64_t)i;
        r[i].end = step * (uint64_t)(i + 1);
    }
    return r;
}

struct Case {
    std::vector<uint64_t> keys;
    std::vector<int32_t> lens;  // empty: uniform
    size_t per_key = 0;         // uniform bytes per key
    size_t elem = 1;
};

size_t KeyBytes(const Case &c, size_t i)
{
    return c.lens.empty() ? c.per_key : (size_t)c.lens[i] * c.elem;
}

size_t TotalBytes(const Case &c)
{
    size_t t = 0;
    for (size_t i = 0; i < c.keys.size(); i++)
        t += KeyBytes(c, i);
    return t;
}

// Checks the slicer's answer against a direct computation.
void CheckAgainstReference(const Case &c, const std::vector<ps_kv_range_t> &ranges)
{
    std::vector<ps_kv_slice_t> got(ranges.size());
    ASSERT_EQ(PS_OK, ps_kv_slice_keys(c.keys.data(), c.keys.size(),
                                      c.lens.empty() ? nullptr : c.lens.data(), TotalBytes(c),
                                      c.elem, ranges.data(), (int)ranges.size(), got.data()));
    size_t key_pos = 0, val_pos = 0;
    for (size_t r = 0; r < ranges.size(); r++) {
        SCOPED_TRACE("range " + std::to_string(r));
        size_t kb = key_pos, vb = val_pos;
        while (key_pos < c.keys.size() && c.keys[key_pos] >= ranges[r].begin &&
               c.keys[key_pos] < ranges[r].end) {
            val_pos += KeyBytes(c, key_pos);
            key_pos++;
        }
        EXPECT_EQ(kb, got[r].key_begin);
        EXPECT_EQ(key_pos, got[r].key_end);
        if (got[r].key_begin != got[r].key_end) {
            EXPECT_EQ(vb, got[r].val_begin);
            EXPECT_EQ(val_pos, got[r].val_end);
        } else {
            EXPECT_EQ(got[r].val_begin, got[r].val_end);
        }
    }
    EXPECT_EQ(c.keys.size(), key_pos) << "a key lies in no range";
}

std::vector<uint64_t> RandomSortedKeys(std::mt19937_64 &rng, size_t n)
{
    std::vector<uint64_t> k;
    while (k.size() < n) {
        uint64_t x = rng() % (UINT64_MAX - 16);  // below the last range's end
        k.push_back(x);
        std::sort(k.begin(), k.end());
        k.erase(std::unique(k.begin(), k.end()), k.end());
    }
    return k;
}

TEST(KvSlicer, UniformAcrossOneToEightServers)
{
    std::mt19937_64 rng(1);
    for (int n = 1; n <= 8; n++) {
        for (size_t nk : {1u, 2u, 7u, 100u}) {
            Case c;
            c.keys = RandomSortedKeys(rng, nk);
            c.elem = 4;
            c.per_key = 12;
            SCOPED_TRACE(std::to_string(n) + " servers, " + std::to_string(nk) + " keys");
            CheckAgainstReference(c, UpstreamRanges(n));
        }
    }
}

TEST(KvSlicer, PerKeyLengthsAcrossOneToEightServers)
{
    std::mt19937_64 rng(2);
    for (int n = 1; n <= 8; n++) {
        Case c;
        c.keys = RandomSortedKeys(rng, 64);
        c.elem = 2;
        for (size_t i = 0; i < c.keys.size(); i++)
            c.lens.push_back((int32_t)(rng() % 9));  // zero lengths included
        SCOPED_TRACE(std::to_string(n) + " servers");
        CheckAgainstReference(c, UpstreamRanges(n));
    }
}

TEST(KvSlicer, EmptySlicesForServersWithoutKeys)
{
    auto ranges = UpstreamRanges(4);
    Case c;
    // All keys in server 2's range: 0, 1 and 3 get empty shares.
    c.keys = {ranges[2].begin, ranges[2].begin + 1, ranges[2].end - 1};
    c.per_key = 8;
    CheckAgainstReference(c, ranges);
    std::vector<ps_kv_slice_t> s(4);
    ASSERT_EQ(PS_OK, ps_kv_slice_keys(c.keys.data(), 3, nullptr, 24, 1, ranges.data(), 4,
                                      s.data()));
    EXPECT_EQ(s[0].key_begin, s[0].key_end);
    EXPECT_EQ(s[1].key_begin, s[1].key_end);
    EXPECT_EQ(0u, s[2].key_begin);
    EXPECT_EQ(3u, s[2].key_end);
    EXPECT_EQ(0u, s[2].val_begin);
    EXPECT_EQ(24u, s[2].val_end);
    EXPECT_EQ(s[3].key_begin, s[3].key_end);
}

TEST(KvSlicer, RangeBoundariesGoToTheRangeThatStartsThere)
{
    auto ranges = UpstreamRanges(3);
    Case c;
    c.keys = {0, ranges[0].end - 1, ranges[1].begin, ranges[1].end - 1, ranges[2].begin,
              ranges[2].end - 1};
    c.per_key = 4;
    CheckAgainstReference(c, ranges);
}

TEST(KvSlicer, NoKeys)
{
    auto ranges = UpstreamRanges(2);
    std::vector<ps_kv_slice_t> s(2);
    ASSERT_EQ(PS_OK, ps_kv_slice_keys(nullptr, 0, nullptr, 0, 4, ranges.data(), 2, s.data()));
    for (auto &x : s)
        EXPECT_EQ(x.key_begin, x.key_end);
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(nullptr, 0, nullptr, 8, 4, ranges.data(), 2, s.data()));
}

// One key (cut without the general searches) lands where the reference
// says, at every range's edges, with lengths, an element size that is not
// a power of two, and empty ranges in between; what does not fit is
// refused as with more keys.
TEST(KvSlicer, OneKey)
{
    for (int n = 1; n <= 5; n++) {
        auto ranges = UpstreamRanges(n);
        for (int r = 0; r < n; r++) {
            for (uint64_t k : {ranges[r].begin, ranges[r].begin + 1, ranges[r].end - 1}) {
                SCOPED_TRACE(std::to_string(n) + " servers, key " + std::to_string(k));
                Case c;
                c.keys = {k};
                c.per_key = 24;
                c.elem = 4;
                CheckAgainstReference(c, ranges);
                c.elem = 3; // 24 bytes are 8 three-byte elements
                CheckAgainstReference(c, ranges);
                c.lens = {5};
                c.elem = 4;
                CheckAgainstReference(c, ranges);
                c.lens = {0};
                CheckAgainstReference(c, ranges);
            }
        }
    }
    // Empty ranges around the owner: [0,10) [10,10) [10,20) [20,20).
    std::vector<ps_kv_range_t> gaps = {{0, 10}, {10, 10}, {10, 20}, {20, 20}};
    for (uint64_t k : {0u, 9u, 10u, 19u}) {
        Case c;
        c.keys = {k};
        c.per_key = 8;
        CheckAgainstReference(c, gaps);
    }
    std::vector<ps_kv_slice_t> s(4);
    uint64_t outside[] = {20};
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(outside, 1, nullptr, 8, 1, gaps.data(), 4, s.data()));
    uint64_t key[] = {3};
    // 6 bytes are no whole 4-byte elements, 7 no whole 3-byte ones.
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(key, 1, nullptr, 6, 4, gaps.data(), 4, s.data()));
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(key, 1, nullptr, 7, 3, gaps.data(), 4, s.data()));
    int32_t two[] = {2}, neg[] = {-1};
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_keys(key, 1, two, 12, 4, gaps.data(), 4, s.data()));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_keys(key, 1, neg, 0, 4, gaps.data(), 4, s.data()));
    ASSERT_EQ(PS_OK, ps_kv_slice_keys(key, 1, two, 8, 4, gaps.data(), 4, s.data()));
    // A destination cut by those shares, and one that does not fit them.
    std::vector<ps_kv_slice_t> d(4);
    ASSERT_EQ(PS_OK, ps_kv_slice_vals(1, nullptr, 16, 8, s.data(), 4, d.data()));
    for (int r = 0; r < 4; r++) {
        EXPECT_EQ(s[r].key_begin, d[r].key_begin);
        EXPECT_EQ(s[r].key_end, d[r].key_end);
        EXPECT_EQ(r == 0 ? 16u : 0u, d[r].val_end - d[r].val_begin);
    }
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_vals(1, nullptr, 12, 8, s.data(), 4, d.data()));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_vals(1, neg, 0, 8, s.data(), 4, d.data()));
}

TEST(KvSlicer, RejectsBadInput)
{
    auto ranges = UpstreamRanges(2);
    std::vector<ps_kv_slice_t> s(2);
    uint64_t unsorted[] = {5, 3};
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(unsorted, 2, nullptr, 8, 1, ranges.data(), 2, s.data()));
    uint64_t dup[] = {3, 3};
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(dup, 2, nullptr, 8, 1, ranges.data(), 2, s.data()));
    uint64_t keys[] = {1, 2};
    // 9 bytes do not split over 2 keys; 6 bytes are 3 per key, not whole floats.
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(keys, 2, nullptr, 9, 1, ranges.data(), 2, s.data()));
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(keys, 2, nullptr, 6, 4, ranges.data(), 2, s.data()));
    int32_t lens[] = {1, 2};
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(keys, 2, lens, 8, 4, ranges.data(), 2, s.data()));
    EXPECT_EQ(PS_OK, ps_kv_slice_keys(keys, 2, lens, 12, 4, ranges.data(), 2, s.data()));
    int32_t neg[] = {-1, 4};
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(keys, 2, neg, 12, 4, ranges.data(), 2, s.data()));
    // UINT64_MAX is beyond upstream's last range.
    uint64_t top[] = {1, UINT64_MAX};
    EXPECT_EQ(PS_ERR_INVALID_ARG,
              ps_kv_slice_keys(top, 2, nullptr, 8, 1, ranges.data(), 2, s.data()));
}

TEST(KvSlicer, UnalignedKeys)
{
    auto ranges = UpstreamRanges(2);
    alignas(8) unsigned char raw[1 + 3 * 8];
    uint64_t keys[] = {1, ranges[1].begin, ranges[1].begin + 5};
    memcpy(raw + 1, keys, sizeof(keys));
    std::vector<ps_kv_slice_t> s(2);
    ASSERT_EQ(PS_OK, ps_kv_slice_keys(reinterpret_cast<const uint64_t *>(raw + 1), 3, nullptr,
                                      3 * 8, 8, ranges.data(), 2, s.data()));
    EXPECT_EQ(1u, s[0].key_end);
    EXPECT_EQ(1u, s[1].key_begin);
    EXPECT_EQ(3u, s[1].key_end);
    EXPECT_EQ(8u, s[1].val_begin);
}

// A push-pull cuts its destination by the push's key shares: the same
// answer as slicing the destination with the keys again, and the same
// refusals of sizes that do not fit.
TEST(KvSlicer, ValuesByKeySharesMatchSlicingAgain)
{
    std::mt19937_64 rng(3);
    for (int n = 1; n <= 8; n++) {
        auto ranges = UpstreamRanges(n);
        std::vector<uint64_t> keys = RandomSortedKeys(rng, 1 + rng() % 40);
        size_t nk = keys.size();
        std::vector<ps_kv_slice_t> by_key(n), want(n), got(n);
        ASSERT_EQ(PS_OK, ps_kv_slice_keys(keys.data(), nk, nullptr, nk * 4, 4, ranges.data(), n,
                                          by_key.data()));
        for (int with_lens = 0; with_lens < 2; with_lens++) {
            SCOPED_TRACE(std::to_string(n) + " servers, lens " + std::to_string(with_lens));
            std::vector<int32_t> lens;
            size_t bytes = nk * 2 * 8;
            if (with_lens) {
                bytes = 0;
                for (size_t i = 0; i < nk; i++) {
                    lens.push_back((int32_t)(rng() % 5));
                    bytes += (size_t)lens.back() * 2;
                }
            }
            const int32_t *lp = with_lens ? lens.data() : nullptr;
            ASSERT_EQ(PS_OK, ps_kv_slice_keys(keys.data(), nk, lp, bytes, 2, ranges.data(), n,
                                              want.data()));
            ASSERT_EQ(PS_OK, ps_kv_slice_vals(nk, lp, bytes, 2, by_key.data(), n, got.data()));
            for (int r = 0; r < n; r++) {
                EXPECT_EQ(want[r].key_begin, got[r].key_begin);
                EXPECT_EQ(want[r].key_end, got[r].key_end);
                EXPECT_EQ(want[r].val_begin, got[r].val_begin);
                EXPECT_EQ(want[r].val_end, got[r].val_end);
            }
            // One byte more fits neither way.
            EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_keys(keys.data(), nk, lp, bytes + 1, 2,
                                                           ranges.data(), n, want.data()));
            EXPECT_EQ(PS_ERR_INVALID_ARG,
                      ps_kv_slice_vals(nk, lp, bytes + 1, 2, by_key.data(), n, got.data()));
        }
    }
    std::vector<ps_kv_slice_t> s(1);
    int32_t neg[] = {-1, 4};
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_vals(2, neg, 6, 2, s.data(), 1, s.data()));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_vals(0, nullptr, 8, 1, s.data(), 1, s.data()));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_slice_vals(1, nullptr, 8, 1, nullptr, 1, s.data()));
}

}  // namespace

// Shares from a server per key (a user slicer's answer in key order).
TEST(KvSharesOfOwners, ContiguousRunsPerServer)
{
    const int owner[] = {0, 0, 2, 2, 2, 3};
    ps_kv_slice_t s[4];
    ASSERT_EQ(PS_OK, ps_kv_shares_of_owners(owner, 6, 4, s));
    EXPECT_EQ(0u, s[0].key_begin);
    EXPECT_EQ(2u, s[0].key_end);
    EXPECT_EQ(s[1].key_begin, s[1].key_end); // server 1 gets nothing
    EXPECT_EQ(2u, s[2].key_begin);
    EXPECT_EQ(5u, s[2].key_end);
    EXPECT_EQ(5u, s[3].key_begin);
    EXPECT_EQ(6u, s[3].key_end);
    const int back[] = {1, 0};
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_shares_of_owners(back, 2, 2, s));
    const int out_of_range[] = {0, 2};
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_shares_of_owners(out_of_range, 2, 2, s));
}

// The default store's semantics, without a network: first push copies,
// later pushes sum (numeric types) or replace (CHAR/OTHER, or a changed
// type/length), pulls answer stored values with per-key lengths (zero for
// unknown keys), and concurrent pushes lose nothing.
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ps/app/kv.h"
#include "ps/app/kv_store.h"
#include "ps/app/kv_sum.h"
#include "ps/base/buffer.h"

namespace {

ps_slice_t SliceOf(const void *data, size_t len)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    EXPECT_EQ(PS_OK, ps_slice_alloc(len, 0, &s));
    if (len)
        memcpy(ps_slice_ptr(&s), data, len);
    return s;
}

// Owns the slices of one request.
struct Pairs {
    ps_kv_pairs_t kvs;
    Pairs(const std::vector<uint64_t> &keys, const void *vals, size_t bytes, ps_data_type_t type,
          const std::vector<int32_t> &lens = {})
    {
        kvs.keys = SliceOf(keys.data(), keys.size() * 8);
        kvs.vals = SliceOf(vals, bytes);
        kvs.lens = lens.empty() ? ps_slice_t PS_SLICE_EMPTY_INIT
                                : SliceOf(lens.data(), lens.size() * 4);
        kvs.type = type;
    }
    ~Pairs()
    {
        ps_slice_unref(&kvs.keys);
        ps_slice_unref(&kvs.vals);
        ps_slice_unref(&kvs.lens);
    }
};

class KvStore : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_EQ(PS_OK, ps_kv_store_create(&store_)); }
    void TearDown() override { ps_kv_store_destroy(store_); }

    template <typename T>
    std::vector<T> Get(uint64_t key, ps_data_type_t *type = nullptr)
    {
        size_t len = 0;
        EXPECT_EQ(PS_OK, ps_kv_store_get(store_, key, nullptr, 0, &len, type));
        std::vector<T> v(len / sizeof(T));
        EXPECT_EQ(PS_OK, ps_kv_store_get(store_, key, v.data(), len, &len, nullptr));
        return v;
    }

    ps_kv_store_t *store_ = nullptr;
};

TEST_F(KvStore, FirstPushCopiesLaterPushesSum)
{
    int32_t a[] = {1, 2, 3, 4, 5, 6};
    {
        Pairs p({10, 20}, a, sizeof(a), PS_DATA_INT32);
        ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
        // The store keeps its own copy: scribbling on the request's buffer
        // afterwards changes nothing.
        memset(ps_slice_ptr(&p.kvs.vals), 0x7f, sizeof(a));
    }
    EXPECT_EQ((std::vector<int32_t>{1, 2, 3}), Get<int32_t>(10));
    int32_t b[] = {10, 20, 30, -4, -5, -6};
    Pairs q({10, 20}, b, sizeof(b), PS_DATA_INT32);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &q.kvs));
    EXPECT_EQ((std::vector<int32_t>{11, 22, 33}), Get<int32_t>(10));
    EXPECT_EQ((std::vector<int32_t>{0, 0, 0}), Get<int32_t>(20));
    EXPECT_EQ(2u, ps_kv_store_num_keys(store_));
}

TEST_F(KvStore, SumsFloatsAndHalves)
{
    float f[] = {0.5f, 1.25f};
    Pairs p({7}, f, sizeof(f), PS_DATA_FLOAT);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    EXPECT_EQ((std::vector<float>{1.0f, 2.5f}), Get<float>(7));

    uint16_t h[] = {ps_float_to_half(1.5f), ps_float_to_half(-3.0f)};
    Pairs ph({8}, h, sizeof(h), PS_DATA_FLOAT16);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &ph.kvs));
    auto got = Get<uint16_t>(8);
    ASSERT_EQ(2u, got.size());
    EXPECT_EQ(4.5f, ps_half_to_float(got[0]));
    EXPECT_EQ(-9.0f, ps_half_to_float(got[1]));

    uint16_t bf[] = {ps_float_to_bf16(2.0f)};
    Pairs pb({9}, bf, sizeof(bf), PS_DATA_BFLOAT16);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &pb.kvs));
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &pb.kvs));
    EXPECT_EQ(4.0f, ps_bf16_to_float(Get<uint16_t>(9)[0]));
}

TEST_F(KvStore, CharAndOtherAreReplaced)
{
    Pairs p({1}, "abcd", 4, PS_DATA_CHAR);
    Pairs q({1}, "wxyz", 4, PS_DATA_CHAR);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &q.kvs));
    auto v = Get<char>(1);
    EXPECT_EQ("wxyz", std::string(v.begin(), v.end()));
    Pairs o({2}, "12", 2, PS_DATA_OTHER);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &o.kvs));
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &o.kvs));
    v = Get<char>(2);
    EXPECT_EQ("12", std::string(v.begin(), v.end()));
}

TEST_F(KvStore, ChangedTypeOrLengthReplaces)
{
    int32_t a[] = {5, 6};
    Pairs p({3}, a, sizeof(a), PS_DATA_INT32);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    int32_t b[] = {7};
    Pairs q({3}, b, sizeof(b), PS_DATA_INT32);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &q.kvs));
    EXPECT_EQ((std::vector<int32_t>{7}), Get<int32_t>(3));
    uint32_t c[] = {9};
    Pairs r({3}, c, sizeof(c), PS_DATA_UINT32);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &r.kvs));
    ps_data_type_t t;
    EXPECT_EQ((std::vector<int32_t>{9}), Get<int32_t>(3, &t));
    EXPECT_EQ(PS_DATA_UINT32, t);
}

TEST_F(KvStore, PerKeyLengths)
{
    int16_t v[] = {1, 2, 3, 4, 5, 6};
    Pairs p({100, 200, 300}, v, sizeof(v), PS_DATA_INT16, {1, 0, 5});
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    EXPECT_EQ((std::vector<int16_t>{1}), Get<int16_t>(100));
    EXPECT_EQ((std::vector<int16_t>{}), Get<int16_t>(200));
    EXPECT_EQ((std::vector<int16_t>{2, 3, 4, 5, 6}), Get<int16_t>(300));
}

TEST_F(KvStore, RejectsSizesThatDoNotAddUp)
{
    int32_t v[] = {1, 2, 3};
    Pairs uneven({1, 2}, v, sizeof(v), PS_DATA_INT32);  // 12 bytes over 2 keys of int32
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_store_push(store_, &uneven.kvs));
    Pairs lens({1, 2}, v, sizeof(v), PS_DATA_INT32, {1, 1});
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_store_push(store_, &lens.kvs));
    Pairs neg({1, 2}, v, sizeof(v), PS_DATA_INT32, {-1, 4});
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_store_push(store_, &neg.kvs));
    EXPECT_EQ(0u, ps_kv_store_num_keys(store_));
}

TEST_F(KvStore, PullAnswersValuesLengthsAndUnknownKeys)
{
    int32_t v[] = {1, 2, 3, 4, 5};
    Pairs p({10, 30}, v, sizeof(v), PS_DATA_INT32, {2, 3});
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));

    Pairs req({10, 20, 30}, nullptr, 0, PS_DATA_INT32);
    ps_kv_pairs_t res;
    ASSERT_EQ(PS_OK, ps_kv_store_pull(store_, &req.kvs, &res));
    ASSERT_EQ(24u, res.keys.len);
    EXPECT_EQ(0, memcmp(ps_slice_ptr(&res.keys), ps_slice_ptr(&req.kvs.keys), 24));
    ASSERT_EQ(12u, res.lens.len);
    int32_t lens[3];
    memcpy(lens, ps_slice_ptr(&res.lens), 12);
    EXPECT_EQ(2, lens[0]);
    EXPECT_EQ(0, lens[1]);  // never pushed
    EXPECT_EQ(3, lens[2]);
    ASSERT_EQ(sizeof(v), res.vals.len);
    EXPECT_EQ(0, memcmp(v, ps_slice_ptr(&res.vals), sizeof(v)));
    EXPECT_EQ(PS_DATA_INT32, res.type);

    // The answer is a snapshot: a later push does not change it.
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    EXPECT_EQ(0, memcmp(v, ps_slice_ptr(&res.vals), sizeof(v)));
    ps_slice_unref(&res.keys);
    ps_slice_unref(&res.vals);
    ps_slice_unref(&res.lens);

    uint64_t k = 42;
    size_t len = 7;
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps_kv_store_get(store_, k, nullptr, 0, &len, nullptr));
    EXPECT_EQ(7u, len);  // untouched on failure
}

TEST_F(KvStore, ManyKeysGrowTheTable)
{
    std::vector<uint64_t> keys;
    std::vector<int64_t> vals;
    for (uint64_t i = 0; i < 5000; i++) {
        keys.push_back(i * 977);
        vals.push_back((int64_t)i);
    }
    Pairs p(keys, vals.data(), vals.size() * 8, PS_DATA_INT64);
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
    EXPECT_EQ(5000u, ps_kv_store_num_keys(store_));
    for (uint64_t i = 0; i < 5000; i += 499)
        EXPECT_EQ((std::vector<int64_t>{(int64_t)(2 * i)}), Get<int64_t>(i * 977));
}

TEST_F(KvStore, ConcurrentPushesLoseNothing)
{
    const int threads = 4, rounds = 500;
    std::vector<uint64_t> keys = {1, 2, 3, 1000000};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            std::vector<uint64_t> one = {1, 2, 3, 1000000};
            int64_t v[8];
            for (int i = 0; i < 8; i++)
                v[i] = t + 1;
            Pairs p(one, v, sizeof(v), PS_DATA_INT64);
            for (int r = 0; r < rounds; r++)
                ASSERT_EQ(PS_OK, ps_kv_store_push(store_, &p.kvs));
        });
    }
    for (auto &t : ts)
        t.join();
    // Sum over threads of (t+1) * rounds; the first push copied, which is
    // the same as adding to zero.
    int64_t want = (int64_t)rounds * (1 + 2 + 3 + 4);
    for (uint64_t k : keys)
        EXPECT_EQ((std::vector<int64_t>{want, want}), Get<int64_t>(k));
}

}  // namespace

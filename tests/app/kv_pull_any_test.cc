// Pulls whose value lengths the server decides (ps_kv_pull_any, ps-lite's
// ZPull with lens to fill): every key's values and lengths arrive in key
// order, from the lane (copied) and from messages (the van's buffer kept);
// a server without lengths splits its bytes evenly; lengths that do not add
// up fail the request, which then keeps nothing; a result is taken once.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/net/postoffice.h"
#include "tests/lib/small_job.h"
}

namespace {

constexpr ps_key_t kNoLens = 1000;  // answered without lengths: 6 elements per key
constexpr ps_key_t kBadLens = 2000; // lengths that say one element more than sent

// Key k's value: k elements of uint32 (k + element index), or as above.
void Handle(void *, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req, ps_kv_server_t *server)
{
    if (!meta->pull) {
        EXPECT_EQ(PS_OK, ps_kv_server_respond(server, meta, nullptr));
        return;
    }
    EXPECT_EQ(0u, meta->val_len) << "a server-sized pull names no destination size";
    const size_t nk = req->keys.len / sizeof(ps_key_t);
    const auto *keys = static_cast<const ps_key_t *>(ps_slice_ptr(&req->keys));
    const bool no_lens = keys[0] >= kNoLens && keys[0] < kBadLens;
    std::vector<uint32_t> vals;
    std::vector<int32_t> lens;
    for (size_t i = 0; i < nk; i++) {
        const size_t n = no_lens ? 6 : keys[i] % 1000;
        for (size_t j = 0; j < n; j++)
            vals.push_back(static_cast<uint32_t>(keys[i] + j));
        lens.push_back(static_cast<int32_t>(n));
    }
    if (keys[0] >= kBadLens)
        lens[0]++;
    ps_kv_pairs_t res = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                         PS_DATA_UINT32};
    res.keys = req->keys;
    ASSERT_EQ(PS_OK, ps_slice_alloc(vals.size() * 4, 0, &res.vals));
    if (!vals.empty())
        memcpy(ps_slice_ptr(&res.vals), vals.data(), vals.size() * 4);
    if (!no_lens) {
        ASSERT_EQ(PS_OK, ps_slice_alloc(lens.size() * 4, 0, &res.lens));
        memcpy(ps_slice_ptr(&res.lens), lens.data(), lens.size() * 4);
    }
    EXPECT_EQ(PS_OK, ps_kv_server_respond(server, meta, &res));
    ps_slice_unref(&res.vals);
    ps_slice_unref(&res.lens);
}

class KvPullAny : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override
    {
        small_job_opts_t o = {GetParam().c_str(), 0, 0, 0};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 0, Handle, nullptr, &srv_));
        ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
    }
    void TearDown() override
    {
        ps_kv_worker_destroy(w_);
        ps_kv_server_destroy(srv_);
        small_job_finalize(po_, 1);
    }

    // Pulls keys; PS_OK with *vals / *lens filled, or the wait's status.
    ps_status_t Pull(const std::vector<ps_key_t> &keys, std::vector<uint32_t> *vals,
                     std::vector<int32_t> *lens)
    {
        ps_slice_t k;
        EXPECT_EQ(PS_OK, ps_slice_alloc(keys.size() * sizeof(ps_key_t), 0, &k));
        if (k.len > 0) // an empty vector's data() may be null
            memcpy(ps_slice_ptr(&k), keys.data(), k.len);
        int ts;
        ps_status_t st = ps_kv_pull_any(w_, &k, PS_DATA_UINT32, 0, nullptr, nullptr, &ts);
        ps_slice_unref(&k);
        if (st != PS_OK)
            return st;
        if ((st = ps_kv_wait(w_, ts, 10000)) != PS_OK) {
            ps_slice_t v, l;
            EXPECT_EQ(PS_ERR_NOT_FOUND, ps_kv_pull_result(w_, ts, &v, &l))
                << "a failed pull kept a result";
            return st;
        }
        ps_slice_t v, l;
        EXPECT_EQ(PS_OK, ps_kv_pull_result(w_, ts, &v, &l));
        vals->assign(static_cast<uint32_t *>(ps_slice_ptr(&v)),
                     static_cast<uint32_t *>(ps_slice_ptr(&v)) + v.len / 4);
        lens->assign(static_cast<int32_t *>(ps_slice_ptr(&l)),
                     static_cast<int32_t *>(ps_slice_ptr(&l)) + l.len / 4);
        ps_slice_unref(&v);
        ps_slice_unref(&l);
        EXPECT_EQ(PS_ERR_NOT_FOUND, ps_kv_pull_result(w_, ts, &v, &l)) << "taken twice";
        return PS_OK;
    }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    ps_kv_server_t *srv_ = nullptr;
    ps_kv_worker_t *w_ = nullptr;
};

// What Handle answers for keys with lengths.
void Expected(const std::vector<ps_key_t> &keys, std::vector<uint32_t> *vals,
              std::vector<int32_t> *lens)
{
    for (ps_key_t k : keys) {
        for (size_t j = 0; j < k % 1000; j++)
            vals->push_back(static_cast<uint32_t>(k + j));
        lens->push_back(static_cast<int32_t>(k % 1000));
    }
}

} // namespace

TEST_P(KvPullAny, ValuesAndLengthsAsTheServerSizedThem)
{
    ps_kv_worker_stats_t before, after;
    // Small (the lane where the van has one) and large (a message whose
    // receive buffer the result keeps), one key with no value among them.
    for (const std::vector<ps_key_t> &keys :
         {std::vector<ps_key_t>{3, 5, 8}, std::vector<ps_key_t>{7, 400, 900, 999},
          std::vector<ps_key_t>{0, 11, 600}}) {
        std::vector<uint32_t> got, want;
        std::vector<int32_t> lens, want_lens;
        Expected(keys, &want, &want_lens);
        ps_kv_worker_stats(w_, &before);
        ASSERT_EQ(PS_OK, Pull(keys, &got, &lens));
        ps_kv_worker_stats(w_, &after);
        EXPECT_EQ(want_lens, lens);
        EXPECT_EQ(want, got);
        EXPECT_EQ(want.size() * 4, (after.pull_bytes_in_place - before.pull_bytes_in_place) +
                                       (after.pull_bytes_small - before.pull_bytes_small));
    }
}

TEST_P(KvPullAny, WithoutLengthsTheBytesSplitEvenly)
{
    std::vector<uint32_t> got;
    std::vector<int32_t> lens;
    ASSERT_EQ(PS_OK, Pull({kNoLens, kNoLens + 1, kNoLens + 2}, &got, &lens));
    EXPECT_EQ((std::vector<int32_t>{6, 6, 6}), lens);
    ASSERT_EQ(18u, got.size());
    EXPECT_EQ(kNoLens + 1 + 5, got[11]);
}

TEST_P(KvPullAny, LengthsThatDoNotAddUpFailTheRequest)
{
    std::vector<uint32_t> got;
    std::vector<int32_t> lens;
    EXPECT_EQ(PS_ERR_PROTOCOL, Pull({kBadLens + 3, kBadLens + 4}, &got, &lens));
    // The worker goes on.
    ASSERT_EQ(PS_OK, Pull({2}, &got, &lens));
    EXPECT_EQ((std::vector<uint32_t>{2, 3}), got);
}

TEST_P(KvPullAny, NoKeysCompletesWithAnEmptyResult)
{
    std::vector<uint32_t> got{1};
    std::vector<int32_t> lens{1};
    ASSERT_EQ(PS_OK, Pull({}, &got, &lens));
    EXPECT_TRUE(got.empty());
    EXPECT_TRUE(lens.empty());
}

INSTANTIATE_TEST_SUITE_P(Vans, KvPullAny, ::testing::Values("tcp", "shm", "fabric", "ucx"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

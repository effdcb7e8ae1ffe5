// A server's handler fails requests with ps_kv_server_respond_error: the
// worker's wait and callback get that status, a failed pull's destination
// keeps its bytes, and the next request is answered as usual; values of
// another type than the pull's destination are refused. Over tcp and shm,
// for pushes and pulls, small (the small lane's size) and large.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/app/kv_error.h"
#include "ps/base/buffer.h"
#include "ps/net/postoffice.h"
#include "tests/lib/small_job.h"
}

namespace {

constexpr uint8_t kPoison = 0xA5;
constexpr ps_key_t kBadKey = 13; // the handler fails requests for this key

// Fails requests for kBadKey with PS_ERR_NOT_FOUND; answers the others
// (pushes with an acknowledgement, pulls with bytes equal to 7).
void Handle(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
            ps_kv_server_t *server)
{
    auto *handled = static_cast<std::atomic<int> *>(arg);
    handled->fetch_add(1);
    if (meta->key == kBadKey) {
        EXPECT_EQ(PS_OK, ps_kv_server_respond_error(server, meta, PS_ERR_NOT_FOUND));
        return;
    }
    if (!meta->pull) {
        EXPECT_EQ(PS_OK, ps_kv_server_respond(server, meta, nullptr));
        return;
    }
    ps_kv_pairs_t res = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                         PS_DATA_UINT8};
    res.keys = req->keys;
    ASSERT_EQ(PS_OK, ps_slice_alloc(meta->val_len, 0, &res.vals));
    memset(ps_slice_ptr(&res.vals), 7, meta->val_len);
    EXPECT_EQ(PS_OK, ps_kv_server_respond(server, meta, &res));
    ps_slice_unref(&res.vals);
}

struct Done {
    std::atomic<int> calls{0};
    std::atomic<int> status{1};
    static void Fn(void *arg, int, ps_status_t st)
    {
        auto *d = static_cast<Done *>(arg);
        d->status = st;
        d->calls++;
    }
};

class KvError : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {
  protected:
    void SetUp() override
    {
        small_job_opts_t o = {std::get<0>(GetParam()).c_str(), 0, 0, 0};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 0, Handle, &handled_, &srv_));
        ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
    }
    void TearDown() override
    {
        ps_kv_worker_destroy(w_);
        ps_kv_server_destroy(srv_);
        small_job_finalize(po_, 1);
    }

    // A pull of `key` as `type` must end with `want`, its destination
    // keeping every byte it had.
    void ExpectPullFails(ps_key_t key, ps_data_type_t type, ps_status_t want, const char *why)
    {
        const size_t bytes = std::get<1>(GetParam());
        std::vector<uint8_t> dest(bytes, kPoison);
        int ts;
        ASSERT_EQ(PS_OK, ps_kv_pull(w_, &key, 1, dest.data(), bytes, nullptr, type, 0, nullptr,
                                    nullptr, &ts));
        EXPECT_EQ(want, ps_kv_wait(w_, ts, 10000));
        EXPECT_EQ(PS_OK, ps_kv_cancel(w_, ts, 10000));
        for (uint8_t b : dest)
            ASSERT_EQ(kPoison, b) << why;
    }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    std::atomic<int> handled_{0};
    ps_kv_server_t *srv_ = nullptr;
    ps_kv_worker_t *w_ = nullptr;
};

} // namespace

TEST_P(KvError, TheWorkerGetsTheServersStatus)
{
    const size_t bytes = std::get<1>(GetParam());
    std::vector<uint8_t> vals(bytes, 1);
    ps_key_t bad = kBadKey, good = 14;

    Done push_done;
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_push(w_, &bad, 1, vals.data(), bytes, nullptr, PS_DATA_UINT8, 0,
                                Done::Fn, &push_done, &ts));
    EXPECT_EQ(PS_ERR_NOT_FOUND, ps_kv_wait(w_, ts, 10000));
    EXPECT_EQ(1, push_done.calls.load());
    EXPECT_EQ(PS_ERR_NOT_FOUND, push_done.status.load());

    ExpectPullFails(bad, PS_DATA_UINT8, PS_ERR_NOT_FOUND,
                    "a failed pull's destination was written");

    // The worker and the connection go on as usual.
    std::vector<uint8_t> dest(bytes, kPoison);
    ASSERT_EQ(PS_OK, ps_kv_pull(w_, &good, 1, dest.data(), bytes, nullptr, PS_DATA_UINT8, 0,
                                nullptr, nullptr, &ts));
    EXPECT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    for (uint8_t b : dest)
        ASSERT_EQ(7, b);
    EXPECT_EQ(3, handled_.load());
}

// The handler answers uint8 values: a pull into int16 (as many bytes) is
// refused, its destination untouched; one into bytes of no stated type
// (CHAR, OTHER) takes them.
TEST_P(KvError, ValuesOfAnotherTypeAreRefused)
{
    const size_t bytes = std::get<1>(GetParam());
    ps_key_t good = 14;
    ExpectPullFails(good, PS_DATA_INT16, PS_ERR_PROTOCOL, "values of another type were written");
    std::vector<uint8_t> dest(bytes, kPoison);
    int ts;
    for (ps_data_type_t untyped : {PS_DATA_CHAR, PS_DATA_OTHER}) {
        std::fill(dest.begin(), dest.end(), kPoison);
        ASSERT_EQ(PS_OK, ps_kv_pull(w_, &good, 1, dest.data(), bytes, nullptr, untyped, 0,
                                    nullptr, nullptr, &ts));
        EXPECT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000)) << ps_data_type_str(untyped);
        for (uint8_t b : dest)
            ASSERT_EQ(7, b);
    }
}

TEST_P(KvError, OnlyErrorsMayBeSent)
{
    ps_kv_meta_t meta;
    memset(&meta, 0, sizeof(meta));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_server_respond_error(srv_, &meta, PS_OK));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_server_respond_error(srv_, &meta, (ps_status_t)1));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_server_respond_error(srv_, &meta, (ps_status_t)-500));
}

INSTANTIATE_TEST_SUITE_P(
    Vans, KvError,
    ::testing::Combine(::testing::Values("tcp", "shm"), ::testing::Values(64, 1 << 20)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, size_t>> &i) {
        return std::get<0>(i.param) + "_" + std::to_string(std::get<1>(i.param));
    });

// The record itself: what a peer sends is read strictly.
TEST(KvErrorRecord, RoundTripAndMalformed)
{
    uint8_t b[PS__KV_ERROR_LEN];
    ps__kv_error_pack(PS_ERR_PEER_GONE, b);
    EXPECT_EQ(PS_ERR_PEER_GONE, ps__kv_error_read(b, sizeof(b)));
    EXPECT_EQ(PS_ERR_PROTOCOL, ps__kv_error_read(b, sizeof(b) - 1));
    EXPECT_EQ(PS_OK, ps__kv_error_read(b, 4)); // not the tag: no error answer
    uint8_t other[PS__KV_ERROR_LEN] = {'x'};
    EXPECT_EQ(PS_OK, ps__kv_error_read(other, sizeof(other)));
    b[PS__KV_ERROR_TAG_LEN] = 5; // a positive status is no error
    b[PS__KV_ERROR_TAG_LEN + 1] = b[PS__KV_ERROR_TAG_LEN + 2] = b[PS__KV_ERROR_TAG_LEN + 3] = 0;
    EXPECT_EQ(PS_ERR_PROTOCOL, ps__kv_error_read(b, sizeof(b)));
    EXPECT_EQ(PS_OK, ps__kv_error_read(nullptr, 0));
}

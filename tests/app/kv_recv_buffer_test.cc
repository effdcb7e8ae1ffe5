// Registered receive buffers (ps_kv_server_register_recv_buffer, ps-lite's
// RegisterRecvBuffer): a push from (worker rank, first key) lands in the
// buffer the server registered for it, where the van receives in place;
// other keys, values too big for the buffer and values small enough for
// the lane land elsewhere; every value arrives intact either way.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/net/caps.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"
#include "tests/lib/small_job.h"
}

namespace {

constexpr ps_key_t kKey = 42;
constexpr size_t kBufBytes = 1 << 20;

struct Seen {
    std::atomic<int> pushes{0};
    std::atomic<int> landed{0};   // values that were in the registered buffer
    std::atomic<int> intact{0};   // values whose bytes were the pushed pattern
    const void *buffer = nullptr; // the registered buffer's start
};

// Pushed bytes are (key + i) & 0xff.
void Handle(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req, ps_kv_server_t *server)
{
    auto *seen = static_cast<Seen *>(arg);
    seen->pushes++;
    const auto *v = static_cast<const uint8_t *>(ps_slice_ptr(&req->vals));
    if (v == seen->buffer)
        seen->landed++;
    bool ok = req->vals.len > 0;
    for (size_t i = 0; ok && i < req->vals.len; i++)
        ok = v[i] == static_cast<uint8_t>((meta->key + i) & 0xff);
    if (ok)
        seen->intact++;
    EXPECT_EQ(PS_OK, ps_kv_server_respond(server, meta, nullptr));
}

class KvRecvBuffer : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override
    {
        small_job_opts_t o = {GetParam().c_str(), 0, 0, 0};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_slice_alloc(kBufBytes, 4096, &buf_));
        seen_.buffer = ps_slice_ptr(&buf_);
        ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 0, Handle, &seen_, &srv_));
        ASSERT_EQ(PS_OK, ps_kv_server_register_recv_buffer(srv_, 0, kKey, &buf_));
        ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
        in_place_ = (ps_postoffice_capabilities(po_[SMALL_JOB_SERVER]) & PS_CAP_RECV_INTO_DEST) != 0;
    }
    void TearDown() override
    {
        ps_kv_worker_destroy(w_);
        ps_kv_server_destroy(srv_);
        ps_slice_unref(&buf_);
        small_job_finalize(po_, 1);
    }

    void Push(ps_key_t key, size_t bytes)
    {
        std::vector<uint8_t> v(bytes);
        for (size_t i = 0; i < bytes; i++)
            v[i] = static_cast<uint8_t>((key + i) & 0xff);
        int ts;
        ASSERT_EQ(PS_OK, ps_kv_push(w_, &key, 1, v.data(), bytes, nullptr, PS_DATA_UINT8, 0,
                                    nullptr, nullptr, &ts));
        ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    Seen seen_;
    ps_slice_t buf_ = PS_SLICE_EMPTY_INIT;
    ps_kv_server_t *srv_ = nullptr;
    ps_kv_worker_t *w_ = nullptr;
    bool in_place_ = false;
};

} // namespace

TEST_P(KvRecvBuffer, PushesOfTheRegisteredKeyLandInItsBuffer)
{
    // Whether a push landed in the buffer.
    auto landed = [this](ps_key_t key, size_t bytes) {
        int before = seen_.landed.load();
        Push(key, bytes);
        return seen_.landed.load() - before;
    };
    const int want = in_place_ ? 1 : 0;
    EXPECT_EQ(want, landed(kKey, 256 << 10))
        << (in_place_ ? "the van receives in place but the values landed elsewhere"
                      : "a van without PS_CAP_RECV_INTO_DEST wrote into the buffer");
    EXPECT_EQ(want, landed(kKey, kBufBytes)) << "values that fill the buffer";
    EXPECT_EQ(0, landed(kKey + 1, 256 << 10)) << "another key";
    EXPECT_EQ(0, landed(kKey, kBufBytes + 4096)) << "too big for the buffer";
    // Small values: inline where the van has a small lane, else as others.
    const bool lane = ps_postoffice_lane_max(po_[SMALL_JOB_WORKER]) > 0;
    EXPECT_EQ(lane ? 0 : want, landed(kKey, 16)) << "small values";
    EXPECT_EQ(5, seen_.pushes.load());
    EXPECT_EQ(5, seen_.intact.load()) << "values arrived changed";
}

TEST_P(KvRecvBuffer, ARankAndKeyHaveOneBuffer)
{
    EXPECT_EQ(PS_ERR_EXISTS, ps_kv_server_register_recv_buffer(srv_, 0, kKey, &buf_));
    EXPECT_EQ(PS_OK, ps_kv_server_register_recv_buffer(srv_, 1, kKey, &buf_));
    ps_slice_t empty = PS_SLICE_EMPTY_INIT;
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_server_register_recv_buffer(srv_, 0, 7, &empty));
    EXPECT_EQ(PS_ERR_INVALID_ARG, ps_kv_server_register_recv_buffer(srv_, -1, 7, &buf_));
}

INSTANTIATE_TEST_SUITE_P(Vans, KvRecvBuffer, ::testing::Values("tcp", "shm", "fabric", "ucx"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

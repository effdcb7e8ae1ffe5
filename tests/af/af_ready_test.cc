// AF batches with a readiness event (ps_af_worker_batch_push_pull_when):
// the push tensor is written on a device stream after a delay and the
// server must see what the stream wrote, not what the memory held at the
// call; a batch never ready fails with PS_ERR_TIMED_OUT unsent, and the
// worker goes on. Answers with one (ps_af_server_respond_when): the
// worker must get what the server's stream wrote into its result, and an
// answer never ready is not sent. On the emulated device, over tcp and
// shm.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/app/af.h"
#include "ps/base/buffer.h"
#include "ps/base/time.h"
#include "ps/gpu/mem.h"
#include "ps/net/postoffice.h"
#include "tests/lib/small_job.h"
}

#include "tests/af/echo_server.h"
#include "tests/lib/emu_stream.h"

namespace {

constexpr int64_t kBytes = 64 << 10;
constexpr uint64_t kPushKey = 1, kPullKey = 100;

const ps_mem_ops_t *Emu()
{
    return ps_mem_ops(PS_MEM_EMU);
}

class AfReady : public ::testing::TestWithParam<std::string> {
  protected:
    void Start(int request_ms)
    {
        ASSERT_EQ(PS_OK, Emu()->init());
        small_job_opts_t o = {GetParam().c_str(), 0, 0, request_ms};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_af_server_create(po_[SMALL_JOB_SERVER], 0, EchoServer::Handle, &server_,
                                             &srv_));
        ASSERT_EQ(PS_OK, ps_af_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
        ASSERT_EQ(PS_OK, ps_mem_slice_alloc(PS_MEM_EMU, 0, kBytes, &dev_));
        ASSERT_EQ(PS_OK, Emu()->memset(ps_slice_ptr(&dev_), 0, kBytes));
        ASSERT_EQ(PS_OK, Emu()->stream_create(0, &stream_));
        ps_af_tensor_init(&push_, kPushKey, ps_slice_ptr(&dev_), PS_AF_UINT8, 1, &kBytes);
        push_.mem_kind = PS_MEM_EMU;
        ps_af_tensor_init(&pull_, kPullKey, out_.data(), PS_AF_UINT8, 1, &kBytes);
    }
    void TearDown() override
    {
        if (w_ != nullptr)
            ps_af_worker_destroy(w_);
        if (srv_ != nullptr)
            ps_af_server_destroy(srv_);
        small_job_finalize(po_, 1);
        if (stream_ != nullptr)
            Emu()->stream_destroy(stream_);
        ps_slice_unref(&dev_);
    }
    // Issues the batch behind the stream; the call's own time in *call_ms.
    ps_status_t Issue(ps_af_handle_t **h, double *call_ms)
    {
        ps_af_ready_t ready = {nullptr, stream_};
        uint64_t t0 = ps_time_now_ns();
        ps_status_t st = ps_af_worker_batch_push_pull_when(w_, &push_, 1, &pull_, 1, &ready, h);
        *call_ms = (double)(ps_time_now_ns() - t0) / 1e6;
        return st;
    }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    EchoServer server_{kBytes};
    ps_af_server_t *srv_ = nullptr;
    ps_af_worker_t *w_ = nullptr;
    ps_slice_t dev_ = PS_SLICE_EMPTY_INIT;
    void *stream_ = nullptr;
    std::vector<uint8_t> out_ = std::vector<uint8_t>(kBytes);
    ps_af_tensor_t push_, pull_;
};

} // namespace

TEST_P(AfReady, TheBatchCarriesWhatTheStreamWroteLate)
{
    ASSERT_NO_FATAL_FAILURE(Start(0));
    // The stream writes the values only once the gate opens, after the call
    // returned: a call that waited for the stream returns only when the
    // cap forces the gate, a batch sent at once carries zeros.
    Gate gate;
    GateCap cap(&gate);
    ASSERT_EQ(PS_OK, Emu()->launch_host_func(stream_, Gate::Wait, &gate));
    ASSERT_EQ(PS_OK, Emu()->memset_async(ps_slice_ptr(&dev_), 7, kBytes, stream_));
    ps_af_handle_t *h;
    double call_ms;
    ASSERT_EQ(PS_OK, Issue(&h, &call_ms));
    EXPECT_FALSE(cap.Forced()) << "the call waited for the stream (" << call_ms << " ms)";
    gate.open = true;
    ASSERT_EQ(PS_OK, ps_af_worker_wait(w_, h, 10000));
    ps_af_handle_release(w_, h);
    for (int64_t i = 0; i < kBytes; i++)
        ASSERT_EQ(7, out_[i]) << "byte " << i << ": the batch went before its data was ready";
    EXPECT_EQ(1, server_.batches.load());
}

TEST_P(AfReady, ABatchNeverReadyFailsUnsentAndTheNextGoes)
{
    ASSERT_NO_FATAL_FAILURE(Start(300));
    Gate gate;
    ASSERT_EQ(PS_OK, Emu()->launch_host_func(stream_, Gate::Wait, &gate));
    ps_af_handle_t *h;
    double call_ms;
    ASSERT_EQ(PS_OK, Issue(&h, &call_ms));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_af_worker_wait(w_, h, 10000));
    ps_af_handle_release(w_, h);
    gate.open = true;
    ASSERT_EQ(PS_OK, DrainEmuStream(stream_)); // the stream is done with the gate
    EXPECT_EQ(0, server_.batches.load()) << "a batch that was never ready reached the server";
    // The next batch (its data ready at once) goes, with the next sequence
    // number the server expects.
    ASSERT_EQ(PS_OK, Emu()->memset(ps_slice_ptr(&dev_), 3, kBytes));
    ASSERT_EQ(PS_OK, ps_af_worker_batch_push_pull(w_, &push_, 1, &pull_, 1, &h));
    ASSERT_EQ(PS_OK, ps_af_worker_wait(w_, h, 10000));
    ps_af_handle_release(w_, h);
    EXPECT_EQ(3, out_[0]);
    EXPECT_EQ(1, server_.batches.load());
}

// A server that answers each batch from device memory its stream writes
// once a gate opens: the answer waits for the stream, not the handler.
struct LateResults {
    void *stream = nullptr;
    ps_slice_t result = PS_SLICE_EMPTY_INIT;
    Gate *gate = nullptr;
    std::atomic<int> batches{0}, bad{0};

    static void Handle(void *arg, ps_af_server_t *server, ps_af_batch_t *b)
    {
        auto *l = static_cast<LateResults *>(arg);
        ps_af_tensor_t r = b->pull[0];
        r.data = ps_slice_ptr(&l->result);
        r.mem_kind = PS_MEM_EMU;
        r.device = 0;
        ps_af_ready_t ready = {nullptr, l->stream};
        if (Emu()->launch_host_func(l->stream, Gate::Wait, l->gate) != PS_OK ||
            Emu()->memset_async(ps_slice_ptr(&l->result), 9, l->result.len, l->stream) != PS_OK ||
            ps_af_server_respond_when(server, b, &r, nullptr, 1, &ready) != PS_OK)
            l->bad++;
        l->batches++;
    }
};

class AfReadyAnswers : public AfReady {
  protected:
    // A server (app 1) answering with LateResults, and a worker of it.
    void StartLate(Gate *gate)
    {
        ASSERT_NO_FATAL_FAILURE(Start(0));
        ASSERT_EQ(PS_OK, ps_mem_slice_alloc(PS_MEM_EMU, 0, kBytes, &late_.result));
        ASSERT_EQ(PS_OK, Emu()->memset(ps_slice_ptr(&late_.result), 0, kBytes));
        late_.stream = stream_;
        late_.gate = gate;
        ASSERT_EQ(PS_OK, ps_af_server_create(po_[SMALL_JOB_SERVER], 1, LateResults::Handle, &late_,
                                             &late_srv_));
        ASSERT_EQ(PS_OK, ps_af_worker_create(po_[SMALL_JOB_WORKER], 1, 0, &late_w_));
        ASSERT_EQ(PS_OK, Emu()->memset(ps_slice_ptr(&dev_), 1, kBytes));
    }
    void TearDown() override
    {
        if (late_w_ != nullptr)
            ps_af_worker_destroy(late_w_);
        if (late_srv_ != nullptr)
            ps_af_server_destroy(late_srv_);
        AfReady::TearDown();
        ps_slice_unref(&late_.result);
    }
    LateResults late_;
    ps_af_server_t *late_srv_ = nullptr;
    ps_af_worker_t *late_w_ = nullptr;
};

TEST_P(AfReadyAnswers, TheAnswerCarriesWhatTheServersStreamWrote)
{
    Gate gate;
    GateCap cap(&gate);
    ASSERT_NO_FATAL_FAILURE(StartLate(&gate));
    ps_af_handle_t *h;
    ASSERT_EQ(PS_OK, ps_af_worker_batch_push_pull(late_w_, &push_, 1, &pull_, 1, &h));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_af_worker_wait(late_w_, h, 300)) << "answered before the "
                                                                       "result was written";
    EXPECT_EQ(1, late_.batches.load());
    gate.open = true;
    ASSERT_EQ(PS_OK, ps_af_worker_wait(late_w_, h, 10000));
    ps_af_handle_release(late_w_, h);
    EXPECT_FALSE(cap.Forced()) << "the handler waited for the stream";
    EXPECT_EQ(0, late_.bad.load());
    for (int64_t i = 0; i < kBytes; i++)
        ASSERT_EQ(9, out_[i]) << "byte " << i;
    ASSERT_EQ(PS_OK, DrainEmuStream(stream_));
}

// An answer whose result is not ready when the worker's deadline passes is
// not sent; one still waiting when the server is destroyed is given up
// (its batch freed, nothing sent).
TEST_P(AfReadyAnswers, AnAnswerNotReadyIsNotSent)
{
    Gate gate;
    ASSERT_NO_FATAL_FAILURE(StartLate(&gate));
    ps_af_handle_t *h;
    ASSERT_EQ(PS_OK, ps_af_worker_batch_push_pull(late_w_, &push_, 1, &pull_, 1, &h));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_af_worker_wait(late_w_, h, 600));
    ps_af_handle_release(late_w_, h);
    EXPECT_EQ(0, out_[0]) << "an answer that was not ready arrived";
    ps_af_worker_destroy(late_w_);
    late_w_ = nullptr;
    ps_af_server_destroy(late_srv_);
    late_srv_ = nullptr;
    gate.open = true;
    ASSERT_EQ(PS_OK, DrainEmuStream(stream_));
    EXPECT_EQ(1, late_.batches.load());
    EXPECT_EQ(0, late_.bad.load());
}

INSTANTIATE_TEST_SUITE_P(Vans, AfReadyAnswers, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(Vans, AfReady, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

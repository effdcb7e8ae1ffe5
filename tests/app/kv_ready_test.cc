// Pushes that carry a readiness event: the values are written on a device
// stream after a delay, and the push (or a summed tensor's every part) must
// carry what the stream wrote, not what the memory held at the call; and
// server answers that carry one (ps_kv_server_respond_when). On the
// emulated device (its streams run on threads of their own), over tcp and
// shm.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ps/app/kv.h"
#include "ps/app/sum/partition.h"
#include "ps/app/sum/sum_server.h"
#include "ps/base/buffer.h"
#include "ps/base/time.h"
#include "ps/gpu/mem.h"
#include "ps/net/postoffice.h"
#include "tests/lib/small_job.h"
}

#include "tests/lib/emu_stream.h"

namespace {

constexpr size_t kFloats = 1 << 16;  // 256 KiB: messages, not the small lane
constexpr size_t kBytes = kFloats * sizeof(float);

const ps_mem_ops_t *Emu() { return ps_mem_ops(PS_MEM_EMU); }

class KvReady : public ::testing::TestWithParam<std::string> {
  protected:
    void Start(int request_ms)
    {
        ASSERT_EQ(PS_OK, Emu()->init());
        small_job_opts_t o = {GetParam().c_str(), 0, 0, request_ms};
        ASSERT_EQ(PS_OK, small_job_start(&o, po_));
        ASSERT_EQ(PS_OK, ps_kv_store_create(&store_));
        ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 0, ps_kv_store_handler,
                                             store_, &srv_));
        ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 0, 0, &w_));
        ASSERT_EQ(PS_OK, Emu()->alloc(kBytes, 0, &dev_));
        ps_buf_t *buf;
        ASSERT_EQ(PS_OK, ps_buf_wrap_mem(dev_, kBytes, (ps_buf_mem_t)PS_MEM_EMU, 0, nullptr,
                                         nullptr, &buf));
        ASSERT_EQ(PS_OK, ps_slice_of(buf, 0, kBytes, &vals_));
        ps_buf_unref(buf);
        ASSERT_EQ(PS_OK, ps_slice_wrap(&key_, sizeof(key_), nullptr, nullptr, &keys_));
        ASSERT_EQ(PS_OK, Emu()->memset(dev_, 0, kBytes));
        ASSERT_EQ(PS_OK, Emu()->stream_create(0, &stream_));
    }
    void TearDown() override
    {
        if (w_ != nullptr)
            ps_kv_worker_destroy(w_);
        if (srv_ != nullptr)
            ps_kv_server_destroy(srv_);
        if (store_ != nullptr)
            ps_kv_store_destroy(store_);
        small_job_finalize(po_, 1);
        ps_slice_unref(&keys_);
        ps_slice_unref(&vals_);
        if (stream_ != nullptr)
            Emu()->stream_destroy(stream_);
        if (dev_ != nullptr)
            Emu()->free(dev_);
    }
    // The stream writes `byte` into every byte of the values after `ms`.
    void FillLater(int *ms, int byte)
    {
        ASSERT_EQ(PS_OK, Emu()->launch_host_func(stream_, SleepOnStream, ms));
        ASSERT_EQ(PS_OK, Emu()->memset_async(dev_, byte, kBytes, stream_));
    }
    // The push that never went must not have reached the server: after one
    // ordinary push of ones, the server holds ones only.
    void ExpectOnlyAPushOfOnesArrives()
    {
        ps_kv_pairs_t push = Pairs();
        int ts;
        ASSERT_EQ(PS_OK, Emu()->memset(dev_, 1, kBytes));
        ASSERT_EQ(PS_OK, ps_kv_zpush(w_, &push, 0, nullptr, nullptr, &ts));
        ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
        std::vector<unsigned char> got = Pull();
        for (size_t i = 0; i < kBytes; i++)
            ASSERT_EQ(1, got[i]) << "byte " << i;
    }
    // The stream writes `byte` into every byte of the values once `gate`
    // opens.
    void FillWhenOpened(Gate *gate, int byte)
    {
        ASSERT_EQ(PS_OK, Emu()->launch_host_func(stream_, Gate::Wait, gate));
        ASSERT_EQ(PS_OK, Emu()->memset_async(dev_, byte, kBytes, stream_));
    }
    // Waits until the stream's work is done.
    void DrainStream() { ASSERT_EQ(PS_OK, DrainEmuStream(stream_)); }
    // What the server holds for the key, pulled into host memory.
    std::vector<unsigned char> Pull()
    {
        std::vector<unsigned char> got(kBytes);
        int ts;
        EXPECT_EQ(PS_OK, ps_kv_pull(w_, &key_, 1, got.data(), kBytes, nullptr, PS_DATA_UINT8,
                                    0, nullptr, nullptr, &ts));
        EXPECT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
        return got;
    }
    ps_kv_pairs_t Pairs() { return {keys_, vals_, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8}; }

    ps_postoffice_t *po_[SMALL_JOB_NODES] = {nullptr, nullptr, nullptr};
    ps_kv_store_t *store_ = nullptr;
    ps_kv_server_t *srv_ = nullptr;
    ps_kv_worker_t *w_ = nullptr;
    ps_key_t key_ = 7;
    ps_slice_t keys_ = PS_SLICE_EMPTY_INIT, vals_ = PS_SLICE_EMPTY_INIT;
    void *dev_ = nullptr;
    void *stream_ = nullptr;
};

TEST_P(KvReady, PushOnAStreamCarriesWhatTheStreamWrote)
{
    Start(0);
    Gate gate;
    GateCap cap(&gate);
    FillWhenOpened(&gate, 3);
    ps_kv_ready_t ready = {nullptr, stream_};
    ps_kv_pairs_t push = Pairs();
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_zpush_when(w_, &push, &ready, 0, nullptr, nullptr, &ts));
    EXPECT_FALSE(cap.Forced()) << "the call waited for the stream";
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_kv_wait(w_, ts, 200)) << "sent before the data was ready";
    gate.open = true;
    ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    std::vector<unsigned char> got = Pull();
    for (size_t i = 0; i < kBytes; i++)
        ASSERT_EQ(3, got[i]) << "byte " << i;
}

TEST_P(KvReady, PushWithTheCallersEventAndPushPull)
{
    Start(0);
    ps_mem_event_h ev;
    ASSERT_EQ(PS_OK, Emu()->event_create(0, &ev));
    int ms = 200;
    FillLater(&ms, 2);
    ASSERT_EQ(PS_OK, Emu()->event_record(ev, stream_));
    ps_kv_ready_t ready = {ev, nullptr};
    ps_kv_pairs_t push = Pairs();
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_zpush_when(w_, &push, &ready, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));

    // A push-pull behind a later fill: the answer is 2 + 1 in every byte.
    FillLater(&ms, 1);
    ASSERT_EQ(PS_OK, Emu()->event_record(ev, stream_));
    std::vector<unsigned char> out(kBytes);
    ps_slice_t out_slice;
    ASSERT_EQ(PS_OK, ps_slice_wrap(out.data(), kBytes, nullptr, nullptr, &out_slice));
    ps_kv_pairs_t pp_out = {keys_, out_slice, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
    ASSERT_EQ(PS_OK, ps_kv_zpushpull_when(w_, &push, &pp_out, &ready, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    for (size_t i = 0; i < kBytes; i++)
        ASSERT_EQ(3, out[i]) << "byte " << i;
    ps_slice_unref(&out_slice);
    EXPECT_EQ(PS_OK, Emu()->event_destroy(ev));
}

TEST_P(KvReady, DataNeverReadyFailsWithinTheRequestTimeoutUnsent)
{
    Start(400);
    Gate gate;
    ASSERT_EQ(PS_OK, Emu()->launch_host_func(stream_, Gate::Wait, &gate));
    ASSERT_EQ(PS_OK, Emu()->memset_async(dev_, 9, kBytes, stream_));
    ps_kv_ready_t ready = {nullptr, stream_};
    ps_kv_pairs_t push = Pairs();
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_zpush_when(w_, &push, &ready, 0, nullptr, nullptr, &ts));
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_kv_wait(w_, ts, 10000));
    gate.open = true;
    DrainStream();
    ExpectOnlyAPushOfOnesArrives();
}

TEST_P(KvReady, CancelledWhileWaitingIsNeverSent)
{
    Start(0);
    Gate gate;
    ASSERT_EQ(PS_OK, Emu()->launch_host_func(stream_, Gate::Wait, &gate));
    ASSERT_EQ(PS_OK, Emu()->memset_async(dev_, 5, kBytes, stream_));
    ps_kv_ready_t ready = {nullptr, stream_};
    ps_kv_pairs_t push = Pairs();
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_zpush_when(w_, &push, &ready, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_cancel(w_, ts, 1000));
    EXPECT_EQ(PS_ERR_CANCELLED, ps_kv_wait(w_, ts, 1000));
    gate.open = true;
    DrainStream();
    ps_sleep_ms(50);  // the event completed: the cancelled push had its turn
    ExpectOnlyAPushOfOnesArrives();
}

TEST_P(KvReady, HostValuesAndNoEventGoAtOnce)
{
    Start(0);
    std::vector<unsigned char> host(kBytes, 4);
    ps_slice_t host_slice;
    ASSERT_EQ(PS_OK, ps_slice_wrap(host.data(), kBytes, nullptr, nullptr, &host_slice));
    ps_kv_pairs_t push = {keys_, host_slice, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
    ps_kv_ready_t ready = {nullptr, stream_};  // host memory: nothing to wait for
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_zpush_when(w_, &push, &ready, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    ps_kv_ready_t none = {nullptr, nullptr};
    ASSERT_EQ(PS_OK, ps_kv_zpush_when(w_, &push, &none, 0, nullptr, nullptr, &ts));
    ASSERT_EQ(PS_OK, ps_kv_wait(w_, ts, 10000));
    std::vector<unsigned char> got = Pull();
    for (size_t i = 0; i < kBytes; i++)
        ASSERT_EQ(8, got[i]) << "byte " << i;
    ps_slice_unref(&host_slice);
}

TEST_P(KvReady, DestroyFailsAPushStillWaiting)
{
    Start(0);
    Gate gate;
    ASSERT_EQ(PS_OK, Emu()->launch_host_func(stream_, Gate::Wait, &gate));
    ps_kv_ready_t ready = {nullptr, stream_};
    ps_kv_pairs_t push = Pairs();
    std::atomic<int> why{1};
    int ts;
    ASSERT_EQ(PS_OK, ps_kv_zpush_when(
                         w_, &push, &ready, 0,
                         [](void *arg, int, ps_status_t st) {
                             static_cast<std::atomic<int> *>(arg)->store(st);
                         },
                         &why, &ts));
    EXPECT_EQ(PS_OK, ps_kv_worker_destroy_timed(w_, 300));
    w_ = nullptr;
    EXPECT_EQ(PS_ERR_SHUTDOWN, why.load());
    gate.open = true;
    DrainStream(); // the stream's thread is done with the gate
}

// A summed tensor of device memory (what ps.torch sums a CUDA gradient
// with): every part's push waits for the stream, and the sum lands in place.
TEST_P(KvReady, SumTensorPartsWaitForTheStream)
{
    Start(0);
    ps_sum_server_t *sums;
    ASSERT_EQ(PS_OK, ps_sum_server_create(po_[SMALL_JOB_SERVER], 1, nullptr, &sums));
    ps_kv_worker_t *sw;
    ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 1, 0, &sw));
    ps_sum_tensor_t *t;
    ASSERT_EQ(PS_OK, ps_sum_tensor_create(sw, po_[SMALL_JOB_WORKER], 0, PS_DATA_UINT8, kBytes,
                                          kBytes / 3 + 1, &t));
    ASSERT_EQ(3u, ps_sum_tensor_num_parts(t));
    Gate gate;
    GateCap cap(&gate);
    FillWhenOpened(&gate, 5);
    ps_kv_ready_t ready = {nullptr, stream_};
    ASSERT_EQ(PS_OK, ps_sum_tensor_start_when(t, PS_SUM_OP_PUSH_PULL, &vals_, &vals_, &ready));
    EXPECT_FALSE(cap.Forced()) << "the call waited for the stream";
    EXPECT_EQ(PS_ERR_TIMED_OUT, ps_sum_tensor_wait(t, 200)) << "summed before the data was ready";
    gate.open = true;
    ASSERT_EQ(PS_OK, ps_sum_tensor_wait(t, 10000));
    std::vector<unsigned char> got(kBytes);
    ASSERT_EQ(PS_OK, Emu()->copy_to_host(got.data(), dev_, kBytes));
    for (size_t i = 0; i < kBytes; i++)
        ASSERT_EQ(5, got[i]) << "byte " << i; // one worker: the sum is its own value
    ps_sum_tensor_destroy(t);
    ps_kv_worker_destroy(sw);
    ps_sum_server_destroy(sums);
}

// A server that answers pulls with device values a stream writes once a
// gate opens (ps_kv_server_respond_when with the stream), as app 2.
struct LateAnswers {
    void *stream = nullptr;
    ps_slice_t vals = PS_SLICE_EMPTY_INIT;
    Gate *gate = nullptr;
    std::atomic<int> calls{0}, bad{0};

    static void Handle(void *arg, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                       ps_kv_server_t *server)
    {
        auto *a = static_cast<LateAnswers *>(arg);
        ps_kv_pairs_t res = {req->keys, a->vals, PS_SLICE_EMPTY_INIT, PS_DATA_UINT8};
        ps_kv_ready_t ready = {nullptr, a->stream};
        if (Emu()->launch_host_func(a->stream, Gate::Wait, a->gate) != PS_OK ||
            Emu()->memset_async(ps_slice_ptr(&a->vals), 6, a->vals.len, a->stream) != PS_OK ||
            ps_kv_server_respond_when(server, meta, &res, &ready) != PS_OK)
            a->bad++;
        a->calls++;
    }
};

// The server's answer waits for the stream that writes its values: the
// handler returns at once, the pull ends only after the gate opened, and
// it carries what the stream wrote.
// App 2 of the job: a LateAnswers server and a worker, and a pull of the
// worker's into `got` (its ts in *ts_p), not answered within 300 ms.
class KvReadyAnswers : public KvReady {
  protected:
    void PullLate(Gate *gate, std::vector<unsigned char> *got, int *ts_p)
    {
        Start(0);
        a_.stream = stream_;
        a_.vals = vals_;
        a_.gate = gate;
        ASSERT_EQ(PS_OK, ps_kv_server_create(po_[SMALL_JOB_SERVER], 2, LateAnswers::Handle, &a_,
                                             &srv2_));
        ASSERT_EQ(PS_OK, ps_kv_worker_create(po_[SMALL_JOB_WORKER], 2, 0, &w2_));
        got->assign(kBytes, 0);
        ASSERT_EQ(PS_OK, ps_kv_pull(w2_, &key_, 1, got->data(), kBytes, nullptr, PS_DATA_UINT8,
                                    0, nullptr, nullptr, ts_p));
        EXPECT_EQ(PS_ERR_TIMED_OUT, ps_kv_wait(w2_, *ts_p, 300))
            << "answered before the stream wrote";
    }
    void TearDown() override
    {
        if (w2_ != nullptr)
            ps_kv_worker_destroy(w2_);
        if (srv2_ != nullptr)
            ps_kv_server_destroy(srv2_);
        KvReady::TearDown();
    }
    LateAnswers a_;
    ps_kv_server_t *srv2_ = nullptr;
    ps_kv_worker_t *w2_ = nullptr;
};

TEST_P(KvReadyAnswers, AnAnswerOnAStreamGoesOnceTheStreamWroteIt)
{
    Gate gate;
    GateCap cap(&gate);
    std::vector<unsigned char> got;
    int ts;
    ASSERT_NO_FATAL_FAILURE(PullLate(&gate, &got, &ts));
    EXPECT_EQ(1, a_.calls.load());
    gate.open = true;
    ASSERT_EQ(PS_OK, ps_kv_wait(w2_, ts, 10000));
    EXPECT_FALSE(cap.Forced()) << "the handler waited for the stream";
    EXPECT_EQ(0, a_.bad.load());
    for (size_t i = 0; i < kBytes; i++)
        ASSERT_EQ(6, got[i]) << "byte " << i;
    DrainStream();
}

// An answer still waiting for its values when the server is destroyed
// fails the request with PS_ERR_SHUTDOWN.
TEST_P(KvReadyAnswers, AnAnswerStillWaitingAtDestroyFailsTheRequest)
{
    Gate gate;
    std::vector<unsigned char> got;
    int ts;
    ASSERT_NO_FATAL_FAILURE(PullLate(&gate, &got, &ts));
    ps_kv_server_destroy(srv2_);
    srv2_ = nullptr;
    EXPECT_EQ(PS_ERR_SHUTDOWN, ps_kv_wait(w2_, ts, 10000));
    gate.open = true;
    DrainStream();
}

INSTANTIATE_TEST_SUITE_P(Vans, KvReady, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });
INSTANTIATE_TEST_SUITE_P(Vans, KvReadyAnswers, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

}  // namespace

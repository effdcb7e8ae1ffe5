// Holding an emulated device stream back (the ready tests of the KV and AF
// apps): host functions queued on the stream, which runs them on a thread
// of its own, so the work queued after them waits.
#ifndef PS_TESTS_LIB_EMU_STREAM_H_
#define PS_TESTS_LIB_EMU_STREAM_H_

#include <atomic>
#include <thread>

extern "C" {
#include "ps/base/time.h"
#include "ps/gpu/mem.h"
}

// Sleeps *(int *)arg milliseconds on the stream's thread.
inline void SleepOnStream(void *arg) { ps_sleep_ms(*static_cast<int *>(arg)); }

// Blocks the stream until opened: an event that does not complete.
struct Gate {
    std::atomic<bool> open{false};
    static void Wait(void *arg)
    {
        auto *g = static_cast<Gate *>(arg);
        while (!g->open.load())
            ps_sleep_ms(1);
    }
};

// Opens a Gate after 30 s unless the test opened it first: a call that
// should not wait for the stream but does then returns, and Forced() says
// so, instead of the test hanging.
class GateCap {
  public:
    explicit GateCap(Gate *gate) : gate_(gate), thread_([this] { Run(); }) {}
    ~GateCap()
    {
        done_.store(true);
        thread_.join();
    }
    bool Forced() const { return forced_.load(); }

  private:
    void Run()
    {
        for (int ms = 0; ms < 30000 && !done_.load() && !gate_->open.load(); ms++)
            ps_sleep_ms(1);
        if (!done_.load() && !gate_->open.load()) {
            forced_.store(true);
            gate_->open.store(true);
        }
    }
    Gate *gate_;
    std::atomic<bool> done_{false}, forced_{false};
    std::thread thread_;
};

// Waits (up to 10 s) until the work queued on an emulated stream so far is
// done: after opening a Gate, before the Gate goes out of scope.
inline ps_status_t DrainEmuStream(void *stream)
{
    const ps_mem_ops_t *emu = ps_mem_ops(PS_MEM_EMU);
    ps_mem_event_h ev;
    ps_status_t st = emu->event_create(0, &ev);
    if (st != PS_OK)
        return st;
    if ((st = emu->event_record(ev, stream)) == PS_OK)
        st = ps_mem_event_wait(ev, 10000);
    ps_status_t dst = emu->event_destroy(ev);
    return st != PS_OK ? st : dst;
}

#endif  // PS_TESTS_LIB_EMU_STREAM_H_

// Holding an emulated device stream back (the ready tests of the KV and AF
// apps): host functions queued on the stream, which runs them on a thread
// of its own, so the work queued after them waits.
#ifndef PS_TESTS_LIB_EMU_STREAM_H_
#define PS_TESTS_LIB_EMU_STREAM_H_

#include <atomic>

extern "C" {
#include "ps/base/time.h"
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

#endif  // PS_TESTS_LIB_EMU_STREAM_H_

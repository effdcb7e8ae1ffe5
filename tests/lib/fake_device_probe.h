// A device probe for tests (ps/base/device_probe.h): the kind is "in use"
// on device 0 while FakeDeviceProbe::in_use is set, and its probe buffers
// are host memory from a static arena, counted as they are taken and
// given back. C++ tests; one instance per test binary.
#ifndef TESTS_LIB_FAKE_DEVICE_PROBE_H_
#define TESTS_LIB_FAKE_DEVICE_PROBE_H_

#include <atomic>
#include <cstddef>

extern "C" {
#include "ps/base/device_probe.h"
}

struct FakeDeviceProbe {
    static std::atomic<bool> in_use;
    static std::atomic<int> allocs, frees;
    alignas(4096) static unsigned char arena[65536];

    // Installs the probe for `kind`, not in use, counters at 0.
    static void Install(ps_mem_kind_t kind)
    {
        in_use = false;
        allocs = 0;
        frees = 0;
        static const ps_device_probe_ops_t ops = {InUse, Alloc, Free, nullptr};
        ps_device_probe_set(kind, &ops);
    }
    static void Remove(ps_mem_kind_t kind)
    {
        ps_device_probe_set(kind, nullptr);
        in_use = false;
    }

  private:
    static ps_status_t InUse(int *device_p)
    {
        if (!in_use)
            return PS_ERR_NOT_FOUND;
        *device_p = 0;
        return PS_OK;
    }
    static ps_status_t Alloc(size_t len, int, void **ptr_p)
    {
        if (len > sizeof(arena))
            return PS_ERR_NO_MEMORY;
        allocs++;
        *ptr_p = arena;
        return PS_OK;
    }
    static ps_status_t Free(void *)
    {
        frees++;
        return PS_OK;
    }
};

inline std::atomic<bool> FakeDeviceProbe::in_use{false};
inline std::atomic<int> FakeDeviceProbe::allocs{0};
inline std::atomic<int> FakeDeviceProbe::frees{0};
alignas(4096) inline unsigned char FakeDeviceProbe::arena[65536];

#endif  // TESTS_LIB_FAKE_DEVICE_PROBE_H_

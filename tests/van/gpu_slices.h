// For the GPUDirect tests of the RDMA vans: CUDA and host slices filled with
// the harness's pattern, and a KV-shaped message (keys, then values) sent
// through a van. The CUDA kind must be linked (//ps/gpu:cuda).
#ifndef TESTS_VAN_GPU_SLICES_H_
#define TESTS_VAN_GPU_SLICES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/van/van_harness.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/gpu/mem.h"
}

namespace ps_van_test {

inline const ps_mem_ops_t *Cuda()
{
    return ps_mem_ops(PS_MEM_CUDA);
}

// The pattern of (seq, seg) over len bytes.
std::string PatternBytes(uint64_t seq, unsigned seg, size_t len);

// len bytes of CUDA memory on device 0, holding the pattern of (seq, seg)
// when seq is not 0, else zeros; freed with its last reference.
ps_slice_t CudaSlice(size_t len, uint64_t seq = 0, unsigned seg = 0);

// len bytes of host memory holding the pattern of (seq, seg).
ps_slice_t PatternSlice(size_t len, uint64_t seq, unsigned seg);

// A request (or, with request false, a response) `seq` from `from` to node
// `to` for `key`: keys, then vals when not empty; a pull asks val_len bytes.
ps_status_t SendKv(VanBase &from, int to, uint64_t seq, uint64_t key, ps_slice_t keys,
                   ps_slice_t vals, bool request, bool pull = false, uint64_t val_len = 0);

// Pushes `n` requests of `len` bytes of CUDA memory for `key` from `w` to
// `s` (node `s_id`), whose recv_buffer names one CUDA buffer for the key's
// values: each must land there, in place, every byte right (gtest checks).
void CheckPushesIntoDeviceBuffer(VanBase &w, VanBase &s, int s_id, uint64_t key, size_t len,
                                 int n);

}  // namespace ps_van_test

#endif  // TESTS_VAN_GPU_SLICES_H_

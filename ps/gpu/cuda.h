/*
 * The CUDA memory kind. Linking //ps/gpu:cuda is enough: it registers itself
 * as PS_MEM_CUDA before main() and touches no CUDA API until first used, so a
 * process may still fork() before it. Use it through ps_mem_ops(PS_MEM_CUDA).
 */
#ifndef PS_GPU_CUDA_H_
#define PS_GPU_CUDA_H_

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the CUDA kind explicitly, for builds that link ps/gpu/cuda.c from
 * a static archive without whole-archive. Idempotent; returns PS_OK. */
ps_status_t ps_mem_cuda_register(void);

#ifdef __cplusplus
}
#endif

#endif /* PS_GPU_CUDA_H_ */

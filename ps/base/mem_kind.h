/*
 * Where bytes live: the one list of memory kinds, shared by buffers
 * (ps/base/buffer.h) and the memory-kind ops tables of ps/gpu (ps/gpu/mem.h),
 * so that a buffer's kind indexes the ops table directly.
 */
#ifndef PS_BASE_MEM_KIND_H_
#define PS_BASE_MEM_KIND_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PS_MEM_HOST = 0,
    PS_MEM_CUDA = 1,
    /* The emulated device (//ps/gpu:emu, for tests): memory host code cannot
     * touch, copied only through its ops, asynchronously on stream threads. */
    PS_MEM_EMU = 2,
    PS_MEM_KIND_COUNT
} ps_mem_kind_t;

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_MEM_KIND_H_ */

/*
 * The emulated device memory kind (PS_MEM_EMU), for tests: it behaves like
 * device memory where that matters to a communication library, on a
 * machine without a GPU.
 *
 *  - An allocation's address is not host memory: it is mapped with no
 *    access, so host code that reads or writes it (a van that forgot to
 *    stage, a memcpy on the wrong side) dies with SIGSEGV, as it would on a
 *    GPU. Only the kind's own ops reach the bytes, through a second mapping
 *    of the same pages that no caller sees.
 *  - Work on a stream runs later, on the stream's own thread, in queue
 *    order; an event recorded on a stream is done only when the work before
 *    it ran. ps_mem_emu_set_delay_us() holds every queued operation back
 *    for a while, so that a caller that forgets to wait reads stale bytes.
 *  - IPC handles work between processes of one user on this host: the
 *    handle names the exporting process's memory file and the offset of
 *    the pointer inside its allocation (an interior pointer opens at the
 *    same interior offset). Opening a handle in the process that exported
 *    it is refused, as CUDA does.
 *  - Two devices (0 and 1), so device ordinals are checked.
 *
 * Linking //ps/gpu:emu registers the kind before main(); nothing else in ps
 * names it.
 */
#ifndef PS_GPU_EMU_H_
#define PS_GPU_EMU_H_

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_MEM_EMU_DEVICES 2

/* Registers the kind explicitly (idempotent); linking does it already. */
ps_status_t ps_mem_emu_register(void);

/* Every operation queued on a stream from now on waits delay_us before it
 * runs (0, the default: runs as soon as the stream thread gets to it). */
void ps_mem_emu_set_delay_us(unsigned delay_us);

/* Allocations of other processes this process has open through their IPC
 * handles now. */
int ps_mem_emu_open_handles(void);

#ifdef __cplusplus
}
#endif

#endif /* PS_GPU_EMU_H_ */

/*
 * How a transport registers memory, as the RDMA family's shared pieces
 * (registration cache, registered buffer pool) call it: an ops table the
 * van fills with its own calls (fi_mr_reg, ibv_reg_mr, ucp_mem_map).
 */
#ifndef PS_RDMA_COMMON_REG_H_
#define PS_RDMA_COMMON_REG_H_

#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_rdma_reg_ops {
    size_t size; /* sizeof(ps_rdma_reg_ops_t) */
    /* Registers [addr, addr + len) of memory kind `kind` (device ordinal
     * `device` for device memory) for local access and remote writes and
     * reads; *handle_p receives the transport's registration (an fid_mr, an
     * ibv_mr, a ucp_mem_h). Returns PS_ERR_NO_MEMORY when the transport ran
     * out of lockable memory (the caller then evicts and retries once and
     * explains `ulimit -l`), PS_ERR_UNSUPPORTED for a memory kind it cannot
     * register, PS_ERR_REGISTRATION for other failures. Logs nothing at
     * error level itself: the caller says what it was for. */
    ps_status_t (*reg)(void *ctx, void *addr, size_t len, ps_buf_mem_t kind, int device,
                       void **handle_p);
    /* Undoes reg(). Never fails (a failure is the transport's to log). */
    void (*dereg)(void *ctx, void *handle);
} ps_rdma_reg_ops_t;

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_REG_H_ */

/*
 * Worker side of the summation server: a tensor split into parts of at
 * most BYTEPS_PARTITION_BYTES (default 4096000) bytes, one key per part,
 * the parts spread round-robin over the servers (as BytePS partitions its
 * tensors), pushed and pulled as zero-copy slices of the caller's buffers.
 * Pulled parts land at their offsets in the destination, so the result is
 * reassembled in place.
 *
 *   ps_sum_tensor_t *t;
 *   ps_sum_tensor_create(worker, po, 7, PS_DATA_FLOAT, bytes, 0, &t);
 *   ps_slice_t grad;   // e.g. ps_slice_wrap(ptr, bytes, NULL, NULL, &grad)
 *   ps_sum_tensor_push_pull(t, &grad, &grad, -1);  // grad = sum over workers
 *   ps_sum_tensor_destroy(t);
 *
 * Requests use cmd 0 (sum in the request's data type, sum_cmd.h). A tensor
 * runs one operation at a time; different tensors run concurrently.
 */
#ifndef PS_APP_SUM_PARTITION_H_
#define PS_APP_SUM_PARTITION_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* BYTEPS_PARTITION_BYTES (4096000 when unset or invalid). */
size_t ps_sum_partition_bytes(void);

/* Maximum parts of one tensor (the part index takes 24 bits of a key). */
#define PS_SUM_MAX_PARTS (1u << 24)

/* Key of part `part` of tensor `tensor_id`: in the key range of server
 * (tensor_id + part) % num_servers, at offset tensor_id * 2^24 + part.
 * PS_ERR_TOO_LARGE when that offset does not fit the server's range (more
 * than 256 servers with large tensor ids) or part is too large. */
ps_status_t ps_sum_part_key(ps_postoffice_t *po, uint32_t tensor_id, uint32_t part,
                            ps_key_t *key_p);

typedef struct ps_sum_tensor ps_sum_tensor_t;

/* A tensor of `bytes` bytes of `type` (a positive multiple of its element
 * size). part_bytes 0: ps_sum_partition_bytes(); it is rounded down to
 * whole elements (at least one). */
ps_status_t ps_sum_tensor_create(ps_kv_worker_t *worker, ps_postoffice_t *po, uint32_t tensor_id,
                                 ps_data_type_t type, size_t bytes, size_t part_bytes,
                                 ps_sum_tensor_t **tensor_p);
/* Waits (up to the job's request timeout) for an operation still in
 * flight, then frees. */
void ps_sum_tensor_destroy(ps_sum_tensor_t *tensor);

size_t ps_sum_tensor_num_parts(const ps_sum_tensor_t *tensor);
/* Part `index`: its key, and its byte range in the tensor. */
ps_status_t ps_sum_tensor_part(const ps_sum_tensor_t *tensor, size_t index, ps_key_t *key_p,
                               size_t *offset_p, size_t *len_p);

typedef enum {
    PS_SUM_OP_PUSH = 1,      /* push src */
    PS_SUM_OP_PULL = 2,      /* pull the sum into dst */
    PS_SUM_OP_PUSH_PULL = 3, /* both, one KV push-pull request per part */
} ps_sum_op_t;

/* Starts `op` on every part: src (pushes) and dst (pulls) are slices of
 * exactly the tensor's size. The slices are referenced, not copied: leave
 * src unchanged and dst alone until the operation ended. dst may be src
 * (the sum replaces the tensor): a push-pull then pulls each part once its
 * push was acknowledged, so that the answer never lands in bytes the
 * transport may still be sending. PS_ERR_BAD_STATE while the previous
 * operation has not ended. */
ps_status_t ps_sum_tensor_start(ps_sum_tensor_t *tensor, ps_sum_op_t op, const ps_slice_t *src,
                                const ps_slice_t *dst);
/* As ps_sum_tensor_start, with pushed device values sent once `ready` says
 * they are (an event, or the work queued so far on the caller's stream:
 * ps_kv_ready_t, ps/app/kv.h); NULL, or host values: as they are at the
 * call. Every part's push waits for it, off the caller's thread. */
ps_status_t ps_sum_tensor_start_when(ps_sum_tensor_t *tensor, ps_sum_op_t op,
                                     const ps_slice_t *src, const ps_slice_t *dst,
                                     const ps_kv_ready_t *ready);
/* Blocks until every part of the operation ended (timeout_ms < 0: the
 * job's request timeout). PS_OK, or the first part's error
 * (PS_ERR_NOT_FOUND: the server answered that the round failed, e.g. a
 * worker is gone); PS_ERR_TIMED_OUT leaves the operation running. */
ps_status_t ps_sum_tensor_wait(ps_sum_tensor_t *tensor, int timeout_ms);

/* Start and wait. */
ps_status_t ps_sum_tensor_push(ps_sum_tensor_t *tensor, const ps_slice_t *src, int timeout_ms);
ps_status_t ps_sum_tensor_pull(ps_sum_tensor_t *tensor, const ps_slice_t *dst, int timeout_ms);
ps_status_t ps_sum_tensor_push_pull(ps_sum_tensor_t *tensor, const ps_slice_t *src,
                                    const ps_slice_t *dst, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_SUM_PARTITION_H_ */

/*
 * The AF app's wire form, beside the meta's tensor fields (is_tensor,
 * dtype, ndim, shape, key) and the batch flag in head: a 24-byte body on
 * every message of a batch (little-endian):
 *    0  u32  magic "PSAF" (0x46415350)
 *    4  u32  index of this message in the batch (pushes first, then pulls)
 *    8  u32  count: messages of the batch to this server
 *   12  u32  num_push: of them, the pushes
 *   16  u64  seq: the worker's batch number
 * A response echoes its request's body. Pure functions: no networking
 * (the core arithmetic of CPU placement lives here too, for its tests).
 */
#ifndef PS_APP_AF_WIRE_H_
#define PS_APP_AF_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/app/af.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__AF_HDR_LEN 24
#define PS__AF_MAGIC 0x46415350u
/* Messages one batch may have per server: bounds what a peer makes a
 * server allocate. */
#define PS__AF_MAX_BATCH_MSGS 4096

typedef struct {
    uint32_t index;
    uint32_t count;
    uint32_t num_push;
    uint64_t seq;
} ps__af_hdr_t;

void ps__af_hdr_write(uint8_t out[PS__AF_HDR_LEN], const ps__af_hdr_t *h);
/* PS_ERR_PROTOCOL for a body that is not one (length, magic, index >=
 * count, num_push > count, count 0 or over PS__AF_MAX_BATCH_MSGS). */
ps_status_t ps__af_hdr_read(const uint8_t *body, size_t len, ps__af_hdr_t *h_p);

/* The batch flag of message `index` of `count`. */
int ps__af_flag(uint32_t index, uint32_t count);

/* Puts t's key, dtype and shape in the meta (is_tensor set). */
void ps__af_meta_set_tensor(ps_meta_t *meta, const ps_af_tensor_t *t);
/* Reads them back into *t (data NULL, host memory) and its byte size;
 * PS_ERR_PROTOCOL for a meta that is no valid tensor. */
ps_status_t ps__af_meta_get_tensor(const ps_meta_t *meta, ps_af_tensor_t *t, uint64_t *bytes_p);

/* The core of ps_af_bind_cpu_core (af.h) for GPU gpu; -1 for settings that
 * leave none. */
int ps__af_cpu_core(int gpu, int offset, int cores_per_socket, int cores_per_gpu, int start);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_AF_WIRE_H_ */

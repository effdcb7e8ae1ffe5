/*
 * The compact meta of the shared-memory van: the fields of a data message
 * as a fixed little struct, written and read field by field (no nanopb).
 *
 * Why: both ends run on one host and speak the same protocol version
 * (checked at the handshake), and encoding plus decoding a meta with the
 * codec costs microseconds, more than the rest of a small message's trip.
 * Messages it cannot carry — control messages, traces, van data, more data
 * types than segments, big bodies — use the codec (codec.h). Tensor
 * messages (the AF app's dtype and shape) it carries: the shape follows
 * the body.
 * The reader checks every value as the codec does.
 */
#ifndef PS_NET_SHM_SHM_META_H_
#define PS_NET_SHM_SHM_META_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

/* Largest body the compact form carries. */
#define PS__SHM_FAST_BODY_MAX 4096u

/* 1 and the compact size in *len_p if meta fits the compact form. */
int ps__shm_meta_fast_size(const ps_meta_t *meta, size_t *len_p);
/* Writes the compact form (ps__shm_meta_fast_size() bytes) at out. */
void ps__shm_meta_fast_write(const ps_meta_t *meta, uint8_t *out);
/* Reads a compact meta of len bytes; meta_p->body points into in.
 * PS_ERR_PROTOCOL when a value is out of range. */
ps_status_t ps__shm_meta_fast_read(const uint8_t *in, size_t len, ps_meta_t *meta_p);

#endif /* PS_NET_SHM_SHM_META_H_ */

/*
 * What the rest of ps/net/shm (the composed van) and its tests use of the
 * shared-memory van besides the ops table registered as "shm".
 */
#ifndef PS_NET_SHM_SHM_VAN_H_
#define PS_NET_SHM_SHM_VAN_H_

#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/van/van.h"

/* The shm van's ops table. */
const ps_van_ops_t *ps__shm_ops(void);

/* connect() without a log line when nobody listens for the peer here
 * (PS_ERR_UNREACHABLE): how the composed van finds out whether a peer
 * shares this host (same kernel, network namespace and job). */
ps_status_t ps__shm_try_connect(ps_van_t *van, const ps_node_t *peer, int my_id);

/* The first half of close(): drains (bounded), stops the progress thread
 * and closes every channel, but leaves the van allocated, so that another
 * thread's send fails cleanly until close() (for the composed van, whose
 * other van's thread may still send). */
void ps__shm_stop(ps_van_t *van);

/* 1 if the van has a channel to node id (ours or the node's). */
int ps__shm_has_peer(ps_van_t *van, int id);

/* Test knobs, set before connecting: allow_cma 0 never lets a peer read
 * our memory (process_vm_readv), as when the kernel forbids it; allow_seg
 * 0 sends buffers of ps_shm_buf_alloc() like others; allow_stage 0 never
 * copies a value into a staging segment. With all three off, large values
 * are streamed through the ring. */
void ps__shm_test_options(ps_van_t *van, int allow_cma, int allow_seg, int allow_stage);

/* Segments sent so far by how they travelled: [0] staged (a copy in a
 * staging segment, sent as SEG), [1] INLINE, [2] CMA, [3] SEG (the
 * caller's shared buffer), [4] STREAM, [5] PLACED (written straight into
 * the peer's shared destination). For tests. */
#define PS__SHM_TEST_KINDS 6
void ps__shm_test_counters(ps_van_t *van, uint64_t counts[PS__SHM_TEST_KINDS]);

/* The composed van ("ipc", shm_multi.c): how it reaches node id now —
 * "shm", "net" or "none" (for tests and logs). */
const char *ps__ipc_route(ps_van_t *ipc_van, int id);

#endif /* PS_NET_SHM_SHM_VAN_H_ */

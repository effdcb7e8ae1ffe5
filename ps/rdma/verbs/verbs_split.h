/*
 * Payloads across several queue pairs, and putting them back in order.
 *
 * A connection may have several QPs to one peer (STEPMESH_QP_NUM; with
 * STEPMESH_SPLIT_QP_LAG each is pinned to one port of a bonded NIC). A big
 * payload is cut as StepMesh cuts it: QP 0 takes total/n plus the
 * remainder and carries the message's meta after it; QP k > 0 takes
 * total/n as "slave" writes with immediate, which the receiver counts per
 * QP. The meta names, per QP, how many slave chunks were sent up to and
 * including its message; the receiver holds a message until its counts
 * are reached, and releases messages strictly in the order their metas
 * arrived (QP 0 is ordered), so delivery order is send order.
 *
 * Pure logic: no verbs calls; unit-tested.
 */
#ifndef PS_RDMA_VERBS_VERBS_SPLIT_H_
#define PS_RDMA_VERBS_VERBS_SPLIT_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/rdma/verbs/verbs_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One piece of a payload: bytes [off, off+len) of it go on QP `qp`. */
typedef struct {
    uint8_t qp;
    uint64_t off;
    uint64_t len;
} ps__vb_chunk_t;

/* Most chunks a plan has: one per QP plus the cuts that keep every chunk
 * at or below max_wr. */
#define PS__VB_MAX_CHUNKS 32

/*
 * Cuts [0, total) for `nqp` QPs. Payloads below `min_split` bytes, or with
 * nqp 1, go whole on QP 0. QP 0's share comes first in the payload. Every
 * chunk is cut further into pieces of at most `max_wr` bytes (0: no limit)
 * on the same QP. total 0 gives no chunk.
 *   PS_ERR_INVALID_ARG  nqp 0 or above PS__VB_MAX_QP.
 *   PS_ERR_TOO_LARGE    more than `cap` chunks would be needed.
 */
ps_status_t ps__vb_split(uint64_t total, unsigned nqp, uint64_t min_split, uint64_t max_wr,
                         ps__vb_chunk_t *chunks, unsigned cap, unsigned *n_p);

/* A piece of one source segment: `len` bytes at `off` of segment `seg`. */
typedef struct {
    uint8_t seg;
    uint64_t off;
    uint64_t len;
} ps__vb_piece_t;

/*
 * The segments (lens[0..nseg), laid end to end) that bytes [off, off+len)
 * of their concatenation come from: the scatter-gather list of one chunk.
 * Empty segments are skipped.
 *   PS_ERR_INVALID_ARG  the range is outside the concatenation.
 *   PS_ERR_TOO_LARGE    more than `cap` pieces.
 */
ps_status_t ps__vb_pieces(const uint64_t *lens, unsigned nseg, uint64_t off, uint64_t len,
                          ps__vb_piece_t *pieces, unsigned cap, unsigned *n_p);

/* ---- receive side: hold messages until their slave chunks are in ---- */

typedef struct ps__vb_reorder_item {
    struct ps__vb_reorder_item *next;
    uint32_t need[PS__VB_MAX_QP]; /* cumulative slave counts to wait for */
    void *arg;                    /* the caller's message */
} ps__vb_reorder_item_t;

typedef struct {
    unsigned nqp;
    uint32_t got[PS__VB_MAX_QP]; /* slave chunks received per QP (wrapping) */
    ps__vb_reorder_item_t *head, *tail;
    size_t waiting;
} ps__vb_reorder_t;

void ps__vb_reorder_init(ps__vb_reorder_t *r, unsigned nqp);
/* Queues `item` (need[] filled by the caller; need[0] ignored). */
void ps__vb_reorder_push(ps__vb_reorder_t *r, ps__vb_reorder_item_t *item);
/* A slave chunk arrived on QP `qp` (1..nqp-1). PS_ERR_PROTOCOL for QP 0 or
 * out of range. */
ps_status_t ps__vb_reorder_slave(ps__vb_reorder_t *r, unsigned qp);
/* The oldest queued item if every count it waits for is reached (removed
 * from the queue), else NULL. Call until NULL after each push and slave. */
ps__vb_reorder_item_t *ps__vb_reorder_pop(ps__vb_reorder_t *r);
/* Removes every queued item (teardown), oldest first, via fn. */
void ps__vb_reorder_drain(ps__vb_reorder_t *r, void (*fn)(void *ctx, ps__vb_reorder_item_t *item),
                          void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_SPLIT_H_ */

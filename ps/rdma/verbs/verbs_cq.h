/*
 * The size of a device's completion queue. One CQ per device takes the
 * completions of every posted receive (the SRQ's depth) and of every
 * signaled send in flight; BYTEPS_RDMA_MAX_CONCURR_WR caps the latter, and
 * a post that would exceed it waits (ps__vb_post counts against cq_room).
 *
 * Pure logic: no verbs calls; unit-tested.
 */
#ifndef PS_RDMA_VERBS_VERBS_CQ_H_
#define PS_RDMA_VERBS_VERBS_CQ_H_

#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fewest signaled sends a CQ must leave room for. */
#define PS__VB_CQ_MIN_SENDS 16

/* The CQ of a device with `srq_depth` posted receives, room for
 * `max_sends` signaled sends, and a device limit of `max_cqe` entries (0 or
 * less: no limit). *cq_size_p is what to ask ibv_create_cq for, *room_p the
 * signaled sends it leaves room for (max_sends, or fewer when the device
 * caps the CQ). PS_ERR_CONFIG when the device's cap leaves room for fewer
 * than PS__VB_CQ_MIN_SENDS; the outputs are then left untouched. */
ps_status_t ps__vb_cq_plan(uint32_t srq_depth, uint32_t max_sends, int max_cqe, int *cq_size_p,
                           int64_t *room_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_CQ_H_ */

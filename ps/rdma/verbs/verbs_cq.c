/*
 * The size of a device's completion queue: see verbs_cq.h.
 */
#include "ps/rdma/verbs/verbs_cq.h"

#include <limits.h>

ps_status_t ps__vb_cq_plan(uint32_t srq_depth, uint32_t max_sends, int max_cqe, int *cq_size_p,
                           int64_t *room_p)
{
    int64_t want = (int64_t)srq_depth + (int64_t)max_sends;
    if (want > INT_MAX)
        want = INT_MAX;
    int64_t size = max_cqe > 0 && want > max_cqe ? max_cqe : want;
    int64_t room = size - (int64_t)srq_depth;
    if (room < PS__VB_CQ_MIN_SENDS)
        return PS_ERR_CONFIG;
    *cq_size_p = (int)size;
    *room_p = room;
    return PS_OK;
}

/*
 * Opening a van whose transport library is loaded at run time (fabric,
 * UCX, ibverbs): load the library first (a missing one makes the van
 * unavailable, naming it), then open the van while keeping the process's
 * own dispositions of fatal signals, whatever the library's init installs
 * (ps/base/sigkeep.h).
 */
#ifndef PS_RDMA_COMMON_VAN_OPEN_H_
#define PS_RDMA_COMMON_VAN_OPEN_H_

#include <stddef.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/van/van.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ps_status_t (*ps__van_open_func_t)(const ps_van_params_t *params,
                                           const ps_van_callbacks_t *cb, ps_van_t **van_p);
/* Loads a van's library; PS_OK, or an error with why filled. */
typedef ps_status_t (*ps__van_load_func_t)(char *why, size_t cap);

/* load (may be NULL: loaded by open itself), then open_body between a save
 * and a restore of the fatal-signal dispositions. A failed load is logged
 * under comp as "<van> van unavailable: <why>" and answers
 * PS_ERR_UNSUPPORTED. */
ps_status_t ps__van_open_loaded(const char *van, ps_log_component_t comp,
                                ps__van_load_func_t load, ps__van_open_func_t open_body,
                                const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                                ps_van_t **van_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_VAN_OPEN_H_ */

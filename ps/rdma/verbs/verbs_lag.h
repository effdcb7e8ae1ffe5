/*
 * LAG port pinning (STEPMESH_SPLIT_QP_LAG, older DMLC_SPLIT_QP_LAG): on a
 * bonded RoCE NIC (mlx5 LAG) the QPs of one connection are spread over the
 * physical ports, QP i on port 1 + i % ports, so a payload split across them
 * uses both links. The mlx5dv calls are looked up with dlopen at run time
 * (libmlx5.so.1), never linked: without them, or on a device that is not
 * bonded, pinning is skipped with one log line and the QPs still work.
 *
 * The calls go through an ops table so that tests can check the policy
 * with fakes.
 */
#ifndef PS_RDMA_VERBS_VERBS_LAG_H_
#define PS_RDMA_VERBS_VERBS_LAG_H_

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* mlx5dv_query_qp_lag_port: the QP's port and the number of active
     * ports of the bond. */
    int (*query)(struct ibv_qp *qp, uint8_t *port_num, uint8_t *active_port_num);
    /* mlx5dv_modify_qp_lag_port */
    int (*modify)(struct ibv_qp *qp, uint8_t port_num);
} ps__vb_lag_ops_t;

/* The mlx5dv functions when libmlx5 provides them; NULL (and `why` says
 * why) otherwise. Looked up once. */
const ps__vb_lag_ops_t *ps__vb_lag_ops(char *why, size_t why_cap);

/*
 * Pins qps[0..n) to ports 1 + i % ports, where ports is what the bond
 * reports for qps[0] (at least 2 to be worth it).
 *   PS_OK               pinned; ports_p (may be NULL) gets the port count.
 *   PS_ERR_UNSUPPORTED  not a bond (query fails, or one active port).
 *   PS_ERR_DEVICE       a modify failed (errno value in *err_p, may be NULL).
 */
ps_status_t ps__vb_lag_pin(const ps__vb_lag_ops_t *ops, struct ibv_qp **qps, unsigned n,
                           unsigned *ports_p, int *err_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_LAG_H_ */

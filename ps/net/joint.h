/*
 * DMLC_ROLE=joint, as upstream: one process is both a server and a worker
 * of the job. ps runs them as two postoffices (a server and a worker, each
 * with its own node id, port and van); the job counts the process in
 * DMLC_NUM_SERVER and in DMLC_NUM_WORKER. ps_postoffice_start() refuses the
 * joint role (PS_ERR_UNSUPPORTED): a joint process starts here.
 */
#ifndef PS_NET_JOINT_H_
#define PS_NET_JOINT_H_

#include "ps/base/status.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the server and the worker postoffice of a joint process from
 * `params` (NULL: ps_start_params_from_env(); the role must be
 * PS_ROLE_JOINT), concurrently, since each start waits for the whole job.
 * The server binds params' port (DMLC_PORT), the worker a free one; a
 * preferred rank (DMLC_RANK) is asked for in both roles. Both or neither:
 * when one start fails, the other postoffice (if it started) is finalized
 * without a barrier, and the first failure is returned (the server's when
 * both failed). Bounded like ps_postoffice_start(). PS_ERR_INVALID_ARG for
 * another role.
 *
 * Finalize the two with ps_postoffice_finalize() concurrently (for example
 * from the threads that use them): each finalize barrier waits for the
 * other. */
ps_status_t ps_postoffice_start_joint(const ps_start_params_t *params, int do_barrier,
                                      ps_postoffice_t **server_p, ps_postoffice_t **worker_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_JOINT_H_ */

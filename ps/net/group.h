/*
 * Instance groups in one process, as ps-lite's StartPS with DMLC_GROUP_SIZE
 * > 1: the process is one server or worker group and runs all its
 * instances, a postoffice each (own node id, port and van). See
 * "Instance groups" in postoffice.h for what a group is; a process per
 * instance (StepMesh's way) starts with ps_postoffice_start() instead.
 */
#ifndef PS_NET_GROUP_H_
#define PS_NET_GROUP_H_

#include "ps/base/status.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the group_size instances of this process's group from `params`
 * (NULL: ps_start_params_from_env(); the role must be server or worker),
 * concurrently, since each start waits for the whole job; pos[i] is
 * instance i (pos holds params' group_size entries). params' preferred
 * rank, if any, is the group's rank: instance i asks for rank
 * rank * group_size + i; without one, each asks for a rank of its instance.
 * A fixed port (DMLC_PORT) P gives instance i port P + i. All or none: when
 * one start fails, those that started are finalized without a barrier and
 * the first failure is returned. Bounded like ps_postoffice_start().
 * PS_ERR_INVALID_ARG for another role.
 *
 * Finalize the instances concurrently (for example from the threads that
 * use them): each finalize barrier waits for the others. */
ps_status_t ps_postoffice_start_group(const ps_start_params_t *params, int do_barrier,
                                      ps_postoffice_t **pos);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_GROUP_H_ */

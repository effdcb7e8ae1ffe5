/*
 * Start parameters, for the postoffice's own starts (bootstrap.c, joint.c,
 * group.c): the environment read for a whole group, and the checks every
 * start makes however its parameters were filled.
 */
#ifndef PS_NET_PARAMS_INTERNAL_H_
#define PS_NET_PARAMS_INTERNAL_H_

#include "ps/base/status.h"
#include "ps/net/postoffice.h"

/* ps_start_params_from_env(); with `whole_group` for a process that runs
 * every instance of its group: the preferred rank is the group's
 * (DMLC_RANK, DMLC_WORKER_ID or DMLC_NODE_RANK) and no instance is read. */
ps_status_t ps__start_params_from_env(ps_start_params_t *params_p, int whole_group);

/* *p = *given, or the environment's parameters (as above) when given is
 * NULL. */
ps_status_t ps__start_params_given_or_env(const ps_start_params_t *given, int whole_group,
                                          ps_start_params_t *p);

/* A preferred rank and an instance that disagree (rank % group size is the
 * instance) are refused, whichever way the parameters were filled. */
ps_status_t ps__start_params_check_instance(const ps_start_params_t *p);

#endif /* PS_NET_PARAMS_INTERNAL_H_ */

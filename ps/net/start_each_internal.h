/*
 * Starting several postoffices of one process at once (joint.c, group.c):
 * each start waits for the whole job, so they run concurrently, one thread
 * each.
 */
#ifndef PS_NET_START_EACH_INTERNAL_H_
#define PS_NET_START_EACH_INTERNAL_H_

#include "ps/base/status.h"
#include "ps/net/postoffice.h"

/* Starts params[0..n) concurrently. All or none: when a start fails, the
 * postoffices that started are finalized without a barrier, every pos[i]
 * is NULL, and the first failure is returned (statuses[i] says each one's).
 * `what` names the set in the log line of a failure. */
ps_status_t ps__po_start_each(const ps_start_params_t *params, int n, int do_barrier,
                              const char *what, ps_postoffice_t **pos, ps_status_t *statuses);

#endif /* PS_NET_START_EACH_INTERNAL_H_ */

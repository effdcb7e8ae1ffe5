/*
 * Message profile (ENABLE_PROFILING, PROFILE_PATH, as upstream): one CSV
 * line per message a postoffice accepts (after PS_DROP_MSG's and the
 * resender's duplicate drops), with its wall-clock receive time,
 * written to <PROFILE_PATH><role>_<start us> (PROFILE_PATH unset:
 * pslite_profile_van_ in the working directory). Columns:
 *
 *   recv_us,sender,recver,app_id,customer_id,timestamp,kind,key,bytes
 *
 * kind is push_request, pull_request, push_response, pull_response,
 * request or response (neither push nor pull: simple app), control
 * (ADD_NODE, BARRIER, ...), or lane (a small-lane message: no meta, so
 * timestamp and key are -1 and 0). bytes is the data size (the lane
 * message's length for lane). recv_us is CLOCK_REALTIME, so files of
 * several processes line up on one time axis.
 */
#ifndef PS_NET_PROFILE_INTERNAL_H_
#define PS_NET_PROFILE_INTERNAL_H_

#include <stddef.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps__profile ps__profile_t;

/* With ENABLE_PROFILING=1 opens the file for `role` ("worker", "server",
 * "scheduler") and writes the header; *prof_p is NULL when profiling is off.
 * PS_ERR_IO (logged, naming the path) when the file cannot be created. */
ps_status_t ps__profile_open(const char *role, ps__profile_t **prof_p);

/* The path of the open file, for logs and tests. */
const char *ps__profile_path(const ps__profile_t *prof);

/* One line for a received message. Thread-safe; NULL prof does nothing. */
void ps__profile_msg(ps__profile_t *prof, const ps_meta_t *meta);

/* One line for a received small-lane message of `len` bytes. */
void ps__profile_lane(ps__profile_t *prof, int sender, int recver, int app_id, int customer_id,
                      size_t len);

/* Flushes and closes the file; NULL does nothing. */
void ps__profile_close(ps__profile_t *prof);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_PROFILE_INTERNAL_H_ */

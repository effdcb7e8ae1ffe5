/*
 * The request tracker behind a customer: outstanding requests keyed by
 * timestamp, how many responses each expects, which peers it waits for,
 * and how it ended. Internal to //ps/net (the customers); tested on its own.
 *
 * Memory rule (what a tracker remembers, and for how long):
 *  - An outstanding request has a record until it completes.
 *  - A request that completes with PS_OK is forgotten at once: a timestamp
 *    that was issued and has no record completed successfully, so waiting
 *    on it, however late, returns PS_OK.
 *  - A request that fails keeps a record with its status, so that a late
 *    wait still learns why; only the last PS__TRACKER_FAILED_KEEP failures
 *    are kept (older ones are forgotten and then read as PS_OK).
 * Requests that are never waited for (callback-only) therefore cost
 * nothing once complete: memory is O(outstanding + PS__TRACKER_FAILED_KEEP).
 * Records come from a free list, so the steady state does not allocate.
 *
 * Timestamps are a per-tracker counter 0, 1, 2, ... (wrapping at INT32_MAX
 * back to 0 and skipping any still outstanding).
 *
 * Thread-safe. The done function runs without the tracker's lock held, on
 * the thread that completed the request, exactly once per request, and
 * before any waiter of that request wakes up (so it may, for instance,
 * finish copying a pulled value that the waiter then reads). It must not
 * wait for its own request.
 */
#ifndef PS_NET_TRACKER_INTERNAL_H_
#define PS_NET_TRACKER_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__TRACKER_FAILED_KEEP 4096

typedef struct ps__tracker ps__tracker_t;

/* Called once per request when it completes (status PS_OK after its last
 * response, or the error it was failed with). */
typedef void (*ps__tracker_done_func_t)(void *arg, int ts, void *ctx, ps_status_t status);

/* `spin_ns` > 0: wait() first spins (checking an atomic, yielding the CPU)
 * up to that long before it sleeps on the condition variable. */
ps_status_t ps__tracker_create(uint64_t spin_ns, ps__tracker_t **tracker_p);
/* Frees every record; no thread may use the tracker any more. */
void ps__tracker_destroy(ps__tracker_t *tracker);

void ps__tracker_set_done_func(ps__tracker_t *tracker, ps__tracker_done_func_t fn, void *arg);

/* A new request expecting `expected` (>= 1) responses from `peers`.
 * PS_ERR_PEER_GONE when one of the peers was marked dead, the closing
 * status after ps__tracker_close(); no request is created then. */
ps_status_t ps__tracker_new(ps__tracker_t *tracker, int expected, const int *peers,
                            int num_peers, void *ctx, int *ts_p);

/* Counts n responses; 1 if this call completed the request, 0 otherwise
 * (already complete, failed, or unknown ts). */
int ps__tracker_add_response(ps__tracker_t *tracker, int ts, int n);
/* The same, except that a completion it makes is published at once,
 * without the done function (one lock instead of two): the caller, told
 * by the 1, does what that function would have done, after waiters may
 * have woken. */
int ps__tracker_add_response_quiet(ps__tracker_t *tracker, int ts, int n);

/* Completes an outstanding request with `why` (< 0); 1 if it did. */
int ps__tracker_fail(ps__tracker_t *tracker, int ts, ps_status_t why);

/* Fails every outstanding request waiting for `peer` with `why`; with
 * `mark_dead`, later ps__tracker_new() calls naming it fail too.
 * Returns how many requests it failed. */
int ps__tracker_fail_peer(ps__tracker_t *tracker, int peer, ps_status_t why, int mark_dead);

/* Undoes mark_dead for `peer` (a new process took its id over): new
 * requests naming it are accepted again. */
void ps__tracker_revive_peer(ps__tracker_t *tracker, int peer);

/* Fails every outstanding request with `why` and refuses new ones with it
 * (scheduler gone, shutdown). Returns how many requests it failed. */
int ps__tracker_close(ps__tracker_t *tracker, ps_status_t why);

/* Responses counted so far; -1 when the request has no record (completed
 * successfully, forgotten, or never issued). */
int ps__tracker_num_responses(ps__tracker_t *tracker, int ts);

/* The ctx given at ps__tracker_new(), while the request has a record and
 * has not completed. PS_ERR_NOT_FOUND otherwise. */
ps_status_t ps__tracker_ctx(ps__tracker_t *tracker, int ts, void **ctx_p);

/* Runs fn(ctx, arg) under the tracker's lock while request ts is
 * outstanding and open (no completion decided), and returns what fn
 * returns; PS_ERR_NOT_FOUND without calling it otherwise. The request
 * cannot complete while fn runs, so fn may take a reference on ctx that
 * then outlives the request's done function. fn must be short: it may
 * neither block nor call into the tracker. */
typedef ps_status_t (*ps__tracker_claim_func_t)(void *ctx, void *arg);
ps_status_t ps__tracker_claim(ps__tracker_t *tracker, int ts, ps__tracker_claim_func_t fn,
                              void *arg);

/* Blocks until request ts completed, with timeout_ms (< 0: forever).
 * PS_OK, the status it failed with, PS_ERR_TIMED_OUT (the request stays
 * outstanding), or PS_ERR_INVALID_ARG for a ts never issued. */
ps_status_t ps__tracker_wait(ps__tracker_t *tracker, int ts, int timeout_ms);

/* What ps__tracker_wait(tracker, ts, 0) returns, for a caller that checks
 * one request again and again (a busy-poll waiter between rounds of the
 * van's loop). *seen_p carries state between the calls of one waiter:
 * start it at PS__TRACKER_POLL_START. While no request of the tracker has
 * completed since a check found `ts` outstanding, the answer
 * (PS_ERR_TIMED_OUT) comes from one atomic load, without the lock; so
 * does PS_OK when `ts` is the request that completed last. */
#define PS__TRACKER_POLL_START UINT64_MAX
ps_status_t ps__tracker_poll(ps__tracker_t *tracker, int ts, uint64_t *seen_p);

/* For tests: the next timestamps are drawn as if `issued` had been issued
 * before (issued > 2^31 - 1: wrapped), to reach the wrap quickly. */
void ps__tracker_skip_to(ps__tracker_t *tracker, uint64_t issued);

/* Records held (outstanding + remembered failures), for tests. */
size_t ps__tracker_num_records(ps__tracker_t *tracker);
size_t ps__tracker_num_outstanding(ps__tracker_t *tracker);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_TRACKER_INTERNAL_H_ */

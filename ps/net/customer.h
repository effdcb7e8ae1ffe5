/*
 * A customer is one app instance (app_id, customer_id) inside a process: it
 * receives the messages addressed to it and tracks its outstanding
 * requests by timestamp. The KV worker/server and the simple app are
 * customers.
 *
 * The receive function runs on the van's progress thread (no hand-off to
 * another thread: a wake-up costs tens of microseconds); it must not block
 * for long. ps_customer_wait() is what application threads block in.
 */
#ifndef PS_NET_CUSTOMER_H_
#define PS_NET_CUSTOMER_H_

#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_customer ps_customer_t;

/* Called for every message to this customer. The message (and its slice
 * references) belongs to the caller; take a ps_slice_ref() of what you keep. */
typedef void (*ps_customer_recv_func_t)(void *arg, ps_customer_t *customer, const ps_msg_t *msg);

/* Called for every lane message to this customer (ps_postoffice_send_lane):
 * its payload, valid only during the call, from node `sender`, whose header
 * named customer `customer_id` (on a server: the worker's customer that
 * sent it, to answer). On the same threads and in the same order as the
 * receive function. */
typedef void (*ps_customer_lane_func_t)(void *arg, ps_customer_t *customer, int sender,
                                        int customer_id, const uint8_t *payload, size_t len);

/* Where data segment `index` (of `len` bytes) of an incoming message for
 * this customer should land, asked by the van on its thread as soon as the
 * meta is decoded (before ps_customer_recv_func_t sees the message). Fill
 * *slice_p with a referenced slice of at least `len` bytes (e.g. a
 * ps_slice_sub() of the destination a pull named) and return PS_OK, or
 * return PS_ERR_NOT_FOUND to let the van use its own buffer. Vans without
 * PS_CAP_RECV_INTO_DEST never ask. For a request the answer must follow
 * from meta's sender, app_id, customer_id, key, request, push, is_tensor
 * and the index alone: a van may ask before the data arrives (the other
 * fields are then unset) and write later requests of that sender and key
 * into the same buffer (the ibverbs van). */
typedef ps_status_t (*ps_customer_recv_buffer_func_t)(void *arg, ps_customer_t *customer,
                                                      const ps_meta_t *meta, unsigned index,
                                                      uint64_t len, ps_slice_t *slice_p);

/* Called exactly once for every request when it completes: PS_OK after its
 * last response, or the error it was failed with (peer gone, scheduler
 * gone, shut down, ps_customer_fail_request). Runs on the thread that
 * completed it (the van thread, the postoffice's timer thread, or the
 * caller of a failing call), without locks held, and before
 * ps_customer_wait() for that request returns (as upstream runs a
 * request's callback before waking its waiter). It may create requests;
 * it must not wait for its own. */
typedef void (*ps_customer_done_func_t)(void *arg, ps_customer_t *customer, int ts, void *ctx,
                                        ps_status_t status);

/* Registers a customer. *customer_p is set before any receive function
 * can run (messages that arrived earlier are replayed by this call), so a
 * function may use the caller's handle from its first call. */
ps_status_t ps_customer_create(ps_postoffice_t *po, int app_id, int customer_id,
                               ps_customer_recv_func_t recv, void *arg,
                               ps_customer_t **customer_p);
/* The same for a customer that also takes lane messages (`lane`, called
 * with `arg`): set at creation, since lane messages that arrived before it
 * are replayed by the create call. */
ps_status_t ps_customer_create_lane(ps_postoffice_t *po, int app_id, int customer_id,
                                    ps_customer_recv_func_t recv, ps_customer_lane_func_t lane,
                                    void *arg, ps_customer_t **customer_p);
/* Unregisters; waits for a receive call in progress to return, then fails
 * requests still outstanding with PS_ERR_SHUTDOWN (done functions run) and
 * frees. Not from the customer's own receive or done function, nor while
 * a thread waits in ps_customer_wait(). Also valid after
 * ps_postoffice_finalize(). Waits up to the postoffice's
 * finalize_timeout_ms (PS_FINALIZE_TIMEOUT_MS) and logs an error when a
 * function of the customer still runs then; see below. */
void ps_customer_destroy(ps_customer_t *customer);
/* The same, waiting up to timeout_ms (< 0: finalize_timeout_ms) for the
 * customer's functions in progress. PS_OK: freed. PS_ERR_TIMED_OUT: one
 * of them still runs, so the customer stays unregistered but allocated
 * (its requests stay as they are) and what its functions' arg points to
 * must stay valid; calling this again before ps_postoffice_finalize()
 * finishes the job once they returned. PS_ERR_INVALID_ARG from its own
 * function (it is left as it is). */
ps_status_t ps_customer_destroy_timed(ps_customer_t *customer, int timeout_ms);

/* Hooks; set them before traffic for this customer can arrive (right after
 * create). NULL fn removes the hook. */
void ps_customer_set_recv_buffer_func(ps_customer_t *customer,
                                      ps_customer_recv_buffer_func_t fn, void *arg);
/* Which data segments the recv_buffer hook is asked about (bit i: segment
 * i; the default is every one). A customer that steers only some (the KV
 * worker: a pull response's values) saves the lookup on the rest. */
void ps_customer_set_recv_buffer_segments(ps_customer_t *customer, uint32_t segments);
void ps_customer_set_done_func(ps_customer_t *customer, ps_customer_done_func_t fn, void *arg);

ps_postoffice_t *ps_customer_postoffice(const ps_customer_t *customer);
int ps_customer_app_id(const ps_customer_t *customer);
int ps_customer_id(const ps_customer_t *customer);

/* A new request expecting `expected` (>= 1) responses; returns its
 * timestamp (>= 0) in *ts_p. The requests' peers are recorded so that the
 * death of one of them completes the request with PS_ERR_PEER_GONE.
 * Fails (no request created) with PS_ERR_PEER_GONE when a peer is already
 * known dead or the scheduler is gone, PS_ERR_SHUTDOWN after finalize. */
ps_status_t ps_customer_new_request(ps_customer_t *customer, int expected,
                                    const int *peer_ids, int num_peers, int *ts_p);
/* The same with a pointer the app keeps per request: handed to the done
 * function and readable with ps_customer_request_ctx() until completion. */
ps_status_t ps_customer_new_request_ctx(ps_customer_t *customer, int expected,
                                        const int *peer_ids, int num_peers, void *ctx,
                                        int *ts_p);
/* The ctx of an outstanding request (e.g. a pull's destination, for the
 * recv_buffer hook); PS_ERR_NOT_FOUND once it completed. */
ps_status_t ps_customer_request_ctx(ps_customer_t *customer, int ts, void **ctx_p);
/* Runs fn(ctx, arg) with request ts's ctx while the request is outstanding
 * and cannot complete (under its tracker's lock), and returns fn's status;
 * PS_ERR_NOT_FOUND, without calling fn, once it completed or was never
 * issued. fn may take a reference on ctx (say, for a response being
 * handled); it must be short and must not block or call the customer. */
typedef ps_status_t (*ps_customer_claim_func_t)(void *ctx, void *arg);
ps_status_t ps_customer_claim_request(ps_customer_t *customer, int ts,
                                     ps_customer_claim_func_t fn, void *arg);

/* Counts `n` responses to request `ts`; returns 1 when this completed it. */
int ps_customer_add_response(ps_customer_t *customer, int ts, int n);
/* The same, except that when this completes the request (returns 1) the
 * done function is not called: the caller does its work instead, for a
 * success whose every effect a waiter may see (say, a completion
 * callback) it made before this call. Failures still go through the done
 * function. */
int ps_customer_add_response_quiet(ps_customer_t *customer, int ts, int n);

/* Completes request `ts` with an error (peer gone, protocol, ...). */
void ps_customer_fail_request(ps_customer_t *customer, int ts, ps_status_t why);

/* Responses counted so far; -1 once the request completed successfully
 * (it is no longer tracked) or for a ts never issued. */
int ps_customer_num_responses(ps_customer_t *customer, int ts);

/* Blocks until request `ts` completed; PS_OK, or why not: PS_ERR_TIMED_OUT
 * (deadline, <0 = PS_REQUEST_TIMEOUT_MS; the request stays outstanding),
 * PS_ERR_PEER_GONE, PS_ERR_SHUTDOWN, or the status the request was failed
 * with; PS_ERR_INVALID_ARG for a ts never issued. With PS_BUSY_POLL the
 * caller spins for a bounded time (2 ms) before it sleeps; when the van
 * has a progress op (tcp), the spinning caller runs the van's event loop
 * itself, so receive and done functions of this process may then run on
 * the waiting thread (a wait that overlaps ps_postoffice_finalize() stops
 * driving before the van closes and ends with the request's status).
 *
 * What is remembered (so that requests nobody waits for cost no memory):
 * a request that completes with PS_OK is forgotten at once, and a ts that
 * was issued but is not tracked reads as PS_OK — so a ts may be waited for
 * any number of times, however late. A failed request keeps its status for
 * the customer's last 4096 failures; older ones read as PS_OK. Memory is
 * O(outstanding requests + 4096). */
ps_status_t ps_customer_wait(ps_customer_t *customer, int ts, int timeout_ms);

/* 1 when ps_customer_wait() drives the van itself (PS_BUSY_POLL with a van
 * that has a progress op): a busy waiter then gets its answers on its own
 * thread rather than through the van's, so it should wait there instead of
 * spinning on its own. */
int ps_customer_waits_drive(const ps_customer_t *customer);

/* For a busy waiter on something other than a request (say, a queue its
 * receive function fills), where ps_customer_waits_drive() is 1: runs one
 * round of the van's loop on the calling thread, handling at most `budget`
 * events, and returns how many it handled (receive and done functions of
 * this process may run inside). A caller that stops calling (to sleep or
 * return) calls it once with budget 0, which hands the loop back to the
 * van's thread. -1, doing nothing, where waits do not drive, from a receive
 * or done function, or once the van is closing. Not while holding a lock
 * that a receive function takes. */
int ps_customer_drive(ps_customer_t *customer, unsigned budget);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_CUSTOMER_H_ */

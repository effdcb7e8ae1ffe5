/*
 * What the postoffice and the customers share inside //ps/net: the
 * registry of customers that the postoffice dispatches data messages to
 * (customer_registry.c), and the postoffice's accessors customer.c needs.
 *
 * Locking: the registry lock is taken before a customer's tracker lock and
 * never while calling a customer's functions; the postoffice never holds
 * its own lock while calling into the registry.
 */
#ifndef PS_NET_POSTOFFICE_INTERNAL_H_
#define PS_NET_POSTOFFICE_INTERNAL_H_

#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A message for a customer that is not registered (yet) waits this long
 * before it is dropped — in a queue, never blocking the van thread.
 * Upstream polled for 5 s; on a loaded 2-vCPU machine a server can take
 * longer than that between its start barrier and creating its KV server,
 * and a dropped request leaves the worker waiting until its own deadline,
 * so the window is wide (the queue stays bounded by PS__PENDING_MAX). */
#define PS__PENDING_TIMEOUT_NS (60ull * 1000000000ull)
/* At most this many such messages wait; beyond, they are dropped at once. */
#define PS__PENDING_MAX 4096

typedef struct ps__registry ps__registry_t;

/* Called (without locks) when the pending queue goes from empty to not
 * empty, so the postoffice's timer thread starts expiring it. */
typedef void (*ps__kick_func_t)(void *arg);

/* `role` decides how messages map to customers (as upstream): a worker's
 * (app_id, meta.customer_id), anyone else's (app_id, app_id). */
ps_status_t ps__registry_create(ps_role_t role, ps__kick_func_t kick, void *kick_arg,
                                ps__registry_t **reg_p);
/* Closes (fails every outstanding request with PS_ERR_SHUTDOWN), detaches
 * the customers still registered (they can still be destroyed), drops
 * pending messages and frees. */
void ps__registry_destroy(ps__registry_t *reg);

/* A data message from the van; takes over msg's references. Calls the
 * customer's receive function on this thread, or queues the message while
 * the customer is unknown. */
void ps__registry_deliver(ps__registry_t *reg, ps_msg_t *msg);

/* A lane message's payload from the van (valid during the call), for the
 * customer (app_id, customer_id) as a worker routes, (app_id, app_id)
 * otherwise: its lane function on this thread, or a copy queued while the
 * customer is unknown. */
void ps__registry_deliver_lane(ps__registry_t *reg, int sender, int app_id, int customer_id,
                               const uint8_t *payload, size_t len);

/* The van's recv_buffer callback, routed to the customer's hook. */
ps_status_t ps__registry_recv_buffer(ps__registry_t *reg, const ps_meta_t *meta,
                                     unsigned index, uint64_t len, ps_slice_t *slice_p);

/* Fails every outstanding request to `peer`; with mark_dead, requests
 * created later that name it fail at once. */
void ps__registry_fail_peer(ps__registry_t *reg, int peer, ps_status_t why, int mark_dead);

/* Undoes mark_dead for `peer` (recovery): customers accept requests
 * naming it again. */
void ps__registry_revive_peer(ps__registry_t *reg, int peer);

/* Fails the request a message this process sent belongs to (its customer
 * from the meta as a received message would be routed, its timestamp);
 * 1 if there was such an outstanding request. */
int ps__registry_fail_request(ps__registry_t *reg, const ps_meta_t *meta, ps_status_t why);

/* Fails every outstanding request with `why` and refuses new ones
 * (scheduler gone, shutdown). Idempotent; the first status sticks. */
void ps__registry_close(ps__registry_t *reg, ps_status_t why);

/* Before the van closes: busy-poll waiters stop running its loop (those
 * inside hand it back within their 2 ms spin, unless a function they run
 * blocks) and no new one starts. PS_OK when none runs it any more,
 * PS_ERR_TIMED_OUT when one still did at `deadline`: the van (and this
 * registry, which the driver leaves through) must then stay. */
ps_status_t ps__registry_stop_driving(ps__registry_t *reg, ps_deadline_t deadline);

/* Drops pending messages older than PS__PENDING_TIMEOUT_NS (one warning
 * line each, rate-limited). Returns when the next one expires (monotonic
 * ns), or 0 when none is pending. */
uint64_t ps__registry_expire_pending(ps__registry_t *reg, uint64_t now_ns);

/* Messages waiting for their customer (for tests). */
size_t ps__registry_num_pending(ps__registry_t *reg);

/* PS_RESEND / PS_DROP_MSG counters so far (for tests and logs). */
void ps__postoffice_resend_stats(const ps_postoffice_t *po, uint64_t *resent_p,
                                 uint64_t *duplicates_p, uint64_t *dropped_p);

/* Postoffice accessors customer.c needs. */
ps__registry_t *ps__postoffice_registry(ps_postoffice_t *po);
int ps__postoffice_busy_poll(const ps_postoffice_t *po);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_POSTOFFICE_INTERNAL_H_ */

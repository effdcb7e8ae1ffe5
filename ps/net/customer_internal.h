/*
 * What the customer (customer.c) and the registry that routes messages to
 * it (customer_registry.c) share inside //ps/net: the customer's fields,
 * and the registry's side of creating, destroying and driving one.
 */
#ifndef PS_NET_CUSTOMER_INTERNAL_H_
#define PS_NET_CUSTOMER_INTERNAL_H_

#include <stdint.h>

#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/customer.h"
#include "ps/net/postoffice_internal.h"
#include "ps/net/tracker_internal.h"
#include "ps/net/van/van.h"

struct ps_customer {
    ps_postoffice_t *po;  /* NULL once the postoffice is gone */
    ps__registry_t *reg;  /* NULL once detached */
    int app_id;
    int customer_id;
    int request_timeout_ms;
    int destroy_timeout_ms; /* PS_FINALIZE_TIMEOUT_MS of its postoffice */
    int destroy_timed_out;  /* (under the registry lock) a destroy gave up */
    ps_customer_recv_func_t recv;
    ps_customer_lane_func_t lane; /* NULL: lane messages for it are dropped */
    void *recv_arg;               /* recv's and lane's */
    ps_customer_done_func_t done;
    void *done_arg;
    ps__tracker_t *tracker;
    /* Busy polling with a van that has a progress op: waiters drive it. */
    ps_van_t *van;
    int (*progress)(ps_van_t *van, unsigned budget);

    /* Under the registry lock. */
    ps_customer_recv_buffer_func_t recv_buffer;
    void *recv_buffer_arg;
    uint32_t recv_buffer_segments; /* bit i: ask about segment i */
    int users;      /* postoffice threads inside this customer's functions */
    int draining;   /* the creator is replaying pending messages */
    int linked;     /* in the registry's list */
    int fast_slot;  /* its index in the registry's fast slots, or -1 */
    struct ps_customer *next;
};

/* Links c (set up, not linked yet) into reg: PS_ERR_EXISTS when its
 * (app id, customer id) is taken. Seeds it with the peers known dead and
 * the registry's close, then replays, in arrival order, what waited for
 * it, before the van thread may deliver to it directly. */
ps_status_t ps__registry_link(ps__registry_t *reg, ps_customer_t *c);

/* Unlinks c from reg and waits, up to `deadline`, until no postoffice
 * thread runs a function of it: PS_OK, or PS_ERR_TIMED_OUT (it stays
 * unlinked and allocated; a later call may finish the job). */
ps_status_t ps__registry_unlink(ps__registry_t *reg, ps_customer_t *c, ps_deadline_t deadline);

/* A change of what steers deliveries to c (its recv_buffer hook or the
 * segments it asks about) happens between these two calls; begin returns
 * c's registry, locked, or NULL for a detached customer. */
ps__registry_t *ps__registry_steer_begin(ps_customer_t *c);
void ps__registry_steer_end(ps__registry_t *reg, const ps_customer_t *c);

/* A waiter may drive the van only between these two calls: enter returns
 * c's registry, or NULL when it may not (detached, or the van is about to
 * close: ps__registry_stop_driving()). */
ps__registry_t *ps__registry_drive_enter(ps_customer_t *c);
void ps__registry_drive_exit(ps__registry_t *reg);

/* The customer whose receive, lane, hook or done function this thread
 * runs, or NULL. */
ps_customer_t *ps__registry_running_customer(void);

#endif /* PS_NET_CUSTOMER_INTERNAL_H_ */

/*
 * The resender (PS_RESEND): acknowledgements, resends and de-duplication of
 * data messages, between the postoffice and the van. Internal to //ps/net;
 * tested on its own.
 *
 * Sender side: every data message sent is remembered (a copy holding
 * references on its data) until its receiver acknowledges it; one that is
 * not acknowledged is sent again PS_RESEND_TIMEOUT after it was first
 * sent, again after 2x, 3x, ... that, at most `max_retries` times; after
 * the last one it is given up (the postoffice fails its request with
 * PS_ERR_TIMED_OUT and logs the peer) instead of aborting as upstream did.
 *
 * Receiver side: every data message is acknowledged (also a duplicate: its
 * sender may not have seen the first acknowledgement yet), and a message
 * whose key was seen recently is a duplicate and dropped. The key is
 * (app, customer, sender, receiver, timestamp, request flag): one request
 * goes to one receiver once per timestamp, and its response comes back
 * once. Keys are remembered as long as a copy can still arrive — the
 * sender's whole resend schedule plus a margin for queueing — and at most
 * `dedup_cap` of them (beyond, the oldest go early, with a warning):
 * memory is bounded whatever the traffic.
 *
 * A peer that fails (or is declared dead) is forgotten on both sides: its
 * messages are no longer resent, and a process that takes its id over
 * (recovery) starts its timestamps afresh without being mistaken for
 * duplicates.
 *
 * Thread-safe; no callback runs with the lock held.
 */
#ifndef PS_NET_RESENDER_INTERNAL_H_
#define PS_NET_RESENDER_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Upstream's budget: 10 resends (it CHECK-failed at the 10th). */
#define PS__RESEND_MAX_RETRIES 10
/* Most keys the receiver side remembers (about 40 bytes each). */
#define PS__RESEND_DEDUP_CAP (1u << 20)
/* Added to the resend schedule for copies delayed in queues. */
#define PS__RESEND_DEDUP_MARGIN_NS (10ull * 1000000000ull)

typedef struct {
    int32_t app_id;
    int32_t customer_id;
    int32_t sender;
    int32_t recver;
    int32_t timestamp;
    int32_t request; /* 0 or 1 */
} ps__msg_key_t;

/* The key of a message (meta.sender and meta.recver set). */
void ps__msg_key_of(const ps_meta_t *meta, ps__msg_key_t *key_p);
/* The key an acknowledgement refers to: `ack` came from ack->sender to
 * `me` and carries the acknowledged message's app, customer, timestamp
 * and request flag. */
void ps__msg_key_of_ack(const ps_meta_t *ack, int me, ps__msg_key_t *key_p);
/* A 64-bit signature of a key (for control.msg_sig and logs). */
uint64_t ps__msg_key_sig(const ps__msg_key_t *key);

typedef struct ps__resender ps__resender_t;

/* Sends a stored message again; the resender keeps its own references. */
typedef ps_status_t (*ps__resend_func_t)(void *arg, ps_msg_t *msg);
/* A message was resent max_retries times without an acknowledgement. */
typedef void (*ps__resend_giveup_func_t)(void *arg, const ps_msg_t *msg, int retries);

/* timeout_ns > 0; max_retries >= 0; dedup_cap >= 16. */
ps_status_t ps__resender_create(uint64_t timeout_ns, int max_retries, size_t dedup_cap,
                                ps__resender_t **res_p);
/* Drops every stored message (their references) and key. */
void ps__resender_destroy(ps__resender_t *res);

/* Sender: remembers a copy of msg (meta.sender and meta.recver set),
 * first sent at now_ns. Returns PS_OK, PS_ERR_EXISTS if a message with
 * this key is already waiting for its acknowledgement (the new one is not
 * remembered: two messages with one key cannot be told apart), or
 * PS_ERR_NO_MEMORY. *kick_p (may be NULL) is set to 1 when this message is
 * due before the time the last poll asked to be called again. */
ps_status_t ps__resender_track(ps__resender_t *res, const ps_msg_t *msg, uint64_t now_ns,
                               int *kick_p);
/* Sender: forgets msg (its first send failed). */
void ps__resender_untrack(ps__resender_t *res, const ps_msg_t *msg);
/* Sender: an acknowledgement arrived; 1 if it matched a stored message. */
int ps__resender_on_ack(ps__resender_t *res, const ps__msg_key_t *key);

/* Sender: resends what is due (resend_fn, without the lock), gives up what
 * ran out of retries (giveup_fn, then the copy is dropped). Returns when
 * it should be called next (monotonic ns), or 0 when nothing is stored. */
uint64_t ps__resender_poll(ps__resender_t *res, uint64_t now_ns, ps__resend_func_t resend_fn,
                           ps__resend_giveup_func_t giveup_fn, void *arg);

/* Receiver: records a received data message's key; 1 if it was seen
 * before (a duplicate: drop it), 0 the first time. */
int ps__resender_seen(ps__resender_t *res, const ps_meta_t *meta, uint64_t now_ns);

/* Both sides: forgets messages to `peer` and keys from it. */
void ps__resender_forget_peer(ps__resender_t *res, int peer);

/* For tests and logs. */
size_t ps__resender_num_tracked(ps__resender_t *res);
size_t ps__resender_num_keys(ps__resender_t *res);
uint64_t ps__resender_num_resent(ps__resender_t *res);
uint64_t ps__resender_num_duplicates(ps__resender_t *res);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_RESENDER_INTERNAL_H_ */

/*
 * The postoffice's message layer, for the apps built on it (ps/app) and
 * tests: sending a message, and the small lane. A program using ps as a
 * library needs none of it (ps/ps.h does not include it).
 */
#ifndef PS_NET_POSTOFFICE_MSG_H_
#define PS_NET_POSTOFFICE_MSG_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/codec/lane.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sends a message to meta.recver (a node id); stamps meta.sender. Never
 * blocks on the network. The caller keeps and releases *msg. PS_OK (queued
 * or sent), PS_ERR_PEER_GONE (the node is dead, or its connection closed),
 * PS_ERR_LINK_FAILED (no working connection to it otherwise),
 * PS_ERR_SHUTDOWN (finalizing). */
ps_status_t ps_postoffice_send(ps_postoffice_t *po, const ps_msg_t *msg);

/* The small lane (ps/net/codec/lane.h): a message of an app's own compact
 * form, without meta or frame, for the small requests and responses whose
 * generic path costs more than their transport. The payload bytes a lane
 * message may carry, or 0 when there is no lane: the van has none,
 * PS_SMALL_LANE=0, or PS_RESEND / PS_DROP_MSG must see every message. */
size_t ps_postoffice_lane_max(const ps_postoffice_t *po);

/* Room a lane sender leaves in front of its payload, for the headers. */
#define PS_POSTOFFICE_LANE_HEADROOM PS_LANE_HEADROOM

/* Sends payload[0..len) (len <= ps_postoffice_lane_max()) to the customer
 * (app_id, customer_id) of node `recver`, a server or worker, whose lane
 * function (ps_customer_set_lane_func) receives it, in order with this
 * node's other messages to `recver`. The PS_POSTOFFICE_LANE_HEADROOM bytes
 * before payload must be writable. Statuses as ps_postoffice_send();
 * PS_ERR_INVALID_ARG also for a payload too long; PS_ERR_UNSUPPORTED when
 * the lane cannot carry it (app or customer id outside 0..65535) or the
 * van cannot take a lane message to that node: nothing was sent, send it
 * the generic way. */
ps_status_t ps_postoffice_send_lane(ps_postoffice_t *po, int recver, int app_id, int customer_id,
                                    uint8_t *payload, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_POSTOFFICE_MSG_H_ */

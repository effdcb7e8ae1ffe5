/*
 * One message through the postoffice, for the test programs that speak to
 * it directly (po_node, sum_node): a request to one node, or the response
 * to a request, each with at most one segment. They only fill the meta and
 * send; what to put in the segment and what to check is each program's.
 */
#ifndef PS_TESTS_LIB_PO_SEND_H_
#define PS_TESTS_LIB_PO_SEND_H_

#include <stdbool.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A request (push when `push`) for customer (app, customer) of node
 * `recver`, under timestamp `ts` and `head`; `payload` NULL or empty sends
 * no segment. */
ps_status_t po_send_request(ps_postoffice_t *po, int recver, int app, int customer, int ts,
                            int head, bool push, const ps_slice_t *payload,
                            ps_data_type_t type);

/* The response to `req`: back to its sender, same app, customer, timestamp
 * and head. */
ps_status_t po_send_reply(ps_postoffice_t *po, const ps_msg_t *req, const ps_slice_t *payload,
                          ps_data_type_t type);

#ifdef __cplusplus
}
#endif

#endif /* PS_TESTS_LIB_PO_SEND_H_ */

/*
 * ps_msg_t: one message as it moves through ps — meta plus data segments.
 *
 * The meta is the codec's C model (ps/net/codec/message.h). Data segments
 * are ref-counted slices: a value goes from the user's buffer to the wire,
 * and from the wire to the handler, without a copy. A message owns one
 * reference on each of its slices; ps_msg_release() drops them.
 *
 * KV convention (as upstream): data[0] keys, data[1] values, data[2] lengths.
 */
#ifndef PS_NET_MESSAGE_H_
#define PS_NET_MESSAGE_H_

#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_MSG_MAX_DATA 4

typedef struct ps_msg {
    ps_meta_t meta;
    /* Control messages only: the node list (owned by the message, freed by
     * ps_msg_release when `nodes_owned`). A van delivering a message puts
     * the decoded node list and body in this one allocation (meta.control.
     * nodes and meta.body point into it), so `nodes` may be set with
     * num_nodes 0 when there is only a body. */
    ps_node_t *nodes;
    uint32_t num_nodes;
    uint32_t nodes_owned;
    uint32_t num_data;
    ps_slice_t data[PS_MSG_MAX_DATA];
} ps_msg_t;

/* Zeroes a message and sets the meta's "empty" markers. */
void ps_msg_init(ps_msg_t *msg);

/* Appends a slice, taking a new reference on it, and records its length in
 * meta.data_size and its type in meta.data_type. */
ps_status_t ps_msg_add_data(ps_msg_t *msg, const ps_slice_t *slice, ps_data_type_t type);

/* Appends a slice without taking a reference, for a message that is only
 * handed to ps_postoffice_send() and then dropped without
 * ps_msg_release() (which would drop a reference the message never took):
 * the postoffice and the vans take their own references on what they keep
 * after the call, so the caller need only keep the slice alive until it
 * returns. Saves a reference and its release per segment on hot paths. */
ps_status_t ps_msg_lend_data(ps_msg_t *msg, const ps_slice_t *slice, ps_data_type_t type);

/* Drops the references the message holds and its owned node list. */
void ps_msg_release(ps_msg_t *msg);

/* Total bytes of the data segments. */
uint64_t ps_msg_data_bytes(const ps_msg_t *msg);

/* One line for PS_VERBOSE=2 logs: "request push app 0 ts 17 key 8 1 seg 4096b". */
int ps_msg_describe(const ps_msg_t *msg, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_MESSAGE_H_ */

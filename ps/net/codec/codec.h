/*
 * The meta codec: ps_meta_t <-> the bytes of meta.proto (nanopb).
 *
 * No call allocates. Encoding writes into the caller's buffer; decoding reads
 * the caller's buffer, points meta->body into it (zero-copy) and writes a
 * control message's nodes into the caller's array. Data segments are not the
 * codec's business: the frame (frame.h) carries them beside the meta.
 *
 * Errors are logged here, where they are decided (component "codec"): a
 * rejected input with nanopb's reason, rate-limited since a broken peer can
 * send many; a meta this process cannot encode as an error.
 */
#ifndef PS_NET_CODEC_CODEC_H_
#define PS_NET_CODEC_CODEC_H_

#include <stddef.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The number of bytes ps_meta_encode() will write for meta (a sizing pass;
 * nothing is written).
 *   PS_ERR_INVALID_ARG  meta breaks the model (a count over its array, a value
 *                       outside its enum, an unterminated hostname, nodes NULL
 *                       with num_nodes > 0).
 */
ps_status_t ps_meta_encoded_size(const ps_meta_t *meta, size_t *size_p);

/*
 * Encodes meta into buf[0..cap) and sets *len_p to the bytes written.
 *   PS_ERR_TOO_LARGE    cap is too small (ps_meta_encoded_size() says how
 *                       much is needed); buf's contents are then undefined.
 *   PS_ERR_INVALID_ARG  as ps_meta_encoded_size().
 */
ps_status_t ps_meta_encode(const ps_meta_t *meta, void *buf, size_t cap,
                           size_t *len_p);

/*
 * Decodes buf[0..len) into *meta_p. meta_p->body then points into buf, and
 * meta_p->control.nodes at `nodes`, which receives the node list (up to
 * node_cap entries; nodes may be NULL when node_cap is 0). Data messages carry
 * no nodes, so the data path passes NULL, 0.
 *   PS_ERR_PROTOCOL     not a valid meta: nanopb's parse failed, or a value is
 *                       outside its enum, a count over its array, the ports
 *                       and device lists of a node differ in length, or a
 *                       hostname holds a NUL.
 *   PS_ERR_TOO_LARGE    more nodes than node_cap.
 * On failure *meta_p is untouched, but nodes[] may have been written.
 */
ps_status_t ps_meta_decode(const void *buf, size_t len, ps_meta_t *meta_p,
                           ps_node_t *nodes, size_t node_cap);

/*
 * ps_meta_decode() into a heap array of nodes that grows (realloc, up to
 * max_nodes entries) until the node list fits. *nodes_p / *node_cap_p are
 * the caller's scratch array (NULL / 0 at first); the caller frees it.
 * Returns what ps_meta_decode() returns, or PS_ERR_NO_MEMORY.
 */
ps_status_t ps_meta_decode_grow(const void *buf, size_t len, ps_meta_t *meta_p,
                                ps_node_t **nodes_p, size_t *node_cap_p, size_t max_nodes);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_CODEC_CODEC_H_ */

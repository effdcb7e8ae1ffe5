/*
 * The van base: what every van embeds as its first member and what the
 * shared van code reads — the handle the postoffice holds, the parameters
 * and callbacks the van was opened with, its node id and its byte
 * counters — and the steps every van takes the same way around them:
 * taking a decoded meta into a message, handing a message up, counting.
 * A van's own struct starts with `ps_van_base_t base;`, so the handle, the
 * base and the van are one address.
 */
#ifndef PS_NET_VAN_BASE_H_
#define PS_NET_VAN_BASE_H_

#include <stdint.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/codec/frame.h"
#include "ps/net/message.h"
#include "ps/net/van/handshake.h"
#include "ps/net/van/van.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van_base {
    ps_van_t handle;            /* first: what open() hands out */
    ps_van_params_t params;
    ps_van_callbacks_t cb;      /* all NULL when opened without */
    ps_log_component_t log;
    int my_id;                  /* atomic; PS_NODE_EMPTY until assigned */
    uint64_t bytes_sent;        /* atomic: data bytes handed to the wire */
    uint64_t bytes_recv;        /* atomic: data bytes taken from it */
    /* The van_data prefix of the van's own messages (its hello, its
     * handshake): send() refuses a caller's meta that starts with it. */
    char own_tag[8];
    uint32_t own_tag_len;
    /* The receiving thread's node list for decoding metas (rx.h): grown
     * as a job's node table needs, freed by ps_van_base_fini(). */
    ps_node_t *rx_nodes;
    size_t rx_nodes_cap;
} ps_van_base_t;

/* Fills the handle (name, ops; no loop), copies params and cb (cb may be
 * NULL); my_id starts as PS_NODE_EMPTY and the counters at 0. */
void ps_van_base_init(ps_van_base_t *base, const char *name, const ps_van_ops_t *ops,
                      ps_log_component_t log, const ps_van_params_t *params,
                      const ps_van_callbacks_t *cb);

/* Sets the van_data prefix of the van's own messages (at most 7 bytes)
 * that ps_van_send_prepare refuses from a caller. */
void ps_van_base_set_own_tag(ps_van_base_t *base, const char *tag);

/* Frees what the base holds (the decode scratch); the van frees itself. */
void ps_van_base_fini(ps_van_base_t *base);

static inline ps_van_base_t *ps_van_base_of(ps_van_t *van)
{
    return (ps_van_base_t *)(void *)van;
}

static inline int ps_van_base_my_id(const ps_van_base_t *base)
{
    return __atomic_load_n(&base->my_id, __ATOMIC_ACQUIRE);
}

static inline void ps_van_base_count_sent(ps_van_base_t *base, uint64_t bytes)
{
    __atomic_add_fetch(&base->bytes_sent, bytes, __ATOMIC_RELAXED);
}

static inline void ps_van_base_count_recv(ps_van_base_t *base, uint64_t bytes)
{
    __atomic_add_fetch(&base->bytes_recv, bytes, __ATOMIC_RELAXED);
}

/* The stats op of a van whose counters are the base's. */
void ps_van_base_stats(ps_van_t *van, uint64_t *sent_p, uint64_t *recv_p);

/* Takes `node_id` as the van's id: PS_ERR_INVALID_ARG outside
 * 1..PS_NODE_EMPTY-1; *changed_p says whether it differs from the id held
 * before (the van then re-announces itself on what it opened). */
ps_status_t ps_van_base_set_node_id(ps_van_base_t *base, int node_id, int *changed_p);

/* Hands a complete message to cb.deliver (a trace line first), which owns
 * its references from then on; released here when the van has no
 * deliver callback. `msg` is left empty. */
void ps_van_base_deliver(ps_van_base_t *base, ps_msg_t *msg);

/* A new connection's job-secret handshake, not started: with the van's
 * secret when it has one; `van` ("tcp", ...) names the van in the proofs. */
void ps_van_base_hs_init(const ps_van_base_t *base, ps_van_hs_t *hs, const char *van,
                         int initiator);

/* "the scheduler", "node 9 at 10.0.0.2:4242" ("node 9" when addr is
 * NULL) or just the address (an unidentified peer; addr may be NULL),
 * for log lines; returns buf. */
const char *ps_van_peer_name(int peer_id, const char *addr, char *buf, size_t cap);

/* Receive side: puts a meta decoded in place (its node list and body
 * point into the van's receive buffer) into `msg`, with its own copy of
 * both in one block that goes with the message, and `sender` as the
 * sender: the id the connection proved, never the wire's. `meta` may be
 * msg's own meta (decoded in place).
 * PS_ERR_NO_MEMORY leaves msg's meta set but without node list or body. */
ps_status_t ps_van_msg_take_meta(ps_msg_t *msg, const ps_meta_t *meta, int sender);

/* The frame limits of a van that sends ps frames, from params'
 * PS_MAX_META_BYTES, PS_MAX_DATA_SEGMENTS (at most PS_MSG_MAX_DATA) and
 * PS_MAX_MESSAGE_BYTES, which bounds the data: the frame's limit adds the
 * header and the meta. */
ps_frame_limits_t ps_van_frame_limits(const ps_van_params_t *params);
/* Fills attr's max_message_bytes (the data part) and max_data_segments
 * from such limits. */
void ps_van_frame_attr(const ps_frame_limits_t *limits, ps_van_attr_t *attr);

/* Whether a connection that failed with `why` is remembered for the sends
 * that then find no connection to its peer (each van keeps it in its peer
 * table, PS_OK while connected), so that a request sent before the
 * postoffice hears of the failure fails the way those it fails do. */
static inline int ps_van_keeps_lost(ps_status_t why)
{
    return why == PS_ERR_PEER_GONE || why == PS_ERR_LINK_FAILED;
}

/* What a send to node `id` that finds no connection returns: `lost` (how
 * its last connection failed), or PS_ERR_UNREACHABLE when none did (a
 * rate-limited warning). */
ps_status_t ps_van_unconnected(const ps_van_base_t *base, int id, ps_status_t lost);

/* PS_OK for a node id a message can go to (1 .. PS_NODE_EMPTY - 1), else
 * PS_ERR_INVALID_ARG (logged under the base's component, naming `what`). */
ps_status_t ps_van_check_recver(const ps_van_base_t *base, int recver, const char *what);

/* The device memory kinds a van reads and writes itself, as a mask of
 * PS_VAN_DEVICE(kind) bits (kind: a ps_buf_mem_t); 0: host memory only.
 * PS_VAN_DEVICE_ANY: every kind, the van finds out per buffer (ibverbs
 * registers it, or cannot). */
#define PS_VAN_DEVICE(kind) (1u << (unsigned)(kind))
#define PS_VAN_DEVICE_ANY (~0u)
/* Alone, for a segment the van copies with the CPU (small data carried
 * inside its message) although it moves device memory otherwise: host
 * memory only, and a device buffer named for it is refused without a
 * warning (the layer above copies the bytes there). */
#define PS_VAN_HOST_COPY (1u << 31)

/* Whether a van with mask `device_kinds` reads and writes memory of `kind`
 * itself: host memory always, a device kind when its bit is set. */
static inline int ps_van_moves_kind(uint32_t device_kinds, ps_buf_mem_t kind)
{
    return kind == PS_BUF_MEM_HOST || kind == PS_BUF_MEM_SHM ||
           (device_kinds & PS_VAN_DEVICE(kind)) != 0;
}

/* The same for a slice's memory (an empty slice touches none). */
static inline int ps_van_moves_mem(uint32_t device_kinds, const ps_slice_t *slice)
{
    return slice->len == 0 || ps_van_moves_kind(device_kinds, ps_slice_mem_kind(slice));
}

/* Send side: the checks every van makes before it encodes, and the meta
 * to encode. PS_ERR_INVALID_ARG for a message without a receiver, or
 * whose van_data starts with the van's own tag (ps_van_base_set_own_tag);
 * PS_ERR_UNSUPPORTED for a device-memory segment of a kind not in
 * `device_kinds` (logged under the base's component). *meta_p is msg's meta, or
 * `scratch` holding it with the message's node list when the list rides
 * in the message rather than the meta (both may be NULL: checks only). */
ps_status_t ps_van_send_prepare(const ps_van_base_t *base, const ps_msg_t *msg,
                                uint32_t device_kinds, ps_meta_t *scratch,
                                const ps_meta_t **meta_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_BASE_H_ */

/*
 * The van interface: what every transport (TCP, shared memory, ibverbs,
 * libfabric, UCX) implements, as an ops table, and what the postoffice
 * above it sees. Internal to the net layer and the transports; apps never
 * include it — they see only the capabilities (ps_van_attr_t) through the
 * postoffice.
 *
 * Threading contract:
 *  - send() may be called from any thread, concurrently; it never blocks on
 *    the network: what the socket/QP cannot take now is queued and finished
 *    by the van's progress thread. Messages to one peer arrive in the order
 *    send() was called for them.
 *  - The van calls the callbacks from its own progress thread(s).
 *    recv_buffer() decides where incoming data lands (e.g. straight in the
 *    buffer a worker named for a pull response); deliver() hands over a
 *    complete message, whose slice references pass to the callee.
 */
#ifndef PS_NET_VAN_VAN_H_
#define PS_NET_VAN_VAN_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/auth.h"
#include "ps/net/caps.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van ps_van_t;

/* cap_flags are the PS_CAP_* flags of ps/net/caps.h. */
typedef struct ps_van_attr {
    uint64_t cap_flags;
    uint64_t max_message_bytes;  /* largest data size of one message */
    uint32_t max_data_segments;
    uint32_t num_streams;        /* connections/QPs used per peer */
} ps_van_attr_t;

typedef struct ps_van_callbacks {
    void *arg;
    /* Where data segment `index` (of `len` bytes) of the message whose meta
     * has just been decoded should land. Fill *slice_p with a referenced
     * slice of at least `len` bytes and return PS_OK, or return
     * PS_ERR_NOT_FOUND to let the van use its own pooled buffer. For a
     * request, a van may ask before the message arrives, with a meta that
     * holds only sender, app_id, customer_id, key, request, push and
     * is_tensor, and keep the answer for later requests of that sender and
     * key (the ibverbs van's steered grants); it asks again on arrival. */
    ps_status_t (*recv_buffer)(void *arg, const ps_meta_t *meta, unsigned index,
                               uint64_t len, ps_slice_t *slice_p);
    /* A complete message. meta.sender is the node id the connection proved
     * (never taken from the wire alone). The callee owns *msg's references
     * and must ps_msg_release() it. */
    void (*deliver)(void *arg, ps_msg_t *msg);
    /* The connection to `node_id` failed or closed: `why` says how
     * (PS_ERR_PEER_GONE, PS_ERR_LINK_FAILED, PS_ERR_PROTOCOL, ...). */
    void (*peer_failed)(void *arg, int node_id, ps_status_t why);
    /* A small-lane message (send_lane below): `len` bytes from node
     * `sender` (proved by the connection, as for deliver), starting with
     * the lane header of ps/net/codec/lane.h, valid only during the call.
     * Called in order with the connection's deliver() calls. A van without
     * send_lane never calls it. */
    void (*deliver_lane)(void *arg, int sender, const uint8_t *bytes, size_t len);
} ps_van_callbacks_t;

typedef struct ps_van_params {
    ps_role_t role;
    int is_scheduler;
    int busy_poll;               /* PS_BUSY_POLL */
    int conns_per_peer;          /* DMLC_NUM_PORTS (a van may raise it) */
    uint64_t max_meta_bytes;     /* PS_MAX_META_BYTES */
    uint64_t max_message_bytes;  /* PS_MAX_MESSAGE_BYTES */
    uint32_t max_data_segments;  /* PS_MAX_DATA_SEGMENTS */
    int connect_timeout_ms;      /* PS_CONNECT_TIMEOUT_MS */
    int bind_any;                /* bind the wildcard address, not node->hostname */
    /* The job secret (PS_JOB_SECRET): when auth_enabled, every connection
     * runs the ps/net/auth.h challenge-response before any of its messages
     * is processed; a peer that fails it is refused with PS_ERR_AUTH. 0:
     * no handshake, the wire stays as upstream's. */
    int auth_enabled;
    ps_auth_key_t auth_key;
} ps_van_params_t;

typedef struct ps_van_ops {
    size_t size; /* sizeof(ps_van_ops_t) the van was built with */

    /* lifecycle */
    ps_status_t (*open)(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                        ps_van_t **van_p);
    void (*close)(ps_van_t *van); /* stops threads, closes every connection */
    ps_status_t (*query)(ps_van_t *van, ps_van_attr_t *attr_p);

    /* addressing: bind fills node->port/ports (and endpoint_name for vans
     * that have one); node->port != 0 on entry asks for that port. */
    ps_status_t (*bind)(ps_van_t *van, ps_node_t *node, int max_retry);
    /* Connects to `peer` (which has id, hostname, port). Idempotent. Until
     * the local node id is known, `my_id` is PS_NODE_EMPTY. */
    ps_status_t (*connect)(ps_van_t *van, const ps_node_t *peer, int my_id);
    void (*disconnect)(ps_van_t *van, int node_id);
    /* The local node id changed (assigned by the scheduler); connections
     * made before announce it to their peers. */
    ps_status_t (*set_node_id)(ps_van_t *van, int node_id);

    /* data: meta.recver names the peer. The van takes its own references on
     * the data slices; the caller keeps (and releases) *msg. */
    ps_status_t (*send)(ps_van_t *van, const ps_msg_t *msg);

    /* memory */
    ps_status_t (*register_mem)(ps_van_t *van, ps_buf_t *buf);
    ps_status_t (*deregister_mem)(ps_van_t *van, ps_buf_t *buf);

    /* bytes sent and received so far (for benchmarks and logs) */
    void (*stats)(ps_van_t *van, uint64_t *sent_p, uint64_t *recv_p);

    /* Optional (see ps_van_progress; a van implements it with
     * ps_van_loop_drive, progress_loop.h): with busy polling, a thread waiting
     * for a completion drives the van itself, so that a process has one
     * spinning thread, not the waiter and the van's thread both (UCX's
     * model). Handles what is ready now, at most `budget` events, and
     * returns how many it handled; callbacks run on the calling thread.
     * The van's own thread stands back while a thread keeps calling this,
     * and takes over again when the calls stop — at once after a call with
     * budget 0 ("I stop driving"). Never from a van callback; the van must
     * stay open for the duration of the call. */
    int (*progress)(ps_van_t *van, unsigned budget);

    /* Optional (see ps_van_send_lane_op): sends `len` bytes, a lane header
     * and its payload (ps/net/codec/lane.h; at most PS_LANE_MAX_BYTES), to
     * node `recver` as one message, in order with send()'s messages to that
     * node. The van may write its own framing into the PS_LANE_VAN_HEADROOM
     * bytes before `bytes`, which the caller provides. The receiving van
     * hands them to deliver_lane() untouched: no meta, no segments, no
     * frame to decode. PS_ERR_UNSUPPORTED: not to this peer, now (say, one
     * the van reaches through another transport); nothing was sent, and the
     * caller sends the message the generic way. */
    ps_status_t (*send_lane)(ps_van_t *van, int recver, uint8_t *bytes, size_t len);

    /* Optional (see ps_van_same_host_op): 1 when the van reaches node_id
     * through memory shared on this host now, so that process can open
     * this one's device IPC handles; 0 otherwise or when not known yet. */
    int (*same_host)(ps_van_t *van, int node_id);
} ps_van_ops_t;

/* Every van object starts with this. */
struct ps_van {
    const ps_van_ops_t *ops;
    const char *name;
    /* The van's progress loop (progress_loop.h), which ps_van_loop_progress
     * drives; NULL for a van without one. */
    struct ps_van_loop *loop;
};

/* A van implementation registers one component (see PS_VAN_REGISTER). */
typedef struct ps_van_component {
    const char *name;        /* "tcp", "shm", "ibverbs", "fabric", "ucx" */
    const char *aliases;     /* comma-separated other names ("zmq,0") */
    const ps_van_ops_t *ops;
    /* 0 if usable on this machine; else fills why. May be NULL (always). */
    int (*unavailable)(char *why, size_t cap);
} ps_van_component_t;

void ps_van_register(const ps_van_component_t *component);

/* Registers a component when the van's library is linked (alwayslink). */
#define PS_VAN_REGISTER(_component)                                        \
    __attribute__((constructor)) static void ps__van_register_##_component(void) \
    {                                                                      \
        ps_van_register(&(_component));                                    \
    }

/* Finds a van by name or alias (case-insensitive). PS_ERR_NOT_FOUND (unknown
 * or not compiled in) and PS_ERR_UNSUPPORTED (compiled in, but its
 * unavailable() says it cannot run here) log one line listing the vans that
 * are available. */
ps_status_t ps_van_find(const char *name, const ps_van_component_t **component_p);

/* Lists the registered components; returns how many (up to cap). */
size_t ps_van_list(const ps_van_component_t **components, size_t cap);

/* The van name chosen by the upstream variables: BYTEPS_ENABLE_IPC=1 →
 * ipc (shared memory to same-host peers, the network van below to the
 * others), unless that network van is shm itself; otherwise the network
 * van. */
ps_status_t ps_van_select_name(const char **name_p);
/* The network van alone: DMLC_ENABLE_UCX=1 → ucx; else DMLC_ENABLE_RDMA
 * (zmq/0/tcp → tcp, ibverbs/1 → ibverbs, fabric, shm, ...); else
 * DMLC_PS_VAN_TYPE; else tcp. The ipc van wraps this one. */
ps_status_t ps__van_select_network_name(const char **name_p);

/* Shared stubs for unsupported slots. */
ps_status_t ps_van_no_register_mem(ps_van_t *van, ps_buf_t *buf);
ps_status_t ps_van_no_deregister_mem(ps_van_t *van, ps_buf_t *buf);
int ps_van_no_progress(ps_van_t *van, unsigned budget); /* returns 0 */

/* Nonces, cookies, first sequence numbers and random ports of a van: from
 * libsodium's CSPRNG (randombytes_buf), as the job secret's nonces
 * (ps/net/auth.h), so that a peer cannot guess them from the clock or a
 * pid; distinct in forked children. Thread-safe. */
void ps_van_random_bytes(void *buf, size_t len);
uint64_t ps_van_random(void);

/* The connect timeout a van uses: `requested_ms` (the params') when > 0,
 * else PS_CONNECT_TIMEOUT_MS, else `fallback_ms`. */
int ps_van_connect_timeout_ms(int requested_ms, int fallback_ms);

/* The next pause before connecting again to a peer that is not listening
 * yet (a launcher starts everyone at once): 10 ms first, doubling up to
 * 500 ms, kept in *backoff_ms_p (0 before the first retry). Returns when
 * the retry is due, `now_ns` plus the pause. */
uint64_t ps_van_connect_backoff(uint32_t *backoff_ms_p, uint64_t now_ns);

/* Wakes a thread sleeping on eventfd `fd` (EAGAIN: a wake-up is pending
 * already). */
void ps_van_wake_fd(int fd);

/* The van's progress op, or NULL when it has none that does anything (a
 * table built before the op existed, or set to ps_van_no_progress). */
static inline int (*ps_van_progress_op(const ps_van_t *van))(ps_van_t *, unsigned)
{
    const ps_van_ops_t *ops = van->ops;
    if (ops->size < offsetof(ps_van_ops_t, progress) + sizeof(ops->progress) ||
        ops->progress == NULL || ops->progress == ps_van_no_progress) {
        return NULL;
    }
    return ops->progress;
}

/* Hands a lane message from node `sender` to cb->deliver_lane (a line at
 * trace level first), or drops it with a warning when the van was opened
 * without that callback. For vans' receive paths. */
void ps_van_deliver_lane(const ps_van_callbacks_t *cb, ps_log_component_t comp, int sender,
                         const uint8_t *bytes, size_t len);

/* The van's send_lane op, or NULL when it has none. */
static inline ps_status_t (*ps_van_send_lane_op(const ps_van_t *van))(ps_van_t *, int, uint8_t *,
                                                                     size_t)
{
    const ps_van_ops_t *ops = van->ops;
    if (ops->size < offsetof(ps_van_ops_t, send_lane) + sizeof(ops->send_lane)) {
        return NULL;
    }
    return ops->send_lane;
}

/* The van's same_host op; NULL for a van without one (no peer shares
 * this host's memory through it). */
static inline int (*ps_van_same_host_op(const ps_van_t *van))(ps_van_t *, int)
{
    const ps_van_ops_t *ops = van->ops;
    if (ops->size < offsetof(ps_van_ops_t, same_host) + sizeof(ops->same_host)) {
        return NULL;
    }
    return ops->same_host;
}

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_VAN_H_ */

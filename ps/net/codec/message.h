/*
 * The message model of ps: a meta (plain C structs with fixed-size arrays)
 * plus data segments carried beside it by the frame (frame.h).
 *
 * These types are what the rest of ps uses; the wire form generated from
 * meta.proto stays inside the codec. Nothing here allocates: the body is a
 * pointer and length into a buffer the caller owns (or the decoded input),
 * and a control message's node list is an array the caller provides.
 *
 * Values and numbering follow upstream ps-lite/StepMesh where they exist
 * (control commands, device types; roles, node ids and data types are in
 * ps/base/ids.h).
 */
#ifndef PS_NET_CODEC_MESSAGE_H_
#define PS_NET_CODEC_MESSAGE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/base/ids.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Array sizes of the model. meta.options carries the same numbers. */
#define PS_NODE_HOSTNAME_MAX 256 /* bytes including the terminating NUL */
#define PS_NODE_MAX_PORTS 32
#define PS_NODE_ENDPOINT_MAX 256 /* fabric / UCX worker address */
#define PS_META_MAX_DATA 64      /* data segments (and data types) */
#define PS_META_MAX_SHAPE 8      /* tensor dimensions */
#define PS_META_MAX_SLAVE_QP 8
#define PS_META_VAN_DATA_MAX 64


typedef enum {
    PS_CTRL_EMPTY = 0, /* not a control message */
    PS_CTRL_TERMINATE = 1,
    PS_CTRL_ADD_NODE = 2,
    PS_CTRL_BARRIER = 3,
    PS_CTRL_ACK = 4,
    PS_CTRL_HEARTBEAT = 5,
    PS_CTRL_BOOTSTRAP = 6,
    PS_CTRL_ADDR_REQUEST = 7,
    PS_CTRL_ADDR_RESOLVED = 8,
    PS_CTRL_INSTANCE_BARRIER = 9,
    PS_CTRL_NODE_FAILED = 10,
    PS_CTRL_AUTH = 11,
} ps_control_cmd_t;
#define PS_CTRL_COUNT 12


typedef enum {
    PS_DEV_UNK = 0,
    PS_DEV_CPU = 1,
    PS_DEV_GPU = 2,
} ps_device_type_t;
#define PS_DEV_TYPE_COUNT 3


typedef struct {
    ps_role_t role;
    int32_t id;
    int32_t customer_id;
    char hostname[PS_NODE_HOSTNAME_MAX]; /* NUL-terminated */
    /* ports, dev_types and dev_ids all hold num_ports entries. */
    uint32_t num_ports;
    int32_t ports[PS_NODE_MAX_PORTS];
    ps_device_type_t dev_types[PS_NODE_MAX_PORTS];
    int32_t dev_ids[PS_NODE_MAX_PORTS];
    bool is_recovery;
    uint32_t endpoint_name_len;
    uint8_t endpoint_name[PS_NODE_ENDPOINT_MAX];
    int32_t aux_id; /* at ADD_NODE: a preferred rank, PS_NODE_AUX_ANY or
                     * PS_NODE_AUX_INSTANCE(i) */
} ps_node_t;

/* A registration's aux_id when the node takes any rank, and when it takes
 * any rank of instance i (rank % DMLC_GROUP_SIZE == i). */
#define PS_NODE_AUX_ANY (-1)
#define PS_NODE_AUX_INSTANCE(i) (-2 - (i))
#define PS_NODE_AUX_INSTANCE_OF(aux) (-2 - (aux))

typedef struct {
    ps_control_cmd_t cmd;
    /* The node list; num_nodes entries. Encode reads it, decode points it at
     * the caller's array. NULL when num_nodes is 0. */
    ps_node_t *nodes;
    uint32_t num_nodes;
    int32_t barrier_group;
    uint64_t msg_sig;
} ps_control_t;

/* One direction of a traced request, in ns. */
typedef struct {
    uint64_t pre_start;
    uint64_t start;
    uint64_t postsend;
    uint64_t postrecv;
    uint64_t process;
} ps_trace_t;

typedef struct {
    int32_t head; /* KV command, AF batch flags */
    int32_t app_id;
    int32_t customer_id;
    int32_t timestamp;
    int32_t sender;
    int32_t recver;
    bool request;
    bool push;
    bool pull;
    bool simple_app;

    /* Not owned: the caller's buffer when encoding, the decoded input after
     * decoding (valid as long as that buffer is). NULL when body_len is 0. */
    const uint8_t *body;
    size_t body_len;

    /* One per data segment. */
    uint32_t num_data_types;
    ps_data_type_t data_types[PS_META_MAX_DATA];
    ps_device_type_t src_dev_type;
    int32_t src_dev_id;
    ps_device_type_t dst_dev_type;
    int32_t dst_dev_id;
    uint64_t data_size; /* sum of the data segments' lengths */
    uint64_t key;
    uint64_t addr; /* the value buffer's address */
    uint64_t val_len;
    int32_t option; /* the RDMA van's remote key, as upstream */
    int32_t sid;    /* UCX sequence number */
    int32_t priority;

    ps_control_t control;

    /* Tensors (StepMesh AF). */
    bool is_tensor;
    int8_t dtype; /* torch ScalarType */
    uint32_t ndim;
    int64_t shape[PS_META_MAX_SHAPE];

    ps_trace_t request_trace;
    ps_trace_t response_trace;
    uint32_t num_slave_qp_counters;
    uint32_t slave_qp_counter[PS_META_MAX_SLAVE_QP];
    uint32_t slave_qp_num;

    /* Van-specific rendezvous data (remote keys, ...). */
    uint32_t van_data_len;
    uint8_t van_data[PS_META_VAN_DATA_MAX];
} ps_meta_t;

/* Upstream defaults: ids, app/customer id, timestamp and head PS_NODE_EMPTY,
 * device ids -1, everything else zero/false/EMPTY. */
void ps_meta_init(ps_meta_t *meta);
/* id PS_NODE_EMPTY, aux_id -1, everything else zero (role SERVER). */
void ps_node_init(ps_node_t *node);

static inline bool ps_meta_is_control(const ps_meta_t *meta)
{
    return meta->control.cmd != PS_CTRL_EMPTY;
}

/* The type the meta states for data segment i: PS_DATA_CHAR (bytes of no
 * stated type, upstream's default) when it states none. */
static inline ps_data_type_t ps_meta_data_type(const ps_meta_t *meta, uint32_t i)
{
    return i < meta->num_data_types && i < PS_META_MAX_DATA ? meta->data_types[i]
                                                             : PS_DATA_CHAR;
}

/* Field-by-field equality: bodies and node lists by content, arrays up to
 * their counts, hostnames as strings. For tests and round-trip checks. */
bool ps_node_equal(const ps_node_t *a, const ps_node_t *b);
bool ps_meta_equal(const ps_meta_t *a, const ps_meta_t *b);


/* Lower-case names ("add_node", "gpu"); never NULL, "unknown" for values
 * outside the enum. */
const char *ps_control_cmd_str(ps_control_cmd_t cmd);
const char *ps_device_type_str(ps_device_type_t type);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_CODEC_MESSAGE_H_ */

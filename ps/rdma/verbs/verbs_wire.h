/*
 * What the ibverbs van puts on the wire besides ps frames: the rdmacm
 * private data of a connection, the immediate value of an RDMA write, the
 * header in front of every message, the small rendezvous control messages,
 * and the pull descriptor a worker puts in a pull request's van_data.
 *
 * Every multi-byte field is encoded little-endian byte by byte, so nothing
 * here depends on struct layout; decoders check magic, version and ranges
 * before anything is trusted, and report PS_ERR_PROTOCOL otherwise. Pure
 * functions: no verbs calls, no allocation, unit-tested on any machine.
 */
#ifndef PS_RDMA_VERBS_VERBS_WIRE_H_
#define PS_RDMA_VERBS_VERBS_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: rendezvous starts and grants may steer (PS__VB_RDV_STEER). */
#define PS__VB_VERSION 2
/* Queue pairs per connection at most (the meta's slave counters fit 8). */
#define PS__VB_MAX_QP 8

/* ---- rdmacm private data ----
 * Sent with rdma_connect() by the active side and with rdma_accept() by the
 * passive side. InfiniBand gives a connect request 56 bytes of private data
 * and pads what it delivers, so the encoding is fixed-size (28 bytes) and
 * decoding accepts longer input. */
#define PS__VB_CONN_DATA_LEN 28

enum {
    PS__VB_CONN_LAG = 1u << 0, /* the sender pins its QPs to LAG ports */
};

typedef struct {
    int32_t node_id;   /* the sender's node id; PS_NODE_EMPTY while unassigned */
    uint8_t qp_index;  /* which of the connection's QPs this one is */
    uint8_t qp_count;  /* how many QPs the connection has */
    uint16_t flags;    /* PS__VB_CONN_* */
    uint64_t nonce;    /* shared by the QPs of one connect() */
    uint32_t max_inline; /* informational: the sender's inline limit */
} ps__vb_conn_data_t;

ps_status_t ps__vb_conn_data_encode(const ps__vb_conn_data_t *d, void *buf, size_t cap,
                                    size_t *len_p);
/* PS_ERR_PROTOCOL for a short buffer, a wrong magic or version, a QP index
 * not below the count, a count of 0 or above PS__VB_MAX_QP, or a node id
 * that is neither PS_NODE_EMPTY nor 1..PS_NODE_EMPTY-1. */
ps_status_t ps__vb_conn_data_decode(const void *buf, size_t len, ps__vb_conn_data_t *d_p);

/* ---- immediate data ----
 * An RDMA write with immediate names what it completes:
 *   0      a slave chunk (a piece of a payload on QP k > 0), counted per QP;
 *   other  the id of the granted buffer whose meta has just been written
 *          (ids of the common slot pool are never 0).
 * ibverbs carries the value big-endian (wr.imm_data / wc.imm_data). */
typedef enum {
    PS__VB_IMM_SLAVE = 0,
    PS__VB_IMM_META = 1,
} ps__vb_imm_kind_t;

uint32_t ps__vb_imm_meta(uint32_t slot);  /* network order */
uint32_t ps__vb_imm_slave(void);          /* network order */
/* Kind of a received imm_data (network order); the slot for META. */
ps__vb_imm_kind_t ps__vb_imm_decode(uint32_t imm_be, uint32_t *slot_p);

/* ---- message header ----
 * In front of the frame (frame header + meta) of every message, in a SEND
 * (eager: the in-buffer data segments follow the frame) and in a meta
 * written into a granted buffer (the data segments are in the grant's data
 * region). */
typedef enum {
    PS__VB_MSG_EAGER = 1,     /* SEND: header, frame, data */
    PS__VB_MSG_META = 2,      /* written into a grant's meta region */
    PS__VB_MSG_RDV_START = 3, /* SEND: asks for a buffer */
    PS__VB_MSG_RDV_GRANT = 4, /* SEND: answers a start, or re-grants */
    PS__VB_MSG_RDV_DROP = 5,  /* SEND: a cached grant the sender gives back */
    PS__VB_MSG_HELLO = 6,     /* SEND: the sender's node id is now known */
    PS__VB_MSG_AUTH_PROOF = 7, /* SEND: the job-secret proof, first on QP 0 (verbs_auth.h) */
} ps__vb_msg_type_t;

enum {
    /* Segment rma_seg was written into the receiver's pull destination
     * rma_slot (it is not in this message's buffer). */
    PS__VB_HDR_RMA = 1u << 0,
    /* This answers pull rma_slot without writing into it (the values are
     * in the buffer): the receiver frees the slot. */
    PS__VB_HDR_PULL_DONE = 1u << 1,
    /* Segment rma_seg was written into the grant's steered region (the
     * application's buffer), not its data region. Never with the two
     * above; rma_slot is 0. */
    PS__VB_HDR_STEER = 1u << 2,
};

typedef struct {
    uint8_t type;      /* ps__vb_msg_type_t: EAGER or META */
    uint8_t flags;     /* PS__VB_HDR_* */
    uint8_t rma_seg;
    uint8_t nqp;       /* QPs of the connection (1..PS__VB_MAX_QP) */
    uint32_t rma_slot;
    uint32_t frame_len; /* frame header + meta bytes after this header */
    /* Slave chunks sent on QP k (k = 1..nqp-1) up to and including this
     * message, cumulative and wrapping; slave[0] is unused. */
    uint32_t slave[PS__VB_MAX_QP];
} ps__vb_hdr_t;

#define PS__VB_HDR_FIXED 16
/* Encoded size: 16 bytes, plus 4 for each slave counter 1..nqp-1. */
size_t ps__vb_hdr_len(const ps__vb_hdr_t *h);
ps_status_t ps__vb_hdr_encode(const ps__vb_hdr_t *h, void *buf, size_t cap, size_t *len_p);
/* *len_p = header bytes consumed. */
ps_status_t ps__vb_hdr_decode(const void *buf, size_t len, ps__vb_hdr_t *h_p, size_t *len_p);

/* ---- rendezvous control messages (one SEND each) ---- */

/* Data segments a message has at most (PS_MSG_MAX_DATA). */
#define PS__VB_MAX_SEGS 4

typedef struct {
    uint8_t type;       /* RDV_START, RDV_GRANT, RDV_DROP or HELLO */
    uint8_t dir;        /* grant family: bit 0 request, bit 1 push */
    uint8_t flags;      /* START: PS__VB_RDV_CACHEABLE; GRANT: PS__VB_RDV_REGRANT */
    uint32_t token;     /* START/GRANT: matches an answer to its start */
    uint32_t slot;      /* GRANT/DROP: the grant; START: one it replaces (0 none) */
    int32_t node_id;    /* HELLO */
    uint64_t key;       /* START/GRANT: the message key the grant serves */
    uint32_t meta_len;  /* START: bytes needed; GRANT: meta region size */
    uint64_t data_len;  /* START: bytes needed; GRANT: data region size */
    uint64_t meta_addr; /* GRANT: remote addresses and keys */
    uint32_t meta_rkey;
    uint64_t data_addr;
    uint32_t data_rkey;
    /* With PS__VB_RDV_STEER only. START: whom the request is for, so that
     * the receiver can ask where its segments go (recv_buffer) before they
     * are written: app and customer ids, is_tensor, and the length of each
     * of its num_data segments (their sum is data_len). GRANT: the ids
     * again, and segment steer_seg goes to its own region (steer_addr,
     * steer_len bytes, steer_rkey), not to the data region. */
    int32_t app_id;
    int32_t customer_id;
    uint8_t is_tensor;
    uint8_t num_data;
    uint8_t steer_seg;
    uint64_t seg_len[PS__VB_MAX_SEGS];
    uint64_t steer_addr;
    uint64_t steer_len;
    uint32_t steer_rkey;
} ps__vb_ctrl_t;

enum {
    PS__VB_RDV_CACHEABLE = 1u << 0, /* the sender will reuse the grant */
    PS__VB_RDV_REGRANT = 1u << 1,   /* a grant offered for the next message */
    PS__VB_RDV_REFUSED = 1u << 2,   /* GRANT: no buffer for this start (slot 0) */
    PS__VB_RDV_STEER = 1u << 3,     /* the steering fields follow (START, GRANT) */
};

/* Encoded size: PS__VB_CTRL_LEN, or PS__VB_CTRL_STEER_LEN with
 * PS__VB_RDV_STEER. */
#define PS__VB_CTRL_LEN 64
#define PS__VB_CTRL_STEER_LEN 128
ps_status_t ps__vb_ctrl_encode(const ps__vb_ctrl_t *c, void *buf, size_t cap, size_t *len_p);
ps_status_t ps__vb_ctrl_decode(const void *buf, size_t len, ps__vb_ctrl_t *c_p);

/* Type of the SEND payload at buf (first byte after the magic), or 0 when
 * it is too short or has the wrong magic. */
int ps__vb_msg_type(const void *buf, size_t len);

/* ---- pull descriptor (meta.van_data of a worker's pull request) ---- */
#define PS__VB_PULL_DESC_LEN 32

typedef struct {
    uint32_t slot;  /* the worker's pending-pull slot */
    uint32_t rkey;
    uint64_t addr;  /* where the values go */
    uint64_t len;   /* at most this many bytes */
} ps__vb_pull_desc_t;

ps_status_t ps__vb_pull_desc_encode(const ps__vb_pull_desc_t *d, uint8_t *van_data,
                                    size_t cap, uint32_t *len_p);
/* PS_ERR_NOT_FOUND when van_data holds no descriptor (empty or another
 * van's data); PS_ERR_PROTOCOL for a damaged one. */
ps_status_t ps__vb_pull_desc_decode(const uint8_t *van_data, size_t len,
                                    ps__vb_pull_desc_t *d_p);

/* 1 when a message's data may go eagerly, in one SEND that the CPU fills
 * (inline in the work request, or copied into a bounce block): every
 * segment but skip_seg (the pull response's remote-write segment, or -1)
 * is memory the CPU can read. A device segment goes by rendezvous, where
 * the NIC reads it through its registration (GPUDirect). */
int ps__vb_eager_data_ok(const ps_slice_t *data, uint32_t num_data, int skip_seg);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_WIRE_H_ */

/*
 * The shared-memory van's protocol: packets on a channel's unix socket and
 * records in its rings. Both ends are processes of one build on one host,
 * but the receiver still checks everything (ps__shm_ring_peek checks the
 * record framing; shm_recv.c the contents).
 *
 * Socket packets (SOCK_SEQPACKET, one struct each, first byte the type):
 *   HELLO    connector -> acceptor, with the channel memory (memfd) as
 *            SCM_RIGHTS: job id, protocol version, node id (or
 *            PS_NODE_EMPTY), ring size, and where the connector keeps a
 *            cookie that the acceptor reads with process_vm_readv() to
 *            learn whether cross-memory attach works between them.
 *   WELCOME  acceptor -> connector: accepted or refused (why), whether the
 *            acceptor could read the connector's cookie, its own cookie.
 *   CMA_OK   "I could read yours": from then on the receiver of CMA_OK may
 *            send large values as (address, length) for its peer to read.
 *   SEG      announces a segment of ps_shm_buf_alloc() (its memfd as
 *            SCM_RIGHTS) before the first record that refers to it.
 *   BELL     one byte: "look at your ring" (sent only to a peer that said
 *            it sleeps, see shm_ring.h).
 *
 * Ring records (shm_ring.h framing):
 *   MSG      one message: the encoded meta (codec.h), one descriptor per
 *            data segment, then the inline bytes. A segment is INLINE (its
 *            bytes in the record), CMA (the receiver reads it from the
 *            sender's memory and acks the token), SEG (in an announced
 *            segment: the receiver uses it in place and acks the token when
 *            it lets go), or STREAM (its bytes follow in CHUNK records). A
 *            meta too big for a record is streamed too (then every segment
 *            is STREAM). A pull request whose destination is a shared
 *            buffer (ps_shm_buf_alloc()) names it (segment, offset,
 *            length, announced first): the answer's value is then written
 *            straight into it by the responder and described as PLACED.
 *   CHUNK    the next bytes of the streamed parts of the current message.
 *   ACK      tokens the sender may release.
 *   ID       the sender's node id changed (in order with its messages).
 */
#ifndef PS_NET_SHM_SHM_PROTO_H_
#define PS_NET_SHM_SHM_PROTO_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/shm/shm_job.h"
#include "ps/net/shm/shm_ring.h"

#define PS__SHM_MAGIC 0x4d485350u /* "PSHM" */
#define PS__SHM_VERSION 1u
#define PS__SHM_COOKIE_LEN 16

enum {
    PS__SHM_PKT_HELLO = 'H',
    PS__SHM_PKT_WELCOME = 'W',
    PS__SHM_PKT_CMA_OK = 'C',
    PS__SHM_PKT_SEG = 'S',
    PS__SHM_PKT_BELL = 'B',
    PS__SHM_PKT_AUTH = 'A', /* job-secret handshake, before HELLO (shm_auth.c) */
};

/* WELCOME.pad of a refusal for want of the job secret. */
#define PS__SHM_REFUSED_AUTH 0xa5

typedef struct {
    uint8_t type;
    uint8_t pad[3];
    uint32_t magic;
    uint32_t version;
    int32_t node_id;
    uint64_t nonce;
    uint64_t ring_bytes;
    uint64_t cookie_addr;
    uint8_t cookie[PS__SHM_COOKIE_LEN];
    char job[PS__SHM_JOB_MAX + 8];
} ps__shm_pkt_hello_t;

typedef struct {
    uint8_t type;
    uint8_t accepted;
    uint8_t can_read_you;
    uint8_t pad;
    uint32_t magic;
    int32_t node_id;
    uint32_t pad2;
    uint64_t cookie_addr;
    uint8_t cookie[PS__SHM_COOKIE_LEN];
    char reason[120];
} ps__shm_pkt_welcome_t;

typedef struct {
    uint8_t type;
    uint8_t pad[7];
    uint64_t seg_id;
    uint64_t size;
} ps__shm_pkt_seg_t;

enum {
    PS__SHM_REC_MSG = 2,
    PS__SHM_REC_CHUNK = 3,
    PS__SHM_REC_ACK = 4,
    PS__SHM_REC_ID = 5,
};

enum {
    PS__SHM_SEG_INLINE = 1,
    PS__SHM_SEG_CMA = 2,
    PS__SHM_SEG_SEG = 3,
    PS__SHM_SEG_STREAM = 4,
    PS__SHM_SEG_PLACED = 5, /* a = our segment id, b = offset: already there */
};
#define PS__SHM_SEG_KINDS 6

typedef struct {
    uint8_t kind;
    uint8_t pad[3];
    uint32_t token; /* CMA, SEG */
    uint64_t len;
    uint64_t a; /* INLINE: offset in the record; CMA: address; SEG: segment id */
    uint64_t b; /* SEG: offset in the segment */
} ps__shm_seg_desc_t;

/* MSG record flags (ps__shm_rec_t.flags). */
/* Segments up to this size travel inside the MSG record. */
#define PS__SHM_INLINE_MAX (16u << 10)

#define PS__SHM_MSG_FAST_META 1u /* the meta is in the compact form (shm_meta.h) */

typedef struct {
    ps__shm_rec_t hdr;
    uint32_t meta_len;
    uint16_t num_seg;
    uint8_t meta_streamed;
    uint8_t has_place;  /* a pull request naming its destination: */
    uint64_t place_seg; /* a segment of the sender's, announced */
    uint64_t place_off;
    uint64_t place_len;
    /* ps__shm_seg_desc_t[num_seg], the meta (unless streamed), inline bytes */
} ps__shm_rec_msg_t;

typedef struct {
    ps__shm_rec_t hdr;
    uint32_t nbytes;
    uint32_t pad;
    /* nbytes bytes */
} ps__shm_rec_chunk_t;

typedef struct {
    ps__shm_rec_t hdr;
    uint32_t count;
    uint32_t pad;
    /* uint32_t tokens[count] */
} ps__shm_rec_ack_t;

typedef struct {
    ps__shm_rec_t hdr;
    int32_t node_id;
    uint32_t pad;
} ps__shm_rec_id_t;

/* ---- reading a MSG record (shm_rec.c) ----
 * The peer writes the ring, so everything here is checked before use;
 * peer_id only names the sender in the log line of a refusal. */

/* The fixed part of the MSG record at rec (rec_len bytes) into *h_p, and
 * in *head_p the bytes before its inline data (descriptors and, unless
 * streamed, the meta), which lie inside the record. PS_ERR_PROTOCOL when
 * it has too many segments, no meta or one over max_meta bytes, or is
 * truncated. */
ps_status_t ps__shm_rec_msg_head(const uint8_t *rec, uint32_t rec_len, uint32_t max_meta,
                                 int peer_id, ps__shm_rec_msg_t *h_p, size_t *head_p);

/* The n segment descriptors of a MSG record whose head (descriptors and
 * meta) is `head` of its rec_len bytes: each of a known kind and at most
 * max_message bytes, an inline one inside the record after the head and
 * at most PS__SHM_INLINE_MAX bytes, every one streamed when the meta is;
 * PS_ERR_PROTOCOL if not. PS_ERR_TOO_LARGE when together they pass
 * max_message. */
ps_status_t ps__shm_rec_descs_check(const ps__shm_seg_desc_t *desc, uint32_t n, int meta_streamed,
                                    size_t head, uint32_t rec_len, uint64_t max_message,
                                    int peer_id);

static inline uint32_t ps__shm_align8(uint64_t n)
{
    return (uint32_t)((n + 7u) & ~(uint64_t)7u);
}

#endif /* PS_NET_SHM_SHM_PROTO_H_ */

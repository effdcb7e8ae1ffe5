/*
 * The job-secret handshake of the ibverbs van (PS_JOB_SECRET; the proofs
 * and the INIT / CHALLENGE records are ps/net/auth.h's). Only when a secret
 * is configured: without one the van's private data and messages are
 * exactly what they are without this file.
 *
 * A connection is `nqp` RC queue pairs, each connected with rdmacm. The
 * handshake is per connection and rides on what rdmacm already exchanges:
 *
 *   connect request (every QP)  REQUEST  header | nonce_i[32] id_i i32 role_i i32
 *   accept (every QP)           ACCEPT   header | nonce_r[32] id_r i32 role_r i32 proof_r[32]
 *   first SEND on QP 0          PROOF    "PSVM" 7 0 0 0 | proof_i[32]
 *   reject (a refusal)          REFUSAL  header
 *
 * header (12 bytes, little-endian):
 *   0 magic "PSVC" u32 | 4 kind u8 ('I' REQUEST, 'C' ACCEPT, 'R' REFUSAL) |
 *   5 version u8 (1) | 6 flags u16 (PS__VB_CONN_*) | 8 qp_index u8 |
 *   9 qp_count u8 | 10 reserved u16 (0)
 *
 * The plain private data (verbs_wire.h) has byte 4 = 1 and byte 5 = 0
 * (its u16 version), so the kinds cannot be confused. A REQUEST is 52
 * bytes: InfiniBand's connect request has room for 56 (the plain layout's
 * 28 plus 36 for the handshake would be 64, so this one drops the plain
 * layout's informational max_inline and takes the QP grouping nonce from
 * the first 8 bytes of nonce_i instead of a field of its own). An ACCEPT
 * is 84 bytes (an accept has room for 196), a REFUSAL 12 (a reject, 148).
 *
 * Every QP of a connection carries the same nonce_i / id_i / role_i, and
 * the responder answers every one with the same nonce_r / proof_r. The
 * initiator checks proof_r before the connection is up; it then posts
 * PROOF as the first thing on QP 0, ahead of its hello and anything queued.
 * The responder processes no receive of the connection before a good
 * PROOF, nor enters the peer into its table: anything else first, or a
 * wrong proof, is refused (one log line, the QPs disconnected). A
 * responder refuses a request without a handshake (or one with a handshake
 * when it has no secret itself) with a REFUSAL reject, which the initiator
 * understands with or without a secret of its own. As in the TCP van, an
 * initiator whose check of proof_r failed still sends its own proof and
 * lets the responder's verdict (a disconnect) speak.
 *
 * The decisions are ps/net/van/handshake.h's, as in every van; this file
 * keeps how they travel and the per-connection state that two threads
 * read and several QPs share. No verbs calls: unit-tested on any machine.
 */
#ifndef PS_RDMA_VERBS_VERBS_AUTH_H_
#define PS_RDMA_VERBS_VERBS_AUTH_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/auth.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS__VB_AUTH_HDR_LEN 12
#define PS__VB_AUTH_REQ_LEN (PS__VB_AUTH_HDR_LEN + PS_AUTH_INIT_BYTES)      /* 52 */
#define PS__VB_AUTH_ACCEPT_LEN (PS__VB_AUTH_HDR_LEN + PS_AUTH_CHALLENGE_BYTES) /* 84 */
#define PS__VB_AUTH_REFUSAL_LEN PS__VB_AUTH_HDR_LEN
#define PS__VB_AUTH_PROOF_LEN (8 + PS_AUTH_PROOF_BYTES) /* 40 */
/* The van name the proofs are bound to. */
#define PS__VB_AUTH_VAN "ibverbs"

/* What a private data block is. */
typedef enum {
    PS__VB_PD_OTHER = 0,   /* nothing of ours (or too short) */
    PS__VB_PD_PLAIN = 1,   /* verbs_wire.h's, no handshake */
    PS__VB_PD_REQUEST = 2,
    PS__VB_PD_ACCEPT = 3,
    PS__VB_PD_REFUSAL = 4,
} ps__vb_pd_kind_t;

ps__vb_pd_kind_t ps__vb_pd_kind(const void *buf, size_t len);

/* A decoded REQUEST. */
typedef struct {
    uint16_t flags;
    uint8_t qp_index;
    uint8_t qp_count;
    uint64_t group;       /* groups the QPs of one connect: nonce_i's first 8 bytes */
    uint8_t nonce_i[PS_AUTH_NONCE_BYTES];
    int32_t id_i;
    int32_t role_i;
} ps__vb_auth_req_t;

/* PS_ERR_PROTOCOL unless buf holds a well-formed REQUEST: kind, version,
 * QP index below a count of 1..PS__VB_MAX_QP, an id that is PS_NODE_EMPTY
 * or 1..PS_NODE_EMPTY-1, a role 0..255. Longer input is accepted (IB pads). */
ps_status_t ps__vb_auth_req_decode(const void *buf, size_t len, ps__vb_auth_req_t *r_p);

ps_status_t ps__vb_auth_refusal_encode(void *buf, size_t cap, size_t *len_p);

typedef enum {
    PS__VB_AUTH_OFF = 0,          /* no secret: nothing to do */
    PS__VB_AUTH_WAIT_ACCEPT = 1,  /* initiator: requests sent */
    PS__VB_AUTH_WAIT_PROOF = 2,   /* responder: accepts sent */
    PS__VB_AUTH_WAIT_VERDICT = 3, /* initiator: proof_r was wrong; ours sent anyway */
    PS__VB_AUTH_DONE = 4,
    PS__VB_AUTH_FAILED = 5,
} ps__vb_auth_state_t;

/* The two things a responder's connection waits for before it is up (in
 * either order: the proof may arrive before the last QP's ESTABLISHED). */
enum {
    PS__VB_AUTH_GATE_UP = 1u << 0,     /* every QP established */
    PS__VB_AUTH_GATE_PROVED = 1u << 1, /* the initiator's proof checked out */
};

/* One connection's handshake. The CM thread writes the transcript before
 * the first QP is reachable by the completion thread; `state` and `gate`
 * are atomic. */
typedef struct {
    int state;          /* ps__vb_auth_state_t */
    unsigned gate;      /* PS__VB_AUTH_GATE_* */
    unsigned accepts;   /* initiator: accepts recorded */
    int good;           /* initiator: proof_r checked out */
    ps_auth_transcript_t t;
    uint8_t proof_r[PS_AUTH_PROOF_BYTES];
    uint8_t proof_i[PS_AUTH_PROOF_BYTES]; /* initiator: ours, from the first accept */
} ps__vb_auth_t;

int ps__vb_auth_state(const ps__vb_auth_t *a);
/* Marks it FAILED (a refusal, a deadline); returns the state it had. */
int ps__vb_auth_fail(ps__vb_auth_t *a);

/* ---- initiator ---- */

/* A new attempt: fresh nonce_i, announcing (my_id, my_role). */
void ps__vb_auth_start(ps__vb_auth_t *a, int32_t my_id, int32_t my_role);
/* The QP grouping nonce of this attempt. */
uint64_t ps__vb_auth_group(const ps__vb_auth_t *a);
ps_status_t ps__vb_auth_req_encode(const ps__vb_auth_t *a, uint16_t flags, unsigned qp_index,
                                   unsigned qp_count, void *buf, size_t cap, size_t *len_p);
/*
 * A QP's accept (its private data) arrived; `expect_id` is the node the
 * initiator meant to reach. PS_OK: recorded (the first) or the same as the
 * first. PS_ERR_AUTH: no handshake in it (the responder skipped it), or it
 * answers as another node than expect_id (PS_NODE_EMPTY passes: the
 * scheduler connects back before it knows its id). PS_ERR_PROTOCOL:
 * malformed, not this QP's, or not what the first accept said.
 * PS_ERR_BAD_STATE: not waiting for accepts. *why_p (if not NULL) gets a
 * phrase for the log on failure. Does not verify yet: a wrong proof_r is
 * only remembered, see ps__vb_auth_proof_msg.
 */
ps_status_t ps__vb_auth_on_accept(ps__vb_auth_t *a, const ps_auth_key_t *key, int32_t expect_id,
                                  unsigned qp_index, unsigned qp_count, const void *buf,
                                  size_t len, const char **why_p);
/* Every QP is established: proof_i as the PROOF message (to post first on
 * QP 0). State DONE and *good_p = 1 when proof_r checked out; WAIT_VERDICT
 * and *good_p = 0 when it did not (the proof is still to be sent).
 * PS_ERR_BAD_STATE before an accept. */
ps_status_t ps__vb_auth_proof_msg(ps__vb_auth_t *a, const ps_auth_key_t *key,
                                  uint8_t msg[PS__VB_AUTH_PROOF_LEN], int *good_p);

/* ---- responder ---- */

/* The first QP's request: fresh nonce_r, proof_r over the transcript
 * (my_id, my_role answer). State WAIT_PROOF. */
void ps__vb_auth_respond(ps__vb_auth_t *a, const ps_auth_key_t *key, const ps__vb_auth_req_t *r,
                         int32_t my_id, int32_t my_role);
/* 1 if a later QP's request belongs to the same handshake. */
int ps__vb_auth_same_request(const ps__vb_auth_t *a, const ps__vb_auth_req_t *r);
ps_status_t ps__vb_auth_accept_encode(const ps__vb_auth_t *a, uint16_t flags, unsigned qp_index,
                                      unsigned qp_count, void *buf, size_t cap, size_t *len_p);
/* 1 if a receive of `len` bytes at buf is a PROOF message (by its type;
 * its length is checked by ps__vb_auth_on_proof). */
int ps__vb_auth_is_proof(const void *buf, size_t len);
/* The first receive of the connection. PS_OK (DONE): a PROOF with the
 * initiator's proof over this transcript. PS_ERR_AUTH (FAILED): anything
 * else. PS_ERR_BAD_STATE: not waiting for one. */
ps_status_t ps__vb_auth_on_proof(ps__vb_auth_t *a, const ps_auth_key_t *key, const void *buf,
                                 size_t len);
/* Records `bit` (PS__VB_AUTH_GATE_*); 1 for the one call that completes
 * both, 0 otherwise. */
int ps__vb_auth_gate(ps__vb_auth_t *a, unsigned bit);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_AUTH_H_ */

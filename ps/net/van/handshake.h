/*
 * The job-secret handshake every van runs on a new connection
 * (PS_JOB_SECRET; the proofs and the INIT / CHALLENGE records are
 * ps/net/auth.h's), as a state machine without I/O: a van hands it what
 * arrived and does what it answers. How a step travels (a tagged frame, a
 * unix-socket packet, an active message, rdmacm private data) is the van's.
 *
 *   initiator -> responder  INIT       nonce_i[32] id_i i32 role_i i32
 *   responder -> initiator  CHALLENGE  nonce_r[32] id_r i32 role_r i32 proof_r[32]
 *   initiator -> responder  PROOF      proof_i[32]
 *   responder -> initiator  REFUSED    (a wrong proof or none; then closes)
 *
 * The initiator sends its proof even when the responder's failed: which
 * side holds the wrong secret cannot be told from one side, the proof
 * covers the responder's fresh nonce (good for this connection only), and
 * the responder's verdict says it in the words both sides expect. The
 * responder takes nothing but the handshake until the proof checked out,
 * and then holds the peer to the id its INIT announced (claim_ok). REFUSED
 * is understood with or without a secret; a side without one refuses an
 * INIT and passes everything else on.
 */
#ifndef PS_NET_VAN_HANDSHAKE_H_
#define PS_NET_VAN_HANDSHAKE_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/auth.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PS_VAN_HS_NONE,           /* no secret, or not started */
    PS_VAN_HS_WAIT_INIT,      /* responder: the initiator speaks first */
    PS_VAN_HS_WAIT_PROOF,     /* responder: challenged, waiting for its proof */
    PS_VAN_HS_WAIT_CHALLENGE, /* initiator: INIT sent */
    PS_VAN_HS_WAIT_VERDICT,   /* initiator: the responder's proof failed, ours sent */
    PS_VAN_HS_DONE,
    PS_VAN_HS_FAILED,
} ps_van_hs_state_t;

/* What arrived or is to be sent. A van maps its own codes to these, and
 * a handshake message of no known step (or version) to UNKNOWN. */
typedef enum {
    PS_VAN_HS_OTHER = 0, /* not a handshake message: a hello, data */
    PS_VAN_HS_INIT = 'I',
    PS_VAN_HS_CHALLENGE = 'C',
    PS_VAN_HS_PROOF = 'P',
    PS_VAN_HS_REFUSED = 'R',
    PS_VAN_HS_UNKNOWN = 0x100,
} ps_van_hs_step_t;

typedef enum {
    PS_VAN_HS_PASS,     /* not the handshake's: go on with it as without a secret */
    PS_VAN_HS_WAIT,     /* taken; wait for the peer's next step */
    PS_VAN_HS_PROVED,   /* taken; the peer proved the secret: the connection may go on */
    PS_VAN_HS_REFUSE,   /* responder: log, send REFUSED, close (PS_ERR_AUTH) */
    PS_VAN_HS_FAIL,     /* log, close (PS_ERR_AUTH) */
    PS_VAN_HS_PROTOCOL, /* log, close (PS_ERR_PROTOCOL) */
    PS_VAN_HS_DROP,     /* already refused or failed: close, say nothing more */
} ps_van_hs_verdict_t;

#define PS_VAN_HS_BODY_MAX PS_AUTH_CHALLENGE_BYTES

/* What a van does with an input: first send `send` (with its body) when
 * it is not PS_VAN_HS_OTHER, then act on the verdict; `why` is the phrase
 * its log line carries (ps_van_hs_report). */
typedef struct ps_van_hs_action {
    ps_van_hs_verdict_t verdict;
    ps_van_hs_step_t send;
    size_t body_len;
    uint8_t body[PS_VAN_HS_BODY_MAX];
    char why[96];
} ps_van_hs_action_t;

/* One connection's handshake. Not thread-safe: one thread drives it. */
typedef struct ps_van_hs {
    int state;                /* ps_van_hs_state_t */
    int initiator;            /* 1: opened the connection */
    const ps_auth_key_t *key; /* NULL: no secret */
    int32_t my_role;
    ps_auth_transcript_t t; /* initiator: t.id_i is what its hello announces */
} ps_van_hs_t;

/* State NONE; `van` ("tcp", ...) binds the proofs, `key` stays the
 * caller's (NULL: no secret). */
void ps_van_hs_init(ps_van_hs_t *hs, const char *van, int initiator, const ps_auth_key_t *key,
                    int32_t my_role);

/* Responder: the connection is new; with a secret, INIT is expected. */
void ps_van_hs_accept(ps_van_hs_t *hs);

/* Initiator with a secret: a fresh nonce, announcing `my_id`; *act says
 * to send INIT (verdict WAIT). PS_ERR_BAD_STATE without a secret or when
 * not an initiator. */
ps_status_t ps_van_hs_start(ps_van_hs_t *hs, int32_t my_id, ps_van_hs_action_t *act);

/* What arrived: `step` with its body (NULL, 0 for none; a body of the
 * wrong length is malformed). `my_id` is the id a responder answers as;
 * `peer_id` the node an initiator meant to reach (PS_NODE_EMPTY in the
 * CHALLENGE passes: the scheduler connects back before it knows its id). */
void ps_van_hs_rx(ps_van_hs_t *hs, int step, const uint8_t *body, size_t len, int32_t my_id,
                  int32_t peer_id, ps_van_hs_action_t *act);

/* The peer closed the connection: FAIL when that answers our handshake
 * (an initiator waiting for the challenge or the verdict), else PASS. */
void ps_van_hs_closed(ps_van_hs_t *hs, ps_van_hs_action_t *act);

/* Whether the peer may announce `id` in its hello: always without a
 * secret and on the initiator's side; else only after its proof, and only
 * the id its INIT announced (an unassigned node's PS_NODE_EMPTY may become
 * the id the scheduler gave it over this connection). */
int ps_van_hs_claim_ok(const ps_van_hs_t *hs, int id);

/* Responder: the peer's hello announces `id`. PASS, or REFUSE when it
 * comes before the proof or with another id than claim_ok allows. */
void ps_van_hs_hello(ps_van_hs_t *hs, int id, ps_van_hs_action_t *act);

/* 1 while the responder must see nothing but the handshake. */
int ps_van_hs_pending(const ps_van_hs_t *hs);

/* The status a verdict closes with (PS_OK for PASS, WAIT, PROVED). */
ps_status_t ps_van_hs_status(const ps_van_hs_action_t *act);

/* The log line of a verdict, under `comp`: REFUSE as "refused connection
 * from <from>: <why>", FAIL and PROTOCOL as "<peer> <why>", PROVED as a
 * debug line; nothing for the others. */
void ps_van_hs_report(const ps_van_hs_t *hs, const ps_van_hs_action_t *act, ps_log_component_t comp,
                      const char *peer, const char *from);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_HANDSHAKE_H_ */

/*
 * The job-secret handshake of the UCX van (PS_JOB_SECRET; the proofs are
 * ps/net/auth.h's). Only when a secret is configured. It runs on the
 * control endpoint with the van's handshake active messages (ucx_wire.c:
 * the 32-byte header, its type saying which step, the payload as the
 * message's data), before HELLO:
 *
 *   connector -> acceptor  AUTH_INIT       nonce_i[32] id_i i32 role_i i32
 *   acceptor  -> connector AUTH_CHALLENGE  nonce_r[32] id_r i32 role_r i32 proof_r[32]
 *   connector -> acceptor  AUTH_PROOF      proof_i[32], then HELLO as without a secret
 *   acceptor  -> connector ACK, or AUTH_REFUSED
 *
 * The connector sends no HELLO (so nothing of it is queued or posted to
 * the peer: its connection stays WAIT until ACK) before the acceptor
 * proved itself, and takes no ACK without that. Active messages on one
 * endpoint arrive in order, so the acceptor checks PROOF before it sees
 * the HELLO; it answers a HELLO (or anything) before a good PROOF with
 * AUTH_REFUSED and one log line, and never identifies that connection.
 * AUTH_REFUSED is understood with or without a secret; the refused side
 * closes its endpoint (so the refusal is not lost to a forced close), and
 * the acceptor's side then goes with the endpoint error or the deadline
 * for a HELLO. As in the TCP van, a connector whose check of the
 * acceptor's proof failed still sends its own and lets the verdict speak.
 */
#include <stdio.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/rdma/ucx/ucx_internal.h"

#define INIT_LEN PS_AUTH_INIT_BYTES
#define CHALLENGE_LEN PS_AUTH_CHALLENGE_BYTES

static const char *peer_name(const ps__ucx_conn_t *conn, char *buf, size_t cap)
{
    if (conn->peer_id == PS_SCHEDULER_ID) {
        snprintf(buf, cap, "the scheduler");
    } else {
        snprintf(buf, cap, "node %d at %s", conn->peer_id, conn->addr_str);
    }
    return buf;
}

static void on_sent(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    (void)user_data;
    ucp_request_free(request);
}

/* Slot 0 for the first message a side sends, 1 for the second: each
 * buffer stays untouched while UCX may still read it. */
static ps_status_t auth_send(ps__ucx_conn_t *conn, int slot, int type, const uint8_t *data,
                             size_t len)
{
    ps__ucx_van_t *van = conn->van;
    ps__ucx_hs_pack(conn->auth_hs[slot], type, __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE),
                    0, 0, 0);
    if (len != 0) {
        memcpy(conn->auth_data[slot], data, len);
    }
    ucp_request_param_t param;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK;
    param.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    param.cb.send = on_sent;
    ucs_status_ptr_t r = ucp_am_send_nbx(conn->ctl_ep, PS__UCX_AM_ID, conn->auth_hs[slot],
                                         PS__UCX_HS_LEN, len != 0 ? conn->auth_data[slot] : NULL,
                                         len, &param);
    if (UCS_PTR_IS_ERR(r)) {
        return ps__ucx_status(UCS_PTR_STATUS(r));
    }
    return PS_OK;
}

/* The acceptor turns a connection away; it stays unidentified. */
static void refuse(ps__ucx_conn_t *conn, const char *why)
{
    ps_error(PS_LOG_UCX, "refused connection from %s: %s", conn->addr_str, why);
    conn->auth = PS__UCX_AUTH_FAILED;
    (void)auth_send(conn, 1, PS__UCX_HS_AUTH_REFUSED, NULL, 0);
}

static void fail(ps__ucx_conn_t *conn, const char *fmt_who_what)
{
    char who[PS_SOCKADDR_STRLEN + 32];
    ps_error(PS_LOG_UCX, "%s %s", peer_name(conn, who, sizeof(who)), fmt_who_what);
    conn->auth = PS__UCX_AUTH_FAILED;
    ps__ucx_conn_fail(conn, PS_ERR_AUTH, 1);
}

void ps__ucx_auth_accepted(ps__ucx_conn_t *conn)
{
    if (conn->van->base.params.auth_enabled) {
        conn->auth = PS__UCX_AUTH_WAIT_INIT;
    }
}

ps_status_t ps__ucx_auth_start(ps__ucx_conn_t *conn, int my_id)
{
    ps__ucx_van_t *van = conn->van;
    ps_auth_transcript_t *t = &conn->auth_t;
    memset(t, 0, sizeof(*t));
    t->van = "ucx";
    t->id_i = my_id;
    t->role_i = (int32_t)van->base.params.role;
    ps_auth_nonce(t->nonce_i);
    uint8_t body[INIT_LEN];
    ps_auth_init_pack(t, body);
    conn->auth = PS__UCX_AUTH_WAIT_CHALLENGE;
    return auth_send(conn, 0, PS__UCX_HS_AUTH_INIT, body, sizeof(body));
}

int ps__ucx_auth_hello_ok(ps__ucx_conn_t *conn, int id)
{
    if (!conn->van->base.params.auth_enabled) {
        return 1;
    }
    if (conn->auth != PS__UCX_AUTH_DONE) {
        if (conn->auth != PS__UCX_AUTH_FAILED) {
            refuse(conn, "it does not hold the job secret");
        }
        return 0;
    }
    if (conn->auth_t.id_i != PS_NODE_EMPTY && conn->auth_t.id_i != id) {
        refuse(conn, "it announced another node id than it proved the job secret as");
        return 0;
    }
    return 1;
}

int ps__ucx_auth_ack_ok(ps__ucx_conn_t *conn)
{
    if (!conn->van->base.params.auth_enabled || conn->auth == PS__UCX_AUTH_DONE) {
        return 1;
    }
    fail(conn, conn->auth == PS__UCX_AUTH_WAIT_VERDICT
                   ? "did not prove it holds the job secret; closing"
                   : "skipped the job-secret handshake (no PS_JOB_SECRET?); closing");
    return 0;
}

static void on_init(ps__ucx_conn_t *conn, const uint8_t *data, size_t len)
{
    ps__ucx_van_t *van = conn->van;
    if (!van->base.params.auth_enabled) {
        refuse(conn, "it wants a job-secret handshake, but this node has no PS_JOB_SECRET");
        return;
    }
    if (conn->auth != PS__UCX_AUTH_WAIT_INIT || len != INIT_LEN) {
        refuse(conn, "it does not hold the job secret");
        return;
    }
    ps_auth_transcript_t *t = &conn->auth_t;
    t->van = "ucx";
    ps_auth_init_unpack(data, t);
    t->id_r = __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
    t->role_r = (int32_t)van->base.params.role;
    ps_auth_nonce(t->nonce_r);
    uint8_t proof_r[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(&van->base.params.auth_key, PS_AUTH_RESPONDER, t, proof_r);
    uint8_t body[CHALLENGE_LEN];
    ps_auth_challenge_pack(t, proof_r, body);
    conn->auth = PS__UCX_AUTH_WAIT_PROOF;
    if (auth_send(conn, 0, PS__UCX_HS_AUTH_CHALLENGE, body, sizeof(body)) != PS_OK) {
        ps_debug(PS_LOG_UCX, "cannot challenge %s", conn->addr_str);
    }
}

static void on_proof(ps__ucx_conn_t *conn, const uint8_t *data, size_t len)
{
    ps__ucx_van_t *van = conn->van;
    if (!van->base.params.auth_enabled || conn->auth != PS__UCX_AUTH_WAIT_PROOF ||
        len != PS_AUTH_PROOF_BYTES ||
        !ps_auth_verify(&van->base.params.auth_key, PS_AUTH_INITIATOR, &conn->auth_t, data)) {
        if (conn->auth != PS__UCX_AUTH_FAILED) {
            refuse(conn, "it does not hold the job secret");
        }
        return;
    }
    conn->auth = PS__UCX_AUTH_DONE;
    ps_debug(PS_LOG_UCX, "connection from %s proved the job secret", conn->addr_str);
}

static void on_challenge(ps__ucx_conn_t *conn, const uint8_t *data, size_t len)
{
    ps__ucx_van_t *van = conn->van;
    char why[64];
    ps_auth_transcript_t *t = &conn->auth_t;
    if (!van->base.params.auth_enabled || conn->auth != PS__UCX_AUTH_WAIT_CHALLENGE ||
        len != CHALLENGE_LEN) {
        fail(conn, "sent an unexpected job-secret handshake message; closing");
        return;
    }
    uint8_t proof_r[PS_AUTH_PROOF_BYTES];
    ps_auth_challenge_unpack(data, t, proof_r);
    if (t->id_r != conn->peer_id && t->id_r != PS_NODE_EMPTY) {
        snprintf(why, sizeof(why), "answered the job-secret handshake as node %d; closing",
                 (int)t->id_r);
        fail(conn, why);
        return;
    }
    int good = ps_auth_verify(&van->base.params.auth_key, PS_AUTH_RESPONDER, t, proof_r);
    uint8_t proof[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(&van->base.params.auth_key, PS_AUTH_INITIATOR, t, proof);
    ps_status_t st = auth_send(conn, 1, PS__UCX_HS_AUTH_PROOF, proof, sizeof(proof));
    if (st == PS_OK && good) {
        conn->auth = PS__UCX_AUTH_DONE;
        st = ps__ucx_send_hello(conn);
    } else if (st == PS_OK) {
        conn->auth = PS__UCX_AUTH_WAIT_VERDICT; /* the acceptor's AUTH_REFUSED says it */
    }
    if (st != PS_OK) {
        ps_error(PS_LOG_UCX, "cannot greet node %d at %s: %s", conn->peer_id, conn->addr_str,
                 ps_status_str(st));
        ps__ucx_conn_fail(conn, st, 1);
    }
}

void ps__ucx_auth_on_hs(ps__ucx_van_t *van, ucp_ep_h ep, int type, const uint8_t *data,
                        size_t len)
{
    int outgoing = type == PS__UCX_HS_AUTH_CHALLENGE || type == PS__UCX_HS_AUTH_REFUSED;
    ps__ucx_conn_t *conn = ps__ucx_conn_by_ep(van, ep, outgoing);
    if (conn == NULL) {
        ps_debug(PS_LOG_UCX, "job-secret handshake message for no connection; ignored");
        return;
    }
    switch (type) {
    case PS__UCX_HS_AUTH_INIT:
        on_init(conn, data, len);
        break;
    case PS__UCX_HS_AUTH_PROOF:
        on_proof(conn, data, len);
        break;
    case PS__UCX_HS_AUTH_CHALLENGE:
        on_challenge(conn, data, len);
        break;
    case PS__UCX_HS_AUTH_REFUSED:
        if (conn->state != PS__UCX_READY) {
            fail(conn, "refused us: wrong or missing PS_JOB_SECRET");
        }
        break;
    default:
        break;
    }
}

/*
 * The job-secret handshake of the TCP van (PS_JOB_SECRET; the proofs are
 * ps/net/auth.h's). Only runs when a secret is configured; without one
 * nothing here touches the wire, except that a refusal from a peer that
 * has a secret is understood and reported.
 *
 * Handshake frames are ordinary frames (no data) whose meta has
 * van_data = "PSTCPA" | version u8 | type u8 and the payload in the body
 * (send() refuses van_data starting with "PSTCP", so they cannot be forged
 * through the API). On every connection, before its hello:
 *
 *   opener   -> acceptor  INIT      nonce_i[32] id_i i32 role_i i32
 *   acceptor -> opener    CHALLENGE nonce_r[32] id_r i32 role_r i32 proof_r[32]
 *   opener   -> acceptor  PROOF     proof_i[32]
 *   acceptor -> opener    REFUSED   (a wrong proof or none; then closes)
 *
 * The opener keeps the connection in CONNECTING after the TCP connect,
 * so nothing queued on it (its hello, data) leaves before the acceptor has
 * proved itself; it then sends PROOF and releases the queue at once: the
 * acceptor reads PROOF before those frames (TCP keeps order) and processes
 * none of them unless it verifies. The acceptor answers INIT and accepts
 * nothing but PROOF; any other first frame, or a wrong proof, is refused
 * with one log line, a REFUSED frame and the connection closed before the
 * peer is identified, so it never reaches the postoffice (node table).
 * The id announced in INIT is the one the hello must then announce (an
 * unassigned node's INIT says PS_NODE_EMPTY, and its hello later takes
 * the id the scheduler assigned over this authenticated connection).
 * The whole exchange is bounded by the connect deadline
 * (PS_CONNECT_TIMEOUT_MS), as the TCP connect is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ps/base/log.h"
#include "ps/net/tcp/tcp_internal.h"

#define AUTH_TAG "PSTCPA"
#define AUTH_TAG_LEN 6
#define AUTH_VERSION 1
#define AUTH_INIT 'I'
#define AUTH_CHALLENGE 'C'
#define AUTH_PROOF 'P'
#define AUTH_REFUSED 'R'

#define INIT_LEN PS_AUTH_INIT_BYTES
#define CHALLENGE_LEN PS_AUTH_CHALLENGE_BYTES

/* "the scheduler" or "node 9 at 127.0.0.1:4242", for log lines. */
static const char *peer_name(const ps__tcp_conn_t *conn, char *buf, size_t cap)
{
    if (conn->peer_id == PS_SCHEDULER_ID) {
        snprintf(buf, cap, "the scheduler");
    } else if (conn->peer_id != PS_NODE_EMPTY) {
        snprintf(buf, cap, "node %d at %s", conn->peer_id, conn->addr_str);
    } else {
        snprintf(buf, cap, "%s", conn->addr_str);
    }
    return buf;
}

/* Writes one handshake frame straight to the socket. Nobody else writes
 * to it yet (the opener's queue is held, the acceptor's connection is not
 * identified), and a frame of a hundred bytes fits a fresh socket's
 * buffer, so a short write means the connection is broken. */
static ps_status_t auth_write(ps__tcp_conn_t *conn, uint8_t type, const uint8_t *body,
                              size_t body_len)
{
    ps__tcp_van_t *van = conn->van;
    ps_meta_t meta;
    ps_meta_init(&meta);
    meta.sender = __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
    memcpy(meta.van_data, AUTH_TAG, AUTH_TAG_LEN);
    meta.van_data[AUTH_TAG_LEN] = AUTH_VERSION;
    meta.van_data[AUTH_TAG_LEN + 1] = type;
    meta.van_data_len = AUTH_TAG_LEN + 2;
    meta.body = body_len != 0 ? body : NULL;
    meta.body_len = body_len;
    uint8_t buf[512];
    uint8_t *hm;
    uint8_t *heap = NULL;
    size_t len;
    ps_status_t st = ps__tcp_encode_frame(van, &meta, NULL, 0, buf, sizeof(buf), &hm, &len, &heap);
    if (st != PS_OK) {
        return st;
    }
    pthread_mutex_lock(&conn->send_lock);
    ssize_t n = conn->fd >= 0 ? send(conn->fd, hm, len, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
    int err = errno;
    pthread_mutex_unlock(&conn->send_lock);
    free(heap);
    if (n != (ssize_t)len) {
        ps_debug(PS_LOG_TCP, "job-secret handshake with %s: cannot write: %s", conn->addr_str,
                 n < 0 ? strerror(err) : "short write");
        return PS_ERR_LINK_FAILED;
    }
    __atomic_add_fetch(&van->base.bytes_sent, (uint64_t)len, __ATOMIC_RELAXED);
    return PS_OK;
}

/* The acceptor turns a connection away: one line, a REFUSED frame (best
 * effort: the peer then says what happened), PS_ERR_AUTH closes it. */
static ps_status_t refuse(ps__tcp_conn_t *conn, const char *why)
{
    ps_error(PS_LOG_TCP, "refused connection from %s: %s", conn->addr_str, why);
    (void)auth_write(conn, AUTH_REFUSED, NULL, 0);
    conn->auth = PS__TCP_AUTH_FAILED;
    return PS_ERR_AUTH;
}

ps_status_t ps__tcp_auth_start(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    ps_auth_transcript_t *t = &conn->auth_t;
    /* id_i was set by connect() to the id its hello announces. */
    t->van = "tcp";
    t->role_i = (int32_t)van->base.params.role;
    ps_auth_nonce(t->nonce_i);
    uint8_t body[INIT_LEN];
    ps_auth_init_pack(t, body);
    conn->auth = PS__TCP_AUTH_WAIT_CHALLENGE;
    pthread_mutex_lock(&conn->send_lock);
    ps__tcp_set_epoll(conn, 0); /* read the challenge; the queue waits */
    pthread_mutex_unlock(&conn->send_lock);
    return auth_write(conn, AUTH_INIT, body, sizeof(body));
}

void ps__tcp_auth_accepted(ps__tcp_conn_t *conn)
{
    if (conn->van->base.params.auth_enabled) {
        conn->auth = PS__TCP_AUTH_WAIT_INIT;
    }
}

int ps__tcp_auth_claim_ok(const ps__tcp_conn_t *conn, int id)
{
    if (!conn->van->base.params.auth_enabled || conn->outgoing) {
        return 1;
    }
    if (conn->auth != PS__TCP_AUTH_DONE) {
        return 0;
    }
    /* Held to the id it proved the secret under; an unassigned node may
     * take the id the scheduler gave it. */
    return conn->auth_t.id_i == PS_NODE_EMPTY || conn->auth_t.id_i == id;
}

static ps_status_t on_init(ps__tcp_conn_t *conn, const ps_meta_t *meta)
{
    ps__tcp_van_t *van = conn->van;
    if (meta->body_len != INIT_LEN) {
        return refuse(conn, "malformed job-secret handshake");
    }
    ps_auth_transcript_t *t = &conn->auth_t;
    t->van = "tcp";
    ps_auth_init_unpack(meta->body, t);
    t->id_r = __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
    t->role_r = (int32_t)van->base.params.role;
    ps_auth_nonce(t->nonce_r);
    uint8_t proof_r[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(&van->base.params.auth_key, PS_AUTH_RESPONDER, t, proof_r);
    uint8_t body[CHALLENGE_LEN];
    ps_auth_challenge_pack(t, proof_r, body);
    conn->auth = PS__TCP_AUTH_WAIT_PROOF;
    return auth_write(conn, AUTH_CHALLENGE, body, sizeof(body));
}

static ps_status_t on_challenge(ps__tcp_conn_t *conn, const ps_meta_t *meta)
{
    ps__tcp_van_t *van = conn->van;
    char who[PS_SOCKADDR_STRLEN + 32];
    ps_auth_transcript_t *t = &conn->auth_t;
    uint8_t proof_r[PS_AUTH_PROOF_BYTES];
    if (meta->body_len == CHALLENGE_LEN) {
        ps_auth_challenge_unpack(meta->body, t, proof_r);
    }
    if (meta->body_len != CHALLENGE_LEN ||
        (t->id_r != conn->peer_id && t->id_r != PS_NODE_EMPTY)) {
        /* Not the node we meant to reach (one not assigned yet says
         * PS_NODE_EMPTY: the scheduler connects back before it knows). */
        ps_error(PS_LOG_TCP, "%s answered the job-secret handshake as node %d; closing",
                 peer_name(conn, who, sizeof(who)), (int)t->id_r);
        conn->auth = PS__TCP_AUTH_FAILED;
        return PS_ERR_AUTH;
    }
    int good = ps_auth_verify(&van->base.params.auth_key, PS_AUTH_RESPONDER, t, proof_r);
    uint8_t proof[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(&van->base.params.auth_key, PS_AUTH_INITIATOR, t, proof);
    /* Our proof goes out even when the peer's failed: which side holds the
     * wrong secret cannot be told from here, and the peer's verdict
     * (REFUSED, then the line below) says it in the words both sides
     * expect. It is safe: the proof covers the peer's fresh nonce and is
     * good for this connection only. */
    ps_status_t st = auth_write(conn, AUTH_PROOF, proof, sizeof(proof));
    if (st != PS_OK) {
        return st;
    }
    if (!good) {
        conn->auth = PS__TCP_AUTH_WAIT_VERDICT;
        return PS_OK;
    }
    conn->auth = PS__TCP_AUTH_DONE;
    ps_debug(PS_LOG_TCP, "%s proved the job secret", peer_name(conn, who, sizeof(who)));
    /* Release what is queued (the hello first), as an unauthenticated
     * connection does on connect (on failure it closes the connection). */
    ps__tcp_conn_ready(conn);
    return PS_OK;
}

static ps_status_t on_proof(ps__tcp_conn_t *conn, const ps_meta_t *meta)
{
    if (meta->body_len != PS_AUTH_PROOF_BYTES ||
        !ps_auth_verify(&conn->van->base.params.auth_key, PS_AUTH_INITIATOR, &conn->auth_t,
                        meta->body)) {
        return refuse(conn, "it does not hold the job secret");
    }
    conn->auth = PS__TCP_AUTH_DONE;
    ps_debug(PS_LOG_TCP, "connection from %s proved the job secret", conn->addr_str);
    return PS_OK;
}

ps_status_t ps__tcp_auth_rx(ps__tcp_conn_t *conn, const ps_meta_t *meta, int *consumed_p)
{
    char who[PS_SOCKADDR_STRLEN + 32];
    int is_auth = meta->van_data_len == AUTH_TAG_LEN + 2 &&
                  memcmp(meta->van_data, AUTH_TAG, AUTH_TAG_LEN) == 0;
    *consumed_p = is_auth;
    if (is_auth && conn->hdr.num_data != 0) {
        ps_error(PS_LOG_TCP, "job-secret handshake frame with data from %s; closing",
                 conn->addr_str);
        return PS_ERR_PROTOCOL;
    }
    uint8_t type = is_auth ? meta->van_data[AUTH_TAG_LEN + 1] : 0;
    if (is_auth && type == AUTH_REFUSED && conn->outgoing) {
        /* Understood with or without a secret of our own. */
        ps_error(PS_LOG_TCP, "%s refused us: wrong or missing PS_JOB_SECRET",
                 peer_name(conn, who, sizeof(who)));
        conn->auth = PS__TCP_AUTH_FAILED;
        return PS_ERR_AUTH;
    }
    if (!conn->van->base.params.auth_enabled) {
        if (is_auth && !conn->outgoing && type == AUTH_INIT) {
            return refuse(conn, "it wants a job-secret handshake, but this node has no PS_JOB_SECRET");
        }
        if (is_auth) {
            ps_error(PS_LOG_TCP, "unexpected job-secret handshake frame from %s; closing",
                     conn->addr_str);
            return PS_ERR_PROTOCOL;
        }
        return PS_OK;
    }
    switch (conn->auth) {
    case PS__TCP_AUTH_WAIT_INIT:
        if (is_auth && meta->van_data[AUTH_TAG_LEN] == AUTH_VERSION && type == AUTH_INIT) {
            return on_init(conn, meta);
        }
        return refuse(conn, "it does not hold the job secret");
    case PS__TCP_AUTH_WAIT_PROOF:
        if (is_auth && type == AUTH_PROOF) {
            return on_proof(conn, meta);
        }
        return refuse(conn, "it does not hold the job secret");
    case PS__TCP_AUTH_WAIT_CHALLENGE:
        if (is_auth && type == AUTH_CHALLENGE) {
            return on_challenge(conn, meta);
        }
        ps_error(PS_LOG_TCP, "%s does not hold the job secret (wrong or missing PS_JOB_SECRET); closing",
                 peer_name(conn, who, sizeof(who)));
        conn->auth = PS__TCP_AUTH_FAILED;
        return PS_ERR_AUTH;
    case PS__TCP_AUTH_WAIT_VERDICT:
        /* Anything but REFUSED (handled above): the peer accepted a proof
         * of ours although its own failed — not a ps node with our secret. */
        ps_error(PS_LOG_TCP, "%s did not prove it holds the job secret; closing",
                 peer_name(conn, who, sizeof(who)));
        conn->auth = PS__TCP_AUTH_FAILED;
        return PS_ERR_AUTH;
    case PS__TCP_AUTH_DONE:
        if (is_auth) {
            ps_error(PS_LOG_TCP, "job-secret handshake frame from %s after the handshake; closing",
                     peer_name(conn, who, sizeof(who)));
            return PS_ERR_PROTOCOL;
        }
        return PS_OK;
    case PS__TCP_AUTH_NONE:
    case PS__TCP_AUTH_FAILED:
    default:
        if (!conn->outgoing) {
            return refuse(conn, "it does not hold the job secret");
        }
        if (is_auth) {
            ps_error(PS_LOG_TCP, "unexpected job-secret handshake frame from %s; closing",
                     peer_name(conn, who, sizeof(who)));
            return PS_ERR_PROTOCOL;
        }
        return PS_OK;
    }
}

ps_status_t ps__tcp_auth_cut(ps__tcp_conn_t *conn)
{
    char who[PS_SOCKADDR_STRLEN + 32];
    if (conn->outgoing &&
        (conn->auth == PS__TCP_AUTH_WAIT_CHALLENGE || conn->auth == PS__TCP_AUTH_WAIT_VERDICT)) {
        ps_error(PS_LOG_TCP, "%s closed the connection during the job-secret handshake "
                 "(does it use the same PS_JOB_SECRET?)", peer_name(conn, who, sizeof(who)));
        conn->auth = PS__TCP_AUTH_FAILED;
        return PS_ERR_AUTH;
    }
    return PS_OK;
}

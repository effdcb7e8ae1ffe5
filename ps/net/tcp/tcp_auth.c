/*
 * The job-secret handshake of the TCP van (PS_JOB_SECRET): how its steps
 * travel; the decisions are ps/net/van/handshake.h's. Without a secret
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
 * none of them unless it verifies. A refused connection is closed before
 * the peer is identified, so it never reaches the postoffice (node table).
 * The whole exchange is bounded by the connect deadline
 * (PS_CONNECT_TIMEOUT_MS), as the TCP connect is.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ps/base/log.h"
#include "ps/net/tcp/tcp_internal.h"

#define AUTH_TAG "PSTCPA"
#define AUTH_TAG_LEN 6
#define AUTH_VERSION 1

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
    meta.sender = ps_van_base_my_id(&van->base);
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
    ps_van_base_count_sent(&van->base, (uint64_t)len);
    return PS_OK;
}

/* Does what the handshake answered: its step out, its line, a REFUSED
 * frame (best effort: the peer then says what happened) before the close
 * the returned status asks for. */
static ps_status_t act(ps__tcp_conn_t *conn, const ps_van_hs_action_t *a)
{
    char who[PS_SOCKADDR_STRLEN + 32];
    if (a->send != PS_VAN_HS_OTHER) {
        ps_status_t st = auth_write(conn, (uint8_t)a->send, a->body, a->body_len);
        if (st != PS_OK) {
            return st;
        }
    }
    ps_van_hs_report(&conn->hs, a, PS_LOG_TCP,
                     ps_van_peer_name(conn->peer_id, conn->addr_str, who, sizeof(who)),
                     conn->addr_str);
    if (a->verdict == PS_VAN_HS_REFUSE) {
        (void)auth_write(conn, PS_VAN_HS_REFUSED, NULL, 0);
    } else if (a->verdict == PS_VAN_HS_PROVED && conn->outgoing) {
        /* Release what is queued (the hello first), as an unauthenticated
         * connection does on connect (on failure it closes the connection). */
        ps__tcp_conn_ready(conn);
    }
    return ps_van_hs_status(a);
}

ps_status_t ps__tcp_auth_start(ps__tcp_conn_t *conn)
{
    ps_van_hs_action_t a;
    /* id_i was set by connect() to the id its hello announces. */
    ps_status_t st = ps_van_hs_start(&conn->hs, conn->hs.t.id_i, &a);
    if (st != PS_OK) {
        return st;
    }
    pthread_mutex_lock(&conn->send_lock);
    ps__tcp_set_epoll(conn, 0); /* read the challenge; the queue waits */
    pthread_mutex_unlock(&conn->send_lock);
    return act(conn, &a);
}

int ps__tcp_auth_claim_ok(const ps__tcp_conn_t *conn, int id)
{
    return ps_van_hs_claim_ok(&conn->hs, id);
}

ps_status_t ps__tcp_auth_rx(ps__tcp_conn_t *conn, const ps_meta_t *meta, int *consumed_p)
{
    int is_auth = meta->van_data_len == AUTH_TAG_LEN + 2 &&
                  memcmp(meta->van_data, AUTH_TAG, AUTH_TAG_LEN) == 0;
    *consumed_p = is_auth;
    if (is_auth && conn->hdr.num_data != 0) {
        ps_error(PS_LOG_TCP, "job-secret handshake frame with data from %s; closing",
                 conn->addr_str);
        return PS_ERR_PROTOCOL;
    }
    int step = PS_VAN_HS_OTHER;
    if (is_auth) {
        uint8_t type = meta->van_data[AUTH_TAG_LEN + 1];
        step = meta->van_data[AUTH_TAG_LEN] == AUTH_VERSION && type != 0 ? type : PS_VAN_HS_UNKNOWN;
    }
    ps_van_hs_action_t a;
    ps_van_hs_rx(&conn->hs, step, meta->body, meta->body_len, ps_van_base_my_id(&conn->van->base),
                 conn->peer_id, &a);
    return a.verdict == PS_VAN_HS_PASS ? PS_OK : act(conn, &a);
}

ps_status_t ps__tcp_auth_cut(ps__tcp_conn_t *conn)
{
    ps_van_hs_action_t a;
    ps_van_hs_closed(&conn->hs, &a);
    return act(conn, &a);
}

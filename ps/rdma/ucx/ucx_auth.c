/*
 * The job-secret handshake of the UCX van (PS_JOB_SECRET): how its steps
 * travel; the decisions are ps/net/van/handshake.h's. Only when a secret
 * is configured. It runs on the handshake's TCP connection (ucx_boot.c),
 * in records of their own (ucx_hs.h: the header's type says which step,
 * the payload is its body), before HELLO:
 *
 *   connector -> acceptor  AUTH_INIT       nonce_i[32] id_i i32 role_i i32
 *   acceptor  -> connector AUTH_CHALLENGE  nonce_r[32] id_r i32 role_r i32 proof_r[32]
 *   connector -> acceptor  AUTH_PROOF      proof_i[32], then HELLO as without a secret
 *   acceptor  -> connector ACK, or AUTH_REFUSED
 *
 * The connector sends no HELLO (so nothing of it is queued or posted to
 * the peer: its connection stays WAIT until ACK) before the acceptor
 * proved itself, and takes no ACK without that. Records on one socket
 * arrive in order, so the acceptor checks PROOF before it sees the HELLO;
 * it never identifies a connection it refused, and closes it after the
 * REFUSED record.
 */
#include <string.h>

#include "ps/base/log.h"
#include "ps/rdma/ucx/ucx_internal.h"

/* The handshake's steps and their types in the handshake header. */
static const struct {
    int step, type;
} steps[] = {
    {PS_VAN_HS_INIT, PS__UCX_HS_AUTH_INIT},
    {PS_VAN_HS_CHALLENGE, PS__UCX_HS_AUTH_CHALLENGE},
    {PS_VAN_HS_PROOF, PS__UCX_HS_AUTH_PROOF},
    {PS_VAN_HS_REFUSED, PS__UCX_HS_AUTH_REFUSED},
};

static int step_of_type(int type)
{
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (steps[i].type == type) {
            return steps[i].step;
        }
    }
    return PS_VAN_HS_UNKNOWN;
}

static int type_of_step(int step)
{
    size_t i = 0;
    while (i + 1 < sizeof(steps) / sizeof(steps[0]) && steps[i].step != step) {
        i++;
    }
    return steps[i].type; /* REFUSED, the last, for no other */
}

static ps_status_t auth_send(ps__ucx_conn_t *conn, int step, const uint8_t *data, size_t len)
{
    return ps__ucx_boot_send(conn, type_of_step(step), ps_van_base_my_id(&conn->van->base), 0, 0, 0,
                             data, len);
}

/* Does what the handshake answered: its step out, its line, then a
 * refusal (the connection stays unidentified), a close, or the HELLO of a
 * connector whose peer proved itself. */
static void act(ps__ucx_conn_t *conn, const ps_van_hs_action_t *a)
{
    char who[PS_SOCKADDR_STRLEN + 32];
    ps_status_t st = PS_OK;
    if (a->send != PS_VAN_HS_OTHER) {
        st = auth_send(conn, a->send, a->body, a->body_len);
    }
    ps_van_hs_report(&conn->hs, a, PS_LOG_UCX,
                     ps_van_peer_name(conn->peer_id, conn->addr_str, who, sizeof(who)),
                     conn->addr_str);
    switch (a->verdict) {
    case PS_VAN_HS_REFUSE:
        (void)auth_send(conn, PS_VAN_HS_REFUSED, NULL, 0);
        ps__ucx_conn_fail(conn, PS_ERR_AUTH, 0); /* unidentified: nobody to tell */
        return;
    case PS_VAN_HS_FAIL:
    case PS_VAN_HS_PROTOCOL:
        /* An acceptor's connection tells the postoffice once identified. */
        ps__ucx_conn_fail(conn, ps_van_hs_status(a),
                          conn->hs.initiator || conn->state == PS__UCX_READY);
        return;
    case PS_VAN_HS_PROVED:
        if (st == PS_OK && conn->hs.initiator) {
            st = ps__ucx_send_hello(conn);
        }
        break;
    default:
        break;
    }
    if (st != PS_OK && conn->hs.initiator) {
        ps_error(PS_LOG_UCX, "cannot greet node %d at %s: %s", conn->peer_id, conn->addr_str,
                 ps_status_str(st));
        ps__ucx_conn_fail(conn, st, 1);
    } else if (st != PS_OK) {
        ps_debug(PS_LOG_UCX, "cannot challenge %s", conn->addr_str);
    }
}

ps_status_t ps__ucx_auth_start(ps__ucx_conn_t *conn, int my_id)
{
    ps_van_hs_action_t a;
    ps_status_t st = ps_van_hs_start(&conn->hs, my_id, &a);
    return st == PS_OK ? auth_send(conn, a.send, a.body, a.body_len) : st;
}

int ps__ucx_auth_hello_ok(ps__ucx_conn_t *conn, int id)
{
    ps_van_hs_action_t a;
    ps_van_hs_hello(&conn->hs, id, &a);
    if (a.verdict == PS_VAN_HS_PASS) {
        return 1;
    }
    act(conn, &a);
    return 0;
}

int ps__ucx_auth_ack_ok(ps__ucx_conn_t *conn)
{
    ps_van_hs_action_t a;
    ps_van_hs_rx(&conn->hs, PS_VAN_HS_OTHER, NULL, 0, ps_van_base_my_id(&conn->van->base),
                 conn->peer_id, &a);
    if (a.verdict == PS_VAN_HS_PASS) {
        return 1;
    }
    act(conn, &a);
    return 0;
}

void ps__ucx_auth_on_hs(ps__ucx_conn_t *conn, int type, const uint8_t *data, size_t len)
{
    int for_connector = type == PS__UCX_HS_AUTH_CHALLENGE || type == PS__UCX_HS_AUTH_REFUSED;
    if (for_connector != conn->outgoing) {
        ps_warn_ratelimited(PS_LOG_UCX, "job-secret step of the other side from %s; closing",
                            conn->addr_str);
        ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, conn->outgoing);
        return;
    }
    ps_van_hs_action_t a;
    ps_van_hs_rx(&conn->hs, step_of_type(type), data, len, ps_van_base_my_id(&conn->van->base),
                 conn->peer_id, &a);
    act(conn, &a);
}

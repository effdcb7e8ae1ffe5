/*
 * The job-secret handshake of the UCX van (PS_JOB_SECRET): how its steps
 * travel; the decisions are ps/net/van/handshake.h's. Only when a secret
 * is configured. It runs on the control endpoint with the van's handshake
 * active messages (ucx_wire.c: the 32-byte header, its type saying which
 * step, the payload as the message's data), before HELLO:
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
 * the HELLO; it never identifies a connection it refused. The refused side
 * closes its endpoint (so the refusal is not lost to a forced close), and
 * the acceptor's side then goes with the endpoint error or the deadline
 * for a HELLO.
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

static void on_sent(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    (void)user_data;
    ucp_request_free(request);
}

/* Each buffer stays untouched while UCX may still read it: slot 0 for the
 * first message a side sends (INIT, CHALLENGE), 1 for the second. */
static ps_status_t auth_send(ps__ucx_conn_t *conn, int step, const uint8_t *data, size_t len)
{
    ps__ucx_van_t *van = conn->van;
    int slot = step == PS_VAN_HS_INIT || step == PS_VAN_HS_CHALLENGE ? 0 : 1;
    ps__ucx_hs_pack(conn->auth_hs[slot], type_of_step(step), ps_van_base_my_id(&van->base), 0, 0,
                    0);
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

void ps__ucx_auth_on_hs(ps__ucx_van_t *van, ucp_ep_h ep, int type, const uint8_t *data,
                        size_t len)
{
    int outgoing = type == PS__UCX_HS_AUTH_CHALLENGE || type == PS__UCX_HS_AUTH_REFUSED;
    ps__ucx_conn_t *conn = ps__ucx_conn_by_ep(van, ep, outgoing);
    if (conn == NULL) {
        ps_debug(PS_LOG_UCX, "job-secret handshake message for no connection; ignored");
        return;
    }
    if (type == PS__UCX_HS_AUTH_REFUSED && conn->state == PS__UCX_READY) {
        return; /* a late refusal of a connection that is up */
    }
    ps_van_hs_action_t a;
    ps_van_hs_rx(&conn->hs, step_of_type(type), data, len, ps_van_base_my_id(&van->base),
                 conn->peer_id, &a);
    act(conn, &a);
}

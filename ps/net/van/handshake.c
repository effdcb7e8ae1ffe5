/*
 * The job-secret handshake's decisions, shared by every van (handshake.h).
 */
#include "ps/net/van/handshake.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ps/net/codec/message.h"

void ps_van_hs_init(ps_van_hs_t *hs, const char *van, int initiator, const ps_auth_key_t *key,
                    int32_t my_role)
{
    memset(hs, 0, sizeof(*hs));
    hs->state = PS_VAN_HS_NONE;
    hs->initiator = initiator != 0;
    hs->key = key;
    hs->my_role = my_role;
    hs->t.van = van;
    hs->t.id_i = PS_NODE_EMPTY;
    hs->t.id_r = PS_NODE_EMPTY;
}

void ps_van_hs_accept(ps_van_hs_t *hs)
{
    if (!hs->initiator && hs->key != NULL) {
        hs->state = PS_VAN_HS_WAIT_INIT;
    }
}

static void act_clear(ps_van_hs_action_t *act)
{
    memset(act, 0, sizeof(*act));
    act->verdict = PS_VAN_HS_PASS;
    act->send = PS_VAN_HS_OTHER;
}

/* Ends the handshake with `verdict` and the log line's phrase. */
static void act_end(ps_van_hs_t *hs, ps_van_hs_action_t *act, ps_van_hs_verdict_t verdict,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void act_end(ps_van_hs_t *hs, ps_van_hs_action_t *act, ps_van_hs_verdict_t verdict,
                    const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(act->why, sizeof(act->why), fmt, ap);
    va_end(ap);
    act->verdict = verdict;
    hs->state = PS_VAN_HS_FAILED;
}

ps_status_t ps_van_hs_start(ps_van_hs_t *hs, int32_t my_id, ps_van_hs_action_t *act)
{
    act_clear(act);
    if (!hs->initiator || hs->key == NULL) {
        return PS_ERR_BAD_STATE;
    }
    hs->t.id_i = my_id;
    hs->t.role_i = hs->my_role;
    ps_auth_nonce(hs->t.nonce_i);
    ps_auth_init_pack(&hs->t, act->body);
    act->body_len = PS_AUTH_INIT_BYTES;
    act->send = PS_VAN_HS_INIT;
    act->verdict = PS_VAN_HS_WAIT;
    hs->state = PS_VAN_HS_WAIT_CHALLENGE;
    return PS_OK;
}

/* Responder, INIT: answer with our nonce and proof. */
static void on_init(ps_van_hs_t *hs, const uint8_t *body, size_t len, int32_t my_id,
                    ps_van_hs_action_t *act)
{
    if (body == NULL || len != PS_AUTH_INIT_BYTES) {
        act_end(hs, act, PS_VAN_HS_REFUSE, "malformed job-secret handshake");
        return;
    }
    ps_auth_init_unpack(body, &hs->t);
    hs->t.id_r = my_id;
    hs->t.role_r = hs->my_role;
    ps_auth_nonce(hs->t.nonce_r);
    uint8_t proof_r[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(hs->key, PS_AUTH_RESPONDER, &hs->t, proof_r);
    ps_auth_challenge_pack(&hs->t, proof_r, act->body);
    act->body_len = PS_AUTH_CHALLENGE_BYTES;
    act->send = PS_VAN_HS_CHALLENGE;
    act->verdict = PS_VAN_HS_WAIT;
    hs->state = PS_VAN_HS_WAIT_PROOF;
}

/* Initiator, CHALLENGE: check the responder, and prove ourselves either way. */
static void on_challenge(ps_van_hs_t *hs, const uint8_t *body, size_t len, int32_t peer_id,
                         ps_van_hs_action_t *act)
{
    if (body == NULL || len != PS_AUTH_CHALLENGE_BYTES) {
        act_end(hs, act, PS_VAN_HS_FAIL, "sent a malformed job-secret handshake; closing");
        return;
    }
    uint8_t proof_r[PS_AUTH_PROOF_BYTES];
    ps_auth_challenge_unpack(body, &hs->t, proof_r);
    if (hs->t.id_r != peer_id && hs->t.id_r != PS_NODE_EMPTY) {
        act_end(hs, act, PS_VAN_HS_FAIL, "answered the job-secret handshake as node %d; closing",
                (int)hs->t.id_r);
        return;
    }
    int good = ps_auth_verify(hs->key, PS_AUTH_RESPONDER, &hs->t, proof_r);
    ps_auth_prove(hs->key, PS_AUTH_INITIATOR, &hs->t, act->body);
    act->body_len = PS_AUTH_PROOF_BYTES;
    act->send = PS_VAN_HS_PROOF;
    act->verdict = good ? PS_VAN_HS_PROVED : PS_VAN_HS_WAIT;
    hs->state = good ? PS_VAN_HS_DONE : PS_VAN_HS_WAIT_VERDICT;
}

/* Initiator with a secret, handshake under way. */
static void rx_initiator(ps_van_hs_t *hs, int step, const uint8_t *body, size_t len,
                         int32_t peer_id, ps_van_hs_action_t *act)
{
    if (hs->state == PS_VAN_HS_WAIT_CHALLENGE && step == PS_VAN_HS_CHALLENGE) {
        on_challenge(hs, body, len, peer_id, act);
    } else if (hs->state == PS_VAN_HS_WAIT_VERDICT) {
        /* Anything but REFUSED: it took a proof of ours although its own
         * failed — not a ps node with our secret. */
        act_end(hs, act, PS_VAN_HS_FAIL, "did not prove it holds the job secret; closing");
    } else {
        act_end(hs, act, PS_VAN_HS_FAIL,
                "does not hold the job secret (wrong or missing PS_JOB_SECRET); closing");
    }
}

/* Responder with a secret, handshake under way: nothing but it. */
static void rx_responder(ps_van_hs_t *hs, int step, const uint8_t *body, size_t len, int32_t my_id,
                         ps_van_hs_action_t *act)
{
    if (hs->state == PS_VAN_HS_WAIT_INIT && step == PS_VAN_HS_INIT) {
        on_init(hs, body, len, my_id, act);
    } else if (hs->state == PS_VAN_HS_WAIT_PROOF && step == PS_VAN_HS_PROOF && body != NULL &&
               len == PS_AUTH_PROOF_BYTES &&
               ps_auth_verify(hs->key, PS_AUTH_INITIATOR, &hs->t, body)) {
        act->verdict = PS_VAN_HS_PROVED;
        hs->state = PS_VAN_HS_DONE;
    } else {
        act_end(hs, act, PS_VAN_HS_REFUSE, "it does not hold the job secret");
    }
}

void ps_van_hs_rx(ps_van_hs_t *hs, int step, const uint8_t *body, size_t len, int32_t my_id,
                  int32_t peer_id, ps_van_hs_action_t *act)
{
    act_clear(act);
    if (hs->state == PS_VAN_HS_FAILED) {
        act->verdict = PS_VAN_HS_DROP;
    } else if (hs->initiator && step == PS_VAN_HS_REFUSED) {
        /* Understood with or without a secret of our own. */
        act_end(hs, act, PS_VAN_HS_FAIL, "refused us: wrong or missing PS_JOB_SECRET");
    } else if (!hs->initiator && hs->key == NULL && step == PS_VAN_HS_INIT) {
        act_end(hs, act, PS_VAN_HS_REFUSE,
                "it wants a job-secret handshake, but this node has no PS_JOB_SECRET");
    } else if (hs->key == NULL || hs->state == PS_VAN_HS_DONE) {
        /* Everything else passes on, but a handshake message. */
        if (step != PS_VAN_HS_OTHER) {
            act_end(hs, act, PS_VAN_HS_PROTOCOL,
                    hs->key == NULL ? "sent an unexpected job-secret handshake message; closing"
                                    : "sent a job-secret handshake message after the handshake; "
                                      "closing");
        }
    } else if (hs->initiator) {
        rx_initiator(hs, step, body, len, peer_id, act);
    } else {
        rx_responder(hs, step, body, len, my_id, act);
    }
}

void ps_van_hs_closed(ps_van_hs_t *hs, ps_van_hs_action_t *act)
{
    act_clear(act);
    if (hs->initiator && hs->key != NULL &&
        (hs->state == PS_VAN_HS_WAIT_CHALLENGE || hs->state == PS_VAN_HS_WAIT_VERDICT)) {
        act_end(hs, act, PS_VAN_HS_FAIL,
                "closed the connection during the job-secret handshake "
                "(does it use the same PS_JOB_SECRET?)");
    }
}

int ps_van_hs_claim_ok(const ps_van_hs_t *hs, int id)
{
    if (hs->key == NULL || hs->initiator) {
        return 1;
    }
    return hs->state == PS_VAN_HS_DONE && (hs->t.id_i == PS_NODE_EMPTY || hs->t.id_i == id);
}

void ps_van_hs_hello(ps_van_hs_t *hs, int id, ps_van_hs_action_t *act)
{
    ps_van_hs_rx(hs, PS_VAN_HS_OTHER, NULL, 0, PS_NODE_EMPTY, PS_NODE_EMPTY, act);
    if (act->verdict == PS_VAN_HS_PASS && !ps_van_hs_claim_ok(hs, id)) {
        act_end(hs, act, PS_VAN_HS_REFUSE,
                "it announced another node id than it proved the job secret as");
    }
}

int ps_van_hs_pending(const ps_van_hs_t *hs)
{
    return !hs->initiator && hs->key != NULL && hs->state != PS_VAN_HS_DONE;
}

ps_status_t ps_van_hs_status(const ps_van_hs_action_t *act)
{
    switch (act->verdict) {
    case PS_VAN_HS_REFUSE:
    case PS_VAN_HS_FAIL:
    case PS_VAN_HS_DROP:
        return PS_ERR_AUTH;
    case PS_VAN_HS_PROTOCOL:
        return PS_ERR_PROTOCOL;
    default:
        return PS_OK;
    }
}

void ps_van_hs_report(const ps_van_hs_t *hs, const ps_van_hs_action_t *act, ps_log_component_t comp,
                      const char *peer, const char *from)
{
    switch (act->verdict) {
    case PS_VAN_HS_REFUSE:
        ps_error(comp, "refused connection from %s: %s", from, act->why);
        break;
    case PS_VAN_HS_FAIL:
    case PS_VAN_HS_PROTOCOL:
        ps_error(comp, "%s %s", peer, act->why);
        break;
    case PS_VAN_HS_PROVED:
        if (hs->initiator) {
            ps_debug(comp, "%s proved the job secret", peer);
        } else {
            ps_debug(comp, "connection from %s proved the job secret", from);
        }
        break;
    default:
        break;
    }
}

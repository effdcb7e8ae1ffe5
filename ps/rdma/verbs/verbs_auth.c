/*
 * The ibverbs van's job-secret handshake without a device: its private
 * data, its PROOF message and the per-connection state (verbs_auth.h).
 */
#include "ps/rdma/verbs/verbs_auth.h"

#include <string.h>

#include "ps/base/endian.h"
#include "ps/net/codec/message.h"
#include "ps/net/van/handshake.h"
#include "ps/rdma/verbs/verbs_wire.h"

#define CONN_MAGIC 0x43565350u /* "PSVC", as verbs_wire.c's private data */
#define MSG_MAGIC 0x4d565350u  /* "PSVM", as verbs_wire.c's messages */
#define AUTH_VERSION 1
#define KIND_REQUEST 'I'
#define KIND_ACCEPT 'C'
#define KIND_REFUSAL 'R'

static int valid_node_id(int32_t id)
{
    return id == PS_NODE_EMPTY || (id > 0 && id < PS_NODE_EMPTY);
}

static int valid_qp(unsigned index, unsigned count)
{
    return count >= 1 && count <= PS__VB_MAX_QP && index < count;
}

/* Roles travel as i32 in the records; ps's are 0..3, anything 0..255 is
 * taken (the proof covers it). */
static int valid_role(int32_t role)
{
    return role >= 0 && role <= 255;
}

static void put_hdr(uint8_t *p, uint8_t kind, uint16_t flags, unsigned qp_index,
                    unsigned qp_count)
{
    ps_put_le32(p, CONN_MAGIC);
    p[4] = kind;
    p[5] = AUTH_VERSION;
    ps_put_le16(p + 6, flags);
    p[8] = (uint8_t)qp_index;
    p[9] = (uint8_t)qp_count;
    ps_put_le16(p + 10, 0);
}

ps__vb_pd_kind_t ps__vb_pd_kind(const void *buf, size_t len)
{
    if (buf == NULL || len < 6)
        return PS__VB_PD_OTHER;
    const uint8_t *p = buf;
    if (ps_get_le32(p) != CONN_MAGIC)
        return PS__VB_PD_OTHER;
    if (ps_get_le16(p + 4) == PS__VB_VERSION)
        return PS__VB_PD_PLAIN;
    if (p[5] != AUTH_VERSION)
        return PS__VB_PD_OTHER;
    switch (p[4]) {
    case KIND_REQUEST:
        return PS__VB_PD_REQUEST;
    case KIND_ACCEPT:
        return PS__VB_PD_ACCEPT;
    case KIND_REFUSAL:
        return PS__VB_PD_REFUSAL;
    default:
        return PS__VB_PD_OTHER;
    }
}

ps_status_t ps__vb_auth_req_decode(const void *buf, size_t len, ps__vb_auth_req_t *r_p)
{
    if (r_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (len < PS__VB_AUTH_REQ_LEN || ps__vb_pd_kind(buf, len) != PS__VB_PD_REQUEST)
        return PS_ERR_PROTOCOL;
    const uint8_t *p = buf;
    ps__vb_auth_req_t r;
    memset(&r, 0, sizeof(r));
    r.flags = ps_get_le16(p + 6);
    r.qp_index = p[8];
    r.qp_count = p[9];
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    ps_auth_init_unpack(p + PS__VB_AUTH_HDR_LEN, &t);
    memcpy(r.nonce_i, t.nonce_i, PS_AUTH_NONCE_BYTES);
    r.id_i = t.id_i;
    r.role_i = t.role_i;
    uint64_t g = 0;
    for (int i = 7; i >= 0; i--)
        g = (g << 8) | r.nonce_i[i];
    r.group = g;
    if (ps_get_le16(p + 10) != 0 || !valid_qp(r.qp_index, r.qp_count) || !valid_node_id(r.id_i) ||
        !valid_role(r.role_i))
        return PS_ERR_PROTOCOL;
    *r_p = r;
    return PS_OK;
}

ps_status_t ps__vb_auth_refusal_encode(void *buf, size_t cap, size_t *len_p)
{
    if (buf == NULL || len_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (cap < PS__VB_AUTH_REFUSAL_LEN)
        return PS_ERR_TOO_LARGE;
    put_hdr(buf, KIND_REFUSAL, 0, 0, 0);
    *len_p = PS__VB_AUTH_REFUSAL_LEN;
    return PS_OK;
}

int ps__vb_auth_state(const ps__vb_auth_t *a)
{
    return __atomic_load_n(&a->state, __ATOMIC_ACQUIRE);
}

int ps__vb_auth_fail(ps__vb_auth_t *a)
{
    return __atomic_exchange_n(&a->state, PS__VB_AUTH_FAILED, __ATOMIC_ACQ_REL);
}

/* ---- initiator ---- */

void ps__vb_auth_start(ps__vb_auth_t *a, int32_t my_id, int32_t my_role)
{
    memset(a, 0, sizeof(*a));
    a->t.van = PS__VB_AUTH_VAN;
    a->t.id_i = my_id;
    a->t.role_i = my_role;
    ps_auth_nonce(a->t.nonce_i);
    __atomic_store_n(&a->state, PS__VB_AUTH_WAIT_ACCEPT, __ATOMIC_RELEASE);
}

uint64_t ps__vb_auth_group(const ps__vb_auth_t *a)
{
    uint64_t g = 0;
    for (int i = 7; i >= 0; i--)
        g = (g << 8) | a->t.nonce_i[i];
    return g;
}

ps_status_t ps__vb_auth_req_encode(const ps__vb_auth_t *a, uint16_t flags, unsigned qp_index,
                                   unsigned qp_count, void *buf, size_t cap, size_t *len_p)
{
    if (a == NULL || buf == NULL || len_p == NULL || !valid_qp(qp_index, qp_count) ||
        !valid_node_id(a->t.id_i) || !valid_role(a->t.role_i))
        return PS_ERR_INVALID_ARG;
    if (cap < PS__VB_AUTH_REQ_LEN)
        return PS_ERR_TOO_LARGE;
    uint8_t *p = buf;
    put_hdr(p, KIND_REQUEST, flags, qp_index, qp_count);
    ps_auth_init_pack(&a->t, p + PS__VB_AUTH_HDR_LEN);
    *len_p = PS__VB_AUTH_REQ_LEN;
    return PS_OK;
}

static ps_status_t bad(const char **why_p, const char *why, ps_status_t st)
{
    if (why_p != NULL)
        *why_p = why;
    return st;
}

/* The shared handshake machine (ps/net/van/handshake.h) over this
 * connection's transcript, in `state`: it decides; this file keeps the
 * state, which two threads read and several QPs share. */
static void machine(ps_van_hs_t *hs, const ps__vb_auth_t *a, const ps_auth_key_t *key,
                    int initiator, int state)
{
    ps_van_hs_init(hs, PS__VB_AUTH_VAN, initiator, key, a->t.role_r);
    hs->t = a->t;
    hs->state = state;
}

ps_status_t ps__vb_auth_on_accept(ps__vb_auth_t *a, const ps_auth_key_t *key, int32_t expect_id,
                                  unsigned qp_index, unsigned qp_count, const void *buf,
                                  size_t len, const char **why_p)
{
    if (ps__vb_auth_state(a) != PS__VB_AUTH_WAIT_ACCEPT)
        return bad(why_p, "an accept after the job-secret handshake", PS_ERR_BAD_STATE);
    ps__vb_pd_kind_t kind = ps__vb_pd_kind(buf, len);
    if (kind == PS__VB_PD_PLAIN)
        return bad(why_p, "it accepted without the job-secret handshake (no PS_JOB_SECRET?)",
                   PS_ERR_AUTH);
    if (kind != PS__VB_PD_ACCEPT || len < PS__VB_AUTH_ACCEPT_LEN)
        return bad(why_p, "malformed job-secret handshake in its accept", PS_ERR_PROTOCOL);
    const uint8_t *p = buf;
    if (ps_get_le16(p + 10) != 0 || p[8] != qp_index || p[9] != qp_count)
        return bad(why_p, "its accept is for another queue pair", PS_ERR_PROTOCOL);
    ps_auth_transcript_t t = a->t;
    uint8_t proof[PS_AUTH_PROOF_BYTES];
    ps_auth_challenge_unpack(p + PS__VB_AUTH_HDR_LEN, &t, proof);
    if (!valid_role(t.role_r) || !valid_node_id(t.id_r))
        return bad(why_p, "malformed job-secret handshake in its accept", PS_ERR_PROTOCOL);
    ps_van_hs_t hs;
    ps_van_hs_action_t act;
    machine(&hs, a, key, 1, PS_VAN_HS_WAIT_CHALLENGE);
    ps_van_hs_rx(&hs, PS_VAN_HS_CHALLENGE, p + PS__VB_AUTH_HDR_LEN, PS_AUTH_CHALLENGE_BYTES,
                 PS_NODE_EMPTY, expect_id, &act);
    if (act.send != PS_VAN_HS_PROOF)
        return bad(why_p, "it answered the job-secret handshake as another node", PS_ERR_AUTH);
    if (a->accepts > 0) {
        /* Every QP of the connection must carry the one handshake. */
        if (memcmp(t.nonce_r, a->t.nonce_r, PS_AUTH_NONCE_BYTES) != 0 || t.id_r != a->t.id_r ||
            t.role_r != a->t.role_r || memcmp(proof, a->proof_r, PS_AUTH_PROOF_BYTES) != 0)
            return bad(why_p, "its queue pairs answered with different job-secret handshakes",
                       PS_ERR_PROTOCOL);
        a->accepts++;
        return PS_OK;
    }
    a->t = hs.t;
    memcpy(a->proof_r, proof, PS_AUTH_PROOF_BYTES);
    /* Sent even when proof_r was wrong (see handshake.h). */
    memcpy(a->proof_i, act.body, PS_AUTH_PROOF_BYTES);
    a->good = act.verdict == PS_VAN_HS_PROVED;
    a->accepts = 1;
    return PS_OK;
}

ps_status_t ps__vb_auth_proof_msg(ps__vb_auth_t *a, const ps_auth_key_t *key,
                                  uint8_t msg[PS__VB_AUTH_PROOF_LEN], int *good_p)
{
    if (ps__vb_auth_state(a) != PS__VB_AUTH_WAIT_ACCEPT || a->accepts == 0 || good_p == NULL)
        return PS_ERR_BAD_STATE;
    (void)key; /* proved on the accept */
    ps_put_le32(msg, MSG_MAGIC);
    msg[4] = PS__VB_MSG_AUTH_PROOF;
    msg[5] = msg[6] = msg[7] = 0;
    memcpy(msg + 8, a->proof_i, PS_AUTH_PROOF_BYTES);
    *good_p = a->good;
    __atomic_store_n(&a->state, a->good ? PS__VB_AUTH_DONE : PS__VB_AUTH_WAIT_VERDICT,
                     __ATOMIC_RELEASE);
    return PS_OK;
}

/* ---- responder ---- */

void ps__vb_auth_respond(ps__vb_auth_t *a, const ps_auth_key_t *key, const ps__vb_auth_req_t *r,
                         int32_t my_id, int32_t my_role)
{
    memset(a, 0, sizeof(*a));
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    memcpy(t.nonce_i, r->nonce_i, PS_AUTH_NONCE_BYTES);
    t.id_i = r->id_i;
    t.role_i = r->role_i;
    uint8_t init[PS_AUTH_INIT_BYTES];
    ps_auth_init_pack(&t, init);
    ps_van_hs_t hs;
    ps_van_hs_action_t act;
    ps_van_hs_init(&hs, PS__VB_AUTH_VAN, 0, key, my_role);
    ps_van_hs_accept(&hs);
    ps_van_hs_rx(&hs, PS_VAN_HS_INIT, init, sizeof(init), my_id, PS_NODE_EMPTY, &act);
    a->t = hs.t;
    if (act.send != PS_VAN_HS_CHALLENGE) {
        __atomic_store_n(&a->state, PS__VB_AUTH_FAILED, __ATOMIC_RELEASE);
        return;
    }
    ps_auth_challenge_unpack(act.body, &a->t, a->proof_r);
    __atomic_store_n(&a->state, PS__VB_AUTH_WAIT_PROOF, __ATOMIC_RELEASE);
}

int ps__vb_auth_same_request(const ps__vb_auth_t *a, const ps__vb_auth_req_t *r)
{
    return memcmp(a->t.nonce_i, r->nonce_i, PS_AUTH_NONCE_BYTES) == 0 && a->t.id_i == r->id_i &&
           a->t.role_i == r->role_i;
}

ps_status_t ps__vb_auth_accept_encode(const ps__vb_auth_t *a, uint16_t flags, unsigned qp_index,
                                      unsigned qp_count, void *buf, size_t cap, size_t *len_p)
{
    if (a == NULL || buf == NULL || len_p == NULL || !valid_qp(qp_index, qp_count) ||
        !valid_node_id(a->t.id_r) || !valid_role(a->t.role_r))
        return PS_ERR_INVALID_ARG;
    if (cap < PS__VB_AUTH_ACCEPT_LEN)
        return PS_ERR_TOO_LARGE;
    uint8_t *p = buf;
    put_hdr(p, KIND_ACCEPT, flags, qp_index, qp_count);
    ps_auth_challenge_pack(&a->t, a->proof_r, p + PS__VB_AUTH_HDR_LEN);
    *len_p = PS__VB_AUTH_ACCEPT_LEN;
    return PS_OK;
}

int ps__vb_auth_is_proof(const void *buf, size_t len)
{
    return ps__vb_msg_type(buf, len) == PS__VB_MSG_AUTH_PROOF;
}

ps_status_t ps__vb_auth_on_proof(ps__vb_auth_t *a, const ps_auth_key_t *key, const void *buf,
                                 size_t len)
{
    if (ps__vb_auth_state(a) != PS__VB_AUTH_WAIT_PROOF)
        return PS_ERR_BAD_STATE;
    const uint8_t *p = buf;
    /* Exactly the PROOF message: a SEND carries no padding. */
    int framed = buf != NULL && len == PS__VB_AUTH_PROOF_LEN && ps__vb_auth_is_proof(buf, len) &&
                 p[5] == 0 && p[6] == 0 && p[7] == 0;
    ps_van_hs_t hs;
    ps_van_hs_action_t act;
    machine(&hs, a, key, 0, PS_VAN_HS_WAIT_PROOF);
    ps_van_hs_rx(&hs, framed ? PS_VAN_HS_PROOF : PS_VAN_HS_UNKNOWN, framed ? p + 8 : NULL,
                 framed ? PS_AUTH_PROOF_BYTES : 0, a->t.id_r, PS_NODE_EMPTY, &act);
    int good = act.verdict == PS_VAN_HS_PROVED;
    int expected = PS__VB_AUTH_WAIT_PROOF;
    if (!__atomic_compare_exchange_n(&a->state, &expected,
                                     good ? PS__VB_AUTH_DONE : PS__VB_AUTH_FAILED, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return PS_ERR_BAD_STATE; /* failed meanwhile (deadline) */
    return good ? PS_OK : PS_ERR_AUTH;
}

int ps__vb_auth_gate(ps__vb_auth_t *a, unsigned bit)
{
    unsigned all = PS__VB_AUTH_GATE_UP | PS__VB_AUTH_GATE_PROVED;
    unsigned old = __atomic_fetch_or(&a->gate, bit, __ATOMIC_ACQ_REL);
    return (old & bit) == 0 && (old | bit) == all;
}

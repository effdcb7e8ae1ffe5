/*
 * The job-secret handshake of the shared-memory van (PS_JOB_SECRET): how
 * its steps travel; the decisions are ps/net/van/handshake.h's. It runs on
 * a channel's unix socket before its HELLO, only when a secret is
 * configured:
 *
 *   connector -> acceptor  AUTH 'I'  nonce_i, id_i, role_i
 *   acceptor  -> connector AUTH 'C'  nonce_r, id_r, role_r, proof_r
 *   connector -> acceptor  AUTH 'P'  proof_i
 *   connector -> acceptor  HELLO (as without a secret), answered by WELCOME
 *
 * The connector runs it synchronously inside connect(), as it already waits
 * for WELCOME there, so nothing of its channel (no HELLO, no ring) exists
 * for the acceptor before the acceptor proved itself. The acceptor's
 * REFUSED is a WELCOME that says "not accepted, job secret" (pad byte
 * PS__SHM_REFUSED_AUTH); a WELCOME that accepts is the verdict a connector
 * whose check of the acceptor's proof failed waits for.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "ps/base/log.h"
#include "ps/net/shm/shm_internal.h"

typedef struct {
    uint8_t type; /* PS__SHM_PKT_AUTH */
    uint8_t step; /* ps_van_hs_step_t: 'I', 'C', 'P' */
    uint8_t pad[2];
    int32_t id;
    int32_t role;
    uint8_t nonce[PS_AUTH_NONCE_BYTES];
    uint8_t proof[PS_AUTH_PROOF_BYTES];
} auth_pkt_t;

static const char *peer_name(const ps__shm_chan_t *ch, char *buf, size_t cap)
{
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %d", (int)ch->peer_pid);
    return ps_van_peer_name(ch->peer_id, pid, buf, cap);
}

/* A step of the handshake as the packet that carries it. */
static void pkt_of_step(const ps_van_hs_action_t *a, auth_pkt_t *p)
{
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    memset(p, 0, sizeof(*p));
    p->type = PS__SHM_PKT_AUTH;
    p->step = (uint8_t)a->send;
    if (a->send == PS_VAN_HS_INIT) {
        ps_auth_init_unpack(a->body, &t);
        memcpy(p->nonce, t.nonce_i, PS_AUTH_NONCE_BYTES);
        p->id = t.id_i;
        p->role = t.role_i;
    } else if (a->send == PS_VAN_HS_CHALLENGE) {
        ps_auth_challenge_unpack(a->body, &t, p->proof);
        memcpy(p->nonce, t.nonce_r, PS_AUTH_NONCE_BYTES);
        p->id = t.id_r;
        p->role = t.role_r;
    } else {
        memcpy(p->proof, a->body, PS_AUTH_PROOF_BYTES);
    }
}

/* A packet as the step it carries, its body in `body` (PS_VAN_HS_BODY_MAX). */
static int step_of_pkt(const uint8_t *buf, size_t len, uint8_t *body, size_t *body_len_p)
{
    *body_len_p = 0;
    if (buf[0] != PS__SHM_PKT_AUTH) {
        return PS_VAN_HS_OTHER;
    }
    auth_pkt_t p;
    if (len != sizeof(p)) {
        return PS_VAN_HS_UNKNOWN;
    }
    memcpy(&p, buf, sizeof(p));
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    switch (p.step) {
    case PS_VAN_HS_INIT:
        memcpy(t.nonce_i, p.nonce, PS_AUTH_NONCE_BYTES);
        t.id_i = p.id;
        t.role_i = p.role;
        ps_auth_init_pack(&t, body);
        *body_len_p = PS_AUTH_INIT_BYTES;
        return PS_VAN_HS_INIT;
    case PS_VAN_HS_CHALLENGE:
        memcpy(t.nonce_r, p.nonce, PS_AUTH_NONCE_BYTES);
        t.id_r = p.id;
        t.role_r = p.role;
        ps_auth_challenge_pack(&t, p.proof, body);
        *body_len_p = PS_AUTH_CHALLENGE_BYTES;
        return PS_VAN_HS_CHALLENGE;
    case PS_VAN_HS_PROOF:
        memcpy(body, p.proof, PS_AUTH_PROOF_BYTES);
        *body_len_p = PS_AUTH_PROOF_BYTES;
        return PS_VAN_HS_PROOF;
    default:
        return PS_VAN_HS_UNKNOWN;
    }
}

static ps_status_t send_raw(ps__shm_chan_t *ch, const void *pkt, size_t len)
{
    pthread_mutex_lock(&ch->tx_lock);
    ssize_t n;
    do {
        n = ch->fd >= 0 ? send(ch->fd, pkt, len, MSG_NOSIGNAL) : -1;
    } while (n < 0 && errno == EINTR);
    pthread_mutex_unlock(&ch->tx_lock);
    return n == (ssize_t)len ? PS_OK : PS_ERR_PEER_GONE;
}

static ps_status_t send_step(ps__shm_chan_t *ch, const ps_van_hs_action_t *a)
{
    auth_pkt_t p;
    pkt_of_step(a, &p);
    return send_raw(ch, &p, sizeof(p));
}

/* The acceptor's REFUSED: a WELCOME that says so; PS_ERR_AUTH closes. */
static ps_status_t refuse(ps__shm_chan_t *ch, const char *why)
{
    ps_error(PS_LOG_SHM, "refused connection from pid %d: %s", (int)ch->peer_pid, why);
    ps__shm_pkt_welcome_t w;
    memset(&w, 0, sizeof(w));
    w.type = PS__SHM_PKT_WELCOME;
    w.magic = PS__SHM_MAGIC;
    w.accepted = 0;
    w.pad = PS__SHM_REFUSED_AUTH;
    snprintf(w.reason, sizeof(w.reason), "wrong or missing PS_JOB_SECRET");
    (void)send_raw(ch, &w, sizeof(w));
    ch->hs.state = PS_VAN_HS_FAILED;
    return PS_ERR_AUTH;
}

/* Logs a verdict (a refusal: with its WELCOME) and says how it closes. */
static ps_status_t verdict(ps__shm_chan_t *ch, const ps_van_hs_action_t *a)
{
    char who[64];
    char from[32];
    if (a->verdict == PS_VAN_HS_REFUSE) {
        return refuse(ch, a->why);
    }
    snprintf(from, sizeof(from), "pid %d", (int)ch->peer_pid);
    ps_van_hs_report(&ch->hs, a, PS_LOG_SHM, peer_name(ch, who, sizeof(who)), from);
    return ps_van_hs_status(a);
}

ps_status_t ps__shm_auth_hello(ps__shm_chan_t *ch, int id)
{
    ps_van_hs_action_t a;
    ps_van_hs_hello(&ch->hs, id, &a);
    return verdict(ch, &a);
}

ps_status_t ps__shm_auth_on_packet(ps__shm_chan_t *ch, const uint8_t *buf, size_t len)
{
    uint8_t body[PS_VAN_HS_BODY_MAX];
    size_t body_len;
    int step = step_of_pkt(buf, len, body, &body_len);
    ps_van_hs_action_t a;
    ps_van_hs_rx(&ch->hs, step, body, body_len, ps_van_base_my_id(&ch->van->base), ch->peer_id, &a);
    if (a.send != PS_VAN_HS_OTHER) {
        ps_status_t st = send_step(ch, &a);
        if (st != PS_OK) {
            return st;
        }
    }
    return verdict(ch, &a);
}

ps_status_t ps__shm_auth_connect(ps__shm_chan_t *ch, int my_id)
{
    ps__shm_van_t *van = ch->van;
    char who[64];
    ps_van_hs_action_t a;
    ps_status_t st = ps_van_hs_start(&ch->hs, my_id, &a);
    if (st != PS_OK) {
        return st;
    }
    if (send_step(ch, &a) != PS_OK) {
        ps_error(PS_LOG_SHM, "connect to %s: sending the job-secret handshake: %m",
                 peer_name(ch, who, sizeof(who)));
        return PS_ERR_PEER_GONE;
    }
    int ms = van->base.params.connect_timeout_ms;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    (void)setsockopt(ch->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t answer[512];
    ssize_t got = ps__shm_recv_answer(ch->fd, answer, sizeof(answer), 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        /* SO_RCVTIMEO ran out: a busy or hung peer, not a wrong secret. */
        ps_error(PS_LOG_SHM, "%s did not answer the job-secret handshake within %d ms "
                 "(PS_CONNECT_TIMEOUT_MS)", peer_name(ch, who, sizeof(who)), ms);
        return PS_ERR_TIMED_OUT;
    }
    if (got < 0) {
        ps_error(PS_LOG_SHM,
                 "%s failed during the job-secret handshake (does it use the same "
                 "PS_JOB_SECRET?)",
                 peer_name(ch, who, sizeof(who)));
        return PS_ERR_PEER_GONE;
    }
    if (got == 0) {
        ps_van_hs_closed(&ch->hs, &a);
        return verdict(ch, &a);
    }
    if (got == (ssize_t)sizeof(ps__shm_pkt_welcome_t) && answer[0] == PS__SHM_PKT_WELCOME) {
        /* Refused before the challenge: we have no secret it accepts. */
        return ps__shm_auth_refused(ch);
    }
    uint8_t body[PS_VAN_HS_BODY_MAX];
    size_t body_len;
    int step = step_of_pkt(answer, (size_t)got, body, &body_len);
    ps_van_hs_rx(&ch->hs, step, body, body_len, my_id, ch->peer_id, &a);
    if (a.send != PS_VAN_HS_OTHER && send_step(ch, &a) != PS_OK) {
        ps_error(PS_LOG_SHM, "%s closed the channel during the job-secret handshake",
                 peer_name(ch, who, sizeof(who)));
        return PS_ERR_AUTH;
    }
    return verdict(ch, &a);
}

ps_status_t ps__shm_auth_refused(ps__shm_chan_t *ch)
{
    ps_van_hs_action_t a;
    ps_van_hs_rx(&ch->hs, PS_VAN_HS_REFUSED, NULL, 0, PS_NODE_EMPTY, ch->peer_id, &a);
    return verdict(ch, &a);
}

ps_status_t ps__shm_auth_welcomed(ps__shm_chan_t *ch)
{
    ps_van_hs_action_t a;
    ps_van_hs_rx(&ch->hs, PS_VAN_HS_OTHER, NULL, 0, PS_NODE_EMPTY, ch->peer_id, &a);
    return verdict(ch, &a);
}

/*
 * The job-secret handshake of the shared-memory van (PS_JOB_SECRET; the
 * proofs are ps/net/auth.h's). Runs on a channel's unix socket before its
 * HELLO, only when a secret is configured:
 *
 *   connector -> acceptor  AUTH 'I'  nonce_i, id_i, role_i
 *   acceptor  -> connector AUTH 'C'  nonce_r, id_r, role_r, proof_r
 *   connector -> acceptor  AUTH 'P'  proof_i
 *   connector -> acceptor  HELLO (as without a secret), answered by WELCOME
 *
 * The connector runs it synchronously inside connect(), as it already waits
 * for WELCOME there, so nothing of its channel (no HELLO, no ring) exists
 * for the acceptor before the acceptor proved itself. The acceptor handles
 * nothing but these packets until the proof checked out: a HELLO (or
 * anything else) first, or a wrong proof, is refused with one log line and
 * a WELCOME that says "not accepted, job secret" (pad byte
 * PS__SHM_REFUSED_AUTH), which the connector reports as "<peer> refused us:
 * wrong or missing PS_JOB_SECRET" and PS_ERR_AUTH. The connector sends its
 * proof even when the acceptor's failed (which side holds the wrong secret
 * cannot be told from one side; the proof covers the acceptor's fresh
 * nonce, so it is good for this channel only) and lets the acceptor's
 * verdict speak; if the acceptor accepts it all the same, it is not a ps
 * node with our secret and connect() fails. The HELLO must announce the id
 * the handshake did (an unassigned node's PS_NODE_EMPTY may become the id
 * the scheduler gives it).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "ps/base/log.h"
#include "ps/net/shm/shm_internal.h"

#define STEP_INIT 'I'
#define STEP_CHALLENGE 'C'
#define STEP_PROOF 'P'

typedef struct {
    uint8_t type; /* PS__SHM_PKT_AUTH */
    uint8_t step;
    uint8_t pad[2];
    int32_t id;
    int32_t role;
    uint8_t nonce[PS_AUTH_NONCE_BYTES];
    uint8_t proof[PS_AUTH_PROOF_BYTES];
} auth_pkt_t;

static const char *peer_name(const ps__shm_chan_t *ch, char *buf, size_t cap)
{
    if (ch->peer_id == PS_SCHEDULER_ID) {
        snprintf(buf, cap, "the scheduler");
    } else {
        snprintf(buf, cap, "node %d (pid %d)", ch->peer_id, (int)ch->peer_pid);
    }
    return buf;
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

ps_status_t ps__shm_auth_refuse(ps__shm_chan_t *ch, const char *why)
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
    ch->auth = PS__SHM_AUTH_FAILED;
    return PS_ERR_AUTH;
}

void ps__shm_auth_accepted(ps__shm_chan_t *ch)
{
    if (ch->van->base.params.auth_enabled) {
        ch->auth = PS__SHM_AUTH_WAIT_INIT;
    }
}

int ps__shm_auth_pending(const ps__shm_chan_t *ch)
{
    return !ch->outgoing && ch->van->base.params.auth_enabled && ch->auth != PS__SHM_AUTH_DONE;
}

int ps__shm_auth_claim_ok(const ps__shm_chan_t *ch, int id)
{
    if (!ch->van->base.params.auth_enabled || ch->outgoing) {
        return 1;
    }
    return ch->auth == PS__SHM_AUTH_DONE &&
           (ch->auth_t.id_i == PS_NODE_EMPTY || ch->auth_t.id_i == id);
}

ps_status_t ps__shm_auth_on_packet(ps__shm_chan_t *ch, const uint8_t *buf, size_t len)
{
    ps__shm_van_t *van = ch->van;
    auth_pkt_t p;
    int is_auth = buf[0] == PS__SHM_PKT_AUTH && len == sizeof(p);
    if (is_auth) {
        memcpy(&p, buf, sizeof(p));
    }
    if (!van->base.params.auth_enabled) {
        return ps__shm_auth_refuse(ch, "it wants a job-secret handshake, but this node has no PS_JOB_SECRET");
    }
    ps_auth_transcript_t *t = &ch->auth_t;
    if (is_auth && p.step == STEP_INIT && ch->auth == PS__SHM_AUTH_WAIT_INIT) {
        t->van = "shm";
        memcpy(t->nonce_i, p.nonce, PS_AUTH_NONCE_BYTES);
        t->id_i = p.id;
        t->role_i = p.role;
        t->id_r = __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
        t->role_r = (int32_t)van->base.params.role;
        ps_auth_nonce(t->nonce_r);
        auth_pkt_t c;
        memset(&c, 0, sizeof(c));
        c.type = PS__SHM_PKT_AUTH;
        c.step = STEP_CHALLENGE;
        c.id = t->id_r;
        c.role = t->role_r;
        memcpy(c.nonce, t->nonce_r, PS_AUTH_NONCE_BYTES);
        ps_auth_prove(&van->base.params.auth_key, PS_AUTH_RESPONDER, t, c.proof);
        ch->auth = PS__SHM_AUTH_WAIT_PROOF;
        return send_raw(ch, &c, sizeof(c));
    }
    if (is_auth && p.step == STEP_PROOF && ch->auth == PS__SHM_AUTH_WAIT_PROOF &&
        ps_auth_verify(&van->base.params.auth_key, PS_AUTH_INITIATOR, t, p.proof)) {
        ch->auth = PS__SHM_AUTH_DONE;
        ps_debug(PS_LOG_SHM, "pid %d proved the job secret", (int)ch->peer_pid);
        return PS_OK;
    }
    return ps__shm_auth_refuse(ch, "it does not hold the job secret");
}

ps_status_t ps__shm_auth_connect(ps__shm_chan_t *ch, int my_id)
{
    ps__shm_van_t *van = ch->van;
    char who[64];
    ps_auth_transcript_t *t = &ch->auth_t;
    t->van = "shm";
    t->id_i = my_id;
    t->role_i = (int32_t)van->base.params.role;
    ps_auth_nonce(t->nonce_i);
    auth_pkt_t p;
    memset(&p, 0, sizeof(p));
    p.type = PS__SHM_PKT_AUTH;
    p.step = STEP_INIT;
    p.id = t->id_i;
    p.role = t->role_i;
    memcpy(p.nonce, t->nonce_i, PS_AUTH_NONCE_BYTES);
    if (send_raw(ch, &p, sizeof(p)) != PS_OK) {
        ps_error(PS_LOG_SHM, "connect to %s: sending the job-secret handshake: %m",
                 peer_name(ch, who, sizeof(who)));
        return PS_ERR_PEER_GONE;
    }
    int ms = van->base.params.connect_timeout_ms;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    (void)setsockopt(ch->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t answer[512];
    ssize_t got = ps__shm_recv_answer(ch->fd, answer, sizeof(answer), 0);
    if (got == (ssize_t)sizeof(ps__shm_pkt_welcome_t) && answer[0] == PS__SHM_PKT_WELCOME) {
        /* Refused before the challenge: we have no secret it accepts. */
        return ps__shm_auth_refused(ch);
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        /* SO_RCVTIMEO ran out: a busy or hung peer, not a wrong secret. */
        ps_error(PS_LOG_SHM, "%s did not answer the job-secret handshake within %d ms "
                 "(PS_CONNECT_TIMEOUT_MS)", peer_name(ch, who, sizeof(who)), ms);
        return PS_ERR_TIMED_OUT;
    }
    if (got != (ssize_t)sizeof(p) || answer[0] != PS__SHM_PKT_AUTH) {
        ps_error(PS_LOG_SHM, "%s %s during the job-secret handshake (does it use the same "
                 "PS_JOB_SECRET?)", peer_name(ch, who, sizeof(who)),
                 got < 0 ? "failed" : got == 0 ? "closed the channel" : "sent garbage");
        return got < 0 ? PS_ERR_PEER_GONE : PS_ERR_AUTH;
    }
    auth_pkt_t c;
    memcpy(&c, answer, sizeof(c));
    if (c.step != STEP_CHALLENGE || (c.id != ch->peer_id && c.id != PS_NODE_EMPTY)) {
        ps_error(PS_LOG_SHM, "%s answered the job-secret handshake as node %d; closing",
                 peer_name(ch, who, sizeof(who)), (int)c.id);
        return PS_ERR_AUTH;
    }
    memcpy(t->nonce_r, c.nonce, PS_AUTH_NONCE_BYTES);
    t->id_r = c.id;
    t->role_r = c.role;
    int good = ps_auth_verify(&van->base.params.auth_key, PS_AUTH_RESPONDER, t, c.proof);
    memset(&p, 0, sizeof(p));
    p.type = PS__SHM_PKT_AUTH;
    p.step = STEP_PROOF;
    ps_auth_prove(&van->base.params.auth_key, PS_AUTH_INITIATOR, t, p.proof);
    if (send_raw(ch, &p, sizeof(p)) != PS_OK) {
        ps_error(PS_LOG_SHM, "%s closed the channel during the job-secret handshake",
                 peer_name(ch, who, sizeof(who)));
        return PS_ERR_AUTH;
    }
    ch->auth = good ? PS__SHM_AUTH_DONE : PS__SHM_AUTH_WAIT_VERDICT;
    return PS_OK;
}

ps_status_t ps__shm_auth_refused(ps__shm_chan_t *ch)
{
    char who[64];
    ps_error(PS_LOG_SHM, "%s refused us: wrong or missing PS_JOB_SECRET",
             peer_name(ch, who, sizeof(who)));
    return PS_ERR_AUTH;
}

ps_status_t ps__shm_auth_welcomed(ps__shm_chan_t *ch)
{
    char who[64];
    if (ch->auth == PS__SHM_AUTH_WAIT_VERDICT) {
        ps_error(PS_LOG_SHM, "%s did not prove it holds the job secret; closing",
                 peer_name(ch, who, sizeof(who)));
        return PS_ERR_AUTH;
    }
    return PS_OK;
}

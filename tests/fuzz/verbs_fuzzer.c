/*
 * libFuzzer target for what the ibverbs van decodes from its peers: rdmacm
 * private data (plain connection data, and the job-secret handshake's
 * request, accept and refusal), message headers, rendezvous control
 * messages, pull descriptors, immediate data and the handshake's proof
 * message. This machine has no RDMA device, so the decoders meet hostile
 * bytes here or nowhere.
 *
 * The first input byte picks the decoder, the rest is its input. Every
 * decoder must answer with a status; what it accepts must encode back to
 * the bytes it read (for the fixed layouts), and the handshake must never
 * come out DONE from bytes that do not carry the right proof.
 *
 * A broken invariant aborts, which libFuzzer reports as a crash; ASan and
 * UBSan (--config=fuzz) catch memory and undefined-behaviour errors.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/auth.h"
#include "ps/net/codec/message.h"
#include "ps/rdma/verbs/verbs_auth.h"
#include "ps/rdma/verbs/verbs_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "verbs_fuzzer: invariant broken: %s\n", what);
        abort();
    }
}

static ps_auth_key_t the_key(void)
{
    static ps_auth_key_t key;
    static int made;
    if (!made) {
        check(ps_auth_key_from_secret("fuzz", 4, &key) == PS_OK, "key");
        made = 1;
    }
    return key;
}

static void conn_data(const uint8_t *in, size_t len)
{
    ps__vb_conn_data_t d;
    (void)ps__vb_pd_kind(in, len);
    if (ps__vb_conn_data_decode(in, len, &d) != PS_OK)
        return;
    uint8_t out[64];
    size_t n = 0;
    check(ps__vb_conn_data_encode(&d, out, sizeof(out), &n) == PS_OK, "conn data re-encodes");
    ps__vb_conn_data_t again;
    check(ps__vb_conn_data_decode(out, n, &again) == PS_OK, "conn data decodes again");
    check(again.node_id == d.node_id && again.qp_index == d.qp_index &&
              again.qp_count == d.qp_count && again.flags == d.flags,
          "conn data round trip");
}

static void header(const uint8_t *in, size_t len)
{
    ps__vb_hdr_t h;
    size_t used = 0;
    if (ps__vb_hdr_decode(in, len, &h, &used) != PS_OK)
        return;
    check(used <= len && used == ps__vb_hdr_len(&h), "header length");
    uint8_t out[PS__VB_HDR_FIXED + 4 * PS__VB_MAX_QP];
    size_t n = 0;
    check(ps__vb_hdr_encode(&h, out, sizeof(out), &n) == PS_OK, "header re-encodes");
    check(n == used && memcmp(out, in, n) == 0, "header round trip");
}

static void control(const uint8_t *in, size_t len)
{
    ps__vb_ctrl_t c;
    (void)ps__vb_msg_type(in, len);
    if (ps__vb_ctrl_decode(in, len, &c) != PS_OK)
        return;
    uint8_t out[PS__VB_CTRL_STEER_LEN];
    size_t n = 0;
    check(ps__vb_ctrl_encode(&c, out, sizeof(out), &n) == PS_OK, "control re-encodes");
    ps__vb_ctrl_t again;
    check(ps__vb_ctrl_decode(out, n, &again) == PS_OK, "control decodes again");
    check(again.type == c.type && again.token == c.token && again.slot == c.slot &&
              again.key == c.key && again.data_len == c.data_len && again.flags == c.flags &&
              again.app_id == c.app_id && again.customer_id == c.customer_id &&
              again.steer_addr == c.steer_addr && again.steer_len == c.steer_len &&
              memcmp(again.seg_len, c.seg_len, sizeof(c.seg_len)) == 0,
          "control round trip");
}

static void pull_desc(const uint8_t *in, size_t len)
{
    ps__vb_pull_desc_t d;
    if (ps__vb_pull_desc_decode(in, len, &d) != PS_OK)
        return;
    uint8_t out[PS_META_VAN_DATA_MAX];
    uint32_t n = 0;
    check(ps__vb_pull_desc_encode(&d, out, sizeof(out), &n) == PS_OK, "pull desc re-encodes");
    ps__vb_pull_desc_t again;
    check(ps__vb_pull_desc_decode(out, n, &again) == PS_OK && again.slot == d.slot &&
              again.addr == d.addr && again.len == d.len && again.rkey == d.rkey,
          "pull desc round trip");
}

static void immediate(const uint8_t *in, size_t len)
{
    uint32_t imm = 0, slot = 0;
    memcpy(&imm, in, len < sizeof(imm) ? len : sizeof(imm));
    ps__vb_imm_kind_t k = ps__vb_imm_decode(imm, &slot);
    check(k == PS__VB_IMM_SLAVE || k == PS__VB_IMM_META, "immediate kind");
}

/* A responder that received a well-formed request: the fuzzed bytes are
 * the initiator's proof message. Only the right proof may open it, and
 * fuzzed bytes do not hold one (the key is unknown to them). */
static void responder(const uint8_t *in, size_t len)
{
    ps_auth_key_t key = the_key();
    ps__vb_auth_t init, resp;
    memset(&init, 0, sizeof(init));
    memset(&resp, 0, sizeof(resp));
    ps__vb_auth_start(&init, 9, PS_ROLE_WORKER);
    uint8_t req[PS__VB_AUTH_REQ_LEN];
    size_t n = 0;
    check(ps__vb_auth_req_encode(&init, 0, 0, 1, req, sizeof(req), &n) == PS_OK, "request");
    ps__vb_auth_req_t r;
    check(ps__vb_auth_req_decode(req, n, &r) == PS_OK, "own request decodes");
    ps__vb_auth_respond(&resp, &key, &r, 8, PS_ROLE_SERVER);
    (void)ps__vb_auth_is_proof(in, len);
    ps_status_t st = ps__vb_auth_on_proof(&resp, &key, in, len);
    check(st != PS_OK && ps__vb_auth_state(&resp) != PS__VB_AUTH_DONE,
          "fuzzed bytes opened the handshake");
}

/* An initiator waiting for accepts: the fuzzed bytes are a QP's accept.
 * It may be recorded, but proof_r cannot check out. */
static void initiator(const uint8_t *in, size_t len)
{
    ps_auth_key_t key = the_key();
    ps__vb_auth_t a;
    memset(&a, 0, sizeof(a));
    ps__vb_auth_start(&a, 9, PS_ROLE_WORKER);
    const char *why = NULL;
    ps__vb_auth_req_t r;
    (void)ps__vb_auth_req_decode(in, len, &r);
    if (ps__vb_auth_on_accept(&a, &key, 8, 0, 1, in, len, &why) != PS_OK)
        return;
    uint8_t msg[PS__VB_AUTH_PROOF_LEN];
    int good = -1;
    if (ps__vb_auth_proof_msg(&a, &key, msg, &good) == PS_OK)
        check(good == 0 && ps__vb_auth_state(&a) != PS__VB_AUTH_DONE,
              "a fuzzed accept's proof checked out");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        /* Rejections log by design: far too many lines while fuzzing.
         * Invariant failures print to stderr themselves. */
        int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        ps_log_set_level(PS_LOG_ERROR);
        if (fd >= 0)
            ps_log_set_fd(fd);
        quiet = 1;
    }
    if (size == 0)
        return 0;
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    switch (data[0] % 7) {
    case 0: conn_data(in, len); break;
    case 1: header(in, len); break;
    case 2: control(in, len); break;
    case 3: pull_desc(in, len); break;
    case 4: immediate(in, len); break;
    case 5: responder(in, len); break;
    default: initiator(in, len); break;
    }
    return 0;
}

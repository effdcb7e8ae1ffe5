/*
 * Writes the seed corpus of verbs_fuzzer: one valid encoding of each layout
 * it decodes, behind the byte that selects its decoder (see verbs_fuzzer.c).
 *
 *   bazel run //tests/fuzz:verbs_corpus_gen -- DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps/base/status.h"
#include "ps/net/auth.h"
#include "ps/net/codec/message.h"
#include "ps/rdma/verbs/verbs_auth.h"
#include "ps/rdma/verbs/verbs_wire.h"
#include "tests/fuzz/corpus_file.h"

/* buf behind the byte that selects its decoder. */
static int put(const char *dir, const char *name, uint8_t selector, const void *buf, size_t len)
{
    return fuzz_corpus_write(dir, name, &selector, 1, buf, len);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: verbs_corpus_gen DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    uint8_t buf[256];
    size_t n = 0;
    int bad = 0;

    ps__vb_conn_data_t d = {.node_id = 9, .qp_index = 1, .qp_count = 2, .nonce = 77};
    bad |= ps__vb_conn_data_encode(&d, buf, sizeof(buf), &n) != PS_OK ||
           put(dir, "conn_data", 0, buf, n);

    ps__vb_hdr_t h = {.type = PS__VB_MSG_EAGER, .nqp = 3, .frame_len = 100};
    h.slave[1] = 5;
    h.slave[2] = 7;
    bad |= ps__vb_hdr_encode(&h, buf, sizeof(buf), &n) != PS_OK || put(dir, "header", 1, buf, n);

    ps__vb_ctrl_t c = {.type = PS__VB_MSG_RDV_GRANT, .dir = 3, .token = 4, .slot = 2,
                       .key = 11, .meta_len = 512, .data_len = 4096, .meta_addr = 0x1000,
                       .meta_rkey = 5, .data_addr = 0x2000, .data_rkey = 6};
    bad |= ps__vb_ctrl_encode(&c, buf, sizeof(buf), &n) != PS_OK || put(dir, "control", 2, buf, n);

    ps__vb_pull_desc_t p = {.slot = 3, .rkey = 9, .addr = 0x3000, .len = 64};
    uint32_t pn = 0;
    bad |= ps__vb_pull_desc_encode(&p, buf, sizeof(buf), &pn) != PS_OK ||
           put(dir, "pull_desc", 3, buf, pn);

    uint32_t imm = ps__vb_imm_meta(12);
    bad |= put(dir, "immediate", 4, &imm, sizeof(imm));

    ps_auth_key_t key;
    bad |= ps_auth_key_from_secret("seed", 4, &key) != PS_OK;
    ps__vb_auth_t init, resp;
    memset(&init, 0, sizeof(init));
    memset(&resp, 0, sizeof(resp));
    ps__vb_auth_start(&init, 9, PS_ROLE_WORKER);
    bad |= ps__vb_auth_req_encode(&init, 0, 0, 1, buf, sizeof(buf), &n) != PS_OK ||
           put(dir, "request", 6, buf, n);
    ps__vb_auth_req_t r;
    bad |= ps__vb_auth_req_decode(buf, n, &r) != PS_OK;
    ps__vb_auth_respond(&resp, &key, &r, 8, PS_ROLE_SERVER);
    bad |= ps__vb_auth_accept_encode(&resp, 0, 0, 1, buf, sizeof(buf), &n) != PS_OK ||
           put(dir, "accept", 6, buf, n);
    uint8_t proof[PS__VB_AUTH_PROOF_LEN];
    int good = 0;
    bad |= ps__vb_auth_on_accept(&init, &key, 8, 0, 1, buf, n, NULL) != PS_OK ||
           ps__vb_auth_proof_msg(&init, &key, proof, &good) != PS_OK ||
           put(dir, "proof", 5, proof, sizeof(proof));
    bad |= ps__vb_auth_refusal_encode(buf, sizeof(buf), &n) != PS_OK ||
           put(dir, "refusal", 6, buf, n);
    if (bad) {
        fprintf(stderr, "verbs_corpus_gen: could not write every seed\n");
        return 1;
    }
    return 0;
}

/*
 * Writes the seed corpus of ucx_fuzzer: every handshake record (HELLO,
 * ACK, the job-secret steps, a refusal), the INIT and CHALLENGE payloads,
 * the META message that re-announces a node id (with and without its
 * 8-byte tag), and broken records.
 *
 *   bazel run //tests/fuzz:ucx_corpus_gen -- DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps/net/auth.h"
#include "ps/net/codec/message.h"
#include "ps/rdma/ucx/ucx_hs.h"
#include "tests/fuzz/corpus_file.h"
#include "tests/fuzz/corpus_frame.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ucx_corpus_gen DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    int bad = 0;
    uint8_t rec[PS__UCX_HS_LEN];
    static const struct {
        const char *name;
        int type;
    } recs[] = {
        {"hs_hello", PS__UCX_HS_HELLO},           {"hs_ack", PS__UCX_HS_ACK},
        {"hs_auth_init", PS__UCX_HS_AUTH_INIT},   {"hs_auth_challenge", PS__UCX_HS_AUTH_CHALLENGE},
        {"hs_auth_proof", PS__UCX_HS_AUTH_PROOF}, {"hs_auth_refused", PS__UCX_HS_AUTH_REFUSED},
    };
    for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); ++i) {
        ps__ucx_hs_pack(rec, recs[i].type, 9, 0xc0ffee, 0x1122334455667788ull, 1000);
        bad |= fuzz_corpus_write(dir, recs[i].name, NULL, 0, rec, sizeof(rec));
    }
    /* Broken: type 0, type 7, version 1, one byte short. */
    ps__ucx_hs_pack(rec, 0, 9, 1, 2, 3);
    bad |= fuzz_corpus_write(dir, "bad_hs_type0", NULL, 0, rec, sizeof(rec));
    ps__ucx_hs_pack(rec, 7, 9, 1, 2, 3);
    bad |= fuzz_corpus_write(dir, "bad_hs_type7", NULL, 0, rec, sizeof(rec));
    ps__ucx_hs_pack(rec, PS__UCX_HS_HELLO, 9, 1, 2, 3);
    rec[4] = 1;
    bad |= fuzz_corpus_write(dir, "bad_hs_version", NULL, 0, rec, sizeof(rec));
    bad |= fuzz_corpus_write(dir, "bad_hs_short", NULL, 0, rec, sizeof(rec) - 1);

    /* The job-secret payloads. */
    uint8_t init[PS_AUTH_INIT_BYTES], chal[PS_AUTH_CHALLENGE_BYTES];
    fuzz_auth_payloads(init, chal);
    bad |= fuzz_corpus_write(dir, "auth_init", NULL, 0, init, sizeof(init));
    bad |= fuzz_corpus_write(dir, "auth_challenge", NULL, 0, chal, sizeof(chal));

    /* The re-announcement of node 9, alone and after its tag. */
    ps_meta_t m;
    ps__ucx_hello_meta(&m, 9);
    uint8_t frame[1024];
    size_t n = fuzz_frame_build(&m, 0, NULL, 0, frame, sizeof(frame));
    uint8_t tag[8] = {1, 0, 0, 0, 0, 0, 0, 0x10};
    bad |= n == 0 || fuzz_corpus_write(dir, "hello_meta", NULL, 0, frame, n);
    bad |= n == 0 || fuzz_corpus_write(dir, "hello_meta_tagged", tag, sizeof(tag), frame, n);
    return bad;
}

/*
 * Writes the seed corpus of ucx_fuzzer: every handshake header (HELLO,
 * ACK, the job-secret steps, a refusal), whole records as the handshake's
 * connection carries them (HELLO with addresses, a job-secret step, two in
 * a row, one cut short), the INIT and CHALLENGE payloads, the META
 * messages that re-announce a node id and say goodbye (with and without
 * their 8-byte tag), and broken records.
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

    /* Records on the connection: HELLO with both addresses, then ACK with
     * the control one only; PROOF; a HELLO cut short. */
    uint8_t ctl[40], dat[24];
    memset(ctl, 0xc1, sizeof(ctl));
    memset(dat, 0xd2, sizeof(dat));
    uint8_t stream[2 * (PS__UCX_REC_PREFIX + PS__UCX_HS_LEN + 128)];
    size_t pl = ps__ucx_addrs_pack(stream + PS__UCX_REC_PREFIX + PS__UCX_HS_LEN, 128, ctl,
                                   sizeof(ctl), dat, sizeof(dat));
    ps__ucx_rec_pack(stream, pl, PS__UCX_HS_HELLO, 9, 0xc0ffee, 0x1122334455667788ull, 1000);
    size_t one = PS__UCX_REC_PREFIX + PS__UCX_HS_LEN + pl;
    size_t pl2 = ps__ucx_addrs_pack(stream + one + PS__UCX_REC_PREFIX + PS__UCX_HS_LEN, 128, ctl,
                                    sizeof(ctl), NULL, 0);
    ps__ucx_rec_pack(stream + one, pl2, PS__UCX_HS_ACK, 1, 0xbeef, 0, 77);
    size_t two = one + PS__UCX_REC_PREFIX + PS__UCX_HS_LEN + pl2;
    bad |= pl == 0 || fuzz_corpus_write(dir, "rec_hello", NULL, 0, stream, one);
    bad |= pl2 == 0 || fuzz_corpus_write(dir, "rec_hello_ack", NULL, 0, stream, two);
    bad |= fuzz_corpus_write(dir, "rec_hello_short", NULL, 0, stream, one - 5);
    uint8_t proof[PS__UCX_REC_PREFIX + PS__UCX_HS_LEN + PS_AUTH_PROOF_BYTES];
    ps__ucx_rec_pack(proof, PS_AUTH_PROOF_BYTES, PS__UCX_HS_AUTH_PROOF, 9, 0, 0, 0);
    memset(proof + PS__UCX_REC_PREFIX + PS__UCX_HS_LEN, 0x5a, PS_AUTH_PROOF_BYTES);
    bad |= fuzz_corpus_write(dir, "rec_proof", NULL, 0, proof, sizeof(proof));

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
    ps__ucx_bye_meta(&m, 9);
    n = fuzz_frame_build(&m, 0, NULL, 0, frame, sizeof(frame));
    bad |= n == 0 || fuzz_corpus_write(dir, "bye_meta_tagged", tag, sizeof(tag), frame, n);
    return bad;
}

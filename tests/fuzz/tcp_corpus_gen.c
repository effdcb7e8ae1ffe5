/*
 * Writes the seed corpus of tcp_fuzzer: connections (flags, starting
 * state, peer, then frames) as the TCP van sees them: an accepted and an
 * opened connection running the job-secret handshake (INIT, CHALLENGE,
 * PROOF, REFUSED), hellos with and without a secret, a data frame after a
 * hello, and broken hellos and handshake frames.
 *
 *   bazel run //tests/fuzz:tcp_corpus_gen -- DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps/net/auth.h"
#include "ps/net/codec/message.h"
#include "ps/net/tcp/tcp_testing.h"
#include "tests/fuzz/corpus_file.h"
#include "tests/fuzz/corpus_frame.h"

enum {
    OUT = 1,
    SECRET = 2
};

static uint8_t conn[8192];
static size_t used;

static void begin(int flags, int state, int peer)
{
    conn[0] = (uint8_t)flags;
    conn[1] = (uint8_t)state;
    conn[2] = (uint8_t)peer;
    used = 3;
}

static int add(const ps_meta_t *m, int fast, const char *data)
{
    size_t n = fuzz_frame_build(m, fast, data, data ? strlen(data) : 0, conn + used,
                                sizeof(conn) - used);
    used += n;
    return n == 0;
}

/* The hello tcp_wire.c writes: tag, version, stream, nstreams, flags,
 * nonce. */
static void hello(ps_meta_t *m, int id, int version, int stream, int nstreams)
{
    ps_meta_init(m);
    m->sender = id;
    memcpy(m->van_data, "PSTCPH", 6);
    m->van_data[6] = (uint8_t)version;
    m->van_data[7] = (uint8_t)stream;
    m->van_data[8] = (uint8_t)nstreams;
    m->van_data[9] = 0;
    for (int i = 0; i < 8; ++i)
        m->van_data[10 + i] = (uint8_t)(0x1122334455667788ull >> (8 * i));
    m->van_data_len = 18;
}

/* A handshake frame of tcp_auth.c: tag, version, type, the payload in the
 * body. */
static void auth(ps_meta_t *m, char type, const uint8_t *body, size_t len)
{
    ps_meta_init(m);
    m->sender = 9;
    memcpy(m->van_data, "PSTCPA", 6);
    m->van_data[6] = 1;
    m->van_data[7] = (uint8_t)type;
    m->van_data_len = 8;
    m->body = len ? body : NULL;
    m->body_len = len;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: tcp_corpus_gen DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    int bad = 0;
    ps_meta_t m;
    uint8_t init[PS_AUTH_INIT_BYTES], chal[PS_AUTH_CHALLENGE_BYTES], proof[PS_AUTH_PROOF_BYTES];
    fuzz_auth_payloads(init, chal);
    memset(proof, 0x33, sizeof(proof));
    int wait_init = ps__tcp_test_auth_wait_init();
    int done = ps__tcp_test_auth_done();

    /* Without a secret: hello, then a push; a scheduler's hello; a push
     * before any hello; a hello of another version. */
    begin(0, 0, 0);
    hello(&m, 9, 1, 0, 1);
    bad |= add(&m, 0, NULL);
    fuzz_kv_push_meta(&m);
    bad |= add(&m, 1, "abcdefgh");
    bad |= fuzz_corpus_write(dir, "hello_then_push", NULL, 0, conn, used);
    begin(OUT, 0, 1);
    hello(&m, 1, 1, 1, 2);
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "hello_stream_1_of_2", NULL, 0, conn, used);
    begin(0, 0, 0);
    fuzz_kv_push_meta(&m);
    bad |= add(&m, 0, "abcdefgh");
    bad |= fuzz_corpus_write(dir, "push_before_hello", NULL, 0, conn, used);
    begin(0, 0, 0);
    hello(&m, 9, 2, 0, 1);
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "bad_hello_version", NULL, 0, conn, used);
    /* A handshake a van without a secret refuses. */
    begin(0, 0, 0);
    auth(&m, 'I', init, sizeof(init));
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "init_without_secret", NULL, 0, conn, used);

    /* With a secret, accepted: INIT, PROOF (wrong), hello. */
    begin(SECRET, wait_init, 0);
    auth(&m, 'I', init, sizeof(init));
    bad |= add(&m, 0, NULL);
    auth(&m, 'P', proof, sizeof(proof));
    bad |= add(&m, 0, NULL);
    hello(&m, 9, 1, 0, 1);
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "accept_init_proof_hello", NULL, 0, conn, used);
    /* A hello instead of INIT; an INIT of the wrong size. */
    begin(SECRET, wait_init, 0);
    hello(&m, 9, 1, 0, 1);
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "accept_hello_first", NULL, 0, conn, used);
    begin(SECRET, wait_init, 0);
    auth(&m, 'I', init, sizeof(init) - 1);
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "bad_init_short", NULL, 0, conn, used);
    /* Opened: CHALLENGE from node 8, then REFUSED. */
    begin(SECRET | OUT, 3, 8);
    auth(&m, 'C', chal, sizeof(chal));
    bad |= add(&m, 0, NULL);
    auth(&m, 'R', NULL, 0);
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "open_challenge_refused", NULL, 0, conn, used);
    /* Done: a hello, a push, then a late handshake frame. */
    begin(SECRET, done, 0);
    hello(&m, 9, 1, 0, 1);
    bad |= add(&m, 0, NULL);
    fuzz_kv_push_meta(&m);
    bad |= add(&m, 1, "abcdefgh");
    auth(&m, 'P', proof, sizeof(proof));
    bad |= add(&m, 0, NULL);
    bad |= fuzz_corpus_write(dir, "done_hello_push_late_proof", NULL, 0, conn, used);
    return bad;
}

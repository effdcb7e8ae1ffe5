/*
 * libFuzzer target for what a peer of the TCP van sends first: frames
 * whose metas go, as on a real connection, through the job-secret
 * handshake (tcp_auth.c) and then the hello reader (tcp_wire.c), on one
 * connection whose state carries from frame to frame.
 *
 * Input: flags u8 (bit 0: we opened the connection; bit 1: the van has a
 * job secret) | the handshake's starting state u8 | the peer u8 (0: not
 * known yet, 1: the scheduler, else node 9) | frames, back to back. Each
 * frame is parsed and its meta decoded as tcp_recv.c does; the first one
 * refused or closing the connection ends the input.
 *
 * Invariants: an accepted connection of a van with a secret passes no
 * frame on before its handshake is done (no proof can be forged without
 * the secret, so one that did not start done never gets there); a van
 * without a secret passes no handshake frame on; whatever the handshake
 * takes and every hello read are frames send() refuses from a caller.
 *
 * A broken invariant aborts, which libFuzzer reports as a crash; ASan and
 * UBSan (--config=fuzz) catch memory and undefined-behaviour errors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/status.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/codec/meta_fast.h"
#include "ps/net/tcp/tcp_testing.h"
#include "tests/fuzz/fuzz_quiet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAMES 16

static const uint8_t secret[32] = "a job secret of thirty-two bytes";

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "tcp_fuzzer: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet_logs();
    if (size < 3)
        return 0;
    int outgoing = data[0] & 1;
    int has_secret = (data[0] >> 1) & 1;
    int start = data[1] % ps__tcp_test_auth_states();
    int peer = data[2] == 0 ? PS_NODE_EMPTY : data[2] == 1 ? PS_SCHEDULER_ID : 9;
    ps__tcp_test_conn_t *c = ps__tcp_test_conn_new(outgoing, peer, has_secret ? secret : NULL,
                                                   start);
    check(c != NULL, "out of memory");
    ps_frame_limits_t limits = ps_frame_limits_default();
    ps_node_t *nodes = NULL;
    size_t cap = 0;
    size_t off = 3;
    for (int i = 0; i < MAX_FRAMES && off < size; ++i) {
        ps_frame_view_t view;
        size_t need = 0;
        if (ps_frame_parse(data + off, size - off, &limits, &view, &need) != PS_OK)
            break;
        off += view.hdr.frame_len;
        ps_meta_t meta;
        const uint8_t *mp = view.meta;
        size_t ml = view.hdr.meta_len;
        ps_status_t st = ps_meta_is_fast(mp, ml)
                             ? ps_meta_fast_decode(mp, ml, &meta)
                             : ps_meta_decode_grow(mp, ml, &meta, &nodes, &cap, 8192);
        if (st != PS_OK)
            break;
        int consumed = 0, hello = 0, stream = 0, nstreams = 0;
        uint64_t nonce = 0;
        st = ps__tcp_test_conn_rx(c, &meta, view.hdr.num_data, &consumed, &hello, &nonce, &stream,
                                  &nstreams);
        int passed = st == PS_OK && !consumed;
        if (has_secret && !outgoing && start != ps__tcp_test_auth_done())
            check(!passed, "an accepted connection passed a frame on before its handshake");
        if (!has_secret && passed)
            check(meta.van_data_len != 8 || memcmp(meta.van_data, "PSTCPA", 6) != 0,
                  "a van without a secret passed a handshake frame on");
        if (consumed || hello)
            check(ps__tcp_test_looks_like_hello(&meta),
                  "the van took a frame that send() would let a caller forge");
        if (hello)
            check(stream >= 0 && stream < 256 && nstreams >= 0 && nstreams < 256,
                  "a hello's stream out of its byte");
        if (st != PS_OK)
            break; /* the van closes the connection */
    }
    free(nodes);
    ps__tcp_test_conn_free(c);
    return 0;
}

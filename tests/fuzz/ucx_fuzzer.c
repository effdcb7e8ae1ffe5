/*
 * libFuzzer target for what a peer of the UCX van sends before it is
 * known: the bytes of the handshake's TCP connection (records: a length,
 * the header of HELLO, ACK or a job-secret step, its payload: the worker
 * addresses, or ps/net/auth.h's INIT and CHALLENGE), and the META messages
 * that re-announce a node id or say goodbye (ps frames whose meta carries
 * the van's tag).
 *
 * Each input is tried as the connection's byte stream, as a header, as
 * the payload of either job-secret step, and as a frame. Whatever the
 * bytes, nothing is read past them; the stream is cut into records that
 * lie within it, and accepted addresses within their record; an accepted
 * header writes back to the same bytes (but for its two unused bytes,
 * which the reader ignores); an unpacked INIT or CHALLENGE packs to the
 * same bytes; a meta taken for a re-announcement or a goodbye carries the
 * tag.
 *
 * A broken invariant aborts, which libFuzzer reports as a crash; ASan and
 * UBSan (--config=fuzz) catch memory and undefined-behaviour errors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/status.h"
#include "ps/net/auth.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/codec/meta_fast.h"
#include "ps/rdma/ucx/ucx_hs.h"
#include "tests/fuzz/fuzz_quiet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "ucx_fuzzer: invariant broken: %s\n", what);
        abort();
    }
}

static void record(const uint8_t *data, size_t size)
{
    int type, id;
    uint32_t cookie;
    uint64_t nonce, seq0;
    if (!ps__ucx_hs_parse(data, size, &type, &id, &cookie, &nonce, &seq0))
        return;
    check(size == PS__UCX_HS_LEN && type >= PS__UCX_HS_HELLO && type <= PS__UCX_HS_AUTH_REFUSED,
          "an accepted record of another size or type");
    uint8_t again[PS__UCX_HS_LEN];
    ps__ucx_hs_pack(again, type, id, cookie, nonce, seq0);
    check(memcmp(again, data, 6) == 0 && memcmp(again + 8, data + 8, PS__UCX_HS_LEN - 8) == 0,
          "an accepted record does not write back");
}

/* The handshake connection's bytes, as ucx_boot.c cuts them into records
 * and ucx_conn.c reads their addresses. */
static void stream(const uint8_t *data, size_t size)
{
    size_t off = 0, total = 0;
    int r;
    while ((r = ps__ucx_rec_complete(data + off, size - off, &total)) == 1) {
        check(total >= PS__UCX_REC_PREFIX + PS__UCX_HS_LEN && total <= PS__UCX_REC_MAX &&
                  total <= size - off,
              "a record outside the stream or its bounds");
        const uint8_t *hs = data + off + PS__UCX_REC_PREFIX;
        const uint8_t *payload = hs + PS__UCX_HS_LEN;
        size_t len = total - PS__UCX_REC_PREFIX - PS__UCX_HS_LEN;
        int type, id;
        uint32_t cookie;
        uint64_t nonce, seq0;
        const uint8_t *ctl, *dat;
        size_t ctl_len, dat_len;
        if (ps__ucx_hs_parse(hs, PS__UCX_HS_LEN, &type, &id, &cookie, &nonce, &seq0) &&
            ps__ucx_addrs_parse(payload, len, &ctl, &ctl_len, &dat, &dat_len)) {
            check(ctl == payload + PS__UCX_ADDRS_HDR && ctl_len >= 1 &&
                      PS__UCX_ADDRS_HDR + ctl_len + dat_len == len &&
                      (dat_len == 0 ? dat == NULL : dat == ctl + ctl_len),
                  "addresses outside their record");
            uint8_t again[PS__UCX_ADDRS_HDR + 2 * PS__UCX_MAX_ADDR];
            size_t n = ps__ucx_addrs_pack(again, sizeof(again), ctl, ctl_len, dat, dat_len);
            check(n == len && memcmp(again, payload, len) == 0, "addresses do not pack back");
        }
        off += total;
    }
    check(r == -1 || (r == 0 && (size - off < PS__UCX_REC_PREFIX || total > size - off)),
          "a whole record left in the stream");
}

static void auth_payloads(const uint8_t *data, size_t size)
{
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    if (size == PS_AUTH_INIT_BYTES) {
        uint8_t again[PS_AUTH_INIT_BYTES];
        ps_auth_init_unpack(data, &t);
        ps_auth_init_pack(&t, again);
        check(memcmp(again, data, size) == 0, "an INIT payload does not pack back");
    }
    if (size == PS_AUTH_CHALLENGE_BYTES) {
        uint8_t proof[PS_AUTH_PROOF_BYTES];
        uint8_t again[PS_AUTH_CHALLENGE_BYTES];
        ps_auth_challenge_unpack(data, &t, proof);
        ps_auth_challenge_pack(&t, proof, again);
        check(memcmp(again, data, size) == 0, "a CHALLENGE payload does not pack back");
    }
}

/* A META message's frame (after its tag), as the receiver decodes it. */
static void meta_frame(const uint8_t *data, size_t size)
{
    ps_frame_limits_t limits = ps_frame_limits_default();
    ps_frame_view_t view;
    size_t need = 0;
    if (ps_frame_parse(data, size, &limits, &view, &need) != PS_OK)
        return;
    ps_meta_t meta;
    ps_node_t nodes[16];
    const uint8_t *mp = view.meta;
    size_t ml = view.hdr.meta_len;
    ps_status_t st = ps_meta_is_fast(mp, ml) ? ps_meta_fast_decode(mp, ml, &meta)
                                             : ps_meta_decode(mp, ml, &meta, nodes, 16);
    if (st != PS_OK)
        return;
    if (ps__ucx_is_bye(&meta)) {
        check(ps__ucx_looks_like_hello(&meta) && !ps__ucx_is_hello(&meta),
              "a goodbye without the tag, or taken for a hello");
    }
    if (ps__ucx_is_hello(&meta)) {
        ps_meta_t hello;
        ps__ucx_hello_meta(&hello, meta.sender);
        check(ps__ucx_looks_like_hello(&meta) && meta.van_data_len == hello.van_data_len &&
                  memcmp(meta.van_data, hello.van_data, hello.van_data_len) == 0,
              "a re-announcement without the tag");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet_logs();
    stream(data, size);
    record(data, size);
    auth_payloads(data, size);
    meta_frame(data, size);
    if (size > 8)
        meta_frame(data + 8, size - 8); /* after an 8-byte tag */
    return 0;
}

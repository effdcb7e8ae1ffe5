/*
 * libFuzzer target for the wire codec: every input is tried both as a frame
 * (header parse, then the meta it carries) and as a bare meta. Whatever the
 * bytes, the codec must answer with a status; whenever it accepts a meta,
 * that meta must survive encode -> decode unchanged, its encoding must be
 * stable, and an accepted header (either form) must rebuild to the same
 * bytes. An accepted compact (version-2) fast meta must decode to exactly
 * what its version-1 form decodes to.
 *
 * A broken invariant aborts, which libFuzzer reports as a crash; ASan and
 * UBSan (--config=fuzz) catch memory and undefined-behaviour errors.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/af.h"
#include "ps/app/af_wire.h"
#include "ps/app/kv_error.h"
#include "ps/app/kv_ipc.h"
#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/codec/meta_fast.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Small enough that inputs with more nodes reach the PS_ERR_TOO_LARGE path. */
#define NODE_CAP 16

static ps_node_t nodes[NODE_CAP];
static ps_node_t nodes_again[NODE_CAP];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "codec_fuzzer: invariant broken: %s\n", what);
        abort();
    }
}

static int is_rejection(ps_status_t s)
{
    return s == PS_ERR_PROTOCOL || s == PS_ERR_TOO_LARGE;
}

static void check_round_trip(const ps_meta_t *m)
{
    size_t size = 0, len = 0, len2 = 0;
    uint8_t *buf, *buf2;
    ps_meta_t again;

    check(ps_meta_encoded_size(m, &size) == PS_OK, "an accepted meta cannot be sized");
    /* Exact sizes, so that ASan sees any write past the end. */
    buf = malloc(size + 1);
    buf2 = malloc(size + 1);
    check(buf != NULL && buf2 != NULL, "out of memory");
    check(ps_meta_encode(m, buf, size, &len) == PS_OK, "an accepted meta cannot be encoded");
    check(len == size, "encoded size differs from the sizing pass");
    if (size > 0)
        check(ps_meta_encode(m, buf, size - 1, &len2) == PS_ERR_TOO_LARGE,
              "encoding fits a buffer one byte short");
    check(ps_meta_decode(buf, len, &again, nodes_again, NODE_CAP) == PS_OK,
          "a re-encoded meta does not decode");
    check(ps_meta_equal(m, &again), "encode/decode changed the meta");
    check(ps_meta_encode(&again, buf2, size, &len2) == PS_OK && len2 == len &&
              memcmp(buf, buf2, len) == 0,
          "the encoding of a decoded meta is not stable");
    free(buf);
    free(buf2);
}

/* The compact fast form (version 2): an accepted one re-encodes to exactly
 * its bytes, and decodes to exactly what its version-1 encoding decodes to
 * (every byte of the meta, from the same starting garbage); a tensor meta,
 * which version 1 does not carry, to what the protobuf codec makes of it. */
static void fuzz_meta_compact(const uint8_t *data, size_t size, const ps_meta_t *m)
{
    size_t len = 0, v1_len = 0;
    size_t cap = PS_META_COMPACT_MAX_FIXED + m->num_data_types + m->body_len;
    check(size <= cap, "a compact meta longer than its bound");
    uint8_t *buf = malloc(cap);
    uint8_t *v1 = malloc(PS_META_FAST_FIXED_LEN + m->num_data_types + m->body_len);
    check(buf != NULL && v1 != NULL, "out of memory");
    check(ps_meta_compact_encode(m, buf, cap, &len) == PS_OK && len == size &&
              memcmp(buf, data, size) == 0,
          "a compact meta does not re-encode to its bytes");
    check(ps_meta_compact_encode(m, buf, size - 1, &len) == PS_ERR_TOO_LARGE,
          "compact encoding fits a buffer one byte short");
    if (m->is_tensor) {
        size_t need = 0, pb_len = 0;
        check(ps_meta_encoded_size(m, &need) == PS_OK, "a compact tensor meta has no codec size");
        uint8_t *pb = malloc(need ? need : 1);
        ps_meta_t back;
        check(pb != NULL && ps_meta_encode(m, pb, need, &pb_len) == PS_OK &&
                  ps_meta_decode(pb, pb_len, &back, NULL, 0) == PS_OK &&
                  ps_meta_equal(&back, m),
              "a compact tensor meta is not what the codec makes of it");
        free(pb);
        free(buf);
        free(v1);
        return;
    }
    check(ps_meta_fast_encode(m, v1, PS_META_FAST_FIXED_LEN + m->num_data_types + m->body_len,
                              &v1_len) == PS_OK,
          "a compact meta has no version-1 form");
    ps_meta_t a, b;
    memset(&a, 0xa5, sizeof(a));
    memset(&b, 0xa5, sizeof(b));
    check(ps_meta_fast_decode(data, size, &a) == PS_OK &&
              ps_meta_fast_decode(v1, v1_len, &b) == PS_OK,
          "a compact meta does not decode twice");
    check(a.body_len == b.body_len &&
              (a.body_len == 0 || memcmp(a.body, b.body, a.body_len) == 0),
          "the two versions' bodies differ");
    a.body = b.body = NULL;
    check(memcmp(&a, &b, sizeof(a)) == 0, "the two versions decode differently");
    free(buf);
    free(v1);
}

/* The fast form (meta_fast.h): what it accepts re-encodes to exactly its
 * bytes, and also survives the protobuf codec. */
static void fuzz_meta_fast(const uint8_t *data, size_t size)
{
    ps_meta_t m, again;
    ps_status_t s = ps_meta_fast_decode(data, size, &m);
    if (s != PS_OK) {
        check(s == PS_ERR_PROTOCOL, "fast meta decode returned an unexpected status");
        return;
    }
    check(ps_meta_is_fast(data, size), "a fast meta without its marker");
    if (m.body_len != 0)
        check(m.body >= data && m.body_len <= size && m.body <= data + size - m.body_len,
              "the fast body does not point into the input");
    if (data[1] == PS_META_COMPACT_VERSION) {
        fuzz_meta_compact(data, size, &m);
        check_round_trip(&m);
        return;
    }
    size_t len = 0, want = ps_meta_fast_size(&m);
    check(want == size, "an accepted fast meta has another size");
    uint8_t *buf = malloc(want);
    check(buf != NULL, "out of memory");
    check(ps_meta_fast_encode(&m, buf, want, &len) == PS_OK && len == size &&
              memcmp(buf, data, size) == 0,
          "a fast meta does not re-encode to its bytes");
    check(ps_meta_fast_encode(&m, buf, want - 1, &len) == PS_ERR_TOO_LARGE,
          "fast encoding fits a buffer one byte short");
    check(ps_meta_fast_decode(buf, want, &again) == PS_OK && ps_meta_equal(&m, &again),
          "fast encode/decode changed the meta");
    free(buf);
    check_round_trip(&m);
}

/* What the AF app reads of a decoded meta (af_wire.h): its batch header
 * and its tensor, each either refused or within bounds. */
static void fuzz_af(const ps_meta_t *m)
{
    ps__af_hdr_t h;
    if (ps__af_hdr_read(m->body, m->body_len, &h) == PS_OK)
        check(h.count >= 1 && h.count <= PS__AF_MAX_BATCH_MSGS && h.index < h.count &&
                  h.num_push <= h.count,
              "an accepted AF batch header is out of bounds");
    ps_af_tensor_t t;
    uint64_t bytes = 0, again = 0;
    if (ps__af_meta_get_tensor(m, &t, &bytes) == PS_OK)
        check(t.ndim <= PS_AF_MAX_DIMS && ps_af_tensor_bytes(&t, &again) == PS_OK &&
                  again == bytes && ps_af_dtype_size(t.dtype) != 0,
              "an accepted AF tensor does not hold together");
}

/* What the KV app reads of a decoded meta's body: IPC descriptors of a
 * request (kv_ipc.h), the written-in-place mark and the error status of an
 * answer (kv_error.h); each either refused or exactly what the bytes say. */
static void fuzz_kv(const ps_meta_t *m)
{
    ps__kv_ipc_desc_t push, pull;
    int has_push = 7, has_pull = 7;
    int ok = ps__kv_ipc_parse_request(m->body, m->body_len, &push, &has_push, &pull, &has_pull);
    check(ok == (has_push || has_pull) && (has_push == 0 || has_push == 1) &&
              (has_pull == 0 || has_pull == 1),
          "IPC descriptor flags disagree with the verdict");
    if (ok) {
        size_t one = sizeof(ps__kv_ipc_desc_t);
        check(m->body_len == (size_t)(has_push + has_pull) * one &&
                  (!has_push || (push.magic == PS__KV_IPC_MAGIC &&
                                 memcmp(&push, m->body, one) == 0)) &&
                  (!has_pull || (pull.magic == PS__KV_IPC_PULL_MAGIC &&
                                 memcmp(&pull, m->body + (has_push ? one : 0), one) == 0)),
              "an accepted IPC request body is not what its bytes say");
    }
    uint64_t written;
    if (ps__kv_ipc_written_parse(m->body, m->body_len, &written))
        check(m->body_len == sizeof(ps__kv_ipc_written_t), "a written mark of the wrong length");
    ps_status_t st = ps__kv_error_read(m->body, m->body_len);
    if (st != PS_OK && st != PS_ERR_PROTOCOL) {
        uint8_t again[PS__KV_ERROR_LEN];
        ps__kv_error_pack(st, again);
        check(ps__kv_error_ok(st) && m->body_len == PS__KV_ERROR_LEN &&
                  memcmp(again, m->body, PS__KV_ERROR_LEN) == 0,
              "an accepted KV error does not write back");
    }
}

static void fuzz_meta(const uint8_t *data, size_t size)
{
    ps_meta_t m;
    if (ps_meta_is_fast(data, size)) {
        fuzz_meta_fast(data, size);
    }
    ps_status_t s = ps_meta_decode(data, size, &m, nodes, NODE_CAP);

    if (s != PS_OK) {
        check(is_rejection(s), "meta decode returned an unexpected status");
        return;
    }
    if (m.body_len != 0)
        check(m.body >= data && m.body_len <= size && m.body <= data + size - m.body_len,
              "the body does not point into the input");
    check(m.control.num_nodes <= NODE_CAP, "more nodes than the array");
    check(m.control.num_nodes == 0 || m.control.nodes == nodes,
          "the node list is not the caller's array");
    check_round_trip(&m);
    fuzz_af(&m);
    fuzz_kv(&m);
}

static void fuzz_frame(const uint8_t *data, size_t size)
{
    ps_frame_view_t view;
    ps_frame_header_t hdr;
    uint8_t rebuilt[PS_FRAME_MAX_HEADER_LEN];
    size_t need = 0, len = 0;
    ps_status_t s = ps_frame_parse(data, size, NULL, &view, &need);

    if (s == PS_INPROGRESS) {
        check(need > size, "in progress without needing more bytes");
        return;
    }
    if (s != PS_OK) {
        check(is_rejection(s), "frame parse returned an unexpected status");
        return;
    }
    check(view.hdr.frame_len <= size, "the frame is longer than the input");
    if (data[0] == PS_FRAME_COMPACT_MAGIC0) {
        /* A compact header is at most 4 + 5 + 10 * 16 bytes here. */
        check(ps_frame_header_build_compact(view.hdr.meta_len, view.hdr.data_len,
                                            view.hdr.num_data, NULL, rebuilt, sizeof(rebuilt),
                                            &len) == PS_OK,
              "an accepted compact header cannot be rebuilt");
    } else {
        check(ps_frame_header_build(view.hdr.flags, view.hdr.meta_len, view.hdr.data_len,
                                    view.hdr.num_data, NULL, rebuilt, sizeof(rebuilt),
                                    &len) == PS_OK,
              "an accepted header cannot be rebuilt");
    }
    check(len == view.hdr.header_len && memcmp(rebuilt, data, len) == 0,
          "an accepted header rebuilds to other bytes");
    check(ps_frame_header_parse(data, len - 1, NULL, &hdr, &need) == PS_INPROGRESS &&
              need > len - 1 && need <= len,
          "a header one byte short is not in progress");
    for (uint16_t i = 0; i < view.hdr.num_data; i++) {
        const uint8_t *end = i + 1 < view.hdr.num_data ? view.data[i + 1] : data + view.hdr.frame_len;
        check(view.data[i] + view.hdr.data_len[i] == end, "segments are not back to back");
    }
    fuzz_meta(view.meta, view.hdr.meta_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;

    if (!quiet) {
        /* Every rejection logs a line, and so does the deliberate encode into
         * a buffer one byte short: far too many while fuzzing. Invariant
         * failures print to stderr themselves. */
        int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

        ps_log_set_level(PS_LOG_ERROR);
        if (fd >= 0)
            ps_log_set_fd(fd);
        quiet = 1;
    }
    fuzz_frame(data, size);
    fuzz_meta(data, size);
    return 0;
}

/*
 * Writes the seed corpus of fabric_fuzzer: META messages as the libfabric
 * van sends them (its header, then a frame with a KV push and its values
 * inline, a pull request carrying a pull descriptor, a compact data meta,
 * a lane message, an EXT announcement), broken headers, and an endpoint
 * blob.
 *
 *   bazel run //tests/fuzz:fabric_corpus_gen -- DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps/net/codec/lane.h"
#include "ps/net/codec/message.h"
#include "ps/rdma/fabric/fabric_wire.h"
#include "tests/fuzz/corpus_file.h"
#include "tests/fuzz/corpus_frame.h"

static ps__fab_hdr_t header(uint16_t flags)
{
    ps__fab_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = PS__FAB_MAGIC;
    h.version = PS__FAB_VERSION;
    h.flags = flags;
    h.sender = 9;
    h.seq = 3;
    h.epoch = 1;
    return h;
}

static int emit(const char *dir, const char *name, ps__fab_hdr_t h, const uint8_t *body, size_t len)
{
    return fuzz_corpus_write(dir, name, &h, sizeof(h), body, len);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fabric_corpus_gen DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    uint8_t frame[2048];
    size_t n;
    int bad = 0;
    ps_meta_t m;

    fuzz_kv_push_meta(&m);
    n = fuzz_frame_build(&m, 0, "abcdefgh", 8, frame, sizeof(frame));
    bad |= n == 0 || emit(dir, "push_inline", header(PS__FAB_F_INLINE), frame, n);
    n = fuzz_frame_build(&m, 1, "abcdefgh", 8, frame, sizeof(frame));
    bad |= n == 0 || emit(dir, "push_compact_inline", header(PS__FAB_F_INLINE), frame, n);
    bad |= n == 0 || emit(dir, "push_data_follows", header(PS__FAB_F_DATA), frame, n);

    /* A pull request with where its answer may be written. */
    ps_meta_init(&m);
    m.timestamp = 42;
    m.request = true;
    m.pull = true;
    m.key = 7;
    ps__fab_rdv_desc_t d = {
        .magic = PS__FAB_RDV_MAGIC, .slot = 5, .addr = 0x10000, .key = 77, .len = 8};
    memcpy(m.van_data, &d, sizeof(d));
    m.van_data_len = sizeof(d);
    n = fuzz_frame_build(&m, 0, NULL, 0, frame, sizeof(frame));
    bad |= n == 0 || emit(dir, "pull_request_rdv", header(0), frame, n);
    /* Its answer, written by RMA. */
    ps__fab_hdr_t h = header(PS__FAB_F_RDV | PS__FAB_F_RMA);
    h.rdv_slot = 5;
    fuzz_kv_push_meta(&m);
    m.push = false;
    m.pull = true;
    m.request = false;
    n = fuzz_frame_build(&m, 0, NULL, 0, frame, sizeof(frame));
    bad |= n == 0 || emit(dir, "pull_answer_rma", h, frame, n);

    /* A lane message. */
    uint8_t lane[PS_LANE_HDR_LEN + 8];
    memset(lane, 0x5a, sizeof(lane));
    ps_lane_hdr_write(lane, 0, 0);
    bad |= emit(dir, "lane", header(PS__FAB_F_LANE), lane, sizeof(lane));
    /* A meta announced as an EXT message. */
    h = header(PS__FAB_F_EXT);
    h.ext_len = 2048;
    bad |= emit(dir, "ext", h, NULL, 0);

    /* Broken: another magic, another version, sender 0, a lane message
     * with another flag, an EXT of nothing. */
    h = header(0);
    h.magic = 0x12345678;
    bad |= emit(dir, "bad_magic", h, frame, n);
    h = header(0);
    h.version = 1;
    bad |= emit(dir, "bad_version", h, frame, n);
    h = header(0);
    h.sender = 0;
    bad |= emit(dir, "bad_sender", h, frame, n);
    bad |= emit(dir, "bad_lane_flags", header(PS__FAB_F_LANE | PS__FAB_F_DATA), lane, sizeof(lane));
    bad |= emit(dir, "bad_ext_empty", header(PS__FAB_F_EXT), NULL, 0);

    /* An endpoint blob with a 16-byte address, and one whose address
     * passes its end. */
    ps__fab_ep_blob_t b = {.magic = PS__FAB_EP_MAGIC,
                           .version = PS__FAB_VERSION,
                           .addr_len = 16,
                           .pid = 4242,
                           .prov_hash = 0x811c9dc5,
                           .host_id = 99,
                           .pid_ns = 7};
    uint8_t addr[16];
    memset(addr, 0xab, sizeof(addr));
    bad |= fuzz_corpus_write(dir, "ep_blob", &b, sizeof(b), addr, sizeof(addr));
    b.addr_len = 17;
    bad |= fuzz_corpus_write(dir, "bad_ep_blob_short", &b, sizeof(b), addr, sizeof(addr));
    return bad;
}

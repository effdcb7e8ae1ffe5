/*
 * Writes the seed corpus of shm_fuzzer: rings (start u64 | tail u64 | ring
 * bytes) holding MSG records as the shm van writes them (compact and
 * protobuf metas, inline and CMA segments, a streamed meta), an ACK and an
 * ID record, a PAD at the end of the ring and a record after the wrap;
 * then broken ones; and compact metas alone.
 *
 *   bazel run //tests/fuzz:shm_corpus_gen -- DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps/net/codec/codec.h"
#include "ps/net/codec/message.h"
#include "ps/net/shm/shm_meta.h"
#include "ps/net/shm/shm_proto.h"
#include "ps/net/shm/shm_ring.h"
#include "tests/fuzz/corpus_file.h"
#include "tests/fuzz/corpus_frame.h"

#define RING 4096u

static uint8_t ring[RING];
static size_t used; /* bytes of ring written from offset 0 */

/* A MSG record at ring offset `at`: its meta (compact or protobuf) and one
 * segment of kind `kind` (inline: the bytes follow). Returns its length. */
static uint32_t put_msg(size_t at, int fast, int kind, int streamed)
{
    ps_meta_t m;
    fuzz_kv_push_meta(&m);
    uint8_t meta[1024];
    size_t meta_len = 0;
    if (fast) {
        if (!ps__shm_meta_fast_size(&m, &meta_len) || meta_len > sizeof(meta))
            return 0;
        ps__shm_meta_fast_write(&m, meta);
    } else if (ps_meta_encode(&m, meta, sizeof(meta), &meta_len) != PS_OK) {
        return 0;
    }
    static const char vals[8] = "abcdefgh";
    ps__shm_rec_msg_t h;
    ps__shm_seg_desc_t d;
    memset(&h, 0, sizeof(h));
    memset(&d, 0, sizeof(d));
    size_t head = sizeof(h) + sizeof(d) + (streamed ? 0 : meta_len);
    d.kind = (uint8_t)kind;
    d.len = sizeof(vals);
    if (kind == PS__SHM_SEG_INLINE)
        d.a = ps__shm_align8(head);
    else if (kind == PS__SHM_SEG_CMA)
        d.a = 0x7f0000001000ull, d.token = 3;
    uint32_t len = ps__shm_align8(kind == PS__SHM_SEG_INLINE ? d.a + d.len : head);
    h.hdr.len = len;
    h.hdr.type = PS__SHM_REC_MSG;
    h.hdr.flags = fast ? PS__SHM_MSG_FAST_META : 0;
    h.meta_len = (uint32_t)meta_len;
    h.num_seg = 1;
    h.meta_streamed = (uint8_t)streamed;
    memcpy(ring + at, &h, sizeof(h));
    memcpy(ring + at + sizeof(h), &d, sizeof(d));
    if (!streamed)
        memcpy(ring + at + sizeof(h) + sizeof(d), meta, meta_len);
    if (kind == PS__SHM_SEG_INLINE)
        memcpy(ring + at + d.a, vals, sizeof(vals));
    return len;
}

static uint32_t put_ack(size_t at)
{
    ps__shm_rec_ack_t a;
    memset(&a, 0, sizeof(a));
    a.hdr.len = sizeof(a) + 8;
    a.hdr.type = PS__SHM_REC_ACK;
    a.count = 2;
    uint32_t tokens[2] = {3, 4};
    memcpy(ring + at, &a, sizeof(a));
    memcpy(ring + at + sizeof(a), tokens, sizeof(tokens));
    return a.hdr.len;
}

static uint32_t put_id(size_t at)
{
    ps__shm_rec_id_t r;
    memset(&r, 0, sizeof(r));
    r.hdr.len = sizeof(r);
    r.hdr.type = PS__SHM_REC_ID;
    r.node_id = 9;
    memcpy(ring + at, &r, sizeof(r));
    return r.hdr.len;
}

static int emit(const char *dir, const char *name, uint64_t start, uint64_t tail)
{
    uint8_t prefix[16];
    for (int i = 0; i < 8; ++i) {
        prefix[i] = (uint8_t)(start >> (8 * i));
        prefix[8 + i] = (uint8_t)(tail >> (8 * i));
    }
    return fuzz_corpus_write(dir, name, prefix, sizeof(prefix), ring, used);
}

static void reset(void)
{
    memset(ring, 0, sizeof(ring));
    used = 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: shm_corpus_gen DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    int bad = 0;
    uint32_t n;

    /* One record of each kind the van writes. */
    static const struct {
        const char *name;
        int fast, kind, streamed;
    } msgs[] = {
        {"msg_compact_inline", 1, PS__SHM_SEG_INLINE, 0},
        {"msg_protobuf_inline", 0, PS__SHM_SEG_INLINE, 0},
        {"msg_compact_cma", 1, PS__SHM_SEG_CMA, 0},
        {"msg_streamed", 0, PS__SHM_SEG_STREAM, 1},
    };
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); ++i) {
        reset();
        used = put_msg(0, msgs[i].fast, msgs[i].kind, msgs[i].streamed);
        bad |= used == 0 || emit(dir, msgs[i].name, 0, used);
    }
    /* A message, an ack and an id one after the other. */
    reset();
    n = put_msg(0, 1, PS__SHM_SEG_INLINE, 0);
    n += put_ack(n);
    n += put_id(n);
    used = n;
    bad |= emit(dir, "three_records", 0, n);
    /* The consumer at the last 16 bytes: a PAD to the end, then an ack
     * from the ring's start. */
    reset();
    ps__shm_rec_t pad = {.len = 16, .type = PS__SHM_REC_PAD, .flags = 0};
    n = put_ack(0);
    memcpy(ring + RING - 16, &pad, sizeof(pad));
    used = RING;
    bad |= emit(dir, "pad_and_wrap", RING - 16, RING + n);

    /* Broken: a tail past a whole ring, an unaligned tail, a record longer
     * than what was written, a zero length, too many segments. */
    reset();
    used = put_ack(0);
    bad |= emit(dir, "bad_tail_far", 0, RING + 8);
    bad |= emit(dir, "bad_tail_unaligned", 0, 12);
    bad |= emit(dir, "bad_record_past_tail", 0, 8);
    reset();
    used = 64;
    bad |= emit(dir, "bad_zero_length", 0, 64);
    reset();
    used = put_msg(0, 1, PS__SHM_SEG_INLINE, 0);
    ring[offsetof(ps__shm_rec_msg_t, num_seg)] = 9;
    bad |= emit(dir, "bad_num_seg", 0, used);
    reset();
    used = put_msg(0, 1, PS__SHM_SEG_INLINE, 0);
    /* The inline segment's offset past the record. */
    ps__shm_seg_desc_t d;
    memcpy(&d, ring + sizeof(ps__shm_rec_msg_t), sizeof(d));
    d.a = used;
    memcpy(ring + sizeof(ps__shm_rec_msg_t), &d, sizeof(d));
    bad |= emit(dir, "bad_inline_offset", 0, used);

    /* A compact meta alone. */
    ps_meta_t m;
    fuzz_kv_push_meta(&m);
    uint8_t meta[1024];
    size_t meta_len = 0;
    if (ps__shm_meta_fast_size(&m, &meta_len) && meta_len <= sizeof(meta)) {
        ps__shm_meta_fast_write(&m, meta);
        bad |= fuzz_corpus_write(dir, "compact_meta", NULL, 0, meta, meta_len);
    } else {
        bad = 1;
    }
    return bad;
}

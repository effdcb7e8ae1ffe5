/*
 * libFuzzer target for what a peer of the shm van writes: the record ring
 * it shares with us (its tail and every byte of its records), the head and
 * segment descriptors of a MSG record, and the meta inside it in both
 * forms (the compact one of shm_meta.h and the codec's).
 *
 * Input: start u64 | tail u64 (little-endian) | ring bytes. The consumer
 * starts at `start` rounded down to a record boundary (its position is its
 * own, always a multiple of 8) with the producer's tail at `tail`, over a 4 KiB ring
 * holding the rest of the input (zeros after it), and takes records until
 * the ring is empty or refused. Whatever the bytes, nothing is read outside
 * the ring; every record it hands out lies inside the ring, before the
 * tail; every accepted MSG head and inline segment lies inside its record;
 * an accepted compact meta writes back to a meta that reads the same.
 * The whole input also goes through the compact meta reader.
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
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/shm/shm_meta.h"
#include "ps/net/shm/shm_proto.h"
#include "ps/net/shm/shm_ring.h"
#include "tests/fuzz/fuzz_quiet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING_SIZE 4096u
#define MAX_META 4096u
#define MAX_MESSAGE (1ull << 30)
#define MAX_RECORDS 256

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "shm_fuzzer: invariant broken: %s\n", what);
        abort();
    }
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = v << 8 | p[i];
    return v;
}

/* An accepted compact meta writes back to bytes that read the same. */
static void compact_meta(const uint8_t *in, size_t len)
{
    ps_meta_t m;
    if (ps__shm_meta_fast_read(in, len, &m) != PS_OK)
        return;
    check(m.body_len == 0 || (m.body >= in && m.body + m.body_len <= in + len),
          "a compact meta's body out of its bytes");
    size_t n = 0;
    check(ps__shm_meta_fast_size(&m, &n) && n == len, "an accepted compact meta has another size");
    uint8_t *again = malloc(n);
    check(again != NULL, "out of memory");
    ps__shm_meta_fast_write(&m, again);
    ps_meta_t m2;
    check(ps__shm_meta_fast_read(again, n, &m2) == PS_OK, "a written compact meta does not read");
    check(ps_meta_equal(&m, &m2), "a compact meta reads back different");
    free(again);
}

/* What the receiver does with a MSG record before it touches a segment. */
static void msg_record(const uint8_t *rec, uint32_t rec_len)
{
    ps__shm_rec_msg_t h;
    size_t head;
    if (ps__shm_rec_msg_head(rec, rec_len, MAX_META, 9, &h, &head) != PS_OK)
        return;
    check(head <= rec_len && h.num_seg <= PS_MSG_MAX_DATA && h.meta_len <= MAX_META,
          "an accepted MSG head out of its record");
    /* The receiver checks a copy, as it does (the ring may change). */
    uint8_t *copy = malloc(head);
    check(copy != NULL, "out of memory");
    memcpy(copy, rec, head);
    const ps__shm_seg_desc_t *desc = (const ps__shm_seg_desc_t *)(void *)(copy + sizeof(h));
    if (ps__shm_rec_descs_check(desc, h.num_seg, h.meta_streamed, head, rec_len, MAX_MESSAGE, 9) ==
        PS_OK) {
        for (uint32_t i = 0; i < h.num_seg; ++i) {
            check(desc[i].len <= MAX_MESSAGE, "an accepted segment over the limit");
            if (desc[i].kind == PS__SHM_SEG_INLINE)
                check(desc[i].a >= head && desc[i].a + desc[i].len <= rec_len,
                      "an accepted inline segment out of its record");
        }
        if (!h.meta_streamed) {
            const uint8_t *mp = copy + sizeof(h) + (size_t)h.num_seg * sizeof(ps__shm_seg_desc_t);
            if (h.hdr.flags & PS__SHM_MSG_FAST_META) {
                compact_meta(mp, h.meta_len);
            } else {
                ps_meta_t m;
                ps_node_t nodes[16];
                (void)ps_meta_decode(mp, h.meta_len, &m, nodes, 16);
            }
        }
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet_logs();
    compact_meta(data, size);
    if (size < 16)
        return 0;
    uint64_t start = get_le64(data) & ~(uint64_t)(PS__SHM_REC_ALIGN - 1);
    uint64_t tail = get_le64(data + 8);
    /* The ring as the van maps it: control block, then the data area. */
    uint8_t *mem = aligned_alloc(PS__SHM_CACHELINE, ps__shm_ring_bytes(RING_SIZE));
    check(mem != NULL, "out of memory");
    ps__shm_ring_init(mem, RING_SIZE);
    ps__shm_ring_t r;
    ps__shm_ring_attach(&r, mem, RING_SIZE);
    memset(r.data, 0, RING_SIZE);
    size_t n = size - 16 < RING_SIZE ? size - 16 : RING_SIZE;
    memcpy(r.data, data + 16, n);
    r.pos = r.peer = start;
    r.ctl->head = start;
    r.ctl->tail = tail;

    for (int i = 0; i < MAX_RECORDS; ++i) {
        const uint8_t *rec;
        ps__shm_rec_t hdr;
        int wake = 0;
        if (ps__shm_ring_peek(&r, &rec, &hdr, &wake) != PS_OK || rec == NULL)
            break;
        check(rec >= r.data && hdr.len >= sizeof(hdr) && rec + hdr.len <= r.data + RING_SIZE,
              "a record out of the ring");
        check(r.peer - r.pos >= hdr.len && r.peer - r.pos <= RING_SIZE,
              "a record past the producer's tail");
        if (hdr.type == PS__SHM_REC_MSG)
            msg_record(rec, hdr.len);
        (void)ps__shm_ring_consume(&r, hdr.len);
    }
    free(mem);
    return 0;
}

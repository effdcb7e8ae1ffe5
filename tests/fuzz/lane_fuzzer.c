/*
 * libFuzzer target for the small lane's wire forms (what a peer's bytes
 * reach on the lane): the lane header (ps/net/codec/lane.h) and, behind it,
 * the KV app's payload (ps/app/kv_lane.h). Whatever the bytes, the readers
 * answer; whenever they accept, writing back what they read gives the same
 * bytes (each form has one encoding: reserved bytes 0, exact length, lens
 * present exactly when flagged), and every pointer the payload reader
 * hands out lies inside the input.
 *
 * A broken invariant aborts, which libFuzzer reports as a crash; ASan and
 * UBSan (--config=fuzz) catch memory and undefined-behaviour errors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/kv_lane.h"
#include "ps/base/status.h"
#include "ps/net/codec/lane.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "lane_fuzzer: invariant broken: %s\n", what);
        abort();
    }
}

static int inside(const void *p, size_t n, const uint8_t *buf, size_t len)
{
    const uint8_t *b = p;
    return n == 0 || (b >= buf && b + n <= buf + len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int app_id, customer_id;
    if (ps_lane_hdr_read(data, size, &app_id, &customer_id)) {
        uint8_t hdr[PS_LANE_HDR_LEN];
        ps_lane_hdr_write(hdr, app_id, customer_id);
        check(memcmp(hdr, data, PS_LANE_HDR_LEN) == 0, "a lane header does not write back");
        data += PS_LANE_HDR_LEN;
        size -= PS_LANE_HDR_LEN;
    }
    /* The payload reader on what follows a header, or on the whole input. */
    ps__kv_lane_msg_t m;
    if (ps__kv_lane_read(data, size, &m) != PS_OK)
        return 0;
    check(ps__kv_lane_size(m.num_keys, m.vals_len, m.lens != NULL) == size,
          "an accepted payload's size is not its length");
    check(inside(m.keys, m.num_keys * 8, data, size) && inside(m.vals, m.vals_len, data, size) &&
              (m.lens == NULL || inside(m.lens, m.num_keys * 4, data, size)),
          "a pointer out of the payload");
    uint8_t *again = malloc(size);
    check(again != NULL, "out of memory");
    ps__kv_lane_write(again, &m);
    check(memcmp(again, data, size) == 0, "an accepted payload does not write back");
    free(again);
    return 0;
}

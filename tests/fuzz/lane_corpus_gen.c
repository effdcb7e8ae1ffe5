/*
 * Writes the seed corpus of lane_fuzzer: lane messages as the KV worker and
 * server send them (header and payload), and payloads alone.
 *
 *   bazel run //tests/fuzz:lane_corpus_gen -- DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps/app/kv_lane.h"
#include "ps/net/codec/lane.h"
#include "tests/fuzz/corpus_file.h"

/* m as a lane message (with_hdr) or a payload alone, written to DIR/name. */
static int put_msg(const char *dir, const char *name, const ps__kv_lane_msg_t *m, int with_hdr)
{
    uint8_t buf[PS_LANE_MAX_BYTES];
    size_t n = ps__kv_lane_size(m->num_keys, m->vals_len, m->lens != NULL);
    size_t off = with_hdr ? PS_LANE_HDR_LEN : 0;
    if (n == 0 || off + n > sizeof(buf))
        return 1;
    if (with_hdr)
        ps_lane_hdr_write(buf, 3, 7);
    ps__kv_lane_write(buf + off, m);
    return fuzz_corpus_write(dir, name, NULL, 0, buf, off + n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: lane_corpus_gen DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    uint64_t keys[3] = {7, 9, 1ull << 62};
    int64_t vals[6] = {1, -2, 3, -4, 5, -6};
    int32_t lens[3] = {1, 2, 3};
    int bad = 0;

    /* A one-key push-pull of 8 bytes (test_benchmark's), and its answer. */
    ps__kv_lane_msg_t req = {.timestamp = 41, .val_len = 8, .request = 1, .push = 1, .pull = 1,
                             .type = PS_DATA_CHAR, .num_keys = 1, .keys = keys, .vals = vals,
                             .vals_len = 8};
    bad |= put_msg(dir, "pushpull_request", &req, 1);
    ps__kv_lane_msg_t ans = req;
    ans.request = 0;
    bad |= put_msg(dir, "pushpull_answer", &ans, 1);
    /* Three keys with lengths, pushed; a pull of them; an empty answer. */
    ps__kv_lane_msg_t push = {.timestamp = 5, .cmd = -3, .val_len = 48, .request = 1, .push = 1,
                              .type = PS_DATA_INT64, .num_keys = 3, .keys = keys, .vals = vals,
                              .vals_len = 48, .lens = lens};
    bad |= put_msg(dir, "push_lens", &push, 1);
    ps__kv_lane_msg_t pull = {.timestamp = 6, .val_len = 48, .request = 1, .pull = 1,
                              .type = PS_DATA_INT64, .num_keys = 3, .keys = keys, .lens = lens};
    bad |= put_msg(dir, "pull_lens", &pull, 1);
    ps__kv_lane_msg_t empty = {.timestamp = 5, .push = 1};
    bad |= put_msg(dir, "push_answer", &empty, 1);
    bad |= put_msg(dir, "payload_only", &push, 0);
    return bad;
}

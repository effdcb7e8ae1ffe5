/*
 * libFuzzer target for what a peer of the libfabric van sends before the
 * van trusts it: a META message (the van's header, then a lane message, or
 * the frame header and meta with an optional pull descriptor in van_data,
 * as rx_decode in fabric_recv.c reads them) and the endpoint blob a peer
 * publishes in the node table. Every input is tried as both.
 *
 * Whatever the bytes, the checks answer without reading past the input;
 * an accepted lane message has a lane header inside its bytes; an
 * accepted frame's meta lies inside the message; an accepted blob's
 * address lies inside the endpoint name.
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
#include "ps/net/codec/lane.h"
#include "ps/net/codec/message.h"
#include "ps/net/codec/meta_fast.h"
#include "ps/net/message.h"
#include "ps/rdma/fabric/fabric_wire.h"
#include "tests/fuzz/fuzz_quiet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fabric_fuzzer: invariant broken: %s\n", what);
        abort();
    }
}

/* The frame and meta after the header, as rx_decode reads them. */
static void frame_and_meta(const uint8_t *buf, size_t len, const ps_frame_limits_t *limits)
{
    ps_frame_header_t fh;
    size_t need = 0;
    if (ps_frame_header_parse(buf, len, limits, &fh, &need) != PS_OK ||
        fh.num_data > PS_MSG_MAX_DATA || (size_t)fh.header_len + fh.meta_len > len)
        return;
    const uint8_t *mp = buf + fh.header_len;
    ps_meta_t meta;
    ps_node_t *nodes = NULL;
    size_t cap = 0;
    ps_status_t st = ps_meta_is_fast(mp, fh.meta_len)
                         ? ps_meta_fast_decode(mp, fh.meta_len, &meta)
                         : ps_meta_decode_grow(mp, fh.meta_len, &meta, &nodes, &cap, 8192);
    if (st == PS_OK) {
        check(meta.body_len == 0 ||
                  (meta.body >= mp && meta.body + meta.body_len <= mp + fh.meta_len),
              "a meta's body out of the message");
        check(meta.van_data_len <= sizeof(meta.van_data), "van_data longer than its array");
        ps__fab_rdv_desc_t d;
        if (meta.van_data_len == sizeof(d))
            memcpy(&d, meta.van_data, sizeof(d));
    }
    free(nodes);
}

static void meta_message(const uint8_t *p, size_t len)
{
    ps__fab_hdr_t hdr;
    if (len < sizeof(hdr))
        return;
    memcpy(&hdr, p, sizeof(hdr));
    if (!ps__fab_hdr_valid(&hdr))
        return;
    check(hdr.sender > 0 && hdr.sender < PS_NODE_EMPTY, "an accepted header's sender is no node");
    const uint8_t *rest = p + sizeof(hdr);
    size_t rest_len = len - sizeof(hdr);
    if (hdr.flags & PS__FAB_F_LANE) {
        int app, customer;
        if (ps__fab_lane_valid(&hdr, rest_len))
            check(rest_len >= PS_LANE_HDR_LEN && rest_len <= PS_LANE_MAX_BYTES,
                  "an accepted lane message of a size the lane does not take");
        (void)ps_lane_hdr_read(rest, rest_len, &app, &customer);
        return;
    }
    ps_frame_limits_t limits = ps_frame_limits_default();
    if (hdr.flags & PS__FAB_F_EXT) {
        if (ps__fab_ext_len_valid(&hdr, limits.max_meta_bytes))
            check(hdr.ext_len > 0 &&
                      hdr.ext_len <= (uint64_t)limits.max_meta_bytes + PS_FRAME_MAX_HEADER_LEN,
                  "an accepted EXT size out of the limits");
        /* The EXT message itself is a frame and meta. */
        frame_and_meta(rest, rest_len, &limits);
        return;
    }
    frame_and_meta(rest, rest_len, &limits);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet_logs();
    meta_message(data, size);
    ps__fab_ep_blob_t b;
    if (ps__fab_blob_read(data, size, &b))
        check(sizeof(b) + b.addr_len <= size, "an accepted blob's address past its name");
    return 0;
}

/*
 * Frames and hellos on a TCP connection.
 *
 * A frame is ps/net/codec/frame.h's: header, encoded meta, data segments.
 * The meta of a plain data message is in the fast form of
 * ps/net/codec/meta_fast.h, every other one protobuf (codec.h); the
 * receiver tells them apart by the first byte.
 * The hello is an ordinary frame without data whose meta carries the
 * announcing node's id in `sender` and a tag in `van_data` (the TCP van has
 * no other use for van_data, and send() refuses messages whose van_data
 * carries the tag, so a hello cannot be forged through the API):
 *
 *   van_data = "PSTCPH" | version u8 | stream u8 | nstreams u8 | flags u8 |
 *              nonce u64 (little-endian)
 *
 * It is the first frame on every connection we open, and is sent again on
 * it when the local node id becomes known (set_node_id).
 */
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame_encode.h"
#include "ps/net/tcp/tcp_internal.h"

#define HELLO_TAG "PSTCPH"
#define HELLO_TAG_LEN 6
#define HELLO_VERSION 1
#define HELLO_LEN (HELLO_TAG_LEN + 4 + 8)

ps_status_t ps__tcp_encode_frame(ps__tcp_van_t *van, const ps_meta_t *meta, const uint64_t *lens,
                                 uint32_t num_data, uint8_t *buf, size_t cap,
                                 uint8_t **hm_p, size_t *len_p, uint8_t **heap_p)
{
    return ps_frame_encode_head(meta, lens, num_data, &van->limits, PS_LOG_TCP, buf, cap, hm_p,
                                len_p, heap_p);
}

ps_status_t ps__tcp_encode_hello(ps__tcp_van_t *van, int my_id, uint64_t nonce, int stream,
                                 int nstreams, uint8_t *buf, size_t cap, size_t *len_p)
{
    ps_meta_t meta;
    ps_meta_init(&meta);
    meta.sender = my_id;
    uint8_t *v = meta.van_data;
    memcpy(v, HELLO_TAG, HELLO_TAG_LEN);
    v[HELLO_TAG_LEN] = HELLO_VERSION;
    v[HELLO_TAG_LEN + 1] = (uint8_t)stream;
    v[HELLO_TAG_LEN + 2] = (uint8_t)nstreams;
    v[HELLO_TAG_LEN + 3] = 0;
    for (int i = 0; i < 8; ++i) {
        v[HELLO_TAG_LEN + 4 + i] = (uint8_t)(nonce >> (8 * i));
    }
    meta.van_data_len = HELLO_LEN;
    uint8_t *hm;
    uint8_t *heap = NULL;
    ps_status_t st = ps__tcp_encode_frame(van, &meta, NULL, 0, buf, cap, &hm, len_p, &heap);
    if (st == PS_OK && heap != NULL) {
        /* Cannot happen: a hello is a few dozen bytes. */
        free(heap);
        return PS_ERR_TOO_LARGE;
    }
    return st;
}

int ps__tcp_looks_like_hello(const ps_meta_t *meta)
{
    const size_t n = sizeof(PS__TCP_OWN_TAG) - 1;
    return meta->van_data_len >= n && memcmp(meta->van_data, PS__TCP_OWN_TAG, n) == 0;
}

int ps__tcp_parse_hello(const ps_meta_t *meta, uint64_t *nonce_p, int *stream_p,
                        int *nstreams_p)
{
    if (meta->van_data_len != HELLO_LEN || memcmp(meta->van_data, HELLO_TAG, HELLO_TAG_LEN) != 0 ||
        meta->van_data[HELLO_TAG_LEN] != HELLO_VERSION || ps_meta_is_control(meta)) {
        return 0;
    }
    const uint8_t *v = meta->van_data;
    uint64_t nonce = 0;
    for (int i = 0; i < 8; ++i) {
        nonce |= (uint64_t)v[HELLO_TAG_LEN + 4 + i] << (8 * i);
    }
    *stream_p = v[HELLO_TAG_LEN + 1];
    *nstreams_p = v[HELLO_TAG_LEN + 2];
    *nonce_p = nonce;
    return 1;
}

/*
 * What the corpus generators build alike: a ps frame (header, meta, one
 * data segment) as a van sends it, a KV push's meta, the job-secret
 * handshake's payloads.
 */
#ifndef TESTS_FUZZ_CORPUS_FRAME_H_
#define TESTS_FUZZ_CORPUS_FRAME_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/net/auth.h"
#include "ps/net/codec/message.h"

/* Writes the frame of m (fast: its compact data meta, else protobuf) with
 * data_len bytes of data (none when 0) to out (cap bytes); returns its
 * length, 0 when it does not fit or does not encode. */
size_t fuzz_frame_build(const ps_meta_t *m, int fast, const void *data, size_t data_len,
                        uint8_t *out, size_t cap);

/* The meta of a KV push request as the worker sends it: key 7, 8 bytes of
 * values (one segment of chars), timestamp 41. */
void fuzz_kv_push_meta(ps_meta_t *m);

/* The job-secret handshake's INIT and CHALLENGE payloads (ps/net/auth.h)
 * of node 9 opening to node 8, with fixed nonces and proof. */
void fuzz_auth_payloads(uint8_t init[PS_AUTH_INIT_BYTES], uint8_t chal[PS_AUTH_CHALLENGE_BYTES]);

#endif /* TESTS_FUZZ_CORPUS_FRAME_H_ */

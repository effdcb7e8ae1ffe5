/*
 * The corpus generators' one way to build a ps frame (header, meta, one
 * data segment) as a van sends it.
 */
#ifndef TESTS_FUZZ_CORPUS_FRAME_H_
#define TESTS_FUZZ_CORPUS_FRAME_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/net/codec/message.h"

/* Writes the frame of m (fast: its compact data meta, else protobuf) with
 * data_len bytes of data (none when 0) to out (cap bytes); returns its
 * length, 0 when it does not fit or does not encode. */
size_t fuzz_frame_build(const ps_meta_t *m, int fast, const void *data, size_t data_len,
                        uint8_t *out, size_t cap);

#endif /* TESTS_FUZZ_CORPUS_FRAME_H_ */

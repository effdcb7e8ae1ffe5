/*
 * corpus_frame.h: a frame built as frame_encode.c lays it out.
 */
#include "tests/fuzz/corpus_frame.h"

#include <string.h>

#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/meta_fast.h"

size_t fuzz_frame_build(const ps_meta_t *m, int fast, const void *data, size_t data_len,
                        uint8_t *out, size_t cap)
{
    uint8_t meta[4096];
    size_t meta_len = 0, hdr_len = 0;
    uint64_t lens[1] = {data_len};
    if ((fast ? ps_meta_compact_encode(m, meta, sizeof(meta), &meta_len)
              : ps_meta_encode(m, meta, sizeof(meta), &meta_len)) != PS_OK)
        return 0;
    if ((fast ? ps_frame_header_build_compact((uint32_t)meta_len, lens, data_len ? 1 : 0, NULL,
                                              out, cap, &hdr_len)
              : ps_frame_header_build(0, (uint32_t)meta_len, lens, data_len ? 1 : 0, NULL, out,
                                      cap, &hdr_len)) != PS_OK ||
        hdr_len + meta_len + data_len > cap)
        return 0;
    memcpy(out + hdr_len, meta, meta_len);
    if (data_len != 0)
        memcpy(out + hdr_len + meta_len, data, data_len);
    return hdr_len + meta_len + data_len;
}

/*
 * corpus_frame.h: frames as frame_encode.c lays them out, and the metas
 * and payloads the seeds share.
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
    if ((fast ? ps_frame_header_build_compact((uint32_t)meta_len, lens, data_len ? 1 : 0, NULL, out,
                                              cap, &hdr_len)
              : ps_frame_header_build(0, (uint32_t)meta_len, lens, data_len ? 1 : 0, NULL, out, cap,
                                      &hdr_len)) != PS_OK ||
        hdr_len + meta_len + data_len > cap)
        return 0;
    memcpy(out + hdr_len, meta, meta_len);
    if (data_len != 0)
        memcpy(out + hdr_len + meta_len, data, data_len);
    return hdr_len + meta_len + data_len;
}

void fuzz_kv_push_meta(ps_meta_t *m)
{
    ps_meta_init(m);
    m->timestamp = 41;
    m->sender = 9;
    m->recver = 8;
    m->request = true;
    m->push = true;
    m->key = 7;
    m->val_len = 8;
    m->data_size = 8;
    m->num_data_types = 1;
    m->data_types[0] = PS_DATA_CHAR;
}

void fuzz_auth_payloads(uint8_t init[PS_AUTH_INIT_BYTES], uint8_t chal[PS_AUTH_CHALLENGE_BYTES])
{
    ps_auth_transcript_t t;
    uint8_t proof[PS_AUTH_PROOF_BYTES];
    memset(&t, 0, sizeof(t));
    memset(t.nonce_i, 0x11, sizeof(t.nonce_i));
    memset(t.nonce_r, 0x22, sizeof(t.nonce_r));
    memset(proof, 0x33, sizeof(proof));
    t.id_i = 9;
    t.role_i = PS_ROLE_WORKER;
    t.id_r = 8;
    t.role_r = PS_ROLE_SERVER;
    ps_auth_init_pack(&t, init);
    ps_auth_challenge_pack(&t, proof, chal);
}

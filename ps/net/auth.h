/*
 * The job secret (PS_JOB_SECRET / PS_JOB_SECRET_FILE): a mutual
 * challenge-response every van runs on each new connection before any of
 * its messages is processed.
 *
 * All crypto is libsodium's HMAC-SHA-256. The secret (any length) is first
 * turned into a 32-byte key K = HMAC(secret, "ps job key v1"). A handshake
 * has an initiator (who opened the connection) and a responder, each with
 * a fresh random nonce, and a transcript both sides know after two
 * messages:
 *
 *   initiator -> responder:  nonce_i, id_i, role_i
 *   responder -> initiator:  nonce_r, id_r, role_r, proof_r
 *   initiator -> responder:  proof_i
 *
 *   proof_x = HMAC(K, "ps-auth-v1" | direction x | van name | nonce_i |
 *                     nonce_r | id_i | role_i | id_r | role_r)
 *
 * The direction label keeps a responder's proof from being reflected back
 * as an initiator's; both nonces make every proof good for one connection
 * only; the announced ids and roles bind it to who claimed to be at each
 * end (a van then holds the peer to the id it announced here). Proofs are
 * checked in constant time (crypto_auth_hmacsha256_verify).
 */
#ifndef PS_NET_AUTH_H_
#define PS_NET_AUTH_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_AUTH_KEY_BYTES 32
#define PS_AUTH_NONCE_BYTES 32
#define PS_AUTH_PROOF_BYTES 32
/* Longest secret accepted (from the variable or the file). */
#define PS_AUTH_SECRET_MAX 4096

typedef struct ps_auth_key {
    uint8_t bytes[PS_AUTH_KEY_BYTES];
} ps_auth_key_t;

typedef enum {
    PS_AUTH_INITIATOR = 1, /* the side that opened the connection */
    PS_AUTH_RESPONDER = 2,
} ps_auth_dir_t;

/* What both ends agree on after the first two handshake messages. */
typedef struct ps_auth_transcript {
    const char *van;  /* "tcp", "shm", ...: a proof for one van is no good for another */
    uint8_t nonce_i[PS_AUTH_NONCE_BYTES];
    uint8_t nonce_r[PS_AUTH_NONCE_BYTES];
    int32_t id_i, role_i;
    int32_t id_r, role_r;
} ps_auth_transcript_t;

/* Derives the key from a secret of `len` bytes (len >= 1). */
ps_status_t ps_auth_key_from_secret(const void *secret, size_t len, ps_auth_key_t *key_p);

/* Reads the job secret once from the configuration: PS_JOB_SECRET, else
 * the file PS_JOB_SECRET_FILE (read whole, one trailing "\n" or "\r\n"
 * stripped; refused with PS_ERR_AUTH when it is readable by others
 * (mode & 0007) or empty). *enabled_p = 0 (and PS_OK) when neither is
 * set. Logs once why it fails. */
ps_status_t ps_auth_load(ps_auth_key_t *key_p, int *enabled_p);

/* The file part of ps_auth_load, for tests. */
ps_status_t ps_auth_load_file(const char *path, ps_auth_key_t *key_p);

/* A fresh random nonce (randombytes_buf). */
void ps_auth_nonce(uint8_t nonce[PS_AUTH_NONCE_BYTES]);

/* The proof of side `dir` over transcript `t`. */
void ps_auth_prove(const ps_auth_key_t *key, ps_auth_dir_t dir, const ps_auth_transcript_t *t,
                   uint8_t proof[PS_AUTH_PROOF_BYTES]);

/* 1 if `proof` is side `dir`'s proof over `t` (constant time), else 0. */
int ps_auth_verify(const ps_auth_key_t *key, ps_auth_dir_t dir, const ps_auth_transcript_t *t,
                   const uint8_t proof[PS_AUTH_PROOF_BYTES]);

/*
 * The records of the first two handshake messages, as every van that has
 * room for them carries them (little-endian, fixed size):
 *
 *   INIT       nonce_i[32] | id_i i32 | role_i i32                   40 bytes
 *   CHALLENGE  nonce_r[32] | id_r i32 | role_r i32 | proof_r[32]     72 bytes
 *
 * Pure byte shuffling: the caller checks the length of what it received
 * before it unpacks, and the proof afterwards.
 */
#define PS_AUTH_INIT_BYTES (PS_AUTH_NONCE_BYTES + 8)
#define PS_AUTH_CHALLENGE_BYTES (PS_AUTH_NONCE_BYTES + 8 + PS_AUTH_PROOF_BYTES)

/* Writes t's nonce_i, id_i, role_i. */
void ps_auth_init_pack(const ps_auth_transcript_t *t, uint8_t out[PS_AUTH_INIT_BYTES]);
/* Reads into t's nonce_i, id_i, role_i (the rest of t is left alone). */
void ps_auth_init_unpack(const uint8_t in[PS_AUTH_INIT_BYTES], ps_auth_transcript_t *t);
/* Writes t's nonce_r, id_r, role_r and `proof`. */
void ps_auth_challenge_pack(const ps_auth_transcript_t *t, const uint8_t proof[PS_AUTH_PROOF_BYTES],
                            uint8_t out[PS_AUTH_CHALLENGE_BYTES]);
/* Reads into t's nonce_r, id_r, role_r, and the proof into `proof`. */
void ps_auth_challenge_unpack(const uint8_t in[PS_AUTH_CHALLENGE_BYTES], ps_auth_transcript_t *t,
                              uint8_t proof[PS_AUTH_PROOF_BYTES]);

/* Wipes a key (sodium_memzero). */
void ps_auth_key_wipe(ps_auth_key_t *key);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_AUTH_H_ */

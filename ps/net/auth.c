/*
 * The job secret: loading it and the HMAC proofs of the connection
 * handshake (see auth.h). Only libsodium does crypto here.
 */
#include "ps/net/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/endian.h"
#include "ps/base/log.h"

#define KEY_LABEL "ps job key v1"
#define PROOF_LABEL "ps-auth-v1"

static ps_status_t auth_init(void)
{
    /* Idempotent and thread-safe; < 0 only when the RNG cannot work. */
    if (sodium_init() < 0) {
        ps_error(PS_LOG_CORE, "libsodium cannot initialise (no random source?)");
        return PS_ERR_NO_RESOURCE;
    }
    return PS_OK;
}

ps_status_t ps_auth_key_from_secret(const void *secret, size_t len, ps_auth_key_t *key_p)
{
    if (secret == NULL || len == 0 || key_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = auth_init();
    if (st != PS_OK) {
        return st;
    }
    /* HMAC takes keys of any length; the derived key has the size
     * crypto_auth_hmacsha256_verify wants. */
    crypto_auth_hmacsha256_state s;
    ps_auth_key_t key;
    crypto_auth_hmacsha256_init(&s, secret, len);
    crypto_auth_hmacsha256_update(&s, (const unsigned char *)KEY_LABEL, sizeof(KEY_LABEL) - 1);
    crypto_auth_hmacsha256_final(&s, key.bytes);
    sodium_memzero(&s, sizeof(s));
    *key_p = key;
    sodium_memzero(&key, sizeof(key));
    return PS_OK;
}

ps_status_t ps_auth_load_file(const char *path, ps_auth_key_t *key_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        ps_error(PS_LOG_CORE, "cannot read the job secret from %s (PS_JOB_SECRET_FILE): %s", path,
                 strerror(err));
        return PS_ERR_CONFIG;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ps_error(PS_LOG_CORE, "the job secret file %s (PS_JOB_SECRET_FILE) is not a regular file",
                 path);
        close(fd);
        return PS_ERR_CONFIG;
    }
    /* Refused, not just warned about: a secret everyone on the machine can
     * read protects nothing. */
    if ((sb.st_mode & (S_IROTH | S_IWOTH)) != 0) {
        ps_error(PS_LOG_CORE, "the job secret file %s is readable or writable by others (mode %03o); "
                 "refusing it: chmod o-rwx it", path, (unsigned)(sb.st_mode & 0777));
        close(fd);
        return PS_ERR_AUTH;
    }
    uint8_t buf[PS_AUTH_SECRET_MAX + 3];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            int err = errno;
            ps_error(PS_LOG_CORE, "reading the job secret file %s: %s", path, strerror(err));
            close(fd);
            sodium_memzero(buf, sizeof(buf));
            return PS_ERR_CONFIG;
        }
        if (n == 0 || (len += (size_t)n) == sizeof(buf)) {
            break;
        }
    }
    close(fd);
    if (len > 0 && buf[len - 1] == '\n') {
        len--;
        if (len > 0 && buf[len - 1] == '\r') {
            len--;
        }
    }
    ps_status_t st;
    if (len == 0 || len > PS_AUTH_SECRET_MAX) {
        ps_error(PS_LOG_CORE, "the job secret file %s is %s (1 to %d bytes expected)", path,
                 len == 0 ? "empty" : "too long", PS_AUTH_SECRET_MAX);
        st = PS_ERR_CONFIG;
    } else {
        st = ps_auth_key_from_secret(buf, len, key_p);
    }
    sodium_memzero(buf, sizeof(buf));
    return st;
}

ps_status_t ps_auth_load(ps_auth_key_t *key_p, int *enabled_p)
{
    if (key_p == NULL || enabled_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    const char *secret = ps_config_str_or(PS_CFG_PS_JOB_SECRET, "");
    const char *file = ps_config_str_or(PS_CFG_PS_JOB_SECRET_FILE, "");
    ps_status_t st;
    if (secret != NULL && secret[0] != '\0') {
        size_t len = strlen(secret);
        if (len > PS_AUTH_SECRET_MAX) {
            ps_error(PS_LOG_CORE, "PS_JOB_SECRET is longer than %d bytes", PS_AUTH_SECRET_MAX);
            return PS_ERR_CONFIG;
        }
        st = ps_auth_key_from_secret(secret, len, key_p);
    } else if (file != NULL && file[0] != '\0') {
        st = ps_auth_load_file(file, key_p);
    } else {
        *enabled_p = 0;
        return PS_OK;
    }
    if (st == PS_OK) {
        *enabled_p = 1;
    }
    return st;
}

void ps_auth_nonce(uint8_t nonce[PS_AUTH_NONCE_BYTES])
{
    (void)auth_init();
    randombytes_buf(nonce, PS_AUTH_NONCE_BYTES);
}

void ps_auth_init_pack(const ps_auth_transcript_t *t, uint8_t out[PS_AUTH_INIT_BYTES])
{
    memcpy(out, t->nonce_i, PS_AUTH_NONCE_BYTES);
    ps_put_le32(out + PS_AUTH_NONCE_BYTES, (uint32_t)t->id_i);
    ps_put_le32(out + PS_AUTH_NONCE_BYTES + 4, (uint32_t)t->role_i);
}

void ps_auth_init_unpack(const uint8_t in[PS_AUTH_INIT_BYTES], ps_auth_transcript_t *t)
{
    memcpy(t->nonce_i, in, PS_AUTH_NONCE_BYTES);
    t->id_i = (int32_t)ps_get_le32(in + PS_AUTH_NONCE_BYTES);
    t->role_i = (int32_t)ps_get_le32(in + PS_AUTH_NONCE_BYTES + 4);
}

void ps_auth_challenge_pack(const ps_auth_transcript_t *t, const uint8_t proof[PS_AUTH_PROOF_BYTES],
                            uint8_t out[PS_AUTH_CHALLENGE_BYTES])
{
    memcpy(out, t->nonce_r, PS_AUTH_NONCE_BYTES);
    ps_put_le32(out + PS_AUTH_NONCE_BYTES, (uint32_t)t->id_r);
    ps_put_le32(out + PS_AUTH_NONCE_BYTES + 4, (uint32_t)t->role_r);
    memcpy(out + PS_AUTH_NONCE_BYTES + 8, proof, PS_AUTH_PROOF_BYTES);
}

void ps_auth_challenge_unpack(const uint8_t in[PS_AUTH_CHALLENGE_BYTES], ps_auth_transcript_t *t,
                              uint8_t proof[PS_AUTH_PROOF_BYTES])
{
    memcpy(t->nonce_r, in, PS_AUTH_NONCE_BYTES);
    t->id_r = (int32_t)ps_get_le32(in + PS_AUTH_NONCE_BYTES);
    t->role_r = (int32_t)ps_get_le32(in + PS_AUTH_NONCE_BYTES + 4);
    memcpy(proof, in + PS_AUTH_NONCE_BYTES + 8, PS_AUTH_PROOF_BYTES);
}

/* The bytes the proofs cover, in a fixed layout (little-endian ints). */
static size_t transcript_bytes(ps_auth_dir_t dir, const ps_auth_transcript_t *t, uint8_t *out,
                               size_t cap)
{
    const char *van = t->van != NULL ? t->van : "";
    size_t vlen = strnlen(van, 32);
    size_t need = sizeof(PROOF_LABEL) - 1 + 1 + 1 + vlen + 2 * PS_AUTH_NONCE_BYTES + 16;
    if (need > cap) {
        return 0;
    }
    size_t n = 0;
    memcpy(out + n, PROOF_LABEL, sizeof(PROOF_LABEL) - 1);
    n += sizeof(PROOF_LABEL) - 1;
    out[n++] = (uint8_t)dir;
    out[n++] = (uint8_t)vlen; /* length-prefixed: no ambiguity with what follows */
    memcpy(out + n, van, vlen);
    n += vlen;
    memcpy(out + n, t->nonce_i, PS_AUTH_NONCE_BYTES);
    n += PS_AUTH_NONCE_BYTES;
    memcpy(out + n, t->nonce_r, PS_AUTH_NONCE_BYTES);
    n += PS_AUTH_NONCE_BYTES;
    ps_put_le32(out + n, (uint32_t)t->id_i);
    ps_put_le32(out + n + 4, (uint32_t)t->role_i);
    ps_put_le32(out + n + 8, (uint32_t)t->id_r);
    ps_put_le32(out + n + 12, (uint32_t)t->role_r);
    n += 16;
    return n;
}

void ps_auth_prove(const ps_auth_key_t *key, ps_auth_dir_t dir, const ps_auth_transcript_t *t,
                   uint8_t proof[PS_AUTH_PROOF_BYTES])
{
    uint8_t msg[256];
    size_t n = transcript_bytes(dir, t, msg, sizeof(msg));
    crypto_auth_hmacsha256(proof, msg, n, key->bytes);
}

int ps_auth_verify(const ps_auth_key_t *key, ps_auth_dir_t dir, const ps_auth_transcript_t *t,
                   const uint8_t proof[PS_AUTH_PROOF_BYTES])
{
    uint8_t msg[256];
    size_t n = transcript_bytes(dir, t, msg, sizeof(msg));
    return crypto_auth_hmacsha256_verify(proof, msg, n, key->bytes) == 0;
}

void ps_auth_key_wipe(ps_auth_key_t *key)
{
    if (key != NULL) {
        sodium_memzero(key, sizeof(*key));
    }
}

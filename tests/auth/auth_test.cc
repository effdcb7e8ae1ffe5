// Unit tests of the job-secret module: key derivation, proofs bound to
// direction, nonces, ids, roles and van, and the secret file's rules.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "ps/base/config.h"
#include "ps/net/auth.h"

namespace {

ps_auth_key_t key_of(const char *s)
{
    ps_auth_key_t k;
    EXPECT_EQ(ps_auth_key_from_secret(s, strlen(s), &k), PS_OK);
    return k;
}

ps_auth_transcript_t sample()
{
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    t.van = "tcp";
    ps_auth_nonce(t.nonce_i);
    ps_auth_nonce(t.nonce_r);
    t.id_i = 9;
    t.role_i = 1;
    t.id_r = 1;
    t.role_r = 2;
    return t;
}

std::string tmpfile_with(const std::string &content, mode_t mode)
{
    const char *d = getenv("TEST_TMPDIR");
    std::string path = std::string(d ? d : "/tmp") + "/secret." + std::to_string(getpid()) + "." +
                       std::to_string(rand());
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, content.data(), content.size()), (ssize_t)content.size());
    close(fd);
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
}

TEST(Auth, ProofVerifiesWithTheSameKeyOnly)
{
    ps_auth_key_t k = key_of("s3cret"), other = key_of("s3cret!");
    ps_auth_transcript_t t = sample();
    uint8_t p[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(&k, PS_AUTH_INITIATOR, &t, p);
    EXPECT_TRUE(ps_auth_verify(&k, PS_AUTH_INITIATOR, &t, p));
    EXPECT_FALSE(ps_auth_verify(&other, PS_AUTH_INITIATOR, &t, p));
    p[5] ^= 1;
    EXPECT_FALSE(ps_auth_verify(&k, PS_AUTH_INITIATOR, &t, p));
}

TEST(Auth, ProofIsBoundToDirectionNoncesIdsRolesAndVan)
{
    ps_auth_key_t k = key_of("s3cret");
    ps_auth_transcript_t t = sample();
    uint8_t p[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(&k, PS_AUTH_RESPONDER, &t, p);
    ASSERT_TRUE(ps_auth_verify(&k, PS_AUTH_RESPONDER, &t, p));
    // Reflected as the other side's proof.
    EXPECT_FALSE(ps_auth_verify(&k, PS_AUTH_INITIATOR, &t, p));
    ps_auth_transcript_t u = t;
    u.nonce_i[0] ^= 1;
    EXPECT_FALSE(ps_auth_verify(&k, PS_AUTH_RESPONDER, &u, p));
    u = t;
    u.nonce_r[31] ^= 0x80;
    EXPECT_FALSE(ps_auth_verify(&k, PS_AUTH_RESPONDER, &u, p));
    u = t;
    u.id_i = 11;
    EXPECT_FALSE(ps_auth_verify(&k, PS_AUTH_RESPONDER, &u, p));
    u = t;
    u.role_r = 0;
    EXPECT_FALSE(ps_auth_verify(&k, PS_AUTH_RESPONDER, &u, p));
    u = t;
    u.van = "shm";
    EXPECT_FALSE(ps_auth_verify(&k, PS_AUTH_RESPONDER, &u, p));
}

TEST(Auth, InitAndChallengeRecordsHaveTheWireLayout)
{
    // The bytes the tcp and ucx vans have always sent (little-endian ints
    // after the nonce), and the ibverbs van's private data embeds.
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    for (int i = 0; i < PS_AUTH_NONCE_BYTES; i++) {
        t.nonce_i[i] = (uint8_t)i;
        t.nonce_r[i] = (uint8_t)(0x80 + i);
    }
    t.id_i = 0x01020304;
    t.role_i = -2;
    t.id_r = 1;
    t.role_r = 2;
    uint8_t proof[PS_AUTH_PROOF_BYTES];
    for (int i = 0; i < PS_AUTH_PROOF_BYTES; i++)
        proof[i] = (uint8_t)(0x40 + i);

    ASSERT_EQ(PS_AUTH_INIT_BYTES, 40);
    ASSERT_EQ(PS_AUTH_CHALLENGE_BYTES, 72);
    uint8_t init[PS_AUTH_INIT_BYTES];
    ps_auth_init_pack(&t, init);
    EXPECT_EQ(memcmp(init, t.nonce_i, PS_AUTH_NONCE_BYTES), 0);
    const uint8_t ints_i[8] = {4, 3, 2, 1, 0xfe, 0xff, 0xff, 0xff};
    EXPECT_EQ(memcmp(init + 32, ints_i, 8), 0);

    uint8_t ch[PS_AUTH_CHALLENGE_BYTES];
    ps_auth_challenge_pack(&t, proof, ch);
    EXPECT_EQ(memcmp(ch, t.nonce_r, PS_AUTH_NONCE_BYTES), 0);
    const uint8_t ints_r[8] = {1, 0, 0, 0, 2, 0, 0, 0};
    EXPECT_EQ(memcmp(ch + 32, ints_r, 8), 0);
    EXPECT_EQ(memcmp(ch + 40, proof, PS_AUTH_PROOF_BYTES), 0);

    // Unpacking gives back exactly those fields and leaves the rest.
    ps_auth_transcript_t u;
    memset(&u, 0x77, sizeof(u));
    u.van = "tcp";
    ps_auth_init_unpack(init, &u);
    EXPECT_EQ(memcmp(u.nonce_i, t.nonce_i, PS_AUTH_NONCE_BYTES), 0);
    EXPECT_EQ(u.id_i, t.id_i);
    EXPECT_EQ(u.role_i, t.role_i);
    EXPECT_EQ(u.id_r, 0x77777777);
    uint8_t got[PS_AUTH_PROOF_BYTES];
    ps_auth_challenge_unpack(ch, &u, got);
    EXPECT_EQ(memcmp(u.nonce_r, t.nonce_r, PS_AUTH_NONCE_BYTES), 0);
    EXPECT_EQ(u.id_r, t.id_r);
    EXPECT_EQ(u.role_r, t.role_r);
    EXPECT_EQ(memcmp(got, proof, PS_AUTH_PROOF_BYTES), 0);
    EXPECT_EQ(u.id_i, t.id_i);
}

TEST(Auth, NoncesDiffer)
{
    uint8_t a[PS_AUTH_NONCE_BYTES], b[PS_AUTH_NONCE_BYTES];
    ps_auth_nonce(a);
    ps_auth_nonce(b);
    EXPECT_NE(memcmp(a, b, sizeof(a)), 0);
}

TEST(Auth, KeyDependsOnEveryByte)
{
    ps_auth_key_t a = key_of("abc"), b = key_of("abd");
    EXPECT_NE(memcmp(a.bytes, b.bytes, sizeof(a.bytes)), 0);
    ps_auth_key_t k;
    EXPECT_EQ(ps_auth_key_from_secret("x", 0, &k), PS_ERR_INVALID_ARG);
}

TEST(Auth, FileStripsOneTrailingNewline)
{
    ps_auth_key_t direct = key_of("line secret");
    ps_auth_key_t k;
    std::string p = tmpfile_with("line secret\n", 0600);
    ASSERT_EQ(ps_auth_load_file(p.c_str(), &k), PS_OK);
    EXPECT_EQ(memcmp(k.bytes, direct.bytes, sizeof(k.bytes)), 0);
    unlink(p.c_str());
    p = tmpfile_with("line secret\r\n", 0400);
    ASSERT_EQ(ps_auth_load_file(p.c_str(), &k), PS_OK);
    EXPECT_EQ(memcmp(k.bytes, direct.bytes, sizeof(k.bytes)), 0);
    unlink(p.c_str());
    p = tmpfile_with("line secret\n\n", 0600); // only one newline goes
    ASSERT_EQ(ps_auth_load_file(p.c_str(), &k), PS_OK);
    EXPECT_NE(memcmp(k.bytes, direct.bytes, sizeof(k.bytes)), 0);
    unlink(p.c_str());
}

TEST(Auth, WorldReadableOrEmptyOrMissingFileIsRefused)
{
    ps_auth_key_t k;
    std::string p = tmpfile_with("s\n", 0644);
    EXPECT_EQ(ps_auth_load_file(p.c_str(), &k), PS_ERR_AUTH);
    unlink(p.c_str());
    p = tmpfile_with("\n", 0600);
    EXPECT_EQ(ps_auth_load_file(p.c_str(), &k), PS_ERR_CONFIG);
    unlink(p.c_str());
    EXPECT_EQ(ps_auth_load_file("/nonexistent/ps-secret", &k), PS_ERR_CONFIG);
}

TEST(Auth, LoadFromConfig)
{
    ps_auth_key_t k;
    int on = -1;
    ps_config_clear_overrides();
    unsetenv("PS_JOB_SECRET");
    unsetenv("PS_JOB_SECRET_FILE");
    ASSERT_EQ(ps_auth_load(&k, &on), PS_OK);
    EXPECT_EQ(on, 0);
    ASSERT_EQ(ps_config_set(PS_CFG_PS_JOB_SECRET, "abc"), PS_OK);
    ASSERT_EQ(ps_auth_load(&k, &on), PS_OK);
    EXPECT_EQ(on, 1);
    ps_auth_key_t want = key_of("abc");
    EXPECT_EQ(memcmp(k.bytes, want.bytes, sizeof(k.bytes)), 0);
    ps_config_clear_overrides();
    std::string p = tmpfile_with("from file\n", 0600);
    ASSERT_EQ(ps_config_set(PS_CFG_PS_JOB_SECRET_FILE, p.c_str()), PS_OK);
    ASSERT_EQ(ps_auth_load(&k, &on), PS_OK);
    want = key_of("from file");
    EXPECT_EQ(memcmp(k.bytes, want.bytes, sizeof(k.bytes)), 0);
    ps_config_clear_overrides();
    unlink(p.c_str());
}

} // namespace

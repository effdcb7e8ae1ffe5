/*
 * raw_client: a hostile or broken peer for the TCP van's listening ports.
 *
 *   raw_client HOST PORT CASE [ID [RECVER]]
 *
 * CASE:
 *   garbage    64 bytes that are not a frame
 *   truncated  a frame header promising 100 bytes of meta, 10 of them, then
 *              our side of the connection closed
 *   huge       a header announcing a 2^62-byte data segment
 *   hugemeta   a header announcing 4 GiB of meta
 *   segments   a header announcing 1000 data segments
 *   version    a well-formed header with frame version 99
 *   badmeta    a header, then meta bytes that do not decode
 *   hellover   a hello with hello version 7 claiming node ID
 *   claim      a valid hello claiming node ID (one that is running), then a
 *              push to RECVER (a server) as that node, as sum_node sends it:
 *              if it were accepted, the server's sums for that worker, and so
 *              the worker's check, would go wrong
 *   secret-as  the job-secret handshake (tcp_auth.c) with the secret in
 *              RC_SECRET, announcing node ID, then "claim" (against a job
 *              with a secret: a wrong secret is refused at the proof; the
 *              right one passes the proof and is refused at the hello,
 *              since node ID runs elsewhere)
 *   secret-empty the same announcing no id (an unassigned node), then
 *              claiming node ID in the hello
 *   secret-switch the same announcing node 1001, then claiming node ID in
 *              the hello (the proof binds the announced id)
 *   hello-hex  connects nowhere: prints a valid hello as node ID in hex
 *
 * Then reads until the peer closes the connection. Exits 0 when it did
 * within 10 s (prints how long it took), 2 when it did not, 1 when the
 * connection could not be made.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ps/base/endian.h"
#include "ps/net/auth.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"

#define CLOSE_DEADLINE_MS 10000

/* A fixed header by hand, so that any field can be wrong. */
static size_t raw_header(uint8_t *b, uint16_t version, uint32_t meta_len, uint16_t num_data,
                         const uint64_t *lens)
{
    memcpy(b, "PSF1", 4);
    ps_put_le16(b + 4, version);
    ps_put_le16(b + 6, 0);
    ps_put_le32(b + 8, meta_len);
    ps_put_le16(b + 12, num_data);
    ps_put_le16(b + 14, 0);
    for (uint16_t i = 0; i < num_data && lens != NULL; i++)
        ps_put_le64(b + 16 + 8 * i, lens[i]);
    return 16 + 8 * (size_t)(lens != NULL ? num_data : 0);
}

/* A frame with this meta and data segments, encoded as a van would. */
static size_t frame(uint8_t *b, size_t cap, const ps_meta_t *meta, const uint64_t *lens,
                    uint16_t num_data)
{
    size_t hlen = ps_frame_header_len(num_data);
    size_t mlen = 0;
    if (ps_meta_encode(meta, b + hlen, cap - hlen, &mlen) != PS_OK) {
        fprintf(stderr, "raw_client: cannot encode the meta\n");
        exit(1);
    }
    ps_frame_limits_t lim = ps_frame_limits_default();
    size_t w;
    if (ps_frame_header_build(0, (uint32_t)mlen, lens, num_data, &lim, b, hlen, &w) != PS_OK) {
        fprintf(stderr, "raw_client: cannot build the header\n");
        exit(1);
    }
    return hlen + mlen;
}

static void hello_meta(ps_meta_t *m, int id, uint8_t version)
{
    ps_meta_init(m);
    m->sender = id;
    uint8_t *v = m->van_data;
    memcpy(v, "PSTCPH", 6);
    v[6] = version;
    v[7] = 0; /* stream */
    v[8] = 1; /* streams */
    v[9] = 0;
    uint64_t nonce = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    for (int i = 0; i < 8; i++)
        v[10 + i] = (uint8_t)(nonce >> (8 * i));
    m->van_data_len = 18;
}

static int send_all(int fd, const uint8_t *b, size_t len);
#define send_all_raw send_all

/* A job-secret handshake frame as tcp_auth.c sends it. */
static size_t auth_frame(uint8_t *b, size_t cap, uint8_t type, const uint8_t *body, size_t len)
{
    ps_meta_t m;
    ps_meta_init(&m);
    memcpy(m.van_data, "PSTCPA", 6);
    m.van_data[6] = 1;
    m.van_data[7] = type;
    m.van_data_len = 8;
    m.body = body;
    m.body_len = len;
    return frame(b, cap, &m, NULL, 0);
}

static void put_i32le(uint8_t *p, int32_t v)
{
    ps_put_le32(p, (uint32_t)v);
}

static int recv_exact(int fd, uint8_t *b, size_t len)
{
    while (len > 0) {
        ssize_t n = recv(fd, b, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Runs the opener's side of the handshake announcing `announce`; 0 when
 * the peer's challenge came (its proof is not checked: we are the
 * stranger), -1 when the peer closed or refused first. */
static int handshake(int fd, const char *secret, int announce)
{
    ps_auth_key_t key;
    if (ps_auth_key_from_secret(secret, strlen(secret), &key) != PS_OK)
        return -1;
    ps_auth_transcript_t t;
    memset(&t, 0, sizeof(t));
    t.van = "tcp";
    t.id_i = announce;
    t.role_i = PS_ROLE_WORKER;
    ps_auth_nonce(t.nonce_i);
    uint8_t body[PS_AUTH_NONCE_BYTES + 8 + PS_AUTH_PROOF_BYTES];
    memcpy(body, t.nonce_i, PS_AUTH_NONCE_BYTES);
    put_i32le(body + PS_AUTH_NONCE_BYTES, t.id_i);
    put_i32le(body + PS_AUTH_NONCE_BYTES + 4, t.role_i);
    static uint8_t b[4096];
    size_t n = auth_frame(b, sizeof(b), 'I', body, PS_AUTH_NONCE_BYTES + 8);
    if (send_all_raw(fd, b, n) != 0)
        return -1;
    uint8_t h[PS_FRAME_FIXED_LEN];
    if (recv_exact(fd, h, sizeof(h)) != 0)
        return -1;
    uint32_t mlen = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 |
                    (uint32_t)h[11] << 24;
    if (mlen > sizeof(b) || recv_exact(fd, b, mlen) != 0)
        return -1;
    ps_meta_t m;
    if (ps_meta_decode(b, mlen, &m, NULL, 0) != PS_OK || m.van_data_len != 8 ||
        m.van_data[7] != 'C' || m.body_len != sizeof(body))
        return -1;
    memcpy(t.nonce_r, m.body, PS_AUTH_NONCE_BYTES);
    memcpy(&t.id_r, m.body + PS_AUTH_NONCE_BYTES, 4);
    memcpy(&t.role_r, m.body + PS_AUTH_NONCE_BYTES + 4, 4);
    uint8_t proof[PS_AUTH_PROOF_BYTES];
    ps_auth_prove(&key, PS_AUTH_INITIATOR, &t, proof);
    n = auth_frame(b, sizeof(b), 'P', proof, sizeof(proof));
    return send_all_raw(fd, b, n);
}

static int send_all(int fd, const uint8_t *b, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1; /* the peer may close early: that is fine */
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: raw_client HOST PORT CASE [ID [RECVER]]\n");
        return 1;
    }
    const char *what = argv[3];
    int id = argc > 4 ? atoi(argv[4]) : 9;
    int recver = argc > 5 ? atoi(argv[5]) : 8;
    if (strcmp(what, "hello-hex") == 0) {
        /* No connection: a valid hello as node ID, in hex on stdout (for
         * drivers that open many connections themselves). */
        static uint8_t hb[1024];
        ps_meta_t hm;
        hello_meta(&hm, id, 1);
        size_t hn = frame(hb, sizeof(hb), &hm, NULL, 0);
        for (size_t i = 0; i < hn; i++)
            printf("%02x", hb[i]);
        printf("\n");
        return 0;
    }
    struct addrinfo hints, *ai;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
        fprintf(stderr, "raw_client: cannot resolve %s\n", argv[1]);
        return 1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        fprintf(stderr, "raw_client: cannot connect to %s:%s: %s\n", argv[1], argv[2],
                strerror(errno));
        return 1;
    }
    freeaddrinfo(ai);

    static uint8_t b[1 << 16];
    size_t n = 0;
    int shut = 0;
    ps_meta_t m;
    if (strcmp(what, "garbage") == 0) {
        for (int i = 0; i < 64; i++)
            b[i] = (uint8_t)(i * 37 + 11);
        n = 64;
    } else if (strcmp(what, "truncated") == 0) {
        n = raw_header(b, PS_FRAME_VERSION, 100, 0, NULL);
        memset(b + n, 0x08, 10);
        n += 10;
        shut = 1;
    } else if (strcmp(what, "huge") == 0) {
        uint64_t len = 1ull << 62;
        n = raw_header(b, PS_FRAME_VERSION, 4, 1, &len);
    } else if (strcmp(what, "hugemeta") == 0) {
        n = raw_header(b, PS_FRAME_VERSION, 0xffffffffu, 0, NULL);
    } else if (strcmp(what, "segments") == 0) {
        n = raw_header(b, PS_FRAME_VERSION, 4, 1000, NULL);
    } else if (strcmp(what, "version") == 0) {
        n = raw_header(b, 99, 4, 0, NULL);
        memset(b + n, 0, 4);
        n += 4;
    } else if (strcmp(what, "badmeta") == 0) {
        n = raw_header(b, PS_FRAME_VERSION, 32, 0, NULL);
        memset(b + n, 0xff, 32);
        n += 32;
    } else if (strcmp(what, "hellover") == 0) {
        hello_meta(&m, id, 7);
        n = frame(b, sizeof(b), &m, NULL, 0);
    } else if (strcmp(what, "claim") == 0 || strncmp(what, "secret-", 7) == 0) {
        if (strcmp(what, "claim") != 0) {
            const char *secret = getenv("RC_SECRET");
            int announce = strcmp(what, "secret-as") == 0      ? id
                           : strcmp(what, "secret-switch") == 0 ? 1001
                                                                : PS_NODE_EMPTY;
            if (handshake(fd, secret != NULL && secret[0] ? secret : "?", announce) != 0) {
                printf("raw_client: %s -> refused during the handshake\n", what);
                /* still wait for the close below */
            }
        }
        hello_meta(&m, id, 1);
        n = frame(b, sizeof(b), &m, NULL, 0);
        /* A push as sum_node's worker sends it (1024 u32 of 1s). */
        ps_meta_init(&m);
        m.sender = id;
        m.recver = recver;
        m.app_id = 0;
        m.customer_id = 0;
        m.timestamp = 1000;
        m.head = 0;
        m.request = true;
        m.push = true;
        m.num_data_types = 1;
        m.data_types[0] = PS_DATA_UINT32;
        m.data_size = 4096;
        uint64_t len = 4096;
        size_t f = frame(b + n, sizeof(b) - n, &m, &len, 1);
        n += f;
        for (size_t i = 0; i < 1024; i++)
            ps_put_le32(b + n + 4 * i, 1);
        n += 4096;
    } else {
        fprintf(stderr, "raw_client: unknown case %s\n", what);
        return 1;
    }
    long t0 = now_ms();
    (void)send_all(fd, b, n);
    if (shut)
        shutdown(fd, SHUT_WR);
    /* Wait for the peer to close (EOF or reset). */
    for (;;) {
        long left = CLOSE_DEADLINE_MS - (now_ms() - t0);
        if (left <= 0) {
            printf("raw_client: %s -> still open after %d ms\n", what, CLOSE_DEADLINE_MS);
            return 2;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t got = recv(fd, b, sizeof(b), 0);
        if (got > 0)
            continue; /* a REFUSED frame, say: keep reading */
        if (got < 0 && errno == EINTR)
            continue;
        printf("raw_client: %s -> closed by the peer after %ld ms\n", what, now_ms() - t0);
        close(fd);
        return 0;
    }
}

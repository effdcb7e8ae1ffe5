/*
 * tcp_testing.h: a connection and its van on the heap, with no socket and
 * no progress thread, so that only the handshake and the hello reader run.
 */
#include "ps/net/tcp/tcp_testing.h"

#include <stdlib.h>
#include <string.h>

#include "ps/net/tcp/tcp_internal.h"

struct ps__tcp_test_conn {
    ps__tcp_van_t van;
    ps__tcp_conn_t conn;
};

ps__tcp_test_conn_t *ps__tcp_test_conn_new(int outgoing, int peer_id, const uint8_t *secret,
                                           int auth)
{
    ps__tcp_test_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->van.limits = ps_frame_limits_default();
    c->van.base.my_id = 8;
    c->van.base.params.role = PS_ROLE_SERVER;
    if (secret != NULL) {
        c->van.base.params.auth_enabled = 1;
        memcpy(c->van.base.params.auth_key.bytes, secret, PS_AUTH_KEY_BYTES);
    }
    c->conn.van = &c->van;
    c->conn.fd = -1;
    c->conn.outgoing = outgoing;
    c->conn.peer_id = peer_id;
    ps_van_base_hs_init(&c->van.base, &c->conn.hs, "tcp", outgoing);
    c->conn.hs.state = auth;
    c->conn.hs.t.id_i = outgoing ? 8 : PS_NODE_EMPTY;
    strcpy(c->conn.addr_str, "fuzz");
    pthread_mutex_init(&c->conn.send_lock, NULL);
    return c;
}

void ps__tcp_test_conn_free(ps__tcp_test_conn_t *c)
{
    if (c != NULL) {
        pthread_mutex_destroy(&c->conn.send_lock);
        free(c);
    }
}

ps_status_t ps__tcp_test_conn_rx(ps__tcp_test_conn_t *c, const ps_meta_t *meta, uint16_t num_data,
                                 int *consumed_p, int *hello_p, uint64_t *nonce_p, int *stream_p,
                                 int *nstreams_p)
{
    c->conn.hdr.num_data = num_data;
    *hello_p = 0;
    ps_status_t st = ps__tcp_auth_rx(&c->conn, meta, consumed_p);
    if (st != PS_OK || *consumed_p) {
        return st;
    }
    *hello_p = ps__tcp_parse_hello(meta, nonce_p, stream_p, nstreams_p);
    return PS_OK;
}

int ps__tcp_test_conn_auth(const ps__tcp_test_conn_t *c)
{
    return c->conn.hs.state;
}

int ps__tcp_test_auth_done(void)
{
    return PS_VAN_HS_DONE;
}

int ps__tcp_test_auth_wait_init(void)
{
    return PS_VAN_HS_WAIT_INIT;
}

int ps__tcp_test_auth_states(void)
{
    return PS_VAN_HS_FAILED + 1;
}

int ps__tcp_test_looks_like_hello(const ps_meta_t *meta)
{
    return ps__tcp_looks_like_hello(meta);
}

/*
 * Test hooks of the TCP van: one connection, without a socket, fed decoded
 * frames the way the receive path feeds them (the job-secret handshake,
 * then the hello), so that a fuzz target reaches exactly the code a peer
 * reaches before and after the handshake.
 */
#ifndef PS_NET_TCP_TCP_TESTING_H_
#define PS_NET_TCP_TCP_TESTING_H_

#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps__tcp_test_conn ps__tcp_test_conn_t;

/* A connection we opened (outgoing) or accepted, to node peer_id, in a van
 * with the job secret `secret` (32 bytes) or none (NULL), its handshake in
 * state `auth` (ps_van_hs_state_t; an opener that sent INIT waits for
 * the challenge). Its writes fail (no socket). NULL: out of memory. */
ps__tcp_test_conn_t *ps__tcp_test_conn_new(int outgoing, int peer_id, const uint8_t *secret,
                                           int auth);
void ps__tcp_test_conn_free(ps__tcp_test_conn_t *c);

/* Hands the meta of a frame with num_data segments to the handshake
 * (ps__tcp_auth_rx), then, when it passes it on, to the hello reader; a
 * status other than PS_OK closes the connection in the van. *consumed_p:
 * the handshake took the frame; *hello_p: it is a hello (then *nonce_p,
 * *stream_p, *nstreams_p are what it announces). */
ps_status_t ps__tcp_test_conn_rx(ps__tcp_test_conn_t *c, const ps_meta_t *meta, uint16_t num_data,
                                 int *consumed_p, int *hello_p, uint64_t *nonce_p, int *stream_p,
                                 int *nstreams_p);

/* The connection's handshake state (ps_van_hs_state_t). */
int ps__tcp_test_conn_auth(const ps__tcp_test_conn_t *c);
/* The state in which the handshake is over (PS_VAN_HS_DONE), and the
 * one an acceptor starts in (PS_VAN_HS_WAIT_INIT); the number of
 * states. */
int ps__tcp_test_auth_done(void);
int ps__tcp_test_auth_wait_init(void);
int ps__tcp_test_auth_states(void);

/* Whether send() refuses a message with this meta as a forged hello or
 * handshake frame (ps__tcp_looks_like_hello). */
int ps__tcp_test_looks_like_hello(const ps_meta_t *meta);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_TCP_TCP_TESTING_H_ */

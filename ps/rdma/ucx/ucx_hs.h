/*
 * The UCX van's handshake records: what a peer sends before it is known
 * (ucx_hs.c says the layout). Pure functions, also for the fuzz target.
 */
#ifndef PS_RDMA_UCX_UCX_HS_H_
#define PS_RDMA_UCX_UCX_HS_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/net/codec/message.h"

/* HELLO/ACK header: "PSUX" ver type 0 0 | id i32 | cookie u32 | nonce u64 |
 * seq0 u64. */
#define PS__UCX_HS_LEN 32
#define PS__UCX_HS_HELLO 1
#define PS__UCX_HS_ACK 2
/* Job-secret handshake steps (ucx_auth.c), before HELLO. */
#define PS__UCX_HS_AUTH_INIT 3
#define PS__UCX_HS_AUTH_CHALLENGE 4
#define PS__UCX_HS_AUTH_PROOF 5
#define PS__UCX_HS_AUTH_REFUSED 6

/* Largest worker address a HELLO or ACK carries. */
#define PS__UCX_MAX_ADDR 4096
/* A record on the handshake socket: body length u32, then the body: a
 * header above and its payload (HELLO/ACK: the addresses, below; a
 * job-secret step: its bytes). */
#define PS__UCX_REC_PREFIX 4
#define PS__UCX_ADDRS_HDR 4
#define PS__UCX_REC_MAX \
    (PS__UCX_REC_PREFIX + PS__UCX_HS_LEN + PS__UCX_ADDRS_HDR + 2 * PS__UCX_MAX_ADDR)

/* Writes a record of PS__UCX_HS_LEN bytes to out. */
void ps__ucx_hs_pack(uint8_t *out, int type, int node_id, uint32_t cookie, uint64_t nonce,
                     uint64_t seq0);
/* Reads the record at in (len bytes): 1 when it is one of this version
 * and of a known type, 0 if not (nothing written). */
int ps__ucx_hs_parse(const uint8_t *in, size_t len, int *type_p, int *node_id_p, uint32_t *cookie_p,
                     uint64_t *nonce_p, uint64_t *seq0_p);
/* Whether the first `have` bytes at in start a whole record: 1 (its
 * length, prefix included, in *total_p), 0 not yet (*total_p set once the
 * prefix is there), -1 never (a length no record has). */
int ps__ucx_rec_complete(const uint8_t *in, size_t have, size_t *total_p);
/* Writes the prefix and header of a record with `payload_len` bytes of
 * payload to out (PS__UCX_REC_PREFIX + PS__UCX_HS_LEN bytes). */
void ps__ucx_rec_pack(uint8_t *out, size_t payload_len, int type, int node_id, uint32_t cookie,
                      uint64_t nonce, uint64_t seq0);
/* The payload of HELLO / ACK: ctl_len u16 | data_len u16 | the control
 * worker's address | the data worker's (none: 0). Returns the bytes
 * written to out, 0 when an address is empty (ctl) or too long. */
size_t ps__ucx_addrs_pack(uint8_t *out, size_t cap, const void *ctl, size_t ctl_len,
                          const void *data, size_t data_len);
/* Reads such a payload: 1 with both addresses pointing into `in`, 0 when
 * it is malformed (nothing written). */
int ps__ucx_addrs_parse(const uint8_t *in, size_t len, const uint8_t **ctl_p, size_t *ctl_len_p,
                        const uint8_t **data_p, size_t *data_len_p);
/* The meta that re-announces node my_id. */
void ps__ucx_hello_meta(ps_meta_t *meta, int my_id);
/* 1 when meta is such a re-announcement (of this version, no control). */
int ps__ucx_is_hello(const ps_meta_t *meta);
/* The meta that says goodbye: node my_id closes this connection (sent in
 * line with the data, after everything before it). */
void ps__ucx_bye_meta(ps_meta_t *meta, int my_id);
int ps__ucx_is_bye(const ps_meta_t *meta);
/* The tag of the van's hello and goodbye, which send() refuses
 * from a caller (ps_van_base_set_own_tag). */
#define PS__UCX_HELLO_TAG "PSUCXH"
/* 1 when meta's van_data carries PS__UCX_HELLO_TAG (any version). */
int ps__ucx_looks_like_hello(const ps_meta_t *meta);

#endif /* PS_RDMA_UCX_UCX_HS_H_ */

/*
 * The UCX van's handshake records: what a peer sends before it is known
 * (ucx_hs.c says the layout). Pure functions, also for the fuzz target.
 */
#ifndef PS_RDMA_UCX_UCX_HS_H_
#define PS_RDMA_UCX_UCX_HS_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/net/codec/message.h"

/* HELLO/ACK record: "PSUX" ver type 0 0 | id i32 | cookie u32 | nonce u64 |
 * seq0 u64. */
#define PS__UCX_HS_LEN 32
#define PS__UCX_HS_HELLO 1
#define PS__UCX_HS_ACK 2
/* Job-secret handshake steps (ucx_auth.c), before HELLO. */
#define PS__UCX_HS_AUTH_INIT 3
#define PS__UCX_HS_AUTH_CHALLENGE 4
#define PS__UCX_HS_AUTH_PROOF 5
#define PS__UCX_HS_AUTH_REFUSED 6
#define PS__UCX_AUTH_MAX 80 /* largest payload of those */

/* Writes a record of PS__UCX_HS_LEN bytes to out. */
void ps__ucx_hs_pack(uint8_t *out, int type, int node_id, uint32_t cookie, uint64_t nonce,
                     uint64_t seq0);
/* Reads the record at in (len bytes): 1 when it is one of this version
 * and of a known type, 0 if not (nothing written). */
int ps__ucx_hs_parse(const uint8_t *in, size_t len, int *type_p, int *node_id_p, uint32_t *cookie_p,
                     uint64_t *nonce_p, uint64_t *seq0_p);
/* The meta that re-announces node my_id. */
void ps__ucx_hello_meta(ps_meta_t *meta, int my_id);
/* 1 when meta is such a re-announcement (of this version, no control). */
int ps__ucx_is_hello(const ps_meta_t *meta);
/* The tag of the van's hello (the re-announcement), which send() refuses
 * from a caller (ps_van_base_set_own_tag). */
#define PS__UCX_HELLO_TAG "PSUCXH"
/* 1 when meta's van_data carries PS__UCX_HELLO_TAG (any version). */
int ps__ucx_looks_like_hello(const ps_meta_t *meta);

#endif /* PS_RDMA_UCX_UCX_HS_H_ */

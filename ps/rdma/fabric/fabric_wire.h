/*
 * The libfabric van's own wire formats: the header of every META message,
 * the pull descriptor in a request's van_data, the endpoint blob in the
 * node table, tags. What a peer sends is checked here before the van
 * trusts it (fabric_wire.c).
 */
#ifndef PS_RDMA_FABRIC_FABRIC_WIRE_H_
#define PS_RDMA_FABRIC_FABRIC_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#define PS__FAB_MAGIC 0x42465350u /* "PSFB" */
#define PS__FAB_VERSION 2
#define PS__FAB_RDV_MAGIC 0x56445246u /* "FRDV" */
#define PS__FAB_EP_MAGIC 0x45465350u  /* "PSFE" */

enum {
    PS__FAB_F_INLINE = 1u << 0, /* data bytes follow the meta */
    PS__FAB_F_DATA = 1u << 1,   /* a DATA message follows */
    PS__FAB_F_EXT = 1u << 2,    /* frame + meta follow as an EXT message */
    PS__FAB_F_RMA = 1u << 3,    /* segment rma_seg was written by RMA */
    PS__FAB_F_RDV = 1u << 4,    /* answers the pending pull rdv_slot */
    PS__FAB_F_LANE = 1u << 5,   /* a lane message follows (ps/net/codec/lane.h) */
};

enum {
    PS__FAB_KIND_EXT = 2,
    PS__FAB_KIND_DATA = 3,
};

/* Little-endian hosts only (the header is copied as is). */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    int32_t sender;
    uint32_t seq;
    uint32_t epoch;
    uint32_t ext_len;  /* EXT: frame + meta bytes in the EXT message */
    uint32_t rdv_slot; /* RDV */
    uint32_t rma_seg;  /* RMA */
} ps__fab_hdr_t;

/* In a pull request's van_data: where the response's values may go. */
typedef struct {
    uint32_t magic;
    uint32_t slot;
    uint64_t addr; /* as the target's fi_write wants it (virtual or offset) */
    uint64_t key;
    uint64_t len;
} ps__fab_rdv_desc_t;

/* node->endpoint_name: this header, then the provider's address. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t addr_len;
    uint32_t pid;
    uint32_t prov_hash;
    uint64_t host_id;
    uint64_t pid_ns; /* its PID namespace (0: unknown): whether `pid` means
                      * anything here */
} ps__fab_ep_blob_t;

/* 1 when hdr (the first bytes of a META message) is of this protocol and
 * version and names a sender a node id can be. */
int ps__fab_hdr_valid(const ps__fab_hdr_t *hdr);

/* 1 when a lane message behind hdr (len bytes after it) has a lane
 * header, fits the lane and carries no other flag. */
int ps__fab_lane_valid(const ps__fab_hdr_t *hdr, size_t len);

/* 1 when an EXT message announced by hdr has a size the receiver takes:
 * not empty, at most a frame header and max_meta meta bytes. */
int ps__fab_ext_len_valid(const ps__fab_hdr_t *hdr, uint64_t max_meta);

/* Reads the blob at the front of a peer's endpoint name (len bytes) into
 * *b_p: 1 when it is one of this protocol and version whose address lies
 * inside the name (it follows the blob), 0 if not. */
int ps__fab_blob_read(const uint8_t *name, size_t len, ps__fab_ep_blob_t *b_p);

uint64_t ps__fab_tag(int kind, uint32_t epoch, int sender, uint32_t seq);
uint32_t ps__fab_hash(const char *s);
uint64_t ps__fab_host_id(void);
uint64_t ps__fab_pid_ns(void);

#endif /* PS_RDMA_FABRIC_FABRIC_WIRE_H_ */

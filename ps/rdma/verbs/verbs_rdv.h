/*
 * The rendezvous of the ibverbs van: how a message too big for a posted
 * receive gets a buffer at the receiver to be RDMA-written into.
 *
 * Upstream's protocol, kept: the sender asks (RDV_START: key, direction,
 * bytes of meta and data), the receiver allocates registered memory and
 * answers (RDV_GRANT: addresses, rkeys, a slot id), the sender RDMA-writes
 * the data, then the meta with immediate = slot. Later messages of the same
 * (key, direction) to the same peer reuse a grant without a round trip.
 *
 * Upstream's failure, fixed: it reused the receiver's buffer for the next
 * message even while the application still held the previous one (the
 * values were handed over zero-copy), and the buffers were never bounded.
 * Here a grant serves exactly one message. When the application lets go
 * of that message's data, the receiver re-grants the same buffer to the
 * sender (RDV_GRANT with PS__VB_RDV_REGRANT), which caches it for the next
 * message of that (key, direction). A sender that finds no cached grant
 * (it was used and not yet given back) starts a new rendezvous: the new
 * buffer becomes the key's current one and the old is freed, not
 * re-granted, when it is released. A grant the sender holds is always
 * honoured. The receiver keeps at most `max_cached_bytes` in re-grantable
 * buffers; beyond that, grants are one-shot. The sender's cache is bounded
 * too, giving back (RDV_DROP) what it evicts.
 *
 * Steering (zero copy into the application's buffer): a START for a
 * request says whom it is for (app, customer, is_tensor, each segment's
 * length), so that the receiver can ask recv_buffer where a segment goes
 * before it is written. When the application names a buffer (a server's
 * registered receive buffer), the grant carries it as a second region
 * (PS__VB_RDV_STEER): the sender writes that segment there and the rest
 * into the data region, and says so in the header (PS__VB_HDR_STEER). The
 * grant holds the buffer's reference and registration; a re-grant offers
 * the region again only while recv_buffer still names it, and the
 * receiver checks again when the message lands.
 *
 * Two objects, no verbs calls, unit-tested with fake buffers:
 *   ps__vb_gcache_t  sender side, one per connection (the caller locks);
 *   ps__vb_grants_t  receiver side, one per van, thread-safe, reference
 *                    counted so that data the application still holds after
 *                    the van closed releases safely.
 */
#ifndef PS_RDMA_VERBS_VERBS_RDV_H_
#define PS_RDMA_VERBS_VERBS_RDV_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/rdma/verbs/verbs_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Direction bits of a grant family (ps__vb_ctrl_t.dir). */
enum {
    PS__VB_DIR_REQUEST = 1u << 0,
    PS__VB_DIR_PUSH = 1u << 1,
};

/* What a sender needs to write into a grant. */
typedef struct {
    uint32_t slot;
    uint32_t meta_cap;
    uint64_t data_cap;
    uint64_t meta_addr;
    uint64_t data_addr;
    uint32_t meta_rkey;
    uint32_t data_rkey;
    /* steer_len > 0: segment steer_seg of a request of (app_id,
     * customer_id) may go to steer_addr instead of the data region. */
    uint8_t steer_seg;
    int32_t app_id, customer_id;
    uint64_t steer_addr, steer_len;
    uint32_t steer_rkey;
} ps__vb_grant_t;

/* Fills a grant from a RDV_GRANT message. */
void ps__vb_grant_from_ctrl(const ps__vb_ctrl_t *c, ps__vb_grant_t *g_p);

/* What one message needs of a grant. */
typedef struct {
    uint32_t meta_len;
    uint64_t data_len;        /* every in-buffer segment */
    int32_t app_id, customer_id;
    uint32_t num_data;
    const uint64_t *seg_len;  /* per segment; NULL: nothing may be steered */
} ps__vb_need_t;

typedef enum {
    PS__VB_FIT_NO = 0,
    PS__VB_FIT_DATA = 1,  /* every segment in the data region */
    PS__VB_FIT_STEER = 2, /* segment steer_seg in the steered region */
} ps__vb_fit_t;

/* How grant g serves message n: steered when its region is for n's app and
 * customer and holds n's segment, and the data region holds the rest. */
ps__vb_fit_t ps__vb_grant_fit(const ps__vb_grant_t *g, const ps__vb_need_t *n);

/* ---- sender side ---- */

typedef struct ps__vb_gentry ps__vb_gentry_t;

#define PS__VB_GCACHE_BUCKETS 256

typedef struct {
    size_t max_entries;
    size_t entries;
    ps__vb_gentry_t *buckets[PS__VB_GCACHE_BUCKETS];
    ps__vb_gentry_t *oldest, *newest; /* age list, for eviction */
} ps__vb_gcache_t;

typedef enum {
    PS__VB_GC_MISS = 0,      /* nothing cached: start a rendezvous */
    PS__VB_GC_HIT = 1,       /* *grant_p fits: write into it */
    PS__VB_GC_TOO_SMALL = 2, /* *grant_p is too small: start one replacing it */
} ps__vb_gc_result_t;

void ps__vb_gcache_init(ps__vb_gcache_t *c, size_t max_entries);
/* Frees the entries (the receiver frees its side when the connection goes). */
void ps__vb_gcache_destroy(ps__vb_gcache_t *c);
/* Takes the cached grant of (key, dir) out of the cache: HIT when it
 * serves `need` (ps__vb_grant_fit), TOO_SMALL otherwise, MISS when there
 * is none. */
ps__vb_gc_result_t ps__vb_gcache_take(ps__vb_gcache_t *c, uint64_t key, uint8_t dir,
                                      const ps__vb_need_t *need, ps__vb_grant_t *grant_p);
/* Caches a re-grant. Returns 1 and fills *evicted_p with a grant the
 * caller must give back (RDV_DROP): the one it replaced, or the oldest
 * when the cache was full. */
int ps__vb_gcache_put(ps__vb_gcache_t *c, uint64_t key, uint8_t dir, const ps__vb_grant_t *grant,
                      ps__vb_grant_t *evicted_p);
size_t ps__vb_gcache_size(const ps__vb_gcache_t *c);

/* ---- receiver side ---- */

typedef struct ps__vb_grants ps__vb_grants_t;
typedef struct ps__vb_grant_rec ps__vb_grant_rec_t;

typedef struct {
    /* Registered memory of at least `len` bytes as a slice (one reference)
     * and the rkey a peer writes it with. */
    ps_status_t (*alloc)(void *ctx, size_t len, ps_slice_t *slice_p, uint32_t *rkey_p);
    /* A re-grant is queued (wake whoever sends them). May be NULL. */
    void (*notify)(void *ctx);
    void *ctx;
    /* A grant lets go of a steered region's handle (ps__vb_steer_t),
     * before its reference on the buffer. May be NULL. */
    void (*steer_release)(void *ctx, void *handle);
} ps__vb_grants_ops_t;

/* The application's buffer for one segment of a started message. */
typedef struct {
    unsigned seg;
    ps_slice_t dest;  /* one reference; dest.len bytes are granted */
    uint32_t rkey;
    void *handle;     /* its registration, for ops.steer_release */
} ps__vb_steer_t;

typedef struct {
    uint32_t max_slots;        /* grants alive at once (BYTEPS_ADDRESS_POOL_SIZE) */
    uint64_t max_cached_bytes; /* re-grantable bytes kept; 0: grants are one-shot */
    uint32_t max_meta_len;     /* a start asking for more is refused */
    uint64_t max_data_len;
} ps__vb_grants_params_t;

ps_status_t ps__vb_grants_create(const ps__vb_grants_params_t *params,
                                 const ps__vb_grants_ops_t *ops, ps__vb_grants_t **g_p);
/* The van closes: every grant not held by the application is freed now,
 * the rest when released. The object goes with the last of them. */
void ps__vb_grants_close(ps__vb_grants_t *g);

/*
 * A RDV_START from connection `owner` (a serial number, never reused).
 * Fills *reply_p with the RDV_GRANT to send back. `steer` (NULL: none)
 * names the application's buffer for one segment of a steerable start
 * (PS__VB_RDV_STEER): the data region is then that segment shorter, and
 * on success the grant owns steer's reference and handle.
 *   PS_ERR_TOO_LARGE    the start asks for more than the limits.
 *   PS_ERR_NO_RESOURCE  no slot, or no memory (from alloc).
 *   PS_ERR_PROTOCOL     it replaces a slot the owner does not hold.
 *   PS_ERR_INVALID_ARG  steer does not fit the start.
 * On error nothing is allocated and the caller keeps steer's; the caller
 * refuses the start.
 */
ps_status_t ps__vb_grants_start(ps__vb_grants_t *g, uint64_t owner, const ps__vb_ctrl_t *start,
                                const ps__vb_steer_t *steer, ps__vb_ctrl_t *reply_p);

/*
 * The meta of a message landed in grant `slot` (imm). Returns the grant,
 * now in use by that message, with its meta region (*meta_p: a view, valid
 * until ps__vb_grants_data or ps__vb_grants_done) and data capacity; NULL
 * (PS_ERR_PROTOCOL) if the slot is not a grant this owner holds.
 */
ps__vb_grant_rec_t *ps__vb_grants_filled(ps__vb_grants_t *g, uint64_t owner, uint32_t slot,
                                         const uint8_t **meta_p, uint32_t *meta_cap_p,
                                         uint64_t *data_cap_p);
/* 1 with the segment and the region when a filled grant is steered, else
 * 0. The region stays valid until the grant returns (its data slice is
 * released, or ps__vb_grants_done). */
int ps__vb_grants_steered(const ps__vb_grant_rec_t *rec, unsigned *seg_p,
                          const ps_slice_t **dest_p);
/* The data region of a filled grant as a slice (one reference) whose
 * release, once the message's data is let go of, returns the grant (to be
 * re-granted or freed). Ends the caller's use of the meta region. */
ps_status_t ps__vb_grants_data(ps__vb_grants_t *g, ps__vb_grant_rec_t *rec, ps_slice_t *slice_p);
/* Ends a filled grant's use without handing its data out (no data, or the
 * message was dropped). */
void ps__vb_grants_done(ps__vb_grants_t *g, ps__vb_grant_rec_t *rec);

/* A RDV_DROP: the owner gives a grant back unused. PS_ERR_PROTOCOL if the
 * owner does not hold it. */
ps_status_t ps__vb_grants_drop(ps__vb_grants_t *g, uint64_t owner, uint32_t slot);

/* The owner's connection is gone: its grants are freed (those in use by
 * the application when released) and its queued re-grants forgotten. */
void ps__vb_grants_owner_gone(ps__vb_grants_t *g, uint64_t owner);

/* Takes up to `cap` queued re-grants: owners[i] gets the connection,
 * msgs[i] the RDV_GRANT to send on it (with PS__VB_RDV_STEER: the region,
 * and the app_id, customer_id and is_tensor recv_buffer was asked with).
 * Returns how many. A re-grant that cannot be sent must
 * be given back with ps__vb_grants_drop(); one whose region recv_buffer
 * no longer names loses it with ps__vb_grants_unsteer() (and the flag). */
size_t ps__vb_grants_take_regrants(ps__vb_grants_t *g, uint64_t *owners, ps__vb_ctrl_t *msgs,
                                   size_t cap);

/* Grant `slot` of `owner`, granted and not at the sender yet, lets go of
 * its steered region. PS_ERR_PROTOCOL if there is no such grant. */
ps_status_t ps__vb_grants_unsteer(ps__vb_grants_t *g, uint64_t owner, uint32_t slot);

typedef struct {
    uint64_t live;          /* grants allocated */
    uint64_t granted;       /* of which at a sender */
    uint64_t in_use;        /* of which held by a message */
    uint64_t cached_bytes;  /* bytes in re-grantable grants */
    uint64_t starts, regrants, reuses, one_shot;
    uint64_t steered;       /* grants made with a steered region */
} ps__vb_grants_stats_t;

void ps__vb_grants_stats(ps__vb_grants_t *g, ps__vb_grants_stats_t *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_RDV_H_ */

/*
 * A single-producer, single-consumer ring of records in shared memory: the
 * channel that carries one direction of the traffic between two processes.
 *
 * Layout. The control block (ps__shm_ring_ctl_t) and the data area live in
 * memory both processes map. head and tail count bytes since the start and
 * never wrap (64 bits); a record starts at tail % size, is 8-byte aligned,
 * begins with a ps__shm_rec_t header giving its length, and never wraps: a
 * PAD record fills the end of the area when the next record does not fit.
 *
 * Wake-ups. A consumer about to sleep sets rx_sleeping and then looks at
 * tail once more; a producer publishes tail and then takes rx_sleeping
 * (exchange with 0): whoever of the two comes second sees the other (both
 * sides use sequentially consistent operations), so the producer wakes the
 * sleeper or the sleeper sees the record. tx_waiting is the same handshake
 * the other way, for a producer waiting for room. Ringing the bell itself
 * is the caller's business (a byte on the channel's unix socket).
 *
 * The peer may be broken or hostile: the consumer checks every length and
 * offset it reads from shared memory before using it, and copies a
 * record's header before checking it.
 */
#ifndef PS_NET_SHM_SHM_RING_H_
#define PS_NET_SHM_SHM_RING_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#define PS__SHM_CACHELINE 64
#define PS__SHM_REC_ALIGN 8u

typedef struct {
    uint64_t tail; /* written by the producer */
    uint8_t pad0[PS__SHM_CACHELINE - 8];
    uint64_t head; /* written by the consumer */
    uint8_t pad1[PS__SHM_CACHELINE - 8];
    uint32_t rx_sleeping; /* consumer: wake me when tail moves */
    uint8_t pad2[PS__SHM_CACHELINE - 4];
    uint32_t tx_waiting; /* producer: wake me when head moves */
    uint8_t pad3[PS__SHM_CACHELINE - 4];
} ps__shm_ring_ctl_t;

/* Every record starts with this. len counts the header and is a multiple
 * of 8. */
typedef struct {
    uint32_t len;
    uint16_t type;
    uint16_t flags;
} ps__shm_rec_t;

enum {
    PS__SHM_REC_PAD = 1,
};

/* One side's view of a ring. A producer view is used under its owner's
 * lock; a consumer view by one thread. */
typedef struct {
    ps__shm_ring_ctl_t *ctl;
    uint8_t *data;
    uint64_t size; /* power of two, >= 4 KiB */
    uint64_t mask;
    uint64_t pos;  /* producer: our tail; consumer: our head */
    uint64_t peer; /* producer: head last seen; consumer: tail last seen */
} ps__shm_ring_t;

/* Bytes of shared memory a ring of `size` data bytes needs (control block
 * included). */
size_t ps__shm_ring_bytes(uint64_t size);

/* Views of a ring at `mem` (ps__shm_ring_bytes(size) bytes, 64-byte
 * aligned). ring_init also zeroes the control block (the creator's job). */
void ps__shm_ring_init(void *mem, uint64_t size);
void ps__shm_ring_attach(ps__shm_ring_t *r, void *mem, uint64_t size);

/* ---- producer ---- */

/* Room for a record of `len` bytes (8-aligned, <= size / 2): a pointer to
 * write it at (its header included), or NULL when the ring is full now.
 * Nothing is visible to the consumer before ps__shm_ring_commit(). */
void *ps__shm_ring_reserve(ps__shm_ring_t *r, uint32_t len);
/* Room for a record of at least `min_len` and at most `max_len` bytes at
 * the current position (a chunk of a stream): its pointer and *len_p, or
 * NULL. */
void *ps__shm_ring_reserve_upto(ps__shm_ring_t *r, uint32_t min_len, uint32_t max_len,
                                uint32_t *len_p);
/* Publishes what was reserved and written since the last commit, and
 * returns 1 if the consumer was asleep (the caller must wake it). */
int ps__shm_ring_commit(ps__shm_ring_t *r);
/* Before sleeping for lack of room: 1 if there is room for `len` bytes
 * after all (tx_waiting is then cleared), 0 if the consumer will wake us. */
int ps__shm_ring_wait_room(ps__shm_ring_t *r, uint32_t len);

/* ---- consumer ---- */

/* The next record (PAD records are consumed on the way): a pointer to it
 * in shared memory and a private copy of its header in *hdr_p; *rec_p NULL
 * when the ring is empty. *wake_p is set to 1 (never cleared) if skipping
 * a PAD freed room a waiting producer must hear about. PS_ERR_PROTOCOL
 * (*rec_p NULL) when the producer broke the format. */
ps_status_t ps__shm_ring_peek(ps__shm_ring_t *r, const uint8_t **rec_p, ps__shm_rec_t *hdr_p,
                              int *wake_p);
/* Frees the record peek returned; returns 1 if the producer was waiting
 * for room (the caller must wake it). */
int ps__shm_ring_consume(ps__shm_ring_t *r, uint32_t len);
/* 1 if a record is there (cheap: one shared load). */
int ps__shm_ring_readable(ps__shm_ring_t *r);
/* Before sleeping: sets rx_sleeping, then returns 1 if a record arrived
 * meanwhile (rx_sleeping is then cleared), 0 if the producer will wake us. */
int ps__shm_ring_sleep(ps__shm_ring_t *r);
/* After waking: the producer need not ring any more. */
void ps__shm_ring_awake(ps__shm_ring_t *r);

#endif /* PS_NET_SHM_SHM_RING_H_ */

/*
 * Whether the TCP van sends a large segment that does not start on a page
 * straight from the caller's buffer or from a page-aligned copy.
 *
 * Hosts differ: on some, the kernel copies such a source into the socket at
 * under half its speed and the copy plus an aligned send costs less; on
 * others the kernel's copy runs at full speed whatever the alignment and the
 * copy only adds a memcpy (docs/PERF.md, "Where numpy's own arrays lose").
 * So the van measures, in thread CPU time per byte: the kernel's copy from
 * unaligned sources (the first sendmsg of a frame sent straight), the
 * kernel's copy from the aligned copies, and the memcpy that makes them. It
 * tries both ways until each has a few figures, then takes the cheaper one,
 * and keeps trying the other one now and then so a change of conditions is
 * noticed. PS_TCP_ALIGN_COPY=on/off skips the measuring.
 */
#ifndef PS_NET_TCP_SEND_ALIGN_H_
#define PS_NET_TCP_SEND_ALIGN_H_

#include <pthread.h>
#include <stdint.h>

#include "ps/base/log_level.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Segments of at least this many bytes are candidates. */
#define PS_SEND_ALIGN_MIN (1u << 20)
/* A sendmsg figure counts only when the socket took at least this much:
 * below it the system call's fixed cost would dominate. */
#define PS_SEND_ALIGN_MIN_SAMPLE (256u << 10)
/* Figures kept per kind; the decision compares their medians. */
#define PS_SEND_ALIGN_RING 8
/* Figures of each kind needed before a decision. */
#define PS_SEND_ALIGN_WARMUP 4
/* One decision in this many takes the way not preferred. */
#define PS_SEND_ALIGN_RECHECK 32
/* Decisions after which a way that still lacks figures (its sends keep
 * finding the socket full) is only tried at rechecks; the others send
 * as they are. */
#define PS_SEND_ALIGN_PATIENCE 64

typedef enum {
    PS_SEND_ALIGN_AUTO,
    PS_SEND_ALIGN_ALWAYS,
    PS_SEND_ALIGN_NEVER,
} ps_send_align_mode_t;

/* What a frame's large unaligned segments were sent as. */
typedef enum {
    PS_SEND_ALIGN_NONE,   /* nothing to measure */
    PS_SEND_ALIGN_DIRECT, /* from the caller's unaligned buffer */
    PS_SEND_ALIGN_COPIED, /* from the page-aligned copy */
} ps_send_align_way_t;

typedef struct {
    uint32_t ps_per_byte[PS_SEND_ALIGN_RING]; /* picoseconds per byte */
    uint32_t count;                           /* figures ever added */
} ps_send_align_ring_t;

typedef struct {
    pthread_mutex_t lock;
    ps_send_align_mode_t mode;
    ps_send_align_ring_t direct;  /* kernel copy from unaligned sources */
    ps_send_align_ring_t copied;  /* kernel copy from the aligned copies */
    ps_send_align_ring_t copying; /* making the aligned copy (memcpy) */
    uint64_t decisions;
    int prefer_copy; /* the last decision's preference; -1 before one */
    ps_log_component_t log;
} ps_send_align_t;

/* mode_text: "auto", "on" or "off" (NULL or "" is auto); anything else
 * returns -1 and leaves the chooser in auto. A change of preference is
 * logged at debug level under `log`. */
int ps_send_align_init(ps_send_align_t *a, const char *mode_text, ps_log_component_t log);
void ps_send_align_fini(ps_send_align_t *a);

/* 1: copy this frame's large unaligned segments; 0: send them as they are. */
int ps_send_align_choose(ps_send_align_t *a);

/* A measured cost: `ns` of thread CPU time for `bytes`. A sendmsg figure
 * (DIRECT or COPIED) below PS_SEND_ALIGN_MIN_SAMPLE bytes is dropped. */
void ps_send_align_note_send(ps_send_align_t *a, ps_send_align_way_t way, uint64_t ns,
                             uint64_t bytes);
void ps_send_align_note_memcpy(ps_send_align_t *a, uint64_t ns, uint64_t bytes);

/* Median picoseconds per byte of what the ring holds; 0 when empty. */
uint32_t ps_send_align_median(const ps_send_align_ring_t *r);

/* The calling thread's CPU time, in nanoseconds. */
uint64_t ps_send_align_thread_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_TCP_SEND_ALIGN_H_ */

/*
 * Internals of the libfabric van, shared by its files:
 *   fabric_van.c      ops table, lifecycle, peers, the TCP van it composes
 *                     with for scheduler traffic, component registration
 *   fabric_domain.c   provider choice (fi_getinfo), fabric/domain/AV/CQ/
 *                     endpoint, memory registration, endpoint blobs
 *   fabric_send.c     the send path: per-peer ordered queues, RMA writes
 *   fabric_recv.c     posted meta receives, message assembly, in-order
 *                     delivery
 *   fabric_progress.c the progress thread: completions, errors, waiting
 *   fabric_wire.c     wire checks, tags, the provider hash, the host id (fabric_wire.h)
 *   fabric_watchdog.c the progress thread stuck inside the provider
 *
 * Protocol (one RDM endpoint per van, messages, tagged messages, RMA):
 *   - every message starts as a META message (untagged, so that any posted
 *     meta buffer takes it; libfabric 1.17's shm provider did not match a
 *     tagged receive with an ignore mask against queued unexpected
 *     messages, which left metas unreceived under bursts): a fixed header
 *     (fab_hdr_t: sender id, per-peer sequence number and epoch, flags),
 *     then the frame header and encoded meta of ps/net/codec, then, for
 *     small messages, the data bytes themselves (INLINE);
 *   - a meta too large for a posted receive (PS__FAB_META_BUF) follows as an
 *     EXT tagged message; bigger data follows as one DATA tagged message
 *     (all segments, one iovec each), received straight into the buffers
 *     the postoffice names (recv_buffer) or into pooled ones;
 *   - where the provider offers FI_RMA with send-after-write ordering, a
 *     worker's pull request carries (address, key, slot) of its registered
 *     destination in van_data; the server's van fi_write()s the response's
 *     values there and then sends the meta (RMA + RDV flags), so the values
 *     never pass through a receive buffer;
 *   - EXT and DATA tags, matched exactly: kind (4 bits) | epoch (12) |
 *     sender id (16) | sequence (32).
 *   Receivers deliver each sender's messages in sequence order.
 *
 * Threads: any thread calls send(); it posts directly when the peer's queue
 * is empty, else (or on -FI_EAGAIN) queues, and the progress thread posts
 * the rest. Where a post may never return (posts_on_loop: shm), every send
 * is queued and posted by the progress thread, which no other thread
 * drives, so that only that thread can be caught in the provider
 * (fabric_watchdog.c). The progress thread reads the completion queue, assembles and
 * delivers incoming messages, and calls every callback. Locks: peers_lock
 * (rwlock: changes of the id -> peer table; lookups read it without a
 * lock), peer->lock (a peer's send state), then the registration cache's
 * lock or tx_cache_lock; never the other way round.
 */
#ifndef PS_RDMA_FABRIC_FABRIC_INTERNAL_H_
#define PS_RDMA_FABRIC_FABRIC_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "ps/rdma/fabric/fabric_dl.h" /* after the <rdma/...> headers */

#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/log_level.h"
#include "ps/base/status.h"
#include "ps/net/van/progress_loop.h"
#include "ps/base/thread.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/base.h"
#include "ps/net/van/van.h"
#include "ps/rdma/common/buf_pool.h"
#include "ps/rdma/common/mr_cache.h"
#include "ps/rdma/common/rdv_table.h"
#include "ps/rdma/common/slot_pool.h"
#include "ps/rdma/fabric/fabric_wire.h"

/* A posted meta receive: header + frame + meta (+ inline data). */
#define PS__FAB_META_BUF 8192u
/* Meta receives kept posted. */
#define PS__FAB_META_DEPTH 64
/* A meta receive read and delivered is posted again at the loop's next
 * idle round (off the path of the answer: on a busy-polling worker the
 * delivery returns straight to the application, which sends the next
 * request), or at once when this many wait. */
#define PS__FAB_MRECV_BATCH 16
/* Data bytes carried inside the meta message at most. */
#define PS__FAB_INLINE_MAX 4096u
/* Header + meta bytes a send keeps inside its own object. */
#define PS__FAB_HM_INLINE 512u
/* A small message is built on the sender's stack and injected from there
 * (no send object) when it fits this and the provider's inject size. */
#define PS__FAB_STACK_HM 2048u
/* Send and receive objects kept for reuse (each is over glibc's 1 KiB
 * tcache limit, so malloc would take its slow path every message). */
#define PS__FAB_OBJ_CACHE 64
/* Inline data segments without a postoffice buffer are carved out of
 * pooled blocks of this size, message after message (see carve_arena() in
 * fabric_recv.c; at most PS__FAB_INLINE_MAX bytes a message), each
 * message's part starting on a PS__FAB_ARENA_ALIGN boundary. */
#define PS__FAB_ARENA_BYTES 4096u
#define PS__FAB_ARENA_ALIGN 64u
/* Completions read per call. */
#define PS__FAB_CQ_BATCH 32
/* Endpoints ps__fab_setup makes while enabling one fails with EADDRINUSE
 * (an address taken between the provider's pick and its bind) before the
 * van's bind fails. */
#define PS__FAB_ENABLE_TRIES 5
/* Pending pulls (worker; BYTEPS_ADDRESS_POOL_SIZE overrides) and
 * remembered destinations (server). */
#define PS__FAB_RDV_SLOTS 10240u
#define PS__FAB_RDV_ENTRIES 65536u
/* Without busy polling the thread spins PS_VAN_LOOP_IDLE_SPIN_NS after the
 * last activity (progress_loop.h); without a wait object it then sleeps in
 * steps doubling up to the cap. While transfers are in flight the thread keeps spinning this long after
 * the last completion: manual progress moves a large message only while
 * someone polls, and waking up for every socket event costs more. */
#define PS__FAB_SPIN_INFLIGHT_NS (5 * 1000 * 1000ull)
#define PS__FAB_SLEEP_MIN_NS (20 * 1000ull)
#define PS__FAB_SLEEP_MAX_NS (1000 * 1000ull)
/* ... but only up to this while the last activity is this recent. The
 * in-flight spin, too, lasts only while a completion is this recent: a
 * transfer that moves no more (its peer unreachable, the provider out of
 * descriptors) does not keep the thread spinning. */
#define PS__FAB_SLEEP_ACTIVE_NS (50 * 1000ull)
#define PS__FAB_ACTIVE_NS (20 * 1000 * 1000ull)
/* fi_trywait() refusing this many times in a row with nothing completed
 * in between (the provider has events it cannot consume, e.g. a listener
 * out of descriptors) makes the thread pause between rounds, as without a
 * wait object. */
#define PS__FAB_TRYWAIT_REFUSALS 16
/* How often peers with hanging sends are checked; how long a peer may take
 * none of our sends without a PS_CONNECT_TIMEOUT_MS. */
#define PS__FAB_LIVENESS_NS (500 * 1000 * 1000ull)
/* How long after an error without a context a message that says its values
 * were written into our memory is checked against its sender's process. */
#define PS__FAB_RMA_DOUBT_NS (1000 * 1000 * 1000ull)
/* shm: a peer heard from (or whose process was checked) this recently is
 * taken as alive by a post; see peer_dead() in fabric_send.c. */
#define PS__FAB_PID_CHECK_NS (1000 * 1000ull)
#define PS__FAB_STALL_MS_DEFAULT 10000
/* PS_FABRIC_STUCK_MS when unset or invalid. */
#define PS__FAB_STUCK_MS_DEFAULT 10000
/* close() waits this long for the progress thread to stop. It stops within
 * a round unless a provider call never returns: libfabric 1.17's shm spins
 * on a peer region's lock, which a process that died holding it never
 * releases. Then the van is abandoned (not freed) rather than close hang. */
#define PS__FAB_STOP_MS 5000
/* A spinning progress loop reads the clock every this many rounds (a
 * fraction of a microsecond each). */
#define PS__FAB_CLOCK_EVERY 32u
/* Without busy polling the spinning progress thread yields the CPU every
 * this many idle rounds: a machine with few cores often has more runnable
 * threads than cores (the app thread this one is about to wake, the peer's
 * progress thread). Busy polling (which owns its core by choice) yields as
 * seldom as a driving waiter does (PS_VAN_LOOP_YIELD_EVERY, every ~25 us):
 * a sched_yield() costs ~1 us here, several idle rounds, and a message
 * would find the thread inside it a third of the time. */
#define PS__FAB_IDLE_YIELD_EVERY 16u

/* ---- wire: fabric_wire.h ---- */

/* ---- objects ---- */

typedef struct ps__fab_van ps__fab_van_t;
typedef struct ps__fab_peer ps__fab_peer_t;
typedef struct ps__fab_rxs ps__fab_rxs_t;

enum {
    PS__FAB_OP_SEND,   /* a tx's send or write */
    PS__FAB_OP_MRECV,  /* a posted meta receive */
    PS__FAB_OP_RXPART, /* an EXT or DATA receive of an rx */
};

/* What libfabric hands back as op_context: first member of each op. */
typedef struct {
    struct fi_context2 ctx; /* first: covers FI_CONTEXT and FI_CONTEXT2 */
    int kind;
    void *owner;
} ps__fab_op_t;

/* Stages of a send, posted in this order. */
enum {
    PS__FAB_ST_RMA,
    PS__FAB_ST_META,
    PS__FAB_ST_EXT,
    PS__FAB_ST_DATA,
    PS__FAB_ST_DONE,
};

/* One message on its way out. */
typedef struct ps__fab_tx {
    ps__fab_op_t op[PS__FAB_ST_DONE];
    ps__fab_peer_t *peer;
    struct ps__fab_tx *next;                  /* peer queue */
    struct ps__fab_tx *fl_prev, *fl_next;     /* peer's in-flight list */
    uint32_t refs;      /* atomic: the poster's + one per posted op */
    int stage;          /* next stage to post (peer->lock) */
    int in_flight;      /* on the in-flight list */
    uint32_t seq;
    uint16_t flags;
    uint8_t *hm;        /* header + frame + meta (+ inline data) */
    size_t hm_len;      /* bytes of the META message */
    size_t ext_off;     /* EXT: frame + meta start here in hm */
    size_t ext_len;
    void *hm_desc;
    ps_slice_t hm_slice; /* hm from the registered pool (FI_MR_LOCAL) */
    uint8_t *hm_heap;    /* hm from malloc */
    ps_slice_t data[PS_MSG_MAX_DATA];
    uint32_t num_data;
    ps_rdma_mr_t *mr[PS_MSG_MAX_DATA];
    struct iovec iov[PS_MSG_MAX_DATA];
    void *desc[PS_MSG_MAX_DATA];
    int niov;
    /* RMA write of data[rma_seg] */
    int rma_seg;
    unsigned failed_ops; /* bit per stage whose op failed: see ps__fab_tx_op_failed */
    uint64_t rma_addr;
    uint64_t rma_key;
    void *rma_desc;
    uint64_t posted_ns;
    uint8_t hm_inline[PS__FAB_HM_INLINE];
} ps__fab_tx_t;

/* A worker's pull whose response may be written into `dest` by RMA. */
typedef struct {
    int peer;
    int32_t app_id, customer_id, timestamp;
    ps_slice_t dest;
    ps_rdma_mr_t *mr;
} ps__fab_pull_t;

/* An incoming message being assembled (progress thread only). */
typedef struct ps__fab_rx {
    ps__fab_op_t op_ext;
    ps__fab_op_t op_data;
    ps__fab_peer_t *peer;
    ps__fab_rxs_t *rxs;
    struct ps__fab_rx *next;               /* rxs->pending, by seq */
    struct ps__fab_rx *all_prev, *all_next; /* van->rx_all */
    struct ps__fab_rx *next_blocked;        /* van->rx_blocked */
    uint32_t seq;
    uint32_t epoch;
    uint16_t flags;
    uint32_t rdv_slot;
    uint32_t rma_seg;
    int waiting;        /* posted parts not complete */
    int ready;          /* complete, waiting for its turn */
    int orphan;         /* its sender was reset: free, do not deliver */
    int blocked;        /* part still to post: PS__FAB_KIND_EXT / _DATA, or 0 */
    int parked;         /* a part failed: kept, untouched, until the endpoint closes */
    ps_msg_t msg;
    ps_frame_header_t fh;
    ps_slice_t ext;
    ps_rdma_mr_t *mr[PS_MSG_MAX_DATA];
    struct iovec iov[PS_MSG_MAX_DATA];
    void *desc[PS_MSG_MAX_DATA];
    int niov;
} ps__fab_rx_t;

/* A posted meta receive. */
typedef struct {
    ps__fab_op_t op;
    ps_slice_t buf;
    void *desc;
    int posted;
} ps__fab_mrecv_t;

struct ps__fab_peer {
    int id;
    struct ps__fab_peer *all_next; /* van->all_peers (freed at close only) */

    pthread_mutex_t lock; /* everything down to the rx part */
    fi_addr_t addr;       /* FI_ADDR_NOTAVAIL until connected */
    int detached;         /* disconnect() took it out of the table */
    int failed;           /* link failed: sends refused */
    int fail_pending;     /* peer_failed still to be called */
    ps_status_t fail_why;
    uint32_t tx_seq;
    uint32_t tx_epoch;
    ps__fab_tx_t *q_head, *q_tail;
    ps__fab_tx_t *inflight;
    int in_blocked;
    struct ps__fab_peer *next_blocked;
    /* pid, pidfd, same_host and local_addr_len: written under peer->lock,
     * atomically, and read atomically without it (the watchdog). */
    pid_t pid;            /* its process (0: not in our PID namespace) */
    int pidfd;            /* pidfd of pid (-1: none; kill(pid, 0) then) */
    int same_host;
    int watch_pid;        /* shm: check pid before posting (see peer_dead) */
    /* A peer in this process: its endpoint's address, looked up in
     * fabric_local.c instead of following the pid (0: not ours). */
    uint8_t local_addr[PS_NODE_ENDPOINT_MAX];
    size_t local_addr_len;
    uint64_t alive_ns;    /* its process was last seen alive (peer->lock) */
    uint64_t last_progress_ns; /* atomic: a send to it completed or a message came */
};

/* Where a sender's sequence stands (progress thread only). Kept apart from
 * the peer (which disconnect() replaces) since it follows the sender. */
struct ps__fab_rxs {
    int known;
    uint32_t epoch;
    uint32_t prev_epoch;
    uint32_t next;            /* next sequence number to deliver */
    ps__fab_rx_t *pending;    /* by sequence */
};

struct ps__fab_van {
    ps_van_base_t base; /* first: handle, params, callbacks, id, counters */
    ps_van_t *tcp;         /* scheduler traffic */
    ps_frame_limits_t limits;

    /* provider */
    struct fi_info *info;  /* chosen (probe at open, bound at bind) */
    char prov_name[64];
    uint32_t prov_hash;
    int use_rma;
    int have_source;
    int mr_local, mr_virt, mr_prov_key, mr_endpoint, mr_pins;
    int same_host_only;
    /* PS_VAN_DEVICE(PS_BUF_MEM_CUDA) where the provider registers CUDA
     * memory (FI_HMEM, probed at open: fabric_domain.c); else 0. */
    uint32_t device_kinds;
    int need_ep_lock;      /* provider not FI_THREAD_SAFE */
    int posts_on_loop;     /* a post may never return: only the progress thread posts */
    size_t inject_size;
    size_t iov_limit;
    uint64_t max_msg;

    /* resources (after bind) */
    int up;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    int cq_fd;             /* -1: no wait object */
    pthread_mutex_t ep_lock;
    uint64_t next_key;     /* atomic: requested keys without FI_MR_PROV_KEY */
    uint8_t my_addr[PS_NODE_ENDPOINT_MAX];
    size_t my_addr_len;
    int local_listed;      /* my_addr is in fabric_local.c's list */
    uint64_t host_id;
    uint64_t pid_ns;

    ps_rdma_mr_cache_t *mrc;
    ps_rdma_buf_pool_t *pool;
    ps_rdma_slot_pool_t *pulls;   /* worker: pending pulls */
    ps_rdma_rdv_table_t *dests;   /* server: where responses may be written */
    int dests_used;               /* atomic: something was put in dests (never
                                   * cleared): until then a response looks
                                   * nothing up there */

    ps__fab_mrecv_t mrecv[PS__FAB_META_DEPTH];

    /* addresses inserted in the AV (never inserted twice: shm cannot take
     * an address again); under peers_lock (write) */
    struct ps__fab_av_entry {
        uint8_t addr[PS_NODE_ENDPOINT_MAX];
        size_t len;
        fi_addr_t fi_addr;
    } *av_entries;
    size_t num_av, cap_av;

    /* peers */
    pthread_rwlock_t peers_lock;
    /* By id, PS_NODE_EMPTY entries (only the pages of ids in use are ever
     * touched): read with atomic loads and no lock, written under
     * peers_lock; a peer is freed at close only. */
    ps__fab_peer_t **peers;
    ps__fab_peer_t *all_peers;

    /* send objects for reuse (any thread) */
    pthread_mutex_t tx_cache_lock;
    ps__fab_tx_t *tx_cache;     /* by ->next */
    int tx_cached;

    /* hand-offs to the progress thread */
    pthread_mutex_t blocked_lock;
    ps__fab_peer_t *blocked;    /* peers with queued sends */
    int fail_pending;           /* atomic: some peer has fail_pending */

    /* The progress loop: its thread, or (busy polling) a waiting thread
     * that drives it through the progress op while the thread parks.
     * "Progress thread only" state below belongs to whoever runs it. */
    ps_van_loop_t loop;
    uint64_t last_active_ns;    /* the loop's last completion */
    uint64_t pause_ns;          /* the next sleep without a wait object */
    unsigned trywait_refusals;  /* fi_trywait() refusals since the last completion */
    ps__fab_rxs_t **rxs;        /* by sender id */
    int rxs_cap;
    ps__fab_rx_t *rx_all;
    ps__fab_rx_t *rx_blocked;
    ps__fab_rx_t *rx_cache;     /* receive objects for reuse, by ->next */
    int rx_cached;
    ps_slice_t arena;           /* the block inline segments are carved from */
    size_t arena_off;           /* its first free byte */
    int mrecv_blocked;
    ps__fab_mrecv_t *mrecv_defer[PS__FAB_MRECV_BATCH]; /* to post again */
    int mrecv_ndefer;
    uint64_t last_liveness_ns;
    /* Until then, values written into our memory may be missing: an error
     * without a context came (see rma_doubt in fabric_recv.c). */
    uint64_t rma_doubt_until_ns;
    /* run_round's clock: read every PS__FAB_CLOCK_EVERY rounds, busy or
     * idle (a spinning loop read it as often as the queue, and a read after
     * a round that delivered an answer delayed the answer: clock_gettime
     * costs ~24 ns in a VM), and after a sleep; what a round handles is
     * stamped with it (a few microseconds old at most while spinning, up
     * to PS_VAN_LOOP_PARK_MS when a driver comes back). Written by the loop's
     * holder, read by busy-polling senders too: ps__fab_round_now(). */
    uint64_t round_now_ns;
    unsigned clock_rounds;

    /* The watchdog (fabric_watchdog.c). */
    int watching;               /* its thread runs */
    int stuck_ms;
    int stuck;                  /* atomic: the progress thread is stuck for good */
    ps_thread_t watch_thread;
    ps_event_t watch_stop;
    int test_stall;             /* atomic: test hook, the loop spins in place */

    int64_t ops_in_flight;      /* atomic: posted sends, data/ext receives */
};

static inline ps__fab_van_t *ps__fab_of(ps_van_t *v)
{
    return (ps__fab_van_t *)v;
}

/* The loop's clock (round_now_ns), from any thread. */
static inline uint64_t ps__fab_round_now(ps__fab_van_t *van)
{
    return __atomic_load_n(&van->round_now_ns, __ATOMIC_RELAXED);
}

static inline void ps__fab_set_round_now(ps__fab_van_t *van, uint64_t now)
{
    __atomic_store_n(&van->round_now_ns, now, __ATOMIC_RELAXED);
}

/* Serialises endpoint calls for providers that are not thread-safe. */
static inline void ps__fab_ep_lock(ps__fab_van_t *van)
{
    if (van->need_ep_lock)
        pthread_mutex_lock(&van->ep_lock);
}
static inline void ps__fab_ep_unlock(ps__fab_van_t *van)
{
    if (van->need_ep_lock)
        pthread_mutex_unlock(&van->ep_lock);
}

/* ---- fabric_domain.c ---- */
/* Chooses the provider (PS_FABRIC_PROVIDER, FI_PROVIDER, else the best
 * available) and records what it offers. */
ps_status_t ps__fab_probe(ps__fab_van_t *van);
/* Opens fabric, domain, AV, CQ, endpoint bound to `host` where the
 * provider's addresses are socket addresses. */
ps_status_t ps__fab_setup(ps__fab_van_t *van, const char *host);
/* Closes the endpoint (nothing completes after it). */
void ps__fab_close_ep(ps__fab_van_t *van);
/* Closes everything else (after every tx and rx is freed). */
void ps__fab_teardown(ps__fab_van_t *van);
/* This node's endpoint_name blob. */
ps_status_t ps__fab_make_blob(ps__fab_van_t *van, uint8_t *buf, size_t cap, uint32_t *len_p);
/* Parses a peer's blob; checks provider and host. */
ps_status_t ps__fab_parse_blob(ps__fab_van_t *van, const ps_node_t *peer, const uint8_t **addr_p,
                               size_t *addr_len_p, pid_t *pid_p, int *same_host_p);
/* Registration ops for the cache and the pool. */
extern const ps_rdma_reg_ops_t ps__fab_reg_ops;
void *ps__fab_mr_desc(void *handle);
uint64_t ps__fab_mr_key(void *handle);
const char *ps__fab_strerror(int err);

/* ---- fabric_van.c ---- */
ps__fab_peer_t *ps__fab_peer_lookup(ps__fab_van_t *van, int id); /* or NULL */
/* The peer of an incoming sender, made if new (progress thread). */
ps__fab_peer_t *ps__fab_peer_for_rx(ps__fab_van_t *van, int id);
/* Marks a peer's link failed (any thread); the progress thread tells the
 * postoffice. Drops its queued sends and rendezvous state. */
void ps__fab_peer_fail(ps__fab_van_t *van, ps__fab_peer_t *peer, ps_status_t why,
                       const char *what);
void ps__fab_kick(ps__fab_van_t *van);
int ps__fab_my_id(ps__fab_van_t *van);
/* 1 if the peer's process (same host, same PID namespace) has exited,
 * zombies included (peer->lock held; never blocks). */
int ps__fab_peer_process_gone(const ps__fab_peer_t *peer);
/* The same, or its memory is gone already: it is exiting (peer->lock held). */
int ps__fab_peer_process_exiting(const ps__fab_peer_t *peer);

/* ---- fabric_local.c: the endpoints this process has open ---- */
ps_status_t ps__fab_local_add(const void *addr, size_t len);
void ps__fab_local_remove(const void *addr, size_t len);
int ps__fab_local_open(const void *addr, size_t len);
/* 1 when the endpoint is open, and then it stays open (the list held)
 * until ps__fab_local_release(); 0 when it is not (nothing held). */
int ps__fab_local_hold(const void *addr, size_t len);
void ps__fab_local_release(void);

/* ---- fabric_send.c ---- */
ps_status_t ps__fab_send(ps__fab_van_t *van, ps__fab_peer_t *peer, const ps_msg_t *msg);
/* A send op completed (ok = 0 on error). */
void ps__fab_tx_op_done(ps__fab_van_t *van, ps__fab_tx_t *tx, int ok);
void ps__fab_tx_op_failed(ps__fab_van_t *van, ps__fab_op_t *op, const char *detail);
/* Posts what the blocked peers queued (progress thread). */
void ps__fab_flush_blocked(ps__fab_van_t *van);
/* Releases every send of a peer (close). */
void ps__fab_tx_free_all(ps__fab_van_t *van, ps__fab_peer_t *peer);
void ps__fab_tx_free_list(ps__fab_van_t *van, ps__fab_tx_t *list);
/* Frees the send objects kept for reuse (close). */
void ps__fab_tx_cache_free(ps__fab_van_t *van);
void ps__fab_pull_free(ps__fab_van_t *van, ps__fab_pull_t *pull);
/* Drop callback of van->dests (frees a ps__fab_rdv_desc_t copy). */
void ps__fab_dest_drop(void *arg, const ps_rdma_rdv_key_t *key, void *value);

/* ---- fabric_recv.c ---- */
ps_status_t ps__fab_post_meta_recvs(ps__fab_van_t *van);
void ps__fab_on_meta(ps__fab_van_t *van, ps__fab_mrecv_t *m, size_t len, fi_addr_t src);
/* The van's send_lane op to a peer with a fabric address: injected like a
 * small message (or a send object where it cannot be), in sequence with
 * the peer's other messages. */
ps_status_t ps__fab_send_lane(ps__fab_van_t *van, ps__fab_peer_t *peer, uint8_t *bytes,
                              size_t len);
void ps__fab_on_rx_part(ps__fab_van_t *van, ps__fab_op_t *op, int ok);
void ps__fab_meta_recv_error(ps__fab_van_t *van, ps__fab_mrecv_t *m, int err);
/* Posts the meta receives whose posting was deferred (mrecv_defer). */
void ps__fab_flush_mrecvs(ps__fab_van_t *van);
/* Retries receives that got -FI_EAGAIN. */
void ps__fab_retry_recvs(ps__fab_van_t *van);
/* Forgets a sender's half-assembled messages (its sequence restarts). */
void ps__fab_rx_reset(ps__fab_van_t *van, ps__fab_rxs_t *rxs);
/* Frees every rx and meta buffer (close, after the endpoint is closed). */
void ps__fab_rx_free_all(ps__fab_van_t *van);

/* ---- fabric_progress.c ---- */
ps_status_t ps__fab_start_progress(ps__fab_van_t *van);
/* Stops the progress thread, waiting at most PS__FAB_STOP_MS: PS_OK, or
 * a timeout status when it is stuck inside the provider (then nothing it
 * may touch can be freed). */
ps_status_t ps__fab_stop_progress(ps__fab_van_t *van);

/* ---- fabric_watchdog.c ---- */
/* Starts the watchdog of a bound van (PS_FABRIC_STUCK_MS; 0: none). */
ps_status_t ps__fab_watchdog_start(ps__fab_van_t *van);
/* Stops it (before the progress thread). Idempotent. */
void ps__fab_watchdog_stop(ps__fab_van_t *van);
/* 1 once the watchdog found the progress thread stuck for good. */
int ps__fab_stuck(const ps__fab_van_t *van);
/* Takes `m` (a lock the progress thread takes too) unless the van is
 * found stuck meanwhile: 0 when taken, -1 when not. For every thread but
 * the progress thread, which never waits for itself. */
int ps__fab_lock(ps__fab_van_t *van, pthread_mutex_t *m);

/* ---- testing (fabric_testing.h) ---- */
extern int ps__fab_rma_disabled;
extern int ps__fab_repeat_errors;           /* test hook: handle each error twice */
extern unsigned long ps__fab_errors_repeated;
extern unsigned long ps__fab_rma_writes;
extern unsigned long ps__fab_hmem_probes;   /* atomic: CUDA registrations tried at open */
extern int ps__fab_enable_failures; /* atomic: enables still to fail as EADDRINUSE */

/* This van's log component "fabric" (registered by fabric_van.c). */
extern ps_log_component_t ps__fabric_log;
#define PS_LOG_FABRIC ps__fabric_log

/* This van's own variables (fabric_config_vars.h), a config table of their own:
 * read them as ps_config_*(PS_FABRIC_CFG(NAME), ...). */
typedef enum {
#define PS_CONFIG_VAR PS_CONFIG_INDEX
#include "ps/rdma/fabric/fabric_config_vars.h"
#undef PS_CONFIG_VAR
} ps__fabric_config_index_t;
extern ps_config_table_t ps__fabric_config;
#define PS_FABRIC_CFG(_name) ps_config_table_id(&ps__fabric_config, PS_CFGI_##_name)

#endif /* PS_RDMA_FABRIC_FABRIC_INTERNAL_H_ */

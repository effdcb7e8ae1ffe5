/*
 * Internals of the ibverbs van, shared by its files:
 *   verbs_van.c   ops table, lifecycle, the peer table, component
 *                 registration and unavailable() ("no RDMA device: ...")
 *   verbs_dev.c   device contexts: PD, completion channel, one CQ, one
 *                 shared receive queue (SRQ) with its posted buffers, the
 *                 registration cache and the registered buffer pool
 *   verbs_cm.c    the connection-manager thread: listen, connect with
 *                 retries, accept, disconnect, device async events, and the
 *                 reaping of dead connections
 *   verbs_send.c  the send path: eager SENDs, rendezvous, RDMA writes split
 *                 across QPs, pull descriptors, per-connection queues
 *   verbs_poll.c  the completion thread: receives, rendezvous answers,
 *                 reassembly across QPs, delivery, completion errors
 *
 * Protocol (wire formats in verbs_wire.h):
 *   - every connection is `nqp` RC queue pairs made with rdmacm; private
 *     data carries the node id, the QP index and count, and a nonce that
 *     groups the QPs of one connect(); with a job secret it also carries
 *     the handshake of verbs_auth.h, whose proof is the first SEND;
 *   - all QPs of a device share one CQ and one SRQ of BYTEPS_RDMA_RX_DEPTH
 *     4 KiB buffers, so receive memory does not grow with peers x depth;
 *   - a message whose header, meta and in-buffer data fit a receive buffer
 *     goes as one SEND (IBV_SEND_INLINE when small); a bigger one asks the
 *     receiver for a buffer (rendezvous, verbs_rdv.h), RDMA-writes its data
 *     there, then writes its meta with immediate = grant slot;
 *   - a worker's pull request carries (slot, addr, rkey, len) of its
 *     registered destination in van_data; the server's van writes the
 *     response's values straight there and says so in the header;
 *   - payloads of at least PS__VB_SPLIT_MIN are split across the QPs; QP k>0
 *     pieces are writes with immediate 0, counted per QP; a message is
 *     delivered once the pieces its header counts have arrived.
 *
 * Threads and locks. Any thread calls send(). The CM thread owns every
 * rdmacm call after bind (ids, QPs, connect/accept/disconnect/destroy). The
 * poller thread owns the CQs and SRQs, reassembly and all callbacks except
 * peer_failed from a CM event. Locks, in order: van->lock (connection
 * lists, device creation), peers_lock (rwlock, id -> connections),
 * conn->lock (a connection's send state), then the registration cache's and
 * the pools' own locks. qpmap_lock (rwlock) and blocked_lock/txs_lock are
 * leaves. No callback runs with a lock held.
 */
#ifndef PS_RDMA_VERBS_VERBS_INTERNAL_H_
#define PS_RDMA_VERBS_VERBS_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "ps/rdma/verbs/verbs_dl.h" /* after the library headers */

#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/admission.h"
#include "ps/net/van/base.h"
#include "ps/net/van/handover.h"
#include "ps/net/van/van.h"
#include "ps/net/van/progress_loop.h"
#include "ps/rdma/common/buf_pool.h"
#include "ps/rdma/common/mr_cache.h"
#include "ps/rdma/common/rdma_shared.h"
#include "ps/rdma/common/rdv_table.h"
#include "ps/rdma/common/slot_pool.h"
#include "ps/rdma/verbs/verbs_auth.h"
#include "ps/rdma/verbs/verbs_rdv.h"
#include "ps/rdma/verbs/verbs_reg.h"
#include "ps/rdma/verbs/verbs_split.h"
#include "ps/rdma/verbs/verbs_wire.h"

/* A posted receive buffer; also the largest SEND. */
#define PS__VB_RX_BLOCK 4096u
/* Inline data asked of each QP (StepMesh used 256). */
#define PS__VB_INLINE_WANT 256u
/* Payloads below this go on QP 0 only. */
#define PS__VB_SPLIT_MIN (64u << 10)
/* Largest single RDMA write. */
#define PS__VB_MAX_WR_BYTES (1ull << 30)
/* Scatter-gather entries per WR we ask for (header + 4 segments + slack). */
#define PS__VB_MAX_SGE 8
/* Cached grants per connection (sender side). */
#define PS__VB_GCACHE_MAX 4096
/* Re-grantable receive buffers kept per van. */
#define PS__VB_GRANT_CACHE_BYTES (512ull << 20)
#define PS__VB_MAX_DEVS 8
/* rdma_resolve_addr / rdma_resolve_route timeouts. */
#define PS__VB_RESOLVE_MS 2000
#define PS__VB_BACKOFF_MIN_MS 50
#define PS__VB_BACKOFF_MAX_MS 1000
/* Completions taken per ibv_poll_cq. */
#define PS__VB_POLL_BATCH 64
/* A dead connection's QPs go once their WRs flushed, or after this. */
#define PS__VB_REAP_MS 5000
/* Remembered pull destinations (server side). */
#define PS__VB_RDV_ENTRIES 65536u
/* Frame header + meta a tx keeps in itself. */
#define PS__VB_FM_INLINE 512u
#define PS__VB_QPMAP_BUCKETS 1024u

typedef struct ps__vb_van ps__vb_van_t;
typedef struct ps__vb_dev ps__vb_dev_t;
typedef struct ps__vb_conn ps__vb_conn_t;
typedef struct ps__vb_tx ps__vb_tx_t;

/* What a work request's wr_id points at: the first member of each. 0 is
 * an unsignaled WR (its completion only appears on error). */
enum {
    PS__VB_WR_RX = 1,
    PS__VB_WR_TX = 2,
};

typedef struct {
    int kind;
} ps__vb_wr_t;

/* A receive buffer posted to a device's SRQ. */
typedef struct {
    ps__vb_wr_t wr;
    ps__vb_dev_t *dev;
    ps_slice_t buf;
    uint32_t lkey;
} ps__vb_rx_t;

struct ps__vb_dev {
    ps__vb_van_t *van;
    struct ibv_context *ctx; /* rdmacm's; not ours to close */
    char name[64];
    struct ibv_device_attr attr;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    struct ibv_srq *srq;
    uint32_t srq_depth;
    int cq_size;
    int64_t cq_room;          /* atomic: CQEs free for signaled sends */
    unsigned cq_unacked;      /* poller: CQ events not yet acked */
    ps__vb_reg_ctx_t reg;
    int reg_inited;
    ps_rdma_mr_cache_t *mrc;
    ps_rdma_buf_pool_t *pool;
    ps__vb_grants_t *grants;  /* receive buffers granted to senders */
    ps__vb_rx_t *rx;          /* srq_depth records */
    uint32_t rx_missing;      /* poller: records without a buffer (pool empty) */
    uint32_t rx_posted;
    uint32_t max_sge;
    uint32_t max_inline;      /* atomic: inline bytes the device's QPs got */
    int fatal;                /* IBV_EVENT_DEVICE_FATAL seen */
};

enum {
    PS__VB_C_CONNECTING = 0,
    PS__VB_C_READY = 1,
    PS__VB_C_FAILED = 2,
};

typedef struct ps__vb_qp {
    ps__vb_conn_t *conn;
    unsigned index;
    struct rdma_cm_id *id;
    struct ibv_qp *qp;
    uint32_t qp_num;
    int established;
    int in_map;
    struct ps__vb_qp *map_next;
    uint32_t sq_depth;
    uint32_t sq_used;    /* conn->lock */
    uint32_t slave_sent; /* conn->lock */
} ps__vb_qp_t;

struct ps__vb_conn {
    ps__vb_van_t *van;
    ps__vb_dev_t *dev;
    uint64_t serial;     /* grants owner id; never reused */
    uint32_t refs;       /* atomic */
    int outgoing;
    int peer_id;         /* atomic; PS_NODE_EMPTY until known */
    int expect_id;       /* outgoing: the node we meant to reach */
    int my_id_sent;      /* atomic; outgoing: the id our private data or hello carried */
    uint64_t nonce;      /* groups the QPs of one attempt */
    /* The job-secret handshake (verbs_auth.h) when the van has a secret;
     * an outgoing connection runs a new one per attempt. */
    int auth_on;
    ps__vb_auth_t auth;
    unsigned nqp;
    int lag_pinned;
    ps__vb_qp_t qp[PS__VB_MAX_QP];
    ps_sockaddr_t addr;
    char addr_str[PS_SOCKADDR_STRLEN];

    int state;           /* atomic: PS__VB_C_* */
    ps_status_t why;     /* atomic: why it FAILED */
    int notify;          /* atomic: tell the postoffice when it fails */
    int fail_reported;   /* atomic */

    /* CM thread. */
    uint64_t deadline_ns;
    uint64_t retry_at_ns;
    uint32_t backoff_ms;
    int attempts;
    ps_status_t last_err;
    unsigned established;
    uint64_t dead_since_ns;
    int on_dead;
    int admitted;        /* atomic: incoming, counted by van->admission until it is up or gone */

    /* Send side (lock). */
    pthread_mutex_t lock;
    ps__vb_tx_t *ctrl_head, *ctrl_tail;
    ps__vb_tx_t *q_head, *q_tail;
    int waiting;         /* q_head waits for the grant of token `wait_token` */
    uint32_t wait_token;
    uint32_t next_token;
    ps__vb_gcache_t gcache;
    void *wrs;           /* scratch work requests of the send path (lock) */
    int blocked;         /* on van->blocked (blocked_lock) */
    ps__vb_conn_t *next_blocked;

    /* Receive side (poller). */
    ps__vb_reorder_t reorder;

    /* van->conns (van->lock). */
    ps__vb_conn_t *next, *prev;
    int linked;          /* on van->conns */
    /* The hand-over to the CM thread (van->handover). */
    ps_van_handover_link_t start_link, close_link;
    int starting;        /* atomic: on the start list, not yet taken */
    int closing;         /* atomic: on the close list, not yet handled */
};

/* The connections of one peer node. */
#define PS__VB_MAX_IN 4
typedef struct {
    ps__vb_conn_t *out;
    ps__vb_conn_t *in[PS__VB_MAX_IN];
    int num_in;
    /* How its last connection failed, PS_OK while connected (ps_van_keeps_lost). */
    ps_status_t lost;
} ps__vb_peer_t;

/* One QP's share of a tx's completions. */
typedef struct {
    ps__vb_wr_t wr;
    ps__vb_tx_t *tx;
    uint16_t qp;
    uint16_t nwr;
} ps__vb_txwc_t;

enum {
    PS__VB_TX_QUEUED = 0,
    PS__VB_TX_WAIT = 1,
    PS__VB_TX_POSTED = 2,
};

struct ps__vb_tx {
    ps__vb_txwc_t wc[PS__VB_MAX_QP];
    ps__vb_conn_t *conn;       /* referenced */
    ps__vb_tx_t *next;         /* conn queue */
    ps__vb_tx_t *all_prev, *all_next; /* van->txs */
    uint32_t refs;             /* atomic: the poster's + one per signaled WR */
    uint8_t is_ctrl;
    uint8_t state;
    uint8_t cacheable;
    uint8_t dir;
    uint8_t hdr_flags;
    int8_t rma_seg;            /* -1: none */
    int8_t steer_seg;          /* -1: none; else written to the grant's steered region */
    uint8_t steerable;         /* a request the receiver may steer (START says whom for) */
    uint8_t is_tensor;
    int32_t app_id, customer_id;
    uint32_t rma_slot;
    uint64_t rma_addr;
    uint32_t rma_rkey;
    uint64_t key;
    uint32_t token;
    uint32_t replace_slot;
    ps__vb_grant_t grant;
    uint8_t *fm;               /* frame header + meta */
    size_t fm_len;
    uint8_t *fm_heap;
    uint32_t num_data;
    ps_slice_t data[PS_MSG_MAX_DATA];
    uint64_t lens[PS_MSG_MAX_DATA];
    uint64_t in_len;           /* bytes of the segments that go in the buffer */
    ps_rdma_mr_t *mr[PS_MSG_MAX_DATA];
    ps_slice_t bounce;         /* registered: eager payload or meta write */
    ps_slice_t dbounce;        /* registered copy of unregistrable data */
    uint32_t ctrl_len;
    uint8_t ctrl_buf[PS__VB_CTRL_STEER_LEN];
    uint8_t fm_inline[PS__VB_FM_INLINE];
};

/* A worker's pull whose response may be written into `dest`. */
typedef struct {
    int peer;
    int32_t app_id, customer_id, timestamp;
    ps_slice_t dest;
    ps_rdma_mr_t *mr;
    ps__vb_dev_t *dev;
} ps__vb_pull_t;

/* A message held for its slave chunks (poller). */
typedef struct {
    ps__vb_reorder_item_t item;
    ps_msg_t msg;
} ps__vb_held_t;

struct ps__vb_van {
    ps_van_base_t base; /* first: handle, params, callbacks, id, counters */
    ps_frame_limits_t limits;
    /* Incoming connections before their handshake ends: a cap, a deadline
     * (the CM thread admits and times out; any thread ends one). */
    ps_van_admission_t admission;
    unsigned nqp;
    int lag;
    uint32_t rx_depth;
    uint32_t send_depth;
    uint32_t cq_sends; /* BYTEPS_RDMA_MAX_CONCURR_WR: signaled sends in flight per device */
    uint32_t pool_slots;
    int print_log;

    struct rdma_event_channel *channel;
    struct rdma_cm_id *listen_id;
    ps_sockaddr_t listen_addr;
    int have_src;
    ps_sockaddr_t src_addr;  /* source for rdma_resolve_addr */

    ps_mutex_t lock;
    ps_cond_t cond;          /* connection state changes */
    ps__vb_conn_t *conns;
    ps_van_handover_t handover; /* connections to start, to close */
    ps__vb_dev_t *devs[PS__VB_MAX_DEVS];
    int ndevs;               /* atomic; devices are only added */
    int gpu_dmabuf;          /* atomic: CUDA memory registers through dma-buf:
                              * 0 not known yet, 1 yes, 2 no (vb_query) */

    pthread_rwlock_t peers_lock;
    ps__vb_peer_t *peers;    /* by id */
    int peers_cap;

    pthread_rwlock_t qpmap_lock;
    ps__vb_qp_t *qpmap[PS__VB_QPMAP_BUCKETS];

    pthread_mutex_t blocked_lock;
    ps__vb_conn_t *blocked;

    pthread_mutex_t txs_lock;
    ps__vb_tx_t *txs;
    int64_t queued;          /* atomic: txs not yet completed */

    ps__vb_grants_t *grants;
    ps_rdma_slot_pool_t *pulls;
    ps_rdma_rdv_table_t *dests;

    ps_thread_t cm_thread;
    int cm_started;
    int stop;                /* atomic: the CM thread ends */
    int cm_wakefd;
    /* The completion loop: it sleeps in epoll on poll_epfd (every
     * device's completion channel and the loop's wake eventfd). */
    ps_van_loop_t loop;
    int poll_epfd;
    int poll_blocked;        /* the loop's: a connection waits for send room */

    /* CM thread: QP groups lately refused for want of the job secret (one
     * log line per connection, not per QP). */
    uint64_t refused[8];
    unsigned refused_next;
    uint64_t next_serial;    /* atomic */
    unsigned long received_in_place; /* atomic: steered segments (verbs_testing.h) */
};

static inline ps__vb_van_t *ps__vb_of(ps_van_t *v)
{
    return (ps__vb_van_t *)v;
}

/* ---- verbs_van.c ---- */
void ps__vb_conn_ref(ps__vb_conn_t *conn);
void ps__vb_conn_unref(ps__vb_conn_t *conn);
/* The connection to send to `id` on (referenced), or NULL. */
ps__vb_conn_t *ps__vb_peer_send_conn(ps__vb_van_t *van, int id);
/* Records an identified incoming connection under its peer id. */
ps_status_t ps__vb_peer_add_in(ps__vb_van_t *van, ps__vb_conn_t *conn, int id);
/* Takes a connection out of the peer table. */
void ps__vb_peer_remove(ps__vb_van_t *van, ps__vb_conn_t *conn);
/* How the peer's last connection failed; PS_OK if none did since. */
ps_status_t ps__vb_peer_lost(ps__vb_van_t *van, int id);
/* The connection with this serial (referenced), or NULL. */
ps__vb_conn_t *ps__vb_conn_by_serial(ps__vb_van_t *van, uint64_t serial);
/* QP number -> QP (its connection referenced), or NULL. */
ps__vb_qp_t *ps__vb_qp_lookup(ps__vb_van_t *van, uint32_t qp_num);
void ps__vb_qp_map_add(ps__vb_van_t *van, ps__vb_qp_t *qp);
void ps__vb_qp_map_remove(ps__vb_van_t *van, ps__vb_qp_t *qp);
/* An incoming connection's handshake ended (up or gone): it no longer
 * counts against admission. Idempotent. */
void ps__vb_conn_admitted_end(ps__vb_conn_t *c);
/*
 * A connection failed (any thread). Marks it, drops its queued sends and
 * rendezvous state, hands it to the CM thread for teardown, and (once per
 * peer, when `notify` and the peer is known) calls peer_failed with `why`.
 * Idempotent.
 */
void ps__vb_conn_fail(ps__vb_conn_t *conn, ps_status_t why, const char *what);
/* Wakes the poller (re-grants queued, blocked sends). */
void ps__vb_poll_wake(ps__vb_van_t *van);
void ps__vb_cm_wake(ps__vb_van_t *van);
int ps__vb_my_id(ps__vb_van_t *van);
void ps__vb_pull_free(ps__vb_pull_t *pull);

/* ---- verbs_dev.c ---- */
/* Why this machine cannot run the van (0 if it can); cached. */
int ps__vb_unavailable(char *why, size_t cap);
/* The context of an rdmacm device, created on first use (van->lock not
 * held). */
ps_status_t ps__vb_dev_get(ps__vb_van_t *van, struct ibv_context *ctx, ps__vb_dev_t **dev_p);
/* Frees every device context (close, after the threads and QPs are gone). */
void ps__vb_dev_destroy_all(ps__vb_van_t *van);
/* Posts rx back to its SRQ with a fresh (or the same) buffer (poller). */
ps_status_t ps__vb_rx_post(ps__vb_dev_t *dev, ps__vb_rx_t *rx, int fresh);
/* A registered buffer from the device pool, and its lkey/rkey. */
ps_status_t ps__vb_pool_get(ps__vb_dev_t *dev, size_t len, ps_slice_t *slice_p, uint32_t *lkey_p);
/* The lkey of a slice's registration: from the pool, or the cache
 * (*mr_p taken, to be put). PS_ERR_* when it cannot be registered. */
ps_status_t ps__vb_slice_lkey(ps__vb_dev_t *dev, const ps_slice_t *slice, uint32_t *lkey_p,
                              ps_rdma_mr_t **mr_p);

/* ---- verbs_cm.c ---- */
ps_status_t ps__vb_cm_bind(ps_van_t *v, ps_node_t *node, int max_retry);
ps_status_t ps__vb_cm_connect(ps_van_t *v, const ps_node_t *peer, int my_id);
void ps__vb_cm_disconnect(ps_van_t *v, int node_id);
ps_status_t ps__vb_cm_start(ps__vb_van_t *van);
/* Every QP is established (and, with a job secret, the responder has the
 * initiator's proof): READY, into the peer table, queued sends go. CM
 * thread, or the poller for the proof. */
void ps__vb_conn_ready(ps__vb_conn_t *c);
/* The responder turns an identified-but-unproved connection away: one log
 * line, PS_ERR_AUTH, the QPs disconnected; the peer was never in the
 * table. */
void ps__vb_conn_refuse(ps__vb_conn_t *c, const char *why);
void ps__vb_cm_stop(ps__vb_van_t *van);
/* close(): destroys every QP and id (threads stopped). */
void ps__vb_cm_destroy_all(ps__vb_van_t *van);

/* ---- verbs_send.c ---- */
ps_status_t ps__vb_send(ps_van_t *v, const ps_msg_t *msg);
/* Queues a control message (START/GRANT/DROP/HELLO) on conn, ahead of
 * messages, and posts it when there is room. */
ps_status_t ps__vb_send_ctrl(ps__vb_conn_t *conn, const ps__vb_ctrl_t *c);
/* Posts what conn's queues hold while there is room (conn->lock not held). */
void ps__vb_conn_kick(ps__vb_conn_t *conn);
/* Posts `msg` (a handshake message, at most PS__VB_CTRL_LEN bytes) on QP 0
 * before anything else, although the connection is not READY yet. */
ps_status_t ps__vb_send_first(ps__vb_conn_t *conn, const void *msg, size_t len);
/* A GRANT (or refusal / re-grant) arrived on conn (poller). */
void ps__vb_on_grant(ps__vb_conn_t *conn, const ps__vb_ctrl_t *c);
/* One QP's signaled WR of tx completed (poller). */
void ps__vb_tx_complete(ps__vb_txwc_t *wc, int ok);
/* Releases a tx that never reached the device (or close). */
void ps__vb_tx_release(ps__vb_tx_t *tx);
/* Detaches conn's queues (conn->lock held by the caller) for release. */
ps__vb_tx_t *ps__vb_conn_take_queues(ps__vb_conn_t *conn);
void ps__vb_tx_release_list(ps__vb_tx_t *list);
/* close(): frees every tx still alive. */
void ps__vb_tx_free_all(ps__vb_van_t *van);

/* ---- verbs_poll.c ---- */
ps_status_t ps__vb_poll_start(ps__vb_van_t *van);
/* Drains outstanding sends (bounded) and stops the completion loop:
 * PS_OK, or PS_ERR_TIMED_OUT when its thread is stuck in the driver (then
 * nothing it may touch can be freed). */
ps_status_t ps__vb_poll_stop(ps__vb_van_t *van);
/* Adds a device's completion channel to the poller. */
ps_status_t ps__vb_poll_add_dev(ps__vb_van_t *van, ps__vb_dev_t *dev);
/* close(): messages still held for slave chunks. */
void ps__vb_poll_drop_held(ps__vb_conn_t *conn);

/* ---- verbs_steer.c ---- */
/* The application's buffer for one segment of the request `start` (a
 * START with PS__VB_RDV_STEER from conn), registered: 1 and *steer_p, or 0
 * when none is named or it cannot be registered. */
int ps__vb_steer_find(ps__vb_van_t *van, ps__vb_conn_t *conn, const ps__vb_ctrl_t *start,
                      ps__vb_steer_t *steer_p);
/* Ends a registration a steer holds (ps__vb_grants_ops_t.steer_release;
 * dev is the ps__vb_dev_t). */
void ps__vb_steer_release(void *dev, void *handle);
/* 1 when recv_buffer still names the steered region of `regrant` (a
 * re-grant with PS__VB_RDV_STEER for conn). */
int ps__vb_steer_still_named(ps__vb_van_t *van, ps__vb_conn_t *conn,
                             const ps__vb_ctrl_t *regrant);
/* Segment `index` of `meta` (len bytes) was written into the steered
 * `region`: handed over as the buffer recv_buffer names now (the region
 * itself, no copy; or another host buffer, copied), else as a view of the
 * region. */
ps_status_t ps__vb_steer_land(ps__vb_van_t *van, const ps_meta_t *meta, unsigned index,
                              const ps_slice_t *region, uint64_t len, ps_slice_t *seg_p);

/* This van's own variables (verbs_config_vars.h), a config table of their own:
 * read them as ps_config_*(PS_VERBS_CFG(NAME), ...). */
typedef enum {
#define PS_CONFIG_VAR PS_CONFIG_INDEX
#include "ps/rdma/verbs/verbs_config_vars.h"
#undef PS_CONFIG_VAR
} ps__verbs_config_index_t;
extern ps_config_table_t ps__verbs_config;
#define PS_VERBS_CFG(_name) ps_config_table_id(&ps__verbs_config, PS_CFGI_##_name)

#endif /* PS_RDMA_VERBS_VERBS_INTERNAL_H_ */

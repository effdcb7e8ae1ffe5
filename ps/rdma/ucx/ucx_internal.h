/*
 * Internals of the UCX van, shared by its files (ucx_van.c: lifecycle, the
 * progress thread, the ops table; ucx_ctx.c: the UCP context and worker
 * and the UCX settings ps adjusts; ucx_boot.c: the listening socket and
 * the handshake's sockets; ucx_conn.c: connections, endpoints, handshake,
 * failures; ucx_send.c: the send path; ucx_recv.c: probing,
 * receiving, in-order delivery; ucx_wire.c: tags, frames, hello records).
 * Nothing here is visible outside ps/rdma/ucx.
 *
 * Connections. Every process listens on its node's ip:port with a TCP
 * socket of ps's own (ucx_boot.c), so the scheduler is reached at
 * DMLC_PS_ROOT_URI:PORT as with the other vans. connect(peer) opens a TCP
 * connection to the peer's port; the handshake runs there (the job
 * secret's steps when one is set, then HELLO and ACK), and each side
 * tells the other its control worker's address and, when it has a data
 * worker, that one's. Both then make their endpoints from the other's
 * addresses and the TCP connection is closed: the "control" endpoint, to
 * the control worker, with peer-failure handling, whose errors become
 * peer_failed(); and the "data" endpoint, to the data worker, without it —
 * UCX 1.13 refuses shared-memory transports on endpoints that have it —
 * kept when UCX picked shared memory for it (the peer is on this host).
 * Everything is then sent on the data endpoint; the control endpoint still
 * reports the peer's failure. Without a data worker (or with a peer on
 * another host) data rides on the control endpoint. Two processes that
 * hold several connections to each other hold as many endpoints each way;
 * UCX pairs them in the order they were made, so which of the peer's
 * endpoints one of ours talks to is not ps's choice: nothing depends on
 * it (the cookie, below, says which connection a message is for), and an
 * endpoint is closed on its own only when its peer is failed anyway.
 *
 * Two workers. The shared-memory transports live in a UCP context and
 * worker of their own (the data worker), the network transports in the
 * control worker (control endpoints, data to other hosts). Every ucp_worker_progress() polls each
 * transport of its worker, and tcp's poll is a system call (epoll_wait):
 * with one worker, messages between processes of one host paid for it on
 * every turn of the loop. The loop progresses the data worker every turn
 * and the control worker every PS__UCX_CTL_EVERY turns, or every turn
 * while some connection moves its data over a control endpoint (a peer on
 * another host, or no shared memory); the handshakes' sockets (ucx_boot.c)
 * every PS__UCX_CTL_EVERY turns, and at once when they woke the loop. When UCX_TLS cannot be split (a
 * "^..." list that excludes a shared-memory transport), or the
 * shared-memory context cannot be created, there is one worker
 * (van->dworker NULL) and data rides on the control endpoints, over the
 * network transports also between processes of one host: a data endpoint
 * on the control worker would be paired by UCX with a control endpoint of
 * the peer's, whose error handling differs, which UCX refuses.
 *
 * Messages. A message is one META message (frame, meta, the segments up
 * to BYTEPS_UCX_SHORT_THRESH bytes) and one DATA message per larger
 * segment. META messages are UCX active messages (id PS__UCX_AM_META_ID,
 * on every worker that carries data) carrying the receiver's cookie, the
 * sequence number and the segment bitmap (the "META tag" below, 8 bytes
 * little-endian) as their header, or, in a small message sent eagerly, as
 * the first 8 bytes of their data (ucx_send.c); DATA messages are tagged,
 * under a tag the receiver knows from
 * the META message, so that each lands straight in its destination. An
 * active message reaches its handler without a probe, an unexpected-queue
 * descriptor or a receive request (ucx_recv.c). A lane message (send_lane,
 * ps/net/codec/lane.h) is a small META whose data after the tag is the lane
 * message instead of a frame (told apart by its first byte); the handler
 * copies it into a slot and it is handed to deliver_lane after the
 * progress call, or, with a receive of its connection ahead of it, it takes
 * a receive record and its turn.
 *
 * Identification. HELLO (node id, nonce, a cookie, seq0, the addresses)
 * goes over the TCP connection, and ACK comes back on it with the
 * acceptor's: the acceptor knows which connection it speaks with from the
 * socket. A cookie is a number
 * the receiver of a direction hands out per connection: every META header
 * and DATA tag carries the receiver's cookie, which maps the message to
 * the connection and hence to the node that proved itself on it (never
 * the wire's claim alone). UCX does not tell which endpoint a message came
 * from, so any connected peer could put another connection's cookie in
 * its messages: cookies are random, and with its
 * cookie the receiver hands out a random first sequence number (seq0) that
 * only the two ends know. A META message counts as the connection's only
 * with exactly the next sequence number expected on it; anything else is
 * dropped unattributed, and DATA messages are only ever received under the
 * exact tag of an attributed META message. A HELLO may not claim a node id
 * that another live connection (another connect(), its own nonce) already
 * speaks for. Until the ACK arrives, sends queue on the connection. A node
 * id learnt later (set_node_id) is re-announced by a hello META message in
 * line with the data.
 *
 * Order. UCX documents that one endpoint's tagged messages match in the
 * order they were sent, not that its active messages reach the handler in
 * that order. In UCX 1.13 they do, for the transports and protocols used
 * here, for the same reason as tagged ones (which, without tag offload,
 * travel as active messages of UCX's own on the same lane): an endpoint
 * sends every eager fragment and every rendezvous announcement (RTS) of
 * its active messages on one lane (its AM lane), in posting order (a send
 * that finds the lane busy waits in the lane's pending queue, and the
 * transport refuses later sends while that queue is not empty); tcp,
 * posix/sysv (a FIFO per receiver) and cma (data only, its RTS rides on
 * the AM lane) keep a lane's order; a multi-fragment eager message is
 * handed over when its last fragment arrives, and fragments of one lane
 * arrive in order; a rendezvous message reaches the handler when its RTS
 * arrives, before its data is fetched. ps does not rely on it blindly: a
 * META message whose sequence number is ahead of the expected one by at
 * most PS__UCX_ORDER_WINDOW (what a reordering would look like) fails the
 * connection with PS_ERR_PROTOCOL and one log line, after the messages
 * before it are delivered — never a silent loss or misdelivery. One
 * further ahead or behind is a stranger's guess, dropped as before. (A
 * stranger that knows the cookie lands in the window with a chance of
 * 2^-27 per message, and only ends the connection.) No reorder buffer:
 * held messages would be attributed before the gap is filled.
 *
 * Threads and locks. One progress thread runs every UCX callback (inside
 * ucp_worker_progress, with UCX's worker lock held) and owns endpoint
 * lifecycles, receives and timers; with busy polling, a thread waiting for
 * a request may drive that loop instead (the progress op) while the
 * progress thread stands back. Whoever runs the loop (van->loop,
 * ps/net/van/progress_loop.h) holds its lock, and "progress thread" below
 * means that one. Any thread may call send(),
 * which posts to UCX directly under the connection's lock. Lock order:
 * the loop's lock -> the peer table's (van->peers.lock) -> conn->lock -> (UCX worker lock); ev_lock and
 * ops_lock are leaves. UCX callbacks therefore never take a ps lock other
 * than ev_lock, and never call back into the postoffice: they record what
 * happened, and the progress thread acts on it after ucp_worker_progress()
 * returns. UCX runs receive callbacks and active-message handlers only
 * inside ucp_worker_progress(), i.e. on the thread that runs the loop:
 * they may read and write state marked "progress thread only" (the META
 * handler looks up the cookie and takes the sequence number there).
 */
#ifndef PS_RDMA_UCX_UCX_INTERNAL_H_
#define PS_RDMA_UCX_UCX_INTERNAL_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include "ps/rdma/ucx/ucx_dl.h" /* after <ucp/api/ucp.h> */

#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/log_level.h"
#include "ps/base/mpool.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/lane.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/admission.h"
#include "ps/net/van/handover.h"
#include "ps/net/van/peer_table.h"
#include "ps/net/van/progress_loop.h"
#include "ps/net/van/base.h"
#include "ps/net/van/handshake.h"
#include "ps/net/van/van.h"
#include "ps/rdma/ucx/ucx_hs.h"

/* ---- tags (ucx_wire.c): DATA tags, and META headers (little-endian) ----
 *   bits 63..62  kind: META (meta, maybe small segments inline) or DATA
 *   bits 61..40  the receiver's cookie for the connection
 *   bits 39..4   sequence number of the message on the connection
 *   bits  3..0   META: which segments follow as DATA messages (bit i);
 *                DATA: the segment's index
 */
#define PS__UCX_KIND_META 1ull
#define PS__UCX_KIND_DATA 2ull
#define PS__UCX_KIND_SHIFT 62
#define PS__UCX_COOKIE_BITS 22
#define PS__UCX_COOKIE_SHIFT 40
#define PS__UCX_COOKIE_MASK ((1u << PS__UCX_COOKIE_BITS) - 1)
#define PS__UCX_SEQ_SHIFT 4
#define PS__UCX_SEQ_MASK ((1ull << 36) - 1)
#define PS__UCX_LOW_MASK 0xfull
#define PS__UCX_META_TAG (PS__UCX_KIND_META << PS__UCX_KIND_SHIFT)
#define PS__UCX_KIND_MASK (3ull << PS__UCX_KIND_SHIFT)

_Static_assert(PS_MSG_MAX_DATA <= 4, "segment bitmap of the META tag is 4 bits");

static inline ucp_tag_t ps__ucx_tag(uint64_t kind, uint32_t cookie, uint64_t seq, unsigned low)
{
    return (kind << PS__UCX_KIND_SHIFT) |
           ((uint64_t)(cookie & PS__UCX_COOKIE_MASK) << PS__UCX_COOKIE_SHIFT) |
           ((seq & PS__UCX_SEQ_MASK) << PS__UCX_SEQ_SHIFT) | (low & PS__UCX_LOW_MASK);
}
static inline uint32_t ps__ucx_tag_cookie(ucp_tag_t tag)
{
    return (uint32_t)(tag >> PS__UCX_COOKIE_SHIFT) & PS__UCX_COOKIE_MASK;
}
static inline uint64_t ps__ucx_tag_seq(ucp_tag_t tag)
{
    return (tag >> PS__UCX_SEQ_SHIFT) & PS__UCX_SEQ_MASK;
}
static inline unsigned ps__ucx_tag_low(ucp_tag_t tag)
{
    return (unsigned)(tag & PS__UCX_LOW_MASK);
}

/* The active-message id of META messages (header: the META tag, 8 bytes). */
#define PS__UCX_AM_META_ID 24
#define PS__UCX_AM_META_HDR 8
/* How far ahead of the expected sequence number a META message is taken
 * for a reordering (the connection fails) rather than a stranger's guess
 * (dropped). */
#define PS__UCX_ORDER_WINDOW 512
/* The handshake records (HELLO/ACK, job-secret steps): ucx_hs.h. */

/* Header + meta bytes a send op keeps inline. */
#define PS__UCX_HM_INLINE 512
/* Inline segments up to this many bytes in all are copied behind the
 * frame (one contiguous META message) rather than gathered. */
#define PS__UCX_FOLD_MAX 256
/* Lane messages one ucp_worker_progress() call may leave for delivery
 * without a receive record (ps__ucx_van_t.lane). */
#define PS__UCX_LANE_SLOTS 16
#define PS__UCX_MAX_STREAMS 8 /* incoming connections indexed per peer */

typedef struct ps__ucx_van ps__ucx_van_t;
typedef struct ps__ucx_conn ps__ucx_conn_t;

typedef enum {
    PS__UCX_NEW,  /* outgoing: not connected yet (or retrying) */
    PS__UCX_WAIT, /* outgoing: connecting, or waiting for ACK; incoming: for HELLO */
    PS__UCX_READY,
    PS__UCX_DEAD,
} ps__ucx_state_t;

/* A message being sent: the encoded header+meta, references on the
 * segments UCX reads, and the iovecs it reads them through (which must
 * outlive the requests). op_new() sets the fields marked "set by op_new"
 * (release reads them); everything else is written before it is read. */
typedef struct ps__ucx_op {
    struct ps__ucx_op *next;   /* the connection's queue, or the done list */
    struct ps__ucx_op *next_fl, *prev_fl; /* van->inflight (ops_lock) */
    int on_inflight;           /* set by op_new */
    ps__ucx_conn_t *conn;      /* referenced; set by op_new (NULL) */
    uint32_t pending;          /* atomic: requests in flight + 1 while posting */
    int failed;                /* atomic: a request completed with an error; set by op_new */
    unsigned sep_mask;         /* segments sent as DATA messages; set by op_new */
    unsigned ref_mask;         /* data[i] holds a reference; set by op_new */
    uint32_t num_data;         /* set by op_new */
    uint8_t *hm;               /* hm_inline or malloc'd; set by op_new (NULL) */
    size_t hm_len;
    uint64_t bytes;
    int folded;                /* the inline segments were copied behind the frame */
    uint32_t iovcnt;
    /* Referenced only where UCX reads them: DATA segments, and inline
     * ones unless they were copied behind the frame (ref_mask). */
    ps_slice_t data[PS_MSG_MAX_DATA];
    ucp_dt_iov_t iov[1 + PS_MSG_MAX_DATA];
    /* The META tag while UCX sends it: the active message's header, or,
     * right in front of hm_inline, the first bytes of its data. */
    uint8_t am_hdr[PS__UCX_AM_META_HDR];
    uint8_t hm_inline[PS__UCX_HM_INLINE];
} ps__ucx_op_t;
_Static_assert(offsetof(ps__ucx_op_t, hm_inline) ==
                   offsetof(ps__ucx_op_t, am_hdr) + PS__UCX_AM_META_HDR,
               "the META tag sits right in front of the inline frame");

/* A message being received (progress thread only). */
typedef struct ps__ucx_rx {
    struct ps__ucx_rx *next;   /* the connection's delivery queue */
    struct ps__ucx_rx *next_ready; /* van->rx_ready */
    struct ps__ucx_rx *next_all, *prev_all; /* van->rx_all (for cancel at close) */
    ps__ucx_van_t *van;
    ucp_worker_h worker;       /* the one the META message came on; DATA follows there */
    ps__ucx_conn_t *conn;      /* referenced; NULL: its connection was dropped, discarded */
    ucp_tag_t tag;             /* the META header */
    /* The META message's data as its handler got it, until ps__ucx_am_take
     * copies it (eager; UCX's descriptor, released then) or receives it
     * (rendezvous). */
    struct ps__ucx_rx *next_am; /* van->am_head */
    void *am_data;
    uint32_t am_skip;          /* bytes of am_data before the frame (the tag) */
    int am_kind;               /* what am_data is (ucx_recv.c: AM_DESC, AM_RNDV, AM_HEAP) */
    ps_slice_t staging;        /* the META message */
    size_t staging_len;
    void *reqs[1 + PS_MSG_MAX_DATA]; /* UCX requests in flight, for cancel */
    uint32_t outstanding;      /* requests not completed yet */
    int meta_done;             /* the META message has arrived */
    int parsed;                /* segments set up */
    int complete;              /* everything arrived (or failed) */
    int hello;                 /* a re-announcement: nothing to deliver */
    int bye;                   /* a goodbye: the connection ends after it */
    int lane;                  /* a lane message: staging goes to deliver_lane */
    int ready_queued;          /* on van->rx_ready */
    /* Inside a ucp_tag_*recv_nbx() call of this receive. UCX may complete
     * the request, callback included, before that call returns it (seen:
     * UCS_ERR_CANCELED right after the sender was killed):
     * the callback then neither queues the receive (its poster moves it
     * on; queued and then freed by its poster, it was used after free on
     * van->rx_ready) nor leaves the request, already freed, in `reqs`. */
    int posting;
    void *done_in_post;        /* such a request (never used again) */
    ps_status_t status;
    /* Segments whose DATA message UCX has not matched yet: no buffer until
     * it has (ps__ucx_rx_probe; each counted in outstanding). */
    uint32_t probe_mask;
    ps_msg_t msg;              /* a reused record clears what is above */
    uint64_t probe_len[PS_MSG_MAX_DATA]; /* where probe_mask says: the announced length */
} ps__ucx_rx_t;

/* An endpoint close request in flight (progress thread only). */
typedef struct ps__ucx_closing {
    struct ps__ucx_closing *next, *prev;
    ps__ucx_conn_t *conn;      /* referenced until the close completes */
    void *req;                 /* UCX's close request while it runs */
    int done;                  /* its callback came */
} ps__ucx_closing_t;

/* A UCX callback's record for the progress thread. */
typedef enum {
    PS__UCX_EV_EP_ERROR,   /* `conn`'s control endpoint failed */
    PS__UCX_EV_CLOSED,     /* an endpoint close request completed */
} ps__ucx_ev_kind_t;

typedef struct ps__ucx_ev {
    struct ps__ucx_ev *next;
    ps__ucx_ev_kind_t kind;
    ps__ucx_conn_t *conn;      /* referenced (EP_ERROR) */
    ps__ucx_closing_t *closing; /* CLOSED */
    ucs_status_t status;
} ps__ucx_ev_t;

struct ps__ucx_conn {
    ps__ucx_van_t *van;
    uint32_t refs;             /* atomic */
    int outgoing;
    int peer_id;               /* PS_NODE_EMPTY until known (incoming) */
    char addr_str[PS_SOCKADDR_STRLEN];

    /* Guarded by lock. Senders see the state, the queue and the send
     * endpoint; the progress thread changes them under it. */
    pthread_mutex_t lock;
    ps__ucx_state_t state;
    ucp_ep_h send_ep;          /* data_ep once READY */
    uint32_t remote_cookie;    /* the peer's cookie for our messages */
    uint64_t seq;              /* next message sequence number */
    ps__ucx_op_t *q_head, *q_tail; /* sends waiting for READY */
    /* Atomic (read without the lock): the longest META, tag included,
     * send_small() asks UCX to send at once; lowered below a length UCX
     * refused and then sent without queueing (above the transport's
     * short-message limit). */
    uint32_t now_max;

    /* Progress thread only. */
    ps_sockaddr_t addr;        /* outgoing: the peer's listener */
    ucp_ep_h ctl_ep;           /* with peer-failure handling */
    ucp_ep_h data_ep;          /* ctl_ep, or a worker-address endpoint */
    uint32_t local_cookie;     /* ours: the peer tags its messages with it */
    uint64_t rx_seq;           /* the sequence number of the next META from the peer */
    int rx_broken;             /* a META arrived out of order: the rest is dropped */
    uint64_t nonce;
    int hello_id;              /* the id connect() was given (PS_NODE_EMPTY: ours now) */
    uint64_t connect_deadline_ns;
    int admit_pending;         /* accepted, no hello yet: counted in van->adm */
    uint64_t retry_at_ns;      /* NEW: when to (re)try */
    uint32_t backoff_ms;
    int attempts;
    int linked;
    int ctl_data;              /* counted in van->ctl_data_conns */
    struct ps__ucx_conn *next, *prev;      /* van->conns */
    ps_van_handover_link_t start_link;     /* on van->handover's start list */
    ps_van_handover_link_t close_link;     /* on van->handover's close list */
    ps__ucx_rx_t *rx_head, *rx_tail;       /* messages in arrival order */

    /* The handshake's TCP connection (ucx_boot.c; progress thread only):
     * -1 before and after it. */
    int boot_fd;
    int boot_connecting;       /* outgoing: connect() not finished */
    int boot_heard;            /* outgoing: the peer sent something */
    int boot_linger;           /* close once btx has left */
    uint8_t *brx;              /* bytes received, not yet a whole record */
    uint32_t brx_len, brx_cap;
    uint8_t *btx;              /* records not yet taken by the socket */
    uint32_t btx_off, btx_len;

    /* Job-secret handshake (ucx_auth.c; progress thread only). */
    ps_van_hs_t hs;
};

/* The connections of one peer node. */
typedef struct {
    ps_van_peer_t hdr;                         /* first: the peer table's */
    ps__ucx_conn_t *out;                       /* ours */
    ps__ucx_conn_t *in[PS__UCX_MAX_STREAMS];   /* the peer's, identified */
    int num_in;
} ps__ucx_peer_t;

struct ps__ucx_van {
    ps_van_base_t base; /* first: handle, params, callbacks, id, counters */
    ps_frame_limits_t limits;
    uint64_t inline_max;       /* segments up to this size ride in the META message */
    /* PS_VAN_DEVICE(PS_BUF_MEM_CUDA) where UCX moves CUDA memory itself
     * (ucp_context_query lists it: a UCX built with its cuda transports):
     * CUDA segments go as DATA messages that UCX reads and writes, and the
     * van advertises device memory. 0 otherwise. */
    uint32_t device_kinds;
    uint64_t prealloc;         /* PS_RECV_PREALLOC_BYTES: bigger segments wait for their match */
    int probe_pending;         /* receives with a probe_mask (progress thread only) */

    /* UCX (ucx_ctx.c). */
    ucp_context_h context;
    ucp_worker_h worker;       /* control worker: listener, control endpoints */
    int efd;                   /* the worker's event fd */
    ucp_context_h dcontext;    /* shared memory only, or NULL (one worker) */
    ucp_worker_h dworker;      /* data worker: endpoints to same-host peers, or NULL */
    int defd;                  /* its event fd, or -1 */
    ucp_address_t *ctl_addr;   /* the control worker's, its network transports */
    size_t ctl_addr_len;
    ucp_address_t *data_addr;  /* the data worker's, or NULL */
    size_t data_addr_len;
    /* The handshake's sockets (ucx_boot.c). */
    int bfd;                   /* epoll: the listener and the handshakes' sockets */
    int boot_listen_fd;        /* atomic: -1 until bind(); its address is the
                                  listener's epoll data */
    ps_van_admission_t adm;    /* accepted connections before their hello */

    /* The loop (everything "progress thread only" below): on the progress
     * thread, or on a waiting thread that drives it through the progress
     * op (busy polling). It sleeps on efd, defd and bfd. */
    ps_van_loop_t loop;
    uint64_t posted;           /* atomic: sends left in progress by other threads */
    uint64_t posted_seen;      /* `posted` at the start of the loop's last poll */

    ps_van_peer_table_t peers; /* ps__ucx_peer_t by node id */

    /* Handed from other threads to the progress thread: outgoing
     * connections to start, connections disconnect() took away. */
    ps_van_handover_t handover;

    /* Filled by UCX callbacks (leaf lock), drained by the progress thread. */
    pthread_mutex_t ev_lock;
    ps__ucx_ev_t *ev_head, *ev_tail;
    ps__ucx_op_t *done_ops;

    /* The META handler's argument per worker (it must know whose
     * descriptor it holds). */
    struct ps__ucx_am_arg {
        ps__ucx_van_t *van;
        ucp_worker_h worker;
    } am_arg[2];

    /* Progress thread only. */
    ps__ucx_conn_t *conns;     /* every live connection */
    /* META messages the handler took during the last ucp_worker_progress(),
     * in arrival order, for ps__ucx_am_take(). */
    ps__ucx_rx_t *am_head, *am_tail;
    /* Lane messages (ps/net/codec/lane.h) the handler copied during the
     * last ucp_worker_progress(), for ps__ucx_lane_deliver(): those of
     * connections with no receive ahead of them, the usual case. (Others,
     * and more than PS__UCX_LANE_SLOTS in one turn, take a receive record
     * like any META, which keeps each connection's order.) */
    unsigned lane_n;
    struct ps__ucx_lane_slot {
        int sender;
        uint32_t len;
        /* 8-byte aligned (a payload's keys behind the 8-byte header). */
        uint8_t bytes[PS_LANE_MAX_BYTES] __attribute__((aligned(8)));
    } lane[PS__UCX_LANE_SLOTS];
    ps__ucx_conn_t **cookies;  /* cookie -> connection (open addressing by value) */
    uint32_t cookies_cap;
    uint32_t num_cookies;
    ps__ucx_rx_t *rx_ready;    /* receives with news */
    ps__ucx_rx_t *rx_all;      /* every receive in flight */
    ps__ucx_rx_t *rx_free;     /* receive records to reuse (no heap per message) */
    unsigned rx_free_count;
    /* A staging block nobody else references any more, for the next META
     * message that fits (ucx_recv.c): a small message then takes no pool
     * lock on either side of its life. Empty or whole (off 0, len =
     * the block's length). */
    ps_slice_t rx_spare;
    unsigned ctl_tick;         /* loop turns since the control worker was progressed */
    unsigned boot_tick;        /* loop turns since the handshakes' sockets were polled */
    int ctl_data_conns;        /* READY connections whose data rides on the control worker */
    unsigned clock_tick;       /* loop turns since the clock was read for the timers */
    uint64_t timer_scan_ns;    /* when ps__ucx_run_timers() walks the connections again
                                * (0: now, something changed) */
    uint64_t timer_next_ns;    /* the earliest timer it found (UINT64_MAX: none) */
    struct ps__ucx_closing *closing; /* endpoint close requests in flight */

    int64_t inflight_ops;      /* atomic: send ops not released yet */
    pthread_mutex_t ops_lock;  /* leaf: the posted ops UCX has not finished */
    ps__ucx_op_t *inflight;

    ps_mpool_t ops;
    /* One released op kept aside (atomic exchange, any thread): a small
     * round trip has one send in flight, which then takes no pool lock. */
    ps__ucx_op_t *op_spare;
    struct ps_rdma_buf_pool *pool; /* what data lands in when nobody names a place */
};

/* The van behind the handle its ops receive (the base, and so the handle,
 * come first). */
static inline ps__ucx_van_t *ps__ucx_of(ps_van_t *v)
{
    return (ps__ucx_van_t *)v;
}

/* ---- ucx_van.c ---- */
void ps__ucx_wake(ps__ucx_van_t *van);
/* Queues a callback's record for the progress thread (any thread). */
void ps__ucx_post_event(ps__ucx_van_t *van, ps__ucx_ev_t *ev);

/* ---- ucx_ctx.c ---- */
/* The control worker is progressed at least every this many loop turns. */
#define PS__UCX_CTL_EVERY 256
/* Timers are walked at most this often unless something changed. */
#define PS__UCX_TIMER_SCAN_NS 1000000ull
/* A spinning loop reads the clock (for the timers and its spin limit)
 * every this many turns, or at once when connections changed: a
 * clock_gettime() every turn was a fifth of an idle turn's cost, and
 * timers are milliseconds apart while a turn is well under one. */
#define PS__UCX_CLOCK_EVERY 32
ps_status_t ps__ucx_ctx_open(ps__ucx_van_t *van);
void ps__ucx_ctx_close(ps__ucx_van_t *van);
/* "sysv/memory cma/memory" for an endpoint's lanes, for logs. */
void ps__ucx_ep_transports(ucp_ep_h ep, char *buf, size_t cap);
ps_status_t ps__ucx_status(ucs_status_t st);

/* ---- ucx_boot.c (progress thread, bind() aside) ---- */
ps_status_t ps__ucx_boot_open(ps__ucx_van_t *van);
void ps__ucx_boot_close(ps__ucx_van_t *van); /* the listener and the epoll set */
ps_status_t ps__ucx_bind(ps_van_t *v, ps_node_t *node, int max_retry);
/* Starts conn's TCP connection to conn->addr: 0, or the errno of a connect
 * that failed at once. */
int ps__ucx_boot_connect(ps__ucx_conn_t *conn);
/* Sends a record (header fields, payload) on conn's TCP connection. */
ps_status_t ps__ucx_boot_send(ps__ucx_conn_t *conn, int type, int node_id, uint32_t cookie,
                              uint64_t nonce, uint64_t seq0, const void *payload, size_t len);
/* Closes conn's TCP connection once what it sent has left; at once: shut. */
void ps__ucx_boot_linger(ps__ucx_conn_t *conn);
void ps__ucx_boot_shut(ps__ucx_conn_t *conn);
/* Accepts, reads and writes what is ready; returns how many events. */
int ps__ucx_boot_poll(ps__ucx_van_t *van);

/* ---- ucx_conn.c ---- */
/* What ucx_boot.c reports. A connection accepted on fd (admitted: counted
 * pending), linked, or NULL; conn's TCP connection is up (send the first
 * step); it ended or failed (err: its errno, 0 at EOF); a whole record
 * arrived (header and payload, `len` bytes). */
ps__ucx_conn_t *ps__ucx_conn_accepted(ps__ucx_van_t *van, int fd, const struct sockaddr *sa,
                                      socklen_t len);
void ps__ucx_conn_greet(ps__ucx_conn_t *conn);
void ps__ucx_conn_boot_lost(ps__ucx_conn_t *conn, int err);
void ps__ucx_conn_on_record(ps__ucx_conn_t *conn, const uint8_t *rec, size_t len);
ps_status_t ps__ucx_connect(ps_van_t *v, const ps_node_t *peer, int my_id);
void ps__ucx_disconnect(ps_van_t *v, int node_id);
ps_status_t ps__ucx_set_node_id(ps_van_t *v, int node_id);
/* Progress thread, every turn: connections handed over (nothing to do,
 * without a lock, when none were), events, timers. */
void ps__ucx_start_pending(ps__ucx_van_t *van);
void ps__ucx_handle_event(ps__ucx_van_t *van, ps__ucx_ev_t *ev);
/* ms to the next timer, -1 none; `now` from ps_time_now_ns(). */
int ps__ucx_run_timers(ps__ucx_van_t *van, uint64_t now);
/* Closes a connection (idempotent); `why` != PS_OK with notify tells the
 * postoffice the peer failed (and closes its other connections). */
void ps__ucx_conn_fail(ps__ucx_conn_t *conn, ps_status_t why, int notify);
/* For ucx_auth.c: HELLO, once the job secret is proved. */
ps_status_t ps__ucx_send_hello(ps__ucx_conn_t *conn);

/* ---- ucx_auth.c (job secret; see there) ---- */
ps_status_t ps__ucx_auth_start(ps__ucx_conn_t *conn, int my_id); /* instead of HELLO */
void ps__ucx_auth_on_hs(ps__ucx_conn_t *conn, int type, const uint8_t *data, size_t len);
int ps__ucx_auth_hello_ok(ps__ucx_conn_t *conn, int id); /* 0: refused (logged) */
int ps__ucx_auth_ack_ok(ps__ucx_conn_t *conn);           /* 0: failed (logged, closed) */
static inline ps__ucx_conn_t *ps__ucx_conn_ref(ps__ucx_conn_t *conn)
{
    __atomic_add_fetch(&conn->refs, 1, __ATOMIC_RELAXED);
    return conn;
}
void ps__ucx_conn_unref(ps__ucx_conn_t *conn);
ps__ucx_conn_t *ps__ucx_conn_lookup(ps__ucx_van_t *van, uint32_t cookie);
/* The connection send() uses for a node: referenced, or NULL. */
ps__ucx_conn_t *ps__ucx_peer_send_conn(ps__ucx_van_t *van, int id);
/* Records an identified incoming connection under its id (write lock). */
ps_status_t ps__ucx_peer_add_in(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int id);
/* What a send to a node without a connection returns: how its last one
 * failed, else PS_ERR_UNREACHABLE (logged). */
ps_status_t ps__ucx_peer_unconnected(ps__ucx_van_t *van, int id);
/* The same with the peer table's lock held (read) by the caller, not referenced:
 * valid until the caller unlocks. */
ps__ucx_conn_t *ps__ucx_peer_send_conn_locked(ps__ucx_van_t *van, int id);
/* close(): every connection down, endpoints closed (bounded). */
void ps__ucx_close_all(ps__ucx_van_t *van);
/* close(), before the worker goes: gives back the close requests that did
 * not finish (endpoints to peers that are gone); UCX insists. */
void ps__ucx_abandon_closing(ps__ucx_van_t *van);
/* Whether conn (accepted, HELLO nonce `nonce`) may speak for node `id`: not
 * while another live incoming connection from another connect() does, as
 * in the TCP van (a stranger cannot take over a running node's id). */
int ps__ucx_may_claim(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int id, uint64_t nonce);

/* ---- ucx_send.c ---- */
ps_status_t ps__ucx_send(ps_van_t *v, const ps_msg_t *msg);
/* Hands the lane messages the handler copied to deliver_lane, in arrival
 * order; returns how many. Before ps__ucx_rx_process() in a turn: they
 * arrived before anything its receives hold of their connections. */
int ps__ucx_lane_deliver(ps__ucx_van_t *van);
/* The van's send_lane op (ps/net/van/van.h): the lane message goes as a
 * small META, sent at once when UCX takes it, in sequence with the others. */
ps_status_t ps__ucx_send_lane(ps_van_t *v, int recver, uint8_t *bytes, size_t len);
/* Queues or posts an op on conn (takes the op, and a reference on conn
 * the caller holds: the op keeps it). *sent_p (if not NULL): 1 when UCX
 * took all of it at once (posted, and no request left in flight). */
ps_status_t ps__ucx_conn_submit(ps__ucx_conn_t *conn, ps__ucx_op_t *op, int *sent_p);
/* Posts what waited for READY (conn->lock held); returns the posted ops,
 * which the caller hands to ps__ucx_ops_put_list() after unlocking. */
ps__ucx_op_t *ps__ucx_conn_post_queued(ps__ucx_conn_t *conn);
void ps__ucx_ops_put_list(ps__ucx_van_t *van, ps__ucx_op_t *list);
/* Progress thread: releases ops UCX finished; failures fail the connection. */
void ps__ucx_process_done(ps__ucx_van_t *van);
/* Releases queued ops of a dead connection (lock not held). */
void ps__ucx_ops_free_list(ps__ucx_van_t *van, ps__ucx_op_t *list);
void ps__ucx_op_release(ps__ucx_van_t *van, ps__ucx_op_t *op);
/* close(): the spare op back to the pool (no op in use any more). */
void ps__ucx_op_spare_free(ps__ucx_van_t *van);
/* How many ops posted on conn UCX has not finished (any thread). */
int ps__ucx_conn_sends_busy(ps__ucx_van_t *van, const ps__ucx_conn_t *conn);
/* The van's own META message without data (a hello, a goodbye) as an op. */
ps_status_t ps__ucx_note_op(ps__ucx_van_t *van, const ps_meta_t *meta, ps__ucx_op_t **op_p);

/* ---- ucx_recv.c ---- */
/* The META handler (arg: van->am_arg[i]); inside ucp_worker_progress() on
 * the thread that runs the loop. It attributes the message and copies it
 * into the spare staging block, else keeps it for ps__ucx_am_take(); no
 * ps lock, no postoffice. */
ucs_status_t ps__ucx_am_meta(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param);
/* After ucp_worker_progress(): takes the META messages its handler kept
 * (copies or receives them, gives UCX its descriptors back). Returns
 * how many. */
int ps__ucx_am_take(ps__ucx_van_t *van);
/* Finishes receives that had news, delivers in order. */
void ps__ucx_rx_process(ps__ucx_van_t *van);
/* After ucp_worker_progress(), while van->probe_pending: gives each
 * large segment that waits for its DATA message a buffer once UCX has
 * matched that message. Returns how many it matched. */
int ps__ucx_rx_probe(ps__ucx_van_t *van);
/* A dead connection: delivers whole messages that arrived in order (with
 * `deliver`), cancels and drops the rest. Returns how many of its
 * receives UCX still holds requests of (matched ones cannot be
 * cancelled). */
int ps__ucx_rx_drop_conn(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int deliver);
/* How many receives of connections already dropped (ps__ucx_rx_drop_conn)
 * UCX still holds requests of. */
int ps__ucx_rx_dropped_busy(ps__ucx_van_t *van);
/* close(): cancels every receive (after the thread stopped), and frees
 * them once the worker is gone. */
void ps__ucx_rx_cancel_all(ps__ucx_van_t *van);
void ps__ucx_rx_free_all(ps__ucx_van_t *van);

/* ---- ucx_wire.c ---- */
ps_status_t ps__ucx_encode_frame(ps__ucx_van_t *van, const ps_meta_t *meta, const uint64_t *lens,
                                 uint32_t num_data, uint8_t *buf, size_t cap, uint8_t **hm_p,
                                 size_t *len_p, uint8_t **heap_p);

/* This van's log component "ucx" (registered by ucx_van.c). */
extern ps_log_component_t ps__ucx_log;
#define PS_LOG_UCX ps__ucx_log

/* This van's own variables (ucx_config_vars.h), a config table of their own:
 * read them as ps_config_*(PS_UCX_CFG(NAME), ...). */
typedef enum {
#define PS_CONFIG_VAR PS_CONFIG_INDEX
#include "ps/rdma/ucx/ucx_config_vars.h"
#undef PS_CONFIG_VAR
} ps__ucx_config_index_t;
extern ps_config_table_t ps__ucx_config;
#define PS_UCX_CFG(_name) ps_config_table_id(&ps__ucx_config, PS_CFGI_##_name)

#endif /* PS_RDMA_UCX_UCX_INTERNAL_H_ */

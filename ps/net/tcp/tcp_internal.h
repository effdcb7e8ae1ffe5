/*
 * Internals of the TCP van, shared by its files (tcp_van.c: lifecycle,
 * peers and the progress thread; tcp_conn.c: sockets, bind, connect,
 * accept, teardown; tcp_send.c: the send path; tcp_recv.c: the receive
 * state machine; tcp_wire.c: frames and hellos). Nothing here is visible
 * outside ps/net/tcp.
 *
 * Threads. One progress thread per van owns every socket's lifecycle, all
 * reading, and the flushing of queued sends; any thread may call send().
 * With busy polling a waiting thread may run the event loop instead
 * (tcp_van.c, the progress op): "the progress thread" below means whoever
 * runs van->loop (ps/net/van/progress_loop.h).
 *   - van->sock.peers (id -> connections) is guarded by its lock (a rwlock:
 *     senders read it, connection set-up and teardown write it).
 *   - conn->send_lock guards a connection's send queue, its state as
 *     senders see it, and writes to its socket; there is no global send
 *     lock. A sender keeps a connection alive with a reference taken
 *     under the read lock.
 *   - Everything else in a connection (receive state, the list of all
 *     connections, timers) is the progress thread's alone.
 *   - Callbacks run on the progress thread with no van lock held, so they
 *     may call send(), connect(), disconnect() and set_node_id() (never
 *     close(), which joins that thread).
 *
 * Several connections per peer (PS_TCP_CONNS_PER_PEER / DMLC_NUM_PORTS,
 * the larger wins; never to the scheduler, which only gets control
 * messages): connect() opens N streams to the peer, each announcing in its
 * hello the stream index, N and a nonce shared by the N streams. Stream 0
 * carries every frame. A frame whose data is at least PS__TCP_STRIPE_MIN
 * bytes has its data cut into N contiguous chunks (ps__tcp_stripe_range):
 * chunk 0 follows the meta on stream 0, chunk i travels as bare bytes on
 * stream i, which after its hello carries nothing else. A sender holds all
 * N send locks (taken in index order) while it queues a striped frame, so
 * chunks are in the same frame order on every stream. The receiver sets up
 * every segment's destination when stream 0 decoded the meta, reads chunk
 * i straight from stream i into its part of the destinations, and stops
 * reading stream 0 (EPOLLIN off) until the frame is complete, which keeps
 * delivery in send order; a stream i with no chunk to fill stops reading
 * too. Only our own streams (out[]) stripe; replies on a peer's
 * connections to us use its stream 0 alone. The striping rule (threshold,
 * cut) is part of the hello's version.
 */
#ifndef PS_NET_TCP_TCP_INTERNAL_H_
#define PS_NET_TCP_TCP_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/log_level.h"
#include "ps/base/mpool.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/net/auth.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/tcp/send_align.h"
#include "ps/net/van/admission.h"
#include "ps/net/van/handover.h"
#include "ps/net/van/sock_core.h"
#include "ps/net/van/progress_loop.h"
#include "ps/net/van/rx_pool.h"
#include "ps/net/van/base.h"
#include "ps/net/van/handshake.h"
#include "ps/net/van/van.h"

/* Most streams (connections) per peer this van opens or indexes. */
#define PS__TCP_MAX_STREAMS 8
/* Frames with at least this much data are striped over a peer's streams. */
#define PS__TCP_STRIPE_MIN (256u << 10)
/* Header plus meta of a data message fit here; bigger metas (control
 * messages with node lists) are encoded into a heap buffer. */
#define PS__TCP_HM_STACK 1024
/* Header plus meta bytes a queued entry keeps inline. */
#define PS__TCP_HM_INLINE 256
/* iovecs of one frame: header+meta, then the segments. */
#define PS__TCP_FRAME_IOV (1 + PS_MSG_MAX_DATA)
/* iovecs gathered from several queued frames into one sendmsg(). */
#define PS__TCP_FLUSH_IOV 64
/* Receive staging buffer: small frames arrive many to one read. */
#define PS__TCP_RBUF_SIZE (64u << 10)
/* Bytes one connection may read per wake-up before others get a turn. */
#define PS__TCP_READ_BUDGET (16u << 20)
/* While a large segment streams in, wake up for at least this much. */
#define PS__TCP_LOWAT_MIN (64u << 10)
#define PS__TCP_LOWAT_MAX (512u << 10)
/* Staging bytes a direct read into a segment may also take (the next
 * frame's start); more would only be copied again. */
#define PS__TCP_DIRECT_STAGING (16u << 10)

typedef enum {
    PS__TCP_H_WAKE,
    PS__TCP_H_LISTEN,
    PS__TCP_H_CONN,
} ps__tcp_handle_kind_t;

/* What epoll's data.ptr points at: the first member of each object. */
typedef struct {
    ps__tcp_handle_kind_t kind;
} ps__tcp_handle_t;

typedef enum {
    PS__TCP_CONNECTING, /* outgoing, socket not (yet) connected */
    PS__TCP_READY,
    PS__TCP_DEAD,
} ps__tcp_state_t;

typedef enum {
    PS__TCP_RX_HEADER,
    PS__TCP_RX_META,
    PS__TCP_RX_DATA,
    PS__TCP_RX_STRIPE_WAIT, /* stream 0: own chunk done, others still coming */
    PS__TCP_RX_CHUNK,       /* stream > 0 of a striped group, after its hello */
} ps__tcp_rx_phase_t;

/* Where received data goes: pieces of the destination segments. */
typedef struct {
    uint8_t *ptr;
    uint64_t len;
    /* Bytes allocated at ptr: less than len while a van buffer grows as
     * the data arrives (PS_RECV_PREALLOC_BYTES); then seg names the
     * message segment whose buffer it is. */
    uint64_t cap;
    int seg;
    /* The piece starts its segment and this stream alone fills it in
     * order: its progress is reported (ps_slice_filled). */
    int reports;
} ps__tcp_piece_t;

/* A frame (or its unsent rest) waiting in a connection's send queue. It
 * holds references on the data slices until they are on the wire. */
typedef struct ps__tcp_entry {
    struct ps__tcp_entry *next;
    struct iovec iov[PS__TCP_FRAME_IOV];
    int iovcnt;
    int iov_idx;      /* first iovec not completely sent */
    uint64_t bytes;   /* bytes still to send */
    ps_slice_t data[PS_MSG_MAX_DATA];
    uint32_t num_data;
    uint8_t *hm;      /* header + meta: hm_inline or malloc'd */
    uint8_t hm_inline[PS__TCP_HM_INLINE];
} ps__tcp_entry_t;

typedef struct ps__tcp_van ps__tcp_van_t;

typedef struct ps__tcp_conn {
    ps__tcp_handle_t handle; /* first: epoll data */
    ps__tcp_van_t *van;
    uint32_t refs;          /* atomic: the van's + in-flight senders' */
    int outgoing;           /* 1: we connected; 0: accepted */
    int peer_id;            /* the node at the other end; PS_NODE_EMPTY until known */
    uint64_t nonce;         /* outgoing: ours; incoming: the peer's hello */
    int stream;             /* index among the peer's streams */
    ps_sockaddr_t addr;     /* the peer's address */
    char addr_str[PS_SOCKADDR_STRLEN];

    /* Guarded by send_lock (the progress thread also reads fd freely,
     * since only it changes it). */
    pthread_mutex_t send_lock;
    int fd;
    ps__tcp_state_t state;
    int epoll_out;          /* EPOLLOUT armed */
    ps__tcp_entry_t *sq_head, *sq_tail;

    /* Progress thread only. */
    uint64_t connect_deadline_ns;
    uint64_t retry_at_ns;   /* 0: a connect attempt is in flight */
    uint32_t backoff_ms;
    int hello_seen;
    int admit_pending;      /* accepted, handshake unfinished: counted in van->sock.adm */
    uint64_t hs_deadline_ns; /* when admit_pending: drop it then */
    int in_epoll;
    int linked;             /* on van->conns */
    struct ps__tcp_conn *next, *prev; /* van->conns */
    ps_van_handover_link_t start_link; /* on van->handover's start list */
    ps_van_handover_link_t close_link; /* on van->handover's close list */
    struct ps__tcp_conn *next_grave;   /* van->graveyard */

    /* Receive state machine (progress thread only). */
    uint8_t *rbuf;
    size_t rcap, rstart, rend;
    ps__tcp_rx_phase_t phase;
    ps_frame_header_t hdr;
    ps_msg_t rmsg;
    /* The data this stream reads for the current frame (RX_DATA, or its
     * chunk in RX_CHUNK): pieces of the destinations, in order. */
    ps__tcp_piece_t piece[PS_MSG_MAX_DATA];
    uint32_t npiece;
    uint32_t piece_idx;
    uint64_t piece_off;
    int rcvlowat;           /* SO_RCVLOWAT in effect (0 = the kernel's default) */
    int nstreams;           /* streams of its group (hello); 1: no striping */
    int rx_off;             /* EPOLLIN taken away (striping waits) */
    /* Stream 0 of an incoming group, a striped frame under way: chunks not
     * yet complete (its own included), and those whose stream has not
     * picked them up yet (bit i: chunk i). */
    int stripe_left;
    uint32_t stripe_unassigned;
    int rx_ready;           /* on van->rx_ready */
    struct ps__tcp_conn *next_ready;

    /* Job-secret handshake (progress thread only; tcp_auth.c). */
    ps_van_hs_t hs; /* outgoing: hs.t.id_i is what our hello announces */
} ps__tcp_conn_t;

/* The connections of one peer node. */
typedef struct {
    ps_van_peer_t hdr; /* first: the peer table's */
    ps__tcp_conn_t *out[PS__TCP_MAX_STREAMS]; /* ours, stream order */
    int num_out;
    ps__tcp_conn_t *in[PS__TCP_MAX_STREAMS];  /* the peer's, identified */
    int num_in;
    /* Single-stream peers: the connection every message to the peer takes
     * (atomic; chosen at the first send, kept while it lives: one fixed
     * choice keeps the order). Both ends prefer the connection the lower
     * node id opened, so requests and responses share one TCP stream and
     * each carries the ACK of the other; on two one-way streams every
     * message costs an extra bare ACK packet. */
    ps__tcp_conn_t *chosen;
} ps__tcp_peer_t;

struct ps__tcp_van {
    ps_van_base_t base; /* first: handle, params, callbacks, id, counters */
    ps_frame_limits_t limits;
    int sockbuf;            /* PS_TCP_SOCKBUF, 0 = kernel default */
    int conns_per_peer;
    /* Whether large unaligned segments leave from an aligned copy. */
    ps_send_align_t align;

    /* The epoll set, the listener and its admission control, the peer
     * table (ps__tcp_peer_t by node id), the receive pool. */
    ps_van_sock_t sock;
    ps__tcp_handle_t wake_handle;
    ps__tcp_handle_t listen_handle;
    ps_sockaddr_t listen_addr;

    /* The progress loop: its thread, or (busy polling) a thread waiting
     * for a completion through the progress op, runs everything marked
     * "progress thread only". */
    ps_van_loop_t loop;

    /* Handed from other threads to the progress thread: outgoing
     * connections to start, connections disconnect() took away. */
    ps_van_handover_t handover;

    /* Progress thread only. */
    ps__tcp_conn_t *conns;      /* every live connection */
    ps__tcp_conn_t *graveyard;  /* closed this iteration; unref'd after it */
    ps__tcp_conn_t *rx_ready;   /* staged bytes to parse before the round ends */
    int failing_peer;           /* the peer whose failure is being handled */
    int num_connecting;

    int64_t queued;             /* atomic: entries in send queues */

    ps_mpool_t entries;

    /* Accepted connections' handshake deadlines, the earliest (progress
     * thread only). */
    uint64_t hs_next_ns;
    uint64_t prealloc;      /* PS_RECV_PREALLOC_BYTES */
};

/* The van behind the handle its ops receive (the base, and so the handle,
 * come first). */
static inline ps__tcp_van_t *ps__tcp_of(ps_van_t *v)
{
    return (ps__tcp_van_t *)v;
}

/* ---- tcp_van.c ---- */
void ps__tcp_wake(ps__tcp_van_t *van);
/* Peer table (van->sock.peers; its lock as noted). */
void ps__tcp_peer_remove_conn(ps__tcp_van_t *van, ps__tcp_conn_t *conn,
                              ps_status_t why); /* takes write lock */
ps_status_t ps__tcp_peer_add_in(ps__tcp_van_t *van, ps__tcp_conn_t *conn, int id); /* takes write lock */
/* The connections a frame of `data_total` bytes to node `id` goes on,
 * referenced, into conns[] (PS__TCP_MAX_STREAMS): 1 (stream 0 alone), n > 1
 * (striped over our n streams), 0 (not connected) or -1 (a stream of the
 * group is gone: the peer is failing). */
int ps__tcp_peer_send_conns(ps__tcp_van_t *van, int id, uint64_t data_total,
                            ps__tcp_conn_t **conns);

/* ---- tcp_conn.c ---- */
ps_status_t ps__tcp_bind(ps_van_t *v, ps_node_t *node, int max_retry);
ps_status_t ps__tcp_connect(ps_van_t *v, const ps_node_t *peer, int my_id);
void ps__tcp_disconnect(ps_van_t *v, int node_id);
void ps__tcp_accept_all(ps__tcp_van_t *van);
void ps__tcp_start_pending(ps__tcp_van_t *van);
void ps__tcp_on_connected_event(ps__tcp_conn_t *conn, uint32_t events);
/* Connect retries and deadlines; returns the ms until the next timer (-1 none). */
int ps__tcp_run_timers(ps__tcp_van_t *van);
/* Closes a connection (idempotent). `why` != PS_OK with `notify`: tells
 * the postoffice the peer failed (and closes the peer's other streams). */
void ps__tcp_conn_fail(ps__tcp_conn_t *conn, ps_status_t why, int notify);
void ps__tcp_conn_unref(ps__tcp_conn_t *conn);
ps__tcp_conn_t *ps__tcp_conn_new(ps__tcp_van_t *van, int outgoing);
void ps__tcp_conn_destroy_now(ps__tcp_conn_t *conn); /* never published */
/* close(): after the thread stopped, every connection to the graveyard. */
void ps__tcp_close_all(ps__tcp_van_t *van);
void ps__tcp_set_epoll(ps__tcp_conn_t *conn, int want_out); /* send_lock held */

/* The TCP connect succeeded (and the job secret, if any, was proved):
 * READY, flush the queue; on failure closes the connection. */
void ps__tcp_conn_ready(ps__tcp_conn_t *conn);

/* ---- tcp_auth.c (job secret; see there) ---- */
/* Opener, TCP connected: sends INIT and holds the queue. */
ps_status_t ps__tcp_auth_start(ps__tcp_conn_t *conn);
/* A decoded meta, before anything else looks at it: handles handshake
 * frames (*consumed_p = 1) and refuses what arrives before the handshake
 * is done. An error closes the connection (already logged). */
ps_status_t ps__tcp_auth_rx(ps__tcp_conn_t *conn, const ps_meta_t *meta, int *consumed_p);
/* Whether an accepted connection may announce node `id` in its hello. */
int ps__tcp_auth_claim_ok(const ps__tcp_conn_t *conn, int id);
/* The peer closed the connection: PS_ERR_AUTH (logged) when that ended
 * our handshake, else PS_OK. */
ps_status_t ps__tcp_auth_cut(ps__tcp_conn_t *conn);

/* ---- tcp_send.c ---- */
ps_status_t ps__tcp_send(ps_van_t *v, const ps_msg_t *msg);
/* Sends (or queues) the frame [hm, data...] on conn; `way` says what the
 * frame's large unaligned segments were sent as, for the cost figures of
 * van->align (PS_SEND_ALIGN_NONE: nothing to measure). */
ps_status_t ps__tcp_conn_send_frame(ps__tcp_conn_t *conn, const uint8_t *hm, size_t hm_len,
                                    const ps_slice_t *data, uint32_t num_data,
                                    ps_send_align_way_t way);
/* The same with conn->send_lock held by the caller. */
ps_status_t ps__tcp_conn_send_frame_locked(ps__tcp_conn_t *conn, const uint8_t *hm,
                                           size_t hm_len, const ps_slice_t *data,
                                           uint32_t num_data, ps_send_align_way_t way);
/* Writes what the socket takes from the queue (send_lock not held by the
 * caller). PS_OK (possibly with a rest queued) or the socket's error. */
ps_status_t ps__tcp_flush(ps__tcp_conn_t *conn);
/* Detaches the send queue (send_lock held); free it with
 * ps__tcp_entries_free() after unlocking. */
ps__tcp_entry_t *ps__tcp_queue_take(ps__tcp_conn_t *conn);
void ps__tcp_entries_free(ps__tcp_van_t *van, ps__tcp_entry_t *list);

/* ---- striping ---- */
/* Chunk `i` of `n` of a frame with `total` data bytes: [*off_p, +*len_p). */
void ps__tcp_stripe_range(uint64_t total, int n, int i, uint64_t *off_p, uint64_t *len_p);

/* ---- tcp_recv.c ---- */
/* Reads and delivers what the socket has; on a broken stream fails the
 * connection itself. */
void ps__tcp_on_readable(ps__tcp_conn_t *conn);
/* Runs the connections marked ready (staged bytes, no event to come). */
void ps__tcp_run_ready(ps__tcp_van_t *van);
void ps__tcp_rx_reset(ps__tcp_conn_t *conn);
/* An accepted connection finished its handshake (or went away): no longer
 * pending; its staging buffer may grow to the full size. */
void ps__tcp_admitted(ps__tcp_conn_t *conn);

/* ---- tcp_wire.c ---- */
/* Encodes header + meta for a message with these segment lengths into buf
 * (cap bytes) or, when it does not fit, a malloc'd buffer (*heap_p). */
ps_status_t ps__tcp_encode_frame(ps__tcp_van_t *van, const ps_meta_t *meta, const uint64_t *lens,
                                 uint32_t num_data, uint8_t *buf, size_t cap,
                                 uint8_t **hm_p, size_t *len_p, uint8_t **heap_p);
/* A hello frame announcing `my_id` on stream `stream` of `nstreams`. */
ps_status_t ps__tcp_encode_hello(ps__tcp_van_t *van, int my_id, uint64_t nonce, int stream,
                                 int nstreams, uint8_t *buf, size_t cap, size_t *len_p);
/* 1 if the decoded meta is a hello; fills its fields. */
int ps__tcp_parse_hello(const ps_meta_t *meta, uint64_t *nonce_p, int *stream_p,
                        int *nstreams_p);
/* The van_data prefix of the van's own frames: its hello ("PSTCPH") and
 * its job-secret handshake ("PSTCPA"), which send() refuses from a caller
 * (ps_van_base_set_own_tag). */
#define PS__TCP_OWN_TAG "PSTCP"
/* 1 if a message's van_data starts with PS__TCP_OWN_TAG. */
int ps__tcp_looks_like_hello(const ps_meta_t *meta);

/* This van's log component "tcp" (registered by tcp_van.c). */
extern ps_log_component_t ps__tcp_log;
#define PS_LOG_TCP ps__tcp_log

/* This van's own variables (tcp_config_vars.h), a config table of their own:
 * read them as ps_config_*(PS_TCP_CFG(NAME), ...). */
typedef enum {
#define PS_CONFIG_VAR PS_CONFIG_INDEX
#include "ps/net/tcp/tcp_config_vars.h"
#undef PS_CONFIG_VAR
} ps__tcp_config_index_t;
extern ps_config_table_t ps__tcp_config;
#define PS_TCP_CFG(_name) ps_config_table_id(&ps__tcp_config, PS_CFGI_##_name)

#endif /* PS_NET_TCP_TCP_INTERNAL_H_ */

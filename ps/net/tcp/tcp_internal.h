/*
 * Internals of the TCP van, shared by its files (tcp_van.c: lifecycle,
 * peers and the progress thread; tcp_conn.c: sockets, bind, connect,
 * accept, teardown; tcp_send.c: the send path; tcp_recv.c: the receive
 * state machine; tcp_wire.c: frames and hellos; tcp_pool.c: receive
 * buffers). Nothing here is visible outside ps/net/tcp.
 *
 * Threads. One progress thread per van owns every socket's lifecycle, all
 * reading, and the flushing of queued sends; any thread may call send().
 *   - van->peers (id -> connections) is guarded by peers_lock (a rwlock:
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
 * Several connections per peer (PS_TCP_CONNS_PER_PEER / DMLC_NUM_PORTS) are
 * prepared for but not used yet: the hello already carries the stream index,
 * the stream count and a nonce shared by one connect()'s streams, and a peer
 * keeps its streams in order (out[], in[]). The plan: stream 0 carries every
 * frame; a frame whose data exceeds a threshold (announced in the hello) has
 * its data cut into contiguous chunks, chunk 0 after the meta on stream 0 and
 * chunk i as bare bytes on stream i. A sender takes the streams' send locks
 * in index order, so chunks of consecutive messages are in the same order on
 * every stream; the receiver gives stream i's bytes to the oldest frame still
 * missing chunk i, and stream 0 stops reading (EPOLLIN off) until the frame
 * it parsed last is complete, which keeps delivery in send order. On this
 * 2-vCPU machine a second loopback stream does not add bandwidth (iperf3 -P 2
 * is no faster than -P 1, both CPUs are busy), so the van opens one stream.
 */
#ifndef PS_NET_TCP_TCP_INTERNAL_H_
#define PS_NET_TCP_TCP_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ps/base/buffer.h"
#include "ps/base/mpool.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/tcp/tcp_pool.h"
#include "ps/net/van/van.h"

/* Most streams (connections) per peer this van opens or indexes. */
#define PS__TCP_MAX_STREAMS 8
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
} ps__tcp_rx_phase_t;

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
    int in_epoll;
    int linked;             /* on van->conns */
    struct ps__tcp_conn *next, *prev; /* van->conns */
    struct ps__tcp_conn *next_pending; /* van->pending */
    struct ps__tcp_conn *next_close;   /* van->to_close */
    struct ps__tcp_conn *next_grave;   /* van->graveyard */

    /* Receive state machine (progress thread only). */
    uint8_t *rbuf;
    size_t rcap, rstart, rend;
    ps__tcp_rx_phase_t phase;
    ps_frame_header_t hdr;
    ps_msg_t rmsg;
    uint32_t seg;
    uint64_t seg_off;
    uint8_t *seg_ptr;       /* NULL: the current segment has no destination yet */
    int rcvlowat;           /* SO_RCVLOWAT in effect (0 = the kernel's default) */
} ps__tcp_conn_t;

/* The connections of one peer node. */
typedef struct {
    int id;
    ps__tcp_conn_t *out[PS__TCP_MAX_STREAMS]; /* ours, stream order */
    int num_out;
    ps__tcp_conn_t *in[PS__TCP_MAX_STREAMS];  /* the peer's, identified */
    int num_in;
} ps__tcp_peer_t;

struct ps__tcp_van {
    ps_van_t base; /* first: the van handle */
    ps_van_params_t params;
    ps_van_callbacks_t cb;
    ps_frame_limits_t limits;
    int sockbuf;            /* PS_TCP_SOCKBUF, 0 = kernel default */
    int conns_per_peer;

    int epfd;
    int wakefd;             /* eventfd */
    ps__tcp_handle_t wake_handle;
    ps__tcp_handle_t listen_handle;
    int listen_fd;
    ps_sockaddr_t listen_addr;

    ps_thread_t thread;
    int thread_started;
    int stop;               /* atomic */

    pthread_rwlock_t peers_lock;
    ps__tcp_peer_t **peers; /* indexed by node id */
    int peers_cap;

    /* Handed from other threads to the progress thread. */
    pthread_mutex_t pending_lock;
    ps__tcp_conn_t *pending;    /* outgoing connections to start */
    ps__tcp_conn_t *to_close;   /* connections disconnect() took away */

    /* Progress thread only. */
    ps__tcp_conn_t *conns;      /* every live connection */
    ps__tcp_conn_t *graveyard;  /* closed this iteration; unref'd after it */
    int num_connecting;
    ps_node_t *scratch_nodes;
    size_t scratch_cap;

    int my_id;                  /* atomic */
    uint64_t bytes_sent;        /* atomic */
    uint64_t bytes_recv;        /* atomic */
    int64_t queued;             /* atomic: entries in send queues */
    uint64_t rng;               /* atomic: nonces and random ports */

    ps__tcp_pool_t *pool;
    ps_mpool_t entries;
};

/* ---- tcp_van.c ---- */
void ps__tcp_wake(ps__tcp_van_t *van);
uint64_t ps__tcp_random(ps__tcp_van_t *van);
/* Peer table (callers hold peers_lock as noted). */
ps__tcp_peer_t *ps__tcp_peer_get(ps__tcp_van_t *van, int id, int create); /* write lock when create */
void ps__tcp_peer_remove_conn(ps__tcp_van_t *van, ps__tcp_conn_t *conn); /* takes write lock */
ps_status_t ps__tcp_peer_add_in(ps__tcp_van_t *van, ps__tcp_conn_t *conn, int id); /* takes write lock */
ps__tcp_conn_t *ps__tcp_peer_send_conn(ps__tcp_van_t *van, int id); /* referenced, or NULL */

/* ---- tcp_conn.c ---- */
ps_status_t ps__tcp_bind(ps__tcp_van_t *van, ps_node_t *node, int max_retry);
ps_status_t ps__tcp_connect(ps__tcp_van_t *van, const ps_node_t *peer, int my_id);
void ps__tcp_disconnect(ps__tcp_van_t *van, int node_id);
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

/* ---- tcp_send.c ---- */
ps_status_t ps__tcp_send(ps__tcp_van_t *van, const ps_msg_t *msg);
/* Sends (or queues) the frame [hm, data...] on conn. */
ps_status_t ps__tcp_conn_send_frame(ps__tcp_conn_t *conn, const uint8_t *hm, size_t hm_len,
                                    const ps_slice_t *data, uint32_t num_data);
/* Writes what the socket takes from the queue (send_lock not held by the
 * caller). PS_OK (possibly with a rest queued) or the socket's error. */
ps_status_t ps__tcp_flush(ps__tcp_conn_t *conn);
/* Detaches the send queue (send_lock held); free it with
 * ps__tcp_entries_free() after unlocking. */
ps__tcp_entry_t *ps__tcp_queue_take(ps__tcp_conn_t *conn);
void ps__tcp_entries_free(ps__tcp_van_t *van, ps__tcp_entry_t *list);

/* ---- tcp_recv.c ---- */
/* Reads and delivers what the socket has; on a broken stream fails the
 * connection itself. */
void ps__tcp_on_readable(ps__tcp_conn_t *conn);
void ps__tcp_rx_reset(ps__tcp_conn_t *conn);

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
/* 1 if a message's van_data could be mistaken for a hello. */
int ps__tcp_looks_like_hello(const ps_meta_t *meta);

#endif /* PS_NET_TCP_TCP_INTERNAL_H_ */

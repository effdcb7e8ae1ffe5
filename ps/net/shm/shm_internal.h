/*
 * Internals of the shared-memory van, shared by its files:
 *   shm_van.c   lifecycle, the peer table, the progress thread, the ops
 *   shm_conn.c  rendezvous sockets: bind, connect, accept, the handshake,
 *               socket packets, tearing a channel down
 *   shm_send.c  the send path: records, tokens, the send queue, acks
 *   shm_recv.c  the receive path: records to messages, peer segments
 *
 * A channel joins two processes: a unix socket (handshake, fd passing,
 * door bells, and EOF when the peer dies) and one shared memory block with
 * a ring each way, made by the side that connects. Two processes that both
 * connect have two channels; send() to a node uses our own channel to it
 * when there is one, else the node's channel to us (as the TCP van).
 *
 * Threads. One progress thread per van reads every ring and socket, accepts,
 * flushes queued sends and acks, and calls the callbacks (with no van lock
 * held: they may send). Any thread may send().
 *   - the peer table's lock (a rwlock, van->sock.peers.lock): senders read it.
 *   - chan->tx_lock guards everything a sender touches: the producer side
 *     of the channel's out ring, its send queue, its tokens, the segments
 *     announced to the peer, chan->state as senders see it, and writes to
 *     the socket (so that it is not closed under a sender).
 *   - chan->ack_lock guards acks to send: a released zero-copy view may be
 *     dropped by any thread.
 *   - Everything else of a channel (the in ring, the receive state, peer
 *     segments) is the progress thread's.
 * Lock order: the peer table's, then tx_lock; ack_lock is never held with another.
 */
#ifndef PS_NET_SHM_SHM_INTERNAL_H_
#define PS_NET_SHM_SHM_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/shm/shm_idmap.h"
#include "ps/net/shm/shm_job.h"
#include "ps/net/shm/shm_proto.h"
#include "ps/net/shm/shm_ring.h"
#include "ps/net/shm/shm_stage.h"
#include "ps/net/van/admission.h"
#include "ps/net/van/handover.h"
#include "ps/net/van/sock_core.h"
#include "ps/net/van/progress_loop.h"
#include "ps/net/van/rx_pool.h"
#include "ps/net/van/base.h"
#include "ps/net/van/handshake.h"
#include "ps/net/van/van.h"

/* Data bytes of each ring of a channel. */
#define PS__SHM_RING_BYTES (1u << 20)
/* A MSG record (descriptors, meta, inline bytes) at most this big; a
 * bigger meta is streamed. */
#define PS__SHM_MSG_MAX (PS__SHM_RING_BYTES / 4)
/* CHUNK records carry at most / at least this much (the least unless the
 * part ends sooner). */
#define PS__SHM_CHUNK_MAX (256u << 10)
#define PS__SHM_CHUNK_MIN 4096u
/* Free receive buffers kept. */
#define PS__SHM_POOL_CACHE (256u << 20)
/* Staging: bytes out (sent, not yet released by the peer) and kept free. */
#define PS__SHM_STAGE_OUT (256u << 20)
#define PS__SHM_STAGE_CACHE (256u << 20)
/* Most segments one channel keeps mapped from its peer, and most bytes:
 * a peer's segments may be sparse, so that only the address space they
 * take here bounds them. */
#define PS__SHM_MAX_PEER_SEGS 65536
#define PS__SHM_MAX_PEER_BYTES (1ull << 44)
/* Slots of the table of pull destinations peers named (a power of two). */
#define PS__SHM_HINTS 1024

typedef enum {
    PS__SHM_H_WAKE,
    PS__SHM_H_LISTEN,
    PS__SHM_H_CHAN,
} ps__shm_handle_kind_t;

typedef struct {
    ps__shm_handle_kind_t kind;
} ps__shm_handle_t;

typedef enum {
    PS__SHM_CH_HANDSHAKE, /* incoming: no HELLO yet */
    PS__SHM_CH_READY,
    PS__SHM_CH_DEAD,
} ps__shm_chan_state_t;

typedef enum {
    PS__SHM_RX_IDLE,
    PS__SHM_RX_STREAM, /* filling streamed parts from CHUNK records */
} ps__shm_rx_phase_t;

/* A part of a message written as CHUNK records. */
typedef struct {
    const uint8_t *ptr;
    uint64_t len;
} ps__shm_part_t;

/* A message (or its unwritten rest) in a channel's send queue. It holds
 * references on the slices of its streamed parts. */
typedef struct ps__shm_entry {
    struct ps__shm_entry *next;
    uint8_t *rec;        /* the record still to write (heap), or NULL */
    uint32_t rec_len;
    ps__shm_part_t parts[1 + PS_MSG_MAX_DATA];
    uint32_t num_parts;
    uint32_t cur;        /* part being written */
    uint64_t off;        /* bytes of it written */
    ps_slice_t refs[PS_MSG_MAX_DATA];
    uint32_t num_refs;
    uint8_t *meta_heap;  /* a streamed meta (owned) */
    uint64_t bytes;      /* data bytes, for the stats */
} ps__shm_entry_t;

/* A slice kept alive for the peer (CMA or SEG), by token. */
typedef struct {
    ps_slice_t slice;
    uint32_t next_free;
} ps__shm_token_t;

/* A segment of the peer mapped here; delivered views hold references. */
typedef struct {
    uint64_t id;
    void *ptr;
    size_t size;
    uint32_t refs; /* atomic */
} ps__shm_map_t;

/* Where a peer wants the answer to its pull request (peer, app, customer,
 * timestamp) written: in its segment, mapped here. */
typedef struct {
    int peer, app, customer, ts;
    ps__shm_map_t *map; /* referenced; NULL: free slot */
    uint64_t off, len;
} ps__shm_hint_t;

typedef struct ps__shm_van ps__shm_van_t;
typedef struct ps__shm_chan ps__shm_chan_t;

struct ps__shm_chan {
    ps__shm_handle_t handle; /* first: epoll data */
    ps__shm_van_t *van;
    uint32_t refs;           /* atomic */
    int outgoing;
    int peer_id;             /* PS_NODE_EMPTY until known; progress thread writes */
    pid_t peer_pid;
    uint64_t nonce;
    char peer_host[PS_NODE_HOSTNAME_MAX]; /* outgoing: where we connected */
    int peer_port;
    uint64_t created_ns;
    int admit_pending;       /* accepted, no hello yet: counted in van->sock.adm */

    void *mem;               /* both rings; unmapped when the channel is freed */
    size_t mem_len;

    /* Guarded by tx_lock. */
    pthread_mutex_t tx_lock;
    ps__shm_chan_state_t state;
    int fd;                  /* the unix socket; -1 once closed */
    ps__shm_ring_t tx;
    int tx_cma;              /* the peer can read our memory */
    int tx_blocked;          /* waiting for the peer to make room (a bell) */
    int want_flush;          /* atomic: queued sends the progress thread must write */
    ps__shm_entry_t *sq_head, *sq_tail;
    ps__shm_token_t *tokens;
    uint32_t tok_cap, tok_free, tok_live;
    ps__shm_idmap_t announced; /* our segment ids the peer has */

    /* Guarded by ack_lock. */
    pthread_mutex_t ack_lock;
    uint32_t *acks;
    size_t nacks;            /* also read unlocked (atomic) as a hint */
    size_t ack_cap;
    int acks_closed;         /* the channel or the van is gone: drop acks */

    /* Progress thread only. */
    int in_epoll;
    int listed;              /* in van->chans */
    ps__shm_ring_t rx;
    int rx_ready;            /* rx attached (incoming: after HELLO) */
    ps__shm_rx_phase_t phase;
    ps_msg_t rmsg;
    ps__shm_part_t rparts[1 + PS_MSG_MAX_DATA];
    int rpart_seg[1 + PS_MSG_MAX_DATA]; /* rmsg.data index of a part; -1: the meta */
    uint32_t rnum_parts, rcur;
    uint64_t roff;
    uint8_t *rmeta;          /* a streamed meta being collected */
    uint32_t rmeta_len;
    uint8_t *scratch;        /* a MSG record's head, copied out of the ring */
    size_t scratch_cap;
    ps__shm_idmap_t maps;    /* peer segment id -> ps__shm_map_t */
    uint64_t maps_bytes;     /* their sizes, summed */
    ps_van_handover_link_t start_link; /* on van->handover's start list */
    ps_van_handover_link_t close_link; /* on van->handover's close list */

    /* Job-secret handshake (shm_auth.c): the connector's thread in
     * connect(), then the progress thread. */
    ps_van_hs_t hs;
};

typedef struct {
    ps_van_peer_t hdr;       /* first: the peer table's */
    ps__shm_chan_t *out;     /* ours */
    ps__shm_chan_t *in[4];   /* the peer's, identified */
    int num_in;
} ps__shm_peer_t;

struct ps__shm_van {
    ps_van_base_t base; /* first: handle, params, callbacks, id, counters */
    char job[PS__SHM_JOB_MAX + 1];
    uint64_t ring_bytes;
    int allow_cma;           /* test knob: 0 never lets peers read us */
    int allow_seg;           /* test knob: 0 sends shared buffers like others */
    int allow_stage;         /* test knob: 0 never stages */
    uint32_t max_meta;
    uint64_t max_message;

    /* The epoll set, the listener and its admission control, the peer
     * table (ps__shm_peer_t by node id), the receive pool. */
    ps_van_sock_t sock;
    ps__shm_handle_t wake_handle;
    ps__shm_handle_t listen_handle;
    char listen_host[PS_NODE_HOSTNAME_MAX];
    int listen_port;

    /* The progress loop (polling the channels, the sockets, the timers):
     * its thread, or a thread waiting for a completion that drives it (the
     * progress op, busy polling only). */
    ps_van_loop_t loop;
    unsigned rounds;         /* polls so far (the sockets' turn) */


    /* Handed from other threads to the progress thread: new outgoing
     * channels to start, channels disconnect() took away. */
    ps_van_handover_t handover;
    int ack_kick;             /* atomic: some channel has acks to flush */
    int tx_kick;              /* atomic: some channel queued a send */

    /* The loop's (the progress thread, or a driving waiter). */
    ps__shm_chan_t **chans;
    size_t nchans, chans_cap;

    pthread_mutex_t hints_lock;
    ps__shm_hint_t hints[PS__SHM_HINTS];

    uint64_t sent_by_kind[PS__SHM_SEG_KINDS]; /* atomic: by PS__SHM_SEG_* (staged: 0) */
    ps__shm_stage_t *stage;
    uint8_t cookie[PS__SHM_COOKIE_LEN];
};

/* The van behind the handle its ops receive (the base, and so the handle,
 * come first). */
static inline ps__shm_van_t *ps__shm_of(ps_van_t *v)
{
    return (ps__shm_van_t *)v;
}

/* ---- shm_van.c ---- */
void ps__shm_wake(ps__shm_van_t *van);
int ps__shm_on_progress(const ps__shm_van_t *van);
/* Our channel to node id (referenced), or NULL. */
ps__shm_chan_t *ps__shm_peer_send_chan(ps__shm_van_t *van, int id);
/* Records an identified incoming channel (takes the write lock). */
ps_status_t ps__shm_peer_add_in(ps__shm_van_t *van, ps__shm_chan_t *ch, int id);
/* Takes a channel out of the peer table (takes the write lock); `why` it
 * failed is kept (ps_van_peer_table_lost). */
void ps__shm_peer_remove_chan(ps__shm_van_t *van, ps__shm_chan_t *ch, ps_status_t why);
/* Connector: recv of the acceptor's answer that still finds a WELCOME
 * queued behind the ECONNRESET of an acceptor that refused and closed. */
ssize_t ps__shm_recv_answer(int fd, void *buf, size_t cap, int flags);
/* Progress thread: adds a channel to the polled list / epoll. */
ps_status_t ps__shm_list_chan(ps__shm_van_t *van, ps__shm_chan_t *ch);

/* ---- shm_auth.c (job secret; see there) ---- */
/* Connector, before HELLO: the exchange; PS_ERR_AUTH (logged) when refused,
 * PS_ERR_TIMED_OUT when the acceptor does not answer within the connect timeout. */
ps_status_t ps__shm_auth_connect(ps__shm_chan_t *ch, int my_id);
/* Acceptor: a packet of a channel whose handshake is pending (or an AUTH one). */
ps_status_t ps__shm_auth_on_packet(ps__shm_chan_t *ch, const uint8_t *buf, size_t len);
/* Acceptor: a HELLO announcing `id`; PS_OK, or refused (logged, WELCOME sent). */
ps_status_t ps__shm_auth_hello(ps__shm_chan_t *ch, int id);
/* Connector: a WELCOME refused us for the secret / accepted us. */
ps_status_t ps__shm_auth_refused(ps__shm_chan_t *ch);
ps_status_t ps__shm_auth_welcomed(ps__shm_chan_t *ch);

/* ---- shm_conn.c ---- */
ps_status_t ps__shm_bind(ps_van_t *v, ps_node_t *node, int max_retry);
/* quiet: an absent listener is not worth a log line (probing). */
ps_status_t ps__shm_connect(ps_van_t *v, const ps_node_t *peer, int my_id);
void ps__shm_disconnect(ps_van_t *v, int node_id);
void ps__shm_accept_all(ps__shm_van_t *van);
/* Reads what the channel's socket has (handshake, segments, bells). */
void ps__shm_on_socket(ps__shm_chan_t *ch, uint32_t events);
/* Moves new channels in and closes the ones handed over. */
void ps__shm_take_pending(ps__shm_van_t *van);
/* Closes a channel (idempotent; progress thread or close()). With notify
 * and an identified peer, peer_failed(why) once for the peer. */
void ps__shm_chan_fail(ps__shm_chan_t *ch, ps_status_t why, int notify);
void ps__shm_chan_unref(ps__shm_chan_t *ch);
ps__shm_chan_t *ps__shm_chan_new(ps__shm_van_t *van, int outgoing);
/* Rings the peer's bell (tx_lock held). */
void ps__shm_bell(ps__shm_chan_t *ch);
/* Passes a segment (its memfd) to the peer (tx_lock held). PS_ERR_AGAIN
 * when the socket is full. */
ps_status_t ps__shm_announce(ps__shm_chan_t *ch, uint64_t id, uint64_t size, int fd);
/* Handles every packet waiting on the channel's socket (progress thread);
 * PS_OK, or why the channel must close. */
ps_status_t ps__shm_read_packets(ps__shm_chan_t *ch);
/* Closes handshakes that take too long; ms until the next deadline (-1). */
int ps__shm_run_timers(ps__shm_van_t *van);
/* close(): after the thread stopped. */
void ps__shm_close_all(ps__shm_van_t *van);

/* ---- shm_send.c ---- */
ps_status_t ps__shm_send(ps_van_t *v, const ps_msg_t *msg);
/* Writes an ID record (tx_lock not held). */
ps_status_t ps__shm_send_id(ps__shm_chan_t *ch, int node_id);
/* Progress thread: writes pending acks and queued messages; 1 if anything
 * moved. */
int ps__shm_flush(ps__shm_chan_t *ch);
/* Releases every token and queued entry (channel dead; tx_lock held by
 * nobody). */
void ps__shm_tx_drop(ps__shm_chan_t *ch);
/* Tokens whose ACK arrived (progress thread); PS_ERR_PROTOCOL for a token
 * that is not out. */
ps_status_t ps__shm_tokens_release(ps__shm_chan_t *ch, const uint32_t *tokens, uint32_t n);
/* Queues an ack for the peer (any thread). */
void ps__shm_ack_later(ps__shm_chan_t *ch, uint32_t token);

/* ---- shm_recv.c ---- */
/* Handles the records in the channel's ring (at most `budget`); returns
 * how many. A broken peer fails the channel. */
int ps__shm_rx_poll(ps__shm_chan_t *ch, int budget);
/* Maps a segment the peer announced (takes over fd). */
ps_status_t ps__shm_rx_add_segment(ps__shm_chan_t *ch, uint64_t id, uint64_t size, int fd);
/* Drops the receive state and the peer's segments (channel dead). */
void ps__shm_rx_reset(ps__shm_chan_t *ch);
void ps__shm_map_unref(ps__shm_map_t *map);
/* Takes the destination peer named for the answer to (app, customer, ts),
 * if any: *hint_p holds the map's reference then. */
int ps__shm_hint_take(ps__shm_van_t *van, int peer, int app, int customer, int ts,
                      ps__shm_hint_t *hint_p);
/* Drops every hint (close). */
void ps__shm_hints_clear(ps__shm_van_t *van);

#endif /* PS_NET_SHM_SHM_INTERNAL_H_ */

/*
 * The mem van: the reference van (docs/ADDING_A_VAN.md). Vans of one
 * process reach each other through an in-memory table of listeners keyed
 * by host:port; a connection is a pair of bounded byte pipes carrying ps
 * frames (ps/net/codec/frame.h), read by the peer's progress loop.
 *
 * Locks, outermost first: the listener table's, a van's `lock` (its peer
 * table, connection list and send queues), a pipe pair's `lock` (its bytes).
 */
#ifndef PS_NET_REFVAN_MEM_INTERNAL_H_
#define PS_NET_REFVAN_MEM_INTERNAL_H_

#include <pthread.h>
#include <stdint.h>

#include "ps/net/codec/frame.h"
#include "ps/net/van/base.h"
#include "ps/net/van/peer_slots.h"
#include "ps/net/van/progress_loop.h"

/* Bytes one direction of a connection holds: a reader that stops makes
 * the sender queue behind it. */
#define PS__MEM_PIPE_BYTES (256u << 10)

/* Two byte pipes, one per direction; each end is a connection of one van. */
typedef struct ps__mem_link {
    pthread_mutex_t lock;
    uint8_t *ring[2];       /* ring[s]: bytes written by end s */
    uint64_t head[2];       /* read so far */
    uint64_t tail[2];       /* written so far */
    int closed[2];          /* end s went away */
    int wants_space[2];     /* end s has queued bytes and waits for room */
    ps_van_loop_t *loop[2]; /* end s's van loop, to kick; NULL once closed */
    int refs;
} ps__mem_link_t;

/* Queued bytes for the pipe: the encoded head, then the segments the
 * message references (copied into the pipe as it has room). */
typedef struct ps__mem_out {
    struct ps__mem_out *next;
    uint8_t *head;
    size_t head_len;
    uint32_t num_data;
    ps_slice_t data[PS_MSG_MAX_DATA];
    uint32_t piece; /* 0: the head, i + 1: segment i */
    size_t off;     /* within the piece */
} ps__mem_out_t;

enum {
    PS__MEM_RX_HEADER,
    PS__MEM_RX_META,
    PS__MEM_RX_DATA,
    PS__MEM_RX_LANE
};

/* A lane message in the pipe: PS_LANE_MAGIC (never a frame's first byte),
 * its length (u16 little-endian), then its bytes, lane header first. */
#define PS__MEM_LANE_PREFIX 3

typedef struct ps__mem_conn {
    struct ps__mem_van *van;
    ps__mem_link_t *link; /* NULL while connecting */
    int side;             /* our end of the link */
    int outgoing;         /* we dialled it */
    int peer_id;          /* PS_NODE_EMPTY until the peer's hello (incoming) */
    int hello_seen;
    int closing; /* disconnect(): close quietly on the loop */
    /* connecting */
    char host[PS_NODE_HOSTNAME_MAX];
    int port;
    uint64_t deadline_ns;
    uint64_t next_try_ns;
    uint32_t backoff_ms;
    /* send queue (van lock) */
    ps__mem_out_t *out_head, *out_tail;
    /* receive state (loop only) */
    int phase;
    uint8_t *rbuf;
    size_t rlen, rcap, need;
    ps_frame_header_t hdr;
    ps_msg_t rmsg;
    uint32_t rseg;
    uint64_t roff;
} ps__mem_conn_t;

/* Per node id: the connection we dialled, the one it dialled, and the
 * one sends use (fixed once chosen, to keep the order of messages); how
 * its last connection failed (PS_OK while connected), which a send that
 * finds no connection returns. */
typedef struct ps__mem_peer {
    ps__mem_conn_t *out, *in, *chosen;
    ps_status_t lost;
} ps__mem_peer_t;

typedef struct ps__mem_van {
    ps_van_base_t base; /* first */
    ps_van_loop_t loop;
    ps_frame_limits_t limits;
    pthread_mutex_t lock;
    ps_van_peer_slots_t peers;
    ps__mem_conn_t **conns;
    int num_conns, cap_conns;
    ps__mem_conn_t **snap; /* the loop's copy of conns */
    int cap_snap;
    int bound;
    char host[PS_NODE_HOSTNAME_MAX]; /* "" with bind_any */
    int port;
    int64_t queued; /* atomic: messages in send queues */
    uint64_t moved; /* atomic: bytes into pipes */
} ps__mem_van_t;

/* mem_pipe.c: the listener table and the pipes. */
ps_status_t ps__mem_listen(ps__mem_van_t *van, const char *host, int port);
void ps__mem_unlisten(ps__mem_van_t *van);
/* A link (our end: side 0, kicking `loop`) to the van listening at
 * host:port, which gets the other end as a new connection.
 * PS_ERR_NOT_FOUND: nobody listens. */
ps_status_t ps__mem_dial(ps_van_loop_t *loop, const char *host, int port, ps__mem_link_t **link_p);
/* Writes what fits of buf[len) into our pipe; kicks the reader. */
size_t ps__mem_link_write(ps__mem_conn_t *conn, const uint8_t *buf, size_t len);
/* Reads up to len bytes from the peer's pipe; kicks a writer waiting for
 * room. *eof_p: nothing left and the peer is gone. */
size_t ps__mem_link_read(ps__mem_conn_t *conn, uint8_t *buf, size_t len, int *eof_p);
/* Bytes readable (or 1 at end of file) and whether writing has room. */
int ps__mem_link_ready(ps__mem_conn_t *conn, int want_write);
/* Our end goes away: the peer reads what is left, then end of file. */
void ps__mem_link_close(ps__mem_conn_t *conn);
ps__mem_conn_t *ps__mem_conn_new(ps__mem_van_t *van, int outgoing, int peer_id);

/* mem_rx.c: frames from the pipe to deliver(). PS_OK, or the status the
 * connection closes with; *events_p counts what moved. */
ps_status_t ps__mem_rx(ps__mem_conn_t *conn, unsigned budget, int *events_p);
void ps__mem_rx_reset(ps__mem_conn_t *conn);
/* The hello: van_data "PSMEMH" + the announced id (i32 little-endian). */
#define PS__MEM_HELLO_TAG "PSMEMH"
#define PS__MEM_HELLO_LEN 10
int ps__mem_is_hello(const ps_meta_t *meta);

/* mem_van.c */
ps_status_t ps__mem_add_conn(ps__mem_van_t *van, ps__mem_conn_t *c);
/* Moves queued bytes into the pipe (van lock held); returns bytes moved. */
size_t ps__mem_flush_locked(ps__mem_conn_t *conn);
/* The peer announced `id` on an incoming connection. */
void ps__mem_set_peer(ps__mem_conn_t *conn, int id);

#endif /* PS_NET_REFVAN_MEM_INTERNAL_H_ */

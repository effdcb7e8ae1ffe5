/*
 * The mem van (mem_internal.h): its ops table, registered as component
 * "mem" (alias "refvan"), send and connect, and the progress loop's ops.
 * It is the van the guide docs/ADDING_A_VAN.md walks through: what is not
 * here, the van base and the progress loop do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/endian.h"
#include "ps/base/time.h"
#include "ps/net/codec/frame_encode.h"
#include "ps/net/codec/lane.h"
#include "ps/net/refvan/mem_internal.h"
#include "ps/net/van/addr.h"

#define PS__MEM_CONNECT_MS 10000

static const ps_van_ops_t mem_ops;

static ps__mem_van_t *mem_of(ps_van_t *van)
{
    return (ps__mem_van_t *)(void *)ps_van_base_of(van);
}

static ps__mem_peer_t *peer_get(ps__mem_van_t *van, int id, int create)
{
    return ps_van_peer_slots_get(&van->peers, id, sizeof(ps__mem_peer_t), create, NULL);
}

/* ---- send queue ---- */

static void out_free(ps__mem_out_t *o)
{
    for (uint32_t i = 0; i < o->num_data; ++i) {
        ps_slice_unref(&o->data[i]);
    }
    free(o);
}

/* The frame of `meta` (+ msg's segments, referenced), ready to queue. */
static ps_status_t out_new(ps__mem_van_t *van, const ps_meta_t *meta, const ps_msg_t *msg,
                           ps__mem_out_t **o_p)
{
    uint32_t n = msg != NULL ? msg->num_data : 0;
    uint64_t lens[PS_MSG_MAX_DATA];
    for (uint32_t i = 0; i < n; ++i) {
        lens[i] = msg->data[i].len;
    }
    uint8_t buf[1024], *head, *heap;
    size_t len;
    ps_status_t st = ps_frame_encode_head(meta, lens, n, &van->limits, PS_LOG_VAN, buf, sizeof(buf),
                                          &head, &len, &heap);
    if (st != PS_OK) {
        return st;
    }
    ps__mem_out_t *o = calloc(1, sizeof(*o) + len);
    if (o == NULL) {
        free(heap);
        return PS_ERR_NO_MEMORY;
    }
    o->head = (uint8_t *)(o + 1);
    o->head_len = len;
    memcpy(o->head, head, len);
    free(heap);
    for (uint32_t i = 0; i < n; ++i) {
        o->data[i] = ps_slice_ref(&msg->data[i]);
    }
    o->num_data = n;
    *o_p = o;
    return PS_OK;
}

static void queue_locked(ps__mem_conn_t *conn, ps__mem_out_t *o)
{
    if (conn->out_tail != NULL) {
        conn->out_tail->next = o;
    } else {
        conn->out_head = o;
    }
    conn->out_tail = o;
    __atomic_add_fetch(&conn->van->queued, 1, __ATOMIC_RELAXED);
    if (conn->link != NULL) {
        ps__mem_flush_locked(conn);
    }
}

size_t ps__mem_flush_locked(ps__mem_conn_t *conn)
{
    size_t moved = 0;
    ps__mem_out_t *o;
    while ((o = conn->out_head) != NULL) {
        const uint8_t *p = o->piece == 0 ? o->head : ps_slice_ptr(&o->data[o->piece - 1]);
        size_t len = o->piece == 0 ? o->head_len : o->data[o->piece - 1].len;
        if (o->off < len) {
            size_t n = ps__mem_link_write(conn, p + o->off, len - o->off);
            o->off += n;
            moved += n;
            if (o->off < len) {
                break; /* the pipe is full: the reader kicks us */
            }
        }
        o->off = 0;
        if (++o->piece <= o->num_data) {
            continue;
        }
        conn->out_head = o->next;
        if (conn->out_head == NULL) {
            conn->out_tail = NULL;
        }
        out_free(o);
        __atomic_sub_fetch(&conn->van->queued, 1, __ATOMIC_RELAXED);
    }
    ps_van_base_count_sent(&conn->van->base, moved);
    __atomic_add_fetch(&conn->van->moved, moved, __ATOMIC_RELAXED);
    return moved;
}

/* Queues the hello announcing `id` (van lock held). */
static ps_status_t hello_locked(ps__mem_conn_t *conn, int id)
{
    ps_meta_t meta;
    ps_meta_init(&meta);
    meta.sender = id;
    memcpy(meta.van_data, PS__MEM_HELLO_TAG, 6);
    ps_put_le32(meta.van_data + 6, (uint32_t)id);
    meta.van_data_len = PS__MEM_HELLO_LEN;
    ps__mem_out_t *o;
    ps_status_t st = out_new(conn->van, &meta, NULL, &o);
    if (st == PS_OK) {
        queue_locked(conn, o);
    }
    return st;
}

/* ---- connections ---- */

static ps_status_t add_conn_locked(ps__mem_van_t *van, ps__mem_conn_t *c)
{
    if (van->num_conns == van->cap_conns) {
        int cap = van->cap_conns ? 2 * van->cap_conns : 8;
        ps__mem_conn_t **a = realloc(van->conns, (size_t)cap * sizeof(*a));
        if (a == NULL) {
            return PS_ERR_NO_MEMORY;
        }
        van->conns = a;
        van->cap_conns = cap;
    }
    van->conns[van->num_conns++] = c;
    return PS_OK;
}

ps_status_t ps__mem_add_conn(ps__mem_van_t *van, ps__mem_conn_t *c)
{
    pthread_mutex_lock(&van->lock);
    ps_status_t st = add_conn_locked(van, c);
    pthread_mutex_unlock(&van->lock);
    return st;
}

/* Drops `c` from the peer table (van lock held); 1 when it was the last
 * connection of its node. */
static int unlink_peer_locked(ps__mem_van_t *van, ps__mem_conn_t *c)
{
    ps__mem_peer_t *p = ps_van_peer_slots_find(&van->peers, c->peer_id);
    if (p == NULL || (p->out != c && p->in != c)) {
        return 0;
    }
    p->out = p->out == c ? NULL : p->out;
    p->in = p->in == c ? NULL : p->in;
    p->chosen = p->chosen == c ? NULL : p->chosen;
    return p->out == NULL && p->in == NULL;
}

void ps__mem_set_peer(ps__mem_conn_t *conn, int id)
{
    ps__mem_van_t *van = conn->van;
    pthread_mutex_lock(&van->lock);
    unlink_peer_locked(van, conn);
    conn->peer_id = id;
    ps__mem_peer_t *p = id != PS_NODE_EMPTY ? peer_get(van, id, 1) : NULL;
    if (p != NULL) {
        p->in = conn;
        p->lost = PS_OK;
    }
    pthread_mutex_unlock(&van->lock);
}

/* Frees `c` (on the loop, or in close); reports its node failed with `why`
 * when `report` and it was the node's last connection. */
static void conn_destroy(ps__mem_conn_t *c, ps_status_t why, int report)
{
    ps__mem_van_t *van = c->van;
    pthread_mutex_lock(&van->lock);
    for (int i = 0; i < van->num_conns; ++i) {
        if (van->conns[i] == c) {
            van->conns[i] = van->conns[--van->num_conns];
            break;
        }
    }
    int last = unlink_peer_locked(van, c);
    ps__mem_peer_t *p = ps_van_peer_slots_find(&van->peers, c->peer_id);
    if (last && p != NULL && ps_van_keeps_lost(why)) {
        p->lost = why;
    }
    while (c->out_head != NULL) {
        ps__mem_out_t *o = c->out_head;
        c->out_head = o->next;
        out_free(o);
        __atomic_sub_fetch(&van->queued, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&van->lock);
    ps__mem_link_close(c);
    ps_msg_release(&c->rmsg);
    free(c->rbuf);
    if (report && last && van->base.cb.peer_failed != NULL) {
        ps_info(PS_LOG_VAN, "mem: node %d gone (%s)", c->peer_id, ps_status_str(why));
        van->base.cb.peer_failed(van->base.cb.arg, c->peer_id, why);
    }
    free(c);
}

/* ---- the progress loop's ops ---- */

/* A connection being dialled: try again, or give up at its deadline. */
static int poll_dial(ps__mem_conn_t *c, uint64_t now)
{
    if (now >= c->deadline_ns) {
        ps_warn(PS_LOG_VAN, "mem: nobody listens at %s:%d for node %d; giving up", c->host, c->port,
                c->peer_id);
        conn_destroy(c, PS_ERR_UNREACHABLE, 1);
        return 1;
    }
    if (now < c->next_try_ns) {
        return 0;
    }
    c->next_try_ns = ps_van_connect_backoff(&c->backoff_ms, now);
    ps__mem_link_t *link;
    if (ps__mem_dial(&c->van->loop, c->host, c->port, &link) != PS_OK) {
        return 0;
    }
    pthread_mutex_lock(&c->van->lock);
    c->link = link;
    c->side = 0;
    ps__mem_flush_locked(c);
    pthread_mutex_unlock(&c->van->lock);
    return 1;
}

static int mem_poll(void *arg, unsigned budget)
{
    ps__mem_van_t *van = arg;
    pthread_mutex_lock(&van->lock);
    if (van->cap_snap < van->num_conns) {
        ps__mem_conn_t **s = realloc(van->snap, (size_t)van->cap_conns * sizeof(*s));
        if (s != NULL) {
            van->snap = s;
            van->cap_snap = van->cap_conns;
        }
    }
    int n = van->num_conns < van->cap_snap ? van->num_conns : van->cap_snap;
    if (n > 0) {
        memcpy(van->snap, van->conns, (size_t)n * sizeof(*van->snap)); /* snap is NULL until then */
    }
    pthread_mutex_unlock(&van->lock);

    int events = 0;
    uint64_t now = ps_time_now_ns();
    for (int i = 0; i < n; ++i) {
        ps__mem_conn_t *c = van->snap[i];
        if (__atomic_load_n(&c->closing, __ATOMIC_ACQUIRE)) {
            conn_destroy(c, PS_OK, 0);
            continue;
        }
        if (c->link == NULL) {
            events += poll_dial(c, now);
            continue;
        }
        pthread_mutex_lock(&van->lock);
        events += ps__mem_flush_locked(c) != 0;
        pthread_mutex_unlock(&van->lock);
        ps_status_t st = ps__mem_rx(c, budget, &events);
        if (st != PS_OK) {
            conn_destroy(c, st, 1);
            events++;
        }
    }
    return events;
}

static int mem_arm(void *arg, int64_t *timeout_ns_p)
{
    ps__mem_van_t *van = arg;
    int busy = 0;
    uint64_t now = ps_time_now_ns();
    pthread_mutex_lock(&van->lock);
    for (int i = 0; i < van->num_conns && !busy; ++i) {
        ps__mem_conn_t *c = van->conns[i];
        if (c->closing) {
            busy = 1;
        } else if (c->link != NULL) {
            busy = ps__mem_link_ready(c, c->out_head != NULL);
        } else {
            int64_t wait = c->next_try_ns > now ? (int64_t)(c->next_try_ns - now) : 0;
            if (*timeout_ns_p < 0 || wait < *timeout_ns_p) {
                *timeout_ns_p = wait;
            }
        }
    }
    pthread_mutex_unlock(&van->lock);
    return busy ? PS_VAN_LOOP_BUSY : PS_VAN_LOOP_SLEEP;
}

static int64_t mem_outstanding(void *arg, uint64_t *moved_p)
{
    ps__mem_van_t *van = arg;
    *moved_p = __atomic_load_n(&van->moved, __ATOMIC_RELAXED);
    return __atomic_load_n(&van->queued, __ATOMIC_RELAXED);
}

static const ps_van_loop_ops_t mem_loop_ops = {
    .size = sizeof(ps_van_loop_ops_t),
    .poll = mem_poll,
    .arm = mem_arm,
    .outstanding = mem_outstanding,
};

/* ---- the ops ---- */

static ps_status_t mem_open(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                            ps_van_t **van_p)
{
    if (params->auth_enabled) {
        /* Every peer of this van is in this process and holds the same
         * key: a proof would show nothing. */
        ps_error(PS_LOG_VAN, "mem: the in-process van runs no job-secret handshake; "
                             "unset PS_JOB_SECRET or pick another van");
        return PS_ERR_UNSUPPORTED;
    }
    ps__mem_van_t *van = calloc(1, sizeof(*van));
    if (van == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps_van_base_init(&van->base, "mem", &mem_ops, PS_LOG_VAN, params, cb);
    ps_van_base_set_own_tag(&van->base, "PSMEM"); /* its hello, "PSMEMH" */
    van->limits = ps_van_frame_limits(params);
    pthread_mutex_init(&van->lock, NULL);
    ps_van_loop_params_t lp = {
        .thread_name = "ps-mem",
        .log = PS_LOG_VAN,
        .busy_poll = params->busy_poll,
        .idle_spin_ns = PS_VAN_LOOP_IDLE_SPIN_NS,
    };
    ps_status_t st = ps_van_loop_init(&van->loop, &lp, &mem_loop_ops, van);
    if (st == PS_OK) {
        st = ps_van_loop_start(&van->loop, NULL, 0);
        if (st != PS_OK) {
            ps_van_loop_cleanup(&van->loop);
        }
    }
    if (st != PS_OK) {
        pthread_mutex_destroy(&van->lock);
        free(van);
        return st;
    }
    van->base.handle.loop = &van->loop;
    *van_p = &van->base.handle;
    return PS_OK;
}

static void mem_close(ps_van_t *v)
{
    ps__mem_van_t *van = mem_of(v);
    ps__mem_unlisten(van);
    if (ps_van_loop_stop(&van->loop) != PS_OK) {
        ps_error(PS_LOG_VAN, "mem: the progress thread does not stop; leaving the van behind");
        return;
    }
    while (van->num_conns > 0) {
        conn_destroy(van->conns[van->num_conns - 1], PS_OK, 0);
    }
    ps_van_loop_cleanup(&van->loop);
    ps_van_peer_slots_free(&van->peers);
    pthread_mutex_destroy(&van->lock);
    free(van->conns);
    free(van->snap);
    ps_van_base_fini(&van->base);
    free(van);
}

static ps_status_t mem_query(ps_van_t *v, ps_van_attr_t *attr)
{
    ps__mem_van_t *van = mem_of(v);
    memset(attr, 0, sizeof(*attr));
    /* Zero copy as the tcp van's: the segments go from the caller's
     * slices into the pipe, as from a socket's caller into the kernel. */
    attr->cap_flags = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_BUSY_POLL |
                      PS_CAP_SAME_HOST_ONLY;
    ps_van_frame_attr(&van->limits, attr);
    attr->num_streams = 1;
    return PS_OK;
}

typedef struct {
    ps__mem_van_t *van;
    const char *host;
} listen_try_t;

static ps_status_t listen_try(void *arg, int port, int random, char *where, size_t cap)
{
    (void)random;
    listen_try_t *t = arg;
    snprintf(where, cap, "%s:%d", t->host[0] != '\0' ? t->host : "*", port);
    return ps__mem_listen(t->van, t->host, port);
}

static ps_status_t mem_bind(ps_van_t *v, ps_node_t *node, int max_retry)
{
    ps__mem_van_t *van = mem_of(v);
    if (__atomic_exchange_n(&van->bound, 1, __ATOMIC_ACQ_REL)) {
        return PS_ERR_BAD_STATE;
    }
    listen_try_t t = {.van = van, .host = van->base.params.bind_any ? "" : node->hostname};
    char where[PS_NODE_HOSTNAME_MAX + 8];
    int port = 0;
    ps_status_t st = ps_van_listen_on_port(node, max_retry, van->base.params.is_scheduler,
                                           PS_LOG_VAN, listen_try, &t, NULL, &port, where,
                                           sizeof(where));
    if (st != PS_OK) {
        __atomic_store_n(&van->bound, 0, __ATOMIC_RELEASE);
        return st;
    }
    ps_van_listen_bound(node, port);
    return PS_OK;
}

static ps_status_t mem_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    ps__mem_van_t *van = mem_of(v);
    int port;
    ps_status_t st = ps_van_peer_port(peer, PS_LOG_VAN, &port);
    if (st != PS_OK) {
        return st;
    }
    pthread_mutex_lock(&van->lock);
    ps__mem_peer_t *p = peer_get(van, peer->id, 1);
    if (p == NULL) {
        st = PS_ERR_NO_MEMORY;
    } else if (p->out == NULL) {
        ps__mem_conn_t *c = ps__mem_conn_new(van, 1, peer->id);
        if (c == NULL || add_conn_locked(van, c) != PS_OK) {
            free(c);
            st = PS_ERR_NO_MEMORY;
        } else {
            snprintf(c->host, sizeof(c->host), "%s", peer->hostname);
            c->port = port;
            uint64_t ms = (uint64_t)ps_van_connect_timeout_ms(van->base.params.connect_timeout_ms,
                                                              PS__MEM_CONNECT_MS);
            c->deadline_ns = ps_time_now_ns() + ms * PS_NSEC_PER_MSEC;
            p->out = c;
            p->lost = PS_OK;
            /* The hello goes first; until the node's id is known it
             * announces PS_NODE_EMPTY. */
            st = hello_locked(c, my_id != PS_NODE_EMPTY ? my_id : ps_van_base_my_id(&van->base));
        }
    }
    pthread_mutex_unlock(&van->lock);
    ps_van_loop_wake(&van->loop); /* the loop dials */
    return st;
}

static void mem_disconnect(ps_van_t *v, int node_id)
{
    ps__mem_van_t *van = mem_of(v);
    pthread_mutex_lock(&van->lock);
    ps__mem_peer_t *p = ps_van_peer_slots_find(&van->peers, node_id);
    if (p != NULL) {
        /* Out of the table now (sends fail at once); closed on the loop,
         * quietly: the peer sees the end of its pipe. */
        for (int i = 0; i < 2; ++i) {
            ps__mem_conn_t *c = i == 0 ? p->out : p->in;
            if (c != NULL) {
                __atomic_store_n(&c->closing, 1, __ATOMIC_RELEASE);
            }
        }
        memset(p, 0, sizeof(*p));
    }
    pthread_mutex_unlock(&van->lock);
    ps_van_loop_wake(&van->loop);
}

static ps_status_t mem_set_node_id(ps_van_t *v, int node_id)
{
    ps__mem_van_t *van = mem_of(v);
    int changed;
    ps_status_t st = ps_van_base_set_node_id(&van->base, node_id, &changed);
    if (st != PS_OK || !changed) {
        return st;
    }
    /* Re-announce ourselves on what we dialled, in order with the data. */
    pthread_mutex_lock(&van->lock);
    for (int i = 0; i < van->num_conns && st == PS_OK; ++i) {
        if (van->conns[i]->outgoing) {
            st = hello_locked(van->conns[i], node_id);
        }
    }
    pthread_mutex_unlock(&van->lock);
    return st;
}

/* Queues `o` for node `recver`, or frees it: how its last connection
 * failed, else PS_ERR_UNREACHABLE. */
static ps_status_t queue_to(ps__mem_van_t *van, int recver, ps__mem_out_t *o)
{
    pthread_mutex_lock(&van->lock);
    ps__mem_peer_t *p = ps_van_peer_slots_find(&van->peers, recver);
    ps__mem_conn_t *c = NULL;
    if (p != NULL) {
        /* Ours first, else the peer's to us; then always the same one. */
        c = p->chosen = p->chosen != NULL ? p->chosen : p->out != NULL ? p->out : p->in;
    }
    ps_status_t lost = p != NULL ? p->lost : PS_OK;
    if (c != NULL) {
        queue_locked(c, o);
    }
    pthread_mutex_unlock(&van->lock);
    if (c == NULL) {
        out_free(o);
        return lost != PS_OK ? lost : PS_ERR_UNREACHABLE;
    }
    return PS_OK;
}

static ps_status_t mem_send(ps_van_t *v, const ps_msg_t *msg)
{
    ps__mem_van_t *van = mem_of(v);
    ps_meta_t scratch;
    const ps_meta_t *meta;
    ps_status_t st = ps_van_send_prepare(&van->base, msg, 0, &scratch, &meta);
    if (st != PS_OK) {
        return st;
    }
    ps__mem_out_t *o;
    st = out_new(van, meta, msg, &o);
    if (st != PS_OK) {
        return st;
    }
    return queue_to(van, msg->meta.recver, o);
}

/* A lane message: its bytes (valid during the call only) copied behind the
 * van's prefix, queued in order with send()'s frames. */
static ps_status_t mem_send_lane(ps_van_t *v, int recver, uint8_t *bytes, size_t len)
{
    ps__mem_van_t *van = mem_of(v);
    if (len < PS_LANE_HDR_LEN || len > PS_LANE_MAX_BYTES) {
        return PS_ERR_INVALID_ARG;
    }
    ps__mem_out_t *o = calloc(1, sizeof(*o) + PS__MEM_LANE_PREFIX + len);
    if (o == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    o->head = (uint8_t *)(o + 1);
    o->head_len = PS__MEM_LANE_PREFIX + len;
    o->head[0] = PS_LANE_MAGIC;
    ps_put_le16(o->head + 1, (uint16_t)len);
    memcpy(o->head + PS__MEM_LANE_PREFIX, bytes, len);
    return queue_to(van, recver, o);
}

static const ps_van_ops_t mem_ops = {
    .size = sizeof(ps_van_ops_t),
    .open = mem_open,
    .close = mem_close,
    .query = mem_query,
    .bind = mem_bind,
    .connect = mem_connect,
    .disconnect = mem_disconnect,
    .set_node_id = mem_set_node_id,
    .send = mem_send,
    .register_mem = ps_van_no_register_mem,
    .deregister_mem = ps_van_no_deregister_mem,
    .stats = ps_van_base_stats,
    .progress = ps_van_loop_progress,
    .send_lane = mem_send_lane,
};

static const ps_van_component_t mem_component = {
    .name = "mem",
    .aliases = "refvan",
    .ops = &mem_ops,
    .unavailable = NULL,
};

PS_VAN_REGISTER(mem_component)

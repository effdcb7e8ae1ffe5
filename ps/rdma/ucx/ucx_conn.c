/*
 * Connections of the UCX van: outgoing connections with retries until
 * PS_CONNECT_TIMEOUT_MS, accepted ones, the HELLO/ACK handshake (over the
 * TCP connections of ucx_boot.c), the endpoints made from the addresses it
 * carries, endpoint failures, and teardown. The model is
 * the TCP van's (ps/net/tcp/tcp_conn.c): every process listens; connect()
 * opens our own connection to a peer and announces our node id; the
 * accepting side learns who is at the other end from that; send() uses our
 * own connection to a node when there is one, otherwise the node's
 * connection to us. ucx_internal.h describes the endpoints and cookies.
 *
 * Failures. An endpoint error on a connection that was up, or a connection
 * that never came up before its deadline, closes the connection with one
 * log line; if it belonged to an identified peer, the peer's other
 * connections are closed too and peer_failed() is called once. While an
 * outgoing connection is still coming up, a refused or closed TCP
 * connection means "not listening yet" or "busy" (the launcher starts
 * everyone at once) and it is retried with backoff.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/van/addr.h"
#include "ps/net/van/conn_list.h"
#include "ps/rdma/ucx/ucx_internal.h"

/* ---- connections and their references ---- */

static ps__ucx_conn_t *conn_new(ps__ucx_van_t *van, int outgoing)
{
    ps__ucx_conn_t *conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        return NULL;
    }
    conn->van = van;
    conn->refs = 1;
    conn->outgoing = outgoing;
    conn->now_max = PS__UCX_AM_META_HDR + PS__UCX_HM_INLINE;
    conn->peer_id = PS_NODE_EMPTY;
    conn->hello_id = PS_NODE_EMPTY;
    conn->state = outgoing ? PS__UCX_NEW : PS__UCX_WAIT;
    conn->boot_fd = -1;
    ps_van_base_hs_init(&van->base, &conn->hs, "ucx", outgoing);
    pthread_mutex_init(&conn->lock, NULL);
    return conn;
}

void ps__ucx_conn_unref(ps__ucx_conn_t *conn)
{
    if (conn != NULL && __atomic_sub_fetch(&conn->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_mutex_destroy(&conn->lock);
        free(conn);
    }
}

static void conn_link(ps__ucx_van_t *van, ps__ucx_conn_t *conn)
{
    PS_VAN_CONN_LINK(van->conns, conn);
}

static void conn_unlink(ps__ucx_van_t *van, ps__ucx_conn_t *conn)
{
    PS_VAN_CONN_UNLINK(van->conns, conn);
}

/* ---- cookies: open addressing on the cookie value ---- */

static ps_status_t cookies_grow(ps__ucx_van_t *van)
{
    uint32_t cap = van->cookies_cap == 0 ? 64 : van->cookies_cap * 2;
    ps__ucx_conn_t **table = calloc(cap, sizeof(*table));
    if (table == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < van->cookies_cap; ++i) {
        ps__ucx_conn_t *c = van->cookies[i];
        if (c != NULL) {
            uint32_t j = c->local_cookie & (cap - 1);
            while (table[j] != NULL) {
                j = (j + 1) & (cap - 1);
            }
            table[j] = c;
        }
    }
    free(van->cookies);
    van->cookies = table;
    van->cookies_cap = cap;
    return PS_OK;
}

ps__ucx_conn_t *ps__ucx_conn_lookup(ps__ucx_van_t *van, uint32_t cookie)
{
    if (cookie == 0 || van->cookies_cap == 0) {
        return NULL;
    }
    uint32_t mask = van->cookies_cap - 1;
    for (uint32_t i = cookie & mask, n = 0; n < van->cookies_cap; i = (i + 1) & mask, ++n) {
        ps__ucx_conn_t *c = van->cookies[i];
        if (c == NULL) {
            return NULL;
        }
        if (c->local_cookie == cookie) {
            return c;
        }
    }
    return NULL;
}

/* Gives conn a cookie no live connection has, and the first sequence
 * number expected from its peer: both random, so that another peer cannot
 * guess them (ucx_internal.h). */
static ps_status_t cookie_assign(ps__ucx_van_t *van, ps__ucx_conn_t *conn)
{
    if (conn->local_cookie != 0) {
        return PS_OK;
    }
    if (2 * (van->num_cookies + 1) > van->cookies_cap) {
        ps_status_t st = cookies_grow(van);
        if (st != PS_OK) {
            return st;
        }
    }
    uint32_t cookie;
    do {
        cookie = (uint32_t)ps_van_random() & PS__UCX_COOKIE_MASK;
    } while (cookie == 0 || ps__ucx_conn_lookup(van, cookie) != NULL);
    conn->local_cookie = cookie;
    conn->rx_seq = ps_van_random() & PS__UCX_SEQ_MASK;
    uint32_t mask = van->cookies_cap - 1;
    uint32_t j = cookie & mask;
    while (van->cookies[j] != NULL) {
        j = (j + 1) & mask;
    }
    van->cookies[j] = conn;
    van->num_cookies++;
    return PS_OK;
}

static void cookie_remove(ps__ucx_van_t *van, ps__ucx_conn_t *conn)
{
    if (conn->local_cookie == 0 || van->cookies_cap == 0) {
        return;
    }
    uint32_t mask = van->cookies_cap - 1;
    uint32_t i = conn->local_cookie & mask;
    for (uint32_t n = 0; n < van->cookies_cap; ++n, i = (i + 1) & mask) {
        if (van->cookies[i] == NULL) {
            return;
        }
        if (van->cookies[i] == conn) {
            break;
        }
    }
    if (van->cookies[i] != conn) {
        return;
    }
    /* Backward-shift deletion keeps every probe chain unbroken. */
    van->cookies[i] = NULL;
    van->num_cookies--;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        ps__ucx_conn_t *c = van->cookies[j];
        if (c == NULL) {
            break;
        }
        uint32_t home = c->local_cookie & mask;
        int between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!between) {
            van->cookies[i] = c;
            van->cookies[j] = NULL;
            i = j;
        }
    }
}

/* ---- peer table (its lock: van->peers.lock) ---- */

/* Takes conn out of the table; returns 1 if it was there (the table's
 * reference passes to the caller). */
static int peer_remove_conn(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int id, ps_status_t why)
{
    int found = 0;
    pthread_rwlock_wrlock(&van->peers.lock);
    ps__ucx_peer_t *p = ps_van_peer_table_get(&van->peers, id, 0);
    if (p != NULL) {
        if (p->out == conn) {
            p->out = NULL;
            found = 1;
        }
        for (int i = 0; i < p->num_in; ++i) {
            if (p->in[i] == conn) {
                memmove(&p->in[i], &p->in[i + 1], (size_t)(p->num_in - i - 1) * sizeof(p->in[0]));
                p->num_in--;
                found = 1;
                break;
            }
        }
        if (found) {
            ps_van_peer_went(&p->hdr, why);
        }
    }
    pthread_rwlock_unlock(&van->peers.lock);
    return found;
}

ps_status_t ps__ucx_peer_add_in(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int id)
{
    pthread_rwlock_wrlock(&van->peers.lock);
    ps__ucx_peer_t *p = ps_van_peer_table_get(&van->peers, id, 1);
    if (p == NULL) {
        pthread_rwlock_unlock(&van->peers.lock);
        return PS_ERR_NO_MEMORY;
    }
    conn->peer_id = id;
    /* More incoming connections than we index still deliver; they are
     * just not used for replies. */
    if (p->num_in < PS__UCX_MAX_STREAMS) {
        p->in[p->num_in++] = ps__ucx_conn_ref(conn);
    }
    ps_van_peer_connected(&p->hdr);
    pthread_rwlock_unlock(&van->peers.lock);
    return PS_OK;
}

int ps__ucx_may_claim(ps__ucx_van_t *van, ps__ucx_conn_t *conn, int id, uint64_t nonce)
{
    if (id == PS_NODE_EMPTY || conn->peer_id == id) {
        return 1;
    }
    int taken = 0;
    pthread_rwlock_rdlock(&van->peers.lock);
    ps__ucx_peer_t *p = ps_van_peer_table_get(&van->peers, id, 0);
    for (int i = 0; p != NULL && i < p->num_in; ++i) {
        if (p->in[i] != conn && p->in[i]->nonce != nonce && p->in[i]->state != PS__UCX_DEAD) {
            taken = 1;
        }
    }
    pthread_rwlock_unlock(&van->peers.lock);
    return !taken;
}

ps__ucx_conn_t *ps__ucx_peer_send_conn_locked(ps__ucx_van_t *van, int id)
{
    const ps__ucx_peer_t *p = ps_van_peer_slots_find(&van->peers.slots, id);
    if (p == NULL) {
        return NULL;
    }
    /* Our own connection first; else the peer's connection to us. One
     * fixed choice per peer keeps its messages in order. */
    return p->out != NULL ? p->out : (p->num_in > 0 ? p->in[0] : NULL);
}

ps__ucx_conn_t *ps__ucx_peer_send_conn(ps__ucx_van_t *van, int id)
{
    pthread_rwlock_rdlock(&van->peers.lock);
    ps__ucx_conn_t *conn = ps__ucx_peer_send_conn_locked(van, id);
    if (conn != NULL) {
        ps__ucx_conn_ref(conn);
    }
    pthread_rwlock_unlock(&van->peers.lock);
    return conn;
}

ps_status_t ps__ucx_peer_unconnected(ps__ucx_van_t *van, int id)
{
    return ps_van_unconnected(&van->base, id, ps_van_peer_table_lost(&van->peers, id));
}

/* ---- UCX callbacks: record, never act (ucx_internal.h says why) ---- */

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ps__ucx_conn_t *conn = arg;
    ps__ucx_ev_t *ev = calloc(1, sizeof(*ev));
    if (ev == NULL) {
        return; /* the connection's next send fails and reports it */
    }
    (void)ep;
    ev->kind = PS__UCX_EV_EP_ERROR;
    ev->conn = ps__ucx_conn_ref(conn);
    ev->status = status;
    ps__ucx_post_event(conn->van, ev);
}

static void on_closed(void *request, ucs_status_t status, void *user_data)
{
    ps__ucx_closing_t *c = user_data;
    ps__ucx_ev_t *ev = calloc(1, sizeof(*ev));
    (void)status;
    ucp_request_free(request);
    c->done = 1;
    c->req = NULL;
    if (ev == NULL) {
        return; /* leaks the record until close() */
    }
    ev->kind = PS__UCX_EV_CLOSED;
    ev->closing = c;
    ps__ucx_post_event(c->conn->van, ev);
}

/* ---- endpoints ---- */

static void closing_done(ps__ucx_van_t *van, ps__ucx_closing_t *c)
{
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        van->closing = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    ps__ucx_conn_unref(c->conn);
    free(c);
}

/* Closes an endpoint; the connection stays referenced until UCX is done
 * with it (its error handler's argument). `force` only for endpoints with
 * peer-failure handling (UCX refuses it on others). */
static void ep_close(ps__ucx_conn_t *conn, ucp_ep_h ep, int force)
{
    ps__ucx_van_t *van = conn->van;
    ps__ucx_closing_t *c = calloc(1, sizeof(*c));
    ucp_request_param_t param;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    if (c != NULL) {
        c->conn = ps__ucx_conn_ref(conn);
        c->next = van->closing;
        if (van->closing != NULL) {
            van->closing->prev = c;
        }
        van->closing = c;
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        param.cb.send = on_closed;
        param.user_data = c;
    }
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(r) && c != NULL && !c->done) {
        c->req = r;
    }
    if (!UCS_PTR_IS_PTR(r)) {
        if (UCS_PTR_IS_ERR(r)) {
            ps_debug(PS_LOG_UCX, "closing an endpoint of %s: %s", conn->addr_str,
                     ucs_status_string(UCS_PTR_STATUS(r)));
        }
        if (c != NULL) {
            closing_done(van, c);
        }
    } else if (c == NULL) {
        ucp_request_free(r);
    }
}

/* `force` for the control endpoint. The data endpoint (shared memory) has
 * no peer-failure handling, so it is always flushed: UCX keeps no
 * protocol state on such an endpoint (see conn_fail). */
static void conn_close_eps(ps__ucx_conn_t *conn, int force)
{
    if (conn->data_ep != NULL && conn->data_ep != conn->ctl_ep) {
        ep_close(conn, conn->data_ep, 0);
    }
    if (conn->ctl_ep != NULL) {
        ep_close(conn, conn->ctl_ep, force);
    }
    conn->data_ep = conn->ctl_ep = NULL;
}

/* HELLO or ACK on the TCP connection, with our workers' addresses. */
static ps_status_t send_handshake(ps__ucx_conn_t *conn, int type, int node_id)
{
    ps__ucx_van_t *van = conn->van;
    uint8_t addrs[PS__UCX_ADDRS_HDR + 2 * PS__UCX_MAX_ADDR];
    size_t len = ps__ucx_addrs_pack(addrs, sizeof(addrs), van->ctl_addr, van->ctl_addr_len,
                                    van->data_addr, van->data_addr_len);
    if (len == 0) {
        return PS_ERR_INVALID_ARG;
    }
    return ps__ucx_boot_send(conn, type, node_id, conn->local_cookie, conn->nonce, conn->rx_seq,
                             addrs, len);
}

/* For ucx_auth.c: HELLO once the job secret is proved. */
ps_status_t ps__ucx_send_hello(ps__ucx_conn_t *conn)
{
    int id = conn->hello_id;
    if (id == PS_NODE_EMPTY) {
        id = __atomic_load_n(&conn->van->base.my_id, __ATOMIC_ACQUIRE);
    }
    return send_handshake(conn, PS__UCX_HS_HELLO, id);
}

static int log_on(int level)
{
    return level <= __atomic_load_n(&ps__log_level, __ATOMIC_RELAXED);
}

/* An outgoing connection's attempt: its TCP connection to the peer's
 * port (ps__ucx_conn_greet() goes on once it is up). */
static void conn_start(ps__ucx_conn_t *conn)
{
    conn->attempts++;
    conn->retry_at_ns = 0;
    ps_status_t st = cookie_assign(conn->van, conn);
    if (st != PS_OK) {
        ps_error(PS_LOG_UCX, "cannot connect to node %d at %s: %s", conn->peer_id, conn->addr_str,
                 ps_status_str(st));
        ps__ucx_conn_fail(conn, st, 1);
        return;
    }
    pthread_mutex_lock(&conn->lock);
    conn->state = PS__UCX_WAIT;
    pthread_mutex_unlock(&conn->lock);
    ps_debug(PS_LOG_UCX, "connecting to node %d at %s (attempt %d)", conn->peer_id,
             conn->addr_str, conn->attempts);
    int err = ps__ucx_boot_connect(conn);
    if (err != 0) {
        ps__ucx_conn_boot_lost(conn, err);
    }
}

void ps__ucx_conn_greet(ps__ucx_conn_t *conn)
{
    /* The id connect() was given, else the one we have now (a retry after
     * set_node_id announces the new one). Job secret: its handshake first;
     * ucx_auth.c sends HELLO after. */
    int id = conn->hello_id;
    if (id == PS_NODE_EMPTY) {
        id = __atomic_load_n(&conn->van->base.my_id, __ATOMIC_ACQUIRE);
    }
    ps_status_t st = conn->van->base.params.auth_enabled
                         ? ps__ucx_auth_start(conn, id)
                         : send_handshake(conn, PS__UCX_HS_HELLO, id);
    if (st != PS_OK) {
        ps_error(PS_LOG_UCX, "cannot greet node %d at %s: %s", conn->peer_id, conn->addr_str,
                 ps_status_str(st));
        ps__ucx_conn_fail(conn, st, 1);
    }
}

/* ---- connect / disconnect / node id ---- */


ps_status_t ps__ucx_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    ps__ucx_van_t *van = ps__ucx_of(v);
    ps_sockaddr_t addr;
    ps_status_t st = ps_van_peer_addr(peer, PS_LOG_UCX, &addr);
    if (st != PS_OK) {
        return st;
    }
    ps__ucx_conn_t *conn = conn_new(van, 1);
    if (conn == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    conn->peer_id = peer->id;
    conn->addr = addr;
    if (ps_sockaddr_format(&addr, conn->addr_str, sizeof(conn->addr_str)) != PS_OK) {
        strcpy(conn->addr_str, "?");
    }
    conn->nonce = ps_van_random();
    conn->hello_id = my_id;
    conn->connect_deadline_ns =
        ps_time_now_ns() + (uint64_t)van->base.params.connect_timeout_ms * PS_NSEC_PER_MSEC;

    ps__ucx_conn_t *replaced = NULL;
    pthread_rwlock_wrlock(&van->peers.lock);
    ps__ucx_peer_t *p = ps_van_peer_table_get(&van->peers, peer->id, 1);
    if (p == NULL) {
        pthread_rwlock_unlock(&van->peers.lock);
        ps__ucx_conn_unref(conn);
        return PS_ERR_NO_MEMORY;
    }
    if (p->out != NULL) {
        if (ps_sockaddr_equal(&p->out->addr, &addr)) {
            pthread_rwlock_unlock(&van->peers.lock);
            ps__ucx_conn_unref(conn);
            return PS_OK; /* already connected (or connecting) */
        }
        /* The id moved (a recovered node took it over): the old
         * connection goes, with the table's reference. */
        replaced = p->out;
    }
    p->out = ps__ucx_conn_ref(conn); /* the table's reference */
    ps_van_peer_connected(&p->hdr);
    pthread_rwlock_unlock(&van->peers.lock);

    /* The start list takes our reference, the close list the table's. */
    ps_van_handover_link_t *start = &conn->start_link;
    ps_van_handover_link_t *to_close = replaced != NULL ? &replaced->close_link : NULL;
    ps_van_handover_put(&van->handover, &start, 1, &to_close, replaced != NULL);
    ps__ucx_wake(van);
    ps_info(PS_LOG_UCX, "connecting to node %d at %s%s", peer->id, conn->addr_str,
            replaced != NULL ? " (replacing its old address)" : "");
    return PS_OK;
}

void ps__ucx_disconnect(ps_van_t *v, int node_id)
{
    ps__ucx_van_t *van = ps__ucx_of(v);
    ps_van_handover_link_t *to_close[1 + PS__UCX_MAX_STREAMS];
    int n = 0;
    pthread_rwlock_wrlock(&van->peers.lock);
    ps__ucx_peer_t *p = ps_van_peer_table_get(&van->peers, node_id, 0);
    if (p != NULL) {
        /* The table's references move to the close list. */
        for (int i = -1; i < p->num_in; ++i) {
            ps__ucx_conn_t *c = i < 0 ? p->out : p->in[i];
            if (c != NULL) {
                to_close[n++] = &c->close_link;
            }
        }
        p->out = NULL;
        p->num_in = 0;
    }
    pthread_rwlock_unlock(&van->peers.lock);
    if (n > 0) {
        ps_van_handover_put(&van->handover, NULL, 0, to_close, n);
        ps__ucx_wake(van);
        ps_info(PS_LOG_UCX, "disconnecting from node %d", node_id);
    }
}

/* The connection a new node id is announced on: ours. */
static int pick_announced(void *peer, void **out, int max)
{
    ps__ucx_peer_t *p = peer;
    if (p->out == NULL || max < 1) {
        return 0;
    }
    out[0] = ps__ucx_conn_ref(p->out);
    return 1;
}

ps_status_t ps__ucx_set_node_id(ps_van_t *v, int node_id)
{
    ps__ucx_van_t *van = ps__ucx_of(v);
    int changed;
    ps_status_t st = ps_van_base_set_node_id(&van->base, node_id, &changed);
    if (st != PS_OK || !changed) {
        return st;
    }
    /* Re-announce on every connection we opened, in line with its data. */
    void **list;
    int n = ps_van_peer_table_collect(&van->peers, pick_announced, 1, &list);
    ps_status_t result = PS_OK;
    for (int i = 0; i < n; ++i) {
        ps__ucx_op_t *op = NULL;
        ps_meta_t hello;
        ps__ucx_hello_meta(&hello, node_id);
        ps_status_t st = ps__ucx_note_op(van, &hello, &op);
        if (st == PS_OK) {
            st = ps__ucx_conn_submit(list[i], op, NULL); /* takes our reference */
        } else {
            ps__ucx_conn_unref(list[i]);
        }
        if (st != PS_OK && st != PS_ERR_PEER_GONE && result == PS_OK) {
            result = st;
        }
    }
    free(list);
    ps_info(PS_LOG_UCX, "node id is now %d (announced on %d connections)", node_id, n);
    return result;
}

/* ---- progress thread: pending work, events, timers ---- */

/* Takes what other threads handed over; starts connections unless the
 * van is closing. */
static void take_pending(ps__ucx_van_t *van, int start)
{
    ps_van_handover_link_t *to_start, *to_close, *l;
    if (!ps_van_handover_take(&van->handover, &to_start, &to_close)) {
        return;
    }
    van->timer_scan_ns = 0; /* connections change */
    /* Closes first: a connection disconnect() took may still be pending. */
    while ((l = ps_van_handover_pop(&to_close)) != NULL) {
        ps__ucx_conn_t *conn = PS_VAN_HANDOVER_OF(l, ps__ucx_conn_t, close_link);
        ps__ucx_conn_fail(conn, PS_OK, 0);
        ps__ucx_conn_unref(conn); /* the table's reference */
    }
    /* Oldest first. */
    to_start = ps_van_handover_reverse(to_start);
    while ((l = ps_van_handover_pop(&to_start)) != NULL) {
        ps__ucx_conn_t *conn = PS_VAN_HANDOVER_OF(l, ps__ucx_conn_t, start_link);
        if (start && conn->state == PS__UCX_NEW) {
            conn_link(van, conn); /* the start list's reference passes to van->conns */
            conn_start(conn);
        } else {
            ps__ucx_conn_fail(conn, PS_OK, 0);
            ps__ucx_conn_unref(conn);
        }
    }
}

void ps__ucx_start_pending(ps__ucx_van_t *van)
{
    take_pending(van, 1);
}

static void mark_ready(ps__ucx_conn_t *conn, uint32_t remote_cookie, uint64_t seq0)
{
    pthread_mutex_lock(&conn->lock);
    conn->remote_cookie = remote_cookie;
    conn->seq = seq0 & PS__UCX_SEQ_MASK;
    conn->send_ep = conn->data_ep;
    conn->state = PS__UCX_READY;
    if (conn->data_ep == conn->ctl_ep && !conn->ctl_data) {
        /* Its messages arrive on the control worker: progress it every turn. */
        conn->ctl_data = 1;
        conn->van->ctl_data_conns++;
    }
    ps__ucx_op_t *posted = ps__ucx_conn_post_queued(conn);
    pthread_mutex_unlock(&conn->lock);
    ps__ucx_ops_put_list(conn->van, posted);
}

static int is_shm_transport(const char *tl)
{
    return strstr(tl, "sysv/") != NULL || strstr(tl, "posix/") != NULL ||
           strstr(tl, "cma/") != NULL || strstr(tl, "xpmem/") != NULL ||
           strstr(tl, "knem/") != NULL;
}

/* The control endpoint, to the peer's control worker, with peer-failure
 * handling: its errors become the connection's (on_ep_error). */
static ps_status_t open_ctl_ep(ps__ucx_conn_t *conn, const uint8_t *addr)
{
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = (const ucp_address_t *)addr;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = conn;
    ucs_status_t st = ucp_ep_create(conn->van->worker, &ep, &conn->ctl_ep);
    if (st != UCS_OK) {
        conn->ctl_ep = NULL;
        ps_error(PS_LOG_UCX, "cannot reach %s's ucx worker: %s", conn->addr_str,
                 ucs_status_string(st));
        return ps__ucx_status(st);
    }
    conn->data_ep = conn->ctl_ep;
    return PS_OK;
}

/* An endpoint to the peer's data worker, kept when UCX picked shared
 * memory for it (the peer is on this host); otherwise data stays on the
 * control endpoint. Only between data workers: UCX pairs a new endpoint
 * with one the peer made to us, and refuses a pair whose error handling
 * differs. */
static void open_data_ep(ps__ucx_conn_t *conn, const uint8_t *addr, size_t len)
{
    ps__ucx_van_t *van = conn->van;
    if (van->dworker == NULL || len == 0) {
        return;
    }
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = (const ucp_address_t *)addr;
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h data;
    ucs_status_t st = ucp_ep_create(van->dworker, &ep, &data);
    if (st != UCS_OK) {
        ps_debug(PS_LOG_UCX, "%s's shared-memory worker is not reachable from here (%s)",
                 conn->addr_str, ucs_status_string(st));
        return;
    }
    char tl[160];
    ps__ucx_ep_transports(data, tl, sizeof(tl));
    if (!is_shm_transport(tl)) {
        ps_debug(PS_LOG_UCX, "node %d is not on this host (%s); data over the control endpoint",
                 conn->peer_id, tl);
        ep_close(conn, data, 0);
        return;
    }
    conn->data_ep = data;
}

/* Whether UCX may be handed `theirs`, as far as ps can tell: UCX parses a
 * worker address without checking it, and ends the process (an assertion)
 * on one of a format version it does not know, as garbage, or a node of
 * another UCX release, may send. UCX 1.13's header: the version in the low
 * 4 bits of the first byte (0: version 1, whose flags fill the high 4
 * bits; 1: version 2, whose flags are the second byte, 4 defined). The
 * version must be ours. */
static int addr_usable(const uint8_t *theirs, size_t len, const ucp_address_t *ours,
                       size_t ours_len)
{
    const uint8_t *o = (const uint8_t *)ours;
    if (len < 2 || ours_len < 2 || (theirs[0] & 0x0f) != (o[0] & 0x0f)) {
        return 0;
    }
    return (o[0] & 0x0f) == 0 || (theirs[1] & 0xf0) == 0;
}

/* Both endpoints from the addresses in a HELLO or ACK payload. */
static ps_status_t open_eps(ps__ucx_conn_t *conn, const uint8_t *payload, size_t len)
{
    ps__ucx_van_t *van = conn->van;
    const uint8_t *ctl, *data;
    size_t ctl_len, data_len;
    if (!ps__ucx_addrs_parse(payload, len, &ctl, &ctl_len, &data, &data_len)) {
        ps_warn_ratelimited(PS_LOG_UCX, "malformed worker addresses from %s; closing",
                            conn->addr_str);
        return PS_ERR_PROTOCOL;
    }
    if (!addr_usable(ctl, ctl_len, van->ctl_addr, van->ctl_addr_len) ||
        (data_len != 0 && van->data_addr != NULL &&
         !addr_usable(data, data_len, van->data_addr, van->data_addr_len))) {
        ps_error(PS_LOG_UCX, "%s sent a worker address of another format (another ucx release "
                 "than %s?); closing", conn->addr_str, ucp_get_version_string());
        return PS_ERR_PROTOCOL;
    }
    ps_status_t st = open_ctl_ep(conn, ctl);
    if (st == PS_OK) {
        open_data_ep(conn, data, data_len);
    }
    return st;
}

static void log_connected(ps__ucx_conn_t *conn)
{
    if (!log_on(PS_LOG_INFO)) {
        return;
    }
    char tl[160];
    ps__ucx_ep_transports(conn->data_ep, tl, sizeof(tl));
    if (conn->outgoing) {
        ps_info(PS_LOG_UCX, "connected to node %d at %s (data over %s)", conn->peer_id,
                conn->addr_str, tl[0] ? tl : "?");
    } else {
        ps_info(PS_LOG_UCX, "node %d connected from %s (data back over %s)", conn->peer_id,
                conn->addr_str, tl[0] ? tl : "?");
    }
}

static void on_hello(ps__ucx_conn_t *conn, int id, uint32_t cookie, uint64_t nonce, uint64_t seq0,
                     const uint8_t *payload, size_t len)
{
    ps__ucx_van_t *van = conn->van;
    if (conn->outgoing || conn->state != PS__UCX_WAIT) {
        ps_warn_ratelimited(PS_LOG_UCX, "unexpected hello from %s; closing", conn->addr_str);
        ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, conn->outgoing);
        return;
    }
    if (cookie == 0 || cookie > PS__UCX_COOKIE_MASK || !(id == PS_NODE_EMPTY ||
                                                         (id > 0 && id < PS_NODE_EMPTY))) {
        ps_error(PS_LOG_UCX, "malformed hello from %s (node %d, cookie %u); closing",
                 conn->addr_str, id, cookie);
        ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, 0);
        return;
    }
    if (!ps__ucx_auth_hello_ok(conn, id)) {
        return; /* job secret: refused and closed (ucx_auth.c) */
    }
    if (!ps__ucx_may_claim(van, conn, id, nonce)) {
        ps_error(PS_LOG_UCX, "connection from %s claims node id %d, which another live "
                 "connection speaks for; closing", conn->addr_str, id);
        ps__ucx_conn_fail(conn, PS_ERR_AUTH, 0);
        return;
    }
    conn->nonce = nonce;
    /* Replies on this connection (to a node that has no connection of its
     * own... yet) use shared memory too when the peer is on this host. */
    ps_status_t st = open_eps(conn, payload, len);
    if (st == PS_OK) {
        st = cookie_assign(van, conn);
    }
    if (st == PS_OK && id != PS_NODE_EMPTY) {
        st = ps__ucx_peer_add_in(van, conn, id);
    }
    if (st == PS_OK) {
        int my = __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
        st = send_handshake(conn, PS__UCX_HS_ACK, my);
    }
    if (st != PS_OK) {
        ps_debug(PS_LOG_UCX, "cannot answer the hello from %s: %s", conn->addr_str,
                 ps_status_str(st));
        ps__ucx_conn_fail(conn, st, 1);
        return;
    }
    ps__ucx_boot_linger(conn); /* the peer closes its end once it has the ACK */
    mark_ready(conn, cookie, seq0);
    if (conn->admit_pending) {
        conn->admit_pending = 0;
        ps_van_admission_done(&van->adm);
    }
    if (id != PS_NODE_EMPTY) {
        log_connected(conn);
    } else {
        ps_info(PS_LOG_UCX, "unassigned node connected from %s (nonce 0x%llx)", conn->addr_str,
                (unsigned long long)nonce);
    }
}

static void on_ack(ps__ucx_conn_t *conn, int id, uint32_t cookie, uint64_t seq0,
                   const uint8_t *payload, size_t len)
{
    if (!conn->outgoing || conn->state != PS__UCX_WAIT) {
        ps_warn_ratelimited(PS_LOG_UCX, "unexpected ack from %s; closing", conn->addr_str);
        ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, conn->outgoing);
        return;
    }
    if (cookie == 0 || cookie > PS__UCX_COOKIE_MASK) {
        ps_error(PS_LOG_UCX, "malformed ack from %s; closing", conn->addr_str);
        ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, 1);
        return;
    }
    if (!ps__ucx_auth_ack_ok(conn)) {
        return; /* job secret: the peer did not prove it (logged, closed) */
    }
    /* An unassigned node (the scheduler connecting back) answers with no
     * id; anyone else must be whom we meant to reach. */
    if (id != PS_NODE_EMPTY && id != conn->peer_id) {
        ps_error(PS_LOG_UCX, "connection to node %d at %s: the peer is node %d; closing",
                 conn->peer_id, conn->addr_str, id);
        ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, 1);
        return;
    }
    ps_status_t st = open_eps(conn, payload, len);
    if (st != PS_OK) {
        ps__ucx_conn_fail(conn, st, 1);
        return;
    }
    ps__ucx_boot_shut(conn);
    mark_ready(conn, cookie, seq0);
    log_connected(conn);
}

void ps__ucx_conn_on_record(ps__ucx_conn_t *conn, const uint8_t *rec, size_t len)
{
    int type, id;
    uint32_t cookie;
    uint64_t nonce, seq0;
    if (!ps__ucx_hs_parse(rec, PS__UCX_HS_LEN, &type, &id, &cookie, &nonce, &seq0)) {
        ps_warn_ratelimited(PS_LOG_UCX, "malformed handshake record from %s; closing",
                            conn->addr_str);
        ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, conn->outgoing);
        return;
    }
    const uint8_t *payload = rec + PS__UCX_HS_LEN;
    size_t payload_len = len - PS__UCX_HS_LEN;
    if (type == PS__UCX_HS_HELLO) {
        on_hello(conn, id, cookie, nonce, seq0, payload, payload_len);
    } else if (type == PS__UCX_HS_ACK) {
        on_ack(conn, id, cookie, seq0, payload, payload_len);
    } else {
        ps__ucx_auth_on_hs(conn, type, payload, payload_len); /* job secret */
    }
}

ps__ucx_conn_t *ps__ucx_conn_accepted(ps__ucx_van_t *van, int fd, const struct sockaddr *sa,
                                      socklen_t len)
{
    ps__ucx_conn_t *conn = conn_new(van, 0);
    if (conn == NULL) {
        return NULL;
    }
    conn->admit_pending = 1;
    conn->boot_fd = fd;
    ps_sockaddr_t from;
    if (ps_sockaddr_from_sa(sa, len, &from) != PS_OK ||
        ps_sockaddr_format(&from, conn->addr_str, sizeof(conn->addr_str)) != PS_OK) {
        strcpy(conn->addr_str, "?");
    }
    ps_van_hs_accept(&conn->hs); /* job secret: AUTH_INIT expected first */
    /* An acceptor that never hears a hello lets the connection go
     * (PS_HANDSHAKE_TIMEOUT_MS). */
    conn->connect_deadline_ns = ps_van_admission_deadline(&van->adm);
    conn_link(van, conn);
    ps_debug(PS_LOG_UCX, "accepted a connection from %s", conn->addr_str);
    return conn;
}

/* Whether an outgoing connection's TCP connection that failed (errno err,
 * 0: closed) before its handshake finished is worth another try: nobody
 * listens yet, or the peer is busy or closed it (admission). */
static int boot_retryable(int err)
{
    return err == 0 || err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT ||
           err == EHOSTUNREACH || err == ENETUNREACH || err == ECONNABORTED || err == EPIPE;
}

void ps__ucx_conn_boot_lost(ps__ucx_conn_t *conn, int err)
{
    ps__ucx_van_t *van = conn->van;
    if (conn->state == PS__UCX_READY || conn->state == PS__UCX_DEAD) {
        ps__ucx_boot_shut(conn); /* the handshake is over: nothing lost */
        return;
    }
    if (!conn->outgoing) {
        ps_debug(PS_LOG_UCX, "connection from %s ended before its hello: %s", conn->addr_str,
                 err != 0 ? strerror(err) : "closed");
        ps__ucx_conn_fail(conn, PS_ERR_LINK_FAILED, 0);
        return;
    }
    if (conn->boot_heard) {
        /* Job secret: a peer that closes on our steps refused them. */
        ps_van_hs_action_t a;
        ps_van_hs_closed(&conn->hs, &a);
        if (a.verdict != PS_VAN_HS_PASS) {
            ps_van_hs_report(&conn->hs, &a, PS_LOG_UCX, conn->addr_str, conn->addr_str);
            ps__ucx_conn_fail(conn, ps_van_hs_status(&a), 1);
            return;
        }
    }
    uint64_t now = ps_time_now_ns();
    if (boot_retryable(err) && now < conn->connect_deadline_ns) {
        ps__ucx_boot_shut(conn);
        ps_van_base_hs_init(&van->base, &conn->hs, "ucx", 1);
        conn->retry_at_ns = ps_van_connect_backoff(&conn->backoff_ms, now);
        pthread_mutex_lock(&conn->lock);
        conn->state = PS__UCX_NEW;
        pthread_mutex_unlock(&conn->lock);
        ps_debug(PS_LOG_UCX, "connect to node %d at %s: %s; retrying in %u ms", conn->peer_id,
                 conn->addr_str, err != 0 ? strerror(err) : "closed", conn->backoff_ms);
        return;
    }
    ps_error(PS_LOG_UCX, "cannot connect to node %d at %s: %s (gave up after %d ms, "
             "PS_CONNECT_TIMEOUT_MS)", conn->peer_id, conn->addr_str,
             err != 0 ? strerror(err) : "closed", van->base.params.connect_timeout_ms);
    ps__ucx_conn_fail(conn, PS_ERR_UNREACHABLE, 1);
}

static void on_error(ps__ucx_conn_t *conn, ucs_status_t status)
{
    if (conn->state == PS__UCX_DEAD) {
        return;
    }
    ps_status_t why = ps__ucx_status(status);
    if (why == PS_OK || why == PS_ERR_CANCELLED) {
        why = PS_ERR_LINK_FAILED;
    }
    if (conn->peer_id != PS_NODE_EMPTY) {
        ps_info(PS_LOG_UCX, "connection %s node %d at %s ended: %s",
                conn->outgoing ? "to" : "from", conn->peer_id, conn->addr_str,
                ucs_status_string(status));
    } else {
        ps_debug(PS_LOG_UCX, "connection from %s ended: %s", conn->addr_str,
                 ucs_status_string(status));
    }
    ps__ucx_conn_fail(conn, why, 1);
}

void ps__ucx_handle_event(ps__ucx_van_t *van, ps__ucx_ev_t *ev)
{
    switch (ev->kind) {
    case PS__UCX_EV_EP_ERROR:
        on_error(ev->conn, ev->status);
        ps__ucx_conn_unref(ev->conn);
        break;
    case PS__UCX_EV_CLOSED:
        closing_done(van, ev->closing);
        break;
    }
}

static int ms_until(uint64_t at, uint64_t now)
{
    if (at == UINT64_MAX) {
        return -1;
    }
    if (at <= now) {
        return 0;
    }
    return (int)((at - now + PS_NSEC_PER_MSEC - 1) / PS_NSEC_PER_MSEC);
}

int ps__ucx_run_timers(ps__ucx_van_t *van, uint64_t now)
{
    if (now < van->timer_scan_ns) {
        /* Every turn of the loop asks; the connections are walked at most
         * every PS__UCX_TIMER_SCAN_NS (timers are milliseconds apart), or
         * at once after an event or handover changed them. */
        return ms_until(van->timer_next_ns, now);
    }
    uint64_t next = UINT64_MAX;
    int paused_ms = ps_van_admission_timer(&van->adm); /* a listener paused on EMFILE */
    if (paused_ms >= 0) {
        next = now + (uint64_t)paused_ms * PS_NSEC_PER_MSEC;
    }
    ps__ucx_conn_t *conn = van->conns;
    while (conn != NULL) {
        ps__ucx_conn_t *following = conn->next;
        if (conn->state == PS__UCX_NEW || conn->state == PS__UCX_WAIT) {
            if (now >= conn->connect_deadline_ns) {
                if (conn->outgoing) {
                    ps_error(PS_LOG_UCX, "cannot connect to node %d at %s: no answer within %d ms "
                             "(PS_CONNECT_TIMEOUT_MS)", conn->peer_id, conn->addr_str,
                             van->base.params.connect_timeout_ms);
                    ps__ucx_conn_fail(conn, PS_ERR_UNREACHABLE, 1);
                } else {
                    ps_van_admission_expired(&van->adm, conn->addr_str);
                    ps__ucx_conn_fail(conn, PS_ERR_PROTOCOL, 0);
                }
            } else {
                if (conn->state == PS__UCX_NEW && conn->retry_at_ns != 0 &&
                    now >= conn->retry_at_ns) {
                    conn_start(conn);
                }
                if (conn->state == PS__UCX_NEW || conn->state == PS__UCX_WAIT) {
                    uint64_t at = conn->state == PS__UCX_NEW && conn->retry_at_ns != 0
                                      ? conn->retry_at_ns
                                      : conn->connect_deadline_ns;
                    if (at < next) {
                        next = at;
                    }
                }
            }
        }
        conn = following;
    }
    now = ps_time_now_ns();
    van->timer_next_ns = next;
    van->timer_scan_ns = now + PS__UCX_TIMER_SCAN_NS;
    return ms_until(next, now);
}

/* ---- teardown ---- */

/* A connection we close says so to the peer, in line with its data,
 * whatever the reason (a disconnect, our close, a protocol error, a
 * failure of the peer's other connection): the peer then fails it as the
 * TCP van's peer does at EOF. Closing an endpoint made from a worker
 * address tells the peer nothing. Best effort: a goodbye that cannot be
 * sent (the peer is gone, or a forced close cancels it) leaves the peer to
 * notice when this process goes. */
static void say_goodbye(ps__ucx_conn_t *conn)
{
    ps_meta_t bye;
    ps__ucx_bye_meta(&bye, ps_van_base_my_id(&conn->van->base));
    ps__ucx_op_t *op = NULL;
    if (ps__ucx_note_op(conn->van, &bye, &op) == PS_OK) {
        (void)ps__ucx_conn_submit(ps__ucx_conn_ref(conn), op, NULL);
    }
}

void ps__ucx_conn_fail(ps__ucx_conn_t *conn, ps_status_t why, int notify)
{
    ps__ucx_van_t *van = conn->van;
    if (conn->state == PS__UCX_DEAD) {
        return;
    }
    /* Sends UCX still holds (the goodbye below not counted). */
    int busy = ps__ucx_conn_sends_busy(van, conn);
    if (conn->state == PS__UCX_READY) {
        say_goodbye(conn);
    }
    int id = conn->peer_id;
    if (id != PS_NODE_EMPTY && peer_remove_conn(van, conn, id, why)) {
        ps__ucx_conn_unref(conn); /* the table's reference */
    }
    cookie_remove(van, conn);
    ps__ucx_boot_shut(conn);
    if (conn->ctl_data) {
        conn->ctl_data = 0;
        van->ctl_data_conns--;
    }
    if (conn->admit_pending) {
        conn->admit_pending = 0;
        ps_van_admission_done(&van->adm);
    }
    pthread_mutex_lock(&conn->lock);
    conn->state = PS__UCX_DEAD;
    conn->send_ep = NULL;
    ps__ucx_op_t *queue = conn->q_head;
    conn->q_head = conn->q_tail = NULL;
    pthread_mutex_unlock(&conn->lock);
    ps__ucx_ops_free_list(van, queue);
    /* Whole messages that arrived before the end are still delivered
     * (not after a broken frame, nor while closing). */
    busy += ps__ucx_rx_drop_conn(van, conn, why != PS_ERR_PROTOCOL &&
                                                !ps_van_loop_stopping(&van->loop));
    /* A flush close is the polite one, but only for an endpoint on which
     * UCX holds no request of a protocol in progress. With peer-failure
     * handling UCX tracks such requests (the sender's side of a
     * rendezvous until the peer fetched the data, the receiver's until it
     * arrived) on the endpoint, and asserts, aborting the process, when
     * it destroys an endpoint that still has one: after a flush close
     * completes (the peer answered the disconnect, or died) or, if the
     * peer never answers, in ucp_worker_destroy. That is the case when we
     * close while a peer is halfway through a large message, as survivors
     * do after a kill -9 while the others still push and pull. A forced
     * close completes every such request with UCS_ERR_CANCELED instead.
     * Sends whose requests UCX still holds, receives it could not cancel
     * (matched ones), and receives of connections dropped earlier that
     * UCX still holds requests of (the endpoint they came on may be this
     * one) make the close forced. */
    busy += ps__ucx_rx_dropped_busy(van);
    conn_close_eps(conn, why != PS_OK || busy != 0);
    int linked = conn->linked;
    conn_unlink(van, conn);

    if (notify && why != PS_OK && id != PS_NODE_EMPTY) {
        /* A peer is connected or it is not: its other connections go too,
         * and the postoffice hears about it once. */
        ps__ucx_conn_t *others[1 + PS__UCX_MAX_STREAMS];
        int n = 0;
        pthread_rwlock_rdlock(&van->peers.lock);
        ps__ucx_peer_t *p = ps_van_peer_table_get(&van->peers, id, 0);
        if (p != NULL) {
            if (p->out != NULL) {
                others[n++] = ps__ucx_conn_ref(p->out);
            }
            for (int i = 0; i < p->num_in; ++i) {
                others[n++] = ps__ucx_conn_ref(p->in[i]);
            }
        }
        pthread_rwlock_unlock(&van->peers.lock);
        for (int i = 0; i < n; ++i) {
            ps__ucx_conn_fail(others[i], why, 0);
            ps__ucx_conn_unref(others[i]);
        }
        ps_info(PS_LOG_UCX, "lost node %d at %s (%s)", id, conn->addr_str, ps_status_str(why));
        if (van->base.cb.peer_failed != NULL) {
            van->base.cb.peer_failed(van->base.cb.arg, id, why);
        }
    }
    if (linked) {
        ps__ucx_conn_unref(conn); /* the list's reference */
    }
}

void ps__ucx_abandon_closing(ps__ucx_van_t *van)
{
    for (ps__ucx_closing_t *c = van->closing; c != NULL; c = c->next) {
        if (c->req != NULL) {
            ucp_request_free(c->req); /* no callback after this */
            c->req = NULL;
        }
    }
}

void ps__ucx_close_all(ps__ucx_van_t *van)
{
    take_pending(van, 0);
    while (van->conns != NULL) {
        ps__ucx_conn_fail(van->conns, PS_OK, 0);
    }
    /* Connections connect() made that never reached the list. */
    pthread_rwlock_wrlock(&van->peers.lock);
    for (int id = 0; id < van->peers.slots.cap; ++id) {
        ps__ucx_peer_t *p = van->peers.slots.slot[id];
        if (p == NULL) {
            continue;
        }
        if (p->out != NULL) {
            ps__ucx_conn_unref(p->out);
        }
        for (int i = 0; i < p->num_in; ++i) {
            ps__ucx_conn_unref(p->in[i]);
        }
        p->out = NULL;
        p->num_in = 0;
    }
    ps_van_peer_slots_free(&van->peers.slots);
    pthread_rwlock_unlock(&van->peers.lock);
}

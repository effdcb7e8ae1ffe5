/*
 * The KV server: a customer (app_id, app_id) that turns each request into a
 * ps_kv_meta_t and a ps_kv_pairs_t of slices into the received message (no
 * copy) and runs the handler inline on the van's progress thread.
 *
 * Small requests may come on the postoffice's small lane (kv_lane.h): their
 * keys and values are copied into a block of the server's, which the next
 * one reuses unless the handler kept a reference to it. A response goes on
 * the lane when it fits, whichever way its request came.
 *
 * Pulls into device memory as IPC handles (kv_ipc.h): a pull request's
 * destination descriptor waits in `ipc_pulls` until the handler answers;
 * the answer's values are then written into the worker's memory and only
 * the keys and lengths are sent.
 *
 * Registered receive buffers (ps-lite's RegisterRecvBuffer): the values of
 * a push from worker rank r whose first key is k land in the buffer
 * registered for (r, k), through the customer's recv_buffer hook, where
 * the van receives in place, and by the server's own copy when the push
 * came as an IPC handle.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/host_stage.h"
#include "ps/app/kv.h"
#include "ps/app/kv_error.h"
#include "ps/app/kv_ipc.h"
#include "ps/app/kv_lane.h"
#include "ps/app/ready_queue.h"
#include "ps/base/buffer.h"
#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/base/thread.h"
#include "ps/net/caps.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"
#include "ps/net/postoffice_msg.h"

/* A pull whose destination came as an IPC descriptor, until answered. */
typedef struct {
    int sender;
    int customer_id;
    int timestamp;
    ps__kv_ipc_desc_t desc;
} kv_ipc_pull_t;

/* A receive buffer registered for (worker rank, first key). */
typedef struct {
    int rank;
    ps_key_t key;
    ps_slice_t slice;
} kv_reg_t;

struct ps_kv_server {
    ps_postoffice_t *po;
    ps_customer_t *customer;
    int app_id;
    ps_kv_handler_func_t handler;
    void *handler_arg;
    int device_ok; /* the van moves device memory (PS_CAP_DEVICE_MEMORY) */
    /* The block a lane request's data is copied into, between requests
     * (NULL: none, or one is in use). */
    _Atomic(ps_buf_t *) lane_spare;
    /* Workers' device allocations opened for pushes as IPC handles
     * (kv_ipc.h); made with the first such push. */
    _Atomic(ps__kv_ipc_cache_t *) ipc;
    /* Answers waiting for their device values (ps_kv_server_respond_when);
     * made with the first, under reg_lock. */
    _Atomic(ps__ready_queue_t *) ready;
    /* Pulls whose destination came as an IPC descriptor and are not
     * answered yet (unordered); under reg_lock. Any entry is found with
     * atomic_load(&num_ipc_pulls) > 0 first, so most responses never
     * take the lock. */
    kv_ipc_pull_t *ipc_pulls;
    atomic_size_t num_ipc_pulls;
    size_t cap_ipc_pulls;
    /* Registered receive buffers, sorted by (rank, key); under reg_lock. */
    ps_mutex_t reg_lock;
    kv_reg_t *regs;
    size_t num_regs, cap_regs;
};

/* ---- registered receive buffers ---- */

static int reg_cmp(int rank, ps_key_t key, const kv_reg_t *r)
{
    if (rank != r->rank)
        return rank < r->rank ? -1 : 1;
    return key < r->key ? -1 : key > r->key;
}

/* The index of (rank, key), or where it would go (*found 0). reg_lock held. */
static size_t reg_index(const ps_kv_server_t *s, int rank, ps_key_t key, int *found)
{
    size_t lo = 0, hi = s->num_regs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = reg_cmp(rank, key, &s->regs[mid]);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *found = 0;
    return lo;
}

/* The first `len` bytes of the buffer registered for the push `meta`
 * (referenced), when one holds them; device memory only with device_ok. */
static ps_status_t reg_find(ps_kv_server_t *s, const ps_meta_t *meta, size_t len, int device_ok,
                            ps_slice_t *slice_p)
{
    ps_status_t st = PS_ERR_NOT_FOUND;
    int found;
    ps_mutex_lock(&s->reg_lock);
    size_t i = reg_index(s, ps_postoffice_peer_rank(s->po, meta->sender), meta->key, &found);
    if (found && len <= s->regs[i].slice.len &&
        (device_ok || ps_slice_in_host_mem(&s->regs[i].slice)))
        st = ps_slice_sub(&s->regs[i].slice, 0, len, slice_p);
    ps_mutex_unlock(&s->reg_lock);
    return st;
}

static ps_status_t server_recv_buffer(void *arg, ps_customer_t *customer, const ps_meta_t *meta,
                                      unsigned index, uint64_t len, ps_slice_t *slice_p)
{
    ps_kv_server_t *s = arg;
    (void)customer;
    if (index != 1 || !meta->request || !meta->push || len == 0)
        return PS_ERR_NOT_FOUND;
    return reg_find(s, meta, (size_t)len, s->device_ok, slice_p);
}

ps_status_t ps_kv_server_register_recv_buffer(ps_kv_server_t *server, int worker_rank,
                                              ps_key_t key, const ps_slice_t *buffer)
{
    if (!server || worker_rank < 0 || !buffer || buffer->len == 0)
        return PS_ERR_INVALID_ARG;
    ps_status_t st = PS_OK;
    int found;
    ps_mutex_lock(&server->reg_lock);
    size_t i = reg_index(server, worker_rank, key, &found);
    if (found) {
        st = PS_ERR_EXISTS;
    } else if (server->num_regs == server->cap_regs) {
        size_t cap = server->cap_regs ? 2 * server->cap_regs : 16;
        kv_reg_t *grown = realloc(server->regs, cap * sizeof(*grown));
        if (grown) {
            server->regs = grown;
            server->cap_regs = cap;
        } else {
            st = PS_ERR_NO_MEMORY;
        }
    }
    if (st == PS_OK) {
        memmove(&server->regs[i + 1], &server->regs[i],
                (server->num_regs - i) * sizeof(server->regs[0]));
        server->regs[i] = (kv_reg_t){worker_rank, key, ps_slice_ref(buffer)};
        server->num_regs++;
    }
    ps_mutex_unlock(&server->reg_lock);
    return st;
}

/* A worker that is gone (dead, or its id taken over by a new process):
 * the allocations it shared are closed. */
static void ipc_node_gone(void *arg, ps_postoffice_t *po, int node_id, ps_status_t why)
{
    ps_kv_server_t *s = arg;
    (void)po;
    (void)why;
    ps__kv_ipc_cache_t *c = atomic_load(&s->ipc);
    if (c != NULL)
        ps__kv_ipc_forget(c, node_id);
}

static ps_status_t ipc_cache_of(ps_kv_server_t *s, ps__kv_ipc_cache_t **cache_p)
{
    ps__kv_ipc_cache_t *c = atomic_load(&s->ipc), *expected = NULL;
    if (c == NULL) {
        ps_status_t st = ps__kv_ipc_cache_create(&c);
        if (st != PS_OK)
            return st;
        if (!atomic_compare_exchange_strong(&s->ipc, &expected, c)) {
            ps__kv_ipc_cache_destroy(c);
            c = expected;
        } else if ((st = ps_postoffice_on_node_failed(s->po, ipc_node_gone, s)) != PS_OK ||
                   (st = ps_postoffice_on_node_recovered(s->po, ipc_node_gone, s)) != PS_OK) {
            ps_warn(PS_LOG_APP, "kv server app %d: cannot watch for workers that go (%s): "
                    "their shared allocations stay open until evicted", s->app_id,
                    ps_status_str(st));
        }
    }
    *cache_p = c;
    return PS_OK;
}

/* A push whose values came as an IPC descriptor: the values, copied out
 * of the worker's device memory into *vals_p: into the buffer registered
 * for the push when it is device memory of their kind and holds them (the
 * server copies, so this needs no device_ok), else into a pinned host
 * buffer. */
static ps_status_t ipc_values(ps_kv_server_t *s, const ps_meta_t *m, const ps_kv_pairs_t *req,
                              const ps__kv_ipc_desc_t *desc, ps_slice_t *vals_p)
{
    ps__kv_ipc_cache_t *c;
    if (req->vals.len != 0) {
        ps_warn_ratelimited(PS_LOG_APP, "kv server app %d: node %d sent values and a device "
                            "handle in one request", s->app_id, m->sender);
        return PS_ERR_PROTOCOL;
    }
    ps_status_t st = ipc_cache_of(s, &c);
    if (st != PS_OK)
        return st;
    ps_slice_t reg;
    if (desc->len != 0 && reg_find(s, m, (size_t)desc->len, 1, &reg) == PS_OK) {
        int may_land;
        st = ps__kv_ipc_fetch_into(c, m->sender, desc, &reg,
                                   ps_postoffice_request_timeout_ms(s->po), &may_land);
        if (st == PS_OK) {
            *vals_p = reg;
            return PS_OK;
        }
        ps_slice_unref(&reg);
        if (st != PS_ERR_UNSUPPORTED)
            return st;
    }
    return ps__kv_ipc_fetch(c, m->sender, desc, vals_p);
}

/* Keeps a pull's destination descriptor until its answer; without
 * memory for it the answer goes as bytes. */
static void ipc_pull_add(ps_kv_server_t *s, const ps_kv_meta_t *meta,
                         const ps__kv_ipc_desc_t *dest)
{
    ps_mutex_lock(&s->reg_lock);
    size_t n = atomic_load(&s->num_ipc_pulls);
    if (n == s->cap_ipc_pulls) {
        size_t cap = s->cap_ipc_pulls ? 2 * s->cap_ipc_pulls : 16;
        kv_ipc_pull_t *grown = realloc(s->ipc_pulls, cap * sizeof(*grown));
        if (grown) {
            s->ipc_pulls = grown;
            s->cap_ipc_pulls = cap;
        }
    }
    if (n < s->cap_ipc_pulls) {
        s->ipc_pulls[n] = (kv_ipc_pull_t){meta->sender, meta->customer_id, meta->timestamp,
                                          *dest};
        atomic_store(&s->num_ipc_pulls, n + 1);
    }
    ps_mutex_unlock(&s->reg_lock);
}

/* Takes the destination descriptor of the pull `meta` answers, if it
 * came with one; 1 then. */
static int ipc_pull_take(ps_kv_server_t *s, const ps_kv_meta_t *meta, ps__kv_ipc_desc_t *dest_p)
{
    if (atomic_load(&s->num_ipc_pulls) == 0)
        return 0;
    int found = 0;
    ps_mutex_lock(&s->reg_lock);
    size_t n = atomic_load(&s->num_ipc_pulls);
    for (size_t i = 0; i < n; i++) {
        const kv_ipc_pull_t *p = &s->ipc_pulls[i];
        if (p->sender == meta->sender && p->customer_id == meta->customer_id &&
            p->timestamp == meta->timestamp) {
            *dest_p = p->desc;
            s->ipc_pulls[i] = s->ipc_pulls[n - 1];
            atomic_store(&s->num_ipc_pulls, n - 1);
            found = 1;
            break;
        }
    }
    ps_mutex_unlock(&s->reg_lock);
    return found;
}

static void server_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    ps_kv_server_t *s = arg;
    (void)customer;
    const ps_meta_t *m = &msg->meta;
    if (!m->request || m->simple_app) {
        ps_warn_ratelimited(PS_LOG_APP, "kv server app %d: dropped a non-request from node %d",
                            s->app_id, m->sender);
        return;
    }

    ps_stage_handle();
    ps_kv_pairs_t req = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT,
                         PS_DATA_CHAR};
    if (msg->num_data > 0)
        req.keys = msg->data[0];
    if (msg->num_data > 1) {
        req.vals = msg->data[1];
        req.type = ps_meta_data_type(m, 1);
    }
    if (msg->num_data > 2)
        req.lens = msg->data[2];

    size_t nk = req.keys.len / sizeof(ps_key_t);
    if (req.keys.len % sizeof(ps_key_t) != 0 ||
        (req.lens.len != 0 && req.lens.len != nk * sizeof(int32_t)) ||
        (unsigned)req.type >= PS_DATA_TYPE_COUNT) {
        /* Not answered: the worker's request ends by its deadline. */
        ps_warn_ratelimited(PS_LOG_APP,
                            "kv server app %d: malformed request ts %d from node %d "
                            "(%zu key bytes, %zu length bytes)",
                            s->app_id, m->timestamp, m->sender, req.keys.len, req.lens.len);
        return;
    }

    ps_kv_meta_t meta = {
        .cmd = m->head,
        .push = m->push,
        .pull = m->pull || !m->push, /* upstream requests have no pull flag */
        .sender = m->sender,
        .timestamp = m->timestamp,
        .customer_id = m->customer_id,
        .app_id = m->app_id,
        .key = m->key,
        .type = req.type,
        .val_len = m->val_len,
        .addr = m->addr,
        .option = m->option,
    };
    ps__kv_ipc_desc_t desc, dest;
    int has_push = 0, has_pull = 0;
    ps_slice_t fetched = PS_SLICE_EMPTY_INIT;
    if (ps_unlikely(m->body_len != 0))
        (void)ps__kv_ipc_parse_request(m->body, m->body_len, &desc, &has_push, &dest, &has_pull);
    if (has_push && m->push) {
        ps_status_t st = ipc_values(s, m, &req, &desc, &fetched);
        if (st != PS_OK) {
            (void)ps_kv_server_respond_error(s, &meta, st);
            return;
        }
        req.vals = fetched;
    }
    if (has_pull && meta.pull)
        ipc_pull_add(s, &meta, &dest);
    s->handler(s->handler_arg, &meta, &req, s);
    ps_slice_unref(&fetched);
}

/* A request on the small lane: as server_recv, from the payload. */
static void server_lane_recv(void *arg, ps_customer_t *customer, int sender, int customer_id,
                             const uint8_t *payload, size_t len)
{
    ps_kv_server_t *s = arg;
    (void)customer;
    ps__kv_lane_msg_t m;
    /* The postoffice bounds len (ps_lane_len_ok); the block below holds no
     * more, so the bound is checked here too. */
    if (len > PS_LANE_MAX_PAYLOAD || ps__kv_lane_read(payload, len, &m) != PS_OK || !m.request) {
        ps_warn_ratelimited(PS_LOG_APP, "kv server app %d: dropped a malformed lane message "
                            "(%zu bytes) from node %d", s->app_id, len, sender);
        return;
    }
    ps_stage_handle();
    /* The handler gets slices, which it may keep: the data goes into a
     * block of ours (a few dozen bytes copied). */
    ps_buf_t *blk = atomic_exchange_explicit(&s->lane_spare, NULL, memory_order_acquire);
    if (blk == NULL && ps_buf_alloc(PS_LANE_MAX_PAYLOAD, 8, &blk) != PS_OK) {
        ps_warn_ratelimited(PS_LOG_APP, "kv server app %d: out of memory for request ts %d "
                            "from node %d; not answered", s->app_id, m.timestamp, sender);
        return;
    }
    size_t kb = m.num_keys * sizeof(ps_key_t), lb = m.lens ? m.num_keys * sizeof(int32_t) : 0;
    memcpy(ps_buf_data(blk), payload + PS__KV_LANE_FIXED, len - PS__KV_LANE_FIXED);
    ps_kv_pairs_t req = {PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, PS_SLICE_EMPTY_INIT, m.type};
    /* Windows on the block, lent as a message's segments are (no reference
     * of their own: a handler that keeps one takes it). */
    if (kb != 0)
        req.keys = (ps_slice_t){blk, 0, kb};
    if (m.vals_len != 0)
        req.vals = (ps_slice_t){blk, kb, m.vals_len};
    if (lb != 0)
        req.lens = (ps_slice_t){blk, kb + m.vals_len, lb};
    ps_kv_meta_t meta = {
        .cmd = m.cmd,
        .push = m.push,
        .pull = m.pull || !m.push,
        .sender = sender,
        .timestamp = m.timestamp,
        .customer_id = customer_id,
        .app_id = s->app_id,
        .type = m.type,
        .val_len = m.val_len,
        /* addr and option stay 0: no transport destination (kv_lane.h). */
    };
    if (kb != 0)
        memcpy(&meta.key, ps_buf_data(blk), sizeof(meta.key));
    s->handler(s->handler_arg, &meta, &req, s);
    ps_buf_t *none = NULL;
    if (ps_buf_refcount(blk) != 1 ||
        !atomic_compare_exchange_strong_explicit(&s->lane_spare, &none, blk,
                                                 memory_order_release, memory_order_relaxed))
        ps_buf_unref(blk); /* kept by the handler (or another spare came back first) */
}

ps_status_t ps_kv_server_create(ps_postoffice_t *po, int app_id,
                                ps_kv_handler_func_t handler, void *arg,
                                ps_kv_server_t **server_p)
{
    if (!po || !handler || !server_p)
        return PS_ERR_INVALID_ARG;
    ps_kv_server_t *s = calloc(1, sizeof(*s));
    if (!s)
        return PS_ERR_NO_MEMORY;
    s->po = po;
    s->app_id = app_id;
    s->handler = handler;
    s->handler_arg = arg;
    s->device_ok = (ps_postoffice_capabilities(po) & PS_CAP_DEVICE_MEMORY) != 0;
    ps_status_t st = ps_mutex_init(&s->reg_lock);
    if (st != PS_OK) {
        free(s);
        return st;
    }
    st = ps_customer_create_lane(po, app_id, app_id, server_recv, server_lane_recv, s,
                                 &s->customer);
    if (st != PS_OK) {
        ps_mutex_destroy(&s->reg_lock);
        free(s);
        return st;
    }
    /* Only a push's values (segment 1) may go to a registered buffer. */
    ps_customer_set_recv_buffer_segments(s->customer, 1u << 1);
    ps_customer_set_recv_buffer_func(s->customer, server_recv_buffer, s);
    *server_p = s;
    return PS_OK;
}

void ps_kv_server_destroy(ps_kv_server_t *server)
{
    if (!server)
        return;
    if (ps_customer_destroy_timed(server->customer, -1) != PS_OK) {
        /* The handler still runs with this server: it stays. */
        ps_error(PS_LOG_APP, "kv server app %d: its handler still runs; leaving the server "
                 "allocated", server->app_id);
        return;
    }
    ps_buf_unref(atomic_exchange(&server->lane_spare, NULL));
    /* Answers still waiting for their values fail now (PS_ERR_SHUTDOWN). */
    ps__ready_queue_destroy(atomic_exchange(&server->ready, NULL));
    if (atomic_load(&server->ipc) != NULL)
        ps_postoffice_remove_node_callback(server->po, ipc_node_gone, server);
    ps__kv_ipc_cache_destroy(atomic_exchange(&server->ipc, NULL));
    for (size_t i = 0; i < server->num_regs; i++)
        ps_slice_unref(&server->regs[i].slice);
    free(server->regs);
    free(server->ipc_pulls);
    ps_mutex_destroy(&server->reg_lock);
    free(server);
}

/* Sends the response on the small lane when it fits there;
 * PS_ERR_UNSUPPORTED when it does not (nothing sent). */
static ps_status_t respond_lane(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                const ps_kv_pairs_t *res)
{
    size_t lane_max = ps_postoffice_lane_max(server->po);
    if (lane_max == 0)
        return PS_ERR_UNSUPPORTED;
    /* The worker reads none of the meta's key, addr, option and val_len in
     * an answer (kv_lane.h): they are not sent. */
    ps__kv_lane_msg_t m = {
        .timestamp = meta->timestamp,
        .cmd = meta->cmd,
        .push = meta->push,
        .pull = meta->pull,
        .type = PS_DATA_CHAR,
    };
    if (res && res->keys.len > 0) {
        if (!ps_slice_in_host_mem(&res->keys) || !ps_slice_in_host_mem(&res->vals) ||
            !ps_slice_in_host_mem(&res->lens))
            return PS_ERR_UNSUPPORTED;
        m.type = res->type;
        m.num_keys = ps_kv_pairs_num_keys(res);
        m.keys = ps_slice_ptr(&res->keys);
        m.vals = ps_slice_ptr(&res->vals);
        m.vals_len = res->vals.len;
        m.lens = res->lens.len ? ps_slice_ptr(&res->lens) : NULL;
    }
    size_t len = ps__kv_lane_size(m.num_keys, m.vals_len, m.lens != NULL);
    if (len == 0 || len > lane_max)
        return PS_ERR_UNSUPPORTED;
    uint8_t buf[PS_POSTOFFICE_LANE_HEADROOM + PS_LANE_MAX_PAYLOAD] __attribute__((aligned(8)));
    uint8_t *payload = buf + PS_POSTOFFICE_LANE_HEADROOM;
    ps__kv_lane_write(payload, &m);
    ps_status_t st = ps_postoffice_send_lane(server->po, meta->sender, server->app_id,
                                             meta->customer_id, payload, len);
    if (st != PS_OK && st != PS_ERR_UNSUPPORTED)
        ps_debug(PS_LOG_APP, "kv server: response ts %d to node %d not sent: %s",
                 meta->timestamp, meta->sender, ps_status_str(st));
    return st;
}

/* A response's meta, echoing the request's as upstream does. */
static void response_meta(ps_kv_server_t *server, const ps_kv_meta_t *meta, ps_msg_t *msg)
{
    ps_msg_init(msg);
    ps_meta_t *m = &msg->meta;
    m->app_id = server->app_id;
    m->customer_id = meta->customer_id;
    m->timestamp = meta->timestamp;
    m->request = false;
    m->push = meta->push;
    m->pull = meta->pull;
    m->head = meta->cmd;
    m->key = meta->key;
    m->addr = meta->addr;
    m->val_len = meta->val_len;
    m->option = meta->option;
    m->recver = meta->sender;
    /* As from this node already: the postoffice then sends it as it is. */
    m->sender = ps_postoffice_my_id(server->po);
}

static ps_status_t send_response(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                 const ps_msg_t *msg)
{
    ps_status_t st = ps_postoffice_send(server->po, msg);
    if (st != PS_OK)
        ps_debug(PS_LOG_APP, "kv server: response ts %d to node %d not sent: %s",
                 meta->timestamp, meta->sender, ps_status_str(st));
    return st;
}

/* A pull whose destination came as an IPC descriptor: its values written
 * into the worker's memory, then the keys and lengths sent with a body
 * saying so. PS_ERR_UNSUPPORTED when nothing was written (nothing sent:
 * the caller sends the values as bytes). A write that may still land after
 * its deadline gets no answer at all: the worker's pull times out and its
 * destination stays held, where an answer would let the worker reuse it
 * under the write. */
static ps_status_t respond_ipc(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                               const ps_kv_pairs_t *res, const ps__kv_ipc_desc_t *dest)
{
    ps__kv_ipc_cache_t *c;
    int may_land = 0;
    ps_status_t st = ipc_cache_of(server, &c);
    if (st == PS_OK)
        st = ps__kv_ipc_put(c, meta->sender, dest, &res->vals,
                            ps_postoffice_request_timeout_ms(server->po), &may_land);
    if (st != PS_OK && may_land) {
        ps_warn_ratelimited(PS_LOG_APP, "kv server app %d: pull ts %d from node %d: writing "
                            "its values into its device memory did not complete (%s); not "
                            "answered", server->app_id, meta->timestamp, meta->sender,
                            ps_status_str(st));
        return st;
    }
    if (st != PS_OK) {
        ps_debug(PS_LOG_APP, "kv server app %d: pull ts %d from node %d: its values (%zu bytes) "
                 "go as bytes, not into its device memory: %s", server->app_id,
                 meta->timestamp, meta->sender, res->vals.len, ps_status_str(st));
        return PS_ERR_UNSUPPORTED;
    }
    ps__kv_ipc_written_t body = {.magic = PS__KV_IPC_WRITTEN_MAGIC, .len = res->vals.len};
    ps_slice_t none = PS_SLICE_EMPTY_INIT;
    ps_msg_t msg;
    response_meta(server, meta, &msg);
    msg.meta.body = (const uint8_t *)&body;
    msg.meta.body_len = sizeof(body);
    if ((st = ps_msg_lend_data(&msg, &res->keys, PS_DATA_UINT64)) != PS_OK ||
        (st = ps_msg_lend_data(&msg, &none, res->type)) != PS_OK ||
        (res->lens.len > 0 && (st = ps_msg_lend_data(&msg, &res->lens, PS_DATA_INT32)) != PS_OK))
        return st;
    return send_response(server, meta, &msg);
}

static ps_status_t respond(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                           const ps_kv_pairs_t *res, const ps__kv_ipc_desc_t *dest);

ps_status_t ps_kv_server_respond(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                 const ps_kv_pairs_t *res)
{
    if (!server || !meta)
        return PS_ERR_INVALID_ARG;
    if (res && (res->keys.len % sizeof(ps_key_t) != 0 ||
                (res->lens.len != 0 &&
                 res->lens.len != ps_kv_pairs_num_keys(res) * sizeof(int32_t)))) {
        ps_error(PS_LOG_APP, "kv server: response with %zu key bytes and %zu length bytes",
                 res->keys.len, res->lens.len);
        return PS_ERR_INVALID_ARG;
    }
    ps__kv_ipc_desc_t dest;
    int ipc = meta->pull && ipc_pull_take(server, meta, &dest);
    return respond(server, meta, res, ipc ? &dest : NULL);
}

static ps_status_t respond(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                           const ps_kv_pairs_t *res, const ps__kv_ipc_desc_t *dest)
{
    ps_status_t st;
    /* Into the worker's device memory, when the pull sent its handle. */
    if (dest && res && res->keys.len > 0 && res->vals.len > 0 &&
        (st = respond_ipc(server, meta, res, dest)) != PS_ERR_UNSUPPORTED)
        return st;

    /* Values in device memory (a store kept on the GPU) go out of a
     * pinned host copy when the van moves host memory only. */
    ps_kv_pairs_t staged;
    if (res && res->vals.len && !server->device_ok && !ps_slice_in_host_mem(&res->vals)) {
        staged = *res;
        if ((st = ps__app_sendable(&res->vals, 0, &staged.vals)) != PS_OK)
            return st;
        st = respond(server, meta, &staged, NULL);
        ps_slice_unref(&staged.vals);
        return st;
    }
    st = respond_lane(server, meta, res);
    if (st != PS_ERR_UNSUPPORTED)
        return st;
    ps_msg_t msg;
    response_meta(server, meta, &msg);

    /* The caller holds the segments through the send: lent, not referenced,
     * so the message owns nothing and is not released. */
    if (res && res->keys.len > 0 &&
        ((st = ps_msg_lend_data(&msg, &res->keys, PS_DATA_UINT64)) != PS_OK ||
         (st = ps_msg_lend_data(&msg, &res->vals, res->type)) != PS_OK ||
         (res->lens.len > 0 &&
          (st = ps_msg_lend_data(&msg, &res->lens, PS_DATA_INT32)) != PS_OK)))
        return st;
    return send_response(server, meta, &msg);
}

/* An answer waiting for its device values (ps_kv_server_respond_when). */
typedef struct {
    ps_kv_server_t *server;
    ps_kv_meta_t meta;
    ps_kv_pairs_t res; /* referenced */
} kv_later_t;

static void later_free(kv_later_t *l)
{
    ps_slice_unref(&l->res.keys);
    ps_slice_unref(&l->res.vals);
    ps_slice_unref(&l->res.lens);
    free(l);
}

static void later_run(void *arg, ps_status_t why)
{
    kv_later_t *l = arg;
    if (why == PS_OK) {
        (void)ps_kv_server_respond(l->server, &l->meta, &l->res);
    } else {
        ps_warn(PS_LOG_APP, "kv server app %d: the answer to ts %d from node %d never became "
                "ready (%s); failing the request", l->server->app_id, l->meta.timestamp,
                l->meta.sender, ps_status_str(why));
        (void)ps_kv_server_respond_error(l->server, &l->meta,
                                         ps__kv_error_ok(why) ? why : PS_ERR_TIMED_OUT);
    }
    later_free(l);
}

ps_status_t ps_kv_server_respond_when(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                      const ps_kv_pairs_t *res, const ps_kv_ready_t *ready)
{
    if (!server || !meta)
        return PS_ERR_INVALID_ARG;
    if (!ready || !res || res->vals.len == 0 || ps_slice_in_host_mem(&res->vals) ||
        (!ready->event && !ready->stream))
        return ps_kv_server_respond(server, meta, res);
    ps_mem_event_h ev;
    bool own;
    ps_status_t st = ps__ready_event(ps_slice_mem_ops_kind(&res->vals), ps_slice_device(&res->vals),
                                     ready->event, ready->stream, "kv answer", &ev, &own);
    if (st != PS_OK)
        return st;
    if (ev == NULL)
        return ps_kv_server_respond(server, meta, res); /* done already */
    ps__ready_queue_t *q;
    kv_later_t *l = malloc(sizeof(*l));
    st = l ? ps__ready_queue_get(&server->ready, &server->reg_lock, &q) : PS_ERR_NO_MEMORY;
    if (st == PS_OK) {
        *l = (kv_later_t){server, *meta,
                          {ps_slice_ref(&res->keys), ps_slice_ref(&res->vals),
                           ps_slice_ref(&res->lens), res->type}};
        st = ps__ready_queue_add(q, ev, own, ps_postoffice_request_timeout_ms(server->po),
                                 later_run, l);
        if (st == PS_OK)
            return PS_OK;
        later_free(l);
        l = NULL;
    }
    free(l);
    if (own)
        (void)ps_mem_event_destroy(ev);
    return st;
}

ps_status_t ps_kv_server_respond_error(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                       ps_status_t status)
{
    if (!server || !meta || !ps__kv_error_ok(status))
        return PS_ERR_INVALID_ARG;
    ps__kv_ipc_desc_t dest;
    if (meta->pull)
        (void)ipc_pull_take(server, meta, &dest); /* nothing is written */
    uint8_t body[PS__KV_ERROR_LEN];
    ps__kv_error_pack(status, body);
    ps_msg_t msg;
    response_meta(server, meta, &msg);
    msg.meta.body = body;
    msg.meta.body_len = sizeof(body);
    return send_response(server, meta, &msg);
}

/*
 * The KV server: a customer (app_id, app_id) that turns each request into a
 * ps_kv_meta_t and a ps_kv_pairs_t of slices into the received message (no
 * copy) and runs the handler inline on the van's progress thread.
 */
#include <stdlib.h>
#include <string.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice.h"

struct ps_kv_server {
    ps_postoffice_t *po;
    ps_customer_t *customer;
    int app_id;
    ps_kv_handler_func_t handler;
    void *handler_arg;
};

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
        if (m->num_data_types > 1)
            req.type = m->data_types[1];
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
    s->handler(s->handler_arg, &meta, &req, s);
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
    ps_status_t st = ps_customer_create(po, app_id, app_id, server_recv, s, &s->customer);
    if (st != PS_OK) {
        free(s);
        return st;
    }
    *server_p = s;
    return PS_OK;
}

void ps_kv_server_destroy(ps_kv_server_t *server)
{
    if (!server)
        return;
    ps_customer_destroy(server->customer);
    free(server);
}

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

    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.app_id = server->app_id;
    msg.meta.customer_id = meta->customer_id;
    msg.meta.timestamp = meta->timestamp;
    msg.meta.request = false;
    msg.meta.push = meta->push;
    msg.meta.pull = meta->pull;
    msg.meta.head = meta->cmd;
    msg.meta.key = meta->key;
    msg.meta.addr = meta->addr;
    msg.meta.val_len = meta->val_len;
    msg.meta.option = meta->option;
    msg.meta.recver = meta->sender;

    /* As from this node already: the postoffice then sends it as it is. */
    msg.meta.sender = ps_postoffice_my_id(server->po);

    /* The caller holds the segments through the send: lent, not referenced,
     * so the message owns nothing and is not released. */
    ps_status_t st = PS_OK;
    if (res && res->keys.len > 0 &&
        ((st = ps_msg_lend_data(&msg, &res->keys, PS_DATA_UINT64)) != PS_OK ||
         (st = ps_msg_lend_data(&msg, &res->vals, res->type)) != PS_OK ||
         (res->lens.len > 0 &&
          (st = ps_msg_lend_data(&msg, &res->lens, PS_DATA_INT32)) != PS_OK)))
        return st;
    st = ps_postoffice_send(server->po, &msg);
    if (st != PS_OK)
        ps_debug(PS_LOG_APP, "kv server: response ts %d to node %d not sent: %s",
                 meta->timestamp, meta->sender, ps_status_str(st));
    return st;
}

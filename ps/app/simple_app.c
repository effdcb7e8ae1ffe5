/*
 * The simple app: head/body requests to a group, one response per node.
 * Request tracking is the customer's (one expected response per node the
 * request went to); this file only builds and dispatches messages.
 */
#include "ps/app/simple_app.h"

#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/net/customer.h"
#include "ps/net/message.h"
#include "ps/net/postoffice_msg.h"

struct ps_simple_app {
    ps_postoffice_t *po;
    ps_customer_t *customer;
    int app_id;
    int customer_id;
    ps_simple_handler_func_t on_request;
    void *request_arg;
    ps_simple_handler_func_t on_response;
    void *response_arg;
};

static void simple_recv(void *arg, ps_customer_t *customer, const ps_msg_t *msg)
{
    ps_simple_app_t *app = arg;
    const ps_meta_t *m = &msg->meta;
    if (!m->simple_app) {
        ps_warn_ratelimited(PS_LOG_APP, "simple app %d: dropped a non-simple-app message from node %d",
                            app->app_id, m->sender);
        return;
    }
    ps_simple_data_t data = {
        .head = m->head,
        .body = m->body,
        .body_len = m->body_len,
        .sender = m->sender,
        .timestamp = m->timestamp,
        .customer_id = m->customer_id,
    };
    if (m->request) {
        if (app->on_request)
            app->on_request(app->request_arg, &data, app);
        else
            ps_simple_app_response(app, &data, NULL, 0);
        return;
    }
    if (app->on_response)
        app->on_response(app->response_arg, &data, app);
    ps_customer_add_response(customer, m->timestamp, 1);
}

ps_status_t ps_simple_app_create(ps_postoffice_t *po, int app_id, int customer_id,
                                 ps_simple_handler_func_t request_handler, void *request_arg,
                                 ps_simple_handler_func_t response_handler, void *response_arg,
                                 ps_simple_app_t **app_p)
{
    if (!po || !app_p)
        return PS_ERR_INVALID_ARG;
    ps_simple_app_t *app = calloc(1, sizeof(*app));
    if (!app)
        return PS_ERR_NO_MEMORY;
    app->po = po;
    app->app_id = app_id;
    app->customer_id = customer_id;
    app->on_request = request_handler;
    app->request_arg = request_arg;
    app->on_response = response_handler;
    app->response_arg = response_arg;
    ps_status_t st = ps_customer_create(po, app_id, customer_id, simple_recv, app, &app->customer);
    if (st != PS_OK) {
        free(app);
        return st;
    }
    *app_p = app;
    return PS_OK;
}

void ps_simple_app_destroy(ps_simple_app_t *app)
{
    if (!app)
        return;
    if (ps_customer_destroy_timed(app->customer, -1) != PS_OK) {
        /* Its handler still runs with this app: it stays. */
        ps_error(PS_LOG_APP, "simple app: its handler still runs; leaving the app allocated");
        return;
    }
    free(app);
}

ps_postoffice_t *ps_simple_app_postoffice(const ps_simple_app_t *app)
{
    return app->po;
}

static void fill_meta(ps_simple_app_t *app, ps_meta_t *m, int head, const void *body,
                      size_t body_len)
{
    m->app_id = app->app_id;
    m->customer_id = app->customer_id;
    m->simple_app = true;
    m->head = head;
    m->body = body_len ? body : NULL;
    m->body_len = body_len;
}

ps_status_t ps_simple_app_request(ps_simple_app_t *app, int head, const void *body,
                                  size_t body_len, int recv_group, int *ts_p)
{
    if (!app || !ts_p || (body_len && !body))
        return PS_ERR_INVALID_ARG;
    int me = ps_postoffice_my_id(app->po);
    int n = ps_postoffice_group_ids(app->po, recv_group, NULL, 0);
    if (n < 0)
        return PS_ERR_INVALID_ARG;
    int *ids = calloc((size_t)n + 1, sizeof(int));
    if (!ids)
        return PS_ERR_NO_MEMORY;
    n = ps_postoffice_group_ids(app->po, recv_group, ids, n);
    int peers = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] != me)
            ids[peers++] = ids[i];

    int ts;
    ps_status_t st = ps_customer_new_request(app->customer, peers > 0 ? peers : 1, ids, peers, &ts);
    if (st != PS_OK) {
        free(ids);
        return st;
    }
    *ts_p = ts;
    if (peers == 0) {
        ps_customer_add_response(app->customer, ts, 1);
        free(ids);
        return PS_OK;
    }
    for (int i = 0; i < peers; i++) {
        ps_msg_t msg;
        ps_msg_init(&msg);
        fill_meta(app, &msg.meta, head, body, body_len);
        msg.meta.request = true;
        msg.meta.timestamp = ts;
        msg.meta.recver = ids[i];
        st = ps_postoffice_send(app->po, &msg);
        ps_msg_release(&msg);
        if (st != PS_OK) {
            /* The request's result; ps_simple_app_wait reports it. */
            ps_customer_fail_request(app->customer, ts, st);
            break;
        }
    }
    free(ids);
    return PS_OK;
}

ps_status_t ps_simple_app_response(ps_simple_app_t *app, const ps_simple_data_t *req,
                                   const void *body, size_t body_len)
{
    if (!app || !req || (body_len && !body))
        return PS_ERR_INVALID_ARG;
    ps_msg_t msg;
    ps_msg_init(&msg);
    fill_meta(app, &msg.meta, req->head, body, body_len);
    msg.meta.customer_id = req->customer_id;
    msg.meta.request = false;
    msg.meta.timestamp = req->timestamp;
    msg.meta.recver = req->sender;
    ps_status_t st = ps_postoffice_send(app->po, &msg);
    ps_msg_release(&msg);
    return st;
}

ps_status_t ps_simple_app_wait(ps_simple_app_t *app, int ts, int timeout_ms)
{
    if (!app)
        return PS_ERR_INVALID_ARG;
    return ps_customer_wait(app->customer, ts, timeout_ms);
}

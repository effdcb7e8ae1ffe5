#include "tests/lib/po_send.h"

static ps_status_t send_with(ps_postoffice_t *po, ps_msg_t *msg, const ps_slice_t *payload,
                             ps_data_type_t type)
{
    if (payload != NULL && payload->len != 0) {
        ps_status_t st = ps_msg_add_data(msg, payload, type);
        if (st != PS_OK) {
            ps_msg_release(msg);
            return st;
        }
    }
    ps_status_t st = ps_postoffice_send(po, msg);
    ps_msg_release(msg);
    return st;
}

ps_status_t po_send_request(ps_postoffice_t *po, int recver, int app, int customer, int ts,
                            int head, bool push, const ps_slice_t *payload,
                            ps_data_type_t type)
{
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.recver = recver;
    msg.meta.app_id = app;
    msg.meta.customer_id = customer;
    msg.meta.timestamp = ts;
    msg.meta.head = head;
    msg.meta.request = true;
    msg.meta.push = push;
    return send_with(po, &msg, payload, type);
}

ps_status_t po_send_reply(ps_postoffice_t *po, const ps_msg_t *req, const ps_slice_t *payload,
                          ps_data_type_t type)
{
    ps_msg_t res;
    ps_msg_init(&res);
    res.meta.recver = req->meta.sender;
    res.meta.app_id = req->meta.app_id;
    res.meta.customer_id = req->meta.customer_id;
    res.meta.timestamp = req->meta.timestamp;
    res.meta.head = req->meta.head;
    res.meta.request = false;
    return send_with(po, &res, payload, type);
}

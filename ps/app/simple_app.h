/*
 * The simple app, as upstream's SimpleApp: a request of (head, body bytes)
 * to every node of a group (or one node), answered by each with a response
 * of its own (head, body). For control traffic between nodes — commands,
 * small configuration — not for bulk data (use the KV app).
 *
 * Handlers run on a ps thread (the van's progress thread); keep them short.
 * Every request must be answered with ps_simple_app_response() exactly once
 * (the default request handler answers with an empty body).
 */
#ifndef PS_APP_SIMPLE_APP_H_
#define PS_APP_SIMPLE_APP_H_

#include <stddef.h>

#include "ps/base/status.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_simple_app ps_simple_app_t;

/* What a handler learns; `body` is valid during the call only. */
typedef struct ps_simple_data {
    int head;
    const void *body;
    size_t body_len;
    int sender;       /* node id */
    int timestamp;    /* the request's */
    int customer_id;  /* the requester's */
} ps_simple_data_t;

typedef void (*ps_simple_handler_func_t)(void *arg, const ps_simple_data_t *data,
                                         ps_simple_app_t *app);

/* A simple app (app_id, customer_id). request_handler NULL answers every
 * request with head and an empty body; response_handler may be NULL. */
ps_status_t ps_simple_app_create(ps_postoffice_t *po, int app_id, int customer_id,
                                 ps_simple_handler_func_t request_handler, void *request_arg,
                                 ps_simple_handler_func_t response_handler, void *response_arg,
                                 ps_simple_app_t **app_p);
/* Waits up to the postoffice's finalize_timeout_ms for a handler call in
 * progress; when one still runs then, logs an error and leaves the app
 * allocated (never freed under it). */
void ps_simple_app_destroy(ps_simple_app_t *app);

/* Sends (head, body) to every node of `recv_group` (PS_GROUP_* bits, or a
 * node id), except this node itself; *ts_p gets the request's timestamp. A
 * group with no other node completes at once. The body is copied. */
ps_status_t ps_simple_app_request(ps_simple_app_t *app, int head, const void *body,
                                  size_t body_len, int recv_group, int *ts_p);

/* Answers request `req` (as the request handler received it). */
ps_status_t ps_simple_app_response(ps_simple_app_t *app, const ps_simple_data_t *req,
                                   const void *body, size_t body_len);

/* Blocks until every node answered request ts; timeout_ms < 0 =
 * PS_REQUEST_TIMEOUT_MS. PS_OK or why not (timed out, peer gone, ...). */
ps_status_t ps_simple_app_wait(ps_simple_app_t *app, int ts, int timeout_ms);

ps_postoffice_t *ps_simple_app_postoffice(const ps_simple_app_t *app);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_SIMPLE_APP_H_ */

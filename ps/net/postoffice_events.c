/*
 * Node-event callbacks (ps_postoffice_on_node_failed / _recovered): who
 * registered them, and running them once per event, never under a lock.
 */
#include "ps/net/postoffice.h"

#include <string.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/base/time.h"
#include "ps/net/postoffice_state_internal.h"

/* The callback list this thread is running (remove must not wait for it). */
static __thread const ps_postoffice_t *tls_in_node_cb;

void ps__po_fire_node_event(ps_postoffice_t *po, int id, ps_status_t why)
{
    ps__po_node_cb_t cbs[PS_NODE_CALLBACKS_MAX];
    size_t n;
    ps_mutex_lock(&po->cb_lock);
    if (why == PS_OK) {
        n = po->num_recovered_cbs;
        memcpy(cbs, po->recovered_cbs, n * sizeof(cbs[0]));
    } else {
        n = po->num_failed_cbs;
        memcpy(cbs, po->failed_cbs, n * sizeof(cbs[0]));
    }
    if (n > 0)
        po->cb_running++;
    ps_mutex_unlock(&po->cb_lock);
    if (n == 0)
        return;
    const ps_postoffice_t *outer = tls_in_node_cb;
    tls_in_node_cb = po;
    for (size_t i = 0; i < n; i++)
        cbs[i].fn(cbs[i].arg, po, id, why);
    tls_in_node_cb = outer;
    ps_mutex_lock(&po->cb_lock);
    if (--po->cb_running == 0)
        ps_cond_broadcast(&po->cb_cond);
    ps_mutex_unlock(&po->cb_lock);
}

static ps_status_t po_add_callback(ps_postoffice_t *po, ps__po_node_cb_t *list, size_t *n,
                                   ps_node_event_func_t fn, void *arg)
{
    if (po == NULL || fn == NULL)
        return PS_ERR_INVALID_ARG;
    ps_mutex_lock(&po->cb_lock);
    if (*n >= PS_NODE_CALLBACKS_MAX) {
        ps_mutex_unlock(&po->cb_lock);
        ps_error(PS_LOG_CORE, "more than %d node callbacks registered", PS_NODE_CALLBACKS_MAX);
        return PS_ERR_NO_RESOURCE;
    }
    list[*n].fn = fn;
    list[*n].arg = arg;
    (*n)++;
    ps_mutex_unlock(&po->cb_lock);
    return PS_OK;
}

ps_status_t ps_postoffice_on_node_failed(ps_postoffice_t *po, ps_node_event_func_t fn,
                                         void *arg)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    return po_add_callback(po, po->failed_cbs, &po->num_failed_cbs, fn, arg);
}

ps_status_t ps_postoffice_on_node_recovered(ps_postoffice_t *po, ps_node_event_func_t fn,
                                            void *arg)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    return po_add_callback(po, po->recovered_cbs, &po->num_recovered_cbs, fn, arg);
}

static void po_remove_from(ps__po_node_cb_t *list, size_t *n, ps_node_event_func_t fn, void *arg)
{
    size_t j = 0;
    for (size_t i = 0; i < *n; i++) {
        if (list[i].fn != fn || list[i].arg != arg)
            list[j++] = list[i];
    }
    *n = j;
}

ps_status_t ps_postoffice_remove_node_callback_timed(ps_postoffice_t *po,
                                                     ps_node_event_func_t fn, void *arg,
                                                     int timeout_ms)
{
    if (po == NULL)
        return PS_ERR_INVALID_ARG;
    if (timeout_ms < 0)
        timeout_ms = ps_postoffice_finalize_timeout_ms(po);
    ps_deadline_t deadline = ps_deadline_from_ms(timeout_ms);
    ps_status_t st = PS_OK;
    ps_mutex_lock(&po->cb_lock);
    po_remove_from(po->failed_cbs, &po->num_failed_cbs, fn, arg);
    po_remove_from(po->recovered_cbs, &po->num_recovered_cbs, fn, arg);
    /* A call that took its snapshot before may still run: wait for it,
     * unless it is this thread's (it would wait for itself). */
    while (po->cb_running > 0 && tls_in_node_cb != po) {
        if (ps_deadline_expired(deadline)) {
            st = PS_ERR_TIMED_OUT;
            break;
        }
        (void)ps_cond_wait(&po->cb_cond, &po->cb_lock, deadline);
    }
    ps_mutex_unlock(&po->cb_lock);
    return st;
}

void ps_postoffice_remove_node_callback(ps_postoffice_t *po, ps_node_event_func_t fn,
                                        void *arg)
{
    if (ps_postoffice_remove_node_callback_timed(po, fn, arg, -1) == PS_ERR_TIMED_OUT)
        ps_error(PS_LOG_CORE, "a node callback still runs after %d ms; removed the registration "
                 "without waiting for it", ps_postoffice_finalize_timeout_ms(po));
}

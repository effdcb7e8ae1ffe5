/*
 * DMLC_ROLE=joint: see joint.h.
 */
#include "ps/net/joint.h"

#include "ps/base/log.h"
#include "ps/base/thread.h"

typedef struct {
    ps_start_params_t params;
    int do_barrier;
    ps_postoffice_t *po;
    ps_status_t status;
} joint_start_t;

static void *start_main(void *arg)
{
    joint_start_t *s = arg;
    s->status = ps_postoffice_start(&s->params, s->do_barrier, &s->po);
    return NULL;
}

ps_status_t ps_postoffice_start_joint(const ps_start_params_t *params, int do_barrier,
                                      ps_postoffice_t **server_p, ps_postoffice_t **worker_p)
{
    if (server_p == NULL || worker_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps_start_params_t p;
    if (params == NULL) {
        ps_status_t st = ps_start_params_from_env(&p);
        if (st != PS_OK)
            return st;
    } else {
        p = *params;
    }
    if (p.role != PS_ROLE_JOINT) {
        ps_error(PS_LOG_CORE, "ps_postoffice_start_joint: the role is %s, not joint",
                 ps_role_str(p.role));
        return PS_ERR_INVALID_ARG;
    }
    joint_start_t s = {.params = p, .do_barrier = do_barrier};
    joint_start_t w = {.params = p, .do_barrier = do_barrier};
    s.params.role = PS_ROLE_SERVER;
    w.params.role = PS_ROLE_WORKER;
    w.params.port = 0; /* one fixed port (DMLC_PORT) serves one node: the server */

    ps_thread_t server_thread;
    ps_status_t st = ps_thread_create("ps-joint-srv", PS_THREAD_NO_CPU, start_main, &s,
                                      &server_thread);
    if (st != PS_OK)
        return st;
    start_main(&w);
    ps_thread_join(&server_thread, NULL);

    if (s.status == PS_OK && w.status == PS_OK) {
        *server_p = s.po;
        *worker_p = w.po;
        return PS_OK;
    }
    if (s.status == PS_OK)
        ps_postoffice_finalize(s.po, 0);
    if (w.status == PS_OK)
        ps_postoffice_finalize(w.po, 0);
    ps_error(PS_LOG_CORE, "joint process: the server's start ended with %s, the worker's with %s",
             ps_status_name(s.status), ps_status_name(w.status));
    return s.status != PS_OK ? s.status : w.status;
}

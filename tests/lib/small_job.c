#include "tests/lib/small_job.h"

#include <pthread.h>
#include <stdio.h>

#include "tests/lib/free_port.h"

typedef struct {
    ps_start_params_t params;
    int do_barrier;
    ps_postoffice_t **po_p;
    ps_status_t st;
} node_call_t;

static void *node_start(void *arg)
{
    node_call_t *c = arg;
    c->st = ps_postoffice_start(&c->params, c->do_barrier, c->po_p);
    return NULL;
}

static void *node_finalize(void *arg)
{
    node_call_t *c = arg;
    c->st = ps_postoffice_finalize(*c->po_p, c->do_barrier);
    return NULL;
}

/* Runs fn on each call of calls[] with a postoffice (or params) at once. */
static void run_all(void *(*fn)(void *), node_call_t *calls, const int *active)
{
    pthread_t threads[SMALL_JOB_NODES];
    int started[SMALL_JOB_NODES] = {0};
    for (int i = 0; i < SMALL_JOB_NODES; i++) {
        if (active[i])
            started[i] = pthread_create(&threads[i], NULL, fn, &calls[i]) == 0;
        if (active[i] && !started[i])
            fn(&calls[i]);
    }
    for (int i = 0; i < SMALL_JOB_NODES; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
    }
}

void small_job_node_params(ps_role_t role, const char *van, int port, ps_start_params_t *p)
{
    ps_start_params_init(p);
    p->role = role;
    snprintf(p->scheduler_host, sizeof(p->scheduler_host), "127.0.0.1");
    snprintf(p->node_host, sizeof(p->node_host), "127.0.0.1");
    snprintf(p->van, sizeof(p->van), "%s", van);
    p->scheduler_port = port;
    p->num_servers = 1;
    p->num_workers = 1;
    p->start_timeout_ms = 15000;
    p->finalize_timeout_ms = 15000;
}

ps_status_t small_job_start_nodes(const ps_start_params_t *params, int n, ps_postoffice_t **po)
{
    node_call_t calls[SMALL_JOB_NODES];
    int active[SMALL_JOB_NODES] = {0};
    if (n < 0 || n > SMALL_JOB_NODES)
        return PS_ERR_INVALID_ARG;
    for (int i = 0; i < n; i++) {
        calls[i] = (node_call_t){params[i], 1, &po[i], PS_INPROGRESS};
        po[i] = NULL;
        active[i] = 1;
    }
    run_all(node_start, calls, active);
    for (int i = 0; i < n; i++) {
        if (calls[i].st != PS_OK)
            return calls[i].st;
    }
    return PS_OK;
}

ps_status_t small_job_start(const small_job_opts_t *opts, ps_postoffice_t *po[SMALL_JOB_NODES])
{
    static const ps_role_t roles[SMALL_JOB_NODES] = {PS_ROLE_SCHEDULER, PS_ROLE_SERVER,
                                                     PS_ROLE_WORKER};
    node_call_t calls[SMALL_JOB_NODES];
    int all[SMALL_JOB_NODES] = {1, 1, 1};
    int port = test_free_port(0);
    for (int i = 0; i < SMALL_JOB_NODES; i++) {
        ps_start_params_t *p = &calls[i].params;
        po[i] = NULL;
        small_job_node_params(roles[i], opts->van, port, p);
        if (i == SMALL_JOB_WORKER) {
            p->busy_poll = opts->worker_busy_poll;
            if (opts->worker_finalize_ms > 0)
                p->finalize_timeout_ms = opts->worker_finalize_ms;
            if (opts->worker_request_ms > 0)
                p->request_timeout_ms = opts->worker_request_ms;
        }
        calls[i].do_barrier = 1;
        calls[i].po_p = &po[i];
        calls[i].st = PS_INPROGRESS;
    }
    run_all(node_start, calls, all);
    for (int i = 0; i < SMALL_JOB_NODES; i++) {
        if (calls[i].st != PS_OK)
            return calls[i].st;
    }
    return PS_OK;
}

ps_status_t small_job_finalize(ps_postoffice_t *po[SMALL_JOB_NODES], int do_barrier)
{
    node_call_t calls[SMALL_JOB_NODES];
    int active[SMALL_JOB_NODES];
    for (int i = 0; i < SMALL_JOB_NODES; i++) {
        active[i] = po[i] != NULL;
        calls[i].do_barrier = do_barrier;
        calls[i].po_p = &po[i];
        calls[i].st = PS_OK;
    }
    run_all(node_finalize, calls, active);
    ps_status_t first = PS_OK;
    for (int i = 0; i < SMALL_JOB_NODES; i++) {
        if (first == PS_OK && calls[i].st != PS_OK)
            first = calls[i].st;
        po[i] = NULL;
    }
    return first;
}

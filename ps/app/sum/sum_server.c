/*
 * The ready summation server: a ps_sum behind a KV server, and the whole
 * server program (join, serve until the job's final barrier, leave).
 */
#include <limits.h>
#include <stdlib.h>

#include "ps/app/sum/sum_server.h"
#include "ps/base/log.h"

struct ps_sum_server {
    ps_sum_t *sum;
    ps_kv_server_t *kv;
};

ps_status_t ps_sum_server_create(ps_postoffice_t *po, int app_id, const ps_sum_options_t *opts,
                                 ps_sum_server_t **server_p)
{
    if (!po || !server_p)
        return PS_ERR_INVALID_ARG;
    ps_sum_server_t *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return PS_ERR_NO_MEMORY;
    ps_status_t st = ps_sum_create(opts, po, &srv->sum);
    if (st == PS_OK) {
        st = ps_kv_server_create(po, app_id, ps_sum_handler, srv->sum, &srv->kv);
        if (st != PS_OK)
            ps_sum_destroy(srv->sum);
    }
    if (st != PS_OK) {
        free(srv);
        return st;
    }
    *server_p = srv;
    return PS_OK;
}

void ps_sum_server_destroy(ps_sum_server_t *srv)
{
    if (!srv)
        return;
    /* Answers what waits while the KV server can still send, then stops
     * the requests, then frees the state the handler used. */
    ps_sum_shutdown(srv->sum);
    ps_kv_server_destroy(srv->kv);
    ps_sum_destroy(srv->sum);
    free(srv);
}

ps_sum_t *ps_sum_server_sum(ps_sum_server_t *srv)
{
    return srv ? srv->sum : NULL;
}

ps_status_t ps_sum_server_run(const ps_start_params_t *params, const ps_sum_options_t *opts,
                              int serve_timeout_ms, ps_sum_run_result_t *report)
{
    ps_start_params_t p;
    ps_status_t st;
    if (params) {
        p = *params;
    } else if ((st = ps_start_params_from_env(&p)) != PS_OK) {
        return st;
    }
    if (p.role == PS_ROLE_WORKER || p.role == PS_ROLE_JOINT) {
        ps_error(PS_LOG_APP, "sum server: runs as the scheduler or a server, not as a %s",
                 ps_role_str(p.role));
        return PS_ERR_CONFIG;
    }
    ps_sum_options_t o;
    if (opts) {
        o = *opts;
    } else if ((st = ps_sum_options_from_env(&o)) != PS_OK) {
        return st;
    }
    if (serve_timeout_ms <= 0)
        serve_timeout_ms = INT_MAX;
    /* The scheduler's finalize barrier is the job's last: it waits as long
     * as the servers serve. */
    if (p.role == PS_ROLE_SCHEDULER)
        p.finalize_timeout_ms = serve_timeout_ms;

    ps_postoffice_t *po;
    if ((st = ps_postoffice_start(&p, 1, &po)) != PS_OK)
        return st;
    if (report) {
        *report = (ps_sum_run_result_t){.role = p.role, .rank = ps_postoffice_my_rank(po)};
    }

    if (p.role == PS_ROLE_SCHEDULER)
        return ps_postoffice_finalize(po, 1);

    ps_sum_server_t *srv;
    if ((st = ps_sum_server_create(po, 0, &o, &srv)) != PS_OK) {
        ps_postoffice_finalize(po, 0);
        return st;
    }
    /* Serve until every node reached the final barrier: the workers'
     * ps_postoffice_finalize(po, 1). The server's own part of it is this
     * barrier, so that the summation stops (and answers whatever still
     * waits) before the postoffice goes away. */
    st = ps_postoffice_barrier(po, PS_GROUP_ALL, serve_timeout_ms);
    if (st != PS_OK)
        ps_warn(PS_LOG_APP, "sum server: the job did not end cleanly: %s", ps_status_str(st));
    if (report)
        ps_sum_stats(ps_sum_server_sum(srv), &report->stats);
    ps_sum_server_destroy(srv);
    ps_status_t fst = ps_postoffice_finalize(po, 0);
    return st != PS_OK ? st : fst;
}

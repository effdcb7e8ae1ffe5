/*
 * A job of three postoffices in the test's own process on 127.0.0.1: the
 * scheduler, one server (node 8) and one worker (node 9), for tests that
 * need a live van between one worker and one server.
 */
#ifndef PS_TESTS_LIB_SMALL_JOB_H_
#define PS_TESTS_LIB_SMALL_JOB_H_

#include "ps/base/status.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { SMALL_JOB_SCHED, SMALL_JOB_SERVER, SMALL_JOB_WORKER, SMALL_JOB_NODES };

typedef struct {
    const char *van;        /* "tcp", "shm", ... */
    int worker_busy_poll;   /* PS_BUSY_POLL on the worker */
    int worker_finalize_ms; /* the worker's finalize_timeout_ms; 0: 15 s */
    int worker_request_ms;  /* the worker's request_timeout_ms; 0: the default */
} small_job_opts_t;

/* The start parameters of one node of such a job, of `role`, over `van`,
 * with the scheduler at 127.0.0.1:port: 1 server, 1 worker, 15 s start and
 * finalize deadlines. For a test that starts a node in a process of its
 * own. */
void small_job_node_params(ps_role_t role, const char *van, int port, ps_start_params_t *p);

/* Starts the nodes of params[0..n) (n <= SMALL_JOB_NODES) at once, with
 * the start barrier, into po[i]: the nodes of a job that live in this
 * process when the others run in processes of their own. PS_OK when all
 * started, else the first failure. */
ps_status_t small_job_start_nodes(const ps_start_params_t *params, int n, ps_postoffice_t **po);

/* Starts the three with the start barrier (15 s deadline); PS_OK when all
 * did, else the first failure (those started are in po[]). */
ps_status_t small_job_start(const small_job_opts_t *opts, ps_postoffice_t *po[SMALL_JOB_NODES]);

/* Finalizes every non-NULL postoffice of po[] at once (with the finalize
 * barrier when `do_barrier`) and clears it; PS_OK when every finalize
 * returned it, else the first failure. */
ps_status_t small_job_finalize(ps_postoffice_t *po[SMALL_JOB_NODES], int do_barrier);

#ifdef __cplusplus
}
#endif

#endif /* PS_TESTS_LIB_SMALL_JOB_H_ */

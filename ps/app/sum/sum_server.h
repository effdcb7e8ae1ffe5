/*
 * The summation server: BytePS server semantics on the KV API.
 *
 * Workers push values of a key and pull the sum of every worker's push;
 * the server only sums (the optimizer runs on the workers). One key per
 * request (as upstream); the command is decoded as BytePS encodes it
 * (sum_cmd.h), cmd 0 meaning "sum in the request's data type".
 *
 * Sync mode (the default), per key and round:
 *  - every worker pushes once; each push is acknowledged at once. The
 *    first push of a round is kept (no copy), the second is summed with it
 *    into the key's store (one pass: store = first + second), the rest are
 *    summed into the store. The first round of a key allocates its store:
 *    page-aligned, of the pushed length (with one worker there is nothing
 *    to sum: its push is the result, no store); a push of another length
 *    or type later is refused (logged, not acknowledged).
 *  - a pull is answered with the round's sum once every worker of the
 *    round has pushed; a pull that arrives earlier waits (queued, however
 *    early: even before any push of the key). One answer per worker and
 *    round; after every worker pulled, the round is over.
 *  - a worker may push the next round before everyone pulled this one:
 *    that push is held (acknowledged) and applied when the round turns, so
 *    a round's result is never overwritten while someone may still pull it.
 *    Results are answered zero-copy from the store; a store the transport
 *    still holds is not written again (the next round sums into another
 *    buffer and recycles this one once the transport let go of it).
 *  - a KV push-pull request (ps_kv_zpushpull) is a push whose answer is
 *    the pull's.
 * Async mode (BYTEPS_ENABLE_ASYNC=1): every push is summed into the key's
 * store (the first one copied) and acknowledged; a pull is answered with
 * the store as it is (a pull before any push waits for the first push).
 * The store is copied on write while a pull answer still references it.
 *
 * Engine threads (BYTEPS_SERVER_ENGINE_THREAD, default 4) apply the sync
 * pushes; a key is pinned to the thread with the fewest bytes pinned so
 * far. BYTEPS_SERVER_ENGINE_BLOCKING=1 sums inside the request handler
 * instead (no engine threads), and async mode always does.
 * BYTEPS_SERVER_ENABLE_SCHEDULE=1 orders each engine's work as upstream
 * (sum_sched.h). Idle engine threads sleep.
 *
 * A worker declared dead (the postoffice's node-failed callback, and its
 * dead-node list at creation) fails every round that still needs its push
 * at once: the pulls waiting for such a round, and any later pull of that
 * key, are answered with a zero length for the key — the KV worker
 * completes them with
 * PS_ERR_NOT_FOUND — and the server logs which worker is gone. A round the
 * dead worker had already pushed completes as usual. The job's other keys
 * are unaffected until they need that worker.
 *
 * Data types: float32, float64, float16, bfloat16, int8/16/32/64,
 * uint8/16/32/64 (kv_sum.h: vectorised, integers wrap, float16/bfloat16
 * summed in float and rounded to nearest even per addition).
 */
#ifndef PS_APP_SUM_SUM_SERVER_H_
#define PS_APP_SUM_SUM_SERVER_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/app/kv.h"
#include "ps/base/status.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_sum_options {
    int engine_threads;  /* BYTEPS_SERVER_ENGINE_THREAD (4), >= 1 */
    int engine_blocking; /* BYTEPS_SERVER_ENGINE_BLOCKING (0) */
    int schedule;        /* BYTEPS_SERVER_ENABLE_SCHEDULE (0) */
    int async_mode;      /* BYTEPS_ENABLE_ASYNC (0) */
    /* Upstream's init round: the first round of a key only initialises it
     * (acknowledgements held until every worker pushed, no pull; in async
     * mode the store starts as that push). For BytePS workers, which push
     * once at declaration; off by default (the first round is a round). */
    int byteps_init;
    int num_workers;     /* 0: the postoffice's */
    int log_keys;        /* PS_KEY_LOG: log every request */
    int debug;           /* BYTEPS_SERVER_DEBUG: log the values of debug_key */
    uint64_t debug_key;  /* BYTEPS_SERVER_DEBUG_KEY */
} ps_sum_options_t;

/* Defaults (the config table's). */
void ps_sum_options_init(ps_sum_options_t *opts);
/* Defaults overridden by the environment; PS_ERR_CONFIG (logged, naming
 * the variable) for a value that does not parse or is out of range. */
ps_status_t ps_sum_options_from_env(ps_sum_options_t *opts_p);

/* Counters since creation. */
typedef struct ps_sum_stats {
    uint64_t pushes;        /* pushes accepted */
    uint64_t push_bytes;
    uint64_t pulls;         /* pulls answered with a value */
    uint64_t rounds;        /* sync rounds completed (every key) */
    uint64_t pulls_waited;  /* pulls queued because their round was not complete */
    uint64_t pushes_held;   /* pushes held for a later round */
    uint64_t pulls_failed;  /* pulls answered with "no value" (failed round, shutdown) */
    uint64_t keys_failed;   /* keys whose round failed (a worker gone) */
    uint64_t refused;       /* requests refused (not answered) */
    uint64_t stores;        /* store buffers allocated */
    uint64_t workers_gone;  /* workers known dead (ps_sum_worker_gone) */
    uint64_t keys;
} ps_sum_stats_t;

/* ---- the handler library ---- */

typedef struct ps_sum ps_sum_t;

/* How answers leave: ps_kv_server_respond by default. Tests and
 * benchmarks replace it to drive a ps_sum without a network. */
typedef ps_status_t (*ps_sum_respond_func_t)(void *arg, ps_kv_server_t *server,
                                             const ps_kv_meta_t *meta,
                                             const ps_kv_pairs_t *res);

/* opts NULL: from the environment. po: the job (the number of workers
 * when opts->num_workers is 0, and the dead-node list); may be NULL when
 * num_workers is given (no dead-worker detection then). */
ps_status_t ps_sum_create(const ps_sum_options_t *opts, ps_postoffice_t *po, ps_sum_t **sum_p);
/* Before any request. */
void ps_sum_set_responder(ps_sum_t *sum, ps_sum_respond_func_t fn, void *arg);

/* The KV handler (ps_kv_handler_func_t); `sum` is a ps_sum_t. Use it with
 * ps_kv_server_create(po, app_id, ps_sum_handler, sum, &server). */
void ps_sum_handler(void *sum, const ps_kv_meta_t *meta, const ps_kv_pairs_t *req,
                    ps_kv_server_t *server);

/* Worker node `node_id` is gone: fails the rounds that still need it (see
 * above). Called when the postoffice reports the node failed; callable by
 * an app that learns it otherwise. Ids that are not workers of the job are ignored. */
void ps_sum_worker_gone(ps_sum_t *sum, int node_id);

/* Blocks until the engine threads applied everything queued. */
ps_status_t ps_sum_flush(ps_sum_t *sum, int timeout_ms);

void ps_sum_stats(ps_sum_t *sum, ps_sum_stats_t *stats_p);

/* Stops taking requests (later ones are dropped, pulls answered "no
 * value"), stops the engine threads, answers every waiting pull with "no
 * value" so that no worker waits for a server that left. Call it while
 * the responder (the KV server) can still send. Idempotent. Waits for
 * handler calls in progress up to the postoffice's finalize_timeout_ms
 * (PS_FINALIZE_TIMEOUT_MS without one) and logs an error if it gave up. */
void ps_sum_shutdown(ps_sum_t *sum);
/* The same, waiting up to timeout_ms (< 0: as above) for the handler calls
 * and the node-failure callback in progress: PS_OK, or PS_ERR_TIMED_OUT
 * when one still runs then (requests are refused from now on; call it
 * again to finish). */
ps_status_t ps_sum_shutdown_timed(ps_sum_t *sum, int timeout_ms);
/* Shuts down if not done, frees; when the shutdown gave up (see above) it
 * logs an error and leaves the sum allocated, as a handler still uses it. */
void ps_sum_destroy(ps_sum_t *sum);

/* ---- a ready server ---- */

typedef struct ps_sum_server ps_sum_server_t;

/* A ps_sum serving KV app `app_id` (0 for BytePS workers) of a started
 * postoffice. opts NULL: from the environment. */
ps_status_t ps_sum_server_create(ps_postoffice_t *po, int app_id, const ps_sum_options_t *opts,
                                 ps_sum_server_t **server_p);
/* ps_sum_shutdown, then the KV server, then the rest. Before
 * ps_postoffice_finalize(). */
void ps_sum_server_destroy(ps_sum_server_t *server);
ps_sum_t *ps_sum_server_sum(ps_sum_server_t *server);

/* The whole program (tools/sum_server): joins the job (params NULL: from
 * the environment; start barrier as upstream), and
 *  - as a server: serves app 0 until every node reached the job's final
 *    barrier (the workers' ps_postoffice_finalize(po, 1)), then shuts down
 *    and leaves. As upstream, that is the first barrier of PS_GROUP_ALL
 *    after the start: workers synchronise among themselves with
 *    PS_GROUP_WORKER barriers;
 *  - as the scheduler: only runs the job (its finalize barrier waits as
 *    long);
 *  - as a worker: PS_ERR_CONFIG.
 * serve_timeout_ms bounds the wait for the workers (<= 0: 2^31-1 ms, about
 * 24 days). Returns PS_OK, or why the job did not end cleanly (a node
 * gone, timed out). `report` (may be NULL) is filled once the node joined
 * the job, whatever the outcome: role, rank, and (servers) the counters. */
typedef struct ps_sum_run_result {
    ps_role_t role;
    int rank;
    ps_sum_stats_t stats;
} ps_sum_run_result_t;
ps_status_t ps_sum_server_run(const ps_start_params_t *params, const ps_sum_options_t *opts,
                              int serve_timeout_ms, ps_sum_run_result_t *report);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_SUM_SUM_SERVER_H_ */

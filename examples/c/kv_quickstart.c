/*
 * A whole ps job in one program: every process of the job runs it, and
 * DMLC_ROLE says which part it plays. Start it with the launcher:
 *
 *   python3 tools/launch/ps_launch.py -s 2 -w 2 -- bazel-bin/examples/c/kv_quickstart
 *
 * Each worker pushes (rank + 1) into every element of four keys spread
 * over the whole key space (so every server owns some), waits until all
 * workers pushed, pulls the sums back and checks them against
 * 1 + 2 + ... + W. Servers keep a summing store (ps_kv_store_handler).
 * docs/API.md walks through it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ps/ps.h"

#define NUM_KEYS 4
#define FLOATS_PER_KEY 1024

static int fail(const char *what, ps_status_t st)
{
    fprintf(stderr, "FAIL %s: %s\n", what, ps_status_str(st));
    return 1;
}

static int run_worker(ps_postoffice_t *po)
{
    ps_kv_worker_t *worker;
    ps_status_t st = ps_kv_worker_create(po, 0, 0, &worker);
    if (st != PS_OK) {
        return fail("worker", st);
    }
    /* Keys are sorted and unique; the servers split [0, UINT64_MAX) into
     * equal ranges, so keys this far apart land on different servers. */
    ps_key_t keys[NUM_KEYS];
    for (int i = 0; i < NUM_KEYS; i++) {
        keys[i] = (UINT64_MAX / NUM_KEYS) * (uint64_t)i;
    }
    static float vals[NUM_KEYS * FLOATS_PER_KEY];
    const float mine = (float)(ps_postoffice_my_rank(po) + 1);
    for (int i = 0; i < NUM_KEYS * FLOATS_PER_KEY; i++) {
        vals[i] = mine;
    }
    int ts;
    /* A copying push: vals may change as soon as the call returns. */
    st = ps_kv_push(worker, keys, NUM_KEYS, vals, sizeof(vals), NULL, PS_DATA_FLOAT, 0, NULL,
                    NULL, &ts);
    if (st == PS_OK) {
        st = ps_kv_wait(worker, ts, -1);
    }
    if (st != PS_OK) {
        return fail("push", st);
    }
    /* Every worker's push is in before anyone pulls. */
    st = ps_postoffice_barrier(po, PS_GROUP_WORKER, -1);
    if (st != PS_OK) {
        return fail("barrier", st);
    }
    /* A pull writes into vals in place until the wait returns. */
    st = ps_kv_pull(worker, keys, NUM_KEYS, vals, sizeof(vals), NULL, PS_DATA_FLOAT, 0, NULL,
                    NULL, &ts);
    if (st == PS_OK) {
        st = ps_kv_wait(worker, ts, -1);
    }
    if (st != PS_OK) {
        return fail("pull", st);
    }
    const int w = ps_postoffice_num_workers(po);
    const float want = (float)(w * (w + 1) / 2);
    for (int i = 0; i < NUM_KEYS * FLOATS_PER_KEY; i++) {
        if (vals[i] != want) {
            fprintf(stderr, "FAIL element %d is %g, want %g\n", i, vals[i], want);
            return 1;
        }
    }
    ps_kv_worker_destroy(worker);
    printf("PASS worker %d: %d floats, each the sum %g\n", ps_postoffice_my_rank(po),
           NUM_KEYS * FLOATS_PER_KEY, want);
    st = ps_postoffice_barrier(po, PS_GROUP_ALL, -1);
    return st == PS_OK ? 0 : fail("barrier", st);
}

/* Serves on the van's thread (the handler runs there) until everyone
 * reached the barrier at the end of the job. */
static int run_server(ps_postoffice_t *po)
{
    ps_kv_store_t *store;
    ps_kv_server_t *server;
    ps_status_t st = ps_kv_store_create(&store);
    if (st != PS_OK) {
        return fail("store", st);
    }
    st = ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server);
    if (st != PS_OK) {
        ps_kv_store_destroy(store);
        return fail("server", st);
    }
    st = ps_postoffice_barrier(po, PS_GROUP_ALL, -1);
    ps_kv_server_destroy(server);
    ps_kv_store_destroy(store);
    return st == PS_OK ? 0 : fail("barrier", st);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    ps_start_params_t params;
    ps_status_t st = ps_start_params_from_env(&params);
    if (st != PS_OK) {
        return fail("DMLC_* settings", st);
    }
    ps_postoffice_t *po;
    st = ps_postoffice_start(&params, 1, &po);
    if (st != PS_OK) {
        return fail("start", st);
    }
    int rc;
    if (params.role == PS_ROLE_WORKER) {
        rc = run_worker(po);
    } else if (params.role == PS_ROLE_SERVER) {
        rc = run_server(po);
    } else {
        /* The scheduler only waits for the end of the job. */
        st = ps_postoffice_barrier(po, PS_GROUP_ALL, -1);
        rc = st == PS_OK ? 0 : fail("barrier", st);
    }
    /* Leaves together with everyone (a last barrier, which ends early
     * only when a node is dead), then frees the postoffice. */
    st = ps_postoffice_finalize(po, 1);
    if (st != PS_OK && rc == 0) {
        rc = fail("finalize", st);
    }
    if (rc == 0 && params.role != PS_ROLE_WORKER) {
        printf("PASS %s\n", params.role == PS_ROLE_SERVER ? "server" : "scheduler");
    }
    return rc;
}

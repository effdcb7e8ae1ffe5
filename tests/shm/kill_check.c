/*
 * kill_check: one process of a job (2 servers, 2 workers) in which the
 * test kills server 1 with SIGKILL while the workers push and pull 4 MB
 * values to both servers. Roles from DMLC_* as usual.
 *
 * What must happen: the workers' requests to the dead server end with an
 * error (not a hang) and the live server still answers them correctly; the
 * barrier of everyone after the kill fails everywhere with an error, while
 * one of the scheduler and the workers (no server in it) still completes;
 * every survivor finalizes and prints "PASS <role> <rank>: ..."; anything
 * else prints "FAIL ..." and exits 1. Server 0 and the scheduler stay
 * until the file named by KILL_CHECK_DONE exists (the test makes it when
 * the workers are done), so that the workers' last requests and barrier
 * find them.
 *
 * Lines the test waits for: "ready" (servers, once serving) and "looping"
 * (workers, after a first round to both servers went well).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"
#include "tests/lib/check_node.h"

#define VALUE_BYTES (4u << 20)
#define WAIT_MS 20000
#define LIMIT_MS 60000

static void say(const char *what)
{
    printf("%s %s %d pid %d\n", what, check_role, check_rank, (int)getpid());
    fflush(stdout);
}

static uint8_t pattern(uint64_t seed, size_t i)
{
    return (uint8_t)((seed * 131 + i * 7 + (i >> 12)) & 0xff);
}

/* One push-pull of key to the server owning it; PS_OK and the value
 * checked, or the error. */
static ps_status_t push_pull(ps_kv_worker_t *kv, ps_key_t key, ps_slice_t *val, ps_slice_t *out,
                             uint64_t seed)
{
    uint8_t *p = ps_slice_ptr(val);
    for (size_t i = 0; i < VALUE_BYTES; ++i) {
        p[i] = pattern(seed, i);
    }
    memset(ps_slice_ptr(out), 0, VALUE_BYTES);
    ps_slice_t keys;
    if (ps_slice_alloc(sizeof(key), 8, &keys) != PS_OK) {
        check_fail("out of memory");
    }
    memcpy(ps_slice_ptr(&keys), &key, sizeof(key));
    ps_kv_pairs_t push = {.keys = keys, .vals = *val, .lens = PS_SLICE_EMPTY_INIT,
                          .type = PS_DATA_CHAR};
    ps_kv_pairs_t pull = {.keys = keys, .vals = *out, .lens = PS_SLICE_EMPTY_INIT,
                          .type = PS_DATA_CHAR};
    int ts;
    ps_status_t st = ps_kv_zpushpull(kv, &push, &pull, 0, NULL, NULL, &ts);
    if (st == PS_OK) {
        st = ps_kv_wait(kv, ts, WAIT_MS);
    }
    ps_slice_unref(&keys);
    if (st == PS_ERR_TIMED_OUT) {
        check_fail("push-pull of key %llu hung for %d ms", (unsigned long long)key, WAIT_MS);
    }
    if (st == PS_OK) {
        const uint8_t *q = ps_slice_ptr(out);
        for (size_t i = 0; i < VALUE_BYTES; ++i) {
            if (q[i] != pattern(seed, i)) {
                check_fail("key %llu byte %zu came back as 0x%02x, pushed 0x%02x",
                           (unsigned long long)key, i, q[i], pattern(seed, i));
            }
        }
    }
    return st;
}

static void run_worker(ps_postoffice_t *po)
{
    ps_kv_worker_t *kv;
    if (ps_kv_worker_create(po, 0, 0, &kv) != PS_OK) {
        check_fail("cannot create the kv worker");
    }
    uint64_t b0, b1, e;
    if (ps_postoffice_server_key_range(po, 0, &b0, &e) != PS_OK ||
        ps_postoffice_server_key_range(po, 1, &b1, &e) != PS_OK) {
        check_fail("no key ranges");
    }
    ps_key_t live = b0 + 1 + (ps_key_t)check_rank, doomed = b1 + 1 + (ps_key_t)check_rank;
    ps_slice_t val, out;
    if (ps_slice_alloc(VALUE_BYTES, 4096, &val) != PS_OK ||
        ps_slice_alloc(VALUE_BYTES, 4096, &out) != PS_OK) {
        check_fail("out of memory");
    }
    uint64_t seed = (uint64_t)check_rank * 1000;
    ps_status_t st = PS_OK;
    int rounds = 0;
    ps_deadline_t limit = ps_deadline_from_ms(LIMIT_MS);
    while (st == PS_OK) {
        if (push_pull(kv, live, &val, &out, ++seed) != PS_OK) {
            check_fail("push-pull to the live server failed before the kill");
        }
        st = push_pull(kv, doomed, &val, &out, ++seed);
        if (st == PS_OK && ++rounds == 1) {
            say("looping");
        }
        if (ps_deadline_expired(limit)) {
            check_fail("server 1 still answers after %d ms: was it not killed?", LIMIT_MS);
        }
    }
    if (rounds == 0) {
        check_fail("the first push-pull to server 1 failed (%s)", ps_status_str(st));
    }
    ps_status_t again = push_pull(kv, doomed, &val, &out, ++seed);
    if (again == PS_OK) {
        check_fail("server 1 answered after it failed");
    }
    /* The live server goes on answering. */
    for (int i = 0; i < 3; ++i) {
        ps_status_t s = push_pull(kv, live, &val, &out, ++seed);
        if (s != PS_OK) {
            check_fail("the live server failed after the kill: %s", ps_status_str(s));
        }
    }
    ps_status_t bar = ps_postoffice_barrier(po, PS_GROUP_ALL, WAIT_MS);
    if (bar == PS_OK || bar == PS_ERR_TIMED_OUT) {
        check_fail("the barrier after the kill ended with %s", ps_status_str(bar));
    }
    ps_status_t some = ps_postoffice_barrier(po, PS_GROUP_SCHEDULER | PS_GROUP_WORKER, WAIT_MS);
    if (some != PS_OK) {
        check_fail("the barrier of the scheduler and the workers failed: %s", ps_status_str(some));
    }
    ps_kv_worker_destroy(kv);
    ps_slice_unref(&val);
    ps_slice_unref(&out);
    ps_postoffice_finalize(po, 0);
    printf("PASS worker %d: %d rounds, then %s from server 1 and %s again; live server fine; barrier: %s\n",
           check_rank, rounds, ps_status_str(st), ps_status_str(again), ps_status_str(bar));
}

static void run_other(ps_postoffice_t *po, int is_server)
{
    ps_kv_store_t *store = NULL;
    ps_kv_server_t *server = NULL;
    if (is_server) {
        if (ps_kv_store_create(&store) != PS_OK ||
            ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server) != PS_OK) {
            check_fail("cannot create the kv server");
        }
        say("ready");
    }
    ps_status_t bar = ps_postoffice_barrier(po, PS_GROUP_ALL, LIMIT_MS);
    if (bar == PS_OK || bar == PS_ERR_TIMED_OUT) {
        check_fail("the barrier after the kill ended with %s", ps_status_str(bar));
    }
    if (!is_server) {
        ps_status_t some = ps_postoffice_barrier(po, PS_GROUP_SCHEDULER | PS_GROUP_WORKER, WAIT_MS);
        if (some != PS_OK) {
            check_fail("the barrier of the scheduler and the workers failed: %s", ps_status_str(some));
        }
    }
    const char *done = getenv("KILL_CHECK_DONE");
    ps_deadline_t limit = ps_deadline_from_ms(LIMIT_MS);
    while (done != NULL && access(done, F_OK) != 0 && !ps_deadline_expired(limit)) {
        ps_sleep_ms(10);
    }
    if (server != NULL) {
        ps_kv_server_destroy(server);
        ps_kv_store_destroy(store);
    }
    ps_postoffice_finalize(po, 0);
    printf("PASS %s %d: barrier after the kill: %s\n", check_role, check_rank, ps_status_str(bar));
}

int main(void)
{
    const char *role = getenv("DMLC_ROLE");
    check_role = role != NULL ? role : "?";
    ps_postoffice_t *po;
    ps_status_t st = ps_postoffice_start(NULL, 1, &po);
    if (st != PS_OK) {
        check_fail("start: %s", ps_status_str(st));
    }
    check_rank = ps_postoffice_my_rank(po);
    switch (ps_postoffice_role(po)) {
    case PS_ROLE_WORKER:
        run_worker(po);
        break;
    case PS_ROLE_SERVER:
        run_other(po, 1);
        break;
    default:
        run_other(po, 0);
        break;
    }
    fflush(stdout);
    return 0;
}

/*
 * signal_node: one process of a KV job (one server, one worker) that keeps
 * going until the test kills it with a signal. The worker push-pulls one
 * key of SIG_BYTES (default 65536) int64 values per round and checks every
 * element of the sum it pulls; the server serves; the scheduler waits.
 * Every role waits in the barrier of everyone (or loops) for at most
 * SIG_LIMIT_MS (default 60000), then fails: it was never killed.
 * A wait that ends early because a peer is gone is what the kill of the
 * others looks like from here (libfabric's shm provider runs a handler of
 * the signal on one thread while the others go on): such a process waits
 * out the limit for its own signal rather than failing at once.
 *
 * Lines printed:
 *   looping <role> <rank>     the worker after a first good round; the
 *                             others once started
 *   rounds <n>                the worker, every 64 rounds
 *   FAIL <role> <rank> ...    exit 1: a wrong sum, a failed request, or
 *                             the limit reached
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/kv.h"
#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/postoffice.h"
#include "tests/lib/check_node.h"

#define WAIT_MS 30000

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? strtol(v, NULL, 10) : dflt;
}

/* The job's other processes are dying: this one's signal is on its way. */
static _Noreturn void await_own_signal(ps_deadline_t limit, const char *what, ps_status_t why)
{
    while (!ps_deadline_expired(limit))
        ps_sleep_ms(50);
    check_fail("%s ended (%s), and this process was never killed within SIG_LIMIT_MS", what,
               ps_status_name(why));
}

static ps_slice_t slice_or_die(size_t len)
{
    ps_slice_t s;
    if (ps_slice_alloc(len, 4096, &s) != PS_OK)
        check_fail("out of memory (%zu bytes)", len);
    return s;
}

static void run_worker(ps_postoffice_t *po, long limit_ms)
{
    size_t bytes = (size_t)env_long("SIG_BYTES", 65536) & ~(size_t)7;
    size_t n = bytes / 8;
    if (n == 0)
        check_fail("SIG_BYTES too small");
    ps_kv_worker_t *kv;
    CHECK_OK(ps_kv_worker_create(po, 0, 0, &kv));
    uint64_t begin, end;
    CHECK_OK(ps_postoffice_server_key_range(po, 0, &begin, &end));
    ps_key_t key = begin + 1;
    ps_slice_t keys = slice_or_die(sizeof(key));
    memcpy(ps_slice_ptr(&keys), &key, sizeof(key));
    ps_slice_t push = slice_or_die(bytes);
    ps_slice_t out = slice_or_die(bytes);
    ps_deadline_t limit = ps_deadline_from_ms((int)limit_ms);
    for (uint64_t k = 1;; k++) {
        if (ps_deadline_expired(limit))
            check_fail("%" PRIu64 " rounds and never killed within SIG_LIMIT_MS", k - 1);
        int64_t *v = ps_slice_ptr(&push);
        for (size_t i = 0; i < n; i++)
            v[i] = (int64_t)(k + i);
        ps_kv_pairs_t in = {.keys = keys, .vals = push, .lens = PS_SLICE_EMPTY_INIT,
                            .type = PS_DATA_INT64};
        ps_kv_pairs_t res = {.keys = keys, .vals = out, .lens = PS_SLICE_EMPTY_INIT,
                             .type = PS_DATA_INT64};
        int ts;
        ps_status_t st = ps_kv_zpushpull(kv, &in, &res, 0, NULL, NULL, &ts);
        if (st == PS_OK)
            st = ps_kv_wait(kv, ts, WAIT_MS);
        if (st == PS_ERR_PEER_GONE || st == PS_ERR_LINK_FAILED)
            await_own_signal(limit, "a push-pull", st);
        CHECK_OK(st);
        /* After k rounds element i is the sum over j <= k of (j + i). */
        const int64_t *got = ps_slice_ptr(&out);
        for (size_t i = 0; i < n; i++) {
            int64_t want = (int64_t)(k * (k + 1) / 2 + k * i);
            if (got[i] != want)
                check_fail("round %" PRIu64 " element %zu: %" PRId64 ", the sum is %" PRId64, k,
                           i, got[i], want);
        }
        if (k == 1)
            printf("looping worker %d\n", check_rank);
        if (k % 64 == 0)
            printf("rounds %" PRIu64 "\n", k);
        fflush(stdout);
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *role = getenv("DMLC_ROLE");
    check_role = role != NULL ? role : "?";
    long limit_ms = env_long("SIG_LIMIT_MS", 60000);
    ps_postoffice_t *po;
    CHECK_OK(ps_postoffice_start(NULL, 1, &po));
    check_rank = ps_postoffice_my_rank(po);
    if (ps_postoffice_role(po) == PS_ROLE_WORKER) {
        run_worker(po, limit_ms);
        return 0;
    }
    ps_kv_store_t *store = NULL;
    ps_kv_server_t *server = NULL;
    if (ps_postoffice_role(po) == PS_ROLE_SERVER) {
        CHECK_OK(ps_kv_store_create(&store));
        CHECK_OK(ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server));
    }
    printf("looping %s %d\n", check_role, check_rank);
    ps_deadline_t limit = ps_deadline_from_ms((int)limit_ms);
    ps_status_t bar = ps_postoffice_barrier(po, PS_GROUP_ALL, (int)limit_ms);
    if (bar == PS_ERR_PEER_GONE || bar == PS_ERR_LINK_FAILED)
        await_own_signal(limit, "the barrier of everyone", bar);
    check_fail("barrier of everyone ended (%s): never killed", ps_status_name(bar));
}

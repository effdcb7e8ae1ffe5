/*
 * sum_server: the summation server program (upstream: bpslaunch running
 * byteps.server). Start it like any ps node, e.g. through the launcher:
 *
 *   ps_launch -s 2 -w 0 -- sum_server        (workers started elsewhere)
 *
 * DMLC_ROLE=server serves app 0 until every worker finalized;
 * DMLC_ROLE=scheduler runs the job (and only that). Summation settings:
 * BYTEPS_ENABLE_ASYNC, BYTEPS_SERVER_ENGINE_THREAD,
 * BYTEPS_SERVER_ENGINE_BLOCKING, BYTEPS_SERVER_ENABLE_SCHEDULE,
 * BYTEPS_SERVER_DEBUG(_KEY), PS_KEY_LOG (see `ps_info --config`).
 *
 * Prints one line when it leaves: role, rank and counters. Exit status 0
 * when the job ended cleanly, 1 otherwise, 2 for a bad command line.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/sum/sum_server.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sum_server [--serve-timeout-s N] [--byteps-init]\n"
            "  --serve-timeout-s N  leave after N seconds even if workers remain (default: no limit)\n"
            "  --byteps-init        treat the first push of each key as BytePS's init push\n"
            "                       (acknowledged once every worker pushed, no pull)\n");
}

int main(int argc, char **argv)
{
    long timeout_s = 0;
    int byteps_init = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--serve-timeout-s") == 0 && i + 1 < argc) {
            char *end;
            timeout_s = strtol(argv[++i], &end, 10);
            if (*end || timeout_s < 0 || timeout_s > 2000000) {
                fprintf(stderr, "sum_server: bad --serve-timeout-s '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--byteps-init") == 0) {
            byteps_init = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }

    ps_sum_options_t opts;
    ps_status_t st = ps_sum_options_from_env(&opts);
    if (st != PS_OK) {
        fprintf(stderr, "sum_server: %s\n", ps_status_str(st));
        return 1;
    }
    opts.byteps_init = byteps_init;

    ps_sum_run_result_t res;
    memset(&res, 0, sizeof(res));
    res.rank = -1;
    st = ps_sum_server_run(NULL, &opts, (int)(timeout_s * 1000), &res);
    const ps_sum_stats_t *s = &res.stats;
    if (res.rank >= 0 && res.role == PS_ROLE_SERVER)
        printf("sum_server: server %d %s: %" PRIu64 " keys, %" PRIu64 " pushes (%" PRIu64
               " bytes), %" PRIu64 " pulls, %" PRIu64 " rounds, %" PRIu64 " pulls waited, %" PRIu64
               " failed\n",
               res.rank, st == PS_OK ? "done" : ps_status_str(st), s->keys, s->pushes,
               s->push_bytes, s->pulls, s->rounds, s->pulls_waited, s->pulls_failed);
    else if (res.rank >= 0)
        printf("sum_server: %s %s\n", ps_role_str(res.role), st == PS_OK ? "done" : ps_status_str(st));
    else
        fprintf(stderr, "sum_server: %s\n", ps_status_str(st));
    fflush(stdout);
    return st == PS_OK ? 0 : 1;
}

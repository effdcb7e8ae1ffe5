/*
 * app_check: one process of a job that checks barriers or the simple app.
 * Run as scheduler, server and worker (DMLC_* from the environment).
 *
 *   app_check barrier DIR   group barriers of every kind, several rounds:
 *                           before a barrier each member creates a file
 *                           DIR/b<round>_<node id> (after a random delay);
 *                           after it, every member must see the files of
 *                           all members. A barrier that lets anyone through
 *                           early fails this.
 *   app_check simple        every worker asks the servers and the
 *                           scheduler, every server asks the workers; each
 *                           request must get exactly one response from
 *                           each node, with the body the handler built
 *                           from the request; after a final barrier each
 *                           node checks it answered everyone it should.
 *
 * Prints "PASS <role> <rank> ..." and exits 0, or "FAIL ..." and exits 1.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ps/app/simple_app.h"
#include "ps/base/status.h"
#include "ps/base/thread.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"
#include "tests/lib/check_node.h"

#define TIMEOUT_MS 120000
#define MAX_NODES 64

static char g_summary[128] = "done";

static int in_group(ps_role_t role, int group)
{
    switch (role) {
    case PS_ROLE_SCHEDULER:
        return (group & PS_GROUP_SCHEDULER) != 0;
    case PS_ROLE_SERVER:
        return (group & PS_GROUP_SERVER) != 0;
    case PS_ROLE_WORKER:
        return (group & PS_GROUP_WORKER) != 0;
    default:
        return 0;
    }
}

/* ---- barriers ---- */

static void run_barrier(ps_postoffice_t *po, const char *dir)
{
    static const int groups[] = {
        PS_GROUP_WORKER,
        PS_GROUP_SERVER,
        PS_GROUP_SERVER | PS_GROUP_WORKER,
        PS_GROUP_ALL,
        PS_GROUP_SCHEDULER | PS_GROUP_WORKER,
        PS_GROUP_SCHEDULER | PS_GROUP_SERVER,
        PS_GROUP_SCHEDULER,
    };
    const int ngroups = (int)(sizeof(groups) / sizeof(groups[0]));
    ps_role_t role = ps_postoffice_role(po);
    int me = ps_postoffice_my_id(po);
    unsigned seed = (unsigned)me * 2654435761u;
    int done = 0;

    for (int round = 0; round < 3 * ngroups; round++) {
        int g = groups[round % ngroups];
        if (!in_group(role, g))
            continue;
        /* Arrive in a different order every round. */
        seed = seed * 1103515245u + 12345u;
        ps_sleep_ms((seed >> 16) % 30);
        char path[4096];
        snprintf(path, sizeof(path), "%s/b%d_%d", dir, round, me);
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        if (fd < 0)
            check_fail("create %s: %m", path);
        close(fd);

        CHECK_OK(ps_postoffice_barrier(po, g, TIMEOUT_MS));

        int ids[MAX_NODES];
        int n = ps_postoffice_group_ids(po, g, ids, MAX_NODES);
        if (n <= 0 || n > MAX_NODES)
            check_fail("group %d has %d nodes", g, n);
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof(path), "%s/b%d_%d", dir, round, ids[i]);
            if (access(path, F_OK) != 0)
                check_fail("past barrier %d (group %d) before node %d arrived", round, g, ids[i]);
        }
        done++;
    }
    snprintf(g_summary, sizeof(g_summary), "%d barriers", done);
}

/* ---- simple app ---- */

typedef struct {
    ps_mutex_t lock;
    int requests_from[MAX_NODES * 2 + 8]; /* by node id */
    int responses_from[MAX_NODES * 2 + 8];
    int bad;
    char why[256];
} simple_state_t;

static simple_state_t g_s;

static void note_bad(const char *fmt, int a, int b)
{
    ps_mutex_lock(&g_s.lock);
    if (!g_s.bad)
        snprintf(g_s.why, sizeof(g_s.why), fmt, a, b);
    g_s.bad = 1;
    ps_mutex_unlock(&g_s.lock);
}

static int valid_id(int id)
{
    return id >= 1 && id < (int)(sizeof(g_s.requests_from) / sizeof(int));
}

/* Answers "req <head> from <id>" with "re: " + that, head unchanged. */
static void on_request(void *arg, const ps_simple_data_t *d, ps_simple_app_t *app)
{
    (void)arg;
    char want[64], body[96];
    snprintf(want, sizeof(want), "req %d from %d", d->head, d->sender);
    if (d->body_len != strlen(want) || memcmp(d->body, want, d->body_len) != 0)
        note_bad("request head %d from node %d has the wrong body", d->head, d->sender);
    if (!valid_id(d->sender)) {
        note_bad("request from bad node id %d (%d)", d->sender, 0);
        return;
    }
    ps_mutex_lock(&g_s.lock);
    g_s.requests_from[d->sender]++;
    ps_mutex_unlock(&g_s.lock);
    int n = snprintf(body, sizeof(body), "re: %s", want);
    ps_status_t st = ps_simple_app_response(app, d, body, (size_t)n);
    if (st != PS_OK)
        note_bad("response to node %d failed (%d)", d->sender, (int)st);
}

static void on_response(void *arg, const ps_simple_data_t *d, ps_simple_app_t *app)
{
    int me = *(int *)arg;
    (void)app;
    char want[96];
    snprintf(want, sizeof(want), "re: req %d from %d", d->head, me);
    if (d->body_len != strlen(want) || memcmp(d->body, want, d->body_len) != 0)
        note_bad("response head %d from node %d has the wrong body", d->head, d->sender);
    if (!valid_id(d->sender)) {
        note_bad("response from bad node id %d (%d)", d->sender, 0);
        return;
    }
    ps_mutex_lock(&g_s.lock);
    g_s.responses_from[d->sender]++;
    ps_mutex_unlock(&g_s.lock);
}

static void ask(ps_postoffice_t *po, ps_simple_app_t *app, int me, int head, int group)
{
    char body[64];
    int n = snprintf(body, sizeof(body), "req %d from %d", head, me);
    int ts;
    CHECK_OK(ps_simple_app_request(app, head, body, (size_t)n, group, &ts));
    CHECK_OK(ps_simple_app_wait(app, ts, TIMEOUT_MS));
    int ids[MAX_NODES];
    int k = ps_postoffice_group_ids(po, group, ids, MAX_NODES);
    ps_mutex_lock(&g_s.lock);
    for (int i = 0; i < k; i++) {
        if (ids[i] == me)
            continue;
        if (g_s.responses_from[ids[i]] != 1) {
            ps_mutex_unlock(&g_s.lock);
            check_fail("request %d to group %d: %d responses from node %d", head, group,
                       g_s.responses_from[ids[i]], ids[i]);
        }
        g_s.responses_from[ids[i]] = 0;
    }
    ps_mutex_unlock(&g_s.lock);
}

static void expect_requests_from(ps_postoffice_t *po, int group, int me)
{
    int ids[MAX_NODES];
    int k = ps_postoffice_group_ids(po, group, ids, MAX_NODES);
    for (int i = 0; i < k; i++) {
        if (ids[i] == me)
            continue;
        if (g_s.requests_from[ids[i]] != 1)
            check_fail("%d requests from node %d, expected 1", g_s.requests_from[ids[i]], ids[i]);
        g_s.requests_from[ids[i]] = 0;
    }
}

static void run_simple(ps_postoffice_t *po)
{
    ps_role_t role = ps_postoffice_role(po);
    int me = ps_postoffice_my_id(po);
    ps_simple_app_t *app;
    CHECK_OK(ps_mutex_init(&g_s.lock));
    CHECK_OK(ps_simple_app_create(po, 0, 0, on_request, NULL, on_response, &me, &app));
    /* Everyone's app exists before anyone asks. */
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, TIMEOUT_MS));

    if (role == PS_ROLE_WORKER) {
        ask(po, app, me, 100 + check_rank, PS_GROUP_SERVER);
        ask(po, app, me, 300 + check_rank, PS_GROUP_SCHEDULER);
    } else if (role == PS_ROLE_SERVER) {
        ask(po, app, me, 200 + check_rank, PS_GROUP_WORKER);
    }
    CHECK_OK(ps_postoffice_barrier(po, PS_GROUP_ALL, TIMEOUT_MS));

    ps_mutex_lock(&g_s.lock);
    int bad = g_s.bad;
    ps_mutex_unlock(&g_s.lock);
    if (bad)
        check_fail("%s", g_s.why);
    if (role == PS_ROLE_SERVER) {
        expect_requests_from(po, PS_GROUP_WORKER, me);
    } else if (role == PS_ROLE_WORKER) {
        expect_requests_from(po, PS_GROUP_SERVER, me);
    } else {
        expect_requests_from(po, PS_GROUP_WORKER, me);
    }
    for (size_t i = 0; i < sizeof(g_s.requests_from) / sizeof(int); i++)
        if (g_s.requests_from[i] != 0)
            check_fail("unexpected request from node %zu", i);
    ps_simple_app_destroy(app);
    snprintf(g_summary, sizeof(g_summary), "simple app");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || (strcmp(argv[1], "barrier") == 0 && argc < 3)) {
        fprintf(stderr, "usage: app_check barrier DIR | app_check simple\n");
        return 2;
    }
    ps_postoffice_t *po = check_node_start();

    if (strcmp(argv[1], "barrier") == 0)
        run_barrier(po, argv[2]);
    else if (strcmp(argv[1], "simple") == 0)
        run_simple(po);
    else
        check_fail("unknown mode %s", argv[1]);

    ps_status_t st = ps_postoffice_finalize(po, 1);
    if (st != PS_OK)
        check_fail("finalize: %s", ps_status_str(st));
    printf("PASS %s %d: %s\n", check_role, check_rank, g_summary);
    return 0;
}

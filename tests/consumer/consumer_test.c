/*
 * A program outside ps, using only #include "ps/ps.h" and @ps//ps: a real job
 * of four processes (scheduler, one server with the summing store, two
 * workers) set up from a config struct rather than the environment. Each
 * worker pushes its values, both meet at a barrier, and each pulls and checks
 * the sum. Ends by itself: the parent kills everything after a deadline.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ps/ps.h"

#define NUM_KEYS 3
#define VALS_PER_KEY 1000
#define DEADLINE_S 60

static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port = -1;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        port = ntohs(sa.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

static int fail(const char *what, ps_status_t st)
{
    fprintf(stderr, "consumer: %s: %s\n", what, ps_status_str(st));
    return 1;
}

static int run_worker(ps_postoffice_t *po)
{
    int rank = ps_postoffice_my_rank(po);
    ps_key_t keys[NUM_KEYS];
    static float vals[NUM_KEYS * VALS_PER_KEY];
    static float out[NUM_KEYS * VALS_PER_KEY];
    ps_kv_worker_t *w;
    ps_status_t st;
    int ts;

    /* One key in each part of the key space. */
    for (int k = 0; k < NUM_KEYS; ++k) {
        keys[k] = (UINT64_MAX / NUM_KEYS) * (uint64_t)k + 7;
    }
    for (int i = 0; i < NUM_KEYS * VALS_PER_KEY; ++i) {
        vals[i] = (float)(rank + 1) * (float)(i % 97);
    }
    if ((st = ps_kv_worker_create(po, 0, 0, &w)) != PS_OK) {
        return fail("kv worker", st);
    }
    st = ps_kv_push(w, keys, NUM_KEYS, vals, sizeof(vals), NULL, PS_DATA_FLOAT, 0, NULL, NULL, &ts);
    if (st == PS_OK) {
        st = ps_kv_wait(w, ts, 20000);
    }
    if (st != PS_OK) {
        return fail("push", st);
    }
    if ((st = ps_postoffice_barrier(po, PS_GROUP_WORKER, 20000)) != PS_OK) {
        return fail("barrier", st);
    }
    st = ps_kv_pull(w, keys, NUM_KEYS, out, sizeof(out), NULL, PS_DATA_FLOAT, 0, NULL, NULL, &ts);
    if (st == PS_OK) {
        st = ps_kv_wait(w, ts, 20000);
    }
    if (st != PS_OK) {
        return fail("pull", st);
    }
    /* Workers 0 and 1 pushed 1x and 2x the pattern: the sum is 3x. */
    for (int i = 0; i < NUM_KEYS * VALS_PER_KEY; ++i) {
        if (out[i] != 3.0f * (float)(i % 97)) {
            fprintf(stderr, "consumer: worker %d: element %d is %g, expected %g\n", rank, i,
                    (double)out[i], 3.0 * (i % 97));
            return 1;
        }
    }
    /* Everyone must have pulled before the server goes away. */
    if ((st = ps_postoffice_barrier(po, PS_GROUP_WORKER, 20000)) != PS_OK) {
        return fail("barrier", st);
    }
    ps_kv_worker_destroy(w);
    printf("consumer: worker %d pulled the right sums\n", rank);
    return 0;
}

static int run_node(ps_role_t role, int port)
{
    ps_start_params_t params;
    ps_postoffice_t *po;
    ps_kv_store_t *store = NULL;
    ps_kv_server_t *server = NULL;
    ps_status_t st;
    int rc = 0;

    ps_start_params_init(&params);
    params.role = role;
    snprintf(params.scheduler_host, sizeof(params.scheduler_host), "127.0.0.1");
    snprintf(params.node_host, sizeof(params.node_host), "127.0.0.1");
    params.scheduler_port = port;
    params.num_workers = 2;
    params.num_servers = 1;
    params.start_timeout_ms = 30000;
    if ((st = ps_postoffice_start(&params, 1, &po)) != PS_OK) {
        return fail("start", st);
    }
    if (role == PS_ROLE_SERVER) {
        if ((st = ps_kv_store_create(&store)) != PS_OK ||
            (st = ps_kv_server_create(po, 0, ps_kv_store_handler, store, &server)) != PS_OK) {
            return fail("kv server", st);
        }
    } else if (role == PS_ROLE_WORKER) {
        rc = run_worker(po);
    }
    st = ps_postoffice_finalize(po, 1);
    if (server) {
        ps_kv_server_destroy(server);
        ps_kv_store_destroy(store);
    }
    return rc ? rc : st == PS_OK ? 0 : fail("finalize", st);
}

int main(void)
{
    const ps_role_t roles[] = {PS_ROLE_SCHEDULER, PS_ROLE_SERVER, PS_ROLE_WORKER, PS_ROLE_WORKER};
    const int n = (int)(sizeof(roles) / sizeof(roles[0]));
    pid_t pids[4];
    int port = free_port(), failed = 0, left = n;
    time_t end = time(NULL) + DEADLINE_S;

    printf("consumer: ps %s, scheduler port %d\n", PS_VERSION_STRING, port);
    if (port <= 0) {
        return 1;
    }
    for (int i = 0; i < n; ++i) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int rc = run_node(roles[i], port);
            fflush(stdout);
            _exit(rc);
        }
    }
    while (left > 0 && time(NULL) < end) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            --left;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "consumer: process %d failed (status 0x%x)\n", (int)pid, status);
                failed = 1;
            }
        } else {
            usleep(20000);
        }
    }
    if (left > 0) {
        fprintf(stderr, "consumer: %d process(es) still running after %d s\n", left, DEADLINE_S);
        for (int i = 0; i < n; ++i) {
            kill(pids[i], SIGKILL);
        }
        while (wait(NULL) > 0) {
        }
        return 1;
    }
    printf(failed ? "consumer: FAIL\n" : "consumer: PASS\n");
    return failed;
}

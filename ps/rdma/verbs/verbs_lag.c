/* LAG port pinning through dlopen'd mlx5dv symbols (see verbs_lag.h). */
#include "ps/rdma/verbs/verbs_lag.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static ps__vb_lag_ops_t g_ops;
static int g_have;
static char g_why[160];

static void lag_load(void)
{
    /* The library stays loaded for the life of the process: the QPs that
     * were pinned belong to it. */
    void *h = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(g_why, sizeof(g_why), "libmlx5.so.1 not loadable: %s", e != NULL ? e : "?");
        return;
    }
    void *q = dlsym(h, "mlx5dv_query_qp_lag_port");
    void *m = dlsym(h, "mlx5dv_modify_qp_lag_port");
    if (q == NULL || m == NULL) {
        snprintf(g_why, sizeof(g_why),
                 "libmlx5.so.1 has no mlx5dv_query_qp_lag_port/mlx5dv_modify_qp_lag_port "
                 "(rdma-core too old)");
        dlclose(h);
        return;
    }
    /* POSIX allows converting dlsym's object pointer to a function pointer. */
    memcpy(&g_ops.query, &q, sizeof(q));
    memcpy(&g_ops.modify, &m, sizeof(m));
    g_have = 1;
}

const ps__vb_lag_ops_t *ps__vb_lag_ops(char *why, size_t why_cap)
{
    pthread_once(&g_once, lag_load);
    if (!g_have) {
        if (why != NULL && why_cap > 0)
            snprintf(why, why_cap, "%s", g_why);
        return NULL;
    }
    return &g_ops;
}

ps_status_t ps__vb_lag_pin(const ps__vb_lag_ops_t *ops, struct ibv_qp **qps, unsigned n,
                           unsigned *ports_p, int *err_p)
{
    if (ops == NULL || ops->query == NULL || ops->modify == NULL || qps == NULL || n == 0)
        return PS_ERR_INVALID_ARG;
    uint8_t port = 0, active = 0;
    if (ops->query(qps[0], &port, &active) != 0 || active < 2)
        return PS_ERR_UNSUPPORTED;
    for (unsigned i = 0; i < n; i++) {
        int rc = ops->modify(qps[i], (uint8_t)(1 + i % active));
        if (rc != 0) {
            if (err_p != NULL)
                *err_p = rc;
            return PS_ERR_DEVICE;
        }
    }
    if (ports_p != NULL)
        *ports_p = active;
    return PS_OK;
}

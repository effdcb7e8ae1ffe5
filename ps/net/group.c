/*
 * Several postoffices of one process: ps_postoffice_start_group (group.h)
 * and the concurrent start it shares with the joint role
 * (start_each_internal.h).
 */
#include "ps/net/group.h"

#include <stdio.h>
#include <stdlib.h>

#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/net/params_internal.h"
#include "ps/net/start_each_internal.h"

typedef struct {
    const ps_start_params_t *params;
    int do_barrier;
    ps_postoffice_t **po_p;
    ps_status_t *status_p;
} start_one_t;

static void *start_main(void *arg)
{
    start_one_t *s = arg;
    *s->status_p = ps_postoffice_start(s->params, s->do_barrier, s->po_p);
    return NULL;
}

ps_status_t ps__po_start_each(const ps_start_params_t *params, int n, int do_barrier,
                              const char *what, ps_postoffice_t **pos, ps_status_t *statuses)
{
    start_one_t *one = calloc((size_t)n, sizeof(*one));
    ps_thread_t *threads = calloc((size_t)n, sizeof(*threads));
    if (one == NULL || threads == NULL) {
        free(one);
        free(threads);
        return PS_ERR_NO_MEMORY;
    }
    int started = 0;
    ps_status_t first = PS_OK;
    for (int i = 0; i < n; i++) {
        pos[i] = NULL;
        statuses[i] = PS_ERR_SHUTDOWN; /* not started */
        one[i] = (start_one_t){&params[i], do_barrier, &pos[i], &statuses[i]};
    }
    /* Instance 0 starts on the calling thread, the others on their own. */
    for (int i = 1; i < n; i++) {
        ps_status_t st = ps_thread_create("ps-po-start", PS_THREAD_NO_CPU, start_main, &one[i],
                                          &threads[i]);
        if (st != PS_OK) {
            first = st;
            break;
        }
        started = i;
    }
    if (first == PS_OK)
        start_main(&one[0]);
    for (int i = 1; i <= started; i++)
        ps_thread_join(&threads[i], NULL);
    for (int i = 0; i < n && first == PS_OK; i++)
        if (statuses[i] != PS_OK)
            first = statuses[i];
    if (first != PS_OK) {
        char line[256];
        size_t used = 0;
        for (int i = 0; i < n && used < sizeof(line); i++) {
            int w = snprintf(line + used, sizeof(line) - used, "%s%s", i ? ", " : "",
                             ps_status_name(statuses[i]));
            used += w > 0 ? (size_t)w : 0;
        }
        ps_error(PS_LOG_CORE, "%s: the starts ended with %s", what, line);
        for (int i = 0; i < n; i++) {
            if (pos[i] != NULL)
                ps_postoffice_finalize(pos[i], 0);
            pos[i] = NULL;
        }
    }
    free(one);
    free(threads);
    return first;
}

ps_status_t ps_postoffice_start_group(const ps_start_params_t *params, int do_barrier,
                                      ps_postoffice_t **pos)
{
    if (pos == NULL)
        return PS_ERR_INVALID_ARG;
    ps_start_params_t p;
    ps_status_t given = ps__start_params_given_or_env(params, 1, &p);
    if (given != PS_OK)
        return given;
    if (p.role != PS_ROLE_SERVER && p.role != PS_ROLE_WORKER) {
        ps_error(PS_LOG_CORE, "ps_postoffice_start_group: the role is %s; a group is of servers "
                 "or of workers", ps_role_str(p.role));
        return PS_ERR_INVALID_ARG;
    }
    int g = p.group_size > 0 ? p.group_size : 1;
    if (g > PS_GROUP_SIZE_MAX) {
        ps_error(PS_LOG_CORE, "DMLC_GROUP_SIZE is %d; at most %d", g, PS_GROUP_SIZE_MAX);
        return PS_ERR_CONFIG;
    }
    int groups = p.role == PS_ROLE_SERVER ? p.num_servers : p.num_workers;
    if (p.preferred_rank >= groups) {
        ps_error(PS_LOG_CORE, "group rank %d is out of range: there are %d %s groups",
                 p.preferred_rank, groups, ps_role_str(p.role));
        return PS_ERR_CONFIG;
    }
    ps_start_params_t *each = calloc((size_t)g, sizeof(*each));
    ps_status_t *statuses = calloc((size_t)g, sizeof(*statuses));
    ps_status_t st = PS_ERR_NO_MEMORY;
    if (each != NULL && statuses != NULL) {
        for (int i = 0; i < g; i++) {
            each[i] = p;
            each[i].group_size = g;
            each[i].instance = i;
            each[i].preferred_rank = p.preferred_rank >= 0 ? p.preferred_rank * g + i : -1;
            each[i].port = p.port > 0 ? p.port + i : 0;
        }
        st = ps__po_start_each(each, g, do_barrier, "instance group", pos, statuses);
    }
    free(each);
    free(statuses);
    return st;
}

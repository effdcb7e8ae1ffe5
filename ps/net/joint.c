/*
 * DMLC_ROLE=joint: see joint.h.
 */
#include "ps/net/joint.h"

#include "ps/base/log.h"
#include "ps/net/params_internal.h"
#include "ps/net/start_each_internal.h"

ps_status_t ps_postoffice_start_joint(const ps_start_params_t *params, int do_barrier,
                                      ps_postoffice_t **server_p, ps_postoffice_t **worker_p)
{
    if (server_p == NULL || worker_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps_start_params_t p;
    ps_status_t given = ps__start_params_given_or_env(params, 0, &p);
    if (given != PS_OK)
        return given;
    if (p.role != PS_ROLE_JOINT) {
        ps_error(PS_LOG_CORE, "ps_postoffice_start_joint: the role is %s, not joint",
                 ps_role_str(p.role));
        return PS_ERR_INVALID_ARG;
    }
    ps_start_params_t both[2] = {p, p};
    both[0].role = PS_ROLE_SERVER;
    both[1].role = PS_ROLE_WORKER;
    both[1].port = 0; /* one fixed port (DMLC_PORT) serves one node: the server */
    ps_postoffice_t *pos[2];
    ps_status_t statuses[2];
    ps_status_t st = ps__po_start_each(both, 2, do_barrier, "joint process (server, worker)",
                                       pos, statuses);
    if (st != PS_OK)
        return st;
    *server_p = pos[0];
    *worker_p = pos[1];
    return PS_OK;
}

#include "ps/rdma/common/van_open.h"

#include "ps/base/sigkeep.h"

ps_status_t ps__van_open_loaded(const char *van, ps_log_component_t comp,
                                ps__van_load_func_t load, ps__van_open_func_t open_body,
                                const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                                ps_van_t **van_p)
{
    char why[256];
    if (load != NULL && load(why, sizeof(why)) != PS_OK) {
        ps_error(comp, "%s van unavailable: %s", van, why);
        return PS_ERR_UNSUPPORTED;
    }
    ps_sigkeep_t keep;
    ps__sigkeep_save(&keep);
    ps_status_t st = open_body(params, cb, van_p);
    ps__sigkeep_restore(&keep, van);
    return st;
}

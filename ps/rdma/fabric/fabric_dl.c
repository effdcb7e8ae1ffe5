/* libfabric.so.1 into ps__fab_api, once. */
#define PS__FAB_DL_NO_MACROS
#include "ps/rdma/fabric/fabric_dl.h"

#include "ps/base/sigkeep.h"
#include "ps/rdma/common/dl.h"

ps__fab_api_t ps__fab_api;

#define SYM(_field, _name) {#_name, offsetof(ps__fab_api_t, _field)}
static const ps__dl_sym_t fab_syms[] = {
    SYM(getinfo, fi_getinfo),   SYM(freeinfo, fi_freeinfo), SYM(dupinfo, fi_dupinfo),
    SYM(fabric, fi_fabric),     SYM(strerror, fi_strerror), SYM(version, fi_version),
};

static ps__dl_once_t fab_lib = PS__DL_ONCE_INIT;

static void fab_load_once(void)
{
    /* libinfinipath (psm provider) reads it when a provider list is built. */
    ps__sigkeep_setenv_default("IPATH_NO_BACKTRACE", "1");
    fab_lib.status = ps__dl_load(PS_FAB_SONAME, "fabric", &ps__fab_api, fab_syms,
                                 sizeof(fab_syms) / sizeof(fab_syms[0]), fab_lib.why,
                                 sizeof(fab_lib.why));
}

ps_status_t ps__fab_dl_load(char *why, size_t cap)
{
    return ps__dl_once(&fab_lib, fab_load_once, why, cap);
}

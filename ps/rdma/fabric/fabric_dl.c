/* libfabric.so.1 into ps__fab_api, once. */
#define PS__FAB_DL_NO_MACROS
#include "ps/rdma/fabric/fabric_dl.h"

#include <pthread.h>
#include <stdio.h>

#include "ps/base/sigkeep.h"
#include "ps/rdma/common/dl.h"

ps__fab_api_t ps__fab_api;

#define SYM(_field, _name) {#_name, offsetof(ps__fab_api_t, _field)}
static const ps__dl_sym_t fab_syms[] = {
    SYM(getinfo, fi_getinfo),   SYM(freeinfo, fi_freeinfo), SYM(dupinfo, fi_dupinfo),
    SYM(fabric, fi_fabric),     SYM(strerror, fi_strerror), SYM(version, fi_version),
};

static pthread_once_t fab_once = PTHREAD_ONCE_INIT;
static ps_status_t fab_status;
static char fab_why[256];

static void fab_load_once(void)
{
    /* libinfinipath (psm provider) reads it when a provider list is built. */
    ps__sigkeep_setenv_default("IPATH_NO_BACKTRACE", "1");
    ps_sigkeep_t keep;
    ps__sigkeep_save(&keep);
    fab_status = ps__dl_load(PS_FAB_SONAME, &ps__fab_api, fab_syms,
                             sizeof(fab_syms) / sizeof(fab_syms[0]), fab_why, sizeof(fab_why));
    ps__sigkeep_restore(&keep, "fabric");
}

ps_status_t ps__fab_dl_load(char *why, size_t cap)
{
    pthread_once(&fab_once, fab_load_once);
    if (fab_status != PS_OK && why != NULL && cap > 0)
        snprintf(why, cap, "%s", fab_why);
    return fab_status;
}

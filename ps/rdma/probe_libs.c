/* Which libraries each RDMA-family van dlopens, and whether they load. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ps/rdma/fabric/fabric_dl.h"
#include "ps/rdma/probe.h"
#include "ps/rdma/ucx/ucx_dl.h"
#include "ps/rdma/verbs/verbs_dl.h"

typedef ps_status_t (*load_func_t)(char *why, size_t cap);

typedef struct {
    const char *van;
    load_func_t load;
    const char *libs[PS_PROBE_LIBS_MAX + 1]; /* NULL-terminated, load order */
} van_libs_t;

static const van_libs_t van_libs[] = {
    {"fabric", ps__fab_dl_load, {PS_FAB_SONAME, NULL}},
    {"ucx", ps__ucx_dl_load, {"libucs.so.0", "libuct.so.0", "libucp.so.0", NULL}},
    {"ibverbs", ps__rdmacm_dl_load, {PS_IBV_SONAME, PS_RDMACM_SONAME, NULL}},
};

ps_status_t ps_probe_van_libs(const char *van, ps_probe_van_libs_t *info_p)
{
    if (van == NULL || info_p == NULL)
        return PS_ERR_INVALID_ARG;
    memset(info_p, 0, sizeof(*info_p));
    const van_libs_t *v = NULL;
    for (size_t i = 0; i < sizeof(van_libs) / sizeof(van_libs[0]); i++)
        if (strcasecmp(van_libs[i].van, van) == 0)
            v = &van_libs[i];
    if (v == NULL)
        return PS_OK;
    char why[PS_PROBE_REASON_MAX] = "";
    v->load(why, sizeof(why));
    for (int i = 0; v->libs[i] != NULL && i < PS_PROBE_LIBS_MAX; i++) {
        ps_probe_lib_t *l = &info_p->libs[info_p->lib_count++];
        snprintf(l->name, sizeof(l->name), "%s", v->libs[i]);
        /* Mapped now: the van's load got it (or another library needed it). */
        void *h = dlopen(v->libs[i], RTLD_NOW | RTLD_NOLOAD);
        if (h != NULL) {
            l->loaded = true;
            dlclose(h);
        } else if (strncmp(why, v->libs[i], strlen(v->libs[i])) == 0) {
            snprintf(l->reason, sizeof(l->reason), "%s", why);
        } else {
            snprintf(l->reason, sizeof(l->reason), "not loaded (%.120s)",
                     why[0] ? why : "no reason given");
        }
    }
    return PS_OK;
}

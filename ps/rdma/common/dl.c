/* dlopen of a van's library into a table of function pointers. */
#include "ps/rdma/common/dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "ps/base/sigkeep.h"

ps_status_t ps__dl_load(const char *soname, const char *who, void *table,
                        const ps__dl_sym_t *syms, size_t n, char *why, size_t cap)
{
    ps_sigkeep_t keep;
    ps__sigkeep_save(&keep);
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    ps__sigkeep_restore(&keep, who);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, cap, "%s not found (%s)", soname, e ? e : "no reason given");
        return PS_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; i < n; i++) {
        dlerror();
        void *p = dlsym(h, syms[i].name);
        if (p == NULL) {
            const char *e = dlerror();
            snprintf(why, cap, "%s lacks %s (%s)", soname, syms[i].name,
                     e ? e : "null symbol");
            dlclose(h);
            return PS_ERR_UNSUPPORTED;
        }
        /* POSIX guarantees a function's address survives the trip through
         * void *; memcpy says so without a cast the compiler frowns on. */
        memcpy((char *)table + syms[i].offset, &p, sizeof(p));
    }
    return PS_OK;
}

ps_status_t ps__dl_once(ps__dl_once_t *o, void (*load)(void), char *why, size_t cap)
{
    pthread_once(&o->once, load);
    if (o->status != PS_OK && why != NULL && cap > 0)
        snprintf(why, cap, "%s", o->why);
    return o->status;
}

/*
 * Loading a van's third-party library at run time: the vans compile against
 * the libraries' headers but do not link them, so that a job of another van
 * never maps them (nor runs their constructors, which may take over fatal
 * signals). Each library has a table of the entry points a van calls
 * (fabric_dl.h, ucx_dl.h, verbs_dl.h), filled here from a list of
 * (symbol, offset in the table).
 */
#ifndef PS_RDMA_COMMON_DL_H_
#define PS_RDMA_COMMON_DL_H_

#include <stddef.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;  /* the exported symbol: "fi_getinfo" */
    size_t offset;     /* of its function pointer in the table */
} ps__dl_sym_t;

/* dlopens soname (RTLD_NOW | RTLD_LOCAL) and stores each symbol's address
 * in table at its offset. PS_ERR_UNSUPPORTED with why = "libfabric.so.1 not
 * found (<dlerror>)" or "libfabric.so.1 lacks fi_getinfo (<dlerror>)" when
 * it cannot; the library stays loaded on success. */
ps_status_t ps__dl_load(const char *soname, void *table, const ps__dl_sym_t *syms, size_t n,
                        char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_DL_H_ */

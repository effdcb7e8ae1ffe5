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

#include <pthread.h>
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
 * it cannot; the library stays loaded on success. The process keeps its
 * fatal-signal dispositions whatever the library's constructors install
 * (ps/base/sigkeep.h); `who` names the van in that log line. */
ps_status_t ps__dl_load(const char *soname, const char *who, void *table,
                        const ps__dl_sym_t *syms, size_t n, char *why, size_t cap);

/* A library loaded once per process, and what every later caller is told. */
typedef struct {
    pthread_once_t once;
    ps_status_t status;
    char why[256];
} ps__dl_once_t;

#define PS__DL_ONCE_INIT {.once = PTHREAD_ONCE_INIT}

/* Runs load once (it fills o->status and, on failure, o->why); returns
 * o->status and, on failure, copies o->why into why (may be NULL). */
ps_status_t ps__dl_once(ps__dl_once_t *o, void (*load)(void), char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_DL_H_ */

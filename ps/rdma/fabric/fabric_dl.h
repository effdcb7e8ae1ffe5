/*
 * libfabric, loaded at run time (libfabric.so.1): the van and the probe
 * call the few exported functions they use through ps__fab_api; everything
 * else in the API is static inline in the headers and goes through the
 * provider's ops tables. Include this instead of (or after) <rdma/...>:
 * the macros at the end turn fi_getinfo(...) into ps__fab_api.getinfo(...),
 * so call sites read as the library's documentation.
 */
#ifndef PS_RDMA_FABRIC_FABRIC_DL_H_
#define PS_RDMA_FABRIC_FABRIC_DL_H_

#include <stddef.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_FAB_SONAME "libfabric.so.1"

typedef struct {
    __typeof__(fi_getinfo) *getinfo;
    __typeof__(fi_freeinfo) *freeinfo;
    __typeof__(fi_dupinfo) *dupinfo;
    __typeof__(fi_fabric) *fabric;
    __typeof__(fi_strerror) *strerror;
    __typeof__(fi_version) *version;
} ps__fab_api_t;

extern ps__fab_api_t ps__fab_api;

/* Loads libfabric once per process (later calls return the first result):
 * IPATH_NO_BACKTRACE=1 unless the user set it, so that the psm provider's
 * libinfinipath leaves fatal signals alone, and whatever the library's
 * constructors did to them undone. PS_ERR_UNSUPPORTED with why =
 * "libfabric.so.1 not found (...)" when it cannot. */
ps_status_t ps__fab_dl_load(char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#ifndef PS__FAB_DL_NO_MACROS
#define fi_getinfo(...) ps__fab_api.getinfo(__VA_ARGS__)
#define fi_freeinfo(...) ps__fab_api.freeinfo(__VA_ARGS__)
#define fi_dupinfo(...) ps__fab_api.dupinfo(__VA_ARGS__)
#define fi_allocinfo() ps__fab_api.dupinfo(NULL)
#define fi_fabric(...) ps__fab_api.fabric(__VA_ARGS__)
#define fi_strerror(...) ps__fab_api.strerror(__VA_ARGS__)
#define fi_version() ps__fab_api.version()
#endif

#endif /* PS_RDMA_FABRIC_FABRIC_DL_H_ */

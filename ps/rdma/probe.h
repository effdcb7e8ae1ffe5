/*
 * What this machine offers the RDMA-family vans: ibverbs devices, the rdma_cm
 * service, libfabric providers, UCX transports. Each probe fills a plain
 * struct the caller prints (ps_info) or inspects (van selection, tests), and
 * says in words why something is absent. CUDA is described by ps/gpu
 * (ps_mem_describe).
 *
 * Every probe returns PS_OK once it has looked, whatever it found; only a
 * NULL out-parameter is an error (PS_ERR_INVALID_ARG). Lists have a fixed
 * capacity and say when they were cut short. The structs are several KB:
 * allocate them, do not put them on a small stack. Probes do not log above
 * debug level: absent hardware is a finding, not an error.
 */
#ifndef PS_RDMA_PROBE_H_
#define PS_RDMA_PROBE_H_

#include <stdbool.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_PROBE_NAME_MAX 64
#define PS_PROBE_REASON_MAX 160

/* ---- ibverbs ------------------------------------------------------------ */

#define PS_PROBE_IB_MAX_DEVICES 16
#define PS_PROBE_IB_MAX_PORTS 4

typedef struct {
    int port_num;          /* 1-based, as in ibverbs */
    char state[16];        /* "PORT_ACTIVE", "PORT_DOWN", ... */
    char link_layer[16];   /* "infiniband", "ethernet", "unspecified" */
    int active_mtu;        /* bytes */
    int gid_table_len;     /* entries in the GID table */
    int gid_count;         /* non-zero GIDs among them */
} ps_probe_ib_port_t;

typedef struct {
    char name[PS_PROBE_NAME_MAX];  /* "mlx5_0" */
    char node_type[24];            /* "InfiniBand channel adapter", ... */
    char transport[16];            /* "infiniband", "iwarp", "usnic", ... */
    bool opened;                   /* the device could be opened and queried */
    char reason[PS_PROBE_REASON_MAX]; /* why not, when !opened */
    char fw_ver[64];
    int port_count;                /* ports the device has */
    int ports_listed;              /* entries filled in ports[] */
    ps_probe_ib_port_t ports[PS_PROBE_IB_MAX_PORTS];
} ps_probe_ib_device_t;

typedef struct {
    bool available;                   /* at least one device listed */
    char reason[PS_PROBE_REASON_MAX]; /* why not, when !available */
    int device_count;                 /* entries filled in devices[] */
    bool truncated;                   /* more devices than fit */
    ps_probe_ib_device_t devices[PS_PROBE_IB_MAX_DEVICES];
} ps_probe_ibverbs_t;

ps_status_t ps_probe_ibverbs(ps_probe_ibverbs_t *info_p);

/* ---- rdma_cm ------------------------------------------------------------ */

typedef struct {
    bool available;                   /* an event channel and an id were created */
    char reason[PS_PROBE_REASON_MAX]; /* why not, when !available */
} ps_probe_rdmacm_t;

ps_status_t ps_probe_rdmacm(ps_probe_rdmacm_t *info_p);

/* ---- libfabric ---------------------------------------------------------- */

#define PS_PROBE_FABRIC_MAX 128

/* One (provider, fabric) pair, with the union of what its fi_info entries
 * offer. */
typedef struct {
    char provider[PS_PROBE_NAME_MAX]; /* "tcp", "tcp;ofi_rxm", "shm", "efa" */
    char fabric[PS_PROBE_NAME_MAX];   /* "127.0.0.1/32", "shm", "efa" */
    uint32_t provider_version;        /* FI_VERSION() encoded */
    bool ep_msg;                      /* FI_EP_MSG */
    bool ep_rdm;                      /* FI_EP_RDM */
    bool ep_dgram;                    /* FI_EP_DGRAM */
    bool rma;                         /* FI_RMA */
    bool tagged;                      /* FI_TAGGED */
    bool hmem;                        /* FI_HMEM: device memory */
} ps_probe_fabric_entry_t;

typedef struct {
    uint32_t version;                 /* fi_version() of the loaded library */
    bool available;                   /* at least one provider found */
    char reason[PS_PROBE_REASON_MAX]; /* why not, when !available */
    int entry_count;                  /* entries filled in entries[] */
    bool truncated;                   /* more pairs than fit */
    ps_probe_fabric_entry_t entries[PS_PROBE_FABRIC_MAX];
} ps_probe_fabric_t;

ps_status_t ps_probe_fabric(ps_probe_fabric_t *info_p);

/* The first entry whose provider name is exactly provider, or NULL. */
const ps_probe_fabric_entry_t *ps_probe_fabric_find(const ps_probe_fabric_t *info,
                                                    const char *provider);

/* ---- UCX ---------------------------------------------------------------- */

#define PS_PROBE_UCX_MAX_RESOURCES 64
#define PS_PROBE_UCX_MAX_COMPONENTS 32

/* One transport on one device, as uct lists it. */
typedef struct {
    char component[32];   /* "tcp", "ib", "posix", "cuda_cpy" */
    char md[32];          /* memory domain: "tcp", "mlx5_0", "posix" */
    char transport[32];   /* "tcp", "rc_mlx5", "posix", "self" */
    char device[32];      /* "lo", "mlx5_0:1", "memory" */
    char device_type[8];  /* "net", "shm", "acc", "self" */
} ps_probe_ucx_resource_t;

typedef struct {
    unsigned major;
    unsigned minor;
    unsigned release;
    char version[32];                 /* ucp_get_version_string() */
    bool available;                   /* at least one transport */
    char reason[PS_PROBE_REASON_MAX]; /* why not, when !available */
    int component_count;              /* every loaded component, with or without devices */
    char components[PS_PROBE_UCX_MAX_COMPONENTS][32];
    int resource_count;               /* entries filled in resources[] */
    bool truncated;                   /* more resources than fit */
    ps_probe_ucx_resource_t resources[PS_PROBE_UCX_MAX_RESOURCES];
} ps_probe_ucx_t;

ps_status_t ps_probe_ucx(ps_probe_ucx_t *info_p);

/* The first resource with this transport name ("tcp", "posix"), or NULL. */
const ps_probe_ucx_resource_t *ps_probe_ucx_find(const ps_probe_ucx_t *info,
                                                 const char *transport);

/* ---- the vans' libraries ------------------------------------------------ */

/* The RDMA-family vans are not linked against their libraries: each
 * dlopens them when it is selected (its open or unavailable()). */
#define PS_PROBE_LIBS_MAX 4

typedef struct {
    char name[32];                    /* the soname: "libfabric.so.1" */
    bool loaded;                      /* it loaded (it is mapped now) */
    char reason[PS_PROBE_REASON_MAX]; /* why not, when !loaded */
} ps_probe_lib_t;

typedef struct {
    int lib_count;                    /* 0: the van needs none of its own */
    ps_probe_lib_t libs[PS_PROBE_LIBS_MAX];
} ps_probe_van_libs_t;

/* The libraries van ("fabric", "ucx", "ibverbs"; any other name needs
 * none) loads, in load order, after trying to load them (this maps them
 * into the calling process, as selecting that van would). */
ps_status_t ps_probe_van_libs(const char *van, ps_probe_van_libs_t *info_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_PROBE_H_ */

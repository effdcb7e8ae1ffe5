/*
 * The libfabric resources of the van: which provider (fi_getinfo), the
 * fabric, domain, address vector, completion queue and endpoint, memory
 * registration, and the endpoint blob peers learn through the scheduler.
 *
 * Provider choice: PS_FABRIC_PROVIDER names one ("tcp" finds tcp;ofi_rxm,
 * "verbs" verbs;ofi_rxm); else the first of efa, verbs;ofi_rxm,
 * tcp;ofi_rxm, shm that libfabric offers, which FI_PROVIDER (read by
 * libfabric itself) narrows as usual. The default on a machine without an
 * RDMA NIC is therefore tcp;ofi_rxm: it reaches other hosts. shm is faster
 * but reaches only this host, so it is used only when asked for.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include "ps/base/config.h"
#include "ps/base/device_probe.h"
#include "ps/base/env.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/rdma/fabric/fabric_internal.h"

#define FAB_API FI_VERSION(1, 10)

static const char *const k_preferred[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"};

const char *ps__fab_strerror(int err)
{
    return fi_strerror(err < 0 ? -err : err);
}

/* What we ask of a provider; rma/source/safe are the optional parts. */
static struct fi_info *make_hints(const char *prov, int rma, int source, int safe)
{
    struct fi_info *h = fi_allocinfo();
    if (h == NULL)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_TAGGED | FI_MSG | (rma ? FI_RMA : 0) | (source ? FI_SOURCE : 0);
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    h->domain_attr->threading = safe ? FI_THREAD_SAFE : FI_THREAD_UNSPEC;
    h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    h->domain_attr->av_type = FI_AV_TABLE;
    uint64_t order = FI_ORDER_SAS | (rma ? FI_ORDER_SAW : 0);
    h->tx_attr->msg_order = order;
    h->rx_attr->msg_order = order;
    if (prov != NULL) {
        h->fabric_attr->prov_name = strdup(prov);
        if (h->fabric_attr->prov_name == NULL) {
            fi_freeinfo(h);
            return NULL;
        }
    }
    return h;
}

/* The best fi_info of one provider: with RMA and source addresses if it
 * can, thread-safe if it can. */
static int try_provider(const char *prov, const char *node, struct fi_info **info_p)
{
    static const int combos[][3] = {
        {1, 1, 1}, {1, 0, 1}, {0, 1, 1}, {0, 0, 1}, {1, 0, 0}, {0, 0, 0},
    };
    int last = -FI_ENODATA;
    for (size_t i = 0; i < sizeof(combos) / sizeof(combos[0]); i++) {
        struct fi_info *h = make_hints(prov, combos[i][0], combos[i][1], combos[i][2]);
        if (h == NULL)
            return -FI_ENOMEM;
        struct fi_info *info = NULL;
        int ret = fi_getinfo(FAB_API, node, NULL, node ? FI_SOURCE : 0, h, &info);
        fi_freeinfo(h);
        if (ret == 0 && info != NULL) {
            *info_p = info;
            return 0;
        }
        last = ret;
    }
    return last;
}

static void record_info(ps__fab_van_t *van, struct fi_info *info)
{
    van->info = info;
    snprintf(van->prov_name, sizeof(van->prov_name), "%s", info->fabric_attr->prov_name);
    van->prov_hash = ps__fab_hash(van->prov_name);
    int mode = info->domain_attr->mr_mode;
    van->mr_local = (mode & FI_MR_LOCAL) != 0;
    van->mr_virt = (mode & FI_MR_VIRT_ADDR) != 0;
    van->mr_prov_key = (mode & FI_MR_PROV_KEY) != 0;
    van->mr_endpoint = (mode & FI_MR_ENDPOINT) != 0;
    /* Hardware registrations pin pages (and count against `ulimit -l`). */
    van->mr_pins = (mode & (FI_MR_LOCAL | FI_MR_ALLOCATED)) != 0;
    van->use_rma = (info->caps & FI_RMA) && (info->tx_attr->msg_order & FI_ORDER_SAW) &&
                   !ps__fab_rma_disabled;
    van->have_source = (info->caps & FI_SOURCE) != 0;
    van->need_ep_lock = info->domain_attr->threading != FI_THREAD_SAFE;
    van->same_host_only = strcmp(van->prov_name, "shm") == 0;
    /* shm spins for good on a lock a killed process held (fabric_watchdog.c). */
    van->posts_on_loop = van->same_host_only;
    van->inject_size = info->tx_attr->inject_size;
    van->iov_limit = info->tx_attr->iov_limit < info->rx_attr->iov_limit
                         ? info->tx_attr->iov_limit
                         : info->rx_attr->iov_limit;
    if (van->iov_limit == 0)
        van->iov_limit = 1;
    van->max_msg = info->ep_attr->max_msg_size;
}

/* ---- device memory (FI_HMEM) ---- */

/* Bytes of CUDA memory the probe registers. */
#define HMEM_PROBE_BYTES 65536

unsigned long ps__fab_hmem_probes;

/* libfabric's interface for memory of `kind`: FI_HMEM_CUDA for CUDA, else
 * FI_HMEM_SYSTEM (host memory; the van never hands another kind over). */
static enum fi_hmem_iface hmem_iface(ps_buf_mem_t kind)
{
    return kind == PS_BUF_MEM_CUDA ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
}

/* Registers [ptr, ptr + len) of `kind` memory on `device` in domain. */
static int mr_regattr(struct fid_domain *domain, const struct fi_info *info, void *ptr,
                      size_t len, ps_buf_mem_t kind, int device, uint64_t key,
                      struct fid_mr **mr_p)
{
    struct iovec iov = {.iov_base = ptr, .iov_len = len};
    struct fi_mr_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = FI_SEND | FI_RECV;
    if (info->caps & FI_RMA)
        attr.access |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    attr.requested_key = key;
    attr.iface = hmem_iface(kind);
    if (attr.iface == FI_HMEM_CUDA)
        attr.device.cuda = device;
    return fi_mr_regattr(domain, &attr, 0, mr_p);
}

/* Whether the chosen provider moves CUDA memory itself: asked again with
 * FI_HMEM (same provider, same options, so the choice of provider does not
 * change), and a probe buffer on the device the process uses registered
 * in a domain of that answer. Only then is the answer kept and CUDA memory
 * advertised; else CUDA memory is staged through host memory above the
 * van. Nothing is tried in a process that does not use CUDA yet (the probe
 * would give it a context). */
static void probe_hmem(ps__fab_van_t *van)
{
    void *ptr = NULL;
    int device = -1;
    ps_status_t st = ps_device_probe_alloc(PS_MEM_CUDA, HMEM_PROBE_BYTES, &ptr, &device);
    if (st != PS_OK) {
        ps_debug(PS_LOG_FABRIC, "no CUDA memory probe (%s): device memory is staged through "
                 "host memory", ps_status_str(st));
        return;
    }
    __atomic_add_fetch(&ps__fab_hmem_probes, 1, __ATOMIC_RELAXED);
    const struct fi_info *chosen = van->info;
    struct fi_info *h = make_hints(chosen->fabric_attr->prov_name, (chosen->caps & FI_RMA) != 0,
                                   (chosen->caps & FI_SOURCE) != 0,
                                   chosen->domain_attr->threading == FI_THREAD_SAFE);
    struct fi_info *info = NULL;
    struct fid_fabric *fabric = NULL;
    struct fid_domain *domain = NULL;
    struct fid_mr *mr = NULL;
    const char *step = "fi_getinfo with FI_HMEM";
    int ret = -FI_ENOMEM;
    if (h != NULL) {
        h->caps |= FI_HMEM;
        h->domain_attr->mr_mode |= FI_MR_HMEM;
        ret = fi_getinfo(FAB_API, NULL, NULL, 0, h, &info);
        fi_freeinfo(h);
    }
    if (ret == 0 && strcmp(info->fabric_attr->prov_name, van->prov_name) != 0)
        ret = -FI_ENODATA; /* another provider: not the one chosen */
    if (ret == 0) {
        step = "fi_fabric";
        ret = fi_fabric(info->fabric_attr, &fabric, NULL);
    }
    if (ret == 0) {
        step = "fi_domain";
        ret = fi_domain(fabric, info, &domain, NULL);
    }
    if (ret == 0) {
        step = "registering CUDA memory (fi_mr_regattr, FI_HMEM_CUDA)";
        ret = mr_regattr(domain, info, ptr, HMEM_PROBE_BYTES, PS_BUF_MEM_CUDA, device, 1,
                         &mr);
    }
    if (mr != NULL)
        fi_close(&mr->fid);
    if (domain != NULL)
        fi_close(&domain->fid);
    if (fabric != NULL)
        fi_close(&fabric->fid);
    ps_device_probe_free(PS_MEM_CUDA, ptr);
    if (ret != 0) {
        if (info != NULL)
            fi_freeinfo(info);
        ps_info(PS_LOG_FABRIC, "provider %s does not move CUDA memory here (%s: %s): device "
                "memory is staged through host memory", van->prov_name, step,
                ps__fab_strerror(ret));
        return;
    }
    fi_freeinfo(van->info);
    record_info(van, info);
    van->device_kinds = PS_VAN_DEVICE(PS_BUF_MEM_CUDA);
}

ps_status_t ps__fab_probe(ps__fab_van_t *van)
{
    const char *want = ps_config_str_or(PS_FABRIC_CFG(PS_FABRIC_PROVIDER), "");
    struct fi_info *info = NULL;
    int ret;
    if (want[0] != '\0') {
        char name[64];
        /* Short names of the layered RDM providers. */
        if (strcmp(want, "tcp") == 0 || strcmp(want, "verbs") == 0)
            snprintf(name, sizeof(name), "%s;ofi_rxm", want);
        else
            snprintf(name, sizeof(name), "%s", want);
        ret = try_provider(name, NULL, &info);
        if (ret != 0) {
            ps_error(PS_LOG_FABRIC, "libfabric provider '%s' (PS_FABRIC_PROVIDER) offers no "
                     "reliable-datagram endpoint with tagged messages here: %s%s", name,
                     ps__fab_strerror(ret),
                     strcmp(name, "sockets") == 0 ? "" : " (`fi_info -t FI_EP_RDM` lists what does)");
            return PS_ERR_UNSUPPORTED;
        }
    } else {
        ret = -FI_ENODATA;
        for (size_t i = 0; i < sizeof(k_preferred) / sizeof(k_preferred[0]) && info == NULL; i++)
            ret = try_provider(k_preferred[i], NULL, &info);
        if (info == NULL) {
            ps_error(PS_LOG_FABRIC, "no libfabric provider fits (tried efa, verbs;ofi_rxm, "
                     "tcp;ofi_rxm, shm%s): %s; `fi_info -t FI_EP_RDM` lists what this "
                     "machine offers", ps_env_get("FI_PROVIDER") ? ", narrowed by FI_PROVIDER" : "",
                     ps__fab_strerror(ret));
            return PS_ERR_UNSUPPORTED;
        }
    }
    record_info(van, info);
    probe_hmem(van);
    if (strcmp(van->prov_name, "sockets") == 0)
        ps_warn(PS_LOG_FABRIC, "the sockets provider is known to be broken or very slow on "
                "some systems; prefer tcp (tcp;ofi_rxm)");
    ps_info(PS_LOG_FABRIC, "libfabric provider %s (%s%s%s, mr_mode 0x%x)", van->prov_name,
            van->use_rma ? "rma writes" : "tagged only", van->have_source ? ", source addresses" : "",
            van->need_ep_lock ? ", serialised" : "", van->info->domain_attr->mr_mode);
    return PS_OK;
}

/* Socket-address providers bind where the node says it lives. */
static int addr_is_sockaddr(uint32_t fmt)
{
    return fmt == FI_SOCKADDR || fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6;
}

static ps_status_t fab_err(const char *what, int ret)
{
    ps_error(PS_LOG_FABRIC, "%s failed: %s", what, ps__fab_strerror(ret));
    return ret == -FI_ENOMEM       ? PS_ERR_NO_MEMORY
           : ret == -FI_EADDRINUSE ? PS_ERR_ADDRESS_IN_USE
                                   : PS_ERR_DEVICE;
}

/* Makes and enables the endpoint. The socket providers bind their address
 * only when the endpoint is enabled, and that has failed with EADDRINUSE
 * once under a parallel test run (a port taken between the provider's
 * pick and its bind): a new endpoint picks again, PS__FAB_ENABLE_TRIES
 * times. */
static ps_status_t open_ep(ps__fab_van_t *van)
{
    int ret;
    for (int tries = 1;; tries++) {
        if ((ret = fi_endpoint(van->domain, van->info, &van->ep, NULL)) != 0)
            return fab_err("fi_endpoint", ret);
        if ((ret = fi_ep_bind(van->ep, &van->av->fid, 0)) != 0)
            return fab_err("binding the address vector", ret);
        if ((ret = fi_ep_bind(van->ep, &van->cq->fid, FI_TRANSMIT | FI_RECV)) != 0)
            return fab_err("binding the completion queue", ret);
        int injected = __atomic_load_n(&ps__fab_enable_failures, __ATOMIC_RELAXED) > 0 &&
                       __atomic_sub_fetch(&ps__fab_enable_failures, 1, __ATOMIC_RELAXED) >= 0;
        ret = injected ? -FI_EADDRINUSE : fi_enable(van->ep);
        if (ret != -FI_EADDRINUSE || tries == PS__FAB_ENABLE_TRIES)
            break;
        ps_warn(PS_LOG_FABRIC, "enabling the endpoint: %s; making it again (%d of %d)",
                ps__fab_strerror(ret), tries + 1, PS__FAB_ENABLE_TRIES);
        ps__fab_close_ep(van);
    }
    return ret == 0 ? PS_OK : fab_err("fi_enable", ret);
}

/* shm names its shared-memory region after the process id by default
 * ("<pid>:<domain>:<endpoint>" in /dev/shm). Processes in different PID
 * namespaces (containers, Bazel's test sandbox) sharing /dev/shm then
 * collide (fi_enable fails with EBUSY), and a region left by a killed
 * process blocks its pid for good. A random part makes the name unique. */
static ps_status_t shm_unique_name(struct fi_info *info)
{
    uint64_t r = ps_time_now_ns() ^ ((uint64_t)getpid() << 40);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        uint64_t x;
        if (read(fd, &x, sizeof(x)) == (ssize_t)sizeof(x))
            r ^= x;
        close(fd);
    }
    char name[64];
    snprintf(name, sizeof(name), "fi_shm://%d:ps%016" PRIx64, (int)getpid(), r);
    char *copy = strdup(name);
    if (copy == NULL)
        return PS_ERR_NO_MEMORY;
    free(info->src_addr);
    info->src_addr = copy;
    info->src_addrlen = strlen(copy) + 1;
    return PS_OK;
}

ps_status_t ps__fab_setup(ps__fab_van_t *van, const char *host)
{
    int ret;
    if (host != NULL && host[0] != '\0' && addr_is_sockaddr(van->info->addr_format)) {
        struct fi_info *bound = NULL;
        if (try_provider(van->prov_name, host, &bound) == 0) {
            fi_freeinfo(van->info);
            record_info(van, bound);
        } else {
            ps_warn(PS_LOG_FABRIC, "provider %s cannot bind to %s; using its default address",
                    van->prov_name, host);
        }
    }
    if (van->info->addr_format == FI_ADDR_STR && strcmp(van->prov_name, "shm") == 0) {
        ps_status_t st = shm_unique_name(van->info);
        if (st != PS_OK)
            return st;
    }
    struct fi_info *info = van->info;

    if ((ret = fi_fabric(info->fabric_attr, &van->fabric, NULL)) != 0)
        return fab_err("fi_fabric", ret);
    if ((ret = fi_domain(van->fabric, info, &van->domain, NULL)) != 0)
        return fab_err("fi_domain", ret);

    struct fi_av_attr av_attr;
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = FI_AV_TABLE;
    av_attr.count = 64;
    if ((ret = fi_av_open(van->domain, &av_attr, &van->av, NULL)) != 0)
        return fab_err("fi_av_open", ret);

    struct fi_cq_attr cq_attr;
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = info->tx_attr->size + info->rx_attr->size;
    if (cq_attr.size < 1024)
        cq_attr.size = 1024;
    /* A wait object lets an idle progress thread sleep. Not every provider
     * has one (shm does not): then the thread polls with growing pauses. */
    van->cq_fd = -1;
    if (!van->base.params.busy_poll) {
        cq_attr.wait_obj = FI_WAIT_FD;
        ret = fi_cq_open(van->domain, &cq_attr, &van->cq, NULL);
        if (ret == 0) {
            int fd = -1;
            if (fi_control(&van->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
                van->cq_fd = fd;
            } else {
                fi_close(&van->cq->fid);
                van->cq = NULL;
            }
        }
    }
    if (van->cq == NULL) {
        cq_attr.wait_obj = FI_WAIT_NONE;
        if ((ret = fi_cq_open(van->domain, &cq_attr, &van->cq, NULL)) != 0)
            return fab_err("fi_cq_open", ret);
    }

    ps_status_t st = open_ep(van);
    if (st != PS_OK)
        return st;
    van->my_addr_len = sizeof(van->my_addr) - sizeof(ps__fab_ep_blob_t);
    if ((ret = fi_getname(&van->ep->fid, van->my_addr, &van->my_addr_len)) != 0)
        return fab_err("fi_getname", ret);
    van->host_id = ps__fab_host_id();
    van->pid_ns = ps__fab_pid_ns();
    /* Peers of this process look us up there (fabric_local.c); without the
     * entry they would take us for closed, so no entry, no van. */
    ps_status_t listed = ps__fab_local_add(van->my_addr, van->my_addr_len);
    if (listed != PS_OK)
        return listed;
    van->local_listed = 1;

    ps_rdma_mr_cache_params_t mp = {
        .name = "fabric",
        .log = PS_LOG_FABRIC,
        .max_bytes = ps_rdma_mr_cache_default_limit(van->mr_pins),
    };
    st = ps_rdma_mr_cache_create(&mp, &ps__fab_reg_ops, van, &van->mrc);
    if (st != PS_OK)
        return st;
    st = ps_rdma_buf_pool_create("fabric", van->mr_local ? &ps__fab_reg_ops : NULL, van, 0, 0,
                                 &van->pool);
    if (st != PS_OK)
        return st;
    van->up = 1;
    char addr[128] = "";
    size_t alen = sizeof(addr);
    fi_av_straddr(van->av, van->my_addr, addr, &alen);
    ps_info(PS_LOG_FABRIC, "endpoint %s on provider %s (%s)", addr, van->prov_name,
            van->cq_fd >= 0 ? "sleeps on a wait fd when idle" :
            van->base.params.busy_poll ? "busy-polls" : "polls with pauses when idle (no wait object)");
    return PS_OK;
}

void ps__fab_close_ep(ps__fab_van_t *van)
{
    if (van->ep != NULL) {
        int ret = fi_close(&van->ep->fid);
        if (ret != 0)
            ps_warn(PS_LOG_FABRIC, "closing the endpoint: %s", ps__fab_strerror(ret));
    }
    van->ep = NULL;
}

void ps__fab_teardown(ps__fab_van_t *van)
{
    ps__fab_close_ep(van);
    /* Registrations go before the domain that made them. */
    ps_rdma_mr_cache_destroy(van->mrc);
    van->mrc = NULL;
    ps_rdma_buf_pool_destroy(van->pool);
    van->pool = NULL;
    if (van->cq != NULL)
        fi_close(&van->cq->fid);
    van->cq = NULL;
    if (van->av != NULL)
        fi_close(&van->av->fid);
    van->av = NULL;
    if (van->domain != NULL) {
        int ret = fi_close(&van->domain->fid);
        if (ret != 0)
            ps_warn(PS_LOG_FABRIC, "closing the domain: %s", ps__fab_strerror(ret));
    }
    van->domain = NULL;
    if (van->fabric != NULL)
        fi_close(&van->fabric->fid);
    van->fabric = NULL;
    if (van->info != NULL)
        fi_freeinfo(van->info);
    van->info = NULL;
    van->up = 0;
}

/* ---- memory registration ---- */

static ps_status_t fab_reg(void *ctx, void *addr, size_t len, ps_buf_mem_t kind, int device,
                           void **handle_p)
{
    ps__fab_van_t *van = ctx;
    if (!ps_van_moves_kind(van->device_kinds, kind))
        return PS_ERR_UNSUPPORTED;
    uint64_t key = van->mr_prov_key ? 0 : __atomic_add_fetch(&van->next_key, 1, __ATOMIC_RELAXED);
    struct fid_mr *mr = NULL;
    int ret = mr_regattr(van->domain, van->info, addr, len, kind, device, key, &mr);
    if (ret == 0 && van->mr_endpoint) {
        ret = fi_mr_bind(mr, &van->ep->fid, 0);
        if (ret == 0)
            ret = fi_mr_enable(mr);
        if (ret != 0) {
            fi_close(&mr->fid);
            mr = NULL;
        }
    }
    if (ret != 0) {
        ps_debug(PS_LOG_FABRIC, "fi_mr_reg of %zu bytes at %p: %s", len, addr,
                 ps__fab_strerror(ret));
        return ret == -FI_ENOMEM ? PS_ERR_NO_MEMORY : PS_ERR_REGISTRATION;
    }
    *handle_p = mr;
    return PS_OK;
}

static void fab_dereg(void *ctx, void *handle)
{
    (void)ctx;
    struct fid_mr *mr = handle;
    int ret = fi_close(&mr->fid);
    if (ret != 0)
        ps_warn(PS_LOG_FABRIC, "closing a memory registration: %s", ps__fab_strerror(ret));
}

const ps_rdma_reg_ops_t ps__fab_reg_ops = {
    .size = sizeof(ps_rdma_reg_ops_t),
    .reg = fab_reg,
    .dereg = fab_dereg,
};

void *ps__fab_mr_desc(void *handle)
{
    return handle != NULL ? fi_mr_desc((struct fid_mr *)handle) : NULL;
}

uint64_t ps__fab_mr_key(void *handle)
{
    return fi_mr_key((struct fid_mr *)handle);
}

/* ---- endpoint blobs ---- */

ps_status_t ps__fab_make_blob(ps__fab_van_t *van, uint8_t *buf, size_t cap, uint32_t *len_p)
{
    ps__fab_ep_blob_t b;
    size_t need = sizeof(b) + van->my_addr_len;
    if (need > cap)
        return PS_ERR_TOO_LARGE;
    memset(&b, 0, sizeof(b));
    b.magic = PS__FAB_EP_MAGIC;
    b.version = PS__FAB_VERSION;
    b.addr_len = (uint16_t)van->my_addr_len;
    b.pid = (uint32_t)getpid();
    b.prov_hash = van->prov_hash;
    b.host_id = van->host_id;
    b.pid_ns = van->pid_ns;
    memcpy(buf, &b, sizeof(b));
    memcpy(buf + sizeof(b), van->my_addr, van->my_addr_len);
    *len_p = (uint32_t)need;
    return PS_OK;
}

ps_status_t ps__fab_parse_blob(ps__fab_van_t *van, const ps_node_t *peer, const uint8_t **addr_p,
                               size_t *addr_len_p, pid_t *pid_p, int *same_host_p)
{
    ps__fab_ep_blob_t b;
    if (peer->endpoint_name_len < sizeof(b)) {
        ps_error(PS_LOG_FABRIC, "node %d's endpoint name (%u bytes) is not a fabric address",
                 peer->id, peer->endpoint_name_len);
        return PS_ERR_PROTOCOL;
    }
    if (!ps__fab_blob_read(peer->endpoint_name, peer->endpoint_name_len, &b)) {
        ps_error(PS_LOG_FABRIC, "node %d's endpoint name is not a fabric address of this "
                 "version (another van or ps version on that node?)", peer->id);
        return PS_ERR_PROTOCOL;
    }
    if (b.prov_hash != van->prov_hash) {
        ps_error(PS_LOG_FABRIC, "node %d uses another libfabric provider than this node (%s): "
                 "set the same PS_FABRIC_PROVIDER / FI_PROVIDER everywhere", peer->id,
                 van->prov_name);
        return PS_ERR_CONFIG;
    }
    int same = b.host_id == van->host_id;
    if (van->same_host_only && !same) {
        ps_error(PS_LOG_FABRIC, "node %d (%s) is on another host: provider %s reaches only "
                 "processes on this host; use tcp (or efa, verbs) for a job across hosts",
                 peer->id, peer->hostname, van->prov_name);
        return PS_ERR_UNREACHABLE;
    }
    *addr_p = peer->endpoint_name + sizeof(b);
    *addr_len_p = b.addr_len;
    /* Its pid is checked for liveness only where it names the same process
     * for us as for it. */
    *pid_p = same && b.pid_ns != 0 && b.pid_ns == van->pid_ns ? (pid_t)b.pid : 0;
    *same_host_p = same;
    return PS_OK;
}

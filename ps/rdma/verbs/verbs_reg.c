/* ibv_reg_mr and ibv_reg_dmabuf_mr behind the common registration ops (see
 * verbs_reg.h). */
#include "ps/rdma/verbs/verbs_reg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/device_probe.h"
#include "ps/base/dmabuf.h"
#include "ps/base/log.h"
#include "ps/rdma/common/rdma_shared.h"
#include "ps/rdma/verbs/verbs_diag.h"
#include "ps/rdma/verbs/verbs_dl.h"

/* Remote writes land in registered memory (grants, pull destinations);
 * reads are allowed for symmetry with the other vans. */
#define REG_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* ibv_reg_mr is a macro in recent rdma-core; these give it an address. */
static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return ibv_reg_mr(pd, addr, len, access);
}

static int real_dereg_mr(struct ibv_mr *mr)
{
    return ibv_dereg_mr(mr);
}

ps_status_t ps__vb_reg_ctx_init(ps__vb_reg_ctx_t *ctx, struct ibv_pd *pd, const char *device_name,
                                uint64_t max_mr_size)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->pd = pd;
    snprintf(ctx->device_name, sizeof(ctx->device_name), "%s",
             device_name != NULL ? device_name : "rdma");
    ctx->max_mr_size = max_mr_size;
    return ps_mutex_init(&ctx->lock);
}

void ps__vb_reg_ctx_cleanup(ps__vb_reg_ctx_t *ctx)
{
    ps_mutex_destroy(&ctx->lock);
}

void ps__vb_reg_last_error(ps__vb_reg_ctx_t *ctx, char *buf, size_t cap)
{
    ps_mutex_lock(&ctx->lock);
    snprintf(buf, cap, "%s", ctx->last_error);
    ps_mutex_unlock(&ctx->lock);
}

/* GPU memory through dma-buf: exported by its memory kind, registered at
 * its own address (iova), so that remote writes name it as they would a
 * peermem registration. NULL with why[] when this way is closed. */
static struct ibv_mr *reg_dmabuf(ps__vb_reg_ctx_t *ctx, void *addr, size_t len, ps_buf_mem_t kind,
                                 char *why, size_t cap)
{
    ps__vb_reg_dmabuf_mr_func_t reg =
        ctx->reg_dmabuf_mr != NULL ? ctx->reg_dmabuf_mr : ps__ibv_api.reg_dmabuf_mr;
    if (reg == NULL) {
        snprintf(why, cap, "libibverbs has no ibv_reg_dmabuf_mr");
        return NULL;
    }
    ps__vb_dmabuf_export_func_t export_fn =
        ctx->dmabuf_export != NULL ? ctx->dmabuf_export : ps_dmabuf_export;
    int fd = -1;
    uint64_t off = 0;
    ps_status_t st = export_fn(ps_buf_mem_ops_kind(kind), addr, len, &fd, &off);
    if (st != PS_OK) {
        snprintf(why, cap, "the memory's driver exports no dma-buf (%s)", ps_status_str(st));
        return NULL;
    }
    errno = 0;
    struct ibv_mr *mr = reg(ctx->pd, off, len, (uint64_t)(uintptr_t)addr, fd, REG_ACCESS);
    int err = errno != 0 ? errno : EINVAL;
    /* The region holds its own reference on the dma-buf. */
    close(fd);
    if (mr == NULL)
        snprintf(why, cap, "ibv_reg_dmabuf_mr: %s", strerror(err));
    return mr;
}

/* Bytes of CUDA memory ps__vb_reg_probe_dmabuf registers. */
#define DMABUF_PROBE_BYTES 65536

int ps__vb_reg_probe_dmabuf(ps__vb_reg_ctx_t *ctx, char *why, size_t cap)
{
    void *ptr = NULL;
    int device = -1;
    ps_status_t st = ps_device_probe_alloc(PS_MEM_CUDA, DMABUF_PROBE_BYTES, &ptr, &device);
    if (st != PS_OK) {
        snprintf(why, cap, "CUDA is not in use in this process (%s)", ps_status_str(st));
        return -1;
    }
    struct ibv_mr *mr = reg_dmabuf(ctx, ptr, DMABUF_PROBE_BYTES, PS_BUF_MEM_CUDA, why, cap);
    if (mr != NULL) {
        ps__vb_dereg_mr_func_t dereg = ctx->dereg_mr != NULL ? ctx->dereg_mr : real_dereg_mr;
        (void)dereg(mr);
    }
    ps_device_probe_free(PS_MEM_CUDA, ptr);
    return mr != NULL;
}

static ps_status_t vb_reg(void *c, void *addr, size_t len, ps_buf_mem_t kind, int device,
                          void **handle_p)
{
    ps__vb_reg_ctx_t *ctx = c;
    int gpu = kind != PS_BUF_MEM_HOST && kind != PS_BUF_MEM_SHM;
    char dmabuf_why[128] = "";
    struct ibv_mr *mr = gpu ? reg_dmabuf(ctx, addr, len, kind, dmabuf_why, sizeof(dmabuf_why))
                            : NULL;
    if (mr != NULL) {
        __atomic_add_fetch(&ctx->registered, len, __ATOMIC_RELAXED);
        __atomic_add_fetch(&ctx->dmabuf_registrations, 1, __ATOMIC_RELAXED);
        *handle_p = mr;
        return PS_OK;
    }
    ps__vb_reg_mr_func_t reg = ctx->reg_mr != NULL ? ctx->reg_mr : real_reg_mr;
    errno = 0;
    mr = reg(ctx->pd, addr, len, REG_ACCESS);
    if (mr != NULL) {
        __atomic_add_fetch(&ctx->registered, len, __ATOMIC_RELAXED);
        *handle_p = mr;
        return PS_OK;
    }
    ps__vb_reg_failure_t f;
    memset(&f, 0, sizeof(f));
    f.dmabuf = gpu ? dmabuf_why : NULL;
    f.err = errno != 0 ? errno : EINVAL;
    f.kind = kind;
    f.device = device;
    f.len = len;
    f.memlock = ctx->memlock != 0 ? ctx->memlock : ps__vb_memlock_limit();
    f.registered = __atomic_load_n(&ctx->registered, __ATOMIC_RELAXED);
    f.max_mr_size = ctx->max_mr_size;
    f.peermem = kind == PS_BUF_MEM_CUDA
                    ? ps__vb_peermem_loaded(ctx->sysfs_root != NULL ? ctx->sysfs_root : "/sys")
                    : 0;
    f.device_name = ctx->device_name;
    __atomic_add_fetch(&ctx->failures, 1, __ATOMIC_RELAXED);
    char why[sizeof(ctx->last_error)];
    ps__vb_reg_explain(&f, why, sizeof(why));
    ps_mutex_lock(&ctx->lock);
    memcpy(ctx->last_error, why, sizeof(why));
    ps_mutex_unlock(&ctx->lock);
    /* The cache logs the failure at error level with its own numbers;
     * this line says what the device said and what to do about it. */
    ps_warn_ratelimited(PS_LOG_RDMA, "%s", why);
    return ps__vb_reg_status(&f);
}

static void vb_dereg(void *c, void *handle)
{
    ps__vb_reg_ctx_t *ctx = c;
    struct ibv_mr *mr = handle;
    size_t len = mr->length;
    ps__vb_dereg_mr_func_t dereg = ctx->dereg_mr != NULL ? ctx->dereg_mr : real_dereg_mr;
    int rc = dereg(mr);
    if (rc != 0)
        ps_warn(PS_LOG_RDMA, "ibv_dereg_mr of %zu bytes on %s: %s", len, ctx->device_name,
                strerror(rc));
    __atomic_sub_fetch(&ctx->registered, len, __ATOMIC_RELAXED);
}

const ps_rdma_reg_ops_t ps__vb_reg_ops = {
    .size = sizeof(ps_rdma_reg_ops_t),
    .reg = vb_reg,
    .dereg = vb_dereg,
};

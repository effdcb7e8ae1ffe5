/* Registration failures in words (see verbs_diag.h). */
#include "ps/rdma/verbs/verbs_diag.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

const char *ps__vb_fmt_bytes(uint64_t v, char *buf, size_t cap)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    if (v == UINT64_MAX) {
        snprintf(buf, cap, "unlimited");
        return buf;
    }
    unsigned u = 0;
    uint64_t whole = v;
    uint64_t rest = 0;
    while (whole >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        rest = whole % 1024;
        whole /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu bytes", (unsigned long long)v);
    else if (rest == 0)
        snprintf(buf, cap, "%llu %s", (unsigned long long)whole, units[u]);
    else
        snprintf(buf, cap, "%.1f %s", (double)whole + (double)rest / 1024.0, units[u]);
    return buf;
}

static int is_device_memory(ps_buf_mem_t kind)
{
    return kind == PS_BUF_MEM_CUDA;
}

static int over_memlock(const ps__vb_reg_failure_t *f)
{
    return f->memlock != UINT64_MAX &&
           (f->registered + f->len < f->registered || f->registered + f->len > f->memlock);
}

ps_status_t ps__vb_reg_status(const ps__vb_reg_failure_t *f)
{
    if (f->max_mr_size != 0 && f->len > f->max_mr_size)
        return PS_ERR_TOO_LARGE;
    if (f->err == EOPNOTSUPP || f->err == ENOTSUP)
        return PS_ERR_UNSUPPORTED;
    if (is_device_memory(f->kind)) {
        /* The kernel pins GPU memory only through peermem; the memlock limit
         * does not apply to it. */
        if (!f->peermem || f->err == EFAULT || f->err == EINVAL)
            return PS_ERR_UNSUPPORTED;
        return f->err == ENOMEM ? PS_ERR_NO_MEMORY : PS_ERR_REGISTRATION;
    }
    if (f->err == ENOMEM || f->err == EAGAIN || f->err == EPERM)
        return PS_ERR_NO_MEMORY;
    if (over_memlock(f))
        return PS_ERR_NO_MEMORY;
    return PS_ERR_REGISTRATION;
}

void ps__vb_reg_explain(const ps__vb_reg_failure_t *f, char *buf, size_t cap)
{
    char len[32], lim[32], reg[32], max[32];
    const char *dev = f->device_name != NULL ? f->device_name : "the RDMA device";
    ps__vb_fmt_bytes(f->len, len, sizeof(len));
    ps_status_t st = ps__vb_reg_status(f);
    const char *err = strerror(f->err);

    if (st == PS_ERR_TOO_LARGE) {
        snprintf(buf, cap,
                 "cannot register %s with %s: larger than the device's largest memory region "
                 "(%s); send it in smaller parts",
                 len, dev, ps__vb_fmt_bytes(f->max_mr_size, max, sizeof(max)));
        return;
    }
    if (is_device_memory(f->kind)) {
        char dmabuf[160] = "";
        if (f->dmabuf != NULL)
            snprintf(dmabuf, sizeof(dmabuf), "dma-buf: %s; ", f->dmabuf);
        if (!f->peermem) {
            snprintf(buf, cap,
                     "cannot register %s of GPU memory (device %d) with %s (%sibv_reg_mr: %s): "
                     "the nvidia-peermem kernel module is not loaded, so the NIC cannot reach GPU "
                     "memory that way; load it (modprobe nvidia-peermem), use a driver and "
                     "rdma-core with dma-buf (CUDA 11.7, rdma-core 34, kernel 5.12 or later), or "
                     "use host buffers",
                     len, f->device, dev, dmabuf, err);
        } else {
            snprintf(buf, cap,
                     "cannot register %s of GPU memory (device %d) with %s (%sibv_reg_mr: %s) "
                     "although nvidia-peermem is loaded: check that the GPU and the NIC share a "
                     "PCIe root and that the allocation is device memory, not managed memory",
                     len, f->device, dev, dmabuf, err);
        }
        return;
    }
    if (st == PS_ERR_NO_MEMORY) {
        ps__vb_fmt_bytes(f->memlock, lim, sizeof(lim));
        ps__vb_fmt_bytes(f->registered, reg, sizeof(reg));
        if (f->memlock == UINT64_MAX) {
            snprintf(buf, cap,
                     "cannot register %s with %s (%s): out of lockable memory although the "
                     "memlock limit is unlimited (%s registered already); the machine is short "
                     "of memory, or lower PS_MR_CACHE_BYTES",
                     len, dev, err, reg);
        } else {
            snprintf(buf, cap,
                     "cannot register %s with %s (%s): the memlock limit (`ulimit -l`, "
                     "RLIMIT_MEMLOCK) is %s and %s is registered already; raise it (ulimit -l "
                     "unlimited; LimitMEMLOCK=infinity for systemd; docker --ulimit "
                     "memlock=-1) or lower PS_MR_CACHE_BYTES",
                     len, dev, err, lim, reg);
        }
        return;
    }
    if (st == PS_ERR_UNSUPPORTED) {
        snprintf(buf, cap, "cannot register %s with %s (%s): the device cannot register this "
                 "kind of memory", len, dev, err);
        return;
    }
    snprintf(buf, cap, "cannot register %s with %s: ibv_reg_mr: %s", len, dev, err);
}

uint64_t ps__vb_memlock_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return UINT64_MAX;
    return (uint64_t)rl.rlim_cur;
}

int ps__vb_peermem_loaded(const char *sysfs_root)
{
    char path[512];
    static const char *const mods[] = {"nvidia_peermem", "nv_peer_mem"};
    for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
        snprintf(path, sizeof(path), "%s/module/%s", sysfs_root, mods[i]);
        if (access(path, F_OK) == 0)
            return 1;
    }
    return 0;
}

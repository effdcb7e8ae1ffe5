/* The probe functions of the memory kinds (see device_probe.h). */
#include "ps/base/device_probe.h"

#include <stdatomic.h>

static _Atomic(const ps_device_probe_ops_t *) probes[PS_MEM_KIND_COUNT];

void ps_device_probe_set(ps_mem_kind_t kind, const ps_device_probe_ops_t *ops)
{
    if ((unsigned)kind < PS_MEM_KIND_COUNT)
        atomic_store(&probes[kind], ops);
}

static const ps_device_probe_ops_t *probe_of(ps_mem_kind_t kind)
{
    const ps_device_probe_ops_t *ops =
        (unsigned)kind < PS_MEM_KIND_COUNT ? atomic_load(&probes[kind]) : NULL;
    return ops != NULL && ops->in_use != NULL && ops->alloc != NULL && ops->free != NULL ? ops
                                                                                       : NULL;
}

ps_status_t ps_device_probe_alloc(ps_mem_kind_t kind, size_t len, void **ptr_p, int *device_p)
{
    if (len == 0 || ptr_p == NULL || device_p == NULL)
        return PS_ERR_INVALID_ARG;
    const ps_device_probe_ops_t *ops = probe_of(kind);
    if (ops == NULL)
        return PS_ERR_UNSUPPORTED;
    int device = -1;
    ps_status_t st = ops->in_use(&device);
    if (st != PS_OK)
        return st;
    void *ptr = NULL;
    if ((st = ops->alloc(len, device, &ptr)) != PS_OK)
        return st;
    *ptr_p = ptr;
    *device_p = device;
    return PS_OK;
}

void ps_device_probe_free(ps_mem_kind_t kind, void *ptr)
{
    const ps_device_probe_ops_t *ops = probe_of(kind);
    if (ops != NULL && ptr != NULL)
        (void)ops->free(ptr);
}

ps_status_t ps_device_probe_in_use(ps_mem_kind_t kind, int *device_p)
{
    if (device_p == NULL)
        return PS_ERR_INVALID_ARG;
    const ps_device_probe_ops_t *ops = probe_of(kind);
    return ops != NULL ? ops->in_use(device_p) : PS_ERR_UNSUPPORTED;
}

ps_status_t ps_device_probe_pci_bus_id(ps_mem_kind_t kind, int device, char *buf, size_t cap)
{
    if (buf == NULL || cap == 0 || device < 0)
        return PS_ERR_INVALID_ARG;
    const ps_device_probe_ops_t *ops = probe_of(kind);
    if (ops == NULL || ops->pci_bus_id == NULL)
        return PS_ERR_UNSUPPORTED;
    int in_use = -1;
    ps_status_t st = ops->in_use(&in_use);
    if (st != PS_OK)
        return st;
    return ops->pci_bus_id(device, buf, cap);
}

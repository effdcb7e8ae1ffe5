/* The dma-buf exporters of the memory kinds (see dmabuf.h). */
#include "ps/base/dmabuf.h"

#include <stdatomic.h>

static _Atomic(ps_dmabuf_export_func_t) exporters[PS_MEM_KIND_COUNT];

void ps_dmabuf_set_exporter(ps_mem_kind_t kind, ps_dmabuf_export_func_t fn)
{
    if ((unsigned)kind < PS_MEM_KIND_COUNT)
        atomic_store(&exporters[kind], fn);
}

ps_status_t ps_dmabuf_export(ps_mem_kind_t kind, const void *ptr, size_t len, int *fd_p,
                             uint64_t *offset_p)
{
    if (ptr == NULL || len == 0 || fd_p == NULL || offset_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps_dmabuf_export_func_t fn =
        (unsigned)kind < PS_MEM_KIND_COUNT ? atomic_load(&exporters[kind]) : NULL;
    return fn != NULL ? fn(ptr, len, fd_p, offset_p) : PS_ERR_UNSUPPORTED;
}

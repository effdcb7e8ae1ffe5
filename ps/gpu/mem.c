/* The registry of memory kinds and the stubs for slots a kind cannot do. */
#include "ps/gpu/mem.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ps/base/device_probe.h"
#include "ps/base/dmabuf.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/gpu/mem_internal.h"

/* How long ps_mem_event_wait yields before it sleeps between polls. */
#define PS_MEM_WAIT_YIELD_NS (1000u * 1000u)

/* Device kinds register from constructors, possibly from several shared
 * objects; atomics keep a late explicit registration safe as well. */
static _Atomic(const ps_mem_ops_t *) ps_mem_table[PS_MEM_KIND_COUNT] = {
    [PS_MEM_HOST] = &ps__mem_host_ops,
};

/* The probe functions installed in ps/base for each registered kind. */
static ps_device_probe_ops_t probe_ops[PS_MEM_KIND_COUNT];

static const char *const ps_mem_kind_names[PS_MEM_KIND_COUNT] = {
    [PS_MEM_HOST] = "host",
    [PS_MEM_CUDA] = "cuda",
    [PS_MEM_EMU] = "emu",
};

ps_status_t ps__mem_unsup_init(void)
{
    return PS_ERR_UNSUPPORTED;
}

void ps__mem_unsup_cleanup(void)
{
}

ps_status_t ps__mem_unsup_describe(ps_mem_info_t *info_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_device_count(int *count_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_alloc(size_t len, int device, void **ptr_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_free(void *ptr)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_copy(void *dst, const void *src, size_t len)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_memset(void *ptr, int value, size_t len)
{
    return PS_ERR_UNSUPPORTED;
}

bool ps__mem_unsup_is_addr(const void *ptr, int *device_p)
{
    return false;
}

ps_status_t ps__mem_unsup_register_host(void *ptr, size_t len)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_unregister_host(void *ptr)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_ipc_get_handle(void *ptr, ps_mem_ipc_handle_t *handle_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_ipc_open_handle(const ps_mem_ipc_handle_t *handle, int device,
                                          void **ptr_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_ipc_close(void *ptr)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_event_create(int device, ps_mem_event_h *event_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_event_record(ps_mem_event_h event, void *stream)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_event_query(ps_mem_event_h event)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_event_destroy(ps_mem_event_h event)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_stream_create(int device, void **stream_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_stream_destroy(void *stream)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_copy_async(void *dst, const void *src, size_t len, void *stream)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_memset_async(void *ptr, int value, size_t len, void *stream)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_launch_host_func(void *stream, void (*fn)(void *arg), void *arg)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_addr_range(const void *ptr, void **base_p, size_t *len_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_dmabuf_fd(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps__mem_unsup_in_use(int *device_p)
{
    return PS_ERR_UNSUPPORTED;
}

/* What ps_mem_ops() hands out for a kind that is not linked. */
static const ps_mem_ops_t ps_mem_unsup_ops = {
    .size = sizeof(ps_mem_ops_t),
    .name = "unsupported",
    .init = ps__mem_unsup_init,
    .cleanup = ps__mem_unsup_cleanup,
    .describe = ps__mem_unsup_describe,
    .device_count = ps__mem_unsup_device_count,
    .alloc = ps__mem_unsup_alloc,
    .free = ps__mem_unsup_free,
    .copy_to_host = ps__mem_unsup_copy,
    .copy_from_host = ps__mem_unsup_copy,
    .copy = ps__mem_unsup_copy,
    .memset = ps__mem_unsup_memset,
    .is_addr = ps__mem_unsup_is_addr,
    .register_host = ps__mem_unsup_register_host,
    .unregister_host = ps__mem_unsup_unregister_host,
    .ipc_get_handle = ps__mem_unsup_ipc_get_handle,
    .ipc_open_handle = ps__mem_unsup_ipc_open_handle,
    .ipc_close = ps__mem_unsup_ipc_close,
    .event_create = ps__mem_unsup_event_create,
    .event_record = ps__mem_unsup_event_record,
    .event_query = ps__mem_unsup_event_query,
    .event_destroy = ps__mem_unsup_event_destroy,
    .stream_create = ps__mem_unsup_stream_create,
    .stream_destroy = ps__mem_unsup_stream_destroy,
    .copy_async = ps__mem_unsup_copy_async,
    .memset_async = ps__mem_unsup_memset_async,
    .launch_host_func = ps__mem_unsup_launch_host_func,
    .addr_range = ps__mem_unsup_addr_range,
    .dmabuf_fd = ps__mem_unsup_dmabuf_fd,
    .in_use = ps__mem_unsup_in_use,
};

bool ps__mem_ops_complete(const ps_mem_ops_t *ops)
{
    if (ops == NULL || ops->size < sizeof(ps_mem_ops_t) || ops->name == NULL) {
        return false;
    }
    /* Function pointers cannot be walked generically in C11, so name them. */
    return ops->init && ops->cleanup && ops->describe && ops->device_count &&
           ops->alloc && ops->free && ops->copy_to_host && ops->copy_from_host &&
           ops->copy && ops->memset && ops->is_addr && ops->register_host &&
           ops->unregister_host && ops->ipc_get_handle && ops->ipc_open_handle &&
           ops->ipc_close && ops->event_create && ops->event_record &&
           ops->event_query && ops->event_destroy && ops->stream_create &&
           ops->stream_destroy && ops->copy_async && ops->memset_async &&
           ops->launch_host_func && ops->addr_range && ops->dmabuf_fd && ops->in_use;
}

ps_status_t ps__mem_register(ps_mem_kind_t kind, const ps_mem_ops_t *ops)
{
    const ps_mem_ops_t *expected = NULL;

    if ((unsigned)kind >= PS_MEM_KIND_COUNT || !ps__mem_ops_complete(ops)) {
        ps_error(PS_LOG_GPU, "memory kind %d: refusing an incomplete ops table", (int)kind);
        return PS_ERR_INVALID_ARG;
    }
    if (atomic_compare_exchange_strong(&ps_mem_table[kind], &expected, ops)) {
        ps_dmabuf_set_exporter(kind, ops->dmabuf_fd);
        /* Filled once: only the first registration of a kind gets here. */
        probe_ops[kind] =
            (ps_device_probe_ops_t){ops->in_use, ops->alloc, ops->free, ops->pci_bus_id};
        ps_device_probe_set(kind, &probe_ops[kind]);
        return PS_OK;
    }
    /* Registering the same table twice (constructor, then by hand) is fine. */
    return expected == ops ? PS_OK : PS_ERR_EXISTS;
}

const ps_mem_ops_t *ps_mem_ops(ps_mem_kind_t kind)
{
    const ps_mem_ops_t *ops = NULL;

    if ((unsigned)kind < PS_MEM_KIND_COUNT) {
        ops = atomic_load(&ps_mem_table[kind]);
    }
    return ops != NULL ? ops : &ps_mem_unsup_ops;
}

bool ps_mem_kind_linked(ps_mem_kind_t kind)
{
    return (unsigned)kind < PS_MEM_KIND_COUNT && atomic_load(&ps_mem_table[kind]) != NULL;
}

const char *ps_mem_kind_name(ps_mem_kind_t kind)
{
    return (unsigned)kind < PS_MEM_KIND_COUNT ? ps_mem_kind_names[kind] : "unknown";
}

ps_status_t ps_mem_describe(ps_mem_kind_t kind, ps_mem_info_t *info_p)
{
    ps_mem_info_t info;

    if ((unsigned)kind >= PS_MEM_KIND_COUNT || info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (ps_mem_kind_linked(kind)) {
        return ps_mem_ops(kind)->describe(info_p);
    }
    memset(&info, 0, sizeof(info));
    info.kind = kind;
    info.name = ps_mem_kind_name(kind);
    snprintf(info.reason, sizeof(info.reason), "%s support is not linked into this binary",
             info.name);
    *info_p = info;
    return PS_OK;
}

ps_status_t ps_mem_kind_of(const void *ptr, ps_mem_kind_t *kind_p, int *device_p)
{
    int device = 0;

    if (ptr == NULL || kind_p == NULL || device_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    /* Host claims every pointer, so device kinds are asked first. */
    for (int k = PS_MEM_KIND_COUNT - 1; k > PS_MEM_HOST; --k) {
        if (ps_mem_ops((ps_mem_kind_t)k)->is_addr(ptr, &device)) {
            *kind_p = (ps_mem_kind_t)k;
            *device_p = device;
            return PS_OK;
        }
    }
    *kind_p = PS_MEM_HOST;
    *device_p = 0;
    return PS_OK;
}

ps_status_t ps_mem_event_record(ps_mem_event_h event, void *stream)
{
    if (event == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    return ps_mem_ops(event->kind)->event_record(event, stream);
}

ps_status_t ps_mem_event_query(ps_mem_event_h event)
{
    if (event == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    return ps_mem_ops(event->kind)->event_query(event);
}

ps_status_t ps_mem_event_destroy(ps_mem_event_h event)
{
    if (event == NULL) {
        return PS_OK;
    }
    return ps_mem_ops(event->kind)->event_destroy(event);
}

ps_status_t ps_mem_event_wait(ps_mem_event_h event, int timeout_ms)
{
    uint64_t start = ps_time_now_ns();
    uint64_t deadline = timeout_ms >= 0 ? start + (uint64_t)timeout_ms * 1000000u : 0;

    for (;;) {
        ps_status_t st = ps_mem_event_query(event);
        if (st != PS_INPROGRESS) {
            return st;
        }
        uint64_t now = ps_time_now_ns();
        if (timeout_ms >= 0 && now >= deadline) {
            return PS_ERR_TIMED_OUT;
        }
        /* A copy of a few MiB is done within a few hundred microseconds:
         * yield meanwhile (each sleep costs the kernel's timer slack, some
         * 50 us, on top), then sleep so a long wait costs no core. */
        if (now - start < PS_MEM_WAIT_YIELD_NS) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

static void slice_memory_release(void *data, size_t len, void *arg)
{
    (void)len;
    (void)ps_mem_ops((ps_mem_kind_t)(uintptr_t)arg)->free(data);
}

ps_status_t ps_mem_slice_alloc(ps_mem_kind_t kind, int device, size_t len, ps_slice_t *slice_p)
{
    if (!slice_p || (unsigned)kind >= PS_MEM_KIND_COUNT)
        return PS_ERR_INVALID_ARG;
    if (kind == PS_MEM_HOST || len == 0)
        return ps_slice_alloc(len, 0, slice_p);
    const ps_mem_ops_t *ops = ps_mem_ops(kind);
    void *ptr;
    ps_status_t st = ops->alloc(len, device, &ptr);
    if (st != PS_OK)
        return st;
    ps_buf_t *buf;
    st = ps_buf_wrap_mem(ptr, len, (ps_buf_mem_t)kind, device, slice_memory_release,
                         (void *)(uintptr_t)kind, &buf);
    if (st != PS_OK) {
        (void)ops->free(ptr);
        return st;
    }
    *slice_p = (ps_slice_t){buf, 0, len}; /* the slice takes the only reference */
    return PS_OK;
}

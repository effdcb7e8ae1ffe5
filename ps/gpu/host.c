/* The host memory kind: plain process memory, one "device" (0). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/gpu/mem.h"
#include "ps/gpu/mem_internal.h"

/* Cache-line aligned, so a buffer never shares a line with its neighbour and
 * vectorised copies start aligned. */
#define PS_MEM_HOST_ALIGN 64

static ps_status_t host_init(void)
{
    return PS_OK;
}

static void host_cleanup(void)
{
}

static ps_status_t host_describe(ps_mem_info_t *info_p)
{
    if (info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(info_p, 0, sizeof(*info_p));
    info_p->kind = PS_MEM_HOST;
    info_p->name = "host";
    info_p->linked = true;
    info_p->available = true;
    info_p->device_count = 1;
    return PS_OK;
}

static ps_status_t host_device_count(int *count_p)
{
    if (count_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    *count_p = 1;
    return PS_OK;
}

static ps_status_t host_alloc(size_t len, int device, void **ptr_p)
{
    void *ptr = NULL;
    int err;

    if (len == 0 || device != 0 || ptr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    err = posix_memalign(&ptr, PS_MEM_HOST_ALIGN, len);
    if (err != 0) {
        ps_warn(PS_LOG_GPU, "host alloc of %zu bytes failed: %s", len, strerror(err));
        return PS_ERR_NO_MEMORY;
    }
    *ptr_p = ptr;
    return PS_OK;
}

static ps_status_t host_free(void *ptr)
{
    free(ptr);
    return PS_OK;
}

/* Rejects NULL with a length and overlapping regions: both are caller bugs
 * that memcpy would turn into memory corruption. */
static ps_status_t host_copy(void *dst, const void *src, size_t len)
{
    uintptr_t d = (uintptr_t)dst;
    uintptr_t s = (uintptr_t)src;

    if (len == 0) {
        return PS_OK;
    }
    if (dst == NULL || src == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (d == s) {
        return PS_OK;
    }
    if ((d < s && s - d < len) || (s < d && d - s < len)) {
        return PS_ERR_INVALID_ARG;
    }
    memcpy(dst, src, len);
    return PS_OK;
}

static ps_status_t host_memset(void *ptr, int value, size_t len)
{
    if (len == 0) {
        return PS_OK;
    }
    if (ptr == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(ptr, value, len);
    return PS_OK;
}

/* Host memory is whatever no device kind claims. */
static bool host_is_addr(const void *ptr, int *device_p)
{
    if (ptr == NULL) {
        return false;
    }
    if (device_p != NULL) {
        *device_p = 0;
    }
    return true;
}

/* Host memory needs no pinning for host copies; registering it is a no-op so
 * callers can treat every kind alike. */
static ps_status_t host_register_host(void *ptr, size_t len)
{
    return ptr != NULL && len != 0 ? PS_OK : PS_ERR_INVALID_ARG;
}

static ps_status_t host_unregister_host(void *ptr)
{
    return ptr != NULL ? PS_OK : PS_ERR_INVALID_ARG;
}

static ps_status_t host_event_create(int device, ps_mem_event_h *event_p)
{
    struct ps_mem_event *event;

    if (device != 0 || event_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    event = calloc(1, sizeof(*event));
    if (event == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    event->kind = PS_MEM_HOST;
    event->device = 0;
    *event_p = event;
    return PS_OK;
}

/* Host work is synchronous: by the time the event is recorded it is done. */
static ps_status_t host_event_record(ps_mem_event_h event, void *stream)
{
    return event != NULL && event->kind == PS_MEM_HOST ? PS_OK : PS_ERR_INVALID_ARG;
}

static ps_status_t host_event_query(ps_mem_event_h event)
{
    return event != NULL && event->kind == PS_MEM_HOST ? PS_OK : PS_ERR_INVALID_ARG;
}

static ps_status_t host_event_destroy(ps_mem_event_h event)
{
    if (event == NULL) {
        return PS_OK;
    }
    if (event->kind != PS_MEM_HOST) {
        return PS_ERR_INVALID_ARG;
    }
    free(event);
    return PS_OK;
}

/* Host work runs in the call, so one stand-in serves as every stream. */
static char host_stream;

static ps_status_t host_stream_create(int device, void **stream_p)
{
    if (device != 0 || stream_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    *stream_p = &host_stream;
    return PS_OK;
}

static ps_status_t host_stream_destroy(void *stream)
{
    return stream == NULL || stream == &host_stream ? PS_OK : PS_ERR_INVALID_ARG;
}

static ps_status_t host_copy_async(void *dst, const void *src, size_t len, void *stream)
{
    return host_copy(dst, src, len);
}

static ps_status_t host_memset_async(void *ptr, int value, size_t len, void *stream)
{
    return host_memset(ptr, value, len);
}

static ps_status_t host_launch_host_func(void *stream, void (*fn)(void *arg), void *arg)
{
    if (fn == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    fn(arg);
    return PS_OK;
}

const ps_mem_ops_t ps__mem_host_ops = {
    .size = sizeof(ps_mem_ops_t),
    .name = "host",
    .init = host_init,
    .cleanup = host_cleanup,
    .describe = host_describe,
    .device_count = host_device_count,
    .alloc = host_alloc,
    .free = host_free,
    .copy_to_host = host_copy,
    .copy_from_host = host_copy,
    .copy = host_copy,
    .memset = host_memset,
    .is_addr = host_is_addr,
    .register_host = host_register_host,
    .unregister_host = host_unregister_host,
    /* Sharing host memory between processes is the shared-memory van's job. */
    .ipc_get_handle = ps__mem_unsup_ipc_get_handle,
    .ipc_open_handle = ps__mem_unsup_ipc_open_handle,
    .ipc_close = ps__mem_unsup_ipc_close,
    .event_create = host_event_create,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_destroy = host_event_destroy,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .copy_async = host_copy_async,
    .memset_async = host_memset_async,
    .launch_host_func = host_launch_host_func,
    .addr_range = ps__mem_unsup_addr_range,
    .dmabuf_fd = ps__mem_unsup_dmabuf_fd,
    .in_use = ps__mem_unsup_in_use,
};

/*
 * The CUDA memory kind over the CUDA runtime (static cudart).
 *
 * Whether a device is usable is decided once, on first use, and every slot
 * that needs a device returns that decision (PS_ERR_DEVICE here when there is
 * no GPU or no driver), so callers see one consistent status and one log line.
 * Calls that take a device make it current only for their duration and put
 * the caller's current device back.
 */
#include "ps/gpu/cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h> /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD; no driver API is linked */
#include <cuda_runtime_api.h>

#include "ps/base/log.h"
#include "ps/gpu/mem.h"
#include "ps/gpu/mem_internal.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == PS_MEM_IPC_HANDLE_SIZE,
               "ps_mem_ipc_handle_t must hold a cudaIpcMemHandle_t");

static pthread_once_t cuda_probe_once = PTHREAD_ONCE_INIT;
static ps_status_t cuda_probe_status;
static int cuda_probe_devices;
static char cuda_probe_reason[PS_MEM_REASON_MAX];
static atomic_flag cuda_reason_logged = ATOMIC_FLAG_INIT;

static ps_status_t cuda_status_from(cudaError_t err)
{
    switch (err) {
    case cudaSuccess:
        return PS_OK;
    case cudaErrorNotReady:
        return PS_INPROGRESS;
    case cudaErrorMemoryAllocation:
        return PS_ERR_NO_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidMemcpyDirection:
        return PS_ERR_INVALID_ARG;
    case cudaErrorHostMemoryAlreadyRegistered:
        return PS_ERR_EXISTS;
    case cudaErrorHostMemoryNotRegistered:
        return PS_ERR_NOT_FOUND;
    case cudaErrorNotSupported:
        return PS_ERR_UNSUPPORTED;
    default:
        return PS_ERR_DEVICE;
    }
}

/* Runs once: counts devices without logging, so describe() stays quiet. */
static void cuda_probe(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);

    if (err != cudaSuccess) {
        snprintf(cuda_probe_reason, sizeof(cuda_probe_reason), "no cuda device: %s",
                 cudaGetErrorString(err));
        (void)cudaGetLastError(); /* do not leave the error for the next caller */
        cuda_probe_status = PS_ERR_DEVICE;
    } else if (count <= 0) {
        snprintf(cuda_probe_reason, sizeof(cuda_probe_reason),
                 "no cuda device: the driver reports 0 devices");
        cuda_probe_status = PS_ERR_DEVICE;
    } else {
        cuda_probe_devices = count;
        cuda_probe_status = PS_OK;
    }
}

static ps_status_t cuda_ready(void)
{
    pthread_once(&cuda_probe_once, cuda_probe);
    return cuda_probe_status;
}

/* Makes device current; *prev_p gets the caller's device to put back. */
static ps_status_t cuda_enter(int device, int *prev_p, const char *what)
{
    ps_status_t status = cuda_ready(); /* also orders the read of the count */
    cudaError_t err;
    int prev = 0;

    if (status != PS_OK) {
        return status;
    }
    if (device < 0 || device >= cuda_probe_devices) {
        ps_error(PS_LOG_GPU, "%s: no cuda device %d (have %d)", what, device,
                 cuda_probe_devices);
        return PS_ERR_INVALID_ARG;
    }
    err = cudaGetDevice(&prev);
    if (err == cudaSuccess && prev != device) {
        err = cudaSetDevice(device);
    }
    if (err != cudaSuccess) {
        ps_error(PS_LOG_GPU, "%s: cannot use cuda device %d: %s", what, device,
                 cudaGetErrorString(err));
        (void)cudaGetLastError();
        return cuda_status_from(err);
    }
    *prev_p = prev;
    return PS_OK;
}

static void cuda_leave(int device, int prev)
{
    if (prev != device) {
        (void)cudaSetDevice(prev);
    }
}

/* Logs a failed runtime call once here, clears the sticky last error, and
 * converts the error. */
static ps_status_t cuda_failed(cudaError_t err, const char *call)
{
    ps_error(PS_LOG_GPU, "%s failed: %s", call, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return cuda_status_from(err);
}

static ps_status_t cuda_failed_len(cudaError_t err, const char *call, size_t len)
{
    ps_error(PS_LOG_GPU, "%s of %zu bytes failed: %s", call, len, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return cuda_status_from(err);
}

static ps_status_t cuda_init(void)
{
    ps_status_t status = cuda_ready();

    if (status != PS_OK && !atomic_flag_test_and_set(&cuda_reason_logged)) {
        ps_warn(PS_LOG_GPU, "%s", cuda_probe_reason);
    }
    return status;
}

/* Nothing to undo: the runtime owns its contexts, and resetting a device here
 * would destroy the application's own allocations. */
static void cuda_cleanup(void)
{
}

static ps_status_t cuda_describe(ps_mem_info_t *info_p)
{
    ps_mem_info_t info;
    int version = 0;

    if (info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(&info, 0, sizeof(info));
    info.kind = PS_MEM_CUDA;
    info.name = "cuda";
    info.linked = true;
    if (cudaRuntimeGetVersion(&version) == cudaSuccess) {
        info.runtime_version = version;
    }
    version = 0;
    if (cudaDriverGetVersion(&version) == cudaSuccess) {
        info.driver_version = version;
    }
    (void)cudaGetLastError();
    if (cuda_ready() == PS_OK) {
        info.available = true;
        info.device_count = cuda_probe_devices;
    } else {
        snprintf(info.reason, sizeof(info.reason), "%s", cuda_probe_reason);
    }
    *info_p = info;
    return PS_OK;
}

static ps_status_t cuda_device_count(int *count_p)
{
    ps_status_t status = cuda_ready();

    if (count_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (status == PS_OK) {
        *count_p = cuda_probe_devices;
    }
    return status;
}

static ps_status_t cuda_alloc(size_t len, int device, void **ptr_p)
{
    ps_status_t status;
    cudaError_t err;
    void *ptr = NULL;
    int prev;

    if (len == 0 || ptr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    status = cuda_enter(device, &prev, "cuda alloc");
    if (status != PS_OK) {
        return status;
    }
    err = cudaMalloc(&ptr, len);
    cuda_leave(device, prev);
    if (err != cudaSuccess) {
        return cuda_failed_len(err, "cudaMalloc", len);
    }
    *ptr_p = ptr;
    return PS_OK;
}

static ps_status_t cuda_free(void *ptr)
{
    ps_status_t status;
    cudaError_t err;

    if (ptr == NULL) {
        return PS_OK;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    err = cudaFree(ptr);
    return err == cudaSuccess ? PS_OK : cuda_failed(err, "cudaFree");
}

/* The checks every copy and memset makes before the runtime call: 1 to go
 * on; 0 with *status_p the slot's answer (PS_OK for nothing to do, a bad
 * pointer, or no usable device). For a memset, pass its pointer twice. */
static int cuda_range_go(const void *dst, const void *src, size_t len, ps_status_t *status_p)
{
    if (len == 0) {
        *status_p = PS_OK;
        return 0;
    }
    if (dst == NULL || src == NULL) {
        *status_p = PS_ERR_INVALID_ARG;
        return 0;
    }
    *status_p = cuda_ready();
    return *status_p == PS_OK;
}

static ps_status_t cuda_memcpy(void *dst, const void *src, size_t len,
                               enum cudaMemcpyKind dir, const char *what)
{
    ps_status_t status;
    cudaError_t err;

    if (!cuda_range_go(dst, src, len, &status)) {
        return status;
    }
    err = cudaMemcpy(dst, src, len, dir);
    return err == cudaSuccess ? PS_OK : cuda_failed_len(err, what, len);
}

static ps_status_t cuda_copy_to_host(void *host_dst, const void *src, size_t len)
{
    return cuda_memcpy(host_dst, src, len, cudaMemcpyDeviceToHost, "cuda copy to host");
}

static ps_status_t cuda_copy_from_host(void *dst, const void *host_src, size_t len)
{
    return cuda_memcpy(dst, host_src, len, cudaMemcpyHostToDevice, "cuda copy from host");
}

static ps_status_t cuda_copy(void *dst, const void *src, size_t len)
{
    return cuda_memcpy(dst, src, len, cudaMemcpyDeviceToDevice, "cuda copy");
}

static ps_status_t cuda_memset(void *ptr, int value, size_t len)
{
    ps_status_t status;
    cudaError_t err;

    if (!cuda_range_go(ptr, ptr, len, &status)) {
        return status;
    }
    /* cudaMemset may return before the device is done; the slot is
     * synchronous like the copies. */
    err = cudaMemset(ptr, value, len);
    if (err == cudaSuccess) {
        err = cudaStreamSynchronize(0);
    }
    return err == cudaSuccess ? PS_OK : cuda_failed_len(err, "cudaMemset", len);
}

static bool cuda_is_addr(const void *ptr, int *device_p)
{
    struct cudaPointerAttributes attr;

    if (ptr == NULL || cuda_ready() != PS_OK) {
        return false;
    }
    memset(&attr, 0, sizeof(attr));
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
        return false;
    }
    if (device_p != NULL) {
        *device_p = attr.device;
    }
    return true;
}

static ps_status_t cuda_register_host(void *ptr, size_t len)
{
    ps_status_t status;
    cudaError_t err;

    if (ptr == NULL || len == 0) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    /* Portable: pinned for every device's context, since a staging block
     * of the pool serves whichever GPU a value lives on. */
    err = cudaHostRegister(ptr, len, cudaHostRegisterPortable);
    return err == cudaSuccess ? PS_OK : cuda_failed_len(err, "cudaHostRegister", len);
}

static ps_status_t cuda_unregister_host(void *ptr)
{
    ps_status_t status;
    cudaError_t err;

    if (ptr == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    err = cudaHostUnregister(ptr);
    return err == cudaSuccess ? PS_OK : cuda_failed(err, "cudaHostUnregister");
}

static ps_status_t cuda_ipc_get_handle(void *ptr, ps_mem_ipc_handle_t *handle_p)
{
    cudaIpcMemHandle_t handle;
    ps_status_t status;
    cudaError_t err;

    if (ptr == NULL || handle_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    err = cudaIpcGetMemHandle(&handle, ptr);
    if (err != cudaSuccess) {
        return cuda_failed(err, "cudaIpcGetMemHandle");
    }
    memcpy(handle_p->bytes, &handle, sizeof(handle));
    return PS_OK;
}

static ps_status_t cuda_ipc_open_handle(const ps_mem_ipc_handle_t *handle, int device,
                                        void **ptr_p)
{
    cudaIpcMemHandle_t cuda_handle;
    ps_status_t status;
    cudaError_t err;
    void *ptr = NULL;
    int prev;

    if (handle == NULL || ptr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    status = cuda_enter(device, &prev, "cuda ipc open");
    if (status != PS_OK) {
        return status;
    }
    memcpy(&cuda_handle, handle->bytes, sizeof(cuda_handle));
    err = cudaIpcOpenMemHandle(&ptr, cuda_handle, cudaIpcMemLazyEnablePeerAccess);
    cuda_leave(device, prev);
    if (err != cudaSuccess) {
        return cuda_failed(err, "cudaIpcOpenMemHandle");
    }
    *ptr_p = ptr;
    return PS_OK;
}

/* cuMemGetAddressRange (driver API), reached through the runtime so that
 * ps links no libcuda: the allocation holding a pointer, for IPC offsets. */
typedef int (*cuda_range_fn_t)(unsigned long long *base, size_t *size, unsigned long long ptr);
static pthread_once_t cuda_range_once = PTHREAD_ONCE_INIT;
static cuda_range_fn_t cuda_range_fn;

/* A driver API entry point of `version` through the runtime; NULL when
 * the driver has none. */
static void *cuda_driver_entry(const char *symbol, unsigned version)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
        return fn;
    }
    (void)cudaGetLastError();
    return NULL;
}

static void cuda_range_lookup(void)
{
    /* Version 12000 names the _v2 entry point (64-bit sizes). */
    cuda_range_fn = (cuda_range_fn_t)cuda_driver_entry("cuMemGetAddressRange", 12000);
    if (cuda_range_fn == NULL) {
        ps_error(PS_LOG_GPU, "cuda: the driver offers no cuMemGetAddressRange");
    }
}

static ps_status_t cuda_addr_range(const void *ptr, void **base_p, size_t *len_p)
{
    unsigned long long base = 0;
    size_t size = 0;
    ps_status_t status;

    if (ptr == NULL || base_p == NULL || len_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((status = cuda_ready()) != PS_OK) {
        return status;
    }
    pthread_once(&cuda_range_once, cuda_range_lookup);
    if (cuda_range_fn == NULL) {
        return PS_ERR_UNSUPPORTED;
    }
    int rc = cuda_range_fn(&base, &size, (unsigned long long)(uintptr_t)ptr);
    if (rc != 0) {
        ps_error(PS_LOG_GPU, "cuMemGetAddressRange of %p failed: error %d", ptr, rc);
        return PS_ERR_INVALID_ARG;
    }
    *base_p = (void *)(uintptr_t)base;
    *len_p = size;
    return PS_OK;
}

/* cuMemGetHandleForAddressRange (driver API, CUDA 11.7 and later), reached
 * the same way: device pages as a dma-buf for GPUDirect RDMA. */
typedef int (*cuda_dmabuf_fn_t)(void *handle, unsigned long long dptr, size_t size, int type,
                                unsigned long long flags);
static pthread_once_t cuda_dmabuf_once = PTHREAD_ONCE_INIT;
static cuda_dmabuf_fn_t cuda_dmabuf_fn;

static void cuda_dmabuf_lookup(void)
{
    cuda_dmabuf_fn = (cuda_dmabuf_fn_t)cuda_driver_entry("cuMemGetHandleForAddressRange", 11070);
    if (cuda_dmabuf_fn == NULL) {
        ps_info(PS_LOG_GPU, "cuda: the driver offers no cuMemGetHandleForAddressRange (no "
                "dma-buf export; GPUDirect RDMA needs nvidia-peermem)");
    }
}

static ps_status_t cuda_dmabuf_fd(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    ps_status_t status;
    int device = 0, prev = 0;

    if (ptr == NULL || len == 0 || fd_p == NULL || offset_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((status = cuda_ready()) != PS_OK) {
        return status;
    }
    pthread_once(&cuda_dmabuf_once, cuda_dmabuf_lookup);
    if (cuda_dmabuf_fn == NULL) {
        return PS_ERR_UNSUPPORTED;
    }
    if (!cuda_is_addr(ptr, &device)) {
        return PS_ERR_INVALID_ARG;
    }
    /* The exported range must start and end on host pages; cudaMalloc
     * hands out whole pages, so the rounded range stays in the allocation. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)ptr & ~(page - 1);
    uintptr_t end = ((uintptr_t)ptr + len + page - 1) & ~(page - 1);
    if ((status = cuda_enter(device, &prev, "cuda dma-buf export")) != PS_OK) {
        return status;
    }
    int fd = -1;
    int rc = cuda_dmabuf_fn(&fd, (unsigned long long)start, (size_t)(end - start),
                            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    cuda_leave(device, prev);
    if (rc != 0 || fd < 0) {
        /* The device or its driver cannot export (no dma-buf support): the
         * caller falls back to nvidia-peermem. */
        ps_debug(PS_LOG_GPU, "cuMemGetHandleForAddressRange of %zu bytes at %p: error %d", len,
                 ptr, rc);
        return PS_ERR_UNSUPPORTED;
    }
    *fd_p = fd;
    *offset_p = (uint64_t)((uintptr_t)ptr - start);
    return PS_OK;
}

/* cuDeviceGet and cuDevicePrimaryCtxGetState (driver API): whether this
 * process already uses the calling thread's device, asked without making
 * a context (a transport's probe must not give a CPU-only process one). */
typedef int (*cuda_device_get_fn_t)(int *dev, int ordinal);
typedef int (*cuda_ctx_state_fn_t)(int dev, unsigned int *flags, int *active);
static pthread_once_t cuda_ctx_state_once = PTHREAD_ONCE_INIT;
static cuda_device_get_fn_t cuda_device_get_fn;
static cuda_ctx_state_fn_t cuda_ctx_state_fn;

static void cuda_ctx_state_lookup(void)
{
    cuda_device_get_fn = (cuda_device_get_fn_t)cuda_driver_entry("cuDeviceGet", 2000);
    cuda_ctx_state_fn = (cuda_ctx_state_fn_t)cuda_driver_entry("cuDevicePrimaryCtxGetState", 7000);
}

static ps_status_t cuda_in_use(int *device_p)
{
    ps_status_t status;
    int ordinal = 0, dev = 0, active = 0;
    unsigned int flags = 0;

    if (device_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((status = cuda_ready()) != PS_OK) {
        return status;
    }
    pthread_once(&cuda_ctx_state_once, cuda_ctx_state_lookup);
    if (cuda_device_get_fn == NULL || cuda_ctx_state_fn == NULL) {
        return PS_ERR_UNSUPPORTED;
    }
    cudaError_t err = cudaGetDevice(&ordinal);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_status_from(err);
    }
    if (cuda_device_get_fn(&dev, ordinal) != 0 || cuda_ctx_state_fn(dev, &flags, &active) != 0) {
        return PS_ERR_DEVICE;
    }
    if (!active) {
        return PS_ERR_NOT_FOUND;
    }
    *device_p = ordinal;
    return PS_OK;
}

static ps_status_t cuda_pci_bus_id(int device, char *buf, size_t cap)
{
    ps_status_t status;
    char id[32];

    if (buf == NULL || cap == 0 || device < 0) {
        return PS_ERR_INVALID_ARG;
    }
    if ((status = cuda_ready()) != PS_OK) {
        return status;
    }
    cudaError_t err = cudaDeviceGetPCIBusId(id, (int)sizeof(id), device);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_status_from(err);
    }
    /* CUDA writes hex digits in upper case; sysfs in lower. */
    size_t n = strlen(id);
    if (n >= cap) {
        return PS_ERR_TOO_LARGE;
    }
    for (size_t i = 0; i <= n; i++) {
        buf[i] = (id[i] >= 'A' && id[i] <= 'F') ? (char)(id[i] - 'A' + 'a') : id[i];
    }
    return PS_OK;
}

static ps_status_t cuda_ipc_close(void *ptr)
{
    ps_status_t status;
    cudaError_t err;

    if (ptr == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    err = cudaIpcCloseMemHandle(ptr);
    return err == cudaSuccess ? PS_OK : cuda_failed(err, "cudaIpcCloseMemHandle");
}

static ps_status_t cuda_event_create(int device, ps_mem_event_h *event_p)
{
    struct ps_mem_event *event;
    cudaEvent_t cuda_event;
    ps_status_t status;
    cudaError_t err;
    int prev;

    if (event_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    event = calloc(1, sizeof(*event));
    if (event == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    status = cuda_enter(device, &prev, "cuda event create");
    if (status != PS_OK) {
        free(event);
        return status;
    }
    /* Readiness only: timing would make every record and query slower. */
    err = cudaEventCreateWithFlags(&cuda_event, cudaEventDisableTiming);
    cuda_leave(device, prev);
    if (err != cudaSuccess) {
        free(event);
        return cuda_failed(err, "cudaEventCreateWithFlags");
    }
    event->kind = PS_MEM_CUDA;
    event->device = device;
    event->impl = cuda_event;
    *event_p = event;
    return PS_OK;
}

static ps_status_t cuda_event_record(ps_mem_event_h event, void *stream)
{
    ps_status_t status;
    cudaError_t err;
    int prev;

    if (event == NULL || event->kind != PS_MEM_CUDA) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_enter(event->device, &prev, "cuda event record");
    if (status != PS_OK) {
        return status;
    }
    err = cudaEventRecord((cudaEvent_t)event->impl, (cudaStream_t)stream);
    cuda_leave(event->device, prev);
    return err == cudaSuccess ? PS_OK : cuda_failed(err, "cudaEventRecord");
}

static ps_status_t cuda_event_query(ps_mem_event_h event)
{
    cudaError_t err;

    if (event == NULL || event->kind != PS_MEM_CUDA) {
        return PS_ERR_INVALID_ARG;
    }
    err = cudaEventQuery((cudaEvent_t)event->impl);
    if (err == cudaSuccess || err == cudaErrorNotReady) {
        return cuda_status_from(err);
    }
    return cuda_failed(err, "cudaEventQuery");
}

static ps_status_t cuda_event_destroy(ps_mem_event_h event)
{
    cudaError_t err;

    if (event == NULL) {
        return PS_OK;
    }
    if (event->kind != PS_MEM_CUDA) {
        return PS_ERR_INVALID_ARG;
    }
    err = cudaEventDestroy((cudaEvent_t)event->impl);
    free(event);
    return err == cudaSuccess ? PS_OK : cuda_failed(err, "cudaEventDestroy");
}

/* Non-blocking streams: their work does not wait for the legacy default
 * stream, which other libraries in the process (PyTorch) may keep busy. */
static ps_status_t cuda_stream_create(int device, void **stream_p)
{
    cudaStream_t stream = NULL;
    cudaError_t err;
    int prev = 0;
    ps_status_t status;

    if (stream_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_enter(device, &prev, "cuda stream create");
    if (status != PS_OK) {
        return status;
    }
    err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cuda_leave(device, prev);
    if (err != cudaSuccess) {
        return cuda_failed(err, "cudaStreamCreateWithFlags");
    }
    *stream_p = stream;
    return PS_OK;
}

static ps_status_t cuda_stream_destroy(void *stream)
{
    cudaError_t err;

    if (stream == NULL) {
        return PS_OK; /* the default stream is not ours to destroy */
    }
    err = cudaStreamDestroy((cudaStream_t)stream);
    return err == cudaSuccess ? PS_OK : cuda_failed(err, "cudaStreamDestroy");
}

/* cudaMemcpyDefault: unified addressing tells the direction from the
 * pointers, so one slot serves host-to-device, device-to-host and
 * device-to-device. */
static ps_status_t cuda_copy_async(void *dst, const void *src, size_t len, void *stream)
{
    ps_status_t status;
    cudaError_t err;

    if (!cuda_range_go(dst, src, len, &status)) {
        return status;
    }
    err = cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, (cudaStream_t)stream);
    return err == cudaSuccess ? PS_OK : cuda_failed_len(err, "cudaMemcpyAsync", len);
}

static ps_status_t cuda_memset_async(void *ptr, int value, size_t len, void *stream)
{
    ps_status_t status;
    cudaError_t err;

    if (!cuda_range_go(ptr, ptr, len, &status)) {
        return status;
    }
    err = cudaMemsetAsync(ptr, value, len, (cudaStream_t)stream);
    return err == cudaSuccess ? PS_OK : cuda_failed_len(err, "cudaMemsetAsync", len);
}

static ps_status_t cuda_launch_host_func(void *stream, void (*fn)(void *arg), void *arg)
{
    ps_status_t status;
    cudaError_t err;

    if (fn == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    status = cuda_ready();
    if (status != PS_OK) {
        return status;
    }
    err = cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
    return err == cudaSuccess ? PS_OK : cuda_failed(err, "cudaLaunchHostFunc");
}

static const ps_mem_ops_t cuda_ops = {
    .size = sizeof(ps_mem_ops_t),
    .name = "cuda",
    .init = cuda_init,
    .cleanup = cuda_cleanup,
    .describe = cuda_describe,
    .device_count = cuda_device_count,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_to_host = cuda_copy_to_host,
    .copy_from_host = cuda_copy_from_host,
    .copy = cuda_copy,
    .memset = cuda_memset,
    .is_addr = cuda_is_addr,
    .register_host = cuda_register_host,
    .unregister_host = cuda_unregister_host,
    .ipc_get_handle = cuda_ipc_get_handle,
    .ipc_open_handle = cuda_ipc_open_handle,
    .ipc_close = cuda_ipc_close,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_destroy = cuda_event_destroy,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .copy_async = cuda_copy_async,
    .memset_async = cuda_memset_async,
    .launch_host_func = cuda_launch_host_func,
    .addr_range = cuda_addr_range,
    .dmabuf_fd = cuda_dmabuf_fd,
    .in_use = cuda_in_use,
    .pci_bus_id = cuda_pci_bus_id,
};

ps_status_t ps_mem_cuda_register(void)
{
    return ps__mem_register(PS_MEM_CUDA, &cuda_ops);
}

/* Linking the target is the opt-in (alwayslink keeps this object). No CUDA
 * call happens here, so startup stays cheap and fork() stays safe. */
__attribute__((constructor)) static void cuda_register_at_load(void)
{
    (void)ps_mem_cuda_register();
}

/*
 * Memory kinds: host memory and device (CUDA) memory behind one ops table per
 * kind, kept in an array indexed by ps_mem_kind_t. Code above this layer never
 * writes `#ifdef CUDA`: it asks ps_mem_ops(kind) and calls through the table.
 *
 * The host kind is always present. The CUDA kind is present when the binary
 * links //ps/gpu:cuda, which registers itself before main(), and the emulated
 * device kind (tests) when it links //ps/gpu:emu; without them, and
 * for any kind out of range, ps_mem_ops() returns a table whose every slot
 * returns PS_ERR_UNSUPPORTED, so callers never check for NULL.
 *
 * A kind that is linked but has no usable device (CUDA here: no GPU, no
 * driver) returns PS_ERR_DEVICE from init() and from every slot that needs the
 * device; ps_mem_describe() says why in words.
 */
#ifndef PS_GPU_MEM_H_
#define PS_GPU_MEM_H_

#include <stdbool.h>
#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/mem_kind.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif


/* An IPC handle travels to another process on the same host (inside a
 * message) and is opened there. Same size as cudaIpcMemHandle_t. */
#define PS_MEM_IPC_HANDLE_SIZE 64

typedef struct {
    unsigned char bytes[PS_MEM_IPC_HANDLE_SIZE];
} ps_mem_ipc_handle_t;

/* A readiness event: recorded after work queued on a stream, queried until
 * the work is done. Host events are ready as soon as they are recorded. */
typedef struct ps_mem_event *ps_mem_event_h;

#define PS_MEM_REASON_MAX 160

/* What a kind offers on this machine, for ps_info and for log lines. */
typedef struct {
    ps_mem_kind_t kind;
    const char *name;           /* "host", "cuda", "emu" */
    bool linked;                /* the kind's code is in this binary */
    bool available;             /* linked, and at least one usable device */
    int device_count;           /* usable devices; 0 when not available */
    int runtime_version;        /* e.g. 13000 for CUDA 13.0; 0 if none */
    int driver_version;         /* 0 when no driver is loaded */
    char reason[PS_MEM_REASON_MAX]; /* why not available; "" when available */
} ps_mem_info_t;

/*
 * One memory kind. Every slot is set; a slot the kind cannot do returns
 * PS_ERR_UNSUPPORTED. Out-parameters are written only on PS_OK. "device" is
 * the device ordinal within the kind (always 0 for host memory).
 */
typedef struct {
    size_t size; /* sizeof(ps_mem_ops_t) of the code that filled it */
    const char *name;

    /* Life cycle. init() may be called many times; the first call decides. */
    ps_status_t (*init)(void);
    void (*cleanup)(void);
    ps_status_t (*describe)(ps_mem_info_t *info_p);
    ps_status_t (*device_count)(int *count_p);

    /* Allocation and plain copies. Copies are synchronous and the regions
     * must not overlap; len 0 is a no-op. */
    ps_status_t (*alloc)(size_t len, int device, void **ptr_p);
    ps_status_t (*free)(void *ptr); /* NULL is a no-op */
    ps_status_t (*copy_to_host)(void *host_dst, const void *src, size_t len);
    ps_status_t (*copy_from_host)(void *dst, const void *host_src, size_t len);
    ps_status_t (*copy)(void *dst, const void *src, size_t len); /* same kind */
    ps_status_t (*memset)(void *ptr, int value, size_t len);

    /* True when ptr belongs to this kind; then *device_p is its device. */
    bool (*is_addr)(const void *ptr, int *device_p);

    /* Page-lock host memory so device copies to and from it run at full
     * speed (pinned staging buffers). */
    ps_status_t (*register_host)(void *ptr, size_t len);
    ps_status_t (*unregister_host)(void *ptr);

    /* Share an allocation with another process on this host. The handle
     * names the whole allocation holding ptr (as cudaIpcGetMemHandle: an
     * interior pointer gives its allocation's handle); open returns the
     * allocation's start in this process, and close takes that pointer. An
     * interior pointer travels as the handle and its offset from
     * addr_range's base. A process opens a handle once and keeps it. */
    ps_status_t (*ipc_get_handle)(void *ptr, ps_mem_ipc_handle_t *handle_p);
    ps_status_t (*ipc_open_handle)(const ps_mem_ipc_handle_t *handle, int device,
                                   void **ptr_p);
    ps_status_t (*ipc_close)(void *ptr);

    /* Readiness events. stream is the kind's stream (cudaStream_t for CUDA,
     * ignored for host); NULL means the default stream. event_query returns
     * PS_OK when the recorded work is done (or nothing was recorded yet),
     * PS_INPROGRESS while it is not. */
    ps_status_t (*event_create)(int device, ps_mem_event_h *event_p);
    ps_status_t (*event_record)(ps_mem_event_h event, void *stream);
    ps_status_t (*event_query)(ps_mem_event_h event);
    ps_status_t (*event_destroy)(ps_mem_event_h event);

    /* Streams: work queued on one stream runs in queue order, after the
     * call returns; an event recorded on the stream says when the work
     * queued before it is done. NULL is the device's default stream. A
     * kind without asynchronous work (host) does the work in the call.
     * stream_destroy returns at once; work already queued still runs. */
    ps_status_t (*stream_create)(int device, void **stream_p);
    ps_status_t (*stream_destroy)(void *stream);
    /* Each side is memory of this kind or host memory (page-locked host
     * memory for full speed). The bytes must stay valid until the work is
     * done. */
    ps_status_t (*copy_async)(void *dst, const void *src, size_t len, void *stream);
    ps_status_t (*memset_async)(void *ptr, int value, size_t len, void *stream);
    /* Runs fn(arg) in stream order (cudaLaunchHostFunc): after the work
     * queued before, and before the work queued after it. fn must not call
     * the kind's ops. */
    ps_status_t (*launch_host_func)(void *stream, void (*fn)(void *arg), void *arg);

    /* The allocation holding ptr: its start and length (for IPC offsets). */
    ps_status_t (*addr_range)(const void *ptr, void **base_p, size_t *len_p);

    /* GPUDirect RDMA: a dma-buf file descriptor exporting the device pages
     * that hold [ptr, ptr + len) and ptr's offset into it, for a NIC to
     * register (ibv_reg_dmabuf_mr); the caller closes it. Installed as the
     * kind's exporter of ps/base/dmabuf.h when the kind registers.
     * PS_ERR_UNSUPPORTED where the kind, driver or device has none. */
    ps_status_t (*dmabuf_fd)(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p);

    /* The device this process already uses, without making anything
     * (CUDA: the calling thread's device, when its primary context is
     * active): PS_OK, or PS_ERR_NOT_FOUND when the kind is not in use yet.
     * With alloc and free it is the kind's probe of ps/base/device_probe.h,
     * installed when the kind registers. */
    ps_status_t (*in_use)(int *device_p);

    /* The PCI address of `device` ("0000:3b:00.0", as sysfs names it), so
     * that a transport can find the NIC nearest to it whatever order the
     * kind numbers its devices in. Optional (NULL: the kind has no PCI
     * devices); installed in the kind's probe. */
    ps_status_t (*pci_bus_id)(int device, char *buf, size_t cap);
} ps_mem_ops_t;

/* The table of a kind; never NULL (see the top of this file). */
const ps_mem_ops_t *ps_mem_ops(ps_mem_kind_t kind);

/* True when the kind's code is linked into this binary. */
bool ps_mem_kind_linked(ps_mem_kind_t kind);

/* "host", "cuda", "emu", or "unknown". */
const char *ps_mem_kind_name(ps_mem_kind_t kind);

/* Fills *info_p for any kind, linked or not (then linked is false and reason
 * says so). Returns PS_ERR_INVALID_ARG for a kind out of range or NULL. */
ps_status_t ps_mem_describe(ps_mem_kind_t kind, ps_mem_info_t *info_p);

/* The kind ptr belongs to: the first linked device kind that claims it, else
 * host. Never fails for a non-NULL ptr. */
ps_status_t ps_mem_kind_of(const void *ptr, ps_mem_kind_t *kind_p, int *device_p);

/* `len` bytes of the kind's memory on `device` as a slice covering them,
 * given back to the kind when the last reference goes (host: a plain
 * ps_slice_alloc, 64-byte aligned). The kind must be initialised. */
ps_status_t ps_mem_slice_alloc(ps_mem_kind_t kind, int device, size_t len, ps_slice_t *slice_p);

/* Dispatch on the event's own kind, so a holder need not remember it. */
ps_status_t ps_mem_event_record(ps_mem_event_h event, void *stream);
ps_status_t ps_mem_event_query(ps_mem_event_h event);
ps_status_t ps_mem_event_destroy(ps_mem_event_h event);

/* Polls the event until its work is done (PS_OK) or timeout_ms passed
 * (PS_ERR_TIMED_OUT); another status is the kind's error. A negative
 * timeout waits without a deadline, for callers that have their own. */
ps_status_t ps_mem_event_wait(ps_mem_event_h event, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* PS_GPU_MEM_H_ */

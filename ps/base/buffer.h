/*
 * Reference-counted buffers and zero-copy slices of them.
 *
 * A ps_buf_t owns (or borrows) one contiguous region: host memory from
 * ps_buf_alloc(), or anything else through ps_buf_wrap() with a release
 * callback, so registered, device or shared memory is given back its own
 * way. A ps_slice_t is a window (offset, length) on a buffer that holds one
 * reference on it: a value can travel from the user to the wire, and from
 * the wire to a handler, as slices of one buffer without a copy.
 *
 * Ownership: every function that returns a ps_buf_t or ps_slice_t gives the
 * caller one reference, dropped with ps_buf_unref() / ps_slice_unref().
 * Reference counting is lock-free; a buffer may be shared by threads, its
 * bytes are the users' business.
 */
#ifndef PS_BASE_BUFFER_H_
#define PS_BASE_BUFFER_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/mem_kind.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a buffer's bytes live: a memory kind (ps/base/mem_kind.h, the
 * index of ps_mem_ops()), or PS_BUF_MEM_SHM, host memory in a shared
 * segment that other processes map — a host sub-kind whose value lies
 * outside the kinds' range, so the two can never be mistaken. */
typedef enum {
    PS_BUF_MEM_HOST = PS_MEM_HOST,
    PS_BUF_MEM_CUDA = PS_MEM_CUDA,
    PS_BUF_MEM_EMU = PS_MEM_EMU,
    PS_BUF_MEM_SHM = 0x10,
} ps_buf_mem_t;

/* The memory kind whose ops table handles a buffer of kind `kind`. */
static inline ps_mem_kind_t ps_buf_mem_ops_kind(ps_buf_mem_t kind)
{
    return kind == PS_BUF_MEM_SHM ? PS_MEM_HOST : (ps_mem_kind_t)kind;
}

/* Default alignment of ps_buf_alloc(): a cache line. */
#define PS_BUF_DEFAULT_ALIGN 64
/* Largest alignment ps_buf_alloc() accepts (a 2 MiB huge page). */
#define PS_BUF_MAX_ALIGN (2u << 20)

/* Opaque: its header (reference count, release, transports' registrations)
 * is ps's own (ps/base/buffer_internal.h). */
typedef struct ps_buf ps_buf_t;

/* Gives a wrapped region back; called once, when the last reference goes. */
typedef void (*ps_buf_release_func_t)(void *data, size_t length, void *arg);

/* Allocates `len` bytes of host memory (not zeroed) aligned to `align` (a
 * power of two up to PS_BUF_MAX_ALIGN; 0 means PS_BUF_DEFAULT_ALIGN), with
 * its header in the same allocation. len 0 gives a valid empty buffer. */
ps_status_t ps_buf_alloc(size_t len, size_t align, ps_buf_t **buf_p);

/* Wraps memory the caller owns: `release(data, len, arg)` runs when the last
 * reference goes; NULL release means the memory is borrowed and must outlive
 * the buffer. `data` may be NULL only when len is 0. */
ps_status_t ps_buf_wrap(void *data, size_t len, ps_buf_release_func_t release, void *arg,
                        ps_buf_t **buf_p);
/* The same for memory of another kind (device ordinal `device`). */
ps_status_t ps_buf_wrap_mem(void *data, size_t len, ps_buf_mem_t kind, int device,
                            ps_buf_release_func_t release, void *arg, ps_buf_t **buf_p);

/* A second header over `real`'s memory (same bytes, kind, device and
 * transport registrations) with a release of its own: handing out the
 * proxy instead of `real` tells its owner, through `release`, when every
 * holder let go. The proxy neither keeps `real` alive nor undoes its
 * registrations: the caller keeps a reference on `real` until `release`
 * ran. */
ps_status_t ps_buf_proxy(const ps_buf_t *real, ps_buf_release_func_t release, void *arg,
                         ps_buf_t **proxy_p);

/* Takes one more reference; returns buf. */
ps_buf_t *ps_buf_ref(ps_buf_t *buf);
/* Drops one reference; the last one releases registrations, memory and
 * header. NULL is a no-op. */
void ps_buf_unref(ps_buf_t *buf);
/* Current count (a snapshot). Read with acquire: when it is 1 and the
 * caller holds that reference, every other holder's use of the memory
 * happened before, so the caller may reuse it. */
uint32_t ps_buf_refcount(const ps_buf_t *buf);

/* The buffer's bytes, length, memory kind and device ordinal (0 for host
 * memory). */
void *ps_buf_data(const ps_buf_t *buf);
size_t ps_buf_length(const ps_buf_t *buf);
ps_buf_mem_t ps_buf_mem_kind(const ps_buf_t *buf);
int ps_buf_device(const ps_buf_t *buf);

/* ---- slices ---- */

typedef struct {
    ps_buf_t *buf; /* NULL only for the empty slice */
    size_t off;
    size_t len;
} ps_slice_t;

#define PS_SLICE_EMPTY_INIT {NULL, 0, 0}

/* A slice [off, off+len) of `buf`, holding a new reference on it.
 * PS_ERR_INVALID_ARG if the range is not inside the buffer. */
ps_status_t ps_slice_of(ps_buf_t *buf, size_t off, size_t len, ps_slice_t *slice_p);
/* A slice [off, off+len) relative to `slice`, holding a new reference. */
ps_status_t ps_slice_sub(const ps_slice_t *slice, size_t off, size_t len, ps_slice_t *sub_p);
/* Narrows `slice` in place to [off, off+len) of itself (no reference change). */
ps_status_t ps_slice_narrow(ps_slice_t *slice, size_t off, size_t len);

/* A new buffer as a slice covering it all (the slice holds the only
 * reference). */
ps_status_t ps_slice_alloc(size_t len, size_t align, ps_slice_t *slice_p);
/* ps_buf_wrap() as a slice covering it all. */
ps_status_t ps_slice_wrap(void *data, size_t len, ps_buf_release_func_t release, void *arg,
                          ps_slice_t *slice_p);

/* A copy of the slice with its own reference (the empty slice stays empty). */
ps_slice_t ps_slice_ref(const ps_slice_t *slice);
/* Drops the slice's reference and empties it. NULL is a no-op. */
void ps_slice_unref(ps_slice_t *slice);

/* The slice's first byte (NULL for the empty slice). */
void *ps_slice_ptr(const ps_slice_t *slice);

static inline size_t ps_slice_len(const ps_slice_t *slice)
{
    return slice->len;
}

static inline int ps_slice_is_empty(const ps_slice_t *slice)
{
    return slice->len == 0;
}

/* The memory kind of the slice's buffer (host for the empty slice). */
ps_buf_mem_t ps_slice_mem_kind(const ps_slice_t *slice);
/* The device ordinal of the slice's buffer (0 for host memory). */
int ps_slice_device(const ps_slice_t *slice);

/* The memory kind whose ops table (ps/gpu/mem.h) handles the slice's bytes. */
static inline ps_mem_kind_t ps_slice_mem_ops_kind(const ps_slice_t *slice)
{
    return ps_buf_mem_ops_kind(ps_slice_mem_kind(slice));
}

/* 1 when the CPU can read and write the slice's bytes (host memory, or a
 * shared segment's): every empty slice; never device memory. */
static inline int ps_slice_in_host_mem(const ps_slice_t *slice)
{
    ps_buf_mem_t kind = ps_slice_mem_kind(slice);
    return slice->len == 0 || kind == PS_BUF_MEM_HOST || kind == PS_BUF_MEM_SHM;
}

/*
 * Receive progress. A van that writes an incoming segment into a
 * destination piece by piece says how far it got, so that the buffer's
 * owner can work on the front while the rest arrives (a pull staged in
 * host memory starts its copies into the device). `end` is an offset into
 * the buffer: bytes [slice start, end) of the segment being received are
 * written. Calls come from the receiving thread, with `end` growing, and
 * stop before the message is delivered. A van that never reports leaves
 * the owner to do everything on delivery.
 */
typedef void (*ps_buf_fill_func_t)(void *arg, size_t end);

/* Sets (fn NULL: clears) the hook; set it before handing the buffer to a
 * van, clear it only once no van writes into it. */
void ps_buf_set_fill_hook(ps_buf_t *buf, ps_buf_fill_func_t fn, void *arg);

/* The first `len` bytes of slice are written: calls its buffer's hook, if
 * any. Cheap without one. */
void ps_slice_filled(const ps_slice_t *slice, size_t len);

/* Whether anyone watches slice's progress: a van then writes it in steps
 * of at most PS_SLICE_FILL_STEP bytes, reporting each, so that the
 * watcher's work on the front overlaps the writes after it. */
int ps_slice_fill_watched(const ps_slice_t *slice);
#define PS_SLICE_FILL_STEP ((size_t)1 << 20)

/*
 * Send progress, the mirror of the fill hook: a buffer whose producer is
 * still writing it (a device value copied out in chunks) is handed to a
 * van before it is complete. The hook sets *end_p to the offset into the
 * buffer up to which the bytes are written; when `wait` and that is not
 * past `beyond` (and the producer is not done), it first waits until it
 * is. It returns the producer's error if its writing failed. A van that
 * advertises PS_CAP_SEND_AS_WRITTEN sends the written front at once; the
 * layers above hand such buffers to no other van.
 */
typedef ps_status_t (*ps_buf_written_func_t)(void *arg, int wait, size_t beyond, size_t *end_p);

/* Sets the hook (before the buffer is handed out; never cleared). */
void ps_buf_set_written_hook(ps_buf_t *buf, ps_buf_written_func_t fn, void *arg);

/* Whether slice's producer may still be writing it. */
int ps_slice_being_written(const ps_slice_t *slice);

/* How many bytes of slice, from its start, are written (slice->len without
 * a producer). With `wait`, first waits until more than `have` are (or
 * all); waiting for all: have = slice->len - 1. */
ps_status_t ps_slice_written(const ps_slice_t *slice, int wait, size_t have, size_t *written_p);

/* Bounds-checked copies between host memory and a host (or shm) slice;
 * PS_ERR_UNSUPPORTED for device memory (use the GPU layer). */
ps_status_t ps_slice_copy_out(const ps_slice_t *slice, size_t off, void *dst, size_t len);
ps_status_t ps_slice_copy_in(const ps_slice_t *slice, size_t off, const void *src, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_BUFFER_H_ */

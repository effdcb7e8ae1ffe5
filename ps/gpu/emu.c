/* The emulated device memory kind (emu.h): a memory file mapped twice, once
 * without access (the address callers get) and once readable and writable
 * (the kind's own way in); stream threads for asynchronous work. */
#include "ps/gpu/emu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ps/base/log.h"
#include "ps/gpu/mem.h"
#include "ps/gpu/mem_internal.h"

#define EMU_HANDLE_MAGIC 0x4d455350u /* "PSEM" */
#define EMU_NAME_MAX 64

typedef struct {
    uintptr_t user;   /* the address callers see; no access */
    uint8_t *alias;   /* the same pages, readable and writable */
    size_t len;       /* bytes asked for */
    size_t map_len;   /* len rounded up to pages */
    int fd;           /* the memory file: our own, or one opened from a handle */
    int device;
    bool imported;    /* opened from another process's handle */
    uint64_t id;      /* in the file's name, so an importer finds the right one */
} emu_alloc_t;

/* The IPC handle's layout inside ps_mem_ipc_handle_t. */
typedef struct {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    int32_t device;
    uint64_t id;
    uint64_t map_len;
    uint64_t len;
} emu_handle_t;

_Static_assert(sizeof(emu_handle_t) <= PS_MEM_IPC_HANDLE_SIZE, "emu handle too large");

/* Allocations: few in a test, looked up on every copy. */
static pthread_rwlock_t emu_allocs_lock = PTHREAD_RWLOCK_INITIALIZER;
static emu_alloc_t *emu_allocs;
static size_t emu_nallocs;
static size_t emu_cap;
static atomic_uint_fast64_t emu_next_id = 1;
static atomic_uint emu_delay_us;

typedef enum { EMU_OP_COPY, EMU_OP_MEMSET, EMU_OP_HOST_FUNC } emu_op_type_t;

typedef struct emu_op {
    struct emu_op *next;
    emu_op_type_t type;
    unsigned delay_us;
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
    int value;
    void (*fn)(void *arg);
    void *arg;
} emu_op_t;

#define EMU_STREAM_MAGIC 0x5354524du /* "STRM" */

/* A stream: a queue and the thread that runs it. References: the owner's,
 * the thread's, and one per event recorded on it. */
typedef struct {
    uint32_t magic;
    int device;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    emu_op_t *head;
    emu_op_t *tail;
    uint64_t queued; /* ops queued so far */
    uint64_t done;   /* ops run so far */
    bool closing;
    int refs;
} emu_stream_t;

typedef struct {
    emu_stream_t *stream; /* NULL: nothing recorded yet */
    uint64_t target;      /* done when stream->done reaches it */
} emu_event_t;

static pthread_mutex_t emu_default_lock = PTHREAD_MUTEX_INITIALIZER;
static emu_stream_t *emu_default_streams[PS_MEM_EMU_DEVICES];

/* ---- allocations ---- */

/* The allocation containing [ptr, ptr + len), copied out under the lock.
 * PS_ERR_NOT_FOUND: not emulated device memory. PS_ERR_INVALID_ARG: it
 * starts in an allocation but runs past its end. */
static ps_status_t emu_find(const void *ptr, size_t len, emu_alloc_t *alloc_p)
{
    uintptr_t p = (uintptr_t)ptr;
    ps_status_t st = PS_ERR_NOT_FOUND;

    pthread_rwlock_rdlock(&emu_allocs_lock);
    for (size_t i = 0; i < emu_nallocs; ++i) {
        const emu_alloc_t *a = &emu_allocs[i];
        if (p >= a->user && p < a->user + a->len) {
            st = len <= a->len - (p - a->user) ? PS_OK : PS_ERR_INVALID_ARG;
            *alloc_p = *a;
            break;
        }
    }
    pthread_rwlock_unlock(&emu_allocs_lock);
    return st;
}

/* Where the kind itself reads or writes [ptr, ptr + len): the alias of
 * emulated memory, or ptr itself for host memory. */
static ps_status_t emu_resolve(const void *ptr, size_t len, uint8_t **bytes_p, int *device_p)
{
    emu_alloc_t a;
    ps_status_t st = emu_find(ptr, len, &a);

    if (st == PS_ERR_NOT_FOUND) {
        *bytes_p = (uint8_t *)ptr;
        if (device_p != NULL) {
            *device_p = -1;
        }
        return PS_OK;
    }
    if (st != PS_OK) {
        ps_error(PS_LOG_GPU, "emu: %zu bytes at %p run past the end of their allocation", len,
                 ptr);
        return st;
    }
    *bytes_p = a.alias + ((uintptr_t)ptr - a.user);
    if (device_p != NULL) {
        *device_p = a.device;
    }
    return PS_OK;
}

static ps_status_t emu_add(const emu_alloc_t *a)
{
    ps_status_t st = PS_OK;

    pthread_rwlock_wrlock(&emu_allocs_lock);
    if (emu_nallocs == emu_cap) {
        size_t cap = emu_cap ? emu_cap * 2 : 16;
        emu_alloc_t *grown = realloc(emu_allocs, cap * sizeof(*grown));
        if (grown == NULL) {
            st = PS_ERR_NO_MEMORY;
        } else {
            emu_allocs = grown;
            emu_cap = cap;
        }
    }
    if (st == PS_OK) {
        emu_allocs[emu_nallocs++] = *a;
    }
    pthread_rwlock_unlock(&emu_allocs_lock);
    return st;
}

/* Removes the allocation containing ptr, if it is imported (or our own) as
 * asked and, with base_only, ptr is its start; fills *alloc_p. */
static ps_status_t emu_remove(const void *ptr, bool imported, bool base_only,
                              emu_alloc_t *alloc_p)
{
    uintptr_t p = (uintptr_t)ptr;
    ps_status_t st = PS_ERR_INVALID_ARG;

    pthread_rwlock_wrlock(&emu_allocs_lock);
    for (size_t i = 0; i < emu_nallocs; ++i) {
        emu_alloc_t *a = &emu_allocs[i];
        if (p < a->user || p >= a->user + a->len) {
            continue;
        }
        if (a->imported == imported && (!base_only || p == a->user)) {
            *alloc_p = *a;
            emu_allocs[i] = emu_allocs[--emu_nallocs];
            st = PS_OK;
        }
        break;
    }
    pthread_rwlock_unlock(&emu_allocs_lock);
    return st;
}

static void emu_unmap(const emu_alloc_t *a)
{
    munmap((void *)a->user, a->map_len);
    munmap(a->alias, a->map_len);
    close(a->fd);
}

/* Maps fd twice; fills user, alias. */
static ps_status_t emu_map(emu_alloc_t *a)
{
    void *user = mmap(NULL, a->map_len, PROT_NONE, MAP_SHARED, a->fd, 0);
    if (user == MAP_FAILED) {
        ps_error(PS_LOG_GPU, "emu: mmap of %zu bytes failed: %m", a->map_len);
        return PS_ERR_NO_MEMORY;
    }
    /* Populated at once, as a device allocation is backed when it is made:
     * first-touch faults would otherwise land in the copies being timed. */
    void *alias = mmap(NULL, a->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                       a->fd, 0);
    if (alias == MAP_FAILED) {
        ps_error(PS_LOG_GPU, "emu: mmap of %zu bytes failed: %m", a->map_len);
        munmap(user, a->map_len);
        return PS_ERR_NO_MEMORY;
    }
    a->user = (uintptr_t)user;
    a->alias = alias;
    return PS_OK;
}

static void emu_file_name(uint64_t id, char *name, size_t cap)
{
    snprintf(name, cap, "ps-emu-%llu", (unsigned long long)id);
}

static ps_status_t emu_alloc(size_t len, int device, void **ptr_p)
{
    emu_alloc_t a = {.len = len, .device = device};
    char name[EMU_NAME_MAX];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ps_status_t st;

    if (len == 0 || len > SIZE_MAX - page || device < 0 || device >= PS_MEM_EMU_DEVICES ||
        ptr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    a.map_len = (len + page - 1) / page * page;
    a.id = atomic_fetch_add(&emu_next_id, 1);
    emu_file_name(a.id, name, sizeof(name));
    a.fd = memfd_create(name, MFD_CLOEXEC);
    if (a.fd < 0) {
        ps_error(PS_LOG_GPU, "emu: memfd_create failed: %m");
        return PS_ERR_NO_MEMORY;
    }
    if (ftruncate(a.fd, (off_t)a.map_len) != 0) {
        ps_error(PS_LOG_GPU, "emu: sizing %zu bytes failed: %m", a.map_len);
        close(a.fd);
        return PS_ERR_NO_MEMORY;
    }
    st = emu_map(&a);
    if (st == PS_OK) {
        st = emu_add(&a);
        if (st != PS_OK) {
            emu_unmap(&a);
        }
    } else {
        close(a.fd);
    }
    if (st == PS_OK) {
        *ptr_p = (void *)a.user;
    }
    return st;
}

static ps_status_t emu_free(void *ptr)
{
    emu_alloc_t a;

    if (ptr == NULL) {
        return PS_OK;
    }
    if (emu_remove(ptr, false, true, &a) != PS_OK) {
        ps_error(PS_LOG_GPU, "emu: free of %p, which is not the start of an allocation", ptr);
        return PS_ERR_INVALID_ARG;
    }
    emu_unmap(&a);
    return PS_OK;
}

static bool emu_is_addr(const void *ptr, int *device_p)
{
    emu_alloc_t a;

    if (ptr == NULL || emu_find(ptr, 1, &a) != PS_OK) {
        return false;
    }
    if (device_p != NULL) {
        *device_p = a.device;
    }
    return true;
}

/* ---- synchronous copies ---- */

static ps_status_t emu_copy(void *dst, const void *src, size_t len)
{
    uint8_t *d;
    uint8_t *s;
    ps_status_t st;

    if (len == 0) {
        return PS_OK;
    }
    if (dst == NULL || src == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((st = emu_resolve(dst, len, &d, NULL)) != PS_OK ||
        (st = emu_resolve(src, len, &s, NULL)) != PS_OK) {
        return st;
    }
    memmove(d, s, len);
    return PS_OK;
}

static ps_status_t emu_memset(void *ptr, int value, size_t len)
{
    uint8_t *p;
    ps_status_t st;

    if (len == 0) {
        return PS_OK;
    }
    if (ptr == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((st = emu_resolve(ptr, len, &p, NULL)) != PS_OK) {
        return st;
    }
    memset(p, value, len);
    return PS_OK;
}

/* ---- streams ---- */

static void emu_stream_unref(emu_stream_t *s)
{
    pthread_mutex_lock(&s->lock);
    int left = --s->refs;
    pthread_mutex_unlock(&s->lock);
    if (left == 0) {
        s->magic = 0;
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
}

static void emu_run(const emu_op_t *op)
{
    if (op->delay_us != 0) {
        struct timespec ts = {op->delay_us / 1000000u, (long)(op->delay_us % 1000000u) * 1000};
        nanosleep(&ts, NULL);
    }
    switch (op->type) {
    case EMU_OP_COPY:
        memmove(op->dst, op->src, op->len);
        break;
    case EMU_OP_MEMSET:
        memset(op->dst, op->value, op->len);
        break;
    case EMU_OP_HOST_FUNC:
        op->fn(op->arg);
        break;
    }
}

static void *emu_stream_main(void *arg)
{
    emu_stream_t *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->closing) {
            pthread_cond_wait(&s->wake, &s->lock);
        }
        emu_op_t *op = s->head;
        if (op == NULL) {
            break; /* closing, and everything queued ran */
        }
        s->head = op->next;
        if (s->head == NULL) {
            s->tail = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        emu_run(op);
        free(op);
        pthread_mutex_lock(&s->lock);
        s->done++;
    }
    pthread_mutex_unlock(&s->lock);
    emu_stream_unref(s);
    return NULL;
}

static ps_status_t emu_stream_new(int device, emu_stream_t **stream_p)
{
    emu_stream_t *s;
    pthread_attr_t attr;
    pthread_t thread;
    int err;

    if (device < 0 || device >= PS_MEM_EMU_DEVICES || stream_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    s->magic = EMU_STREAM_MAGIC;
    s->device = device;
    s->refs = 2; /* the owner's and the thread's */
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    err = pthread_create(&thread, &attr, emu_stream_main, s);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        ps_error(PS_LOG_GPU, "emu: cannot start a stream thread: %s", strerror(err));
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return PS_ERR_NO_RESOURCE;
    }
    *stream_p = s;
    return PS_OK;
}

/* The stream a caller named, or the device's default stream for NULL. */
static ps_status_t emu_stream_of(void *stream, int device, emu_stream_t **stream_p)
{
    ps_status_t st = PS_OK;

    if (stream != NULL) {
        emu_stream_t *s = stream;
        if (s->magic != EMU_STREAM_MAGIC) {
            return PS_ERR_INVALID_ARG;
        }
        *stream_p = s;
        return PS_OK;
    }
    if (device < 0 || device >= PS_MEM_EMU_DEVICES) {
        device = 0;
    }
    pthread_mutex_lock(&emu_default_lock);
    if (emu_default_streams[device] == NULL) {
        st = emu_stream_new(device, &emu_default_streams[device]);
    }
    if (st == PS_OK) {
        *stream_p = emu_default_streams[device];
    }
    pthread_mutex_unlock(&emu_default_lock);
    return st;
}

static ps_status_t emu_stream_create(int device, void **stream_p)
{
    emu_stream_t *s;
    ps_status_t st = emu_stream_new(device, &s);

    if (st == PS_OK) {
        *stream_p = s;
    }
    return st;
}

static ps_status_t emu_stream_destroy(void *stream)
{
    emu_stream_t *s = stream;

    if (stream == NULL) {
        return PS_OK;
    }
    if (s->magic != EMU_STREAM_MAGIC) {
        return PS_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&s->lock);
    s->closing = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    emu_stream_unref(s);
    return PS_OK;
}

static ps_status_t emu_enqueue(emu_stream_t *s, const emu_op_t *proto)
{
    emu_op_t *op = malloc(sizeof(*op));

    if (op == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    *op = *proto;
    op->next = NULL;
    op->delay_us = atomic_load(&emu_delay_us);
    pthread_mutex_lock(&s->lock);
    if (s->closing) {
        pthread_mutex_unlock(&s->lock);
        free(op);
        return PS_ERR_INVALID_ARG;
    }
    if (s->tail != NULL) {
        s->tail->next = op;
    } else {
        s->head = op;
    }
    s->tail = op;
    s->queued++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return PS_OK;
}

static ps_status_t emu_copy_async(void *dst, const void *src, size_t len, void *stream)
{
    emu_op_t op = {.type = EMU_OP_COPY, .len = len};
    emu_stream_t *s;
    uint8_t *d;
    uint8_t *sp;
    int dst_dev;
    int src_dev;
    ps_status_t st;

    if (len == 0) {
        return PS_OK;
    }
    if (dst == NULL || src == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((st = emu_resolve(dst, len, &d, &dst_dev)) != PS_OK ||
        (st = emu_resolve(src, len, &sp, &src_dev)) != PS_OK) {
        return st;
    }
    if ((st = emu_stream_of(stream, dst_dev >= 0 ? dst_dev : src_dev, &s)) != PS_OK) {
        return st;
    }
    op.dst = d;
    op.src = sp;
    return emu_enqueue(s, &op);
}

static ps_status_t emu_memset_async(void *ptr, int value, size_t len, void *stream)
{
    emu_op_t op = {.type = EMU_OP_MEMSET, .len = len, .value = value};
    emu_stream_t *s;
    uint8_t *p;
    int dev;
    ps_status_t st;

    if (len == 0) {
        return PS_OK;
    }
    if (ptr == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((st = emu_resolve(ptr, len, &p, &dev)) != PS_OK ||
        (st = emu_stream_of(stream, dev, &s)) != PS_OK) {
        return st;
    }
    op.dst = p;
    return emu_enqueue(s, &op);
}

static ps_status_t emu_launch_host_func(void *stream, void (*fn)(void *arg), void *arg)
{
    emu_op_t op = {.type = EMU_OP_HOST_FUNC, .fn = fn, .arg = arg};
    emu_stream_t *s;
    ps_status_t st;

    if (fn == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if ((st = emu_stream_of(stream, 0, &s)) != PS_OK) {
        return st;
    }
    return emu_enqueue(s, &op);
}

/* ---- events ---- */

static ps_status_t emu_event_create(int device, ps_mem_event_h *event_p)
{
    struct ps_mem_event *event;

    if (device < 0 || device >= PS_MEM_EMU_DEVICES || event_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    event = calloc(1, sizeof(*event));
    emu_event_t *impl = calloc(1, sizeof(*impl));
    if (event == NULL || impl == NULL) {
        free(event);
        free(impl);
        return PS_ERR_NO_MEMORY;
    }
    event->kind = PS_MEM_EMU;
    event->device = device;
    event->impl = impl;
    *event_p = event;
    return PS_OK;
}

static ps_status_t emu_event_record(ps_mem_event_h event, void *stream)
{
    emu_stream_t *s;
    emu_event_t *e;
    ps_status_t st;

    if (event == NULL || event->kind != PS_MEM_EMU) {
        return PS_ERR_INVALID_ARG;
    }
    if ((st = emu_stream_of(stream, event->device, &s)) != PS_OK) {
        return st;
    }
    e = event->impl;
    pthread_mutex_lock(&s->lock);
    s->refs++;
    uint64_t target = s->queued;
    pthread_mutex_unlock(&s->lock);
    if (e->stream != NULL) {
        emu_stream_unref(e->stream);
    }
    e->stream = s;
    e->target = target;
    return PS_OK;
}

static ps_status_t emu_event_query(ps_mem_event_h event)
{
    emu_event_t *e;
    bool done;

    if (event == NULL || event->kind != PS_MEM_EMU) {
        return PS_ERR_INVALID_ARG;
    }
    e = event->impl;
    if (e->stream == NULL) {
        return PS_OK;
    }
    pthread_mutex_lock(&e->stream->lock);
    done = e->stream->done >= e->target;
    pthread_mutex_unlock(&e->stream->lock);
    return done ? PS_OK : PS_INPROGRESS;
}

static ps_status_t emu_event_destroy(ps_mem_event_h event)
{
    emu_event_t *e;

    if (event == NULL) {
        return PS_OK;
    }
    if (event->kind != PS_MEM_EMU) {
        return PS_ERR_INVALID_ARG;
    }
    e = event->impl;
    if (e->stream != NULL) {
        emu_stream_unref(e->stream);
    }
    free(e);
    free(event);
    return PS_OK;
}

/* ---- IPC ---- */

static ps_status_t emu_addr_range(const void *ptr, void **base_p, size_t *len_p)
{
    emu_alloc_t a;

    if (ptr == NULL || base_p == NULL || len_p == NULL || emu_find(ptr, 1, &a) != PS_OK) {
        return PS_ERR_INVALID_ARG;
    }
    *base_p = (void *)a.user;
    *len_p = a.len;
    return PS_OK;
}

static ps_status_t emu_ipc_get_handle(void *ptr, ps_mem_ipc_handle_t *handle_p)
{
    emu_alloc_t a;
    emu_handle_t h;

    if (ptr == NULL || handle_p == NULL || emu_find(ptr, 1, &a) != PS_OK || a.imported) {
        return PS_ERR_INVALID_ARG;
    }
    memset(&h, 0, sizeof(h));
    h.magic = EMU_HANDLE_MAGIC;
    h.pid = (int32_t)getpid();
    h.fd = a.fd;
    h.device = a.device;
    h.id = a.id;
    h.map_len = a.map_len;
    h.len = a.len;
    memset(handle_p, 0, sizeof(*handle_p));
    memcpy(handle_p->bytes, &h, sizeof(h));
    return PS_OK;
}

/* Opens the exporter's memory file through /proc, after checking by its
 * name that the descriptor still holds the allocation the handle names
 * (descriptor numbers are reused once an allocation is freed). */
static ps_status_t emu_ipc_open_handle(const ps_mem_ipc_handle_t *handle, int device,
                                       void **ptr_p)
{
    emu_handle_t h;
    emu_alloc_t a;
    char path[64];
    char link[PATH_MAX];
    char name[EMU_NAME_MAX];
    char want[EMU_NAME_MAX + 16];
    struct stat st_buf;
    ssize_t n;
    ps_status_t st;

    if (handle == NULL || ptr_p == NULL || device < 0 || device >= PS_MEM_EMU_DEVICES) {
        return PS_ERR_INVALID_ARG;
    }
    memcpy(&h, handle->bytes, sizeof(h));
    if (h.magic != EMU_HANDLE_MAGIC || h.len == 0 || h.len > h.map_len ||
        h.device < 0 || h.device >= PS_MEM_EMU_DEVICES) {
        ps_error(PS_LOG_GPU, "emu: not an ipc handle of this kind");
        return PS_ERR_INVALID_ARG;
    }
    if (h.pid == (int32_t)getpid()) {
        ps_error(PS_LOG_GPU, "emu: an ipc handle cannot be opened in the process that made it");
        return PS_ERR_INVALID_ARG;
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    n = readlink(path, link, sizeof(link) - 1);
    if (n < 0) {
        ps_error(PS_LOG_GPU, "emu: ipc handle of process %d: %s: %m", (int)h.pid, path);
        return errno == ENOENT ? PS_ERR_NOT_FOUND : PS_ERR_IO;
    }
    link[n] = '\0';
    emu_file_name(h.id, name, sizeof(name));
    snprintf(want, sizeof(want), "/memfd:%s ", name);
    if (strncmp(link, want, strlen(want)) != 0) {
        ps_error(PS_LOG_GPU, "emu: ipc handle of process %d names a freed allocation",
                 (int)h.pid);
        return PS_ERR_NOT_FOUND;
    }
    memset(&a, 0, sizeof(a));
    a.fd = open(path, O_RDWR | O_CLOEXEC);
    if (a.fd < 0) {
        ps_error(PS_LOG_GPU, "emu: opening %s failed: %m", path);
        return errno == ENOENT ? PS_ERR_NOT_FOUND : PS_ERR_IO;
    }
    if (fstat(a.fd, &st_buf) != 0 || (uint64_t)st_buf.st_size != h.map_len) {
        ps_error(PS_LOG_GPU, "emu: the memory file behind an ipc handle has the wrong size");
        close(a.fd);
        return PS_ERR_INVALID_ARG;
    }
    a.len = h.len;
    a.map_len = h.map_len;
    a.device = h.device;
    a.imported = true;
    a.id = h.id;
    if ((st = emu_map(&a)) != PS_OK) {
        close(a.fd);
        return st;
    }
    if ((st = emu_add(&a)) != PS_OK) {
        emu_unmap(&a);
        return st;
    }
    *ptr_p = (void *)a.user;
    return PS_OK;
}

static ps_status_t emu_ipc_close(void *ptr)
{
    emu_alloc_t a;

    if (ptr == NULL || emu_remove(ptr, true, true, &a) != PS_OK) {
        return PS_ERR_INVALID_ARG;
    }
    emu_unmap(&a);
    return PS_OK;
}

/* ---- the rest ---- */

static ps_status_t emu_init(void)
{
    return PS_OK;
}

static void emu_cleanup(void)
{
}

static ps_status_t emu_describe(ps_mem_info_t *info_p)
{
    if (info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(info_p, 0, sizeof(*info_p));
    info_p->kind = PS_MEM_EMU;
    info_p->name = "emu";
    info_p->linked = true;
    info_p->available = true;
    info_p->device_count = PS_MEM_EMU_DEVICES;
    return PS_OK;
}

static ps_status_t emu_device_count(int *count_p)
{
    if (count_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    *count_p = PS_MEM_EMU_DEVICES;
    return PS_OK;
}

/* Staging buffers are plain host memory to this kind. */
static ps_status_t emu_register_host(void *ptr, size_t len)
{
    return ptr != NULL && len != 0 ? PS_OK : PS_ERR_INVALID_ARG;
}

static ps_status_t emu_unregister_host(void *ptr)
{
    return ptr != NULL ? PS_OK : PS_ERR_INVALID_ARG;
}

static const ps_mem_ops_t emu_ops = {
    .size = sizeof(ps_mem_ops_t),
    .name = "emu",
    .init = emu_init,
    .cleanup = emu_cleanup,
    .describe = emu_describe,
    .device_count = emu_device_count,
    .alloc = emu_alloc,
    .free = emu_free,
    .copy_to_host = emu_copy,
    .copy_from_host = emu_copy,
    .copy = emu_copy,
    .memset = emu_memset,
    .is_addr = emu_is_addr,
    .register_host = emu_register_host,
    .unregister_host = emu_unregister_host,
    .ipc_get_handle = emu_ipc_get_handle,
    .ipc_open_handle = emu_ipc_open_handle,
    .ipc_close = emu_ipc_close,
    .event_create = emu_event_create,
    .event_record = emu_event_record,
    .event_query = emu_event_query,
    .event_destroy = emu_event_destroy,
    .stream_create = emu_stream_create,
    .stream_destroy = emu_stream_destroy,
    .copy_async = emu_copy_async,
    .memset_async = emu_memset_async,
    .launch_host_func = emu_launch_host_func,
    .addr_range = emu_addr_range,
    /* No NIC can reach emulated pages. */
    .dmabuf_fd = ps__mem_unsup_dmabuf_fd,
    .in_use = ps__mem_unsup_in_use,
};

int ps_mem_emu_open_handles(void)
{
    int n = 0;
    pthread_rwlock_rdlock(&emu_allocs_lock);
    for (size_t i = 0; i < emu_nallocs; ++i) {
        n += emu_allocs[i].imported;
    }
    pthread_rwlock_unlock(&emu_allocs_lock);
    return n;
}

void ps_mem_emu_set_delay_us(unsigned delay_us)
{
    atomic_store(&emu_delay_us, delay_us);
}

/* A forked child has none of the parent's stream threads: it starts its
 * default streams afresh (the parent's stay behind, unused), and no thread
 * holds the locks it inherited. */
static void emu_after_fork_child(void)
{
    pthread_mutex_init(&emu_default_lock, NULL);
    pthread_rwlock_init(&emu_allocs_lock, NULL);
    memset(emu_default_streams, 0, sizeof(emu_default_streams));
}

static pthread_once_t emu_fork_once = PTHREAD_ONCE_INIT;

static void emu_install_fork_handler(void)
{
    (void)pthread_atfork(NULL, NULL, emu_after_fork_child);
}

ps_status_t ps_mem_emu_register(void)
{
    pthread_once(&emu_fork_once, emu_install_fork_handler);
    return ps__mem_register(PS_MEM_EMU, &emu_ops);
}

__attribute__((constructor)) static void emu_register_at_load(void)
{
    (void)ps_mem_emu_register();
}

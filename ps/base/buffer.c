#include "ps/base/buffer.h"
#include "ps/base/buffer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"

_Static_assert((int)PS_BUF_MEM_SHM >= (int)PS_MEM_KIND_COUNT, "PS_BUF_MEM_SHM must not be a memory kind");

/* Header and data share one allocation (ps_buf_alloc): free the header's
 * block only. */
#define PS_BUF_F_INLINE 0x1u
/* The header is the caller's (ps_buf_init_wrapped): never freed here. */
#define PS_BUF_F_CALLER_HEADER 0x2u

static int ps_buf_is_pow2(size_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

ps_status_t ps_buf_alloc(size_t len, size_t align, ps_buf_t **buf_p)
{
    void *block;

    if (buf_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (align == 0) {
        align = PS_BUF_DEFAULT_ALIGN;
    }
    if (!ps_buf_is_pow2(align) || align > PS_BUF_MAX_ALIGN) {
        return PS_ERR_INVALID_ARG;
    }
    if (align < sizeof(void *)) {
        align = sizeof(void *); /* posix_memalign's minimum */
    }
    /* The header sits in front of the data, padded to the data's alignment. */
    size_t hdr = (sizeof(ps_buf_t) + align - 1) & ~(align - 1);
    if (len > SIZE_MAX - hdr) {
        return PS_ERR_TOO_LARGE;
    }
    int err = posix_memalign(&block, align, hdr + len);
    if (err != 0) {
        return PS_ERR_NO_MEMORY;
    }
    ps_buf_t *buf = (ps_buf_t *)block;
    memset(buf, 0, sizeof(*buf));
    buf->data = (char *)block + hdr;
    buf->length = len;
    buf->refcount = 1;
    buf->mem_kind = PS_BUF_MEM_HOST;
    buf->flags = PS_BUF_F_INLINE;
    *buf_p = buf;
    return PS_OK;
}

ps_status_t ps_buf_wrap_mem(void *data, size_t len, ps_buf_mem_t kind, int device,
                            ps_buf_release_func_t release, void *arg, ps_buf_t **buf_p)
{
    if (buf_p == NULL || (data == NULL && len != 0)) {
        return PS_ERR_INVALID_ARG;
    }
    ps_buf_t *buf = calloc(1, sizeof(*buf));
    if (buf == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    buf->data = data;
    buf->length = len;
    buf->refcount = 1;
    buf->mem_kind = (uint16_t)kind;
    buf->device = device;
    buf->release = release;
    buf->release_arg = arg;
    *buf_p = buf;
    return PS_OK;
}

void ps_buf_init_wrapped(ps_buf_t *buf, void *data, size_t len, ps_buf_release_func_t release,
                         void *arg)
{
    memset(buf, 0, sizeof(*buf));
    buf->data = data;
    buf->length = len;
    buf->refcount = 1;
    buf->mem_kind = PS_BUF_MEM_HOST;
    buf->flags = PS_BUF_F_CALLER_HEADER;
    buf->release = release;
    buf->release_arg = arg;
}

ps_status_t ps_buf_wrap(void *data, size_t len, ps_buf_release_func_t release, void *arg,
                        ps_buf_t **buf_p)
{
    return ps_buf_wrap_mem(data, len, PS_BUF_MEM_HOST, 0, release, arg, buf_p);
}

ps_status_t ps_buf_proxy(const ps_buf_t *real, ps_buf_release_func_t release, void *arg,
                         ps_buf_t **proxy_p)
{
    if (real == NULL || release == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_buf_t *proxy;
    ps_status_t st = ps_buf_wrap_mem(real->data, real->length, (ps_buf_mem_t)real->mem_kind,
                                     real->device, release, arg, &proxy);
    if (st != PS_OK) {
        return st;
    }
    /* Undoing the registrations stays the real buffer's. */
    for (unsigned i = 0; i < PS_BUF_REG_SLOTS; i++) {
        void *reg = ps_buf_reg_get(real, i);
        if (reg != NULL) {
            (void)ps_buf_reg_attach(proxy, i, reg, NULL);
        }
    }
    *proxy_p = proxy;
    return PS_OK;
}

void ps_buf_set_fill_hook(ps_buf_t *buf, ps_buf_fill_func_t fn, void *arg)
{
    buf->fill_arg = arg;
    buf->fill = fn;
}

void ps_slice_filled(const ps_slice_t *slice, size_t len)
{
    ps_buf_t *buf = slice->buf;
    if (buf == NULL || buf->fill == NULL || len > slice->len) {
        return;
    }
    buf->fill(buf->fill_arg, slice->off + len);
}

int ps_slice_fill_watched(const ps_slice_t *slice)
{
    return slice->buf != NULL && slice->buf->fill != NULL;
}

void ps_buf_set_written_hook(ps_buf_t *buf, ps_buf_written_func_t fn, void *arg)
{
    buf->written_arg = arg;
    buf->written = fn;
}

int ps_slice_being_written(const ps_slice_t *slice)
{
    return slice->buf != NULL && slice->buf->written != NULL && slice->len != 0;
}

ps_status_t ps_slice_written(const ps_slice_t *slice, int wait, size_t have, size_t *written_p)
{
    if (!ps_slice_being_written(slice)) {
        *written_p = slice->len;
        return PS_OK;
    }
    size_t end;
    ps_buf_t *buf = slice->buf;
    ps_status_t st = buf->written(buf->written_arg, wait, slice->off + have, &end);
    if (st != PS_OK) {
        return st;
    }
    size_t n = end > slice->off ? end - slice->off : 0;
    *written_p = n < slice->len ? n : slice->len;
    return PS_OK;
}

ps_buf_t *ps_buf_ref(ps_buf_t *buf)
{
    /* Relaxed is enough: the caller already holds a reference, so the buffer
     * cannot go away concurrently. */
    __atomic_add_fetch(&buf->refcount, 1, __ATOMIC_RELAXED);
    return buf;
}

static void ps_buf_destroy(ps_buf_t *buf)
{
    for (unsigned s = 0; s < PS_BUF_REG_SLOTS; ++s) {
        void *reg = __atomic_load_n(&buf->reg[s], __ATOMIC_ACQUIRE);
        ps_buf_reg_release_func_t fn = __atomic_load_n(&buf->reg_release[s], __ATOMIC_ACQUIRE);
        if (reg != NULL && fn != NULL) {
            fn(buf, s, reg);
        }
    }
    if (buf->flags & PS_BUF_F_INLINE) {
        free(buf);
        return;
    }
    if (buf->flags & PS_BUF_F_CALLER_HEADER) {
        /* release may free the header's storage: the last use of buf. */
        buf->release(buf->data, buf->length, buf->release_arg);
        return;
    }
    if (buf->release != NULL) {
        buf->release(buf->data, buf->length, buf->release_arg);
    }
    free(buf);
}

void ps_buf_unref(ps_buf_t *buf)
{
    if (buf == NULL) {
        return;
    }
    /* Release our writes to the buffer; the last owner acquires everyone's
     * before it frees. */
    uint32_t old = __atomic_fetch_sub(&buf->refcount, 1, __ATOMIC_ACQ_REL);
    if (old == 1) {
        ps_buf_destroy(buf);
    } else if (ps_unlikely(old == 0)) {
        /* Only a bug gets here (an unref without a ref): never free twice. */
        ps_error(PS_LOG_BASE, "buffer %p unreferenced more often than referenced", (void *)buf);
    }
}

uint32_t ps_buf_refcount(const ps_buf_t *buf)
{
    return __atomic_load_n(&buf->refcount, __ATOMIC_ACQUIRE);
}

void *ps_buf_data(const ps_buf_t *buf)
{
    return buf->data;
}

size_t ps_buf_length(const ps_buf_t *buf)
{
    return buf->length;
}

ps_buf_mem_t ps_buf_mem_kind(const ps_buf_t *buf)
{
    return (ps_buf_mem_t)buf->mem_kind;
}

int ps_buf_device(const ps_buf_t *buf)
{
    return buf->device;
}

int ps_buf_released_by(const ps_buf_t *buf, ps_buf_release_func_t release)
{
    return buf->release == release;
}

ps_status_t ps_buf_reg_attach(ps_buf_t *buf, unsigned slot, void *reg,
                              ps_buf_reg_release_func_t release)
{
    void *expected = NULL;

    if (buf == NULL || slot >= PS_BUF_REG_SLOTS || reg == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (!__atomic_compare_exchange_n(&buf->reg[slot], &expected, reg, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        return PS_ERR_EXISTS;
    }
    /* Only the destructor reads the release function, and it runs after the
     * attacher dropped its reference, which orders this store before it. */
    __atomic_store_n(&buf->reg_release[slot], release, __ATOMIC_RELEASE);
    return PS_OK;
}

void *ps_buf_reg_get(const ps_buf_t *buf, unsigned slot)
{
    if (buf == NULL || slot >= PS_BUF_REG_SLOTS) {
        return NULL;
    }
    return __atomic_load_n(&buf->reg[slot], __ATOMIC_ACQUIRE);
}

ps_status_t ps_buf_reg_detach(ps_buf_t *buf, unsigned slot, void **reg_p)
{
    if (buf == NULL || slot >= PS_BUF_REG_SLOTS) {
        return PS_ERR_INVALID_ARG;
    }
    void *reg = __atomic_exchange_n(&buf->reg[slot], NULL, __ATOMIC_ACQ_REL);
    if (reg == NULL) {
        return PS_ERR_NOT_FOUND;
    }
    __atomic_store_n(&buf->reg_release[slot], NULL, __ATOMIC_RELEASE);
    if (reg_p != NULL) {
        *reg_p = reg;
    }
    return PS_OK;
}

/* ---- slices ---- */

static int ps_range_ok(size_t total, size_t off, size_t len)
{
    return off <= total && len <= total - off;
}

ps_status_t ps_slice_of(ps_buf_t *buf, size_t off, size_t len, ps_slice_t *slice_p)
{
    if (buf == NULL || slice_p == NULL || !ps_range_ok(buf->length, off, len)) {
        return PS_ERR_INVALID_ARG;
    }
    slice_p->buf = ps_buf_ref(buf);
    slice_p->off = off;
    slice_p->len = len;
    return PS_OK;
}

ps_status_t ps_slice_sub(const ps_slice_t *slice, size_t off, size_t len, ps_slice_t *sub_p)
{
    if (slice == NULL || sub_p == NULL || !ps_range_ok(slice->len, off, len)) {
        return PS_ERR_INVALID_ARG;
    }
    if (slice->buf == NULL) {
        ps_slice_t empty = PS_SLICE_EMPTY_INIT;
        *sub_p = empty; /* only (0, 0) of the empty slice gets here */
        return PS_OK;
    }
    sub_p->buf = ps_buf_ref(slice->buf);
    sub_p->off = slice->off + off;
    sub_p->len = len;
    return PS_OK;
}

ps_status_t ps_slice_narrow(ps_slice_t *slice, size_t off, size_t len)
{
    if (slice == NULL || !ps_range_ok(slice->len, off, len)) {
        return PS_ERR_INVALID_ARG;
    }
    slice->off += off;
    slice->len = len;
    return PS_OK;
}

ps_status_t ps_slice_alloc(size_t len, size_t align, ps_slice_t *slice_p)
{
    ps_buf_t *buf;

    if (slice_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_buf_alloc(len, align, &buf);
    if (st != PS_OK) {
        return st;
    }
    slice_p->buf = buf; /* the allocation's reference moves into the slice */
    slice_p->off = 0;
    slice_p->len = len;
    return PS_OK;
}

ps_status_t ps_slice_wrap(void *data, size_t len, ps_buf_release_func_t release, void *arg,
                          ps_slice_t *slice_p)
{
    ps_buf_t *buf;

    if (slice_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_buf_wrap(data, len, release, arg, &buf);
    if (st != PS_OK) {
        return st;
    }
    slice_p->buf = buf;
    slice_p->off = 0;
    slice_p->len = len;
    return PS_OK;
}

ps_slice_t ps_slice_ref(const ps_slice_t *slice)
{
    ps_slice_t copy = *slice;
    if (copy.buf != NULL) {
        ps_buf_ref(copy.buf);
    }
    return copy;
}

void ps_slice_unref(ps_slice_t *slice)
{
    if (slice == NULL) {
        return;
    }
    ps_buf_unref(slice->buf);
    slice->buf = NULL;
    slice->off = 0;
    slice->len = 0;
}

void *ps_slice_ptr(const ps_slice_t *slice)
{
    return slice->buf != NULL ? (char *)slice->buf->data + slice->off : NULL;
}

ps_buf_mem_t ps_slice_mem_kind(const ps_slice_t *slice)
{
    return slice->buf != NULL ? (ps_buf_mem_t)slice->buf->mem_kind : PS_BUF_MEM_HOST;
}

int ps_slice_device(const ps_slice_t *slice)
{
    return slice->buf != NULL ? slice->buf->device : 0;
}

static ps_status_t ps_slice_host_range(const ps_slice_t *slice, size_t off, size_t len,
                                       char **ptr_p)
{
    if (slice == NULL || !ps_range_ok(slice->len, off, len)) {
        return PS_ERR_INVALID_ARG;
    }
    if (len == 0) {
        *ptr_p = NULL;
        return PS_OK;
    }
    ps_buf_mem_t kind = ps_slice_mem_kind(slice);
    if (kind != PS_BUF_MEM_HOST && kind != PS_BUF_MEM_SHM) {
        return PS_ERR_UNSUPPORTED;
    }
    *ptr_p = (char *)ps_slice_ptr(slice) + off;
    return PS_OK;
}

ps_status_t ps_slice_copy_out(const ps_slice_t *slice, size_t off, void *dst, size_t len)
{
    char *p;

    if (dst == NULL && len != 0) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_slice_host_range(slice, off, len, &p);
    if (st == PS_OK && len != 0) {
        memcpy(dst, p, len);
    }
    return st;
}

ps_status_t ps_slice_copy_in(const ps_slice_t *slice, size_t off, const void *src, size_t len)
{
    char *p;

    if (src == NULL && len != 0) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_slice_host_range(slice, off, len, &p);
    if (st == PS_OK && len != 0) {
        memcpy(p, src, len);
    }
    return st;
}

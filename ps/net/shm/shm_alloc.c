/*
 * Shared segments and ps_shm_buf_alloc(): one anonymous shared segment
 * (memfd) per buffer.
 *
 * Why one segment each: a peer maps a segment once and keeps the mapping
 * while their channel lives, so a segment shared by many buffers would pin
 * all of them in the peer; values big enough to be worth sharing are big
 * enough for their own segment. The memfd stays open while the segment
 * lives so that the van can pass it to a peer the first time it sends from
 * it.
 */
#include "ps/net/shm_alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps/base/buffer_internal.h"
#include "ps/base/log.h"
#include "ps/base/shared_block.h"
#include "ps/net/shm/shm_job.h"
#include "ps/net/shm/shm_seg.h"

static uint64_t g_next_seg_id = 1;

ps_status_t ps__shm_memfd_new(const char *label, size_t size, int *fd_p)
{
    int fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        ps_error(PS_LOG_SHM, "%s (%zu bytes): memfd_create: %m", label, size);
        return PS_ERR_NO_RESOURCE;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        ps_error(PS_LOG_SHM, "%s (%zu bytes): ftruncate: %m", label, size);
        close(fd);
        return PS_ERR_NO_MEMORY;
    }
    if (fcntl(fd, F_ADD_SEALS, PS__SHM_SEALS) != 0) {
        ps_error(PS_LOG_SHM, "%s (%zu bytes): sealing its size: %m", label, size);
        close(fd);
        return PS_ERR_NO_RESOURCE;
    }
    *fd_p = fd;
    return PS_OK;
}

ps_status_t ps__shm_memfd_check(int fd, uint64_t size, const char **why_p)
{
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
        *why_p = "not a memfd that can be sealed";
        return PS_ERR_PROTOCOL;
    }
    if ((seals & PS__SHM_SEALS) != PS__SHM_SEALS) {
        *why_p = "a memfd not sealed against resizing (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL)";
        return PS_ERR_PROTOCOL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size < size) {
        *why_p = "a memfd shorter than it says";
        return PS_ERR_PROTOCOL;
    }
    return PS_OK;
}

ps_status_t ps__shm_seg_create(size_t size, const char *what, ps__shm_seg_t **seg_p)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (size == 0 || size > SIZE_MAX - pg) {
        return PS_ERR_INVALID_ARG;
    }
    size = (size + pg - 1) / pg * pg;
    ps__shm_seg_t *seg = calloc(1, sizeof(*seg));
    if (seg == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    char job[PS__SHM_JOB_MAX + 1];
    ps__shm_job_id(job, sizeof(job));
    char label[96];
    snprintf(label, sizeof(label), "ps-shm:%s:%s", job, what);
    ps_status_t st = ps__shm_memfd_new(label, size, &seg->fd);
    if (st != PS_OK) {
        free(seg);
        return st;
    }
    seg->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    if (seg->base == MAP_FAILED) {
        ps_error(PS_LOG_SHM, "shared segment of %zu bytes: mmap: %m", size);
        close(seg->fd);
        free(seg);
        return PS_ERR_NO_MEMORY;
    }
    seg->size = size;
    seg->id = __atomic_fetch_add(&g_next_seg_id, 1, __ATOMIC_RELAXED);
    *seg_p = seg;
    return PS_OK;
}

void ps__shm_seg_destroy(ps__shm_seg_t *seg)
{
    if (seg == NULL) {
        return;
    }
    munmap(seg->base, seg->size);
    close(seg->fd);
    free(seg);
}

typedef struct {
    ps__shm_seg_t *seg;
    ps__shm_seg_release_func_t release;
    void *arg;
} wrap_t;

static void wrap_release(void *data, size_t len, void *arg)
{
    wrap_t *w = arg;
    (void)data;
    (void)len;
    w->release(w->seg, w->arg);
    free(w);
}

ps_status_t ps__shm_seg_wrap(ps__shm_seg_t *seg, size_t len, ps__shm_seg_release_func_t release,
                             void *arg, ps_buf_t **buf_p)
{
    if (seg == NULL || len > seg->size || release == NULL || buf_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    wrap_t *w = malloc(sizeof(*w));
    if (w == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    w->seg = seg;
    w->release = release;
    w->arg = arg;
    ps_status_t st = ps_buf_wrap_mem(seg->base, len, PS_BUF_MEM_SHM, 0, wrap_release, w, buf_p);
    if (st != PS_OK) {
        free(w);
    }
    return st;
}

const ps__shm_seg_t *ps__shm_seg_of(const ps_buf_t *buf)
{
    if (buf == NULL || !ps_buf_released_by(buf, wrap_release) || buf->mem_kind != PS_BUF_MEM_SHM) {
        return NULL;
    }
    return ((const wrap_t *)buf->release_arg)->seg;
}

/* ---- shared blocks for the layers above (ps/base/shared_block.h) ---- */

/* The block is the segment itself; a wrap's release goes through this. */
typedef struct {
    ps_shared_block_release_func_t fn;
    void *arg;
} block_release_t;

static void block_released(ps__shm_seg_t *seg, void *arg)
{
    (void)seg;
    block_release_t r = *(block_release_t *)arg;
    free(arg);
    r.fn(r.arg);
}

static ps_status_t block_create(size_t len, ps_shared_block_t **block_p, void **data_p)
{
    ps__shm_seg_t *seg;
    ps_status_t st = ps__shm_seg_create(len, "stage", &seg);
    if (st != PS_OK) {
        return st;
    }
    *block_p = (ps_shared_block_t *)seg;
    *data_p = seg->base;
    return PS_OK;
}

static ps_status_t block_wrap(ps_shared_block_t *block, size_t len,
                              ps_shared_block_release_func_t release, void *arg, ps_buf_t **buf_p)
{
    if (release == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    block_release_t *r = malloc(sizeof(*r));
    if (r == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    r->fn = release;
    r->arg = arg;
    ps_status_t st = ps__shm_seg_wrap((ps__shm_seg_t *)block, len, block_released, r, buf_p);
    if (st != PS_OK) {
        free(r);
    }
    return st;
}

static void block_destroy(ps_shared_block_t *block)
{
    ps__shm_seg_destroy((ps__shm_seg_t *)block);
}

static const ps_shared_block_ops_t shm_blocks = {
    .size = sizeof(ps_shared_block_ops_t),
    .create = block_create,
    .wrap = block_wrap,
    .destroy = block_destroy,
};

void ps__shm_provide_blocks(void)
{
    ps_shared_block_provide(&shm_blocks);
}

/* ---- the public allocator and its registry ---- */

/* Live segments of ps_shm_buf_alloc(), sorted by address. */
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static ps__shm_seg_t **g_reg;
static size_t g_reg_n, g_reg_cap;

/* Index of the first segment whose base is above addr (lock held). */
static size_t reg_upper(uint64_t addr)
{
    size_t lo = 0, hi = g_reg_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)(uintptr_t)g_reg[mid]->base <= addr) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static ps_status_t reg_add(ps__shm_seg_t *seg)
{
    pthread_mutex_lock(&g_reg_lock);
    if (g_reg_n == g_reg_cap) {
        size_t cap = g_reg_cap ? g_reg_cap * 2 : 64;
        ps__shm_seg_t **r = realloc(g_reg, cap * sizeof(*r));
        if (r == NULL) {
            pthread_mutex_unlock(&g_reg_lock);
            return PS_ERR_NO_MEMORY;
        }
        g_reg = r;
        g_reg_cap = cap;
    }
    size_t i = reg_upper((uint64_t)(uintptr_t)seg->base);
    memmove(&g_reg[i + 1], &g_reg[i], (g_reg_n - i) * sizeof(*g_reg));
    g_reg[i] = seg;
    g_reg_n++;
    pthread_mutex_unlock(&g_reg_lock);
    return PS_OK;
}

static void reg_remove(ps__shm_seg_t *seg)
{
    pthread_mutex_lock(&g_reg_lock);
    size_t i = reg_upper((uint64_t)(uintptr_t)seg->base);
    if (i > 0 && g_reg[i - 1] == seg) {
        memmove(&g_reg[i - 1], &g_reg[i], (g_reg_n - i) * sizeof(*g_reg));
        g_reg_n--;
    }
    if (g_reg_n == 0) {
        free(g_reg);
        g_reg = NULL;
        g_reg_cap = 0;
    }
    pthread_mutex_unlock(&g_reg_lock);
}

ps_status_t ps__shm_seg_with_addr(uint64_t addr, uint64_t len,
                                  ps_status_t (*fn)(const ps__shm_seg_t *seg, uint64_t off,
                                                    void *arg),
                                  void *arg)
{
    ps_status_t st = PS_ERR_NOT_FOUND;
    pthread_mutex_lock(&g_reg_lock);
    size_t i = reg_upper(addr);
    if (i > 0) {
        const ps__shm_seg_t *seg = g_reg[i - 1];
        uint64_t off = addr - (uint64_t)(uintptr_t)seg->base;
        if (off <= seg->size && len <= seg->size - off) {
            st = fn(seg, off, arg);
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
    return st;
}

ps_status_t ps__shm_seg_copy_out(uint64_t id, uint64_t off, void *dst, uint64_t len)
{
    ps_status_t st = PS_ERR_NOT_FOUND;
    pthread_mutex_lock(&g_reg_lock);
    for (size_t i = 0; i < g_reg_n; ++i) {
        const ps__shm_seg_t *seg = g_reg[i];
        if (seg->id == id) {
            if (off <= seg->size && len <= seg->size - off) {
                memcpy(dst, (const uint8_t *)seg->base + off, (size_t)len);
                st = PS_OK;
            }
            break;
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
    return st;
}

static void destroy_cb(ps__shm_seg_t *seg, void *arg)
{
    (void)arg;
    reg_remove(seg);
    ps__shm_seg_destroy(seg);
}

ps_status_t ps_shm_buf_alloc(size_t len, ps_buf_t **buf_p)
{
    if (len == 0 || buf_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps__shm_seg_t *seg;
    ps_status_t st = ps__shm_seg_create(len, "buf", &seg);
    if (st != PS_OK) {
        return st;
    }
    if ((st = reg_add(seg)) != PS_OK) {
        ps__shm_seg_destroy(seg);
        return st;
    }
    st = ps__shm_seg_wrap(seg, len, destroy_cb, NULL, buf_p);
    if (st != PS_OK) {
        destroy_cb(seg, NULL);
    }
    return st;
}

ps_status_t ps_shm_slice_alloc(size_t len, ps_slice_t *slice_p)
{
    if (slice_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_buf_t *buf;
    ps_status_t st = ps_shm_buf_alloc(len, &buf);
    if (st != PS_OK) {
        return st;
    }
    slice_p->buf = buf;
    slice_p->off = 0;
    slice_p->len = len;
    return PS_OK;
}

int ps_shm_buf_is_shared(const ps_buf_t *buf)
{
    return ps__shm_seg_of(buf) != NULL;
}

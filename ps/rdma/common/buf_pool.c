/*
 * The registered buffer pool (see buf_pool.h). A block is page-aligned
 * memory of 2^k bytes with its registration; each get wraps it in a fresh
 * ps_buf_t whose release callback brings the block back. The pool is
 * ref-counted by its owner and by every block, so a block let go after
 * destroy still finds the pool (marked dead) and is simply freed.
 */
#include "ps/rdma/common/buf_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/buffer_internal.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"
#include "ps/rdma/common/rdma_shared.h"

#define NUM_CLASSES 48

typedef struct block {
    struct block *next_idle;
    struct block *prev, *next; /* every block of the pool */
    ps_rdma_buf_pool_t *pool;
    void *mem;
    size_t size;
    int cls;                   /* size class; -1: oversize, never kept */
    void *handle;              /* registration; NULL without ops or after destroy */
    ps_buf_t hdr;              /* the buffer handed out (ps_buf_init_wrapped) */
} block_t;

struct ps_rdma_buf_pool {
    ps_mutex_t lock;
    uint32_t refs; /* atomic: owner + one per block */
    int dead;
    int has_ops;
    ps_rdma_reg_ops_t ops;
    void *ctx;
    block_t *idle[NUM_CLASSES];
    block_t *all;
    uint64_t idle_bytes;
    uint64_t max_idle;
    size_t max_block;
    ps_rdma_buf_pool_stats_t stats;
    char name[32];
};

static void pool_unref(ps_rdma_buf_pool_t *p)
{
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        ps_mutex_destroy(&p->lock);
        free(p);
    }
}

ps_status_t ps_rdma_buf_pool_create(const char *name, const ps_rdma_reg_ops_t *ops, void *ctx,
                                    uint64_t max_idle_bytes, size_t max_block,
                                    ps_rdma_buf_pool_t **pool_p)
{
    if (pool_p == NULL || (ops != NULL && (ops->size < sizeof(*ops) || ops->reg == NULL ||
                                           ops->dereg == NULL)))
        return PS_ERR_INVALID_ARG;
    ps_rdma_buf_pool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return PS_ERR_NO_MEMORY;
    if (ps_mutex_init(&p->lock) != PS_OK) {
        free(p);
        return PS_ERR_NO_MEMORY;
    }
    p->refs = 1;
    if (ops != NULL) {
        p->has_ops = 1;
        p->ops = *ops;
    }
    p->ctx = ctx;
    p->max_idle = max_idle_bytes ? max_idle_bytes : (256ull << 20);
    p->max_block = max_block ? max_block : (64u << 20);
    snprintf(p->name, sizeof(p->name), "%s", name ? name : "rdma");
    *pool_p = p;
    return PS_OK;
}

static void all_unlink(ps_rdma_buf_pool_t *p, block_t *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        p->all = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->prev = b->next = NULL;
    p->stats.blocks--;
}

/* Frees a block already off every list (no lock needed). */
static void block_free(ps_rdma_buf_pool_t *p, block_t *b)
{
    if (b->handle != NULL)
        p->ops.dereg(p->ctx, b->handle);
    free(b->mem);
    free(b);
}

void ps_rdma_buf_pool_destroy(ps_rdma_buf_pool_t *p)
{
    if (p == NULL)
        return;
    block_t *idle = NULL;
    ps_mutex_lock(&p->lock);
    p->dead = 1;
    for (int c = 0; c < NUM_CLASSES; c++) {
        while (p->idle[c] != NULL) {
            block_t *b = p->idle[c];
            p->idle[c] = b->next_idle;
            all_unlink(p, b);
            b->next_idle = idle;
            idle = b;
        }
    }
    p->idle_bytes = 0;
    /* Blocks still held: their registrations go now, the memory later. */
    for (block_t *b = p->all; b != NULL; b = b->next) {
        if (b->handle != NULL) {
            p->ops.dereg(p->ctx, b->handle);
            b->handle = NULL;
        }
    }
    ps_mutex_unlock(&p->lock);
    while (idle != NULL) {
        block_t *next = idle->next_idle;
        block_free(p, idle);
        pool_unref(p);
        idle = next;
    }
    pool_unref(p);
}

static void block_release(void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    block_t *b = arg;
    ps_rdma_buf_pool_t *p = b->pool;
    ps_mutex_lock(&p->lock);
    if (!p->dead && b->cls >= 0 && p->idle_bytes + b->size <= p->max_idle) {
        b->next_idle = p->idle[b->cls];
        p->idle[b->cls] = b;
        p->idle_bytes += b->size;
        ps_mutex_unlock(&p->lock);
        return;
    }
    all_unlink(p, b);
    ps_mutex_unlock(&p->lock);
    block_free(p, b);
    pool_unref(p);
}

static int size_class(size_t len, size_t *size_p)
{
    size_t size = PS_RDMA_BUF_POOL_MIN_BLOCK;
    int cls = 12;
    while (size < len && cls < NUM_CLASSES - 1) {
        size <<= 1;
        cls++;
    }
    *size_p = size;
    return cls;
}

ps_status_t ps_rdma_buf_pool_get(ps_rdma_buf_pool_t *p, size_t len, ps_slice_t *slice_p)
{
    if (p == NULL || len == 0 || slice_p == NULL)
        return PS_ERR_INVALID_ARG;
    size_t size;
    int cls = size_class(len, &size);
    if (size > p->max_block || size < len) {
        cls = -1; /* oversize: exactly the pages needed, never kept */
        size = (len + PS_RDMA_BUF_POOL_MIN_BLOCK - 1) & ~(size_t)(PS_RDMA_BUF_POOL_MIN_BLOCK - 1);
    }
    block_t *b = NULL;
    ps_mutex_lock(&p->lock);
    p->stats.gets++;
    if (cls >= 0 && p->idle[cls] != NULL) {
        b = p->idle[cls];
        p->idle[cls] = b->next_idle;
        p->idle_bytes -= b->size;
        p->stats.reuses++;
    }
    ps_mutex_unlock(&p->lock);

    if (b == NULL) {
        b = calloc(1, sizeof(*b));
        if (b == NULL)
            return PS_ERR_NO_MEMORY;
        if (posix_memalign(&b->mem, PS_RDMA_BUF_POOL_MIN_BLOCK, size) != 0) {
            free(b);
            ps_error(PS_LOG_RDMA, "%s buffer pool: cannot allocate %zu bytes", p->name, size);
            return PS_ERR_NO_MEMORY;
        }
        b->size = size;
        b->cls = cls;
        b->pool = p;
        if (p->has_ops) {
            ps_status_t st = p->ops.reg(p->ctx, b->mem, size, PS_BUF_MEM_HOST, 0, &b->handle);
            if (st != PS_OK) {
                ps_error(PS_LOG_RDMA, "%s buffer pool: cannot register a %zu-byte block: %s "
                         "(registered memory is capped by `ulimit -l`)", p->name, size,
                         ps_status_str(st));
                free(b->mem);
                free(b);
                return st;
            }
        }
        __atomic_add_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
        ps_mutex_lock(&p->lock);
        b->next = p->all;
        if (p->all)
            p->all->prev = b;
        p->all = b;
        p->stats.blocks++;
        ps_mutex_unlock(&p->lock);
    }
    /* The block carries its buffer header: no allocation per get. */
    ps_buf_init_wrapped(&b->hdr, b->mem, b->size, block_release, b);
    slice_p->buf = &b->hdr; /* the header's reference passes to the slice */
    slice_p->off = 0;
    slice_p->len = len;
    return PS_OK;
}

void *ps_rdma_buf_pool_handle(const ps_rdma_buf_pool_t *p, const ps_slice_t *slice)
{
    if (p == NULL || slice == NULL || slice->buf == NULL || slice->buf->release != block_release)
        return NULL;
    const block_t *b = slice->buf->release_arg;
    return b->pool == p ? b->handle : NULL;
}

void ps_rdma_buf_pool_stats(ps_rdma_buf_pool_t *p, ps_rdma_buf_pool_stats_t *s)
{
    ps_mutex_lock(&p->lock);
    *s = p->stats;
    s->idle_bytes = p->idle_bytes;
    ps_mutex_unlock(&p->lock);
}

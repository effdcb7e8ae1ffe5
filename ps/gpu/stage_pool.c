/* Pinned host staging buffers, kept and handed out again (stage_pool.h). */
#include "ps/gpu/stage_pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "ps/base/buffer_internal.h"
#include "ps/base/log.h"
#include "ps/base/shared_block.h"
#include "ps/gpu/mem.h"

/* Classes 64 KiB, 128 KiB, ... up to PS_STAGE_POOL_MAX_CACHED. */
#define STAGE_CLASSES 13

typedef struct stage_block {
    ps_buf_t buf; /* the header slices of this block refer to */
    struct stage_block *next;
    void *data;
    /* Set when data is a shared block (shared_block.h): slices of it are
     * the provider's buffers, which its van sends without a copy. */
    ps_shared_block_t *shared;
    const ps_shared_block_ops_t *provider;
    size_t cap;
    ps_mem_kind_t kind;
    int cls;
    bool pinned;
} stage_block_t;

typedef struct {
    stage_block_t *idle[STAGE_CLASSES];
    size_t bytes_idle, blocks_idle, blocks_made, blocks_reused, blocks_shared;
    bool pin_refused; /* logged once: the kind would not page-lock */
} stage_kind_pool_t;

static pthread_mutex_t stage_lock = PTHREAD_MUTEX_INITIALIZER;
static stage_kind_pool_t stage_pools[PS_MEM_KIND_COUNT];

_Static_assert((PS_STAGE_POOL_MIN_BLOCK << (STAGE_CLASSES - 1)) == PS_STAGE_POOL_MAX_CACHED,
               "the largest class is the cache's size");

static int class_of(size_t len)
{
    int cls = 0;
    size_t cap = PS_STAGE_POOL_MIN_BLOCK;
    while (cap < len) {
        cap <<= 1;
        cls++;
    }
    return cls;
}

static void block_destroy(stage_block_t *b)
{
    if (b->pinned)
        (void)ps_mem_ops(b->kind)->unregister_host(b->data);
    if (b->shared != NULL)
        b->provider->destroy(b->shared);
    else
        free(b->data);
    free(b);
}

/* The slice's last reference went: back to the idle list, or freed when
 * the idle blocks would go over the cache's size. */
static void block_back(void *arg)
{
    stage_block_t *b = arg;
    stage_kind_pool_t *p = &stage_pools[b->kind];
    pthread_mutex_lock(&stage_lock);
    bool keep = p->bytes_idle + b->cap <= PS_STAGE_POOL_MAX_CACHED;
    if (keep) {
        b->next = p->idle[b->cls];
        p->idle[b->cls] = b;
        p->bytes_idle += b->cap;
        p->blocks_idle++;
    }
    pthread_mutex_unlock(&stage_lock);
    if (!keep)
        block_destroy(b);
}

static void block_release(void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    block_back(arg);
}

static ps_status_t block_new(ps_mem_kind_t kind, int cls, stage_block_t **block_p)
{
    stage_kind_pool_t *p = &stage_pools[kind];
    stage_block_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return PS_ERR_NO_MEMORY;
    b->cap = PS_STAGE_POOL_MIN_BLOCK << cls;
    b->kind = kind;
    b->cls = cls;
    /* In shared memory where a van provides it, so that the van can send
     * what is staged here as is. */
    const ps_shared_block_ops_t *provider = ps_shared_block_provider();
    if (provider != NULL && provider->create(b->cap, &b->shared, &b->data) == PS_OK) {
        b->provider = provider;
    } else if (posix_memalign(&b->data, 4096, b->cap) != 0) {
        free(b);
        return PS_ERR_NO_MEMORY;
    }
    ps_status_t st = ps_mem_ops(kind)->register_host(b->data, b->cap);
    b->pinned = st == PS_OK;
    if (!b->pinned) {
        pthread_mutex_lock(&stage_lock);
        bool first = !p->pin_refused;
        p->pin_refused = true;
        pthread_mutex_unlock(&stage_lock);
        if (first && st != PS_ERR_UNSUPPORTED)
            ps_warn(PS_LOG_GPU, "staging for %s memory: page-locking %zu bytes failed (%s); "
                    "staged copies run at pageable speed", ps_mem_kind_name(kind), b->cap,
                    ps_status_str(st));
    }
    pthread_mutex_lock(&stage_lock);
    p->blocks_made++;
    p->blocks_shared += b->shared != NULL;
    pthread_mutex_unlock(&stage_lock);
    *block_p = b;
    return PS_OK;
}

ps_status_t ps_stage_pool_get(ps_mem_kind_t kind, size_t len, ps_slice_t *slice_p)
{
    if (slice_p == NULL || (unsigned)kind >= PS_MEM_KIND_COUNT)
        return PS_ERR_INVALID_ARG;
    if (len == 0) {
        *slice_p = (ps_slice_t)PS_SLICE_EMPTY_INIT;
        return PS_OK;
    }
    if (len > PS_STAGE_POOL_MAX_CACHED)
        return ps_slice_alloc(len, 0, slice_p);

    int cls = class_of(len);
    stage_kind_pool_t *p = &stage_pools[kind];
    pthread_mutex_lock(&stage_lock);
    stage_block_t *b = p->idle[cls];
    if (b != NULL) {
        p->idle[cls] = b->next;
        p->bytes_idle -= b->cap;
        p->blocks_idle--;
        p->blocks_reused++;
    }
    pthread_mutex_unlock(&stage_lock);
    if (b == NULL) {
        ps_status_t st = block_new(kind, cls, &b);
        if (st != PS_OK)
            return st;
    }
    ps_buf_t *buf = &b->buf;
    if (b->shared != NULL) {
        ps_status_t st = b->provider->wrap(b->shared, b->cap, block_back, b, &buf);
        if (st != PS_OK) {
            block_back(b);
            return st;
        }
    } else {
        ps_buf_init_wrapped(buf, b->data, b->cap, block_release, b);
    }
    ps_status_t st = ps_slice_of(buf, 0, len, slice_p);
    ps_buf_unref(buf); /* the slice holds the block now (or, failing, gave it back) */
    return st;
}

void ps_stage_pool_stats(ps_mem_kind_t kind, ps_stage_pool_stats_t *stats_p)
{
    *stats_p = (ps_stage_pool_stats_t){0};
    if ((unsigned)kind >= PS_MEM_KIND_COUNT)
        return;
    stage_kind_pool_t *p = &stage_pools[kind];
    pthread_mutex_lock(&stage_lock);
    stats_p->blocks_made = p->blocks_made;
    stats_p->blocks_reused = p->blocks_reused;
    stats_p->blocks_shared = p->blocks_shared;
    stats_p->blocks_idle = p->blocks_idle;
    stats_p->bytes_idle = p->bytes_idle;
    pthread_mutex_unlock(&stage_lock);
}

void ps_stage_pool_trim(void)
{
    stage_block_t *all = NULL;
    pthread_mutex_lock(&stage_lock);
    for (int k = 0; k < PS_MEM_KIND_COUNT; k++) {
        stage_kind_pool_t *p = &stage_pools[k];
        for (int c = 0; c < STAGE_CLASSES; c++) {
            while (p->idle[c] != NULL) {
                stage_block_t *b = p->idle[c];
                p->idle[c] = b->next;
                b->next = all;
                all = b;
            }
        }
        p->bytes_idle = 0;
        p->blocks_idle = 0;
    }
    pthread_mutex_unlock(&stage_lock);
    while (all != NULL) {
        stage_block_t *b = all;
        all = b->next;
        block_destroy(b);
    }
}

/*
 * The receive-buffer pool of rx_pool.h.
 */
#include "ps/net/van/rx_pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "ps/base/log.h"

/* Classes are powers of two from 64 B to 64 MB; bigger buffers are
 * allocated per message and freed with it. */
#define POOL_MIN_SHIFT 6
#define POOL_MAX_SHIFT 26
#define POOL_NUM_CLASSES (POOL_MAX_SHIFT - POOL_MIN_SHIFT + 1)
/* Page alignment from this class up: the kernel copies whole pages. */
#define POOL_PAGE_SHIFT 12
/* Each class caches up to this many bytes (at least POOL_MIN_CACHED
 * buffers, at most POOL_MAX_CACHED). */
#define POOL_CLASS_BYTES (64u << 20)
#define POOL_MIN_CACHED 4
#define POOL_MAX_CACHED 1024

typedef struct pool_free {
    struct pool_free *next;
} pool_free_t;

struct ps_van_rx_pool {
    pthread_mutex_t lock;
    ps_log_component_t log;
    uint32_t refs; /* atomic: creator + buffers out */
    size_t max_cached_bytes;
    size_t cached_bytes;
    pool_free_t *free[POOL_NUM_CLASSES];
    uint32_t num_free[POOL_NUM_CLASSES];
};

static void pool_unref(ps_van_rx_pool_t *pool)
{
    if (__atomic_sub_fetch(&pool->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    for (int c = 0; c < POOL_NUM_CLASSES; ++c) {
        pool_free_t *f = pool->free[c];
        while (f != NULL) {
            pool_free_t *next = f->next;
            free(f);
            f = next;
        }
    }
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

ps_status_t ps_van_rx_pool_create(size_t max_cached_bytes, ps_log_component_t log,
                                  ps_van_rx_pool_t **pool_p)
{
    ps_van_rx_pool_t *pool = calloc(1, sizeof(*pool));
    if (pool == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pool->refs = 1;
    pool->max_cached_bytes = max_cached_bytes;
    pool->log = log;
    *pool_p = pool;
    return PS_OK;
}

void ps_van_rx_pool_release(ps_van_rx_pool_t *pool)
{
    if (pool != NULL) {
        pool_unref(pool);
    }
}

/* The class index for len, or -1 when it is too big to pool. */
static int pool_class(size_t len)
{
    if (len > ((size_t)1 << POOL_MAX_SHIFT)) {
        return -1;
    }
    int shift = POOL_MIN_SHIFT;
    while (((size_t)1 << shift) < len) {
        ++shift;
    }
    return shift - POOL_MIN_SHIFT;
}

static size_t class_cap(int c)
{
    size_t n = POOL_CLASS_BYTES >> (c + POOL_MIN_SHIFT);
    if (n < POOL_MIN_CACHED) {
        n = POOL_MIN_CACHED;
    }
    if (n > POOL_MAX_CACHED) {
        n = POOL_MAX_CACHED;
    }
    return n;
}

/* ps_buf release callback: the buffer goes back to its class. */
static void pool_put(void *data, size_t length, void *arg)
{
    ps_van_rx_pool_t *pool = arg;
    int c = pool_class(length);
    int cached = 0;
    if (c >= 0 && ((size_t)1 << (c + POOL_MIN_SHIFT)) == length) {
        pthread_mutex_lock(&pool->lock);
        if (pool->num_free[c] < class_cap(c) &&
            pool->cached_bytes + length <= pool->max_cached_bytes) {
            pool_free_t *f = data;
            f->next = pool->free[c];
            pool->free[c] = f;
            pool->num_free[c]++;
            pool->cached_bytes += length;
            cached = 1;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    if (!cached) {
        free(data);
    }
    pool_unref(pool);
}

ps_status_t ps_van_rx_pool_get(ps_van_rx_pool_t *pool, size_t len, ps_slice_t *slice_p)
{
    int c = pool_class(len);
    size_t size = c >= 0 ? (size_t)1 << (c + POOL_MIN_SHIFT) : len;
    void *data = NULL;
    if (c >= 0) {
        pthread_mutex_lock(&pool->lock);
        pool_free_t *f = pool->free[c];
        if (f != NULL) {
            pool->free[c] = f->next;
            pool->num_free[c]--;
            pool->cached_bytes -= size;
            data = f;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    if (data == NULL) {
        size_t align = size >= ((size_t)1 << POOL_PAGE_SHIFT) ? ((size_t)1 << POOL_PAGE_SHIFT)
                                                              : sizeof(void *) * 2;
        if (posix_memalign(&data, align, size) != 0) {
            ps_error(pool->log, "cannot allocate a %zu-byte receive buffer", size);
            return PS_ERR_NO_MEMORY;
        }
    }
    ps_buf_t *buf;
    __atomic_add_fetch(&pool->refs, 1, __ATOMIC_RELAXED);
    ps_status_t st = ps_buf_wrap(data, size, pool_put, pool, &buf);
    if (st != PS_OK) {
        pool_put(data, size, pool);
        return st;
    }
    st = ps_slice_of(buf, 0, len, slice_p);
    ps_buf_unref(buf); /* the slice holds the only reference now */
    return st;
}

size_t ps_van_rx_pool_cached_bytes(ps_van_rx_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    size_t n = pool->cached_bytes;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

/*
 * The receive-buffer pool of shm_pool.h.
 */
#include "ps/net/shm/shm_pool.h"

#include <pthread.h>
#include <stdlib.h>

/* Classes 4 KiB .. 64 MiB; bigger buffers are made and freed per message. */
#define MIN_SHIFT 12
#define MAX_SHIFT 26
#define NUM_CLASSES (MAX_SHIFT - MIN_SHIFT + 1)
#define PAGE 4096

typedef struct free_buf {
    struct free_buf *next;
} free_buf_t;

struct ps__shm_pool {
    pthread_mutex_t lock;
    uint32_t refs; /* atomic: the creator's and one per buffer out */
    size_t max_cached;
    size_t cached;
    free_buf_t *free[NUM_CLASSES];
};

/* What a buffer out of the pool remembers. */
typedef struct {
    ps__shm_pool_t *pool;
    int cls; /* -1: not pooled */
} pooled_t;

static void pool_unref(ps__shm_pool_t *pool)
{
    if (__atomic_sub_fetch(&pool->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    for (int c = 0; c < NUM_CLASSES; ++c) {
        free_buf_t *f = pool->free[c];
        while (f != NULL) {
            free_buf_t *next = f->next;
            free(f);
            f = next;
        }
    }
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

ps_status_t ps__shm_pool_create(size_t max_cached_bytes, ps__shm_pool_t **pool_p)
{
    ps__shm_pool_t *pool = calloc(1, sizeof(*pool));
    if (pool == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pool->refs = 1;
    pool->max_cached = max_cached_bytes;
    *pool_p = pool;
    return PS_OK;
}

void ps__shm_pool_release(ps__shm_pool_t *pool)
{
    if (pool != NULL) {
        pool_unref(pool);
    }
}

static int class_of(size_t len)
{
    int c = 0;
    size_t size = (size_t)1 << MIN_SHIFT;
    while (size < len) {
        size <<= 1;
        c++;
    }
    return c < NUM_CLASSES ? c : -1;
}

static void buf_release(void *data, size_t len, void *arg)
{
    pooled_t *pb = arg;
    ps__shm_pool_t *pool = pb->pool;
    (void)len;
    int kept = 0;
    if (pb->cls >= 0) {
        size_t size = (size_t)1 << (MIN_SHIFT + pb->cls);
        pthread_mutex_lock(&pool->lock);
        if (pool->cached + size <= pool->max_cached) {
            free_buf_t *f = data;
            f->next = pool->free[pb->cls];
            pool->free[pb->cls] = f;
            pool->cached += size;
            kept = 1;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    if (!kept) {
        free(data);
    }
    free(pb);
    pool_unref(pool);
}

ps_status_t ps__shm_pool_get(ps__shm_pool_t *pool, size_t len, ps_slice_t *slice_p)
{
    if (len == 0) {
        return PS_ERR_INVALID_ARG;
    }
    pooled_t *pb = malloc(sizeof(*pb));
    if (pb == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    pb->pool = pool;
    pb->cls = class_of(len);
    void *data = NULL;
    size_t size = len;
    if (pb->cls >= 0) {
        size = (size_t)1 << (MIN_SHIFT + pb->cls);
        pthread_mutex_lock(&pool->lock);
        free_buf_t *f = pool->free[pb->cls];
        if (f != NULL) {
            pool->free[pb->cls] = f->next;
            pool->cached -= size;
            data = f;
        }
        pthread_mutex_unlock(&pool->lock);
    } else {
        size = (len + PAGE - 1) / PAGE * PAGE;
    }
    if (data == NULL && posix_memalign(&data, PAGE, size) != 0) {
        free(pb);
        return PS_ERR_NO_MEMORY;
    }
    ps_buf_t *buf;
    ps_status_t st = ps_buf_wrap(data, size, buf_release, pb, &buf);
    if (st != PS_OK) {
        free(data);
        free(pb);
        return st;
    }
    __atomic_add_fetch(&pool->refs, 1, __ATOMIC_RELAXED);
    slice_p->buf = buf;
    slice_p->off = 0;
    slice_p->len = len;
    return PS_OK;
}

size_t ps__shm_pool_cached_bytes(ps__shm_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    size_t n = pool->cached;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

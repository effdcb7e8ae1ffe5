#include "ps/base/mpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"

#if defined(__SANITIZE_ADDRESS__)
#define PS_MPOOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_MPOOL_ASAN 1
#endif
#endif

#ifdef PS_MPOOL_ASAN
#include <sanitizer/asan_interface.h>
#define PS_MPOOL_POISON(_p, _n) ASAN_POISON_MEMORY_REGION((_p), (_n))
#define PS_MPOOL_UNPOISON(_p, _n) ASAN_UNPOISON_MEMORY_REGION((_p), (_n))
#else
#define PS_MPOOL_POISON(_p, _n) ((void)(_p), (void)(_n))
#define PS_MPOOL_UNPOISON(_p, _n) ((void)(_p), (void)(_n))
#endif

#define PS_MPOOL_DEFAULT_ALIGN 16
#define PS_MPOOL_DEFAULT_CHUNK 64

static size_t ps_mpool_round_up(size_t x, size_t align)
{
    return (x + align - 1) & ~(align - 1);
}

/* The chunk header (the link to the next chunk) padded to the alignment. */
static size_t ps_mpool_chunk_hdr(const ps_mpool_t *mp)
{
    return ps_mpool_round_up(sizeof(void *), mp->align);
}

ps_status_t ps_mpool_init(ps_mpool_t *mp, const char *name, size_t elem_size, size_t align,
                          size_t elems_per_chunk, size_t max_elems)
{
    if (mp == NULL || elem_size == 0) {
        return PS_ERR_INVALID_ARG;
    }
    if (align == 0) {
        align = PS_MPOOL_DEFAULT_ALIGN;
    }
    if ((align & (align - 1)) != 0 || align > 4096) {
        return PS_ERR_INVALID_ARG;
    }
    if (align < sizeof(void *)) {
        align = sizeof(void *); /* the free-list link lives in the element */
    }
    if (elem_size > SIZE_MAX / 2) {
        return PS_ERR_TOO_LARGE;
    }
    if (elems_per_chunk == 0) {
        elems_per_chunk = PS_MPOOL_DEFAULT_CHUNK;
    }
    size_t stride = ps_mpool_round_up(elem_size < sizeof(void *) ? sizeof(void *) : elem_size,
                                      align);
    if (elems_per_chunk > (SIZE_MAX - align) / stride) {
        return PS_ERR_TOO_LARGE;
    }
    int err = pthread_mutex_init(&mp->lock, NULL);
    if (err != 0) {
        return ps_status_from_errno(err);
    }
    mp->free_list = NULL;
    mp->chunks = NULL;
    mp->elem_size = elem_size;
    mp->stride = stride;
    mp->align = align;
    mp->elems_per_chunk = elems_per_chunk;
    mp->max_elems = max_elems;
    mp->num_elems = 0;
    mp->in_use = 0;
    snprintf(mp->name, sizeof(mp->name), "%s", name != NULL ? name : "mpool");
    return PS_OK;
}

void ps_mpool_cleanup(ps_mpool_t *mp)
{
    if (mp == NULL) {
        return;
    }
    pthread_mutex_lock(&mp->lock);
    if (mp->in_use != 0) {
        ps_warn(PS_LOG_BASE, "mpool %s: %zu of %zu elements still in use at cleanup", mp->name,
                mp->in_use, mp->num_elems);
    }
    void *chunk = mp->chunks;
    size_t bytes = ps_mpool_chunk_hdr(mp) + mp->stride * mp->elems_per_chunk;
    while (chunk != NULL) {
        void *next = *(void **)chunk;
        PS_MPOOL_UNPOISON(chunk, bytes);
        free(chunk);
        chunk = next;
    }
    mp->chunks = NULL;
    mp->free_list = NULL;
    mp->num_elems = 0;
    mp->in_use = 0;
    pthread_mutex_unlock(&mp->lock);
    pthread_mutex_destroy(&mp->lock);
}

/* Adds a chunk to the free list; called with the lock held. Every chunk has
 * elems_per_chunk slots even when the limit lets only some be used, so that
 * cleanup knows each chunk's size. */
static ps_status_t ps_mpool_grow(ps_mpool_t *mp)
{
    size_t n = mp->elems_per_chunk;
    void *chunk;

    if (mp->max_elems != 0) {
        if (mp->num_elems >= mp->max_elems) {
            return PS_ERR_NO_RESOURCE;
        }
        if (n > mp->max_elems - mp->num_elems) {
            n = mp->max_elems - mp->num_elems;
        }
    }
    size_t hdr = ps_mpool_chunk_hdr(mp);
    if (posix_memalign(&chunk, mp->align, hdr + mp->stride * mp->elems_per_chunk) != 0) {
        ps_warn(PS_LOG_BASE, "mpool %s: cannot grow beyond %zu elements: out of memory",
                mp->name, mp->num_elems);
        return PS_ERR_NO_MEMORY;
    }
    *(void **)chunk = mp->chunks;
    mp->chunks = chunk;
    /* Push in reverse so elements come out in address order. */
    for (size_t i = n; i-- > 0;) {
        char *elem = (char *)chunk + hdr + i * mp->stride;
        *(void **)elem = mp->free_list;
        mp->free_list = elem;
        PS_MPOOL_POISON(elem + sizeof(void *), mp->stride - sizeof(void *));
    }
    mp->num_elems += n;
    return PS_OK;
}

ps_status_t ps_mpool_get(ps_mpool_t *mp, void **elem_p)
{
    if (mp == NULL || elem_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&mp->lock);
    if (mp->free_list == NULL) {
        ps_status_t st = ps_mpool_grow(mp);
        if (st != PS_OK) {
            pthread_mutex_unlock(&mp->lock);
            return st;
        }
    }
    void *elem = mp->free_list;
    mp->free_list = *(void **)elem;
    ++mp->in_use;
    pthread_mutex_unlock(&mp->lock);
    PS_MPOOL_UNPOISON(elem, mp->stride);
    *elem_p = elem;
    return PS_OK;
}

void ps_mpool_put(ps_mpool_t *mp, void *elem)
{
    if (mp == NULL || elem == NULL) {
        return;
    }
    pthread_mutex_lock(&mp->lock);
    *(void **)elem = mp->free_list;
    mp->free_list = elem;
    --mp->in_use;
    PS_MPOOL_POISON((char *)elem + sizeof(void *), mp->stride - sizeof(void *));
    pthread_mutex_unlock(&mp->lock);
}

size_t ps_mpool_in_use(ps_mpool_t *mp)
{
    pthread_mutex_lock(&mp->lock);
    size_t n = mp->in_use;
    pthread_mutex_unlock(&mp->lock);
    return n;
}

size_t ps_mpool_capacity(ps_mpool_t *mp)
{
    pthread_mutex_lock(&mp->lock);
    size_t n = mp->num_elems;
    pthread_mutex_unlock(&mp->lock);
    return n;
}

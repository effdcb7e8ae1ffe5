/*
 * A pool of fixed-size elements for hot-path descriptors (send requests,
 * receive contexts): get and put are a short critical section around an
 * intrusive free list, never malloc() once the pool has warmed up. The pool
 * grows a chunk of elements at a time, up to an optional limit, and gives
 * memory back only at cleanup.
 *
 * Thread-safe. Under AddressSanitizer a free element is poisoned, so a use
 * after ps_mpool_put() is reported.
 */
#ifndef PS_BASE_MPOOL_H_
#define PS_BASE_MPOOL_H_

#include <pthread.h>
#include <stddef.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_MPOOL_NAME_MAX 32

typedef struct ps_mpool {
    pthread_mutex_t lock;
    void *free_list;        /* free elements, linked through their first word */
    void *chunks;           /* allocated chunks, linked through their header */
    size_t elem_size;
    size_t stride;          /* elem_size rounded up to the alignment */
    size_t align;
    size_t elems_per_chunk;
    size_t max_elems;       /* 0: no limit */
    size_t num_elems;       /* elements in all chunks */
    size_t in_use;          /* elements handed out */
    char name[PS_MPOOL_NAME_MAX];
} ps_mpool_t;

/* Sets up an empty pool of `elem_size`-byte elements aligned to `align` (a
 * power of two; 0 means 16), growing by `elems_per_chunk` (0 means 64)
 * elements, up to `max_elems` in total (0 means no limit). `name` is for
 * log lines. */
ps_status_t ps_mpool_init(ps_mpool_t *mp, const char *name, size_t elem_size, size_t align,
                          size_t elems_per_chunk, size_t max_elems);

/* Frees every chunk. Elements still handed out are logged as leaked (and
 * become invalid). */
void ps_mpool_cleanup(ps_mpool_t *mp);

/* An element (contents undefined): PS_ERR_NO_RESOURCE at the limit,
 * PS_ERR_NO_MEMORY if a new chunk cannot be allocated. */
ps_status_t ps_mpool_get(ps_mpool_t *mp, void **elem_p);

/* Gives an element back to the pool it came from. NULL is a no-op. */
void ps_mpool_put(ps_mpool_t *mp, void *elem);

/* Elements handed out / allocated (snapshots). */
size_t ps_mpool_in_use(ps_mpool_t *mp);
size_t ps_mpool_capacity(ps_mpool_t *mp);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_MPOOL_H_ */

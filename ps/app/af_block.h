/*
 * One allocation for a record and its per-batch arrays: the AF worker's
 * handle and the server's batch lay their arrays out after the record, so
 * that a batch costs one malloc and one free on each side.
 */
#ifndef PS_APP_AF_BLOCK_H_
#define PS_APP_AF_BLOCK_H_

#include <stddef.h>

/* Reserves `count` items of `size` bytes aligned to `align` (a power of
 * two) at the end of the layout *end_p (advanced); returns their offset. */
static inline size_t ps__af_block_take(size_t *end_p, size_t count, size_t size, size_t align)
{
    size_t at = (*end_p + align - 1) & ~(align - 1);
    *end_p = at + count * size;
    return at;
}

/* The same for `n` items of the type `arr` points to. */
#define PS__AF_BLOCK_TAKE(end_p, n, arr) \
    ps__af_block_take((end_p), (n), sizeof(*(arr)), _Alignof(__typeof__(*(arr))))

#endif /* PS_APP_AF_BLOCK_H_ */

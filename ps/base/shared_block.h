/*
 * Host memory that other processes on this host can map, for blocks a
 * layer above the vans keeps and reuses (ps/gpu's staging pool): a van that
 * passes shared memory by reference (the shm van) then sends a slice of
 * such a block as a descriptor, with no copy, and the receiver reads it in
 * place. The van installs the provider when it opens, so that only a
 * process that uses it stages into shared segments; a transport may use
 * ps/base but the staging pool may not use a transport, hence the hook.
 * Without a provider, callers use memory of their own.
 */
#ifndef PS_BASE_SHARED_BLOCK_H_
#define PS_BASE_SHARED_BLOCK_H_

#include <stddef.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_shared_block ps_shared_block_t;

/* Called when the last reference to a buffer of wrap() goes; the block
 * itself stays. */
typedef void (*ps_shared_block_release_func_t)(void *arg);

typedef struct {
    size_t size; /* sizeof(ps_shared_block_ops_t) of the code that filled it */
    /* A new block of at least len bytes, zero-filled and page-aligned at
     * *data_p. Errors are the provider's to log. */
    ps_status_t (*create)(size_t len, ps_shared_block_t **block_p, void **data_p);
    /* A buffer over the block's first len bytes that the provider's van
     * recognises; release(arg) runs when its last reference goes. A block
     * has at most one such buffer alive at a time. */
    ps_status_t (*wrap)(ps_shared_block_t *block, size_t len,
                        ps_shared_block_release_func_t release, void *arg, ps_buf_t **buf_p);
    /* Unmaps the block here (peers that mapped it keep their mapping). */
    void (*destroy)(ps_shared_block_t *block);
} ps_shared_block_ops_t;

/* Installs the provider (NULL removes it). Any thread; the table must stay
 * valid for the life of the process. */
void ps_shared_block_provide(const ps_shared_block_ops_t *ops);

/* The provider, or NULL when none is installed. */
const ps_shared_block_ops_t *ps_shared_block_provider(void);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_SHARED_BLOCK_H_ */

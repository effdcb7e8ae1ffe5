/* The provider of shared host blocks (see shared_block.h). */
#include "ps/base/shared_block.h"

#include <stdatomic.h>

static _Atomic(const ps_shared_block_ops_t *) provider;

void ps_shared_block_provide(const ps_shared_block_ops_t *ops)
{
    atomic_store(&provider, ops);
}

const ps_shared_block_ops_t *ps_shared_block_provider(void)
{
    return atomic_load(&provider);
}

/*
 * ps/ps.h is the API a program using ps sees: lifecycle, KV, AF, simple
 * app, buffers, statuses, config, log levels, memory kinds. It must not
 * bring in the wire model, the message layer or the small lane, nor ps's
 * logging macros (their ps__ functions), nor a buffer's header (ps_buf_t
 * is opaque to a program): this file does not compile when it does. At run time it checks the vocabulary the public headers carry.
 */
#include "ps/ps.h"

#include <stdio.h>
#include <string.h>

#if defined(PS_NET_CODEC_MESSAGE_H_) || defined(PS_NET_CODEC_LANE_H_) || \
    defined(PS_NET_MESSAGE_H_) || defined(PS_NET_POSTOFFICE_MSG_H_)
#error "ps/ps.h exposes the wire meta, the message layer or the small lane"
#endif
#if defined(PS_BASE_LOG_H_) || defined(PS_BASE_CONFIG_INTERNAL_H_)
#error "ps/ps.h exposes ps's logging macros or the config table's test hooks"
#endif
#if defined(PS_BASE_BUFFER_INTERNAL_H_) || defined(PS_BUF_REG_SLOTS)
#error "ps/ps.h exposes a buffer's header or its registration slots"
#endif

int main(void)
{
    int bad = 0;
    if (strcmp(ps_role_str(PS_ROLE_WORKER), "worker") != 0)
        bad = printf("ps_role_str(worker) is %s\n", ps_role_str(PS_ROLE_WORKER));
    if (ps_data_type_size(PS_DATA_BFLOAT16) != 2)
        bad = printf("bfloat16 is %zu bytes\n", ps_data_type_size(PS_DATA_BFLOAT16));
    if (ps_server_rank_to_id(1) != 10 || ps_id_to_rank(11) != 1)
        bad = printf("node ids are not upstream's\n");
    ps_buf_t *buf;
    if (ps_buf_alloc(24, 0, &buf) != PS_OK)
        return printf("ps_buf_alloc failed\n"), 1;
    ps_slice_t whole;
    if (ps_slice_of(buf, 8, 16, &whole) != PS_OK || ps_slice_ptr(&whole) != (char *)ps_buf_data(buf) + 8 ||
        ps_buf_length(buf) != 24 || ps_slice_mem_kind(&whole) != PS_BUF_MEM_HOST ||
        ps_slice_device(&whole) != 0 || ps_buf_refcount(buf) != 2)
        bad = printf("a buffer's accessors disagree with its slice\n");
    ps_slice_unref(&whole);
    ps_buf_unref(buf);
    if (PS_AF_MAX_DIMS != 8)
        bad = printf("PS_AF_MAX_DIMS is %d\n", PS_AF_MAX_DIMS);
    return bad ? 1 : 0;
}

/*
 * ps/ps.h is the API a program using ps sees: lifecycle, KV, AF, simple
 * app, buffers, statuses, config, log levels, memory kinds. It must not
 * bring in the wire model, the message layer or the small lane, nor ps's
 * logging macros (their ps__ functions): this file does not compile when
 * it does. At run time it checks the vocabulary the public headers carry.
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

int main(void)
{
    int bad = 0;
    if (strcmp(ps_role_str(PS_ROLE_WORKER), "worker") != 0)
        bad = printf("ps_role_str(worker) is %s\n", ps_role_str(PS_ROLE_WORKER));
    if (ps_data_type_size(PS_DATA_BFLOAT16) != 2)
        bad = printf("bfloat16 is %zu bytes\n", ps_data_type_size(PS_DATA_BFLOAT16));
    if (ps_server_rank_to_id(1) != 10 || ps_id_to_rank(11) != 1)
        bad = printf("node ids are not upstream's\n");
    if (PS_AF_MAX_DIMS != 8)
        bad = printf("PS_AF_MAX_DIMS is %d\n", PS_AF_MAX_DIMS);
    return bad ? 1 : 0;
}

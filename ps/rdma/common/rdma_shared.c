#include "ps/rdma/common/rdma_shared.h"

#include "ps/base/log.h"

static const ps_config_entry_t rdma_vars[] = {
#define PS_CONFIG_VAR PS_CONFIG_ENTRY
#include "ps/rdma/common/rdma_config_vars.h"
#undef PS_CONFIG_VAR
};
PS_CONFIG_TABLE(ps__rdma_config, "rdma", rdma_vars)

PS_LOG_COMPONENT(ps__rdma_log, "rdma")

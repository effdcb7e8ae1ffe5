/*
 * What the RDMA vans (ibverbs, fabric) and their common code share: the
 * variables of rdma_config_vars.h, a config table of their own (read them
 * as ps_config_*(PS_RDMA_CFG(NAME), ...)), and the log component "rdma".
 */
#ifndef PS_RDMA_COMMON_RDMA_SHARED_H_
#define PS_RDMA_COMMON_RDMA_SHARED_H_

#include "ps/base/config.h"
#include "ps/base/log_level.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
#define PS_CONFIG_VAR PS_CONFIG_INDEX
#include "ps/rdma/common/rdma_config_vars.h"
#undef PS_CONFIG_VAR
} ps__rdma_config_index_t;
extern ps_config_table_t ps__rdma_config;
#define PS_RDMA_CFG(_name) ps_config_table_id(&ps__rdma_config, PS_CFGI_##_name)

extern ps_log_component_t ps__rdma_log;
#define PS_LOG_RDMA ps__rdma_log

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_COMMON_RDMA_SHARED_H_ */

/*
 * StepMesh's CPU policy for the AF app: BindCpuCore (which core a GPU's
 * communication thread runs on, from the STEPMESH_* pinning variables) and
 * busy polling by default.
 */
#include "ps/app/af.h"
#include "ps/app/af_wire.h"
#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/thread.h"

int ps__af_cpu_core(int gpu, int offset, int cores_per_socket, int cores_per_gpu, int start)
{
    if (gpu < 0 || offset < 0 || cores_per_gpu <= 0 || offset >= cores_per_gpu || start < 0 ||
        cores_per_socket <= start)
        return -1;
    /* GPUs that fit on a socket after its first `start` cores. */
    int per_socket = (cores_per_socket - start) / cores_per_gpu;
    if (per_socket <= 0)
        return -1;
    return (gpu / per_socket) * cores_per_socket + start + (gpu % per_socket) * cores_per_gpu +
           offset;
}

ps_status_t ps_af_bind_cpu_core(int offset, int *core_p)
{
    if (core_p)
        *core_p = -1;
    if (!ps_config_bool_or(PS_CFG_STEPMESH_BIND_CPU_CORE, 0))
        return PS_OK;
    int64_t gpu = ps_config_int_or(PS_CFG_STEPMESH_GPU, 0);
    int64_t per_socket = ps_config_int_or(PS_CFG_STEPMESH_CPU_CORES_PER_SOCKET, 48);
    int64_t per_gpu = ps_config_int_or(PS_CFG_STEPMESH_CPU_CORES_PER_GPU, 5);
    int64_t start = ps_config_int_or(PS_CFG_STEPMESH_CPU_START_OFFSET, 10);
    if (gpu > 4096 || per_socket > 65536 || per_gpu > 65536 || start > 65536)
        return PS_ERR_CONFIG;
    int core = ps__af_cpu_core((int)gpu, offset, (int)per_socket, (int)per_gpu, (int)start);
    if (core < 0) {
        ps_error(PS_LOG_APP,
                 "af: no core for GPU %lld, offset %d (STEPMESH_CPU_CORES_PER_SOCKET "
                 "%lld, STEPMESH_CPU_CORES_PER_GPU %lld, STEPMESH_CPU_START_OFFSET %lld)",
                 (long long)gpu, offset, (long long)per_socket, (long long)per_gpu,
                 (long long)start);
        return offset < 0 || (per_gpu > 0 && offset >= per_gpu) ? PS_ERR_INVALID_ARG
                                                                : PS_ERR_CONFIG;
    }
    ps_status_t st = ps_thread_pin_self(core);
    if (st != PS_OK)
        return st;
    if (core_p)
        *core_p = core;
    return PS_OK;
}

void ps_af_start_params(ps_start_params_t *params)
{
    if (params && !ps_config_is_set(PS_CFG_PS_BUSY_POLL))
        params->busy_poll = ps_config_bool_or(PS_CFG_STEPMESH_BUSY_POLL_ENABLE, 1);
}

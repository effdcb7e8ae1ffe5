/* libucs, libuct and libucp into ps__ucx_api, once. */
#define PS__UCX_DL_NO_MACROS
#include "ps/rdma/ucx/ucx_dl.h"

#include "ps/base/sigkeep.h"
#include "ps/rdma/common/dl.h"

ps__ucx_api_t ps__ucx_api;

const char *const ps__ucx_dl_libs[] = {"libucs.so.0", "libuct.so.0", "libucp.so.0", NULL};

#define SYM(_name) {#_name, offsetof(ps__ucx_api_t, _name)}

static const ps__dl_sym_t ucs_syms[] = {
    SYM(ucs_status_string),
};

static const ps__dl_sym_t uct_syms[] = {
    SYM(uct_component_query),
    SYM(uct_config_release),
    SYM(uct_md_close),
    SYM(uct_md_config_read),
    SYM(uct_md_open),
    SYM(uct_md_query_tl_resources),
    SYM(uct_query_components),
    SYM(uct_release_component_list),
    SYM(uct_release_tl_resource_list),
};

static const ps__dl_sym_t ucp_syms[] = {
    SYM(ucp_am_data_release),
    SYM(ucp_am_recv_data_nbx),
    SYM(ucp_am_send_nbx),
    SYM(ucp_cleanup),
    SYM(ucp_config_modify),
    SYM(ucp_config_print),
    SYM(ucp_config_read),
    SYM(ucp_config_release),
    SYM(ucp_context_print_info),
    SYM(ucp_context_query),
    SYM(ucp_ep_close_nbx),
    SYM(ucp_ep_create),
    SYM(ucp_ep_print_info),
    SYM(ucp_get_version),
    SYM(ucp_get_version_string),
    SYM(ucp_init_version),
    SYM(ucp_request_cancel),
    SYM(ucp_request_free),
    SYM(ucp_tag_msg_recv_nbx),
    SYM(ucp_tag_probe_nb),
    SYM(ucp_tag_recv_nbx),
    SYM(ucp_tag_send_nbx),
    SYM(ucp_worker_arm),
    SYM(ucp_worker_create),
    SYM(ucp_worker_destroy),
    SYM(ucp_worker_get_address),
    SYM(ucp_worker_get_efd),
    SYM(ucp_worker_progress),
    SYM(ucp_worker_query),
    SYM(ucp_worker_release_address),
    SYM(ucp_worker_set_am_recv_handler),
};

static const struct {
    const ps__dl_sym_t *syms;
    size_t n;
} ucx_libs[] = {
    {ucs_syms, sizeof(ucs_syms) / sizeof(ucs_syms[0])},
    {uct_syms, sizeof(uct_syms) / sizeof(uct_syms[0])},
    {ucp_syms, sizeof(ucp_syms) / sizeof(ucp_syms[0])},
};

static ps__dl_once_t ucx_lib = PS__DL_ONCE_INIT;

static void ucx_load_once(void)
{
    /* libucs reads them in its constructor, when it installs its handlers. */
    ps__sigkeep_setenv_default("UCX_ERROR_SIGNALS", "");
    ps__sigkeep_setenv_default("UCX_HANDLE_ERRORS", "none");
    ucx_lib.status = PS_OK;
    for (size_t i = 0; i < sizeof(ucx_libs) / sizeof(ucx_libs[0]) && ucx_lib.status == PS_OK; i++)
        ucx_lib.status = ps__dl_load(ps__ucx_dl_libs[i], "ucx", &ps__ucx_api, ucx_libs[i].syms,
                                     ucx_libs[i].n, ucx_lib.why, sizeof(ucx_lib.why));
}

ps_status_t ps__ucx_dl_load(char *why, size_t cap)
{
    return ps__dl_once(&ucx_lib, ucx_load_once, why, cap);
}

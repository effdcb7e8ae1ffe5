/*
 * UCX, loaded at run time: libucs.so.0, libuct.so.0 and libucp.so.0 (in
 * that order, each needing the one before). The van and the probe call the
 * exported functions they use through ps__ucx_api; include this instead of
 * (or after) <ucp/api/ucp.h>: the macros at the end turn ucp_init(...) and
 * the rest into calls through the table, so call sites read as UCX's
 * documentation.
 */
#ifndef PS_RDMA_UCX_UCX_DL_H_
#define PS_RDMA_UCX_UCX_DL_H_

#include <stddef.h>

#include <ucp/api/ucp.h>
#include <ucs/type/status.h>
#include <uct/api/uct.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* libucs.so.0 */
    __typeof__(ucs_status_string) *ucs_status_string;
    /* libuct.so.0 */
    __typeof__(uct_component_query) *uct_component_query;
    __typeof__(uct_config_release) *uct_config_release;
    __typeof__(uct_md_close) *uct_md_close;
    __typeof__(uct_md_config_read) *uct_md_config_read;
    __typeof__(uct_md_open) *uct_md_open;
    __typeof__(uct_md_query_tl_resources) *uct_md_query_tl_resources;
    __typeof__(uct_query_components) *uct_query_components;
    __typeof__(uct_release_component_list) *uct_release_component_list;
    __typeof__(uct_release_tl_resource_list) *uct_release_tl_resource_list;
    /* libucp.so.0 */
    __typeof__(ucp_am_data_release) *ucp_am_data_release;
    __typeof__(ucp_am_recv_data_nbx) *ucp_am_recv_data_nbx;
    __typeof__(ucp_am_send_nbx) *ucp_am_send_nbx;
    __typeof__(ucp_cleanup) *ucp_cleanup;
    __typeof__(ucp_config_modify) *ucp_config_modify;
    __typeof__(ucp_config_print) *ucp_config_print;
    __typeof__(ucp_config_read) *ucp_config_read;
    __typeof__(ucp_config_release) *ucp_config_release;
    __typeof__(ucp_context_print_info) *ucp_context_print_info;
    __typeof__(ucp_context_query) *ucp_context_query;
    __typeof__(ucp_ep_close_nbx) *ucp_ep_close_nbx;
    __typeof__(ucp_ep_create) *ucp_ep_create;
    __typeof__(ucp_ep_print_info) *ucp_ep_print_info;
    __typeof__(ucp_get_version) *ucp_get_version;
    __typeof__(ucp_get_version_string) *ucp_get_version_string;
    __typeof__(ucp_init_version) *ucp_init_version;
    __typeof__(ucp_request_cancel) *ucp_request_cancel;
    __typeof__(ucp_request_free) *ucp_request_free;
    __typeof__(ucp_tag_msg_recv_nbx) *ucp_tag_msg_recv_nbx;
    __typeof__(ucp_tag_probe_nb) *ucp_tag_probe_nb;
    __typeof__(ucp_tag_recv_nbx) *ucp_tag_recv_nbx;
    __typeof__(ucp_tag_send_nbx) *ucp_tag_send_nbx;
    __typeof__(ucp_worker_arm) *ucp_worker_arm;
    __typeof__(ucp_worker_create) *ucp_worker_create;
    __typeof__(ucp_worker_destroy) *ucp_worker_destroy;
    __typeof__(ucp_worker_get_address) *ucp_worker_get_address;
    __typeof__(ucp_worker_get_efd) *ucp_worker_get_efd;
    __typeof__(ucp_worker_progress) *ucp_worker_progress;
    __typeof__(ucp_worker_query) *ucp_worker_query;
    __typeof__(ucp_worker_release_address) *ucp_worker_release_address;
    __typeof__(ucp_worker_set_am_recv_handler) *ucp_worker_set_am_recv_handler;
} ps__ucx_api_t;

extern ps__ucx_api_t ps__ucx_api;

/* The libraries, in load order (NULL-terminated). */
extern const char *const ps__ucx_dl_libs[];

/* Loads UCX once per process (later calls return the first result). Before
 * libucs runs its constructor, UCX_ERROR_SIGNALS= (none) and
 * UCX_HANDLE_ERRORS=none unless the user set them, so that UCX leaves fatal
 * signals alone; whatever the libraries did to them anyway is undone.
 * PS_ERR_UNSUPPORTED with why = "libucp.so.0 not found (...)" when it
 * cannot. */
ps_status_t ps__ucx_dl_load(char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#ifndef PS__UCX_DL_NO_MACROS
/* static inline in ucp.h, over the exported ucp_init_version */
#define ucp_init(_params, _config, _context_p) \
    ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, _params, _config, _context_p)
#define ucs_status_string(...) ps__ucx_api.ucs_status_string(__VA_ARGS__)
#define uct_component_query(...) ps__ucx_api.uct_component_query(__VA_ARGS__)
#define uct_config_release(...) ps__ucx_api.uct_config_release(__VA_ARGS__)
#define uct_md_close(...) ps__ucx_api.uct_md_close(__VA_ARGS__)
#define uct_md_config_read(...) ps__ucx_api.uct_md_config_read(__VA_ARGS__)
#define uct_md_open(...) ps__ucx_api.uct_md_open(__VA_ARGS__)
#define uct_md_query_tl_resources(...) ps__ucx_api.uct_md_query_tl_resources(__VA_ARGS__)
#define uct_query_components(...) ps__ucx_api.uct_query_components(__VA_ARGS__)
#define uct_release_component_list(...) ps__ucx_api.uct_release_component_list(__VA_ARGS__)
#define uct_release_tl_resource_list(...) ps__ucx_api.uct_release_tl_resource_list(__VA_ARGS__)
#define ucp_am_data_release(...) ps__ucx_api.ucp_am_data_release(__VA_ARGS__)
#define ucp_am_recv_data_nbx(...) ps__ucx_api.ucp_am_recv_data_nbx(__VA_ARGS__)
#define ucp_am_send_nbx(...) ps__ucx_api.ucp_am_send_nbx(__VA_ARGS__)
#define ucp_cleanup(...) ps__ucx_api.ucp_cleanup(__VA_ARGS__)
#define ucp_config_modify(...) ps__ucx_api.ucp_config_modify(__VA_ARGS__)
#define ucp_context_query(...) ps__ucx_api.ucp_context_query(__VA_ARGS__)
#define ucp_config_print(...) ps__ucx_api.ucp_config_print(__VA_ARGS__)
#define ucp_config_read(...) ps__ucx_api.ucp_config_read(__VA_ARGS__)
#define ucp_config_release(...) ps__ucx_api.ucp_config_release(__VA_ARGS__)
#define ucp_context_print_info(...) ps__ucx_api.ucp_context_print_info(__VA_ARGS__)
#define ucp_ep_close_nbx(...) ps__ucx_api.ucp_ep_close_nbx(__VA_ARGS__)
#define ucp_ep_create(...) ps__ucx_api.ucp_ep_create(__VA_ARGS__)
#define ucp_ep_print_info(...) ps__ucx_api.ucp_ep_print_info(__VA_ARGS__)
#define ucp_get_version(...) ps__ucx_api.ucp_get_version(__VA_ARGS__)
#define ucp_get_version_string(...) ps__ucx_api.ucp_get_version_string(__VA_ARGS__)
#define ucp_init_version(...) ps__ucx_api.ucp_init_version(__VA_ARGS__)
#define ucp_request_cancel(...) ps__ucx_api.ucp_request_cancel(__VA_ARGS__)
#define ucp_request_free(...) ps__ucx_api.ucp_request_free(__VA_ARGS__)
#define ucp_tag_msg_recv_nbx(...) ps__ucx_api.ucp_tag_msg_recv_nbx(__VA_ARGS__)
#define ucp_tag_probe_nb(...) ps__ucx_api.ucp_tag_probe_nb(__VA_ARGS__)
#define ucp_tag_recv_nbx(...) ps__ucx_api.ucp_tag_recv_nbx(__VA_ARGS__)
#define ucp_tag_send_nbx(...) ps__ucx_api.ucp_tag_send_nbx(__VA_ARGS__)
#define ucp_worker_arm(...) ps__ucx_api.ucp_worker_arm(__VA_ARGS__)
#define ucp_worker_create(...) ps__ucx_api.ucp_worker_create(__VA_ARGS__)
#define ucp_worker_destroy(...) ps__ucx_api.ucp_worker_destroy(__VA_ARGS__)
#define ucp_worker_get_address(...) ps__ucx_api.ucp_worker_get_address(__VA_ARGS__)
#define ucp_worker_get_efd(...) ps__ucx_api.ucp_worker_get_efd(__VA_ARGS__)
#define ucp_worker_progress(...) ps__ucx_api.ucp_worker_progress(__VA_ARGS__)
#define ucp_worker_query(...) ps__ucx_api.ucp_worker_query(__VA_ARGS__)
#define ucp_worker_release_address(...) ps__ucx_api.ucp_worker_release_address(__VA_ARGS__)
#define ucp_worker_set_am_recv_handler(...) ps__ucx_api.ucp_worker_set_am_recv_handler(__VA_ARGS__)
#endif

#endif /* PS_RDMA_UCX_UCX_DL_H_ */

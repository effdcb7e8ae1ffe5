/*
 * libibverbs.so.1 and librdmacm.so.1, loaded at run time: the ibverbs van
 * and the probes call the exported functions they use through ps__ibv_api
 * and ps__rdmacm_api; the data path (post, poll) is static inline in the
 * headers and goes through the provider's ops. Include this instead of (or
 * after) <infiniband/verbs.h> and <rdma/rdma_cma.h>: the macros at the end
 * turn ibv_alloc_pd(...) and the rest into calls through the tables.
 */
#ifndef PS_RDMA_VERBS_VERBS_DL_H_
#define PS_RDMA_VERBS_VERBS_DL_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_IBV_SONAME "libibverbs.so.1"
#define PS_RDMACM_SONAME "librdmacm.so.1"

typedef struct {
    __typeof__(ibv_ack_async_event) *ack_async_event;
    __typeof__(ibv_ack_cq_events) *ack_cq_events;
    __typeof__(ibv_alloc_pd) *alloc_pd;
    __typeof__(ibv_close_device) *close_device;
    __typeof__(ibv_create_comp_channel) *create_comp_channel;
    __typeof__(ibv_create_cq) *create_cq;
    __typeof__(ibv_create_srq) *create_srq;
    __typeof__(ibv_dealloc_pd) *dealloc_pd;
    __typeof__(ibv_dereg_mr) *dereg_mr;
    __typeof__(ibv_destroy_comp_channel) *destroy_comp_channel;
    __typeof__(ibv_destroy_cq) *destroy_cq;
    __typeof__(ibv_destroy_srq) *destroy_srq;
    __typeof__(ibv_event_type_str) *event_type_str;
    __typeof__(ibv_free_device_list) *free_device_list;
    __typeof__(ibv_get_async_event) *get_async_event;
    __typeof__(ibv_get_cq_event) *get_cq_event;
    __typeof__(ibv_get_device_list) *get_device_list;
    __typeof__(ibv_get_device_name) *get_device_name;
    __typeof__(ibv_modify_qp) *modify_qp;
    __typeof__(ibv_node_type_str) *node_type_str;
    __typeof__(ibv_open_device) *open_device;
    __typeof__(ibv_port_state_str) *port_state_str;
    __typeof__(ibv_query_device) *query_device;
    __typeof__(ibv_query_gid) *query_gid;
    __typeof__(ibv_query_port) *query_port;
    __typeof__(ibv_reg_mr_iova2) *reg_mr_iova2;
    /* Optional (rdma-core 34 and later): NULL when the library lacks it. */
    __typeof__(ibv_reg_dmabuf_mr) *reg_dmabuf_mr;
    __typeof__(ibv_wc_status_str) *wc_status_str;
} ps__ibv_api_t;

typedef struct {
    __typeof__(rdma_accept) *accept;
    __typeof__(rdma_ack_cm_event) *ack_cm_event;
    __typeof__(rdma_bind_addr) *bind_addr;
    __typeof__(rdma_connect) *connect;
    __typeof__(rdma_create_event_channel) *create_event_channel;
    __typeof__(rdma_create_id) *create_id;
    __typeof__(rdma_create_qp) *create_qp;
    __typeof__(rdma_destroy_event_channel) *destroy_event_channel;
    __typeof__(rdma_destroy_id) *destroy_id;
    __typeof__(rdma_destroy_qp) *destroy_qp;
    __typeof__(rdma_disconnect) *disconnect;
    __typeof__(rdma_event_str) *event_str;
    __typeof__(rdma_get_cm_event) *get_cm_event;
    __typeof__(rdma_listen) *listen;
    __typeof__(rdma_reject) *reject;
    __typeof__(rdma_resolve_addr) *resolve_addr;
    __typeof__(rdma_resolve_route) *resolve_route;
} ps__rdmacm_api_t;

extern ps__ibv_api_t ps__ibv_api;
extern ps__rdmacm_api_t ps__rdmacm_api;

/* Load each library once per process (later calls return the first
 * result; librdmacm loads libibverbs first), keeping the process's fatal
 * signal dispositions. PS_ERR_UNSUPPORTED with why = "libibverbs.so.1 not
 * found (...)" when it cannot. */
ps_status_t ps__ibv_dl_load(char *why, size_t cap);
ps_status_t ps__rdmacm_dl_load(char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#ifndef PS__VERBS_DL_NO_MACROS
/* Macros over static inline functions of verbs.h that call exported
 * symbols; the same logic over the table. */
#undef ibv_reg_mr
#define ibv_reg_mr(_pd, _addr, _len, _access) \
    ps__ibv_api.reg_mr_iova2(_pd, _addr, _len, (uintptr_t)(_addr), (unsigned int)(_access))

static inline int ps__ibv_query_port(struct ibv_context *context, uint8_t port_num,
                                     struct ibv_port_attr *port_attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, query_port);
    if (vctx == NULL) {
        memset(port_attr, 0, sizeof(*port_attr));
        return ps__ibv_api.query_port(context, port_num,
                                      (struct _compat_ibv_port_attr *)port_attr);
    }
    return vctx->query_port(context, port_num, port_attr, sizeof(*port_attr));
}
#undef ibv_query_port
#define ibv_query_port(_ctx, _port, _attr) ps__ibv_query_port(_ctx, _port, _attr)

#define ibv_ack_async_event(...) ps__ibv_api.ack_async_event(__VA_ARGS__)
#define ibv_ack_cq_events(...) ps__ibv_api.ack_cq_events(__VA_ARGS__)
#define ibv_alloc_pd(...) ps__ibv_api.alloc_pd(__VA_ARGS__)
#define ibv_close_device(...) ps__ibv_api.close_device(__VA_ARGS__)
#define ibv_create_comp_channel(...) ps__ibv_api.create_comp_channel(__VA_ARGS__)
#define ibv_create_cq(...) ps__ibv_api.create_cq(__VA_ARGS__)
#define ibv_create_srq(...) ps__ibv_api.create_srq(__VA_ARGS__)
#define ibv_dealloc_pd(...) ps__ibv_api.dealloc_pd(__VA_ARGS__)
#define ibv_dereg_mr(...) ps__ibv_api.dereg_mr(__VA_ARGS__)
#define ibv_destroy_comp_channel(...) ps__ibv_api.destroy_comp_channel(__VA_ARGS__)
#define ibv_destroy_cq(...) ps__ibv_api.destroy_cq(__VA_ARGS__)
#define ibv_destroy_srq(...) ps__ibv_api.destroy_srq(__VA_ARGS__)
#define ibv_event_type_str(...) ps__ibv_api.event_type_str(__VA_ARGS__)
#define ibv_free_device_list(...) ps__ibv_api.free_device_list(__VA_ARGS__)
#define ibv_get_async_event(...) ps__ibv_api.get_async_event(__VA_ARGS__)
#define ibv_get_cq_event(...) ps__ibv_api.get_cq_event(__VA_ARGS__)
#define ibv_get_device_list(...) ps__ibv_api.get_device_list(__VA_ARGS__)
#define ibv_get_device_name(...) ps__ibv_api.get_device_name(__VA_ARGS__)
#define ibv_modify_qp(...) ps__ibv_api.modify_qp(__VA_ARGS__)
#define ibv_node_type_str(...) ps__ibv_api.node_type_str(__VA_ARGS__)
#define ibv_open_device(...) ps__ibv_api.open_device(__VA_ARGS__)
#define ibv_port_state_str(...) ps__ibv_api.port_state_str(__VA_ARGS__)
#define ibv_query_device(...) ps__ibv_api.query_device(__VA_ARGS__)
#define ibv_query_gid(...) ps__ibv_api.query_gid(__VA_ARGS__)
#define ibv_reg_mr_iova2(...) ps__ibv_api.reg_mr_iova2(__VA_ARGS__)
#define ibv_wc_status_str(...) ps__ibv_api.wc_status_str(__VA_ARGS__)
#define rdma_accept(...) ps__rdmacm_api.accept(__VA_ARGS__)
#define rdma_ack_cm_event(...) ps__rdmacm_api.ack_cm_event(__VA_ARGS__)
#define rdma_bind_addr(...) ps__rdmacm_api.bind_addr(__VA_ARGS__)
#define rdma_connect(...) ps__rdmacm_api.connect(__VA_ARGS__)
#define rdma_create_event_channel(...) ps__rdmacm_api.create_event_channel(__VA_ARGS__)
#define rdma_create_id(...) ps__rdmacm_api.create_id(__VA_ARGS__)
#define rdma_create_qp(...) ps__rdmacm_api.create_qp(__VA_ARGS__)
#define rdma_destroy_event_channel(...) ps__rdmacm_api.destroy_event_channel(__VA_ARGS__)
#define rdma_destroy_id(...) ps__rdmacm_api.destroy_id(__VA_ARGS__)
#define rdma_destroy_qp(...) ps__rdmacm_api.destroy_qp(__VA_ARGS__)
#define rdma_disconnect(...) ps__rdmacm_api.disconnect(__VA_ARGS__)
#define rdma_event_str(...) ps__rdmacm_api.event_str(__VA_ARGS__)
#define rdma_get_cm_event(...) ps__rdmacm_api.get_cm_event(__VA_ARGS__)
#define rdma_listen(...) ps__rdmacm_api.listen(__VA_ARGS__)
#define rdma_reject(...) ps__rdmacm_api.reject(__VA_ARGS__)
#define rdma_resolve_addr(...) ps__rdmacm_api.resolve_addr(__VA_ARGS__)
#define rdma_resolve_route(...) ps__rdmacm_api.resolve_route(__VA_ARGS__)
#endif

#endif /* PS_RDMA_VERBS_VERBS_DL_H_ */

/* libibverbs and librdmacm into ps__ibv_api and ps__rdmacm_api, once. */
#define PS__VERBS_DL_NO_MACROS
#include "ps/rdma/verbs/verbs_dl.h"

#include <dlfcn.h>
#include <string.h>

#include "ps/rdma/common/dl.h"

ps__ibv_api_t ps__ibv_api;
ps__rdmacm_api_t ps__rdmacm_api;

#define IBV(_name) {"ibv_" #_name, offsetof(ps__ibv_api_t, _name)}
#define CM(_name) {"rdma_" #_name, offsetof(ps__rdmacm_api_t, _name)}

static const ps__dl_sym_t ibv_syms[] = {
    IBV(ack_async_event),
    IBV(ack_cq_events),
    IBV(alloc_pd),
    IBV(close_device),
    IBV(create_comp_channel),
    IBV(create_cq),
    IBV(create_srq),
    IBV(dealloc_pd),
    IBV(dereg_mr),
    IBV(destroy_comp_channel),
    IBV(destroy_cq),
    IBV(destroy_srq),
    IBV(event_type_str),
    IBV(free_device_list),
    IBV(get_async_event),
    IBV(get_cq_event),
    IBV(get_device_list),
    IBV(get_device_name),
    IBV(modify_qp),
    IBV(node_type_str),
    IBV(open_device),
    IBV(port_state_str),
    IBV(query_device),
    IBV(query_gid),
    IBV(query_port),
    IBV(reg_mr_iova2),
    IBV(wc_status_str),
};

static const ps__dl_sym_t cm_syms[] = {
    CM(accept),
    CM(ack_cm_event),
    CM(bind_addr),
    CM(connect),
    CM(create_event_channel),
    CM(create_id),
    CM(create_qp),
    CM(destroy_event_channel),
    CM(destroy_id),
    CM(destroy_qp),
    CM(disconnect),
    CM(event_str),
    CM(get_cm_event),
    CM(listen),
    CM(reject),
    CM(resolve_addr),
    CM(resolve_route),
};

static ps__dl_once_t ibv_lib = PS__DL_ONCE_INIT;
static ps__dl_once_t cm_lib = PS__DL_ONCE_INIT;

static void ibv_load_once(void)
{
    ibv_lib.status = ps__dl_load(PS_IBV_SONAME, "ibverbs", &ps__ibv_api, ibv_syms,
                                 sizeof(ibv_syms) / sizeof(ibv_syms[0]), ibv_lib.why,
                                 sizeof(ibv_lib.why));
    if (ibv_lib.status != PS_OK)
        return;
    /* Optional entry points: the library is loaded already. */
    void *h = dlopen(PS_IBV_SONAME, RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL) {
        void *p = dlsym(h, "ibv_reg_dmabuf_mr");
        memcpy(&ps__ibv_api.reg_dmabuf_mr, &p, sizeof(p));
        dlclose(h);
    }
}

static void cm_load_once(void)
{
    if (ps__ibv_dl_load(cm_lib.why, sizeof(cm_lib.why)) != PS_OK) {
        cm_lib.status = PS_ERR_UNSUPPORTED;
        return;
    }
    cm_lib.status = ps__dl_load(PS_RDMACM_SONAME, "ibverbs", &ps__rdmacm_api, cm_syms,
                                sizeof(cm_syms) / sizeof(cm_syms[0]), cm_lib.why,
                                sizeof(cm_lib.why));
}

ps_status_t ps__ibv_dl_load(char *why, size_t cap)
{
    return ps__dl_once(&ibv_lib, ibv_load_once, why, cap);
}

ps_status_t ps__rdmacm_dl_load(char *why, size_t cap)
{
    return ps__dl_once(&cm_lib, cm_load_once, why, cap);
}

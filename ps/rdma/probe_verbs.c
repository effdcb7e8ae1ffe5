/* Probes of the ibverbs devices and of the rdma_cm service. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/rdma/probe.h"
#include "ps/rdma/verbs/verbs_dl.h"

/* The van's own component: a probe runs without the van linked in. */
static PS_LOG_COMPONENT(probe_log, "rdma")

/* Querying a few hundred GIDs per port is enough to tell "has addresses". */
#define PS_PROBE_GID_SCAN_MAX 256

static const char *probe_transport_name(enum ibv_transport_type t)
{
    switch (t) {
    case IBV_TRANSPORT_IB:
        return "infiniband";
    case IBV_TRANSPORT_IWARP:
        return "iwarp";
    case IBV_TRANSPORT_USNIC:
        return "usnic";
    case IBV_TRANSPORT_USNIC_UDP:
        return "usnic_udp";
    case IBV_TRANSPORT_UNSPECIFIED:
        return "unspecified";
    default:
        return "unknown";
    }
}

static const char *probe_link_layer_name(uint8_t link_layer)
{
    switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND:
        return "infiniband";
    case IBV_LINK_LAYER_ETHERNET:
        return "ethernet";
    default:
        return "unspecified";
    }
}

static int probe_mtu_bytes(enum ibv_mtu mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

static void probe_port(struct ibv_context *ctx, int port_num, ps_probe_ib_port_t *port)
{
    struct ibv_port_attr attr;
    union ibv_gid gid;
    static const union ibv_gid zero_gid;
    int scan;

    memset(port, 0, sizeof(*port));
    port->port_num = port_num;
    if (ibv_query_port(ctx, (uint8_t)port_num, &attr) != 0) {
        snprintf(port->state, sizeof(port->state), "unknown");
        snprintf(port->link_layer, sizeof(port->link_layer), "unknown");
        return;
    }
    snprintf(port->state, sizeof(port->state), "%s", ibv_port_state_str(attr.state));
    snprintf(port->link_layer, sizeof(port->link_layer), "%s",
             probe_link_layer_name(attr.link_layer));
    port->active_mtu = probe_mtu_bytes(attr.active_mtu);
    port->gid_table_len = attr.gid_tbl_len;
    scan = attr.gid_tbl_len < PS_PROBE_GID_SCAN_MAX ? attr.gid_tbl_len : PS_PROBE_GID_SCAN_MAX;
    for (int i = 0; i < scan; ++i) {
        if (ibv_query_gid(ctx, (uint8_t)port_num, i, &gid) == 0 &&
            memcmp(&gid, &zero_gid, sizeof(gid)) != 0) {
            port->gid_count++;
        }
    }
}

static void probe_device(struct ibv_device *dev, ps_probe_ib_device_t *out)
{
    struct ibv_device_attr attr;
    struct ibv_context *ctx;
    int err;

    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", ibv_get_device_name(dev));
    snprintf(out->node_type, sizeof(out->node_type), "%s", ibv_node_type_str(dev->node_type));
    snprintf(out->transport, sizeof(out->transport), "%s",
             probe_transport_name(dev->transport_type));

    ctx = ibv_open_device(dev);
    if (ctx == NULL) {
        snprintf(out->reason, sizeof(out->reason), "ibv_open_device: %s", strerror(errno));
        return;
    }
    err = ibv_query_device(ctx, &attr);
    if (err != 0) {
        snprintf(out->reason, sizeof(out->reason), "ibv_query_device: %s", strerror(err));
        ibv_close_device(ctx);
        return;
    }
    out->opened = true;
    snprintf(out->fw_ver, sizeof(out->fw_ver), "%s", attr.fw_ver);
    out->port_count = attr.phys_port_cnt;
    for (int p = 1; p <= attr.phys_port_cnt && out->ports_listed < PS_PROBE_IB_MAX_PORTS; ++p) {
        probe_port(ctx, p, &out->ports[out->ports_listed++]);
    }
    ibv_close_device(ctx);
}

ps_status_t ps_probe_ibverbs(ps_probe_ibverbs_t *info_p)
{
    struct ibv_device **list;
    int n = 0;

    if (info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(info_p, 0, sizeof(*info_p));
    char why[sizeof(info_p->reason)];
    if (ps__ibv_dl_load(why, sizeof(why)) != PS_OK) {
        snprintf(info_p->reason, sizeof(info_p->reason), "%s", why);
        ps_debug(probe_log, "no ibverbs: %s", why);
        return PS_OK;
    }
    errno = 0;
    list = ibv_get_device_list(&n);
    if (list == NULL) {
        /* ENOSYS: the kernel has no uverbs support at all. */
        snprintf(info_p->reason, sizeof(info_p->reason), "no ibverbs devices: %s",
                 errno != 0 ? strerror(errno) : "ibv_get_device_list failed");
        ps_debug(probe_log, "%s", info_p->reason);
        return PS_OK;
    }
    if (n <= 0) {
        snprintf(info_p->reason, sizeof(info_p->reason),
                 "no ibverbs devices: none listed (no RDMA NIC or driver loaded)");
        ps_debug(probe_log, "%s", info_p->reason);
        ibv_free_device_list(list);
        return PS_OK;
    }
    for (int i = 0; i < n; ++i) {
        if (info_p->device_count == PS_PROBE_IB_MAX_DEVICES) {
            info_p->truncated = true;
            break;
        }
        probe_device(list[i], &info_p->devices[info_p->device_count++]);
    }
    info_p->available = true;
    ibv_free_device_list(list);
    return PS_OK;
}

ps_status_t ps_probe_rdmacm(ps_probe_rdmacm_t *info_p)
{
    struct rdma_event_channel *channel;
    struct rdma_cm_id *id = NULL;

    if (info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(info_p, 0, sizeof(*info_p));
    char why[sizeof(info_p->reason)];
    if (ps__rdmacm_dl_load(why, sizeof(why)) != PS_OK) {
        snprintf(info_p->reason, sizeof(info_p->reason), "%s", why);
        ps_debug(probe_log, "rdma_cm unavailable: %s", why);
        return PS_OK;
    }
    errno = 0;
    channel = rdma_create_event_channel();
    if (channel == NULL) {
        /* ENODEV: no /dev/infiniband/rdma_cm (module not loaded, no device). */
        snprintf(info_p->reason, sizeof(info_p->reason), "rdma_create_event_channel: %s",
                 errno != 0 ? strerror(errno) : "failed");
        ps_debug(probe_log, "rdma_cm unavailable: %s", info_p->reason);
        return PS_OK;
    }
    if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP) != 0) {
        snprintf(info_p->reason, sizeof(info_p->reason), "rdma_create_id: %s",
                 strerror(errno));
        ps_debug(probe_log, "rdma_cm unavailable: %s", info_p->reason);
    } else {
        info_p->available = true;
        rdma_destroy_id(id);
    }
    rdma_destroy_event_channel(channel);
    return PS_OK;
}

/*
 * Probe of UCX: version, and every transport on every device, through the
 * uct component -> memory domain -> transport resource lists (the structured
 * form of what `ucx_info -d` prints).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/rdma/probe.h"
#include "ps/rdma/ucx/ucx_dl.h"

/* The van's own component: a probe runs without the van linked in. */
static PS_LOG_COMPONENT(probe_log, "ucx")

static const char *probe_ucx_device_type(uct_device_type_t type)
{
    switch (type) {
    case UCT_DEVICE_TYPE_NET:
        return "net";
    case UCT_DEVICE_TYPE_SHM:
        return "shm";
    case UCT_DEVICE_TYPE_ACC:
        return "acc";
    case UCT_DEVICE_TYPE_SELF:
        return "self";
    default:
        return "?";
    }
}

/* Adds the transports of one memory domain. A domain that cannot be opened
 * is skipped: it offers nothing usable, and the component stays listed. */
static void probe_ucx_md(ps_probe_ucx_t *info, uct_component_h component,
                         const char *component_name, const char *md_name)
{
    uct_tl_resource_desc_t *tls = NULL;
    uct_md_config_t *config = NULL;
    unsigned num_tls = 0;
    uct_md_h md = NULL;
    ucs_status_t st;

    st = uct_md_config_read(component, NULL, NULL, &config);
    if (st != UCS_OK) {
        ps_debug(probe_log, "ucx md %s: config: %s", md_name, ucs_status_string(st));
        return;
    }
    st = uct_md_open(component, md_name, config, &md);
    uct_config_release(config);
    if (st != UCS_OK) {
        ps_debug(probe_log, "ucx md %s: open: %s", md_name, ucs_status_string(st));
        return;
    }
    st = uct_md_query_tl_resources(md, &tls, &num_tls);
    if (st != UCS_OK) {
        ps_debug(probe_log, "ucx md %s: resources: %s", md_name, ucs_status_string(st));
        uct_md_close(md);
        return;
    }
    for (unsigned t = 0; t < num_tls; ++t) {
        ps_probe_ucx_resource_t *r;

        if (info->resource_count == PS_PROBE_UCX_MAX_RESOURCES) {
            info->truncated = true;
            break;
        }
        r = &info->resources[info->resource_count++];
        snprintf(r->component, sizeof(r->component), "%s", component_name);
        snprintf(r->md, sizeof(r->md), "%s", md_name);
        snprintf(r->transport, sizeof(r->transport), "%s", tls[t].tl_name);
        snprintf(r->device, sizeof(r->device), "%s", tls[t].dev_name);
        snprintf(r->device_type, sizeof(r->device_type), "%s",
                 probe_ucx_device_type(tls[t].dev_type));
    }
    uct_release_tl_resource_list(tls);
    uct_md_close(md);
}

static void probe_ucx_component(ps_probe_ucx_t *info, uct_component_h component)
{
    uct_md_resource_desc_t *mds;
    uct_component_attr_t attr;
    ucs_status_t st;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    st = uct_component_query(component, &attr);
    if (st != UCS_OK) {
        ps_debug(probe_log, "ucx component query: %s", ucs_status_string(st));
        return;
    }
    if (info->component_count < PS_PROBE_UCX_MAX_COMPONENTS) {
        snprintf(info->components[info->component_count++], sizeof(info->components[0]), "%s",
                 attr.name);
    } else {
        info->truncated = true;
    }
    if (attr.md_resource_count == 0) {
        return; /* e.g. "ib" with no RDMA device */
    }
    mds = calloc(attr.md_resource_count, sizeof(*mds));
    if (mds == NULL) {
        info->truncated = true;
        return;
    }
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds;
    st = uct_component_query(component, &attr);
    if (st == UCS_OK) {
        for (unsigned m = 0; m < attr.md_resource_count; ++m) {
            probe_ucx_md(info, component, attr.name, mds[m].md_name);
        }
    }
    free(mds);
}

ps_status_t ps_probe_ucx(ps_probe_ucx_t *info_p)
{
    uct_component_h *components = NULL;
    unsigned num_components = 0;
    ucs_status_t st;

    if (info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(info_p, 0, sizeof(*info_p));
    char why[sizeof(info_p->reason)];
    if (ps__ucx_dl_load(why, sizeof(why)) != PS_OK) {
        snprintf(info_p->reason, sizeof(info_p->reason), "%s", why);
        ps_debug(probe_log, "no ucx: %s", why);
        return PS_OK;
    }
    ucp_get_version(&info_p->major, &info_p->minor, &info_p->release);
    snprintf(info_p->version, sizeof(info_p->version), "%s", ucp_get_version_string());

    st = uct_query_components(&components, &num_components);
    if (st != UCS_OK) {
        snprintf(info_p->reason, sizeof(info_p->reason), "uct_query_components: %s",
                 ucs_status_string(st));
        ps_debug(probe_log, "no ucx transports: %s", info_p->reason);
        return PS_OK;
    }
    for (unsigned c = 0; c < num_components; ++c) {
        probe_ucx_component(info_p, components[c]);
    }
    uct_release_component_list(components);
    if (info_p->resource_count == 0) {
        snprintf(info_p->reason, sizeof(info_p->reason),
                 "no ucx transports: %u components, none with a device", num_components);
    } else {
        info_p->available = true;
    }
    return PS_OK;
}

const ps_probe_ucx_resource_t *ps_probe_ucx_find(const ps_probe_ucx_t *info,
                                                 const char *transport)
{
    if (info == NULL || transport == NULL) {
        return NULL;
    }
    for (int i = 0; i < info->resource_count; ++i) {
        if (strcmp(info->resources[i].transport, transport) == 0) {
            return &info->resources[i];
        }
    }
    return NULL;
}

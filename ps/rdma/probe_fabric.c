/* Probe of the libfabric providers: one entry per (provider, fabric) pair. */
#include <stdio.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/rdma/fabric/fabric_dl.h"
#include "ps/rdma/probe.h"

/* The van's own component: a probe runs without the van linked in. */
static PS_LOG_COMPONENT(probe_log, "fabric")

/* The API this code was written against; older libraries refuse it. */
#define PS_PROBE_FI_API FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

static ps_probe_fabric_entry_t *probe_fabric_slot(ps_probe_fabric_t *info, const char *prov,
                                                  const char *fabric)
{
    ps_probe_fabric_entry_t *e;

    for (int i = 0; i < info->entry_count; ++i) {
        e = &info->entries[i];
        if (strcmp(e->provider, prov) == 0 && strcmp(e->fabric, fabric) == 0) {
            return e;
        }
    }
    if (info->entry_count == PS_PROBE_FABRIC_MAX) {
        info->truncated = true;
        return NULL;
    }
    e = &info->entries[info->entry_count++];
    snprintf(e->provider, sizeof(e->provider), "%s", prov);
    snprintf(e->fabric, sizeof(e->fabric), "%s", fabric);
    return e;
}

ps_status_t ps_probe_fabric(ps_probe_fabric_t *info_p)
{
    struct fi_info *list = NULL;
    int rc;

    if (info_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    memset(info_p, 0, sizeof(*info_p));
    char why[sizeof(info_p->reason)];
    if (ps__fab_dl_load(why, sizeof(why)) != PS_OK) {
        snprintf(info_p->reason, sizeof(info_p->reason), "%s", why);
        ps_debug(probe_log, "no libfabric: %s", why);
        return PS_OK;
    }
    info_p->version = fi_version();
    /* No hints: every provider reports everything it can do. */
    rc = fi_getinfo(PS_PROBE_FI_API, NULL, NULL, 0, NULL, &list);
    if (rc != 0) {
        snprintf(info_p->reason, sizeof(info_p->reason), "fi_getinfo: %s", fi_strerror(-rc));
        ps_debug(probe_log, "no libfabric providers: %s", info_p->reason);
        return PS_OK;
    }
    for (struct fi_info *i = list; i != NULL; i = i->next) {
        const char *prov = i->fabric_attr && i->fabric_attr->prov_name ?
                               i->fabric_attr->prov_name : "?";
        const char *fabric = i->fabric_attr && i->fabric_attr->name ?
                                 i->fabric_attr->name : "?";
        ps_probe_fabric_entry_t *e = probe_fabric_slot(info_p, prov, fabric);

        if (e == NULL) {
            continue;
        }
        if (i->fabric_attr) {
            e->provider_version = i->fabric_attr->prov_version;
        }
        if (i->ep_attr) {
            e->ep_msg |= i->ep_attr->type == FI_EP_MSG;
            e->ep_rdm |= i->ep_attr->type == FI_EP_RDM;
            e->ep_dgram |= i->ep_attr->type == FI_EP_DGRAM;
        }
        e->rma |= (i->caps & FI_RMA) != 0;
        e->tagged |= (i->caps & FI_TAGGED) != 0;
        e->hmem |= (i->caps & FI_HMEM) != 0;
    }
    fi_freeinfo(list);
    if (info_p->entry_count == 0) {
        snprintf(info_p->reason, sizeof(info_p->reason), "fi_getinfo listed no providers");
    } else {
        info_p->available = true;
    }
    return PS_OK;
}

const ps_probe_fabric_entry_t *ps_probe_fabric_find(const ps_probe_fabric_t *info,
                                                    const char *provider)
{
    if (info == NULL || provider == NULL) {
        return NULL;
    }
    for (int i = 0; i < info->entry_count; ++i) {
        if (strcmp(info->entries[i].provider, provider) == 0) {
            return &info->entries[i];
        }
    }
    return NULL;
}

/*
 * ps_info: what this build of ps is and what this machine offers it.
 *
 *   ps_info             everything below
 *   ps_info -c          the config table: every variable, its value in
 *                       effect and where it came from, default, help
 *   ps_info -s          only the variables that are set
 *   ps_info -d          devices: vans, memory kinds, ibverbs, rdma_cm,
 *                       libfabric providers, UCX transports
 *   ps_info --markdown  the config table as the README's reference section
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/status.h"
#include "ps/gpu/mem.h"
#include "ps/net/van/van.h"
#include "ps/rdma/probe.h"
#include "ps/version.h"

static void print_vans(void)
{
    const ps_van_component_t *vans[32];
    size_t n = ps_van_list(vans, 32);
    const char *selected = NULL;
    ps_status_t st = ps_van_select_name(&selected);

    printf("vans compiled in:\n");
    for (size_t i = 0; i < n && i < 32; ++i) {
        char why[160] = "";
        int unavailable = vans[i]->unavailable ? vans[i]->unavailable(why, sizeof(why)) : 0;
        printf("  %-8s aliases %-10s %s%s\n", vans[i]->name,
               vans[i]->aliases && *vans[i]->aliases ? vans[i]->aliases : "-",
               unavailable ? "unavailable: " : "available", unavailable ? why : "");
        ps_probe_van_libs_t libs;
        if (ps_probe_van_libs(vans[i]->name, &libs) == PS_OK && libs.lib_count > 0) {
            printf("    loads at open:");
            for (int l = 0; l < libs.lib_count; ++l)
                printf(" %s (%s)", libs.libs[l].name,
                       libs.libs[l].loaded ? "loads" : libs.libs[l].reason);
            printf("\n");
        }
    }
    if (n == 0) {
        printf("  none\n");
    }
    if (st == PS_OK) {
        printf("van selected by the environment: %s\n", selected);
    } else {
        printf("van selected by the environment: none (%s)\n", ps_status_str(st));
    }
}

static void print_mem_kinds(void)
{
    printf("memory kinds:\n");
    for (int k = 0; k < PS_MEM_KIND_COUNT; ++k) {
        ps_mem_info_t info;
        if (ps_mem_describe((ps_mem_kind_t)k, &info) != PS_OK || !info.linked) {
            if (k == PS_MEM_EMU) {
                continue; /* a test-only kind: listed only where linked */
            }
            printf("  %-8s not compiled in\n", ps_mem_kind_name((ps_mem_kind_t)k));
        } else if (info.available) {
            printf("  %-8s available, %d device(s)\n", info.name, info.device_count);
        } else {
            printf("  %-8s none: %s\n", info.name, info.reason);
        }
    }
}

static void print_ibverbs(void)
{
    ps_probe_ibverbs_t *ib = calloc(1, sizeof(*ib));
    ps_probe_rdmacm_t cm;

    if (ib == NULL || ps_probe_ibverbs(ib) != PS_OK || !ib->available || ib->device_count == 0) {
        printf("ibverbs devices: none%s%s\n", ib && *ib->reason ? ": " : "", ib ? ib->reason : "");
    } else {
        printf("ibverbs devices:\n");
        for (int i = 0; i < ib->device_count && i < PS_PROBE_IB_MAX_DEVICES; ++i) {
            const ps_probe_ib_device_t *d = &ib->devices[i];
            printf("  %-12s %s %s fw %s, %d port(s)%s%s\n", d->name, d->node_type, d->transport,
                   d->fw_ver, d->port_count, d->opened ? "" : ", cannot open: ",
                   d->opened ? "" : d->reason);
            for (int p = 0; p < d->ports_listed && p < PS_PROBE_IB_MAX_PORTS; ++p) {
                printf("    port %d %s %s mtu %d gids %d\n", d->ports[p].port_num, d->ports[p].state,
                       d->ports[p].link_layer, d->ports[p].active_mtu, d->ports[p].gid_count);
            }
        }
    }
    free(ib);
    if (ps_probe_rdmacm(&cm) == PS_OK && cm.available) {
        printf("rdma_cm: available\n");
    } else {
        printf("rdma_cm: none: %s\n", cm.reason);
    }
}

static void print_fabric(void)
{
    ps_probe_fabric_t *fi = calloc(1, sizeof(*fi));

    if (fi == NULL || ps_probe_fabric(fi) != PS_OK || !fi->available) {
        printf("libfabric providers: none%s%s\n", fi ? ": " : "", fi ? fi->reason : "");
        free(fi);
        return;
    }
    printf("libfabric %u.%u providers:\n", fi->version >> 16, fi->version & 0xffff);
    for (int i = 0; i < fi->entry_count && i < PS_PROBE_FABRIC_MAX; ++i) {
        const ps_probe_fabric_entry_t *e = &fi->entries[i];
        printf("  %-16s fabric %-22s%s%s%s%s%s%s\n", e->provider, e->fabric,
               e->ep_msg ? " msg" : "", e->ep_rdm ? " rdm" : "", e->ep_dgram ? " dgram" : "",
               e->rma ? " rma" : "", e->tagged ? " tagged" : "", e->hmem ? " hmem" : "");
    }
    if (fi->truncated) {
        printf("  (list truncated)\n");
    }
    free(fi);
}

static void print_ucx(void)
{
    ps_probe_ucx_t *ucx = calloc(1, sizeof(*ucx));

    if (ucx == NULL || ps_probe_ucx(ucx) != PS_OK || !ucx->available) {
        printf("ucx: none%s%s\n", ucx ? ": " : "", ucx ? ucx->reason : "");
        free(ucx);
        return;
    }
    printf("ucx %s transports:\n", ucx->version);
    for (int i = 0; i < ucx->resource_count && i < PS_PROBE_UCX_MAX_RESOURCES; ++i) {
        const ps_probe_ucx_resource_t *r = &ucx->resources[i];
        printf("  %-10s device %-12s (%s, md %s)\n", r->transport, r->device, r->device_type, r->md);
    }
    if (ucx->resource_count == 0) {
        printf("  none\n");
    }
    free(ucx);
}

static void print_devices(void)
{
    print_vans();
    print_mem_kinds();
    print_ibverbs();
    print_fabric();
    print_ucx();
}

/* Markdown cells must not contain a bare '|'. */
static void print_cell(const char *text)
{
    for (const char *p = text; *p; ++p) {
        if (*p == '|') {
            fputs("\\|", stdout);
        } else {
            putchar(*p);
        }
    }
}

static void print_markdown(void)
{
    const char *section = NULL;

    for (int i = 0; i < ps_config_count(); ++i) {
        const ps_config_entry_t *e = ps_config_entry((ps_config_id_t)i);
        if (section == NULL || strcmp(section, e->section) != 0) {
            section = e->section;
            printf("%s### %s\n\n| variable | type | default | meaning |\n|---|---|---|---|\n",
                   i ? "\n" : "", section);
        }
        printf("| `%s`", e->name);
        if (e->alias) {
            printf(" (also `%s`)", e->alias);
        }
        printf(" | %s | ", ps_config_type_name(e->type));
        if (*e->default_value) {
            printf("`");
            print_cell(e->default_value);
            printf("`");
        }
        printf(" | ");
        print_cell(e->help);
        printf(" |\n");
    }
}

static int usage(FILE *out)
{
    fprintf(out, "usage: ps_info [-c | -s | -d | --markdown]\n"
                 "  (none)      version, devices and the config table\n"
                 "  -c          every configuration variable with its value in effect\n"
                 "  -s          only the variables that are set\n"
                 "  -d          vans, memory kinds, RDMA devices, libfabric, UCX\n"
                 "  --markdown  the config table as Markdown (README reference)\n");
    return out == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    if (argc > 2) {
        return usage(stderr);
    }
    if (!strcmp(mode, "-h") || !strcmp(mode, "--help")) {
        return usage(stdout);
    }
    if (!strcmp(mode, "--markdown")) {
        print_markdown();
        return 0;
    }
    if (!strcmp(mode, "-d")) {
        print_devices();
        return 0;
    }
    if (!strcmp(mode, "-c") || !strcmp(mode, "-s")) {
        fflush(stdout);
        return ps_config_print(STDOUT_FILENO, !strcmp(mode, "-s")) == PS_OK ? 0 : 1;
    }
    if (*mode) {
        return usage(stderr);
    }
    printf("ps %s\n\n", PS_VERSION_STRING);
    print_devices();
    printf("\nconfiguration (value [source] help):\n");
    fflush(stdout);
    if (ps_config_print(STDOUT_FILENO, 0) != PS_OK) {
        return 1;
    }
    /* Report every variable that is set but does not parse. */
    return ps_config_validate() == PS_OK ? 0 : 1;
}

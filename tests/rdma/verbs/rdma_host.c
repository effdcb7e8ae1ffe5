#include "tests/rdma/verbs/rdma_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ps/base/sockaddr.h"
#include "ps/net/van/van.h"
#include "ps/rdma/verbs/verbs_iface.h"

static int has_addr(void *arg, const char *ifname)
{
    (void)arg;
    ps_sockaddr_t a;
    return ps_if_addr(ifname, AF_INET, &a) == PS_OK;
}

int ps_test_rdma_host(char *host, size_t host_len, char *why, size_t why_len)
{
    /* Asked directly, not through ps_van_find, so that a skip is one line. */
    const ps_van_component_t *list[32];
    size_t n = ps_van_list(list, 32);
    const ps_van_component_t *c = NULL;
    for (size_t i = 0; i < n && i < 32; i++) {
        if (strcmp(list[i]->name, "ibverbs") == 0)
            c = list[i];
    }
    if (c == NULL) {
        snprintf(why, why_len, "the ibverbs van is not linked in");
        return 0;
    }
    if (c->unavailable != NULL && c->unavailable(why, why_len) != 0)
        return 0;
    const char *env = getenv("PS_TEST_RDMA_HOST");
    if (env != NULL && env[0] != '\0') {
        snprintf(host, host_len, "%s", env);
        return 1;
    }
    char ifname[64], reason[256];
    if (ps__vb_pick_interface("/sys", NULL, has_addr, NULL, ifname, sizeof(ifname), reason,
                              sizeof(reason)) != PS_OK) {
        snprintf(why, why_len, "%s (or set PS_TEST_RDMA_HOST)", reason);
        return 0;
    }
    ps_sockaddr_t a;
    if (ps_if_addr(ifname, AF_INET, &a) != PS_OK ||
        ps_sockaddr_format_host(&a, host, host_len) != PS_OK) {
        snprintf(why, why_len, "no IPv4 address on RDMA interface %s", ifname);
        return 0;
    }
    return 1;
}

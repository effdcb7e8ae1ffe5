/*
 * For the hardware test scripts: whether the ibverbs van can run here and
 * on which address. Prints one line and exits 0:
 *   HOST <address>     an RDMA interface's address (PS_TEST_RDMA_HOST if
 *                      set, else the first RDMA netdev with an address)
 *   SKIP <reason>      no RDMA device, or none with an address
 */
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

int main(void)
{
    const ps_van_component_t *list[32];
    size_t n = ps_van_list(list, 32);
    const ps_van_component_t *c = NULL;
    for (size_t i = 0; i < n && i < 32; i++) {
        if (strcmp(list[i]->name, "ibverbs") == 0)
            c = list[i];
    }
    char why[256] = "";
    if (c == NULL) {
        printf("SKIP the ibverbs van is not linked in\n");
        return 0;
    }
    if (c->unavailable != NULL && c->unavailable(why, sizeof(why)) != 0) {
        printf("SKIP %s\n", why);
        return 0;
    }
    const char *host = getenv("PS_TEST_RDMA_HOST");
    if (host != NULL && host[0] != '\0') {
        printf("HOST %s\n", host);
        return 0;
    }
    char ifname[64];
    if (ps__vb_pick_interface("/sys", NULL, has_addr, NULL, ifname, sizeof(ifname), why,
                              sizeof(why)) != PS_OK) {
        printf("SKIP %s (or set PS_TEST_RDMA_HOST)\n", why);
        return 0;
    }
    ps_sockaddr_t a;
    char text[PS_SOCKADDR_STRLEN];
    if (ps_if_addr(ifname, AF_INET, &a) != PS_OK ||
        ps_sockaddr_format_host(&a, text, sizeof(text)) != PS_OK) {
        printf("SKIP no address on RDMA interface %s\n", ifname);
        return 0;
    }
    printf("HOST %s\n", text);
    return 0;
}

/*
 * For the hardware test scripts: whether the ibverbs van can run here and
 * on which address. Prints one line and exits 0:
 *   HOST <address>     an RDMA interface's address (rdma_host.h)
 *   SKIP <reason>      no RDMA device, or none with an address
 */
#include <stdio.h>

#include "ps/base/sockaddr.h"
#include "tests/rdma/verbs/rdma_host.h"

int main(void)
{
    char host[PS_SOCKADDR_STRLEN], why[512];
    if (ps_test_rdma_host(host, sizeof(host), why, sizeof(why)))
        printf("HOST %s\n", host);
    else
        printf("SKIP %s\n", why);
    return 0;
}

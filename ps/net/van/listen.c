/*
 * The listener's address and ports (listen.h).
 */
#include "ps/net/van/listen.h"

#include <sys/socket.h>

#include "ps/net/van/van.h"

#define RANDOM_PORT_BASE 10000
#define RANDOM_PORT_SPAN 40000

ps_status_t ps_van_listen_addr(const ps_node_t *node, int bind_any, ps_log_component_t log,
                               ps_sockaddr_t *addr_p)
{
    int have_host = node->hostname[0] != '\0';
    if (have_host) {
        ps_status_t st = ps_sockaddr_resolve(node->hostname, 0, AF_UNSPEC, addr_p);
        if (st != PS_OK) {
            ps_error(log, "bind: cannot use host '%s' (%s)", node->hostname, ps_status_str(st));
            return st;
        }
    }
    if (bind_any || !have_host) {
        return ps_sockaddr_wildcard(have_host ? ps_sockaddr_family(addr_p) : AF_INET, 0, addr_p);
    }
    return PS_OK;
}

ps_status_t ps_van_listen_ports(const ps_node_t *node, int max_retry, ps_log_component_t log,
                                ps_van_listen_ports_t *ports_p)
{
    int fixed = node->num_ports > 0 ? node->ports[0] : 0;
    if (fixed < 0 || fixed > 65535) {
        ps_error(log, "bind: port %d is out of range", fixed);
        return PS_ERR_INVALID_ARG;
    }
    ports_p->fixed = fixed;
    ports_p->attempts = fixed != 0 ? 1 : (max_retry > 0 ? max_retry : 0) + 1;
    return PS_OK;
}

int ps_van_listen_port(const ps_van_listen_ports_t *ports)
{
    if (ports->fixed != 0) {
        return ports->fixed;
    }
    return RANDOM_PORT_BASE + (int)(ps_van_random() % RANDOM_PORT_SPAN);
}

/*
 * A van's listening and peer addresses (addr.h).
 */
#include "ps/net/van/addr.h"

#include <stdio.h>
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

ps_status_t ps_van_listen_on_port(const ps_node_t *node, int max_retry, int is_scheduler,
                                  ps_log_component_t log, ps_van_listen_try_t try_one,
                                  void *arg, const char *taken, int *port_p, char *where,
                                  size_t cap)
{
    int fixed = node->num_ports > 0 ? node->ports[0] : 0;
    if (fixed < 0 || fixed > 65535) {
        ps_error(log, "bind: port %d is out of range", fixed);
        return PS_ERR_INVALID_ARG;
    }
    int attempts = fixed != 0 ? 1 : (max_retry > 0 ? max_retry : 0) + 1;
    for (int i = 0; i < attempts; ++i) {
        int port = fixed;
        if (port == 0) {
            port = RANDOM_PORT_BASE + (int)(ps_van_random() % RANDOM_PORT_SPAN);
        }
        snprintf(where, cap, "?");
        ps_status_t st = try_one(arg, port, fixed == 0, where, cap);
        if (st == PS_OK) {
            *port_p = port;
            return PS_OK;
        }
        if (st != PS_ERR_ADDRESS_IN_USE) {
            return st;
        }
        if (fixed != 0) {
            const char *advice = taken;
            if (advice == NULL) {
                advice = is_scheduler
                             ? "give the job another DMLC_PS_ROOT_PORT"
                             : "choose another DMLC_PORT or leave it unset for a random one";
            }
            ps_error(log, "cannot listen on %s: address already in use (port %d is taken; %s)",
                     where, port, advice);
            return PS_ERR_ADDRESS_IN_USE;
        }
    }
    ps_error(log, "cannot listen on %s: no free port after %d random tries (PS_BIND_RETRIES)",
             node->hostname[0] ? node->hostname : "*", attempts);
    return PS_ERR_ADDRESS_IN_USE;
}

void ps_van_listen_where(ps_sockaddr_t *addr, int port, char *where, size_t cap)
{
    ps_sockaddr_set_port(addr, (uint16_t)port);
    if (ps_sockaddr_format(addr, where, cap) != PS_OK) {
        snprintf(where, cap, "?");
    }
}

void ps_van_listen_bound(ps_node_t *node, int port)
{
    node->ports[0] = port;
    if (node->num_ports == 0) {
        node->num_ports = 1;
    }
}

ps_status_t ps_van_peer_port(const ps_node_t *peer, ps_log_component_t log, int *port_p)
{
    if (peer == NULL || peer->id <= 0 || peer->id >= PS_NODE_EMPTY) {
        ps_error(log, "connect: node id %d is not a node", peer ? peer->id : -1);
        return PS_ERR_INVALID_ARG;
    }
    int port = peer->num_ports > 0 ? peer->ports[0] : 0;
    if (port <= 0 || port > 65535) {
        ps_error(log, "connect: node %d has no valid port (%d)", peer->id, port);
        return PS_ERR_INVALID_ARG;
    }
    *port_p = port;
    return PS_OK;
}

ps_status_t ps_van_peer_addr(const ps_node_t *peer, ps_log_component_t log, ps_sockaddr_t *addr_p)
{
    int port;
    ps_status_t st = ps_van_peer_port(peer, log, &port);
    if (st != PS_OK) {
        return st;
    }
    st = ps_sockaddr_resolve(peer->hostname, (uint16_t)port, AF_UNSPEC, addr_p);
    if (st != PS_OK) {
        ps_error(log, "connect: cannot resolve host '%s' of node %d (%s)", peer->hostname, peer->id,
                 ps_status_str(st));
    }
    return st;
}

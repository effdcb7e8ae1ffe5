/*
 * The addresses of a van that listens on a port and connects to its
 * peers' ports: where its listener goes for the node it binds (the node's
 * host, or the wildcard; the node's port, or random ones while they are
 * taken) and where a peer is reached. Every such van picks them the same
 * way; each then opens its own kind of listener and connection.
 */
#ifndef PS_NET_VAN_ADDR_H_
#define PS_NET_VAN_ADDR_H_

#include "ps/base/log.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van_listen_ports {
    int fixed;    /* the node's port; 0: random ones */
    int attempts; /* ports to try: 1 for a fixed one */
} ps_van_listen_ports_t;

/* The address to listen on, port 0: the node's hostname resolved, or with
 * `bind_any` the wildcard of its family (IPv4's without a hostname). A
 * hostname that does not resolve is logged under `log`. */
ps_status_t ps_van_listen_addr(const ps_node_t *node, int bind_any, ps_log_component_t log,
                               ps_sockaddr_t *addr_p);

/* The node's first port (PS_ERR_INVALID_ARG, logged, when outside
 * 0..65535), tried once; without one, `max_retry` + 1 random ports. */
ps_status_t ps_van_listen_ports(const ps_node_t *node, int max_retry, ps_log_component_t log,
                                ps_van_listen_ports_t *ports_p);

/* The port of one try: the fixed one, or a random one in 10000-49999 as
 * upstream ps-lite picks them. With `addr`, the port is set there and the
 * address's text form written to where[cap] ("?" when it has none), for
 * the log lines. */
int ps_van_listen_port(const ps_van_listen_ports_t *ports, ps_sockaddr_t *addr, char *where,
                       size_t cap);

/* The listener is up on `port`: the node says so (its first port), for
 * the scheduler and the peers. */
void ps_van_listen_bound(ps_node_t *node, int port);

/* The port a peer listens on, its first (PS_ERR_INVALID_ARG, logged under
 * `log`, for a peer that is no node or has no port in 1..65535). */
ps_status_t ps_van_peer_port(const ps_node_t *peer, ps_log_component_t log, int *port_p);

/* The address of a peer's listener: ps_van_peer_port() and its hostname
 * resolved (a failure logged). */
ps_status_t ps_van_peer_addr(const ps_node_t *peer, ps_log_component_t log, ps_sockaddr_t *addr_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_ADDR_H_ */

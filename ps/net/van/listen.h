/*
 * Where a van's listener goes for the node it binds: the address (the
 * node's host, or the wildcard) and the ports it tries — the node's own,
 * or random ones while they are taken. Every van that listens on a port
 * picks them the same way; each then opens its own kind of listener.
 */
#ifndef PS_NET_VAN_LISTEN_H_
#define PS_NET_VAN_LISTEN_H_

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
 * upstream ps-lite picks them. */
int ps_van_listen_port(const ps_van_listen_ports_t *ports);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_LISTEN_H_ */

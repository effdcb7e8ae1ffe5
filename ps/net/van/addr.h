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

/* The address to listen on, port 0: the node's hostname resolved, or with
 * `bind_any` the wildcard of its family (IPv4's without a hostname). A
 * hostname that does not resolve is logged under `log`. */
ps_status_t ps_van_listen_addr(const ps_node_t *node, int bind_any, ps_log_component_t log,
                               ps_sockaddr_t *addr_p);

/* One try at listening on `port`: PS_OK; PS_ERR_ADDRESS_IN_USE when the
 * port is taken (a random one is then followed by another); any other
 * status ends the search, logged by the try. `random`: the port is one of
 * the random ones, not the node's. The try writes the address it tried to
 * where[cap], for the log lines (ps_van_listen_where). */
typedef ps_status_t (*ps_van_listen_try_t)(void *arg, int port, int random, char *where,
                                           size_t cap);

/* Listens through `try_one` on the node's first port, once, or without one on
 * up to `max_retry` + 1 random ports in 10000-49999 (as upstream ps-lite
 * picks them), logging under `log` why it could not: a port out of range
 * (PS_ERR_INVALID_ARG), the node's port taken (PS_ERR_ADDRESS_IN_USE, with
 * `taken`, the advice to the user, NULL for the usual one: another
 * DMLC_PORT, or DMLC_PS_ROOT_PORT for the scheduler), no random port free.
 * On success *port_p is the port and where[cap] the address. */
ps_status_t ps_van_listen_on_port(const ps_node_t *node, int max_retry, int is_scheduler,
                                  ps_log_component_t log, ps_van_listen_try_t try_one,
                                  void *arg, const char *taken, int *port_p, char *where,
                                  size_t cap);

/* `addr` with `port`, its text form in where[cap] ("?" when it has none). */
void ps_van_listen_where(ps_sockaddr_t *addr, int port, char *where, size_t cap);

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

/*
 * The scheduler's id assignment, as upstream: nodes sorted by (host, port)
 * (or by BYTEPS_ORDERED_HOSTS, or with BYTEPS_ENABLE_MIXED_MODE servers not
 * co-located with a worker first), preferred ranks honoured, server rank r →
 * id 8 + 2r, worker rank r → id 9 + 2r. Pure functions, internal to
 * //ps/net; tested on their own.
 */
#ifndef PS_NET_NODE_TABLE_INTERNAL_H_
#define PS_NET_NODE_TABLE_INTERNAL_H_

#include <stddef.h>

#include "ps/base/status.h"
#include "ps/net/codec/message.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Assigns ids to the `n` registered nodes (servers and workers; each with
 * hostname, port and aux_id: a preferred rank, PS_NODE_AUX_ANY or
 * PS_NODE_AUX_INSTANCE(i)) and reorders them: servers by rank, then
 * workers by rank. Each role has num_* groups of `group_size` instances
 * (DMLC_GROUP_SIZE), so num_* x group_size nodes.
 *
 * Preferred ranks: a node that asked for one gets it; it must lie in
 * 0..N-1 of its role and no two nodes of a role may ask for the same one.
 * A node that asked for instance i then takes the first free rank r with
 * r % group_size == i (PS_ERR_CONFIG when none is left). The other nodes
 * take the free ranks in sorted order. Sorting: by the
 * position of "host" or "host:port" in `ordered_hosts` (comma-separated;
 * "[v6]:port" for IPv6 with a port; NULL or "" for none), nodes not listed
 * after those listed, then by host name and port. With `mixed_mode`
 * (BYTEPS_ENABLE_MIXED_MODE), nodes alone on their host sort before those
 * sharing it, so servers not co-located with a worker take the first ranks.
 *
 * PS_ERR_CONFIG, with the reason in why[0..why_cap) (no log line: the
 * scheduler logs it and sends it to every node), when the roles' counts
 * differ from num_servers/num_workers, two nodes share host and port, a
 * preferred rank is out of range or taken twice, or (mixed mode, whose
 * layout upstream requires) ordered_hosts is set too, a host has more than
 * two nodes, or a worker is alone on its host. The array is unchanged then.
 */
ps_status_t ps__node_table_assign(ps_node_t *nodes, size_t n, int num_servers, int num_workers,
                                  int group_size, const char *ordered_hosts, int mixed_mode,
                                  char *why, size_t why_cap);

/* The index of the node with this hostname and port, or -1. */
int ps__node_table_find(const ps_node_t *nodes, size_t n, const char *hostname, int port);

/* "worker 127.0.0.1:1234" / "server [::1]:80" into buf, for log lines. */
const char *ps__node_describe(const ps_node_t *node, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_NODE_TABLE_INTERNAL_H_ */

/*
 * Scheduler-side id assignment (see node_table_internal.h).
 */
#include "ps/net/node_table_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t index;  /* into the caller's array */
    int order;     /* position in BYTEPS_ORDERED_HOSTS, INT_MAX if absent */
    int sharing;   /* mixed mode: nodes on this node's host (1 or 2); 0 otherwise */
    const ps_node_t *node;
} sort_item_t;

const char *ps__node_describe(const ps_node_t *node, char *buf, size_t cap)
{
    int v6 = strchr(node->hostname, ':') != NULL;
    snprintf(buf, cap, "%s %s%s%s:%d", ps_role_str(node->role), v6 ? "[" : "", node->hostname,
             v6 ? "]" : "", node->num_ports > 0 ? node->ports[0] : 0);
    return buf;
}

static int node_port(const ps_node_t *node)
{
    return node->num_ports > 0 ? node->ports[0] : 0;
}

int ps__node_table_find(const ps_node_t *nodes, size_t n, const char *hostname, int port)
{
    for (size_t i = 0; i < n; i++) {
        if (node_port(&nodes[i]) == port && strcmp(nodes[i].hostname, hostname) == 0)
            return (int)i;
    }
    return -1;
}

/* Splits one BYTEPS_ORDERED_HOSTS entry into host and port (-1 if none). */
static void parse_entry(const char *entry, size_t len, char *host, size_t host_cap, int *port_p)
{
    *port_p = -1;
    host[0] = '\0';
    while (len > 0 && (*entry == ' ' || *entry == '\t')) {
        entry++;
        len--;
    }
    while (len > 0 && (entry[len - 1] == ' ' || entry[len - 1] == '\t'))
        len--;
    const char *host_start = entry;
    size_t host_len = len;
    if (len > 0 && entry[0] == '[') {
        const char *close = memchr(entry, ']', len);
        if (close != NULL) {
            host_start = entry + 1;
            host_len = (size_t)(close - host_start);
            const char *rest = close + 1;
            if ((size_t)(rest - entry) < len && *rest == ':')
                *port_p = atoi(rest + 1);
        }
    } else {
        const char *colon = memchr(entry, ':', len);
        /* More than one colon: a bare IPv6 address without a port. */
        if (colon != NULL && memchr(colon + 1, ':', len - (size_t)(colon + 1 - entry)) == NULL) {
            host_len = (size_t)(colon - entry);
            *port_p = atoi(colon + 1);
        }
    }
    if (host_len >= host_cap)
        host_len = host_cap - 1;
    memcpy(host, host_start, host_len);
    host[host_len] = '\0';
}

static int ordered_position(const char *ordered_hosts, const ps_node_t *node)
{
    if (ordered_hosts == NULL || ordered_hosts[0] == '\0')
        return INT_MAX;
    int pos = 0;
    const char *p = ordered_hosts;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        char host[PS_NODE_HOSTNAME_MAX];
        int port;
        parse_entry(p, len, host, sizeof(host), &port);
        if (host[0] != '\0') {
            if (strcmp(host, node->hostname) == 0 && (port < 0 || port == node_port(node)))
                return pos;
            pos++;
        }
        if (comma == NULL)
            return INT_MAX;
        p = comma + 1;
    }
}

static int cmp_items(const void *a, const void *b)
{
    const sort_item_t *x = a;
    const sort_item_t *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    if (x->sharing != y->sharing)
        return x->sharing < y->sharing ? -1 : 1;
    int c = strcmp(x->node->hostname, y->node->hostname);
    if (c != 0)
        return c;
    int px = node_port(x->node);
    int py = node_port(y->node);
    if (px != py)
        return px < py ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Ranks the nodes of one role (`expected` = groups * group_size of them);
 * rank_of[i] for items[i]: preferred ranks first, then nodes that asked for
 * an instance take the first free rank of it, then the rest the first free
 * rank. */
static ps_status_t rank_role(const sort_item_t *items, size_t count, int expected,
                             int group_size, const char *env_name, int *rank_of, char *why,
                             size_t why_cap)
{
    char a[PS_NODE_HOSTNAME_MAX + 48];
    char b[PS_NODE_HOSTNAME_MAX + 48];
    ps_status_t st = PS_OK;
    size_t *holder = malloc((size_t)(expected > 0 ? expected : 1) * sizeof(*holder));
    if (holder == NULL) {
        snprintf(why, why_cap, "out of memory assigning ranks");
        return PS_ERR_NO_MEMORY;
    }
    for (int r = 0; r < expected; r++)
        holder[r] = (size_t)-1;

    for (size_t i = 0; i < count; i++) {
        int want = items[i].node->aux_id;
        rank_of[i] = -1;
        if (want < 0)
            continue;
        if (want >= expected) {
            snprintf(why, why_cap, "%s asked for rank %d but %s is %d (ranks 0..%d)",
                     ps__node_describe(items[i].node, a, sizeof(a)), want, env_name, expected,
                     expected - 1);
            st = PS_ERR_CONFIG;
            goto out;
        }
        if (holder[want] != (size_t)-1) {
            snprintf(why, why_cap, "%s and %s both asked for rank %d",
                     ps__node_describe(items[holder[want]].node, a, sizeof(a)),
                     ps__node_describe(items[i].node, b, sizeof(b)), want);
            st = PS_ERR_CONFIG;
            goto out;
        }
        holder[want] = i;
        rank_of[i] = want;
    }
    for (size_t i = 0; i < count; i++) {
        int aux = items[i].node->aux_id;
        if (aux >= PS_NODE_AUX_ANY)
            continue;
        int instance = PS_NODE_AUX_INSTANCE_OF(aux);
        int r = instance;
        while (r < expected && holder[r] != (size_t)-1)
            r += group_size;
        if (instance >= group_size || r >= expected) {
            snprintf(why, why_cap, "%s asked for instance %d but %s", 
                     ps__node_describe(items[i].node, a, sizeof(a)), instance,
                     instance >= group_size ? "DMLC_GROUP_SIZE is smaller"
                                            : "every group's instance of it is taken");
            st = PS_ERR_CONFIG;
            goto out;
        }
        holder[r] = i;
        rank_of[i] = r;
    }
    int next = 0;
    for (size_t i = 0; i < count; i++) {
        if (rank_of[i] >= 0)
            continue;
        while (next < expected && holder[next] != (size_t)-1)
            next++;
        holder[next] = i;
        rank_of[i] = next;
    }
out:
    free(holder);
    return st;
}

/* Nodes registered from `node`'s host. */
static int nodes_on_host(const ps_node_t *nodes, size_t n, const ps_node_t *node)
{
    int count = 0;
    for (size_t i = 0; i < n; i++)
        count += strcmp(nodes[i].hostname, node->hostname) == 0;
    return count;
}

/* Mixed mode's layout, as upstream requires it: at most two nodes per host
 * (a worker and its co-located server), and no worker alone on a host. */
static ps_status_t check_mixed(const ps_node_t *nodes, size_t n, const char *ordered_hosts,
                               char *why, size_t why_cap)
{
    char a[PS_NODE_HOSTNAME_MAX + 48];
    if (ordered_hosts != NULL && ordered_hosts[0] != '\0') {
        snprintf(why, why_cap, "BYTEPS_ENABLE_MIXED_MODE and BYTEPS_ORDERED_HOSTS are both set; "
                 "they order ranks in two different ways (set one)");
        return PS_ERR_CONFIG;
    }
    for (size_t i = 0; i < n; i++) {
        int count = nodes_on_host(nodes, n, &nodes[i]);
        if (count > 2) {
            snprintf(why, why_cap, "BYTEPS_ENABLE_MIXED_MODE: %d nodes registered from host %s; "
                     "mixed mode allows a worker and its co-located server, or a server alone",
                     count, nodes[i].hostname);
            return PS_ERR_CONFIG;
        }
        if (count == 1 && nodes[i].role == PS_ROLE_WORKER) {
            snprintf(why, why_cap, "BYTEPS_ENABLE_MIXED_MODE: %s is alone on its host; mixed "
                     "mode expects every worker to share its host with a server",
                     ps__node_describe(&nodes[i], a, sizeof(a)));
            return PS_ERR_CONFIG;
        }
    }
    return PS_OK;
}

ps_status_t ps__node_table_assign(ps_node_t *nodes, size_t n, int num_servers, int num_workers,
                                  int group_size, const char *ordered_hosts, int mixed_mode,
                                  char *why, size_t why_cap)
{
    char a[PS_NODE_HOSTNAME_MAX + 48];
    size_t ns = 0;
    size_t nw = 0;
    ps_status_t st = PS_OK;

    if (why_cap > 0)
        why[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].role == PS_ROLE_SERVER) {
            ns++;
        } else if (nodes[i].role == PS_ROLE_WORKER) {
            nw++;
        } else {
            snprintf(why, why_cap, "%s cannot join as a server or worker",
                     ps__node_describe(&nodes[i], a, sizeof(a)));
            return PS_ERR_CONFIG;
        }
        for (size_t j = 0; j < i; j++) {
            if (node_port(&nodes[j]) == node_port(&nodes[i]) &&
                strcmp(nodes[j].hostname, nodes[i].hostname) == 0) {
                snprintf(why, why_cap, "two nodes registered with the same address %s",
                         ps__node_describe(&nodes[i], a, sizeof(a)));
                return PS_ERR_CONFIG;
            }
        }
    }
    if (group_size < 1) {
        snprintf(why, why_cap, "DMLC_GROUP_SIZE is %d", group_size);
        return PS_ERR_CONFIG;
    }
    int server_nodes = num_servers * group_size;
    int worker_nodes = num_workers * group_size;
    if (ns != (size_t)server_nodes || nw != (size_t)worker_nodes) {
        if (group_size == 1)
            snprintf(why, why_cap,
                     "%zu servers and %zu workers registered but DMLC_NUM_SERVER is %d and "
                     "DMLC_NUM_WORKER is %d",
                     ns, nw, num_servers, num_workers);
        else
            snprintf(why, why_cap,
                     "%zu servers and %zu workers registered but DMLC_NUM_SERVER %d and "
                     "DMLC_NUM_WORKER %d groups of DMLC_GROUP_SIZE %d make %d and %d",
                     ns, nw, num_servers, num_workers, group_size, server_nodes, worker_nodes);
        return PS_ERR_CONFIG;
    }
    if (n == 0)
        return PS_OK;
    if (mixed_mode && (st = check_mixed(nodes, n, ordered_hosts, why, why_cap)) != PS_OK)
        return st;

    sort_item_t *items = malloc(n * sizeof(*items));
    int *rank_of = malloc(n * sizeof(*rank_of));
    ps_node_t *out = malloc(n * sizeof(*out));
    if (items == NULL || rank_of == NULL || out == NULL) {
        snprintf(why, why_cap, "out of memory assigning ranks");
        st = PS_ERR_NO_MEMORY;
        goto out;
    }
    /* Servers first, then workers, each sorted. */
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++) {
        ps_role_t role = pass == 0 ? PS_ROLE_SERVER : PS_ROLE_WORKER;
        size_t first = k;
        for (size_t i = 0; i < n; i++) {
            if (nodes[i].role != role)
                continue;
            items[k].index = i;
            items[k].node = &nodes[i];
            items[k].order = ordered_position(ordered_hosts, &nodes[i]);
            items[k].sharing = mixed_mode ? nodes_on_host(nodes, n, &nodes[i]) : 0;
            k++;
        }
        qsort(items + first, k - first, sizeof(*items), cmp_items);
    }
    st = rank_role(items, ns, server_nodes, group_size,
                   group_size == 1 ? "DMLC_NUM_SERVER" : "the server count", rank_of, why,
                   why_cap);
    if (st != PS_OK)
        goto out;
    st = rank_role(items + ns, nw, worker_nodes, group_size,
                   group_size == 1 ? "DMLC_NUM_WORKER" : "the worker count", rank_of + ns, why,
                   why_cap);
    if (st != PS_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        int rank = rank_of[i];
        size_t slot = i < ns ? (size_t)rank : ns + (size_t)rank;
        out[slot] = *items[i].node;
        out[slot].id = i < ns ? ps_server_rank_to_id(rank) : ps_worker_rank_to_id(rank);
    }
    memcpy(nodes, out, n * sizeof(*out));
out:
    free(items);
    free(rank_of);
    free(out);
    return st;
}

/*
 * Socket addresses (IPv4 and IPv6 alike) and network interfaces.
 *
 * Text forms: "1.2.3.4:80", "[2001:db8::1]:80", "[fe80::1%eth0]:80" (a zone,
 * by interface name or index), and bare addresses "1.2.3.4", "::1",
 * "[::1]" (port taken from the caller). Formatting gives the same forms
 * back, brackets for IPv6.
 *
 * Parsing is pure (no DNS, no log lines: the caller knows which setting was
 * wrong and says so); resolving may ask DNS and logs its failures.
 */
#ifndef PS_BASE_SOCKADDR_H_
#define PS_BASE_SOCKADDR_H_

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for the longest text form: "[" v6 "%" zone "]:" port. */
#define PS_SOCKADDR_STRLEN (INET6_ADDRSTRLEN + IF_NAMESIZE + 10)

typedef struct {
    struct sockaddr_storage ss;
    socklen_t len; /* 0 for "no address" */
} ps_sockaddr_t;

static inline const struct sockaddr *ps_sockaddr_sa(const ps_sockaddr_t *addr)
{
    return (const struct sockaddr *)&addr->ss;
}

/* AF_INET, AF_INET6, or AF_UNSPEC for an empty address. */
int ps_sockaddr_family(const ps_sockaddr_t *addr);
uint16_t ps_sockaddr_port(const ps_sockaddr_t *addr);
ps_status_t ps_sockaddr_set_port(ps_sockaddr_t *addr, uint16_t port);

/* Copies a system address (AF_INET or AF_INET6 only). */
ps_status_t ps_sockaddr_from_sa(const struct sockaddr *sa, socklen_t len, ps_sockaddr_t *addr_p);

/* Parses a numeric address with or without a port (see the forms above);
 * `default_port` is used when the text has none. PS_ERR_PARSE for bad
 * text, a port out of 0..65535, or an unknown zone. */
ps_status_t ps_sockaddr_parse(const char *text, uint16_t default_port, ps_sockaddr_t *addr_p);

/* Resolves `host` (numeric, or a name looked up with getaddrinfo) with
 * `port`. `family` AF_INET / AF_INET6 insists on that family, AF_UNSPEC
 * takes the first answer (the resolver's preferred order). Numeric text
 * never touches DNS. PS_ERR_NOT_FOUND (logged) when the name does not
 * resolve, PS_ERR_AGAIN on a temporary resolver failure. */
ps_status_t ps_sockaddr_resolve(const char *host, uint16_t port, int family,
                                ps_sockaddr_t *addr_p);
/* The same for "host:port" / "[v6]:port" / "host" text; `default_port` when
 * the text has no port. */
ps_status_t ps_sockaddr_resolve_hostport(const char *text, uint16_t default_port, int family,
                                         ps_sockaddr_t *addr_p);

/* "1.2.3.4:80" / "[::1]:80" / "[fe80::1%eth0]:80". PS_ERR_TOO_LARGE if `cap`
 * is too small (PS_SOCKADDR_STRLEN always fits). */
ps_status_t ps_sockaddr_format(const ps_sockaddr_t *addr, char *buf, size_t cap);
/* The address alone, without brackets or port: "1.2.3.4", "fe80::1%eth0". */
ps_status_t ps_sockaddr_format_host(const ps_sockaddr_t *addr, char *buf, size_t cap);

/* Same family, address, scope and port. */
int ps_sockaddr_equal(const ps_sockaddr_t *a, const ps_sockaddr_t *b);
/* Same family, address and scope; ports may differ. */
int ps_sockaddr_equal_host(const ps_sockaddr_t *a, const ps_sockaddr_t *b);
/* A total order (family, address, scope, port) for sorting; <0, 0, >0. */
int ps_sockaddr_cmp(const ps_sockaddr_t *a, const ps_sockaddr_t *b);

/* The wildcard ("any") / loopback address of `family` with `port`. */
ps_status_t ps_sockaddr_wildcard(int family, uint16_t port, ps_sockaddr_t *addr_p);
ps_status_t ps_sockaddr_loopback(int family, uint16_t port, ps_sockaddr_t *addr_p);

int ps_sockaddr_is_wildcard(const ps_sockaddr_t *addr);
int ps_sockaddr_is_loopback(const ps_sockaddr_t *addr);
/* IPv6 link-local (fe80::/10) or IPv4 169.254/16. */
int ps_sockaddr_is_link_local(const ps_sockaddr_t *addr);

/* ---- interfaces ---- */

enum {
    PS_IF_UP = 1u << 0,
    PS_IF_RUNNING = 1u << 1,
    PS_IF_LOOPBACK = 1u << 2,
    PS_IF_LINK_LOCAL = 1u << 3, /* this address is link-local */
};

/* One address of one interface (an interface with two addresses appears
 * twice). */
typedef struct {
    char name[IF_NAMESIZE];
    unsigned index;
    unsigned flags;      /* PS_IF_* */
    int family;          /* AF_INET or AF_INET6 */
    unsigned prefix_len; /* from the netmask */
    ps_sockaddr_t addr;  /* port 0 */
} ps_ifaddr_t;

/* The IPv4 and IPv6 addresses of every interface, in the kernel's order.
 * Free with ps_if_list_free(). An empty list is PS_OK with count 0. */
ps_status_t ps_if_list(ps_ifaddr_t **list_p, size_t *count_p);
void ps_if_list_free(ps_ifaddr_t *list);

/* The address of interface `ifname`: IPv4 unless the interface has only
 * IPv6 (or `family_pref` is AF_INET6, which reverses the preference);
 * link-local IPv6 only when it has nothing else. PS_ERR_NOT_FOUND, logged
 * with the interface name, if it does not exist or has no address. */
ps_status_t ps_if_addr(const char *ifname, int family_pref, ps_sockaddr_t *addr_p);

/* The address a node binds and advertises, upstream's rule:
 *   1. `node_host` (DMLC_NODE_HOST) if given: numeric or resolved;
 *   2. else the address of `interface` (DMLC_INTERFACE) if given (not
 *      "auto", which the GPU layer resolves before calling this);
 *   3. else the first up, non-loopback interface with a usable address,
 *      preferring non-link-local and then `family_pref` (AF_UNSPEC: IPv4);
 *   4. else loopback.
 * An empty string counts as not given. PS_ERR_NOT_FOUND (logged, naming the
 * interface) when the named interface is missing or has no address. */
ps_status_t ps_node_host_select(const char *node_host, const char *interface, int family_pref,
                                ps_sockaddr_t *addr_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_SOCKADDR_H_ */

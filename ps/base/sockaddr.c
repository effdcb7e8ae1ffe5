#include "ps/base/sockaddr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"

/* Longest host text we accept: a v6 address with a zone, or a DNS name. */
#define PS_HOST_MAX 256

int ps_sockaddr_family(const ps_sockaddr_t *addr)
{
    if (addr == NULL || addr->len == 0) {
        return AF_UNSPEC;
    }
    return addr->ss.ss_family;
}

uint16_t ps_sockaddr_port(const ps_sockaddr_t *addr)
{
    switch (ps_sockaddr_family(addr)) {
    case AF_INET: return ntohs(((const struct sockaddr_in *)&addr->ss)->sin_port);
    case AF_INET6: return ntohs(((const struct sockaddr_in6 *)&addr->ss)->sin6_port);
    default: return 0;
    }
}

ps_status_t ps_sockaddr_set_port(ps_sockaddr_t *addr, uint16_t port)
{
    switch (ps_sockaddr_family(addr)) {
    case AF_INET: ((struct sockaddr_in *)&addr->ss)->sin_port = htons(port); return PS_OK;
    case AF_INET6: ((struct sockaddr_in6 *)&addr->ss)->sin6_port = htons(port); return PS_OK;
    default: return PS_ERR_INVALID_ARG;
    }
}

ps_status_t ps_sockaddr_from_sa(const struct sockaddr *sa, socklen_t len, ps_sockaddr_t *addr_p)
{
    socklen_t need;

    if (sa == NULL || addr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    switch (sa->sa_family) {
    case AF_INET: need = sizeof(struct sockaddr_in); break;
    case AF_INET6: need = sizeof(struct sockaddr_in6); break;
    default: return PS_ERR_UNSUPPORTED;
    }
    if (len < need) {
        return PS_ERR_INVALID_ARG;
    }
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(&addr_p->ss, sa, need);
    addr_p->len = need;
    return PS_OK;
}

static void ps_sockaddr_set_v4(ps_sockaddr_t *out, const struct in_addr *a, uint16_t port)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
    memset(out, 0, sizeof(*out));
    sin->sin_family = AF_INET;
    sin->sin_addr = *a;
    sin->sin_port = htons(port);
    out->len = sizeof(*sin);
}

static void ps_sockaddr_set_v6(ps_sockaddr_t *out, const struct in6_addr *a, uint32_t scope,
                               uint16_t port)
{
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->ss;
    memset(out, 0, sizeof(*out));
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = *a;
    sin6->sin6_scope_id = scope;
    sin6->sin6_port = htons(port);
    out->len = sizeof(*sin6);
}

/* A numeric host: dotted IPv4, or IPv6 with an optional "%zone" (interface
 * name or index). No brackets, no port. */
static ps_status_t ps_parse_numeric_host(const char *host, uint16_t port, ps_sockaddr_t *out)
{
    struct in_addr a4;
    struct in6_addr a6;
    char buf[PS_HOST_MAX];
    uint32_t scope = 0;

    if (inet_pton(AF_INET, host, &a4) == 1) {
        ps_sockaddr_set_v4(out, &a4, port);
        return PS_OK;
    }
    if (strlen(host) >= sizeof(buf)) {
        return PS_ERR_PARSE;
    }
    strcpy(buf, host);
    char *zone = strchr(buf, '%');
    if (zone != NULL) {
        *zone++ = '\0';
        if (*zone == '\0') {
            return PS_ERR_PARSE;
        }
        if (isdigit((unsigned char)*zone)) {
            char *end;
            errno = 0;
            unsigned long v = strtoul(zone, &end, 10);
            if (*end != '\0' || errno != 0 || v == 0 || v > UINT32_MAX) {
                return PS_ERR_PARSE;
            }
            scope = (uint32_t)v;
        } else if ((scope = if_nametoindex(zone)) == 0) {
            return PS_ERR_PARSE; /* no such interface */
        }
    }
    if (inet_pton(AF_INET6, buf, &a6) != 1) {
        return PS_ERR_PARSE;
    }
    ps_sockaddr_set_v6(out, &a6, scope, port);
    return PS_OK;
}

/* Splits "host", "host:port", "[v6]", "[v6]:port" and bare "v6" into the
 * host (without brackets) and the port. */
static ps_status_t ps_split_hostport(const char *text, char *host, size_t cap, uint16_t *port_p,
                                     int *has_port_p)
{
    const char *end;
    const char *port = NULL;
    size_t n;

    if (text == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    while (isspace((unsigned char)*text)) {
        ++text;
    }
    end = text + strlen(text);
    while (end > text && isspace((unsigned char)end[-1])) {
        --end;
    }
    if (end == text) {
        return PS_ERR_PARSE;
    }
    if (*text == '[') {
        const char *close = memchr(text, ']', (size_t)(end - text));
        if (close == NULL) {
            return PS_ERR_PARSE;
        }
        if (close + 1 < end) {
            if (close[1] != ':') {
                return PS_ERR_PARSE;
            }
            port = close + 2;
        }
        n = (size_t)(close - text - 1);
        text += 1;
    } else {
        const char *colon = NULL;
        int colons = 0;
        for (const char *p = text; p < end; ++p) {
            if (*p == ':') {
                colon = colon != NULL ? colon : p;
                ++colons;
            }
        }
        if (colons == 1) {
            port = colon + 1; /* host:port */
            n = (size_t)(colon - text);
        } else {
            n = (size_t)(end - text); /* no port, or a bare IPv6 address */
        }
    }
    if (n == 0 || n >= cap) {
        return PS_ERR_PARSE;
    }
    memcpy(host, text, n);
    host[n] = '\0';
    *has_port_p = port != NULL;
    if (port != NULL) {
        unsigned long v = 0;
        if (port >= end || end - port > 5) {
            return PS_ERR_PARSE;
        }
        for (const char *p = port; p < end; ++p) {
            if (!isdigit((unsigned char)*p)) {
                return PS_ERR_PARSE;
            }
            v = v * 10 + (unsigned long)(*p - '0');
        }
        if (v > 65535) {
            return PS_ERR_PARSE;
        }
        *port_p = (uint16_t)v;
    }
    return PS_OK;
}

ps_status_t ps_sockaddr_parse(const char *text, uint16_t default_port, ps_sockaddr_t *addr_p)
{
    char host[PS_HOST_MAX];
    uint16_t port = default_port;
    int has_port;
    ps_sockaddr_t out;

    if (text == NULL || addr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_split_hostport(text, host, sizeof(host), &port, &has_port);
    if (st != PS_OK) {
        return st;
    }
    /* Brackets are for IPv6 only. */
    int bracketed = text[strspn(text, " \t")] == '[';
    st = ps_parse_numeric_host(host, port, &out);
    if (st != PS_OK || (bracketed && ps_sockaddr_family(&out) != AF_INET6)) {
        return PS_ERR_PARSE;
    }
    *addr_p = out;
    return PS_OK;
}

static ps_status_t ps_gai_status(int rc)
{
    switch (rc) {
    case EAI_AGAIN: return PS_ERR_AGAIN;
    case EAI_MEMORY: return PS_ERR_NO_MEMORY;
    case EAI_SYSTEM: return ps_status_from_errno(errno);
    default: return PS_ERR_NOT_FOUND;
    }
}

static const char *ps_family_name(int family)
{
    return family == AF_INET ? "IPv4" : family == AF_INET6 ? "IPv6" : "any";
}

ps_status_t ps_sockaddr_resolve(const char *host, uint16_t port, int family,
                                ps_sockaddr_t *addr_p)
{
    struct addrinfo hints, *res = NULL;
    ps_sockaddr_t out;

    if (host == NULL || *host == '\0' || addr_p == NULL ||
        (family != AF_UNSPEC && family != AF_INET && family != AF_INET6)) {
        return PS_ERR_INVALID_ARG;
    }
    /* Numeric fast path: no resolver, and zones work. */
    if (ps_parse_numeric_host(host, port, &out) == PS_OK) {
        if (family != AF_UNSPEC && ps_sockaddr_family(&out) != family) {
            ps_error(PS_LOG_BASE, "address %s is not an %s address", host, ps_family_name(family));
            return PS_ERR_NOT_FOUND;
        }
        *addr_p = out;
        return PS_OK;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    /* No AI_ADDRCONFIG: it hides "localhost" on hosts with loopback only. */
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        ps_status_t st = ps_gai_status(rc);
        ps_error(PS_LOG_BASE, "cannot resolve host %s (%s): %s", host, ps_family_name(family),
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return st;
    }
    ps_status_t st = PS_ERR_NOT_FOUND;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (ps_sockaddr_from_sa(ai->ai_addr, ai->ai_addrlen, &out) == PS_OK) {
            ps_sockaddr_set_port(&out, port);
            st = PS_OK;
            break;
        }
    }
    freeaddrinfo(res);
    if (st != PS_OK) {
        ps_error(PS_LOG_BASE, "host %s has no %s address", host, ps_family_name(family));
        return st;
    }
    *addr_p = out;
    return PS_OK;
}

ps_status_t ps_sockaddr_resolve_hostport(const char *text, uint16_t default_port, int family,
                                         ps_sockaddr_t *addr_p)
{
    char host[PS_HOST_MAX];
    uint16_t port = default_port;
    int has_port;

    if (text == NULL || addr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_split_hostport(text, host, sizeof(host), &port, &has_port);
    if (st != PS_OK) {
        ps_error(PS_LOG_BASE, "cannot parse address '%s': expected host, host:port or [v6]:port",
                 text);
        return st;
    }
    return ps_sockaddr_resolve(host, port, family, addr_p);
}

ps_status_t ps_sockaddr_format_host(const ps_sockaddr_t *addr, char *buf, size_t cap)
{
    char tmp[PS_SOCKADDR_STRLEN];
    int n;

    if (addr == NULL || buf == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    switch (ps_sockaddr_family(addr)) {
    case AF_INET: {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&addr->ss;
        inet_ntop(AF_INET, &sin->sin_addr, tmp, sizeof(tmp));
        n = (int)strlen(tmp);
        break;
    }
    case AF_INET6: {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&addr->ss;
        char zone[IF_NAMESIZE];
        inet_ntop(AF_INET6, &sin6->sin6_addr, tmp, sizeof(tmp));
        n = (int)strlen(tmp);
        if (sin6->sin6_scope_id != 0) {
            if (if_indextoname(sin6->sin6_scope_id, zone) != NULL) {
                n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, "%%%s", zone);
            } else {
                n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, "%%%u",
                              (unsigned)sin6->sin6_scope_id);
            }
        }
        break;
    }
    default:
        return PS_ERR_INVALID_ARG;
    }
    if ((size_t)n >= cap) {
        return PS_ERR_TOO_LARGE;
    }
    memcpy(buf, tmp, (size_t)n + 1);
    return PS_OK;
}

ps_status_t ps_sockaddr_format(const ps_sockaddr_t *addr, char *buf, size_t cap)
{
    char host[PS_SOCKADDR_STRLEN];
    char tmp[PS_SOCKADDR_STRLEN + 4];

    if (buf == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_sockaddr_format_host(addr, host, sizeof(host));
    if (st != PS_OK) {
        return st;
    }
    int v6 = ps_sockaddr_family(addr) == AF_INET6;
    int n = snprintf(tmp, sizeof(tmp), "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "",
                     (unsigned)ps_sockaddr_port(addr));
    if (n < 0 || (size_t)n >= cap) {
        return PS_ERR_TOO_LARGE;
    }
    memcpy(buf, tmp, (size_t)n + 1);
    return PS_OK;
}

/* Compares family, address and scope. */
static int ps_sockaddr_cmp_host(const ps_sockaddr_t *a, const ps_sockaddr_t *b)
{
    int fa = ps_sockaddr_family(a), fb = ps_sockaddr_family(b);
    if (fa != fb) {
        return fa < fb ? -1 : 1;
    }
    if (fa == AF_INET) {
        const struct sockaddr_in *x = (const struct sockaddr_in *)&a->ss;
        const struct sockaddr_in *y = (const struct sockaddr_in *)&b->ss;
        return memcmp(&x->sin_addr, &y->sin_addr, sizeof(x->sin_addr));
    }
    if (fa == AF_INET6) {
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)&a->ss;
        const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)&b->ss;
        int c = memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
        if (c != 0) {
            return c;
        }
        return x->sin6_scope_id == y->sin6_scope_id ? 0
               : x->sin6_scope_id < y->sin6_scope_id ? -1 : 1;
    }
    return 0; /* two empty addresses */
}

int ps_sockaddr_cmp(const ps_sockaddr_t *a, const ps_sockaddr_t *b)
{
    int c = ps_sockaddr_cmp_host(a, b);
    if (c != 0) {
        return c < 0 ? -1 : 1;
    }
    uint16_t pa = ps_sockaddr_port(a), pb = ps_sockaddr_port(b);
    return pa == pb ? 0 : pa < pb ? -1 : 1;
}

int ps_sockaddr_equal(const ps_sockaddr_t *a, const ps_sockaddr_t *b)
{
    return ps_sockaddr_cmp(a, b) == 0;
}

int ps_sockaddr_equal_host(const ps_sockaddr_t *a, const ps_sockaddr_t *b)
{
    return ps_sockaddr_cmp_host(a, b) == 0;
}

ps_status_t ps_sockaddr_wildcard(int family, uint16_t port, ps_sockaddr_t *addr_p)
{
    if (addr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (family == AF_INET) {
        struct in_addr any = {htonl(INADDR_ANY)};
        ps_sockaddr_set_v4(addr_p, &any, port);
        return PS_OK;
    }
    if (family == AF_INET6) {
        ps_sockaddr_set_v6(addr_p, &in6addr_any, 0, port);
        return PS_OK;
    }
    return PS_ERR_INVALID_ARG;
}

ps_status_t ps_sockaddr_loopback(int family, uint16_t port, ps_sockaddr_t *addr_p)
{
    if (addr_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (family == AF_INET) {
        struct in_addr lo = {htonl(INADDR_LOOPBACK)};
        ps_sockaddr_set_v4(addr_p, &lo, port);
        return PS_OK;
    }
    if (family == AF_INET6) {
        ps_sockaddr_set_v6(addr_p, &in6addr_loopback, 0, port);
        return PS_OK;
    }
    return PS_ERR_INVALID_ARG;
}

int ps_sockaddr_is_wildcard(const ps_sockaddr_t *addr)
{
    switch (ps_sockaddr_family(addr)) {
    case AF_INET:
        return ((const struct sockaddr_in *)&addr->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    case AF_INET6:
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&addr->ss)->sin6_addr);
    default:
        return 0;
    }
}

int ps_sockaddr_is_loopback(const ps_sockaddr_t *addr)
{
    switch (ps_sockaddr_family(addr)) {
    case AF_INET:
        return (ntohl(((const struct sockaddr_in *)&addr->ss)->sin_addr.s_addr) >> 24) == 127;
    case AF_INET6: {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)&addr->ss)->sin6_addr;
        /* ::1, or an IPv4 loopback address mapped into IPv6 */
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    default:
        return 0;
    }
}

int ps_sockaddr_is_link_local(const ps_sockaddr_t *addr)
{
    switch (ps_sockaddr_family(addr)) {
    case AF_INET:
        return (ntohl(((const struct sockaddr_in *)&addr->ss)->sin_addr.s_addr) >> 16) == 0xa9fe;
    case AF_INET6:
        return IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)&addr->ss)->sin6_addr);
    default:
        return 0;
    }
}

/* ---- interfaces ---- */

static unsigned ps_prefix_len(const struct sockaddr *mask)
{
    const unsigned char *p;
    size_t n;
    unsigned bits = 0;

    if (mask == NULL) {
        return 0;
    }
    if (mask->sa_family == AF_INET) {
        p = (const unsigned char *)&((const struct sockaddr_in *)mask)->sin_addr;
        n = 4;
    } else if (mask->sa_family == AF_INET6) {
        p = (const unsigned char *)&((const struct sockaddr_in6 *)mask)->sin6_addr;
        n = 16;
    } else {
        return 0;
    }
    for (size_t i = 0; i < n; ++i) {
        bits += (unsigned)__builtin_popcount(p[i]);
    }
    return bits;
}

ps_status_t ps_if_list(ps_ifaddr_t **list_p, size_t *count_p)
{
    struct ifaddrs *ifs = NULL;
    size_t n = 0;

    if (list_p == NULL || count_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (getifaddrs(&ifs) != 0) {
        ps_status_t st = ps_status_from_errno(errno);
        ps_error(PS_LOG_BASE, "getifaddrs failed: %m");
        return st;
    }
    for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr != NULL &&
            (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6)) {
            ++n;
        }
    }
    /* One extra zeroed entry, so that an empty list is still a real pointer. */
    ps_ifaddr_t *list = calloc(n + 1, sizeof(*list));
    if (list == NULL) {
        freeifaddrs(ifs);
        return PS_ERR_NO_MEMORY;
    }
    size_t k = 0;
    for (struct ifaddrs *i = ifs; i != NULL && k < n; i = i->ifa_next) {
        ps_ifaddr_t *e = &list[k];
        if (i->ifa_addr == NULL ||
            ps_sockaddr_from_sa(i->ifa_addr,
                                i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                  : sizeof(struct sockaddr_in6),
                                &e->addr) != PS_OK) {
            continue;
        }
        snprintf(e->name, sizeof(e->name), "%s", i->ifa_name);
        e->index = if_nametoindex(i->ifa_name);
        e->family = i->ifa_addr->sa_family;
        e->prefix_len = ps_prefix_len(i->ifa_netmask);
        e->flags = ((i->ifa_flags & IFF_UP) ? PS_IF_UP : 0) |
                   ((i->ifa_flags & IFF_RUNNING) ? PS_IF_RUNNING : 0) |
                   ((i->ifa_flags & IFF_LOOPBACK) ? PS_IF_LOOPBACK : 0) |
                   (ps_sockaddr_is_link_local(&e->addr) ? PS_IF_LINK_LOCAL : 0);
        ++k;
    }
    freeifaddrs(ifs);
    *list_p = list;
    *count_p = k;
    return PS_OK;
}

void ps_if_list_free(ps_ifaddr_t *list)
{
    free(list);
}

/* How good an address is for a node to advertise; higher is better, 0 is
 * only a last resort (link-local IPv6 needs a zone every peer would have to
 * know). */
static int ps_if_score(const ps_ifaddr_t *e, int family_pref)
{
    int want = family_pref == AF_INET6 ? AF_INET6 : AF_INET;
    if (e->family == AF_INET6 && (e->flags & PS_IF_LINK_LOCAL)) {
        return 0;
    }
    return 2 + (e->family == want);
}

static int ps_family_pref_ok(int family_pref)
{
    return family_pref == AF_UNSPEC || family_pref == AF_INET || family_pref == AF_INET6;
}

ps_status_t ps_if_addr(const char *ifname, int family_pref, ps_sockaddr_t *addr_p)
{
    ps_ifaddr_t *list;
    size_t n;
    const ps_ifaddr_t *best = NULL;
    int best_score = -1;

    if (ifname == NULL || *ifname == '\0' || addr_p == NULL || !ps_family_pref_ok(family_pref)) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_if_list(&list, &n);
    if (st != PS_OK) {
        return st;
    }
    for (size_t i = 0; i < n; ++i) {
        if (strcmp(list[i].name, ifname) != 0) {
            continue;
        }
        int score = ps_if_score(&list[i], family_pref);
        if (score > best_score) {
            best = &list[i];
            best_score = score;
        }
    }
    if (best == NULL) {
        char names[256] = "";
        size_t len = 0;
        for (size_t i = 0; i < n && len < sizeof(names) - 1; ++i) {
            /* each name once: an interface has an entry per address */
            size_t j = 0;
            while (j < i && strcmp(list[i].name, list[j].name) != 0) {
                ++j;
            }
            if (j < i) {
                continue;
            }
            int w = snprintf(names + len, sizeof(names) - len, "%s%s", len ? ", " : "",
                             list[i].name);
            len = w > 0 ? len + (size_t)w : len;
        }
        if (if_nametoindex(ifname) == 0) {
            ps_error(PS_LOG_BASE, "interface %s not found (interfaces with addresses: %s)",
                     ifname, names[0] ? names : "none");
        } else {
            ps_error(PS_LOG_BASE, "interface %s has no IPv4 or IPv6 address", ifname);
        }
        ps_if_list_free(list);
        return PS_ERR_NOT_FOUND;
    }
    if (!(best->flags & PS_IF_UP)) {
        ps_warn(PS_LOG_BASE, "interface %s is down; using its address anyway", ifname);
    }
    *addr_p = best->addr;
    ps_if_list_free(list);
    return PS_OK;
}

ps_status_t ps_node_host_select(const char *node_host, const char *interface, int family_pref,
                                ps_sockaddr_t *addr_p)
{
    ps_ifaddr_t *list;
    size_t n;
    const ps_ifaddr_t *best = NULL;
    int best_score = -1;

    if (addr_p == NULL || !ps_family_pref_ok(family_pref)) {
        return PS_ERR_INVALID_ARG;
    }
    if (node_host != NULL && *node_host != '\0') {
        ps_status_t st = ps_sockaddr_resolve(node_host, 0, AF_UNSPEC, addr_p);
        if (st != PS_OK) {
            ps_error(PS_LOG_BASE, "node host %s (DMLC_NODE_HOST) is not a usable address",
                     node_host);
        }
        return st;
    }
    if (interface != NULL && *interface != '\0' && strcmp(interface, "auto") != 0) {
        return ps_if_addr(interface, family_pref, addr_p);
    }
    ps_status_t st = ps_if_list(&list, &n);
    if (st != PS_OK) {
        return st;
    }
    for (size_t i = 0; i < n; ++i) {
        const ps_ifaddr_t *e = &list[i];
        if (!(e->flags & PS_IF_UP) || (e->flags & PS_IF_LOOPBACK) ||
            ps_sockaddr_is_loopback(&e->addr)) {
            continue;
        }
        int score = ps_if_score(e, family_pref);
        if (score > best_score) {
            best = e;
            best_score = score;
        }
    }
    if (best != NULL) {
        *addr_p = best->addr;
        ps_if_list_free(list);
        return PS_OK;
    }
    /* Nothing but loopback: fine for a job on one machine. */
    int want = family_pref == AF_INET6 ? AF_INET6 : AF_INET;
    for (size_t i = 0; i < n; ++i) {
        if ((list[i].flags & PS_IF_LOOPBACK) && list[i].family == want) {
            best = &list[i];
            break;
        }
    }
    if (best != NULL) {
        *addr_p = best->addr;
    } else {
        ps_sockaddr_loopback(AF_INET, 0, addr_p);
    }
    ps_if_list_free(list);
    ps_info(PS_LOG_BASE, "no usable network interface, using loopback");
    return PS_OK;
}

/*
 * The van registry: each van library registers its component from a
 * constructor when it is linked in (alwayslink), and the postoffice picks
 * one by the name the upstream variables select.
 *
 * Registration happens before main(), lookups afterwards; a mutex still
 * guards the table so a van loaded later (dlopen) is safe too.
 */
#include "ps/net/van/van.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ps/base/config.h"
#include "ps/base/log.h"

/* What a log line holds besides its prefix, with room to spare (the
 * logger cuts a line at 1024 bytes). */
#define PS__REGISTRY_LINE_MAX 800

#define PS_VAN_MAX_COMPONENTS 16

static pthread_mutex_t g_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const ps_van_component_t *g_components[PS_VAN_MAX_COMPONENTS];
static size_t g_num_components;

void ps_van_register(const ps_van_component_t *component)
{
    if (component == NULL || component->name == NULL || component->ops == NULL) {
        return;
    }
    pthread_mutex_lock(&g_registry_lock);
    for (size_t i = 0; i < g_num_components; ++i) {
        if (g_components[i] == component) {
            pthread_mutex_unlock(&g_registry_lock);
            return;
        }
    }
    if (g_num_components < PS_VAN_MAX_COMPONENTS) {
        /* Kept in name order: listings do not depend on the order the
         * linker ran the constructors in (link-time optimisation changes it). */
        size_t at = g_num_components++;
        for (; at > 0 && strcmp(g_components[at - 1]->name, component->name) > 0; --at) {
            g_components[at] = g_components[at - 1];
        }
        g_components[at] = component;
    } else {
        /* Cannot happen with the vans ps has; say so rather than drop it quietly. */
        ps_error(PS_LOG_VAN, "van registry full: van '%s' not registered", component->name);
    }
    pthread_mutex_unlock(&g_registry_lock);
}

size_t ps_van_list(const ps_van_component_t **components, size_t cap)
{
    pthread_mutex_lock(&g_registry_lock);
    size_t n = g_num_components;
    for (size_t i = 0; i < n && i < cap && components != NULL; ++i) {
        components[i] = g_components[i];
    }
    pthread_mutex_unlock(&g_registry_lock);
    return n;
}

/* 1 if `name` is one of the comma-separated names in `list`. */
static int name_in_list(const char *name, const char *list)
{
    if (list == NULL) {
        return 0;
    }
    size_t len = strlen(name);
    const char *p = list;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        while (n > 0 && (*p == ' ')) {
            ++p;
            --n;
        }
        while (n > 0 && p[n - 1] == ' ') {
            --n;
        }
        if (n == len && strncasecmp(p, name, len) == 0) {
            return 1;
        }
        if (end == NULL) {
            break;
        }
        p = end + 1;
    }
    return 0;
}

/* "tcp (zmq, 0), shm": the usable vans, for error messages. Returns the
 * length it needs (without the NUL); writes what fits in buf[cap]. */
static size_t format_available(char *buf, size_t cap)
{
    size_t pos = 0;
    if (cap > 0) {
        buf[0] = '\0';
    }
    const ps_van_component_t *list[PS_VAN_MAX_COMPONENTS];
    size_t n = ps_van_list(list, PS_VAN_MAX_COMPONENTS);
    for (size_t i = 0; i < n; ++i) {
        char why[8];
        if (list[i]->unavailable != NULL && list[i]->unavailable(why, sizeof(why)) != 0) {
            continue;
        }
        int w;
        char *at = pos < cap ? buf + pos : NULL;
        size_t room = pos < cap ? cap - pos : 0;
        if (list[i]->aliases != NULL && list[i]->aliases[0] != '\0') {
            w = snprintf(at, room, "%s%s (also %s)", pos ? ", " : "", list[i]->name,
                         list[i]->aliases);
        } else {
            w = snprintf(at, room, "%s%s", pos ? ", " : "", list[i]->name);
        }
        if (w < 0) {
            break;
        }
        pos += (size_t)w;
    }
    if (pos == 0) {
        return (size_t)snprintf(buf, cap, "none");
    }
    return pos;
}

/* The available vans, whole (heap; NULL when out of memory). */
static char *available_alloc(void)
{
    size_t need = format_available(NULL, 0) + 1;
    char *buf = malloc(need);
    if (buf != NULL) {
        format_available(buf, need);
    }
    return buf;
}

/* Logs `what` and the available vans. A log line has a bounded length:
 * when both would not fit in one, the list gets a line of its own, so that
 * it is never cut. */
static void log_with_available(const char *what)
{
    char *avail = available_alloc();
    const char *list = avail != NULL ? avail : "(out of memory listing them)";
    if (strlen(what) + strlen(list) < PS__REGISTRY_LINE_MAX) {
        ps_error(PS_LOG_VAN, "%s; available: %s", what, list);
    } else {
        ps_error(PS_LOG_VAN, "%s; the available vans follow", what);
        ps_error(PS_LOG_VAN, "available vans: %s", list);
    }
    free(avail);
}

ps_status_t ps_van_find(const char *name, const ps_van_component_t **component_p)
{
    if (name == NULL || component_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    const ps_van_component_t *found = NULL;
    const ps_van_component_t *list[PS_VAN_MAX_COMPONENTS];
    size_t n = ps_van_list(list, PS_VAN_MAX_COMPONENTS);
    for (size_t i = 0; i < n && found == NULL; ++i) {
        if (strcasecmp(list[i]->name, name) == 0 || name_in_list(name, list[i]->aliases)) {
            found = list[i];
        }
    }
    char what[640];
    if (found == NULL) {
        /* The name as given, cut if absurdly long: the list is what helps. */
        snprintf(what, sizeof(what), "van '%.200s%s' is unknown or not compiled into this binary",
                 name, strlen(name) > 200 ? "..." : "");
        log_with_available(what);
        return PS_ERR_NOT_FOUND;
    }
    char why[256] = "";
    if (found->unavailable != NULL && found->unavailable(why, sizeof(why)) != 0) {
        snprintf(what, sizeof(what), "van '%s' is compiled in but cannot run here (%s)",
                 found->name, why[0] ? why : "no reason given");
        log_with_available(what);
        return PS_ERR_UNSUPPORTED;
    }
    *component_p = found;
    return PS_OK;
}

/* Maps a DMLC_ENABLE_RDMA / DMLC_PS_VAN_TYPE value to a van name. Values
 * we do not know are passed through, so ps_van_find() reports them with the
 * list of vans that exist. */
static const char *map_van_type(const char *value)
{
    static int warned_one;
    if (strcasecmp(value, "zmq") == 0 || strcmp(value, "0") == 0 ||
        strcasecmp(value, "tcp") == 0) {
        return "tcp";
    }
    if (strcmp(value, "1") == 0) {
        if (!__atomic_exchange_n(&warned_one, 1, __ATOMIC_RELAXED)) {
            ps_warn(PS_LOG_VAN, "DMLC_ENABLE_RDMA=1 is deprecated; use DMLC_ENABLE_RDMA=ibverbs");
        }
        return "ibverbs";
    }
    if (strcasecmp(value, "ibverbs") == 0) {
        return "ibverbs";
    }
    if (strcasecmp(value, "fabric") == 0) {
        return "fabric";
    }
    if (strcasecmp(value, "shm") == 0) {
        return "shm";
    }
    if (strcasecmp(value, "ucx") == 0) {
        return "ucx";
    }
    return value;
}

/* The van that carries the job between hosts: DMLC_ENABLE_UCX, then
 * DMLC_ENABLE_RDMA, then DMLC_PS_VAN_TYPE, else tcp. */
ps_status_t ps__van_select_network_name(const char **name_p)
{
    if (name_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (ps_config_bool_or(PS_CFG_DMLC_ENABLE_UCX, 0)) {
        *name_p = "ucx";
        return PS_OK;
    }
    const char *value = NULL;
    if (ps_config_is_set(PS_CFG_DMLC_ENABLE_RDMA) &&
        ps_config_get_str(PS_CFG_DMLC_ENABLE_RDMA, &value) == PS_OK && value[0] != '\0') {
        *name_p = map_van_type(value);
        return PS_OK;
    }
    if (ps_config_get_str(PS_CFG_DMLC_PS_VAN_TYPE, &value) == PS_OK && value[0] != '\0') {
        *name_p = map_van_type(value);
        return PS_OK;
    }
    *name_p = "tcp";
    return PS_OK;
}

/* BYTEPS_ENABLE_IPC=1 (as upstream) puts the composed van "ipc" around the
 * network van chosen above: same-host peers through shared memory, the
 * others through that van (the ipc van asks ps__van_select_network_name()
 * which one). A job that is shared memory only ("shm") or already "ipc"
 * stays as it is. */
ps_status_t ps_van_select_name(const char **name_p)
{
    const char *name = NULL;
    ps_status_t st = ps__van_select_network_name(&name);
    if (st != PS_OK) {
        return st;
    }
    if (ps_config_bool_or(PS_CFG_BYTEPS_ENABLE_IPC, 0) && strcasecmp(name, "shm") != 0) {
        name = "ipc";
    }
    *name_p = name;
    return PS_OK;
}

ps_status_t ps_van_no_register_mem(ps_van_t *van, ps_buf_t *buf)
{
    (void)van;
    (void)buf;
    return PS_ERR_UNSUPPORTED;
}

ps_status_t ps_van_no_deregister_mem(ps_van_t *van, ps_buf_t *buf)
{
    (void)van;
    (void)buf;
    return PS_ERR_UNSUPPORTED;
}

int ps_van_no_progress(ps_van_t *van, unsigned budget)
{
    (void)van;
    (void)budget;
    return 0;
}

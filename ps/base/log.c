#include "ps/base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ps/base/env.h"

int ps__log_level = PS_LOG_WARN;

static unsigned ps_log_component_mask = ~0u;
static int ps_log_fd = STDERR_FILENO;
static char ps_log_prefix[64];
static pthread_mutex_t ps_log_prefix_lock = PTHREAD_MUTEX_INITIALIZER;

/* The core's components first, then the registered ones (names are the
 * registrants' static strings; an entry is written once, before the count
 * that publishes it). */
static const char *ps_log_component_names[PS_LOG_COMPONENT_MAX] = {
    [PS_LOG_CORE] = "core", [PS_LOG_BASE] = "base", [PS_LOG_CODEC] = "codec",
    [PS_LOG_VAN] = "van",   [PS_LOG_GPU] = "gpu",   [PS_LOG_APP] = "app",
    [PS_LOG_TOOL] = "tool",
};
static int ps_log_num_components = PS_LOG_CORE_COMPONENT_COUNT; /* atomic */
static pthread_mutex_t ps_log_register_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const ps_log_level_names[PS_LOG_LEVEL_COUNT] = {
    [PS_LOG_ERROR] = "error", [PS_LOG_WARN] = "warn", [PS_LOG_INFO] = "info",
    [PS_LOG_DEBUG] = "debug", [PS_LOG_TRACE] = "trace",
};

const char *ps_log_component_name(ps_log_component_t comp)
{
    int n = __atomic_load_n(&ps_log_num_components, __ATOMIC_ACQUIRE);
    return (int)comp >= 0 && (int)comp < n ? ps_log_component_names[comp] : "?";
}

const char *ps_log_level_name(ps_log_level_t level)
{
    return (unsigned)level < PS_LOG_LEVEL_COUNT ? ps_log_level_names[level] : "?";
}

static unsigned ps_log_parse_components(const char *list)
{
    unsigned mask = 0;
    char buf[256];
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok_r(buf, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        if (!strcasecmp(tok, "all")) {
            return ~0u;
        }
        int n = __atomic_load_n(&ps_log_num_components, __ATOMIC_ACQUIRE);
        for (int c = 0; c < n; ++c) {
            if (!strcasecmp(tok, ps_log_component_names[c])) {
                mask |= 1u << c;
            }
        }
    }
    return mask ? mask : ~0u;
}

/* The component mask from PS_LOG_COMPONENTS (unset: every component),
 * with the components known so far. */
static void ps_log_read_components(void)
{
    const char *comps = ps_env_get("PS_LOG_COMPONENTS");
    __atomic_store_n(&ps_log_component_mask,
                     comps != NULL && *comps != '\0' ? ps_log_parse_components(comps) : ~0u,
                     __ATOMIC_RELAXED);
}

/* Reads the three logging variables of the config table (PS_VERBOSE,
 * PS_LOG_LEVEL, PS_LOG_COMPONENTS) directly: logging must work before, and
 * while, the config table itself is parsed. */
void ps_log_init_from_env(void)
{
    const char *verbose = ps_env_get("PS_VERBOSE");
    const char *level = ps_env_get("PS_LOG_LEVEL");
    int lvl = PS_LOG_WARN;

    if (verbose != NULL && *verbose != '\0') {
        long v = strtol(verbose, NULL, 10);
        lvl = v <= 0 ? PS_LOG_WARN : v == 1 ? PS_LOG_INFO : v == 2 ? PS_LOG_DEBUG : PS_LOG_TRACE;
    }
    if (level != NULL && *level != '\0') {
        for (int l = 0; l < PS_LOG_LEVEL_COUNT; ++l) {
            if (!strcasecmp(level, ps_log_level_names[l])) {
                lvl = l;
            }
        }
    }
    ps_log_read_components();
    __atomic_store_n(&ps__log_level, lvl, __ATOMIC_RELAXED);
}

ps_log_component_t ps_log_component_register(const char *name)
{
    ps_log_component_t id = PS_LOG_VAN; /* the table is full: log as a van */
    pthread_mutex_lock(&ps_log_register_lock);
    int n = ps_log_num_components;
    for (int c = 0; c < n; ++c) {
        if (!strcasecmp(name, ps_log_component_names[c])) {
            id = (ps_log_component_t)c;
            goto out;
        }
    }
    if (n < PS_LOG_COMPONENT_MAX) {
        ps_log_component_names[n] = name;
        __atomic_store_n(&ps_log_num_components, n + 1, __ATOMIC_RELEASE);
        id = (ps_log_component_t)n;
    }
out:
    pthread_mutex_unlock(&ps_log_register_lock);
    /* PS_LOG_COMPONENTS may name it: read again now that it is known. */
    ps_log_read_components();
    return id;
}

__attribute__((constructor)) static void ps_log_constructor(void)
{
    ps_log_init_from_env();
}

void ps_log_set_level(ps_log_level_t level)
{
    __atomic_store_n(&ps__log_level, (int)level, __ATOMIC_RELAXED);
}

ps_log_level_t ps_log_get_level(void)
{
    return (ps_log_level_t)__atomic_load_n(&ps__log_level, __ATOMIC_RELAXED);
}

void ps_log_set_prefix(const char *prefix)
{
    pthread_mutex_lock(&ps_log_prefix_lock);
    snprintf(ps_log_prefix, sizeof(ps_log_prefix), "%s", prefix ? prefix : "");
    pthread_mutex_unlock(&ps_log_prefix_lock);
}

void ps_log_set_fd(int fd)
{
    __atomic_store_n(&ps_log_fd, fd < 0 ? STDERR_FILENO : fd, __ATOMIC_RELAXED);
}

int ps__log_enabled(ps_log_level_t level, ps_log_component_t comp)
{
    /* Errors and warnings are never filtered by component. */
    unsigned mask = __atomic_load_n(&ps_log_component_mask, __ATOMIC_RELAXED);
    return level <= PS_LOG_WARN || (mask >> ((unsigned)comp & 31u)) & 1u;
}

int ps__log_ratelimit(uint64_t *last_ns, uint32_t *suppressed, uint64_t interval_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t last = __atomic_load_n(last_ns, __ATOMIC_RELAXED);

    if (last != 0 && now - last < interval_ns) {
        __atomic_add_fetch(suppressed, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (!__atomic_compare_exchange_n(last_ns, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        __atomic_add_fetch(suppressed, 1, __ATOMIC_RELAXED);
        return 0;
    }
    uint32_t n = __atomic_exchange_n(suppressed, 0, __ATOMIC_RELAXED);
    if (n != 0) {
        ps__log(PS_LOG_WARN, PS_LOG_CORE, "log", 0, "(%u similar lines suppressed)", n);
    }
    return 1;
}

void ps__log(ps_log_level_t level, ps_log_component_t comp, const char *file,
             int line, const char *fmt, ...)
{
    int saved_errno = errno; /* keep %m meaning the caller's errno */
    char buf[1024];
    struct timespec ts;
    struct tm tm;
    size_t n;
    va_list ap;
    const char *base = strrchr(file, '/');

    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    pthread_mutex_lock(&ps_log_prefix_lock);
    n = (size_t)snprintf(buf, sizeof(buf), "[%02d:%02d:%02d.%06ld %s%s%s %s %s:%d] ",
                         tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000,
                         ps_log_prefix, ps_log_prefix[0] ? " " : "",
                         ps_log_level_name(level), ps_log_component_name(comp),
                         base ? base + 1 : file, line);
    pthread_mutex_unlock(&ps_log_prefix_lock);
    if (n >= sizeof(buf)) {
        n = sizeof(buf) - 1;
    }
    errno = saved_errno;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
    va_end(ap);
    if (m > 0) {
        n += (size_t)m;
    }
    if (n >= sizeof(buf) - 1) {
        n = sizeof(buf) - 2;
    }
    buf[n++] = '\n';
    /* One write per line so lines of concurrent threads and processes do not
     * interleave. */
    ssize_t w = write(__atomic_load_n(&ps_log_fd, __ATOMIC_RELAXED), buf, n);
    (void)w;
    errno = saved_errno;
}

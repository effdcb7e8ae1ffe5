/*
 * Log levels and components, and the calls that set them: what a program
 * using ps controls (PS_VERBOSE / PS_LOG_LEVEL / PS_LOG_COMPONENTS do the
 * same from the environment). ps's own logging macros are in log.h.
 */
#ifndef PS_BASE_LOG_LEVEL_H_
#define PS_BASE_LOG_LEVEL_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PS_LOG_ERROR = 0,
    PS_LOG_WARN = 1,
    PS_LOG_INFO = 2,
    PS_LOG_DEBUG = 3,
    PS_LOG_TRACE = 4,
    PS_LOG_LEVEL_COUNT
} ps_log_level_t;

/* The core's components; each van registers its own ("tcp", "shm",
 * "rdma", "fabric", "ucx": ps_log_component_register in log.h), up to
 * PS_LOG_COMPONENT_MAX in all. */
typedef enum {
    PS_LOG_CORE = 0, /* postoffice, bootstrap, lifecycle */
    PS_LOG_BASE,
    PS_LOG_CODEC,
    PS_LOG_VAN,      /* van interface and registry */
    PS_LOG_GPU,
    PS_LOG_APP,
    PS_LOG_TOOL,
    PS_LOG_CORE_COMPONENT_COUNT,
    /* Registered components take the ids after the core's, up to this
     * one: the type must hold them (in C++ a value outside an enum's
     * range is undefined). */
    PS__LOG_COMPONENT_LAST = 31
} ps_log_component_t;

#define PS_LOG_COMPONENT_MAX (PS__LOG_COMPONENT_LAST + 1)

/* Re-reads PS_VERBOSE / PS_LOG_LEVEL / PS_LOG_COMPONENTS from the environment. */
void ps_log_init_from_env(void);
void ps_log_set_level(ps_log_level_t level);
ps_log_level_t ps_log_get_level(void);
/* Prefix put on every line, e.g. "worker 9" once the node id is known. */
void ps_log_set_prefix(const char *prefix);
/* Redirect output (tests); fd -1 restores stderr. */
void ps_log_set_fd(int fd);

/* A component's name ("core", "tcp", ...); "?" for an unknown one. */
const char *ps_log_component_name(ps_log_component_t comp);
const char *ps_log_level_name(ps_log_level_t level);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_LOG_LEVEL_H_ */

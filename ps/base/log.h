/*
 * Logging: one macro family gated by level and component, cheap when off.
 *
 * Levels follow upstream PS_VERBOSE: 0 shows errors and warnings, 1 adds
 * connection set-up (info), 2 adds a line per message (debug). PS_LOG_LEVEL
 * names a level directly and also offers "trace". PS_LOG_COMPONENTS limits
 * info and below to a comma-separated list of components ("van,tcp").
 *
 * Style: lower-case messages, "qp 0x%x" rather than "qp=...", %m after every
 * failed system call. The place that decides an error logs it; callers that
 * only pass a status on do not log again.
 *
 * The levels, components and their setters are in log_level.h (the part a
 * program using ps sees through ps/ps.h).
 */
#ifndef PS_BASE_LOG_H_
#define PS_BASE_LOG_H_

#include <stdint.h>

#include "ps/base/log_level.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compile-time ceiling: levels above it vanish from the binary. */
#ifndef PS_LOG_MAX_LEVEL
#define PS_LOG_MAX_LEVEL PS_LOG_TRACE
#endif

#define ps_likely(_x)   __builtin_expect(!!(_x), 1)
#define ps_unlikely(_x) __builtin_expect(!!(_x), 0)

/* Runtime threshold; read from the environment on first use. Read and
 * written atomically (relaxed: a plain load on common CPUs), so the level can
 * change while other threads log. */
extern int ps__log_level;

int ps__log_enabled(ps_log_level_t level, ps_log_component_t comp);
void ps__log(ps_log_level_t level, ps_log_component_t comp, const char *file,
             int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Returns 1 if a call site whose state is *last_ns may log now. */
int ps__log_ratelimit(uint64_t *last_ns, uint32_t *suppressed, uint64_t interval_ns);

/* A layer's own component (each van's): the id of `name` (a static
 * string), registered on first use; PS_LOG_VAN when PS_LOG_COMPONENT_MAX
 * are taken. PS_LOG_COMPONENTS may name it. */
ps_log_component_t ps_log_component_register(const char *name);

/* Defines `_var`, a layer's component named `_name`, registered when the
 * object defining it is linked, before main (PS_LOG_VAN until then). */
#define PS_LOG_COMPONENT(_var, _name)                                          \
    ps_log_component_t _var = PS_LOG_VAN;                                      \
    __attribute__((constructor)) static void ps__log_register_##_var(void)     \
    {                                                                          \
        _var = ps_log_component_register(_name);                               \
    }

#define ps_log(_level, _comp, _fmt, ...)                                      \
    do {                                                                      \
        if ((_level) <= PS_LOG_MAX_LEVEL &&                                   \
            ps_unlikely((int)(_level) <=                                      \
                        __atomic_load_n(&ps__log_level, __ATOMIC_RELAXED)) && \
            ps__log_enabled((_level), (_comp))) {                             \
            ps__log((_level), (_comp), __FILE__, __LINE__, _fmt,              \
                    ##__VA_ARGS__);                                           \
        }                                                                     \
    } while (0)

#define ps_error(_comp, _fmt, ...) ps_log(PS_LOG_ERROR, _comp, _fmt, ##__VA_ARGS__)
#define ps_warn(_comp, _fmt, ...)  ps_log(PS_LOG_WARN, _comp, _fmt, ##__VA_ARGS__)
#define ps_info(_comp, _fmt, ...)  ps_log(PS_LOG_INFO, _comp, _fmt, ##__VA_ARGS__)
#define ps_debug(_comp, _fmt, ...) ps_log(PS_LOG_DEBUG, _comp, _fmt, ##__VA_ARGS__)
#define ps_trace(_comp, _fmt, ...) ps_log(PS_LOG_TRACE, _comp, _fmt, ##__VA_ARGS__)

/* A warning from a hot path: at most one line per second per call site, with
 * the number of lines suppressed since the last one. */
#define ps_warn_ratelimited(_comp, _fmt, ...)                                 \
    do {                                                                      \
        static uint64_t ps__rl_last;                                          \
        static uint32_t ps__rl_suppressed;                                    \
        if (ps__log_ratelimit(&ps__rl_last, &ps__rl_suppressed,               \
                              1000000000ull)) {                               \
            ps_warn(_comp, _fmt, ##__VA_ARGS__);                              \
        }                                                                     \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_LOG_H_ */

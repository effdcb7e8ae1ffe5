/*
 * Keeps the process's own dispositions of its fatal signals across the
 * initialisation of a third-party library. Some libraries a van loads
 * (UCX's libucs, libfabric's psm provider through libinfinipath) install
 * handlers for SIGSEGV, SIGTERM and the like that turn a crash or a kill
 * into exit(1) and no core file; a launcher must see the signal instead.
 *
 *   ps_sigkeep_t keep;
 *   ps__sigkeep_save(&keep);
 *   ... dlopen, library init ...
 *   ps__sigkeep_restore(&keep, "ucx");
 *
 * ps__sigkeep_restore() puts back every fatal signal's disposition that
 * differs from the saved one and logs, at info level, which it restored and
 * for which van. Both are async-signal-unsafe and meant for open paths.
 */
#ifndef PS_BASE_SIGKEEP_H_
#define PS_BASE_SIGKEEP_H_

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

/* SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT, SIGQUIT. */
#define PS_SIGKEEP_COUNT 8

typedef struct {
    int saved; /* ps__sigkeep_save() succeeded for that slot */
    struct sigaction act;
} ps_sigkeep_slot_t;

typedef struct {
    ps_sigkeep_slot_t slots[PS_SIGKEEP_COUNT];
} ps_sigkeep_t;

/* The signals kept, in slot order. */
extern const int ps__sigkeep_signals[PS_SIGKEEP_COUNT];

void ps__sigkeep_save(ps_sigkeep_t *keep);

/* Restores what changed since the save; returns how many signals it
 * restored. who names the library's user in the log line ("fabric"). */
int ps__sigkeep_restore(const ps_sigkeep_t *keep, const char *who);

/* Sets name to value unless the user set it (any value, empty included). */
void ps__sigkeep_setenv_default(const char *name, const char *value);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_SIGKEEP_H_ */

/* Fatal-signal dispositions kept across a library's initialisation. */
#include "ps/base/sigkeep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/env.h"
#include "ps/base/log.h"

const int ps__sigkeep_signals[PS_SIGKEEP_COUNT] = {
    SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT, SIGQUIT,
};

void ps__sigkeep_save(ps_sigkeep_t *keep)
{
    memset(keep, 0, sizeof(*keep));
    for (int i = 0; i < PS_SIGKEEP_COUNT; i++)
        keep->slots[i].saved = sigaction(ps__sigkeep_signals[i], NULL, &keep->slots[i].act) == 0;
}

/* The handler is what decides how the process dies; SA_SIGINFO says which
 * member of the union holds it. The mask and other flags do not matter. */
static int same_disposition(const struct sigaction *a, const struct sigaction *b)
{
    int a_info = (a->sa_flags & SA_SIGINFO) != 0;
    int b_info = (b->sa_flags & SA_SIGINFO) != 0;
    if (a_info != b_info)
        return 0;
    if (a_info)
        return a->sa_sigaction == b->sa_sigaction;
    return a->sa_handler == b->sa_handler;
}

int ps__sigkeep_restore(const ps_sigkeep_t *keep, const char *who)
{
    char names[128] = "";
    size_t pos = 0;
    int restored = 0;
    for (int i = 0; i < PS_SIGKEEP_COUNT; i++) {
        const ps_sigkeep_slot_t *s = &keep->slots[i];
        struct sigaction now;
        if (!s->saved || sigaction(ps__sigkeep_signals[i], NULL, &now) != 0)
            continue;
        if (same_disposition(&now, &s->act))
            continue;
        if (sigaction(ps__sigkeep_signals[i], &s->act, NULL) != 0) {
            ps_warn(PS_LOG_VAN, "%s van: cannot restore the disposition of SIG%s: %m", who,
                    sigabbrev_np(ps__sigkeep_signals[i]));
            continue;
        }
        restored++;
        int w = snprintf(names + pos, sizeof(names) - pos, "%sSIG%s", pos ? " " : "",
                         sigabbrev_np(ps__sigkeep_signals[i]));
        if (w > 0 && (size_t)w < sizeof(names) - pos)
            pos += (size_t)w;
    }
    if (restored > 0)
        ps_info(PS_LOG_VAN, "%s van: its libraries installed handlers of fatal signals; "
                "restored the process's own dispositions of %s", who, names);
    return restored;
}

void ps__sigkeep_setenv_default(const char *name, const char *value)
{
    ps_env_set_default(name, value);
}

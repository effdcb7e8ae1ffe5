/*
 * fuzz_quiet.h: the log to /dev/null, errors only.
 */
#include "tests/fuzz/fuzz_quiet.h"

#include <fcntl.h>

#include "ps/base/log.h"

void fuzz_quiet_logs(void)
{
    static int quiet;
    if (quiet)
        return;
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ps_log_set_level(PS_LOG_ERROR);
    if (fd >= 0)
        ps_log_set_fd(fd);
    quiet = 1;
}

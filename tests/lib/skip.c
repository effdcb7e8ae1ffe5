#include "tests/lib/skip.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void ps_test_skip(const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    printf("SKIPPED: %s\n", why);
    fflush(stdout);
    const char *dir = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    if (dir != NULL && dir[0] != '\0') {
        char path[4096];
        snprintf(path, sizeof(path), "%s/PS_TEST_SKIPPED", dir);
        FILE *f = fopen(path, "w");
        if (f != NULL) {
            fprintf(f, "%s\n", why);
            fclose(f);
        }
    }
    exit(0);
}

/*
 * A consumer's own code under its own rules: built without -Werror (the
 * toolchain's warnings_as_errors feature turned off for this target) and
 * without _GNU_SOURCE, in plain C11. ps/ps.h must still compile, and the
 * program runs: it names the library version and a status.
 */
#ifdef _GNU_SOURCE
#error "_GNU_SOURCE reached a consumer target that undefined it"
#endif

#include <stdio.h>
#include <string.h>

#include "ps/ps.h"

int main(void)
{
    /* Unused on purpose: a warning here must not fail the build. */
    int unused_on_purpose;
    const char *s = ps_status_str(PS_ERR_TIMED_OUT);
    if (s == NULL || strlen(s) == 0) {
        fprintf(stderr, "FAIL: no name for PS_ERR_TIMED_OUT\n");
        return 1;
    }
    printf("PASS: ps %s, PS_ERR_TIMED_OUT is \"%s\"\n", PS_VERSION_STRING, s);
    return 0;
}

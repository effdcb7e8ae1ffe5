/*
 * The shared part of the check programs (check_node.h).
 */
#include "tests/lib/check_node.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *check_role = "?";
int check_rank = -1;

void check_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s %d: ", check_role, check_rank);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

ps_postoffice_t *check_node_start(void)
{
    return check_node_start_params(NULL);
}

ps_postoffice_t *check_node_start_params(const ps_start_params_t *params)
{
    ps_postoffice_t *po;
    ps_status_t st = ps_postoffice_start(params, 1, &po);
    if (st != PS_OK)
        check_fail("start: %s", ps_status_str(st));
    check_role = ps_role_str(ps_postoffice_role(po));
    check_rank = ps_postoffice_my_rank(po);
    return po;
}

void check_node_run(ps_postoffice_t *po, check_role_func_t worker, check_role_func_t server,
                    check_role_func_t scheduler)
{
    ps_role_t role = ps_postoffice_role(po);
    check_role_func_t fn = role == PS_ROLE_WORKER   ? worker
                           : role == PS_ROLE_SERVER ? server
                                                    : scheduler;
    if (fn)
        fn(po);
    ps_status_t st = ps_postoffice_finalize(po, 1);
    if (st != PS_OK)
        check_fail("finalize: %s", ps_status_str(st));
}

uint64_t check_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t check_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return check_mix64(check_mix64(check_mix64(check_mix64(a) ^ b) ^ c) ^ d);
}

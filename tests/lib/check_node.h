/*
 * What the multi-process check programs (kv_check, sum_check, app_check,
 * fault_node, kill_check) share: who this process is, for the PASS / FAIL
 * lines the test scripts read; failing with one such line; and the
 * deterministic values they push and verify.
 */
#ifndef PS_TESTS_LIB_CHECK_NODE_H_
#define PS_TESTS_LIB_CHECK_NODE_H_

#include <stdint.h>

#include "ps/base/status.h"
#include "ps/net/postoffice.h"

/* "scheduler", "server" or "worker" ("?" until set) and the rank (-1). */
extern const char *check_role;
extern int check_rank;

/* Prints "FAIL <role> <rank>: <message>" on stdout and exits 1. */
void check_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* check_fail()s with the call, file and line unless the call returns PS_OK. */
#define CHECK_OK(_call)                                                                  \
    do {                                                                                 \
        ps_status_t _st = (_call);                                                       \
        if (_st != PS_OK)                                                                \
            check_fail("%s:%d: %s: %s", __FILE__, __LINE__, #_call, ps_status_str(_st)); \
    } while (0)

/* Starts this process's node from DMLC_* (ps_postoffice_start with its
 * start barrier) and sets check_role and check_rank; check_fail()s when it
 * cannot. */
ps_postoffice_t *check_node_start(void);
/* The same with the parameters given (NULL: from DMLC_*). */
ps_postoffice_t *check_node_start_params(const ps_start_params_t *params);

/* What a check program does in one role. */
typedef void (*check_role_func_t)(ps_postoffice_t *po);

/* Runs the function of this node's role (NULL: none), then finalizes the
 * node (a barrier with every node) and check_fail()s if that fails. */
void check_node_run(ps_postoffice_t *po, check_role_func_t worker, check_role_func_t server,
                    check_role_func_t scheduler);

/* splitmix64's finaliser over x + the golden ratio: deterministic values
 * that every process of a job computes alike. */
uint64_t check_mix64(uint64_t x);
uint64_t check_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

#endif /* PS_TESTS_LIB_CHECK_NODE_H_ */

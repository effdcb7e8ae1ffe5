/*
 * The variables of the shm van, an X-macro list in the core table's format
 * (ps/base/config_vars.h): registered as a table of their own
 * (ps_config_register), listed by ps_info and the README with the rest.
 * No include guard: included with different definitions of PS_CONFIG_VAR.
 */
#ifndef PS_CONFIG_VAR
#error "define PS_CONFIG_VAR before including this list"
#endif

PS_CONFIG_VAR(BYTEPS_JOB_ID, STRING, "0", "shm", NULL,
              "Job id inserted in shared-memory segment names so that jobs on one host do not collide.")

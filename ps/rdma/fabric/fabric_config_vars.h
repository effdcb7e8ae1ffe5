/*
 * The variables of the fabric van, an X-macro list in the core table's format
 * (ps/base/config_vars.h): registered as a table of their own
 * (ps_config_register), listed by ps_info and the README with the rest.
 * No include guard: included with different definitions of PS_CONFIG_VAR.
 */
#ifndef PS_CONFIG_VAR
#error "define PS_CONFIG_VAR before including this list"
#endif

PS_CONFIG_VAR(PS_FABRIC_PROVIDER, STRING, "", "fabric", NULL,
              "libfabric provider to use (efa, tcp, shm, verbs, ...); unset takes the first that fits.")
PS_CONFIG_VAR(PS_FABRIC_STUCK_MS, INT, "10000", "fabric", NULL,
              "Longest time the fabric van's progress thread may stay inside one call of the provider (libfabric's shm spins for good on a lock a killed process held) before the van fails every link and leaves that thread behind at close, in milliseconds (at least 1000); 0 never.")

/*
 * The variables of the RDMA vans (ibverbs and fabric) alike, an X-macro list in the core table's format
 * (ps/base/config_vars.h): registered as a table of their own
 * (ps_config_register), listed by ps_info and the README with the rest.
 * No include guard: included with different definitions of PS_CONFIG_VAR.
 */
#ifndef PS_CONFIG_VAR
#error "define PS_CONFIG_VAR before including this list"
#endif

PS_CONFIG_VAR(BYTEPS_ADDRESS_POOL_SIZE, INT, "10240", "rdma", NULL,
              "Slots in the rendezvous address pool (the most receive buffers outstanding at once), a count.")
PS_CONFIG_VAR(PS_MR_CACHE_BYTES, SIZE, "0", "rdma", NULL,
              "Most memory kept registered by the registration cache, in bytes; 0 means half of RLIMIT_MEMLOCK, or unlimited.")

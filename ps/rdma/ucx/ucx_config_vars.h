/*
 * The variables of the ucx van, an X-macro list in the core table's format
 * (ps/base/config_vars.h): registered as a table of their own
 * (ps_config_register), listed by ps_info and the README with the rest.
 * No include guard: included with different definitions of PS_CONFIG_VAR.
 */
#ifndef PS_CONFIG_VAR
#error "define PS_CONFIG_VAR before including this list"
#endif

PS_CONFIG_VAR(DMLC_NUM_CPU_DEV, INT, "1", "ucx", NULL,
              "Upstream's UCX contexts on host memory per node; the ucx van runs one UCX worker per process, so a value above 1 is logged and has no effect.")
PS_CONFIG_VAR(DMLC_NUM_GPU_DEV, INT, "0", "ucx", NULL,
              "Upstream's UCX contexts on GPU memory per node; the ucx van runs one UCX context per process, which also carries CUDA memory where UCX has its cuda transports, so a value above 0 is logged and has no effect.")
PS_CONFIG_VAR(BYTEPS_UCX_SHORT_THRESH, SIZE, "4096", "ucx", NULL,
              "Data below this size is packed into the meta message, in bytes.")

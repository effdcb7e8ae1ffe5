/*
 * The variables of the ibverbs van, an X-macro list in the core table's format
 * (ps/base/config_vars.h): registered as a table of their own
 * (ps_config_register), listed by ps_info and the README with the rest.
 * No include guard: included with different definitions of PS_CONFIG_VAR.
 */
#ifndef PS_CONFIG_VAR
#error "define PS_CONFIG_VAR before including this list"
#endif

PS_CONFIG_VAR(BYTEPS_RDMA_START_DEPTH, INT, "128", "rdma", NULL,
              "Rendezvous-start send contexts per endpoint, a count.")
PS_CONFIG_VAR(BYTEPS_RDMA_RX_DEPTH, INT, "2048", "rdma", NULL,
              "Posted receives (and reply contexts) per endpoint, a count.")
PS_CONFIG_VAR(BYTEPS_RDMA_MAX_CONCURR_WR, INT, "8192", "rdma", NULL,
              "Most signaled sends in flight on one RDMA device (its completion queue holds them plus BYTEPS_RDMA_RX_DEPTH receives; a send past it waits), a count from 16.")
PS_CONFIG_VAR(BYTEPS_PRINT_RDMA_LOG, BOOL, "0", "rdma", NULL,
              "1 logs every RDMA message.")
PS_CONFIG_VAR(STEPMESH_QP_NUM, INT, "2", "rdma", "STEPAF_QP_NUM",
              "Queue pairs per RDMA endpoint (the ibverbs van splits payloads across them), a count from 1 to 8.")
PS_CONFIG_VAR(STEPMESH_SPLIT_QP_LAG, BOOL, "0", "rdma", "DMLC_SPLIT_QP_LAG",
              "1 pins the queue pairs of an endpoint to both ports of a bonded NIC and splits payloads across them.")

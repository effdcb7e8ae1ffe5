/*
 * Where the ibverbs van's hardware tests run: the address of an RDMA
 * interface (PS_TEST_RDMA_HOST if set, else the first RDMA netdev with an
 * IPv4 address), or why they cannot run here.
 */
#ifndef PS_TESTS_RDMA_VERBS_RDMA_HOST_H_
#define PS_TESTS_RDMA_VERBS_RDMA_HOST_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 with the address in host; 0 with the reason in why. */
int ps_test_rdma_host(char *host, size_t host_len, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif

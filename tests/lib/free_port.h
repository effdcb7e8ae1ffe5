/*
 * A loopback TCP port that was free a moment ago (the kernel picks it), for
 * tests that start a job in one process and need the scheduler's port.
 */
#ifndef PS_TESTS_LIB_FREE_PORT_H_
#define PS_TESTS_LIB_FREE_PORT_H_

#ifdef __cplusplus
extern "C" {
#endif

/* On 127.0.0.1, or ::1 when v6; -1 when none could be had. */
int test_free_port(int v6);

#ifdef __cplusplus
}
#endif

#endif /* PS_TESTS_LIB_FREE_PORT_H_ */

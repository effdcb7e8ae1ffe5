/*
 * Test hooks of the libfabric van (van-level tests only).
 */
#ifndef PS_RDMA_FABRIC_FABRIC_TESTING_H_
#define PS_RDMA_FABRIC_FABRIC_TESTING_H_

#ifdef __cplusplus
extern "C" {
#endif

/* 1: vans opened from now on send pull responses as tagged messages even
 * where the provider offers RMA writes (the fallback path). */
void ps__fabric_test_disable_rma(int disabled);

struct ps_van;

/* Sends of this van to connected peers not yet complete (queued or in
 * flight); those to a failed or disconnected peer do not count, they may
 * never complete. Tests let two vans of one process finish before closing
 * either: libfabric's shm provider shares an in-process peer's memory
 * region, which closing that peer frees. */
unsigned long ps__fabric_test_sends_in_flight(struct ps_van *van);

/* Logs (warn) the van's queues and sequence state: for a test that timed
 * out waiting for messages. */
void ps__fabric_test_dump(struct ps_van *van);

/* RMA writes posted by every fabric van of this process so far. */
unsigned long ps__fabric_test_rma_writes(void);

/* CUDA memory registrations the fabric vans of this process tried at open
 * (made only where CUDA was in use: ps/base/device_probe.h). */
unsigned long ps__fabric_test_hmem_probes(void);

/* The next `times` endpoint enables of this process fail as if the
 * address the provider picked had been taken meanwhile (EADDRINUSE). */
void ps__fabric_test_fail_enable(int times);

/* 1: every completion error of a send or a data receive is handled twice,
 * as rxm of libfabric 1.17 sometimes reports one; returns how many were
 * repeated so far. */
unsigned long ps__fabric_test_repeat_errors(int on);

/* 1: the van's progress thread spins in place from its next round on, as
 * in a provider call that never returns (the watchdog's case); 0: it goes
 * on. */
void ps__fabric_test_stall(struct ps_van *van, int on);

/* The van's count of posted ops not yet reported (never negative). */
long long ps__fabric_test_ops_in_flight(struct ps_van *van);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_FABRIC_FABRIC_TESTING_H_ */

/*
 * Test hooks of the ibverbs van (van-level tests only).
 */
#ifndef PS_RDMA_VERBS_VERBS_TESTING_H_
#define PS_RDMA_VERBS_VERBS_TESTING_H_

#ifdef __cplusplus
extern "C" {
#endif

struct ps_van;

/* Segments this van received in place: written by the sender's NIC
 * straight into the buffer recv_buffer named for them (a steered
 * rendezvous), with no copy on the way. */
unsigned long ps__vb_test_received_in_place(struct ps_van *van);

#ifdef __cplusplus
}
#endif

#endif /* PS_RDMA_VERBS_VERBS_TESTING_H_ */

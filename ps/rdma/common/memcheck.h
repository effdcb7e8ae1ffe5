/*
 * Memory a device wrote (a received SEND, an RDMA write into a grant or a
 * pull destination, a completion entry) is defined, although no
 * instruction valgrind watched wrote it. Under memcheck this says so, as
 * rdma-core and UCX do for their own receive paths; elsewhere it is a few
 * instructions that do nothing, or nothing at all without valgrind's
 * header.
 */
#ifndef PS_RDMA_COMMON_MEMCHECK_H_
#define PS_RDMA_COMMON_MEMCHECK_H_

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define PS_RDMA_DEVICE_WROTE(_ptr, _len) ((void)VALGRIND_MAKE_MEM_DEFINED((_ptr), (_len)))
#endif
#endif

#ifndef PS_RDMA_DEVICE_WROTE
#define PS_RDMA_DEVICE_WROTE(_ptr, _len) ((void)(_ptr), (void)(_len))
#endif

#endif /* PS_RDMA_COMMON_MEMCHECK_H_ */

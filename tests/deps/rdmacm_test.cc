// librdmacm links; without the rdma_cm device (this machine) its calls fail
// with a clean errno instead of crashing or hanging.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include <gtest/gtest.h>

namespace {

bool have_rdma_cm() { return access("/dev/infiniband/rdma_cm", F_OK) == 0; }

TEST(Rdmacm, EventChannelOrCleanErrno) {
  errno = 0;
  struct rdma_event_channel *ch = rdma_create_event_channel();
  if (ch == nullptr) {
    int err = errno;
    EXPECT_NE(err, 0) << "failure without a reason";
    printf("rdma_cm unavailable: rdma_create_event_channel: %s\n", strerror(err));
    if (!have_rdma_cm()) {
      EXPECT_TRUE(err == ENODEV || err == ENOENT || err == ENOSYS) << strerror(err);
    }
    return;
  }
  EXPECT_GE(ch->fd, 0);
  struct rdma_cm_id *id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0) {
    EXPECT_EQ(rdma_destroy_id(id), 0);
  } else {
    printf("rdma_create_id: %s\n", strerror(errno));
  }
  rdma_destroy_event_channel(ch);
}

TEST(Rdmacm, GetaddrinfoLoopbackOrCleanErrno) {
  struct rdma_addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_flags = RAI_NUMERICHOST;
  hints.ai_port_space = RDMA_PS_TCP;
  struct rdma_addrinfo *res = nullptr;
  errno = 0;
  int rc = rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res);
  if (rc != 0) {
    int err = errno;
    EXPECT_EQ(rc, -1);
    EXPECT_NE(err, 0) << "failure without a reason";
    EXPECT_EQ(res, nullptr);
    printf("rdma_getaddrinfo 127.0.0.1: %s\n", strerror(err));
    return;
  }
  ASSERT_NE(res, nullptr);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  ASSERT_EQ(res->ai_dst_addr->sa_family, AF_INET);
  const struct sockaddr_in *sin = reinterpret_cast<const struct sockaddr_in *>(res->ai_dst_addr);
  EXPECT_EQ(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
  EXPECT_EQ(ntohs(sin->sin_port), 7471);
  rdma_freeaddrinfo(res);
}

}  // namespace

#include "ps/base/status.h"

#include <errno.h>
#include <string.h>

#include <gtest/gtest.h>

TEST(Status, StringsAndNames) {
  EXPECT_STREQ(ps_status_str(PS_OK), "success");
  EXPECT_STREQ(ps_status_str(PS_ERR_TIMED_OUT), "timed out");
  EXPECT_STREQ(ps_status_name(PS_ERR_PEER_GONE), "PS_ERR_PEER_GONE");
  EXPECT_STREQ(ps_status_str(static_cast<ps_status_t>(-999)), "unknown status");
  EXPECT_STREQ(ps_status_name(static_cast<ps_status_t>(42)), "PS_STATUS_UNKNOWN");
}

TEST(Status, EveryErrorHasItsOwnText) {
  for (int s = -120; s <= 1; ++s) {
    const char *name = ps_status_name(static_cast<ps_status_t>(s));
    if (strcmp(name, "PS_STATUS_UNKNOWN") != 0) {
      EXPECT_STRNE(ps_status_str(static_cast<ps_status_t>(s)), "unknown status") << name;
    }
  }
}

TEST(Status, Groups) {
  EXPECT_TRUE(PS_STATUS_IS_CALL_ERR(PS_ERR_INVALID_ARG));
  EXPECT_TRUE(PS_STATUS_IS_RESOURCE_ERR(PS_ERR_REGISTRATION));
  EXPECT_TRUE(PS_STATUS_IS_TIME_ERR(PS_ERR_TIMED_OUT));
  EXPECT_TRUE(PS_STATUS_IS_PEER_ERR(PS_ERR_PEER_GONE));
  EXPECT_TRUE(PS_STATUS_IS_LINK_ERR(PS_ERR_LINK_FAILED));
  EXPECT_TRUE(PS_STATUS_IS_JOB_ERR(PS_ERR_CONFIG));
  EXPECT_FALSE(PS_STATUS_IS_ERR(PS_INPROGRESS));
  EXPECT_FALSE(PS_STATUS_IS_PEER_ERR(PS_ERR_LINK_FAILED));
}

TEST(Status, FromErrno) {
  EXPECT_EQ(ps_status_from_errno(0), PS_OK);
  EXPECT_EQ(ps_status_from_errno(ECONNRESET), PS_ERR_PEER_GONE);
  EXPECT_EQ(ps_status_from_errno(EADDRINUSE), PS_ERR_ADDRESS_IN_USE);
  EXPECT_EQ(ps_status_from_errno(ETIMEDOUT), PS_ERR_TIMED_OUT);
  EXPECT_EQ(ps_status_from_errno(ENOMEM), PS_ERR_NO_MEMORY);
}

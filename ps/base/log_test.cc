#include "ps/base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

// Layers' own components, registered as the vans register theirs.
PS_LOG_COMPONENT(test_tcp_log, "tcp")
PS_LOG_COMPONENT(test_rdma_log, "rdma")
PS_LOG_COMPONENT(test_fabric_log, "fabric")
#define PS_LOG_TCP test_tcp_log
#define PS_LOG_RDMA test_rdma_log
#define PS_LOG_FABRIC test_fabric_log

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = memfd_create("ps_log", 0);
    ASSERT_GE(fd_, 0);
    // Appends, like a log file should be opened: concurrent lines must not
    // land on the same offset.
    ASSERT_EQ(fcntl(fd_, F_SETFL, O_APPEND), 0);
    ps_log_set_fd(fd_);
    Clean();
  }
  void TearDown() override {
    ps_log_set_fd(-1);
    close(fd_);
    Clean();
    ps_log_set_prefix("");
  }
  static void Clean() {
    unsetenv("PS_VERBOSE");
    unsetenv("PS_LOG_LEVEL");
    unsetenv("PS_LOG_COMPONENTS");
    ps_log_init_from_env();
  }
  std::string Text() const {
    std::string out;
    char buf[4096];
    off_t off = 0;
    ssize_t n;
    while ((n = pread(fd_, buf, sizeof(buf), off)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      off += n;
    }
    return out;
  }
  size_t Lines() const {
    size_t n = 0;
    for (char c : Text()) n += c == '\n';
    return n;
  }
  int fd_ = -1;
};

TEST_F(LogTest, DefaultShowsWarningsOnly) {
  EXPECT_EQ(ps_log_get_level(), PS_LOG_WARN);
  ps_error(PS_LOG_CORE, "an error %d", 1);
  ps_warn(PS_LOG_TCP, "a warning");
  ps_info(PS_LOG_TCP, "hidden info");
  ps_debug(PS_LOG_TCP, "hidden debug");
  std::string t = Text();
  EXPECT_NE(t.find(" error core log_test.cc:"), std::string::npos) << t;
  EXPECT_NE(t.find("] an error 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find(" warn tcp "), std::string::npos) << t;
  EXPECT_EQ(t.find("hidden"), std::string::npos) << t;
  EXPECT_EQ(Lines(), 2u);
}

TEST_F(LogTest, VerboseAndLevelFromEnvironment) {
  setenv("PS_VERBOSE", "1", 1);
  ps_log_init_from_env();
  EXPECT_EQ(ps_log_get_level(), PS_LOG_INFO);
  setenv("PS_VERBOSE", "2", 1);
  ps_log_init_from_env();
  EXPECT_EQ(ps_log_get_level(), PS_LOG_DEBUG);
  setenv("PS_VERBOSE", "0", 1);
  ps_log_init_from_env();
  EXPECT_EQ(ps_log_get_level(), PS_LOG_WARN);
  // PS_LOG_LEVEL overrides PS_VERBOSE.
  setenv("PS_VERBOSE", "2", 1);
  setenv("PS_LOG_LEVEL", "error", 1);
  ps_log_init_from_env();
  EXPECT_EQ(ps_log_get_level(), PS_LOG_ERROR);
  setenv("PS_LOG_LEVEL", "TRACE", 1);
  ps_log_init_from_env();
  EXPECT_EQ(ps_log_get_level(), PS_LOG_TRACE);
  // An unknown name leaves PS_VERBOSE in charge.
  setenv("PS_LOG_LEVEL", "loud", 1);
  ps_log_init_from_env();
  EXPECT_EQ(ps_log_get_level(), PS_LOG_DEBUG);
}

TEST_F(LogTest, ComponentFilterKeepsWarnings) {
  setenv("PS_LOG_LEVEL", "debug", 1);
  setenv("PS_LOG_COMPONENTS", "tcp, rdma", 1);
  ps_log_init_from_env();
  ps_info(PS_LOG_TCP, "tcp info");
  ps_debug(PS_LOG_RDMA, "rdma debug");
  ps_info(PS_LOG_VAN, "van info");
  ps_warn(PS_LOG_VAN, "van warning");
  std::string t = Text();
  EXPECT_NE(t.find("tcp info"), std::string::npos);
  EXPECT_NE(t.find("rdma debug"), std::string::npos);
  EXPECT_EQ(t.find("van info"), std::string::npos);
  EXPECT_NE(t.find("van warning"), std::string::npos);

  setenv("PS_LOG_COMPONENTS", "all", 1);
  ps_log_init_from_env();
  ps_info(PS_LOG_VAN, "van again");
  EXPECT_NE(Text().find("van again"), std::string::npos);
}

TEST_F(LogTest, PrefixAndErrno) {
  ps_log_set_prefix("worker 9");
  errno = ENOENT;
  ps_error(PS_LOG_BASE, "open failed: %m");
  EXPECT_EQ(errno, ENOENT);  // logging keeps the caller's errno
  std::string t = Text();
  EXPECT_NE(t.find(" worker 9 error base "), std::string::npos) << t;
  EXPECT_NE(t.find("open failed: No such file or directory"), std::string::npos) << t;
}

TEST_F(LogTest, LongLinesAreCutNotOverflowed) {
  std::string huge(5000, 'x');
  ps_error(PS_LOG_BASE, "%s", huge.c_str());
  std::string t = Text();
  EXPECT_LT(t.size(), 1100u);
  EXPECT_EQ(t.back(), '\n');
  EXPECT_EQ(Lines(), 1u);
}

TEST_F(LogTest, RateLimitedWarnings) {
  for (int i = 0; i < 100; ++i) {
    ps_warn_ratelimited(PS_LOG_VAN, "slow peer %d", i);
  }
  // The call site's state is static: the first run of this test in a
  // process prints "slow peer 0"; a repeat within the second prints nothing.
  std::string t = Text();
  size_t shown = 0;
  for (size_t p = t.find("slow peer"); p != std::string::npos; p = t.find("slow peer", p + 1)) {
    ++shown;
  }
  EXPECT_LE(shown, 1u);
  EXPECT_EQ(t.find("slow peer 1"), std::string::npos) << t;

  uint64_t last = 0;
  uint32_t suppressed = 0;
  EXPECT_TRUE(ps__log_ratelimit(&last, &suppressed, 1000000000ull));
  EXPECT_FALSE(ps__log_ratelimit(&last, &suppressed, 1000000000ull));
  EXPECT_EQ(suppressed, 1u);
  // With a zero interval everything passes, after reporting what was held.
  EXPECT_TRUE(ps__log_ratelimit(&last, &suppressed, 0));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_NE(Text().find("(1 similar lines suppressed)"), std::string::npos);
}

TEST_F(LogTest, Names) {
  EXPECT_STREQ(ps_log_level_name(PS_LOG_DEBUG), "debug");
  EXPECT_STREQ(ps_log_level_name(static_cast<ps_log_level_t>(99)), "?");
  EXPECT_STREQ(ps_log_component_name(PS_LOG_FABRIC), "fabric");
  EXPECT_STREQ(ps_log_component_name(static_cast<ps_log_component_t>(-1)), "?");
  EXPECT_STREQ(ps_log_component_name(static_cast<ps_log_component_t>(PS_LOG_COMPONENT_MAX)), "?");
}

// A name registers once: a second registration (a probe's, beside its
// van's) gets the same id; registered components follow the core's.
TEST_F(LogTest, ComponentsRegisterOnceByName) {
  EXPECT_GE(static_cast<int>(PS_LOG_TCP), static_cast<int>(PS_LOG_CORE_COMPONENT_COUNT));
  EXPECT_EQ(ps_log_component_register("tcp"), PS_LOG_TCP);
  EXPECT_EQ(ps_log_component_register("TCP"), PS_LOG_TCP);
  EXPECT_EQ(ps_log_component_register("van"), PS_LOG_VAN);
  EXPECT_NE(PS_LOG_TCP, PS_LOG_RDMA);
}

// Threads log while another changes the level and the output (tsan).
TEST_F(LogTest, ConcurrentLogging) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) ps_warn(PS_LOG_CORE, "thread %d line %d", t, i);
    });
  }
  for (int i = 0; i < 50; ++i) {
    ps_log_set_level(i % 2 ? PS_LOG_DEBUG : PS_LOG_WARN);
    ps_log_set_prefix(i % 2 ? "a" : "b");
  }
  for (auto &th : threads) th.join();
  ps_log_set_level(PS_LOG_WARN);
  EXPECT_EQ(Lines(), 600u);  // one write per line: none lost or merged
}

}  // namespace

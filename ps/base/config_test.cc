#include "ps/base/config.h"
#include "ps/base/config_internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ps/base/log.h"

namespace {

// Sends ps log lines to a memory file for the test's lifetime.
class LogCapture {
 public:
  LogCapture() : fd_(memfd_create("ps_log", 0)) { ps_log_set_fd(fd_); }
  ~LogCapture() {
    ps_log_set_fd(-1);
    close(fd_);
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
  size_t Count(const std::string &needle) const {
    std::string t = Text();
    size_t count = 0;
    for (size_t pos = t.find(needle); pos != std::string::npos; pos = t.find(needle, pos + 1)) {
      ++count;
    }
    return count;
  }

 private:
  int fd_;
};

// Every variable a test touches is restored afterwards.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Clean();
    ps__config_reset_notes();
  }
  void TearDown() override { Clean(); }
  static void Clean() {
    ps_config_clear_overrides();
    for (int i = 0; i < ps_config_count(); ++i) {
      const ps_config_entry_t *e = ps_config_entry(static_cast<ps_config_id_t>(i));
      unsetenv(e->name);
      if (e->alias != nullptr) {
        unsetenv(e->alias);
      }
    }
  }
};

// The core table's sections: no transport among them (each van's variables
// are in a table of its own).
const std::set<std::string> kSections = {
    "bootstrap", "logging", "van", "ipc", "reliability", "security", "byteps-server",
    "stepmesh", "profiling", "benchmark"};

TEST_F(ConfigTest, TableIsWellFormed) {
  std::set<std::string> names;
  for (int i = 0; i < PS_CFG_COUNT; ++i) {
    const ps_config_entry_t *e = ps_config_entry(static_cast<ps_config_id_t>(i));
    ASSERT_NE(e, nullptr);
    SCOPED_TRACE(e->name);
    EXPECT_GT(strlen(e->name), 0u);
    EXPECT_TRUE(names.insert(e->name).second) << "duplicate name";
    if (e->alias != nullptr) {
      EXPECT_TRUE(names.insert(e->alias).second) << "alias collides";
    }
    EXPECT_TRUE(kSections.count(e->section)) << e->section;
    ASSERT_NE(e->help, nullptr);
    size_t h = strlen(e->help);
    ASSERT_GT(h, 10u);
    EXPECT_EQ(e->help[h - 1], '.') << "help is one sentence ending with a period";
    EXPECT_STRNE(ps_config_type_name(e->type), "?");
    ASSERT_NE(e->default_value, nullptr);
  }
  EXPECT_EQ(ps_config_entry(static_cast<ps_config_id_t>(ps_config_count())), nullptr);
  EXPECT_EQ(ps_config_entry(static_cast<ps_config_id_t>(-1)), nullptr);
}

// A default that does not parse as its own type would break every reader.
TEST_F(ConfigTest, EveryDefaultParses) {
  for (int i = 0; i < PS_CFG_COUNT; ++i) {
    ps_config_id_t id = static_cast<ps_config_id_t>(i);
    const ps_config_entry_t *e = ps_config_entry(id);
    SCOPED_TRACE(e->name);
    if (e->default_value[0] == '\0') {
      continue;
    }
    int64_t iv;
    int bv;
    double dv;
    uint64_t uv;
    switch (e->type) {
      case PS_CFG_TYPE_INT: EXPECT_EQ(ps_config_get_int(id, &iv), PS_OK); break;
      case PS_CFG_TYPE_BOOL: EXPECT_EQ(ps_config_get_bool(id, &bv), PS_OK); break;
      case PS_CFG_TYPE_DOUBLE: EXPECT_EQ(ps_config_get_double(id, &dv), PS_OK); break;
      case PS_CFG_TYPE_SIZE: EXPECT_EQ(ps_config_get_size(id, &uv), PS_OK); break;
      case PS_CFG_TYPE_STRING: break;
    }
  }
  EXPECT_EQ(ps_config_validate(), PS_OK);
}

struct Expected {
  ps_config_id_t id;
  const char *name;
  ps_config_type_t type;
  const char *def;
  const char *section;
};

TEST_F(ConfigTest, PsSpecificVariablesHaveTheirDefaults) {
  const Expected want[] = {
      {PS_CFG_PS_LOG_LEVEL, "PS_LOG_LEVEL", PS_CFG_TYPE_STRING, "", "logging"},
      {PS_CFG_PS_LOG_COMPONENTS, "PS_LOG_COMPONENTS", PS_CFG_TYPE_STRING, "", "logging"},
      {PS_CFG_PS_VERBOSE, "PS_VERBOSE", PS_CFG_TYPE_INT, "0", "logging"},
      {PS_CFG_PS_START_TIMEOUT_MS, "PS_START_TIMEOUT_MS", PS_CFG_TYPE_INT, "120000", nullptr},
      {PS_CFG_PS_BARRIER_TIMEOUT_MS, "PS_BARRIER_TIMEOUT_MS", PS_CFG_TYPE_INT, "600000", nullptr},
      {PS_CFG_PS_REQUEST_TIMEOUT_MS, "PS_REQUEST_TIMEOUT_MS", PS_CFG_TYPE_INT, "600000", nullptr},
      {PS_CFG_PS_FINALIZE_TIMEOUT_MS, "PS_FINALIZE_TIMEOUT_MS", PS_CFG_TYPE_INT, "-1", nullptr},
      {PS_CFG_PS_CONNECT_TIMEOUT_MS, "PS_CONNECT_TIMEOUT_MS", PS_CFG_TYPE_INT, "10000", nullptr},
      {PS_CFG_PS_BIND_RETRIES, "PS_BIND_RETRIES", PS_CFG_TYPE_INT, "40", nullptr},
      {PS_CFG_PS_MAX_META_BYTES, "PS_MAX_META_BYTES", PS_CFG_TYPE_SIZE, "1m", nullptr},
      {PS_CFG_PS_MAX_MESSAGE_BYTES, "PS_MAX_MESSAGE_BYTES", PS_CFG_TYPE_SIZE, "4g", nullptr},
      {PS_CFG_PS_MAX_DATA_SEGMENTS, "PS_MAX_DATA_SEGMENTS", PS_CFG_TYPE_INT, "16", nullptr},
      {PS_CFG_PS_BUSY_POLL, "PS_BUSY_POLL", PS_CFG_TYPE_BOOL, "0", nullptr},
      {PS_CFG_PS_JOB_SECRET, "PS_JOB_SECRET", PS_CFG_TYPE_STRING, "", "security"},
      {PS_CFG_PS_JOB_SECRET_FILE, "PS_JOB_SECRET_FILE", PS_CFG_TYPE_STRING, "", "security"},
      {PS_CFG_PS_JOB_ID, "PS_JOB_ID", PS_CFG_TYPE_STRING, "", "security"},
      {PS_CFG_PS_BIND_ANY, "PS_BIND_ANY", PS_CFG_TYPE_BOOL, "0", nullptr},
      // A few upstream ones.
      {PS_CFG_DMLC_ROLE, "DMLC_ROLE", PS_CFG_TYPE_STRING, "", "bootstrap"},
      {PS_CFG_BYTEPS_PARTITION_BYTES, "BYTEPS_PARTITION_BYTES", PS_CFG_TYPE_SIZE, "4096000", nullptr},
      {PS_CFG_PS_RESEND_TIMEOUT, "PS_RESEND_TIMEOUT", PS_CFG_TYPE_INT, "1000", "reliability"},
      {PS_CFG_NUM_KEY_PER_SERVER, "NUM_KEY_PER_SERVER", PS_CFG_TYPE_INT, "40", "benchmark"},
  };
  for (const Expected &w : want) {
    const ps_config_entry_t *e = ps_config_entry(w.id);
    ASSERT_NE(e, nullptr);
    SCOPED_TRACE(w.name);
    EXPECT_STREQ(e->name, w.name);
    EXPECT_EQ(e->type, w.type);
    EXPECT_STREQ(e->default_value, w.def);
    if (w.section != nullptr) {
      EXPECT_STREQ(e->section, w.section);
    }
  }
  uint64_t v;
  ASSERT_EQ(ps_config_get_size(PS_CFG_PS_MAX_MESSAGE_BYTES, &v), PS_OK);
  EXPECT_EQ(v, 4ull << 30);
  ASSERT_EQ(ps_config_get_size(PS_CFG_PS_MAX_META_BYTES, &v), PS_OK);
  EXPECT_EQ(v, 1ull << 20);
}

TEST_F(ConfigTest, LegacyAliases) {
  struct {
    ps_config_id_t id;
    const char *alias;
  } want[] = {
      {PS_CFG_STEPMESH_GPU, "STEPAF_GPU"},
      {PS_CFG_STEPMESH_BUSY_POLL_ENABLE, "STEPAF_BUSY_POLL_ENABLE"},
  };
  for (const auto &w : want) {
    ps_config_id_t id;
    ASSERT_EQ(ps_config_find(w.alias, &id), PS_OK) << w.alias;
    EXPECT_EQ(id, w.id);
    EXPECT_STREQ(ps_config_entry(w.id)->alias, w.alias);
  }
}

TEST_F(ConfigTest, FindByNameAndAlias) {
  ps_config_id_t id = PS_CFG_COUNT;
  EXPECT_EQ(ps_config_find("DMLC_NUM_WORKER", &id), PS_OK);
  EXPECT_EQ(id, PS_CFG_DMLC_NUM_WORKER);
  EXPECT_EQ(ps_config_find("dmlc_num_worker", &id), PS_ERR_NOT_FOUND);  // env names are exact
  EXPECT_EQ(ps_config_find("NO_SUCH_VARIABLE", &id), PS_ERR_NOT_FOUND);
  EXPECT_EQ(ps_config_find("", &id), PS_ERR_NOT_FOUND);
  EXPECT_EQ(ps_config_find(nullptr, &id), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_config_find("PS_VERBOSE", nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(id, PS_CFG_DMLC_NUM_WORKER);  // untouched by the failures
}

TEST_F(ConfigTest, SourcesInOrder) {
  const char *v;
  ps_config_source_t src;

  ASSERT_EQ(ps_config_get_raw(PS_CFG_STEPMESH_GPU, &v, &src), PS_OK);
  EXPECT_STREQ(v, "0");
  EXPECT_EQ(src, PS_CFG_SRC_DEFAULT);
  EXPECT_FALSE(ps_config_is_set(PS_CFG_STEPMESH_GPU));

  LogCapture log;
  setenv("STEPAF_GPU", "3", 1);
  ASSERT_EQ(ps_config_get_raw(PS_CFG_STEPMESH_GPU, &v, &src), PS_OK);
  EXPECT_STREQ(v, "3");
  EXPECT_EQ(src, PS_CFG_SRC_ALIAS);
  EXPECT_TRUE(ps_config_is_set(PS_CFG_STEPMESH_GPU));

  setenv("STEPMESH_GPU", "5", 1);
  ASSERT_EQ(ps_config_get_raw(PS_CFG_STEPMESH_GPU, &v, &src), PS_OK);
  EXPECT_STREQ(v, "5");
  EXPECT_EQ(src, PS_CFG_SRC_ENV);

  ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_GPU, "7"), PS_OK);
  ASSERT_EQ(ps_config_get_raw(PS_CFG_STEPMESH_GPU, &v, &src), PS_OK);
  EXPECT_STREQ(v, "7");
  EXPECT_EQ(src, PS_CFG_SRC_OVERRIDE);
  int64_t i = 0;
  EXPECT_EQ(ps_config_get_int(PS_CFG_STEPMESH_GPU, &i), PS_OK);
  EXPECT_EQ(i, 7);

  ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_GPU, nullptr), PS_OK);  // removes it
  ASSERT_EQ(ps_config_get_raw(PS_CFG_STEPMESH_GPU, &v, &src), PS_OK);
  EXPECT_STREQ(v, "5");

  // Said once each, however often read.
  for (int k = 0; k < 3; ++k) {
    ps_config_get_raw(PS_CFG_STEPMESH_GPU, &v, &src);
    unsetenv("STEPMESH_GPU");
    ps_config_get_raw(PS_CFG_STEPMESH_GPU, &v, &src);
    setenv("STEPMESH_GPU", "5", 1);
  }
  EXPECT_EQ(log.Count("STEPAF_GPU is deprecated, use STEPMESH_GPU"), 1u) << log.Text();
  EXPECT_EQ(log.Count("STEPAF_GPU is ignored because STEPMESH_GPU is also set"), 1u)
      << log.Text();
  EXPECT_STREQ(ps_config_source_name(PS_CFG_SRC_ALIAS), "alias");
}

TEST_F(ConfigTest, EmptyMeansUnset) {
  const char *v;
  ps_config_source_t src;

  setenv("DMLC_INTERFACE", "", 1);
  EXPECT_FALSE(ps_config_is_set(PS_CFG_DMLC_INTERFACE));
  EXPECT_EQ(ps_config_get_str(PS_CFG_DMLC_INTERFACE, &v), PS_ERR_NOT_FOUND);

  setenv("DMLC_NUM_PORTS", "", 1);
  int64_t n = 0;
  EXPECT_EQ(ps_config_get_int(PS_CFG_DMLC_NUM_PORTS, &n), PS_OK);
  EXPECT_EQ(n, 1);

  // An empty override masks the environment.
  setenv("DMLC_NUM_PORTS", "4", 1);
  ASSERT_EQ(ps_config_set(PS_CFG_DMLC_NUM_PORTS, ""), PS_OK);
  ASSERT_EQ(ps_config_get_raw(PS_CFG_DMLC_NUM_PORTS, &v, &src), PS_OK);
  EXPECT_STREQ(v, "1");
  EXPECT_EQ(src, PS_CFG_SRC_DEFAULT);
  EXPECT_FALSE(ps_config_is_set(PS_CFG_DMLC_NUM_PORTS));
  ps_config_clear_overrides();
  EXPECT_EQ(ps_config_int_or(PS_CFG_DMLC_NUM_PORTS, -1), 4);
}

TEST_F(ConfigTest, RequiredVariableMissing) {
  const char *v = "untouched";
  int64_t n = 42;
  EXPECT_EQ(ps_config_get_str(PS_CFG_DMLC_ROLE, &v), PS_ERR_NOT_FOUND);
  EXPECT_STREQ(v, "untouched");
  EXPECT_EQ(ps_config_get_int(PS_CFG_DMLC_NUM_WORKER, &n), PS_ERR_NOT_FOUND);
  EXPECT_EQ(n, 42);
  EXPECT_EQ(ps_config_int_or(PS_CFG_DMLC_NUM_WORKER, -7), -7);
  EXPECT_STREQ(ps_config_str_or(PS_CFG_DMLC_ROLE, "none"), "none");

  setenv("DMLC_ROLE", "worker", 1);
  EXPECT_EQ(ps_config_get_str(PS_CFG_DMLC_ROLE, &v), PS_OK);
  EXPECT_STREQ(v, "worker");
}

TEST_F(ConfigTest, BadValueIsLoggedAndLeavesOutputAlone) {
  LogCapture log;
  int64_t n = 42;
  setenv("DMLC_NUM_WORKER", "two", 1);
  EXPECT_EQ(ps_config_get_int(PS_CFG_DMLC_NUM_WORKER, &n), PS_ERR_CONFIG);
  EXPECT_EQ(n, 42);
  std::string text = log.Text();
  EXPECT_NE(text.find("DMLC_NUM_WORKER"), std::string::npos) << text;
  EXPECT_NE(text.find("'two'"), std::string::npos) << text;
  EXPECT_NE(text.find("expected a decimal integer"), std::string::npos) << text;
  EXPECT_EQ(ps_config_int_or(PS_CFG_DMLC_NUM_WORKER, 9), 9);

  int b = 5;
  setenv("PS_BUSY_POLL", "maybe", 1);
  EXPECT_EQ(ps_config_get_bool(PS_CFG_PS_BUSY_POLL, &b), PS_ERR_CONFIG);
  EXPECT_EQ(b, 5);
  EXPECT_EQ(ps_config_bool_or(PS_CFG_PS_BUSY_POLL, 1), 1);
  EXPECT_NE(log.Text().find("'maybe' for PS_BUSY_POLL"), std::string::npos);

  uint64_t s = 3;
  setenv("PS_RECV_PREALLOC_BYTES", "12q", 1);
  EXPECT_EQ(ps_config_get_size(PS_CFG_PS_RECV_PREALLOC_BYTES, &s), PS_ERR_CONFIG);
  EXPECT_EQ(s, 3u);
  EXPECT_EQ(ps_config_size_or(PS_CFG_PS_RECV_PREALLOC_BYTES, 77), 77u);
  EXPECT_NE(log.Text().find("k/m/g/t suffix"), std::string::npos);

  // A bad legacy name is reported under that name.
  setenv("STEPAF_BUSY_POLL_ENABLE", "x", 1);
  EXPECT_EQ(ps_config_get_bool(PS_CFG_STEPMESH_BUSY_POLL_ENABLE, &b), PS_ERR_CONFIG);
  EXPECT_NE(log.Text().find("'x' for STEPAF_BUSY_POLL_ENABLE (from alias)"), std::string::npos)
      << log.Text();

  EXPECT_EQ(ps_config_validate(), PS_ERR_CONFIG);
  unsetenv("DMLC_NUM_WORKER");
  unsetenv("PS_BUSY_POLL");
  unsetenv("PS_RECV_PREALLOC_BYTES");
  unsetenv("STEPAF_BUSY_POLL_ENABLE");
  EXPECT_EQ(ps_config_validate(), PS_OK);
}

TEST_F(ConfigTest, TypeMismatchIsAProgrammingError) {
  LogCapture log;
  int b;
  int64_t i;
  double d;
  uint64_t u;
  EXPECT_EQ(ps_config_get_bool(PS_CFG_DMLC_NUM_PORTS, &b), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_config_get_int(PS_CFG_DMLC_ROLE, &i), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_config_get_size(PS_CFG_PS_BUSY_POLL, &u), PS_ERR_INVALID_ARG);
  EXPECT_NE(log.Text().find("PS_BUSY_POLL is a bool variable, read as size"), std::string::npos);
  // Compatible readings.
  EXPECT_EQ(ps_config_get_int(PS_CFG_PS_MAX_META_BYTES, &i), PS_OK);
  EXPECT_EQ(i, 1 << 20);
  EXPECT_EQ(ps_config_get_size(PS_CFG_DMLC_NUM_PORTS, &u), PS_OK);
  EXPECT_EQ(u, 1u);
  EXPECT_EQ(ps_config_get_double(PS_CFG_DMLC_NUM_PORTS, &d), PS_OK);
  EXPECT_EQ(d, 1.0);
  const char *s;
  EXPECT_EQ(ps_config_get_str(PS_CFG_PS_MAX_META_BYTES, &s), PS_OK);
  EXPECT_STREQ(s, "1m");
  // A negative INT read as a size is a bad value, not a huge one.
  setenv("DMLC_NUM_PORTS", "-1", 1);
  EXPECT_EQ(ps_config_get_size(PS_CFG_DMLC_NUM_PORTS, &u), PS_ERR_CONFIG);
  // Out-of-range ids.
  const ps_config_id_t past = static_cast<ps_config_id_t>(ps_config_count());
  EXPECT_EQ(ps_config_get_int(past, &i), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_config_get_raw(past, &s, nullptr), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_config_set(past, "1"), PS_ERR_INVALID_ARG);
  EXPECT_FALSE(ps_config_is_set(past));
  EXPECT_EQ(ps_config_get_int(PS_CFG_DMLC_NUM_PORTS, nullptr), PS_ERR_INVALID_ARG);
}

TEST(ConfigParse, Bool) {
  const char *yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON", "y", "Y", " 1 ", "\ttrue\n"};
  const char *no[] = {"0", "false", "False", "no", "NO", "off", "Off", "n", "N"};
  const char *bad[] = {"", " ", "2", "-1", "yess", "tru", "enable", "1 1", "o", nullptr};
  for (const char *t : yes) {
    int v = -1;
    EXPECT_EQ(ps_config_parse_bool(t, &v), PS_OK) << t;
    EXPECT_EQ(v, 1) << t;
  }
  for (const char *t : no) {
    int v = -1;
    EXPECT_EQ(ps_config_parse_bool(t, &v), PS_OK) << t;
    EXPECT_EQ(v, 0) << t;
  }
  for (const char *t : bad) {
    int v = -1;
    EXPECT_EQ(ps_config_parse_bool(t, &v), PS_ERR_PARSE) << (t ? t : "(null)");
    EXPECT_EQ(v, -1);
  }
  EXPECT_EQ(ps_config_parse_bool("1", nullptr), PS_ERR_INVALID_ARG);
}

TEST(ConfigParse, Int) {
  struct {
    const char *text;
    int64_t v;
  } good[] = {{"0", 0},       {"42", 42},   {"-1", -1},
              {"+7", 7},      {" 12 ", 12}, {"9223372036854775807", INT64_MAX},
              {"-9223372036854775808", INT64_MIN}, {"007", 7}};
  for (const auto &g : good) {
    int64_t v = 0;
    EXPECT_EQ(ps_config_parse_int(g.text, &v), PS_OK) << g.text;
    EXPECT_EQ(v, g.v) << g.text;
  }
  const char *bad[] = {"", "  ", "abc", "12abc", "1.5", "0x10", "9223372036854775808",
                       "-9223372036854775809", "- 1", "+", "1 2", "1e3", nullptr};
  for (const char *t : bad) {
    int64_t v = 99;
    EXPECT_EQ(ps_config_parse_int(t, &v), PS_ERR_PARSE) << (t ? t : "(null)");
    EXPECT_EQ(v, 99);
  }
  std::string longtext(100, '1');
  int64_t v;
  EXPECT_EQ(ps_config_parse_int(longtext.c_str(), &v), PS_ERR_PARSE);
}

TEST(ConfigParse, Size) {
  struct {
    const char *text;
    uint64_t v;
  } good[] = {{"0", 0},
              {"4096", 4096},
              {"1k", 1024},
              {"1K", 1024},
              {"2m", 2ull << 20},
              {"3G", 3ull << 30},
              {"4g", 4ull << 30},
              {"1t", 1ull << 40},
              {"8kb", 8192},
              {"8KiB", 8192},
              {"16MB", 16ull << 20},
              {"512b", 512},
              {" 1m ", 1ull << 20},
              {"16777215t", 16777215ull << 40},
              {"18446744073709551615", UINT64_MAX}};
  for (const auto &g : good) {
    uint64_t v = 0;
    EXPECT_EQ(ps_config_parse_size(g.text, &v), PS_OK) << g.text;
    EXPECT_EQ(v, g.v) << g.text;
  }
  const char *bad[] = {"", "k", "-1", "+1", "1.5m", "1x", "1kk", "1 k", "1ki", "1bb",
                       "16777216t", "18446744073709551616", "17179869184g", "m1", nullptr};
  for (const char *t : bad) {
    uint64_t v = 99;
    EXPECT_EQ(ps_config_parse_size(t, &v), PS_ERR_PARSE) << (t ? t : "(null)");
    EXPECT_EQ(v, 99u);
  }
}

TEST(ConfigParse, Double) {
  double v = 0;
  EXPECT_EQ(ps_config_parse_double("1.5", &v), PS_OK);
  EXPECT_EQ(v, 1.5);
  EXPECT_EQ(ps_config_parse_double(" -2e3 ", &v), PS_OK);
  EXPECT_EQ(v, -2000.0);
  const char *bad[] = {"", "abc", "1.5x", "nan", "inf", "1e999", nullptr};
  for (const char *t : bad) {
    double w = 3.0;
    EXPECT_EQ(ps_config_parse_double(t, &w), PS_ERR_PARSE) << (t ? t : "(null)");
    EXPECT_EQ(w, 3.0);
  }
}

TEST_F(ConfigTest, PrintListsVariablesBySection) {
  int fd = memfd_create("cfg", 0);
  ASSERT_GE(fd, 0);
  setenv("DMLC_ROLE", "server", 1);
  ASSERT_EQ(ps_config_print(fd, 0), PS_OK);
  std::string all;
  char buf[4096];
  off_t off = 0;
  ssize_t n;
  while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
    all.append(buf, static_cast<size_t>(n));
    off += n;
  }
  EXPECT_EQ(all.rfind("# bootstrap\n", 0), 0u) << all.substr(0, 100);
  EXPECT_NE(all.find("DMLC_ROLE=server  [env]"), std::string::npos);
  EXPECT_NE(all.find("PS_MAX_MESSAGE_BYTES=4g  [default]"), std::string::npos);
  EXPECT_NE(all.find("\n# benchmark\n"), std::string::npos);
  size_t lines = 0;
  for (char c : all) lines += c == '\n';
  EXPECT_GT(lines, static_cast<size_t>(PS_CFG_COUNT));

  ASSERT_EQ(ftruncate(fd, 0), 0);
  ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
  ASSERT_EQ(ps_config_print(fd, 1), PS_OK);
  n = pread(fd, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0);
  buf[n] = '\0';
  EXPECT_STREQ(buf, "# bootstrap\nDMLC_ROLE=server  [env]  Role of this process: scheduler, "
                    "server, worker or joint (a server and a worker in one process, counted in "
                    "both DMLC_NUM_SERVER and DMLC_NUM_WORKER: programs start it with "
                    "ps_postoffice_start_joint, and ps_postoffice_start refuses it with "
                    "PS_ERR_UNSUPPORTED); required.\n");
  close(fd);
  EXPECT_EQ(ps_config_print(-1, 0), PS_ERR_INVALID_ARG);
}

// Readers on many threads (tsan checks the alias flag and the override lock).
TEST_F(ConfigTest, ConcurrentReaders) {
  setenv("STEPAF_BUSY_POLL_ENABLE", "0", 1);
  setenv("DMLC_NUM_SERVER", "3", 1);
  ASSERT_EQ(ps_config_set(PS_CFG_PS_VERBOSE, "1"), PS_OK);
  LogCapture log;
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &ok] {
      for (int k = 0; k < 500; ++k) {
        int sync = -1;
        int64_t n = 0, verbose = 0;
        if (ps_config_get_bool(PS_CFG_STEPMESH_BUSY_POLL_ENABLE, &sync) == PS_OK && sync == 0 &&
            ps_config_get_int(PS_CFG_DMLC_NUM_SERVER, &n) == PS_OK && n == 3 &&
            ps_config_get_int(PS_CFG_PS_VERBOSE, &verbose) == PS_OK && verbose == 1) {
          ++ok[t];
        }
      }
    });
  }
  for (auto &th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 500);
  EXPECT_EQ(log.Count("STEPAF_BUSY_POLL_ENABLE is deprecated"), 1u);
}

// A layer's own table: ids after the core's, read, found, set, validated
// and printed like the core's; registered once; a name already taken
// refuses the whole table.
TEST_F(ConfigTest, ALayersTableIsReadLikeTheCore) {
  static const ps_config_entry_t entries[] = {
      {"PS_TEST_TABLE_INT", PS_CFG_TYPE_INT, "7", "test", nullptr, "An int of a test table."},
      {"PS_TEST_TABLE_SIZE", PS_CFG_TYPE_SIZE, "1k", "test", "PS_TEST_TABLE_OLD",
       "A size of a test table, in bytes."},
  };
  static ps_config_table_t table = {"test", entries, 2, 0};
  EXPECT_EQ(ps_config_entry(ps_config_table_id(&table, 0)), nullptr);  // not yet registered
  const int before = ps_config_count();
  ASSERT_EQ(ps_config_register(&table), PS_OK);
  EXPECT_EQ(table.first_id, before);
  EXPECT_EQ(ps_config_count(), before + 2);
  ASSERT_EQ(ps_config_register(&table), PS_OK);
  EXPECT_EQ(ps_config_count(), before + 2);

  const ps_config_id_t a = ps_config_table_id(&table, 0), b = ps_config_table_id(&table, 1);
  EXPECT_STREQ(ps_config_entry(a)->name, "PS_TEST_TABLE_INT");
  EXPECT_EQ(ps_config_int_or(a, 0), 7);
  setenv("PS_TEST_TABLE_INT", "12", 1);
  EXPECT_EQ(ps_config_int_or(a, 0), 12);
  ps_config_id_t found = PS_CFG_DMLC_ROLE;
  ASSERT_EQ(ps_config_find("PS_TEST_TABLE_OLD", &found), PS_OK);
  EXPECT_EQ(found, b);
  ASSERT_EQ(ps_config_set(b, "2m"), PS_OK);
  EXPECT_EQ(ps_config_size_or(b, 0), 2u << 20);
  ps_config_clear_overrides();
  {
    LogCapture log;
    setenv("PS_TEST_TABLE_SIZE", "2x", 1);
    EXPECT_EQ(ps_config_validate(), PS_ERR_CONFIG);
    EXPECT_NE(log.Text().find("PS_TEST_TABLE_SIZE"), std::string::npos) << log.Text();
    unsetenv("PS_TEST_TABLE_SIZE");
  }
  EXPECT_EQ(ps_config_validate(), PS_OK);
  FILE *f = tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(ps_config_print(fileno(f), 0), PS_OK);
  std::string text(8192 * 8, '\0');
  rewind(f);
  text.resize(fread(&text[0], 1, text.size(), f));
  fclose(f);
  EXPECT_NE(text.find("# test\nPS_TEST_TABLE_INT=12  [env]"), std::string::npos) << text;

  static const ps_config_entry_t clash[] = {
      {"PS_TEST_TABLE_OTHER", PS_CFG_TYPE_INT, "1", "test", "DMLC_ROLE", "Takes a core name."},
  };
  static ps_config_table_t clash_table = {"clash", clash, 1, 0};
  {
    LogCapture log;
    EXPECT_EQ(ps_config_register(&clash_table), PS_ERR_EXISTS);
    EXPECT_NE(log.Text().find("clash"), std::string::npos) << log.Text();
  }
  EXPECT_EQ(clash_table.first_id, 0);
  EXPECT_EQ(ps_config_count(), before + 2);
  unsetenv("PS_TEST_TABLE_INT");
}

}  // namespace

TEST_F(ConfigTest, PrintNeverShowsTheJobSecret) {
  setenv("PS_JOB_SECRET", "hunter2-very-secret", 1);
  setenv("DMLC_ROLE", "worker", 1);
  FILE *f = tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(ps_config_print(fileno(f), 1), PS_OK);
  std::string text;
  char buf[512];
  rewind(f);
  while (fgets(buf, sizeof(buf), f) != nullptr) text += buf;
  fclose(f);
  EXPECT_EQ(text.find("hunter2"), std::string::npos) << text;
  EXPECT_NE(text.find("PS_JOB_SECRET=(set, not shown)"), std::string::npos) << text;
  EXPECT_NE(text.find("DMLC_ROLE=worker"), std::string::npos) << text;
}

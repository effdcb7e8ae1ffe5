#include "ps/base/sockaddr.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <unistd.h>

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "ps/base/log.h"

namespace {

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

 private:
  int fd_;
};

std::string Format(const ps_sockaddr_t &a) {
  char buf[PS_SOCKADDR_STRLEN];
  if (ps_sockaddr_format(&a, buf, sizeof(buf)) != PS_OK) return "<error>";
  return buf;
}

std::string FormatHost(const ps_sockaddr_t &a) {
  char buf[PS_SOCKADDR_STRLEN];
  if (ps_sockaddr_format_host(&a, buf, sizeof(buf)) != PS_OK) return "<error>";
  return buf;
}

// Whether the loopback interface carries ::1 here (IPv6 may be disabled).
bool LoopbackHasV6() {
  ps_ifaddr_t *list;
  size_t n;
  if (ps_if_list(&list, &n) != PS_OK) return false;
  bool found = false;
  for (size_t i = 0; i < n; ++i) {
    if (!strcmp(list[i].name, "lo") && list[i].family == AF_INET6) found = true;
  }
  ps_if_list_free(list);
  return found;
}

TEST(Sockaddr, ParseAndFormatRoundTrip) {
  const unsigned lo = if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  struct {
    const char *text;
    int family;
    uint16_t port;
    const char *formatted;
  } cases[] = {
      {"127.0.0.1:80", AF_INET, 80, "127.0.0.1:80"},
      {"127.0.0.1", AF_INET, 9000, "127.0.0.1:9000"},
      {" 10.0.0.1:5 ", AF_INET, 5, "10.0.0.1:5"},
      {"0.0.0.0:0", AF_INET, 0, "0.0.0.0:0"},
      {"[::1]:8080", AF_INET6, 8080, "[::1]:8080"},
      {"[::1]", AF_INET6, 9000, "[::1]:9000"},
      {"::1", AF_INET6, 9000, "[::1]:9000"},
      {"[::]:65535", AF_INET6, 65535, "[::]:65535"},
      {"2001:db8::5", AF_INET6, 9000, "[2001:db8::5]:9000"},
      {"[2001:DB8:0:0::5]:1", AF_INET6, 1, "[2001:db8::5]:1"},
      {"[fe80::1%lo]:80", AF_INET6, 80, "[fe80::1%lo]:80"},
      {"fe80::1%lo", AF_INET6, 9000, "[fe80::1%lo]:9000"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.text);
    ps_sockaddr_t a;
    ASSERT_EQ(ps_sockaddr_parse(c.text, 9000, &a), PS_OK);
    EXPECT_EQ(ps_sockaddr_family(&a), c.family);
    EXPECT_EQ(ps_sockaddr_port(&a), c.port);
    EXPECT_EQ(Format(a), c.formatted);
    // And back again.
    ps_sockaddr_t b;
    ASSERT_EQ(ps_sockaddr_parse(Format(a).c_str(), 1, &b), PS_OK);
    EXPECT_TRUE(ps_sockaddr_equal(&a, &b));
  }
  ps_sockaddr_t z;
  ASSERT_EQ(ps_sockaddr_parse("[fe80::1%lo]:80", 0, &z), PS_OK);
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6 *>(ps_sockaddr_sa(&z))->sin6_scope_id, lo);
  EXPECT_EQ(FormatHost(z), "fe80::1%lo");
  // A numeric zone works too.
  std::string numeric = "fe80::2%" + std::to_string(lo);
  ASSERT_EQ(ps_sockaddr_parse(numeric.c_str(), 0, &z), PS_OK);
  EXPECT_EQ(FormatHost(z), "fe80::2%lo");
}

TEST(Sockaddr, ParseRejectsBadText) {
  const char *bad[] = {"",
                       "   ",
                       "1.2.3.4:",
                       "1.2.3.4:65536",
                       "1.2.3.4:-1",
                       "1.2.3.4:80x",
                       "1.2.3.4:123456",
                       "1.2.3",
                       "256.1.1.1",
                       "localhost:80",  // not numeric: use resolve
                       "localhost",
                       ":80",
                       "[::1",
                       "[::1]x",
                       "[::1]:",
                       "[::1]]:80",
                       "[]:80",
                       "[1.2.3.4]:80",  // brackets are for IPv6
                       "::1::2",
                       "fe80::1%",
                       "fe80::1%nosuchif0",
                       "fe80::1%0",
                       "[fe80::1%99999999999]:1",
                       "1.2.3.4 :80"};
  for (const char *t : bad) {
    ps_sockaddr_t a;
    a.len = 77;
    EXPECT_EQ(ps_sockaddr_parse(t, 1, &a), PS_ERR_PARSE) << "'" << t << "'";
    EXPECT_EQ(a.len, 77u);  // untouched
  }
  std::string longtext(600, '1');
  ps_sockaddr_t a;
  EXPECT_EQ(ps_sockaddr_parse(longtext.c_str(), 1, &a), PS_ERR_PARSE);
  EXPECT_EQ(ps_sockaddr_parse(nullptr, 1, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_sockaddr_parse("1.2.3.4", 1, nullptr), PS_ERR_INVALID_ARG);
}

TEST(Sockaddr, FormatNeedsRoom) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_sockaddr_parse("[2001:db8::1]:65535", 0, &a), PS_OK);
  char buf[PS_SOCKADDR_STRLEN];
  EXPECT_EQ(ps_sockaddr_format(&a, buf, 10), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_sockaddr_format(&a, buf, strlen("[2001:db8::1]:65535")), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_sockaddr_format(&a, buf, strlen("[2001:db8::1]:65535") + 1), PS_OK);
  EXPECT_EQ(ps_sockaddr_format_host(&a, buf, 5), PS_ERR_TOO_LARGE);
  ps_sockaddr_t empty = {};
  EXPECT_EQ(ps_sockaddr_format(&empty, buf, sizeof(buf)), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_sockaddr_family(&empty), AF_UNSPEC);
  EXPECT_EQ(ps_sockaddr_port(&empty), 0);
  EXPECT_EQ(ps_sockaddr_set_port(&empty, 1), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_sockaddr_format(&a, nullptr, 10), PS_ERR_INVALID_ARG);
}

TEST(Sockaddr, PortsAndComparison) {
  ps_sockaddr_t a, b, c, d;
  ASSERT_EQ(ps_sockaddr_parse("10.0.0.1:1", 0, &a), PS_OK);
  ASSERT_EQ(ps_sockaddr_parse("10.0.0.1:2", 0, &b), PS_OK);
  ASSERT_EQ(ps_sockaddr_parse("10.0.0.2:1", 0, &c), PS_OK);
  ASSERT_EQ(ps_sockaddr_parse("[::1]:1", 0, &d), PS_OK);
  EXPECT_FALSE(ps_sockaddr_equal(&a, &b));
  EXPECT_TRUE(ps_sockaddr_equal_host(&a, &b));
  EXPECT_FALSE(ps_sockaddr_equal_host(&a, &c));
  EXPECT_LT(ps_sockaddr_cmp(&a, &b), 0);
  EXPECT_GT(ps_sockaddr_cmp(&b, &a), 0);
  EXPECT_LT(ps_sockaddr_cmp(&b, &c), 0);  // address before port
  EXPECT_LT(ps_sockaddr_cmp(&a, &d), 0);  // IPv4 sorts before IPv6
  EXPECT_EQ(ps_sockaddr_cmp(&d, &d), 0);
  ASSERT_EQ(ps_sockaddr_set_port(&b, 1), PS_OK);
  EXPECT_TRUE(ps_sockaddr_equal(&a, &b));
  ASSERT_EQ(ps_sockaddr_set_port(&d, 4242), PS_OK);
  EXPECT_EQ(ps_sockaddr_port(&d), 4242);
  EXPECT_EQ(Format(d), "[::1]:4242");

  // Same address, different zones: different hosts.
  ps_sockaddr_t z1, z2;
  ASSERT_EQ(ps_sockaddr_parse("fe80::1%1", 0, &z1), PS_OK);
  ASSERT_EQ(ps_sockaddr_parse("fe80::1%2", 0, &z2), PS_OK);
  EXPECT_FALSE(ps_sockaddr_equal_host(&z1, &z2));
}

TEST(Sockaddr, WildcardLoopbackLinkLocal) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_sockaddr_wildcard(AF_INET, 7, &a), PS_OK);
  EXPECT_EQ(Format(a), "0.0.0.0:7");
  EXPECT_TRUE(ps_sockaddr_is_wildcard(&a));
  EXPECT_FALSE(ps_sockaddr_is_loopback(&a));
  ASSERT_EQ(ps_sockaddr_wildcard(AF_INET6, 7, &a), PS_OK);
  EXPECT_EQ(Format(a), "[::]:7");
  EXPECT_TRUE(ps_sockaddr_is_wildcard(&a));
  ASSERT_EQ(ps_sockaddr_loopback(AF_INET, 8, &a), PS_OK);
  EXPECT_EQ(Format(a), "127.0.0.1:8");
  EXPECT_TRUE(ps_sockaddr_is_loopback(&a));
  ASSERT_EQ(ps_sockaddr_loopback(AF_INET6, 8, &a), PS_OK);
  EXPECT_EQ(Format(a), "[::1]:8");
  EXPECT_TRUE(ps_sockaddr_is_loopback(&a));
  EXPECT_FALSE(ps_sockaddr_is_wildcard(&a));
  EXPECT_EQ(ps_sockaddr_wildcard(AF_UNIX, 0, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_sockaddr_loopback(12345, 0, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_sockaddr_loopback(AF_INET, 0, nullptr), PS_ERR_INVALID_ARG);

  struct {
    const char *text;
    bool loopback, link_local;
  } cases[] = {{"127.5.6.7", true, false},     {"::ffff:127.0.0.1", true, false},
               {"169.254.1.1", false, true},   {"fe80::1", false, true},
               {"192.0.2.1", false, false},    {"2001:db8::1", false, false}};
  for (const auto &c : cases) {
    ASSERT_EQ(ps_sockaddr_parse(c.text, 0, &a), PS_OK) << c.text;
    EXPECT_EQ(ps_sockaddr_is_loopback(&a) != 0, c.loopback) << c.text;
    EXPECT_EQ(ps_sockaddr_is_link_local(&a) != 0, c.link_local) << c.text;
  }
}

TEST(Sockaddr, FromSystemAddress) {
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(99);
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ps_sockaddr_t a;
  ASSERT_EQ(ps_sockaddr_from_sa(reinterpret_cast<sockaddr *>(&sin), sizeof(sin), &a), PS_OK);
  EXPECT_EQ(Format(a), "127.0.0.1:99");
  EXPECT_EQ(a.len, sizeof(sin));
  EXPECT_EQ(ps_sockaddr_from_sa(reinterpret_cast<sockaddr *>(&sin), sizeof(sin) - 1, &a),
            PS_ERR_INVALID_ARG);
  sockaddr_un sun = {};
  sun.sun_family = AF_UNIX;
  EXPECT_EQ(ps_sockaddr_from_sa(reinterpret_cast<sockaddr *>(&sun), sizeof(sun), &a),
            PS_ERR_UNSUPPORTED);
  EXPECT_EQ(ps_sockaddr_from_sa(nullptr, 0, &a), PS_ERR_INVALID_ARG);
}

TEST(Resolve, NumericNeedsNoResolver) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_sockaddr_resolve("127.0.0.1", 5000, AF_UNSPEC, &a), PS_OK);
  EXPECT_EQ(Format(a), "127.0.0.1:5000");
  ASSERT_EQ(ps_sockaddr_resolve("::1", 5000, AF_INET6, &a), PS_OK);
  EXPECT_EQ(Format(a), "[::1]:5000");
  ASSERT_EQ(ps_sockaddr_resolve("fe80::1%lo", 1, AF_UNSPEC, &a), PS_OK);
  EXPECT_EQ(Format(a), "[fe80::1%lo]:1");
  LogCapture log;
  EXPECT_EQ(ps_sockaddr_resolve("::1", 5000, AF_INET, &a), PS_ERR_NOT_FOUND);
  EXPECT_NE(log.Text().find("::1 is not an IPv4 address"), std::string::npos) << log.Text();
  EXPECT_EQ(ps_sockaddr_resolve("", 1, AF_UNSPEC, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_sockaddr_resolve(nullptr, 1, AF_UNSPEC, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_sockaddr_resolve("127.0.0.1", 1, AF_UNIX, &a), PS_ERR_INVALID_ARG);
}

TEST(Resolve, LocalhostFromHostsFile) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_sockaddr_resolve("localhost", 80, AF_UNSPEC, &a), PS_OK);
  EXPECT_TRUE(ps_sockaddr_is_loopback(&a)) << Format(a);
  EXPECT_EQ(ps_sockaddr_port(&a), 80);
  ASSERT_EQ(ps_sockaddr_resolve("localhost", 81, AF_INET, &a), PS_OK);
  EXPECT_EQ(Format(a), "127.0.0.1:81");
}

TEST(Resolve, HostPortText) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_sockaddr_resolve_hostport("localhost:1234", 1, AF_INET, &a), PS_OK);
  EXPECT_EQ(Format(a), "127.0.0.1:1234");
  ASSERT_EQ(ps_sockaddr_resolve_hostport("127.0.0.1", 77, AF_UNSPEC, &a), PS_OK);
  EXPECT_EQ(Format(a), "127.0.0.1:77");
  ASSERT_EQ(ps_sockaddr_resolve_hostport("[::1]:5", 77, AF_UNSPEC, &a), PS_OK);
  EXPECT_EQ(Format(a), "[::1]:5");
  LogCapture log;
  EXPECT_EQ(ps_sockaddr_resolve_hostport("localhost:http", 1, AF_UNSPEC, &a), PS_ERR_PARSE);
  EXPECT_EQ(ps_sockaddr_resolve_hostport("[::1", 1, AF_UNSPEC, &a), PS_ERR_PARSE);
  EXPECT_NE(log.Text().find("cannot parse address 'localhost:http'"), std::string::npos);
  EXPECT_EQ(ps_sockaddr_resolve_hostport(nullptr, 1, AF_UNSPEC, &a), PS_ERR_INVALID_ARG);
}

TEST(Interfaces, LoopbackIsListed) {
  ps_ifaddr_t *list = nullptr;
  size_t n = 0;
  ASSERT_EQ(ps_if_list(&list, &n), PS_OK);
  ASSERT_NE(list, nullptr);
  bool lo4 = false;
  for (size_t i = 0; i < n; ++i) {
    const ps_ifaddr_t &e = list[i];
    EXPECT_TRUE(e.family == AF_INET || e.family == AF_INET6);
    EXPECT_EQ(ps_sockaddr_family(&e.addr), e.family);
    EXPECT_NE(e.index, 0u) << e.name;
    if (!strcmp(e.name, "lo") && e.family == AF_INET) {
      lo4 = true;
      EXPECT_EQ(FormatHost(e.addr), "127.0.0.1");
      EXPECT_TRUE(e.flags & PS_IF_UP);
      EXPECT_TRUE(e.flags & PS_IF_LOOPBACK);
      EXPECT_EQ(e.prefix_len, 8u);
    }
    if (!strcmp(e.name, "lo") && e.family == AF_INET6) {
      EXPECT_EQ(e.prefix_len, 128u);
    }
  }
  EXPECT_TRUE(lo4);
  ps_if_list_free(list);
  ps_if_list_free(nullptr);
  EXPECT_EQ(ps_if_list(nullptr, &n), PS_ERR_INVALID_ARG);
}

TEST(Interfaces, AddressOfLoopback) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_if_addr("lo", AF_UNSPEC, &a), PS_OK);
  EXPECT_EQ(FormatHost(a), "127.0.0.1");  // IPv4 preferred
  ASSERT_EQ(ps_if_addr("lo", AF_INET, &a), PS_OK);
  EXPECT_EQ(FormatHost(a), "127.0.0.1");
  ASSERT_EQ(ps_if_addr("lo", AF_INET6, &a), PS_OK);
  EXPECT_EQ(FormatHost(a), LoopbackHasV6() ? "::1" : "127.0.0.1");
  EXPECT_EQ(ps_if_addr("", AF_UNSPEC, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_if_addr("lo", AF_UNIX, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_if_addr("lo", AF_UNSPEC, nullptr), PS_ERR_INVALID_ARG);
}

TEST(Interfaces, MissingInterfaceIsNamed) {
  LogCapture log;
  ps_sockaddr_t a = {};
  a.len = 3;
  EXPECT_EQ(ps_if_addr("nosuchif0", AF_UNSPEC, &a), PS_ERR_NOT_FOUND);
  EXPECT_EQ(a.len, 3u);
  std::string text = log.Text();
  EXPECT_NE(text.find("interface nosuchif0 not found"), std::string::npos) << text;
  EXPECT_NE(text.find("lo"), std::string::npos) << "lists the interfaces there are";
}

// An interface that exists but has no address (if this machine has one).
TEST(Interfaces, InterfaceWithoutAddress) {
  ps_ifaddr_t *list;
  size_t n;
  ASSERT_EQ(ps_if_list(&list, &n), PS_OK);
  std::set<std::string> with_addr;
  for (size_t i = 0; i < n; ++i) with_addr.insert(list[i].name);
  ps_if_list_free(list);
  struct if_nameindex *all = if_nameindex();
  ASSERT_NE(all, nullptr);
  std::string bare;
  for (struct if_nameindex *p = all; p->if_index != 0; ++p) {
    if (!with_addr.count(p->if_name)) {
      bare = p->if_name;
      break;
    }
  }
  if_freenameindex(all);
  if (bare.empty()) {
    GTEST_SKIP() << "every interface here has an address";
  }
  LogCapture log;
  ps_sockaddr_t a;
  EXPECT_EQ(ps_if_addr(bare.c_str(), AF_UNSPEC, &a), PS_ERR_NOT_FOUND);
  EXPECT_NE(log.Text().find("interface " + bare + " has no IPv4 or IPv6 address"),
            std::string::npos)
      << log.Text();
}

TEST(NodeHost, ExplicitHostWins) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_node_host_select("10.1.2.3", "nosuchif0", AF_UNSPEC, &a), PS_OK);
  EXPECT_EQ(FormatHost(a), "10.1.2.3");
  EXPECT_EQ(ps_sockaddr_port(&a), 0);
  ASSERT_EQ(ps_node_host_select("::1", nullptr, AF_INET, &a), PS_OK);
  EXPECT_EQ(FormatHost(a), "::1");
  ASSERT_EQ(ps_node_host_select("localhost", nullptr, AF_UNSPEC, &a), PS_OK);
  EXPECT_TRUE(ps_sockaddr_is_loopback(&a));
}

TEST(NodeHost, InterfaceNext) {
  ps_sockaddr_t a;
  ASSERT_EQ(ps_node_host_select("", "lo", AF_UNSPEC, &a), PS_OK);
  EXPECT_EQ(FormatHost(a), "127.0.0.1");
  ASSERT_EQ(ps_node_host_select(nullptr, "lo", AF_INET, &a), PS_OK);
  EXPECT_EQ(FormatHost(a), "127.0.0.1");
  LogCapture log;
  a.len = 5;
  EXPECT_EQ(ps_node_host_select(nullptr, "nosuchif0", AF_UNSPEC, &a), PS_ERR_NOT_FOUND);
  EXPECT_EQ(a.len, 5u);
  EXPECT_NE(log.Text().find("interface nosuchif0 not found"), std::string::npos);
}

// With nothing given: some up interface, never loopback unless that is all
// there is.
TEST(NodeHost, AutomaticChoice) {
  ps_ifaddr_t *list;
  size_t n;
  ASSERT_EQ(ps_if_list(&list, &n), PS_OK);
  bool has_other = false;
  for (size_t i = 0; i < n; ++i) {
    if ((list[i].flags & PS_IF_UP) && !(list[i].flags & PS_IF_LOOPBACK)) has_other = true;
  }
  for (const char *iface : {static_cast<const char *>(nullptr), "", "auto"}) {
    for (int fam : {AF_UNSPEC, AF_INET, AF_INET6}) {
      ps_sockaddr_t a;
      ASSERT_EQ(ps_node_host_select(nullptr, iface, fam, &a), PS_OK);
      EXPECT_EQ(ps_sockaddr_is_loopback(&a) != 0, !has_other) << FormatHost(a);
      bool listed = false;
      for (size_t i = 0; i < n; ++i) {
        if (ps_sockaddr_equal_host(&list[i].addr, &a)) listed = true;
      }
      EXPECT_TRUE(listed || !has_other) << FormatHost(a);
    }
  }
  ps_if_list_free(list);
  ps_sockaddr_t a;
  EXPECT_EQ(ps_node_host_select(nullptr, nullptr, AF_UNIX, &a), PS_ERR_INVALID_ARG);
  EXPECT_EQ(ps_node_host_select(nullptr, nullptr, AF_UNSPEC, nullptr), PS_ERR_INVALID_ARG);
}

}  // namespace

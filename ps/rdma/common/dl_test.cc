#include "ps/rdma/common/dl.h"

#include <gtest/gtest.h>
#include <string.h>

#include <string>

namespace {

struct table_t {
    size_t (*strlen_fn)(const char *);
    char *(*strchr_fn)(const char *, int);
};

const ps__dl_sym_t libc_syms[] = {
    {"strlen", offsetof(table_t, strlen_fn)},
    {"strchr", offsetof(table_t, strchr_fn)},
};

TEST(Dl, FillsTheTable)
{
    table_t t = {};
    char why[256] = "";
    ASSERT_EQ(ps__dl_load("libc.so.6", "test", &t, libc_syms, 2, why, sizeof(why)), PS_OK)
        << why;
    ASSERT_NE(t.strlen_fn, nullptr);
    EXPECT_EQ(t.strlen_fn("four"), 4u);
    EXPECT_NE(t.strchr_fn("abc", 'b'), nullptr);
}

// A van whose library is absent says which library, and that it is absent.
TEST(Dl, MissingLibraryIsNamed)
{
    table_t t = {};
    char why[256] = "";
    EXPECT_EQ(ps__dl_load("libps-absent.so.1", "test", &t, libc_syms, 2, why, sizeof(why)),
              PS_ERR_UNSUPPORTED);
    EXPECT_EQ(std::string(why).rfind("libps-absent.so.1 not found (", 0), 0u) << why;
    EXPECT_EQ(t.strlen_fn, nullptr);
}

TEST(Dl, MissingSymbolIsNamed)
{
    table_t t = {};
    const ps__dl_sym_t bad[] = {{"ps_no_such_symbol_anywhere", 0}};
    char why[256] = "";
    EXPECT_EQ(ps__dl_load("libc.so.6", "test", &t, bad, 1, why, sizeof(why)),
              PS_ERR_UNSUPPORTED);
    EXPECT_NE(strstr(why, "libc.so.6 lacks ps_no_such_symbol_anywhere"), nullptr) << why;
}

}  // namespace

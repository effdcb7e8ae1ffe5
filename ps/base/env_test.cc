// The environment read while it grows: readers walk it while a writer adds
// names (glibc moves the array as it grows); every read under ps's lock
// sees a whole array. Run under asan/tsan to see the race it closes.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "ps/base/env.h"
}

namespace {

TEST(Env, ReadsWhileDefaultsAreAdded)
{
    ASSERT_EQ(nullptr, ps_env_get(nullptr));
    ps_env_set_default("ENV_TEST_KEPT", "first");
    ps_env_set_default("ENV_TEST_KEPT", "second");
    ASSERT_STREQ("first", ps_env_get("ENV_TEST_KEPT")) << "a set name is left as it is";

    std::vector<std::string> names;
    for (int i = 0; i < 400; i++)
        names.push_back("ENV_TEST_" + std::to_string(i));
    std::atomic<bool> done{false};
    std::atomic<long> reads{0};
    std::vector<std::thread> readers;
    for (int r = 0; r < 3; r++) {
        readers.emplace_back([&] {
            while (!done.load()) {
                const char *v = ps_env_get("ENV_TEST_KEPT");
                ASSERT_NE(nullptr, v);
                ASSERT_STREQ("first", v);
                reads++;
            }
        });
    }
    while (reads.load() < 3)  // the readers are reading
        std::this_thread::yield();
    for (const std::string &n : names)
        ps_env_set_default(n.c_str(), "x");
    done = true;
    for (auto &t : readers)
        t.join();
    EXPECT_GT(reads.load(), 0);
    EXPECT_STREQ("x", ps_env_get(names.back().c_str()));
}

}  // namespace

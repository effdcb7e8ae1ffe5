// The vans' random values (ps_van_random, ps_van_random_bytes) come from a
// CSPRNG: two processes forked from one that already drew values (the same
// memory, clock and parent pid: everything a counter-based generator would
// be seeded from) draw different values, and a process's draws differ.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <set>

#include "gtest/gtest.h"

extern "C" {
#include "ps/net/van/van.h"
}

namespace {

struct Draw {
    uint64_t word;
    uint8_t bytes[16];
};

// Forks a child that draws once and writes its draw to a pipe.
bool DrawInChild(Draw *out)
{
    int fds[2];
    if (pipe(fds) != 0) {
        return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        close(fds[0]);
        Draw d;
        d.word = ps_van_random();
        ps_van_random_bytes(d.bytes, sizeof(d.bytes));
        ssize_t n = write(fds[1], &d, sizeof(d));
        _exit(n == (ssize_t)sizeof(d) ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof(*out)) {
        ssize_t n = read(fds[0], reinterpret_cast<char *>(out) + got, sizeof(*out) - got);
        if (n <= 0) {
            break;
        }
        got += static_cast<size_t>(n);
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return got == sizeof(*out) && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(VanRandom, ForkedChildrenDrawDifferentValues)
{
    // The parent's generator is in use before the fork, as a van's is.
    (void)ps_van_random();
    Draw a, b;
    ASSERT_TRUE(DrawInChild(&a));
    ASSERT_TRUE(DrawInChild(&b));
    EXPECT_NE(a.word, b.word);
    EXPECT_NE(memcmp(a.bytes, b.bytes, sizeof(a.bytes)), 0);
    // Nor what the parent draws next.
    uint64_t mine = ps_van_random();
    EXPECT_NE(mine, a.word);
    EXPECT_NE(mine, b.word);
}

TEST(VanRandom, DrawsDiffer)
{
    std::set<uint64_t> seen;
    for (int i = 0; i < 1000; ++i) {
        seen.insert(ps_van_random());
    }
    EXPECT_EQ(seen.size(), 1000u);
    uint8_t x[32] = {0}, y[32] = {0};
    ps_van_random_bytes(x, sizeof(x));
    ps_van_random_bytes(y, sizeof(y));
    EXPECT_NE(memcmp(x, y, sizeof(x)), 0);
}

} // namespace

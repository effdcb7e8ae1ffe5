#include "ps/base/sigkeep.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

void library_handler(int) { _exit(1); }
void library_action(int, siginfo_t *, void *) { _exit(1); }
void own_handler(int) {}

sighandler_t current(int sig)
{
    struct sigaction now;
    sigaction(sig, nullptr, &now);
    return now.sa_handler;
}

// A "library" replacing every kept signal's disposition is undone, and the
// count says so. What comes back is what the process had: the defaults, or
// a sanitizer's handlers when built with one.
TEST(Sigkeep, RestoresWhatTheProcessHadAfterALibrary)
{
    sighandler_t before[PS_SIGKEEP_COUNT];
    for (int i = 0; i < PS_SIGKEEP_COUNT; i++)
        before[i] = current(ps__sigkeep_signals[i]);
    ps_sigkeep_t keep;
    ps__sigkeep_save(&keep);
    for (int i = 0; i < PS_SIGKEEP_COUNT; i++)
        signal(ps__sigkeep_signals[i], library_handler);
    EXPECT_EQ(ps__sigkeep_restore(&keep, "test"), PS_SIGKEEP_COUNT);
    for (int i = 0; i < PS_SIGKEEP_COUNT; i++)
        EXPECT_EQ(current(ps__sigkeep_signals[i]), before[i]) << ps__sigkeep_signals[i];
    EXPECT_EQ(ps__sigkeep_restore(&keep, "test"), 0);
}

// The process's own handler (not the default) is what comes back; an
// SA_SIGINFO handler of the library is seen as a change too.
TEST(Sigkeep, RestoresTheProcesssOwnHandler)
{
    signal(SIGTERM, own_handler);
    ps_sigkeep_t keep;
    ps__sigkeep_save(&keep);
    struct sigaction lib = {};
    lib.sa_sigaction = library_action;
    lib.sa_flags = SA_SIGINFO;
    sigaction(SIGTERM, &lib, nullptr);
    EXPECT_EQ(ps__sigkeep_restore(&keep, "test"), 1);
    EXPECT_EQ(current(SIGTERM), own_handler);
    signal(SIGTERM, SIG_DFL);
}

// Nothing changed: nothing restored.
TEST(Sigkeep, LeavesUnchangedDispositionsAlone)
{
    ps_sigkeep_t keep;
    ps__sigkeep_save(&keep);
    EXPECT_EQ(ps__sigkeep_restore(&keep, "test"), 0);
}

// The end to end property: after a restore, the signal kills the process (a
// launcher sees it), where the library's handler would exit(1). SIGTERM:
// a sanitizer's runtime keeps SIGSEGV for itself.
TEST(Sigkeep, ProcessDiesOfTheSignal)
{
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ps_sigkeep_t keep;
        ps__sigkeep_save(&keep);
        signal(SIGTERM, library_handler);
        ps__sigkeep_restore(&keep, "test");
        raise(SIGTERM);
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(Sigkeep, SetenvDefaultKeepsTheUsersValue)
{
    setenv("PS_SIGKEEP_TEST_VAR", "", 1);
    ps__sigkeep_setenv_default("PS_SIGKEEP_TEST_VAR", "x");
    EXPECT_STREQ(getenv("PS_SIGKEEP_TEST_VAR"), "");
    unsetenv("PS_SIGKEEP_TEST_VAR");
    ps__sigkeep_setenv_default("PS_SIGKEEP_TEST_VAR", "x");
    EXPECT_STREQ(getenv("PS_SIGKEEP_TEST_VAR"), "x");
    unsetenv("PS_SIGKEEP_TEST_VAR");
}

}  // namespace

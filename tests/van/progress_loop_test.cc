// The progress loop's stop deadline: a thread stuck in the van's poll is
// abandoned at the deadline, logged once, and nothing it still touches is
// freed; once it leaves, a later stop joins it and the van can go.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

extern "C" {
#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/base/time.h"
#include "ps/net/van/progress_loop.h"
}

namespace {

constexpr int kStopMs = 300;
// Slack for a loaded machine or a sanitizer build.
constexpr uint64_t kSlackMs = 3000;

// A van whose poll blocks, when told, until released (or 30 s).
struct FakeVan {
    ps_van_loop_t loop;
    int block = 0;      // atomic: the next poll blocks
    int in_poll = 0;    // atomic: a poll blocks now
    int release = 0;    // atomic: the blocked poll returns
    int after_poll = 0; // written by the thread once the blocked poll returns
};

int fake_poll(void *arg, unsigned)
{
    auto *v = static_cast<FakeVan *>(arg);
    if (!__atomic_exchange_n(&v->block, 0, __ATOMIC_ACQ_REL)) {
        return 0;
    }
    __atomic_store_n(&v->in_poll, 1, __ATOMIC_RELEASE);
    uint64_t end = ps_time_now_ns() + 30 * PS_NSEC_PER_SEC;
    while (!__atomic_load_n(&v->release, __ATOMIC_ACQUIRE) && ps_time_now_ns() < end) {
        ps_sleep_ms(1);
    }
    v->after_poll = 1; // the van's memory, after close gave up on the thread
    return 1;
}

ps_van_loop_ops_t make_ops()
{
    ps_van_loop_ops_t ops = {};
    ops.size = sizeof(ops);
    ops.poll = fake_poll;
    return ops;
}

const ps_van_loop_ops_t fake_ops = make_ops();

FakeVan *fake_open(int stop_ms)
{
    auto *v = new FakeVan;
    ps_van_loop_params_t lp = {};
    lp.thread_name = "ps-test-progress";
    lp.log = PS_LOG_VAN;
    lp.stop_ms = stop_ms;
    EXPECT_EQ(PS_OK, ps_van_loop_init(&v->loop, &lp, &fake_ops, v));
    EXPECT_EQ(PS_OK, ps_van_loop_start(&v->loop, nullptr, 0));
    return v;
}

// What a van's close does: frees the van only once its thread is gone.
void fake_close(FakeVan *v)
{
    if (ps_van_loop_stop(&v->loop) != PS_OK) {
        return;
    }
    ps_van_loop_cleanup(&v->loop);
    delete v;
}

uint64_t ms_since(uint64_t t0)
{
    return (ps_time_now_ns() - t0) / PS_NSEC_PER_MSEC;
}

std::string read_all(int fd)
{
    std::string s;
    char buf[4096];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        s.append(buf, static_cast<size_t>(n));
    }
    return s;
}

size_t count_of(const std::string &s, const std::string &what)
{
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) {
        ++n;
    }
    return n;
}

TEST(ProgressLoop, StopHasADeadlineByDefault)
{
    FakeVan *v = fake_open(0);
    EXPECT_EQ(PS_VAN_LOOP_STOP_MS, v->loop.params.stop_ms);
    uint64_t t0 = ps_time_now_ns();
    EXPECT_EQ(PS_OK, ps_van_loop_stop(&v->loop));
    EXPECT_LT(ms_since(t0), kSlackMs);
    EXPECT_FALSE(ps_van_loop_abandoned(&v->loop));
    fake_close(v);
}

TEST(ProgressLoop, StuckPollIsAbandonedAtTheDeadline)
{
    std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                       "/progress_loop_log.XXXXXX";
    int logfd = mkstemp(&path[0]);
    ASSERT_GE(logfd, 0);
    unlink(path.c_str());
    ps_log_set_fd(logfd);

    const uint64_t abandoned0 = ps_van_loop_abandon_count();
    FakeVan *v = fake_open(kStopMs);
    __atomic_store_n(&v->block, 1, __ATOMIC_RELEASE);
    ps_van_loop_wake(&v->loop);
    uint64_t t0 = ps_time_now_ns();
    while (!__atomic_load_n(&v->in_poll, __ATOMIC_ACQUIRE) && ms_since(t0) < kSlackMs) {
        ps_sleep_ms(1);
    }
    ASSERT_TRUE(__atomic_load_n(&v->in_poll, __ATOMIC_ACQUIRE));

    // Close returns at the deadline, not when the poll does.
    t0 = ps_time_now_ns();
    fake_close(v);
    uint64_t took = ms_since(t0);
    EXPECT_GE(took, static_cast<uint64_t>(kStopMs));
    EXPECT_LT(took, kStopMs + kSlackMs);
    EXPECT_TRUE(ps_van_loop_abandoned(&v->loop));
    EXPECT_EQ(abandoned0 + 1, ps_van_loop_abandon_count());
    // A second close does not wait again and logs nothing more; the
    // eventfd the thread sleeps on stays open.
    t0 = ps_time_now_ns();
    fake_close(v);
    EXPECT_LT(ms_since(t0), static_cast<uint64_t>(kStopMs));
    ps_van_loop_cleanup(&v->loop);
    EXPECT_GE(v->loop.wakefd, 0);
    EXPECT_NE(-1, fcntl(v->loop.wakefd, F_GETFD));
    EXPECT_EQ(abandoned0 + 1, ps_van_loop_abandon_count());

    // The thread comes back into the van's memory, still allocated (ASan
    // would report a use after free otherwise), and leaves the loop; then
    // a stop joins it and the van is freed.
    __atomic_store_n(&v->release, 1, __ATOMIC_RELEASE);
    t0 = ps_time_now_ns();
    ps_status_t st;
    while ((st = ps_van_loop_stop(&v->loop)) != PS_OK && ms_since(t0) < kSlackMs) {
        ps_sleep_ms(5);
    }
    ASSERT_EQ(PS_OK, st);
    EXPECT_FALSE(ps_van_loop_abandoned(&v->loop));
    EXPECT_EQ(1, v->after_poll);
    fake_close(v);

    ps_log_set_fd(-1);
    std::string log = read_all(logfd);
    close(logfd);
    EXPECT_EQ(1u, count_of(log, "the progress thread ps-test-progress did not stop within 300 ms"))
        << log;
}

} // namespace

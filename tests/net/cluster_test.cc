// Multi-process jobs on loopback: a driver that starts po_node as the
// scheduler, servers and workers with the environment a launcher would
// set, bounds each job in time, and checks every exit status and output.
// The fault tests kill -9 (or stop) a worker, a server or the scheduler in
// the middle of a job and check who ends how; they print the time from the
// fault to its detection (read from the log line that declares it) and to
// the last process's exit. Each states its time limit.
//
// Usage (from Bazel): cluster_test <path of po_node>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <map>
#include <stdexcept>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/lib/free_port.h"

namespace {

std::string g_po_node;

using Env = std::map<std::string, std::string>;

struct Proc {
    std::string name;
    pid_t pid = -1;
    std::string out_path;
    int exit_code = -1; // -1: killed or signalled
    std::string output;
};

std::string tmp_dir()
{
    const char *d = getenv("TEST_TMPDIR");
    return d != nullptr ? d : "/tmp";
}


bool have_ipv6_loopback()
{
    return test_free_port(true) > 0;
}

Proc spawn(const std::string &name, const Env &env)
{
    static int counter = 0;
    Proc p;
    p.name = name;
    p.out_path = tmp_dir() + "/" + name + "." + std::to_string(getpid()) + "." +
                 std::to_string(counter++) + ".log";
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        // Start from the test's environment without any job settings.
        for (const char *v : {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                              "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_NODE_HOST",
                              "DMLC_INTERFACE", "DMLC_PORT", "DMLC_RANK", "DMLC_WORKER_ID",
                              "DMLC_ENABLE_RDMA", "DMLC_PS_VAN_TYPE", "DMLC_ENABLE_UCX",
                              "PS_VERBOSE", "PS_LOG_LEVEL"})
            unsetenv(v);
        for (const auto &kv : env)
            setenv(kv.first.c_str(), kv.second.c_str(), 1);
        execl(g_po_node.c_str(), g_po_node.c_str(), static_cast<char *>(nullptr));
        _exit(127);
    }
    p.pid = pid;
    return p;
}

// Waits for every process until `limit`; kills what is left. Returns the
// seconds it took.
double wait_all(std::vector<Proc> &procs, std::chrono::seconds limit)
{
    auto start = std::chrono::steady_clock::now();
    auto deadline = start + limit;
    size_t left = procs.size();
    while (left > 0) {
        for (auto &p : procs) {
            if (p.pid < 0)
                continue;
            int status;
            pid_t r = waitpid(p.pid, &status, WNOHANG);
            if (r == p.pid) {
                p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                p.pid = -1;
                left--;
            }
        }
        if (left == 0)
            break;
        if (std::chrono::steady_clock::now() > deadline) {
            for (auto &p : procs) {
                if (p.pid < 0)
                    continue;
                kill(p.pid, SIGKILL);
                waitpid(p.pid, nullptr, 0);
                p.pid = -1;
                p.exit_code = -1;
                ADD_FAILURE() << p.name << " still running after " << limit.count()
                              << " s: killed";
            }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto &p : procs) {
        std::ifstream in(p.out_path);
        std::stringstream ss;
        ss << in.rdbuf();
        p.output = ss.str();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string dump(const std::vector<Proc> &procs)
{
    std::string s;
    for (const auto &p : procs)
        s += "---- " + p.name + " (exit " + std::to_string(p.exit_code) + ") ----\n" + p.output;
    return s;
}

bool contains(const std::string &hay, const std::string &needle)
{
    return hay.find(needle) != std::string::npos;
}

struct Job {
    Job(int s, int w) : servers(s), workers(w) {}
    int servers;
    int workers;
    std::string host = "127.0.0.1";
    Env extra;                         // for every process
    std::map<std::string, Env> per;    // by process name
    int num_workers_env = -1;          // DMLC_NUM_WORKER if it should differ
};

Env job_env(const Job &job, int port)
{
    Env base = {
        {"DMLC_PS_ROOT_URI", job.host},
        {"DMLC_PS_ROOT_PORT", std::to_string(port)},
        {"DMLC_NUM_SERVER", std::to_string(job.servers)},
        {"DMLC_NUM_WORKER",
         std::to_string(job.num_workers_env >= 0 ? job.num_workers_env : job.workers)},
        {"DMLC_NODE_HOST", job.host},
    };
    for (const auto &kv : job.extra)
        base[kv.first] = kv.second;
    return base;
}

Env role_env(const Job &job, const Env &base, const std::string &name, const char *role)
{
    Env env = base;
    env["DMLC_ROLE"] = role;
    auto it = job.per.find(name);
    if (it != job.per.end()) {
        for (const auto &kv : it->second)
            env[kv.first] = kv.second;
    }
    return env;
}

std::vector<Proc> run_job(const Job &job, std::chrono::seconds limit, double *secs = nullptr)
{
    bool v6 = job.host.find(':') != std::string::npos;
    int port = test_free_port(v6);
    EXPECT_GT(port, 0);
    Env base = {
        {"DMLC_PS_ROOT_URI", job.host},
        {"DMLC_PS_ROOT_PORT", std::to_string(port)},
        {"DMLC_NUM_SERVER", std::to_string(job.servers)},
        {"DMLC_NUM_WORKER",
         std::to_string(job.num_workers_env >= 0 ? job.num_workers_env : job.workers)},
        {"DMLC_NODE_HOST", job.host},
    };
    for (const auto &kv : job.extra)
        base[kv.first] = kv.second;
    std::vector<Proc> procs;
    auto add = [&](const std::string &name, const char *role) {
        Env env = base;
        env["DMLC_ROLE"] = role;
        auto it = job.per.find(name);
        if (it != job.per.end()) {
            for (const auto &kv : it->second)
                env[kv.first] = kv.second;
        }
        procs.push_back(spawn(name, env));
    };
    add("scheduler", "scheduler");
    for (int i = 0; i < job.servers; i++)
        add("server" + std::to_string(i), "server");
    for (int i = 0; i < job.workers; i++)
        add("worker" + std::to_string(i), "worker");
    double t = wait_all(procs, limit);
    if (secs != nullptr)
        *secs = t;
    return procs;
}

TEST(Cluster, TwoServersTwoWorkers)
{
    Job job{2, 2};
    job.extra["PS_VERBOSE"] = "1";
    job.extra["PO_ROUNDS"] = "18";
    auto procs = run_job(job, std::chrono::seconds(25));
    for (const auto &p : procs) {
        EXPECT_EQ(0, p.exit_code) << dump(procs);
        EXPECT_TRUE(contains(p.output, "ok")) << dump(procs);
    }
    const std::string &sched = procs[0].output;
    EXPECT_TRUE(contains(sched, "node registered: worker 127.0.0.1:")) << sched;
    EXPECT_TRUE(contains(sched, "(4 of 4)")) << sched;
    EXPECT_TRUE(contains(sched, "assigned id 8 to server")) << sched;
    EXPECT_TRUE(contains(sched, "assigned id 11 to worker")) << sched;
    for (int w = 3; w <= 4; w++) {
        EXPECT_TRUE(contains(procs[w].output, "18 rounds with 2 servers ok")) << dump(procs);
        EXPECT_TRUE(contains(procs[w].output, "connected to server 127.0.0.1:")) << dump(procs);
        EXPECT_TRUE(contains(procs[w].output, "by the scheduler")) << dump(procs);
    }
    // Log lines carry the node once it has an id.
    EXPECT_TRUE(contains(procs[1].output + procs[2].output, "server 8")) << dump(procs);
}

TEST(Cluster, VerboseTwoLogsEveryMessage)
{
    Job job{1, 1};
    job.extra["PS_VERBOSE"] = "2";
    job.extra["PO_ROUNDS"] = "2";
    auto procs = run_job(job, std::chrono::seconds(20));
    for (const auto &p : procs)
        EXPECT_EQ(0, p.exit_code) << dump(procs);
    // The worker logs its requests, the server their arrival.
    EXPECT_TRUE(contains(procs[2].output, "send to 8:")) << procs[2].output;
    EXPECT_TRUE(contains(procs[1].output, "recv from 9:")) << procs[1].output;
}

TEST(Cluster, BusyPolling)
{
    // PS_BUSY_POLL: the van spins and waiters spin before sleeping.
    Job job{1, 1};
    job.extra["PS_BUSY_POLL"] = "1";
    job.extra["PO_ROUNDS"] = "12";
    auto procs = run_job(job, std::chrono::seconds(20));
    for (const auto &p : procs)
        EXPECT_EQ(0, p.exit_code) << dump(procs);
    EXPECT_TRUE(contains(procs[2].output, "12 rounds with 1 servers ok")) << dump(procs);
}

TEST(Cluster, StartupMismatchTimesOutWithCounts)
{
    Job job{1, 2};
    job.num_workers_env = 3; // a third worker never comes
    job.extra["PS_START_TIMEOUT_MS"] = "2000";
    double secs = 0;
    auto procs = run_job(job, std::chrono::seconds(20), &secs);
    for (const auto &p : procs) {
        EXPECT_EQ(1, p.exit_code) << dump(procs);
        EXPECT_TRUE(contains(p.output, "PS_ERR_TIMED_OUT")) << dump(procs);
    }
    EXPECT_TRUE(contains(procs[0].output, "3 of 4 nodes registered")) << dump(procs);
    EXPECT_TRUE(contains(procs[0].output, "2 of 3 workers")) << dump(procs);
    // The waiting nodes learn the count from the scheduler.
    EXPECT_TRUE(contains(procs[3].output, "2 of 3 workers")) << dump(procs);
    EXPECT_LT(secs, 15.0);
}

TEST(Cluster, NodesStartedWithDifferentCountsFailFast)
{
    // One worker was started with DMLC_NUM_WORKER=3, everyone else with 2:
    // a misconfigured job, said at once (not after the start-up deadline).
    Job job{1, 2};
    job.per["worker1"]["DMLC_NUM_WORKER"] = "3";
    job.extra["PS_START_TIMEOUT_MS"] = "60000";
    double secs = 0;
    auto procs = run_job(job, std::chrono::seconds(30), &secs);
    for (const auto &p : procs) {
        EXPECT_EQ(1, p.exit_code) << dump(procs);
        EXPECT_TRUE(contains(p.output, "PS_ERR_CONFIG")) << dump(procs);
        EXPECT_TRUE(contains(p.output, "was started with DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=3, the "
                                       "scheduler with DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2"))
            << dump(procs);
    }
    printf("[ timing   ] different counts: every process done in %.3f s\n", secs);
}

TEST(Cluster, DuplicatePreferredRanksAreRejected)
{
    Job job{1, 2};
    job.per["worker0"]["DMLC_RANK"] = "0";
    job.per["worker1"]["DMLC_RANK"] = "0";
    job.extra["PS_START_TIMEOUT_MS"] = "10000";
    auto procs = run_job(job, std::chrono::seconds(20));
    for (const auto &p : procs) {
        EXPECT_EQ(1, p.exit_code) << dump(procs);
        EXPECT_TRUE(contains(p.output, "PS_ERR_CONFIG")) << dump(procs);
    }
    EXPECT_TRUE(contains(procs[0].output, "both asked for rank 0")) << dump(procs);
    EXPECT_TRUE(contains(procs[2].output, "both asked for rank 0")) << dump(procs);
}

TEST(Cluster, PreferredRanksDecideIds)
{
    Job job{1, 2};
    job.per["worker0"]["DMLC_RANK"] = "1";
    job.per["worker1"]["DMLC_WORKER_ID"] = "0"; // BytePS's name for it
    job.extra["PO_ROUNDS"] = "2";
    auto procs = run_job(job, std::chrono::seconds(20));
    for (const auto &p : procs)
        EXPECT_EQ(0, p.exit_code) << dump(procs);
    EXPECT_TRUE(contains(procs[2].output, "worker 11 started (rank 1")) << dump(procs);
    EXPECT_TRUE(contains(procs[3].output, "worker 9 started (rank 0")) << dump(procs);
}

TEST(Cluster, IPv6Loopback)
{
    if (!have_ipv6_loopback())
        GTEST_SKIP() << "no IPv6 loopback here";
    Job job{1, 2};
    job.host = "::1";
    job.extra["PO_ROUNDS"] = "6";
    job.extra["PS_VERBOSE"] = "1";
    auto procs = run_job(job, std::chrono::seconds(20));
    for (const auto &p : procs)
        EXPECT_EQ(0, p.exit_code) << dump(procs);
    EXPECT_TRUE(contains(procs[0].output, "worker [::1]:")) << dump(procs);
}

// ---- fault tests ----

double now_wall()
{
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Seconds since local midnight of a wall-clock time, as log lines print it.
double of_day(double wall)
{
    time_t t = (time_t)wall;
    tm lt;
    localtime_r(&t, &lt);
    return lt.tm_hour * 3600.0 + lt.tm_min * 60.0 + lt.tm_sec + (wall - (double)t);
}

std::string read_file(const std::string &path)
{
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The time of day ("[HH:MM:SS.us ...") of the first log line containing
// `needle`, or -1.
double log_time(const std::string &out, const std::string &needle)
{
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find(needle) == std::string::npos)
            continue;
        int h, m;
        double sec;
        if (sscanf(line.c_str(), "[%d:%d:%lf", &h, &m, &sec) == 3)
            return h * 3600.0 + m * 60.0 + sec;
    }
    return -1;
}

// Waits until process `p`'s output contains `needle` (or it exited, or the
// limit passed); true if it does.
bool wait_for_output(const Proc &p, const std::string &needle, std::chrono::seconds limit)
{
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (contains(read_file(p.out_path), needle))
            return true;
        int status;
        if (waitpid(p.pid, &status, WNOHANG) == p.pid)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

// A running job: the processes in the order scheduler, servers, workers.
struct Running {
    explicit Running(const Job &j) : job(j) {}
    Job job;
    Env base;
    std::vector<Proc> procs;

    Proc &by_name(const std::string &name)
    {
        for (auto &p : procs) {
            if (p.name == name)
                return p;
        }
        throw std::runtime_error("no process " + name);
    }
};

Running start_job(const Job &job)
{
    Running r(job);
    r.base = job_env(job, test_free_port(job.host.find(':') != std::string::npos));
    auto add = [&](const std::string &name, const char *role) {
        r.procs.push_back(spawn(name, role_env(job, r.base, name, role)));
    };
    add("scheduler", "scheduler");
    for (int i = 0; i < job.servers; i++)
        add("server" + std::to_string(i), "server");
    for (int i = 0; i < job.workers; i++)
        add("worker" + std::to_string(i), "worker");
    return r;
}

// Kills `p` with `sig`, returns the wall-clock time it was sent; with
// SIGKILL also reaps it.
double kill_proc(Proc &p, int sig)
{
    double t = now_wall();
    kill(p.pid, sig);
    if (sig == SIGKILL) {
        waitpid(p.pid, nullptr, 0);
        p.pid = -1;
        p.exit_code = -1;
        p.output = read_file(p.out_path);
    }
    return t;
}

// A store job (see po_node.c): every process checks the data at the end.
Job store_job(int servers, int workers, int rounds, int round_ms, int recovery_ms)
{
    Job job{servers, workers};
    job.extra["PO_MODE"] = "store";
    job.extra["PO_ROUNDS"] = std::to_string(rounds);
    job.extra["PO_ROUND_MS"] = std::to_string(round_ms);
    job.extra["PO_RECOVERY_MS"] = std::to_string(recovery_ms);
    job.extra["PS_VERBOSE"] = "1";
    return job;
}

// The node id a po_node process printed ("po_node: worker 11 started").
int started_id(const std::string &out)
{
    size_t at = out.find("po_node: ");
    while (at != std::string::npos) {
        char role[16];
        int id;
        if (sscanf(out.c_str() + at, "po_node: %15s %d started", role, &id) == 2)
            return id;
        at = out.find("po_node: ", at + 1);
    }
    return -1;
}

// The job id a po_node process printed ("... started (rank 0, van tcp,
// job <id>)"), or "".
std::string started_job(const std::string &out)
{
    size_t at = out.find(", job ");
    if (at == std::string::npos)
        return "";
    size_t end = out.find(')', at);
    return end == std::string::npos ? "" : out.substr(at + 6, end - at - 6);
}

void report(const char *what, double fault_day, double detected_day, double secs_to_exit)
{
    printf("[ timing   ] %s: detected %.3f s after the fault; every process done %.3f s after "
           "it\n", what, detected_day >= 0 ? detected_day - fault_day : -1.0, secs_to_exit);
    fflush(stdout);
}

TEST(Fault, KilledWorkerIsReplacedAndTheJobFinishes)
{
    // Limit 60 s. 1 scheduler + 2 servers + 2 workers, 60 rounds; a worker
    // is killed -9 after its round 10 and a new process started with the
    // same role: it takes its id over, resumes where its predecessor got,
    // and every store ends with every slot right, applied exactly once.
    Running r = start_job(store_job(2, 2, 60, 30, 30000));
    ASSERT_TRUE(wait_for_output(r.by_name("worker1"), "round 10\n", std::chrono::seconds(30)))
        << read_file(r.by_name("worker1").out_path);
    double fault = kill_proc(r.by_name("worker1"), SIGKILL);
    Proc victim = r.by_name("worker1");
    int id = started_id(victim.output);
    ASSERT_GT(id, 8) << victim.output;
    std::string who = "worker " + std::to_string(id) + " (rank " + std::to_string(id / 2 - 4) + ")";
    // It is a restart of a node of this job: it says so with the job's id.
    std::string job_id = started_job(victim.output);
    ASSERT_EQ(16u, job_id.size()) << victim.output;
    EXPECT_TRUE(contains(read_file(r.by_name("scheduler").out_path), "job " + job_id));
    Env fresh_env = role_env(r.job, r.base, "worker1", "worker");
    fresh_env["PS_JOB_ID"] = job_id;
    r.procs.push_back(spawn("worker1-new", fresh_env));
    std::vector<Proc> rest;
    for (auto &p : r.procs) {
        if (p.pid > 0)
            rest.push_back(p);
    }
    double secs = wait_all(rest, std::chrono::seconds(60));
    for (const auto &p : rest) {
        EXPECT_EQ(0, p.exit_code) << dump(rest) << victim.output;
        EXPECT_TRUE(contains(p.output, "ok")) << dump(rest);
    }
    const std::string &sched = rest[0].output;
    EXPECT_TRUE(contains(sched, who + " is dead")) << sched;
    EXPECT_TRUE(contains(sched, "took over node " + std::to_string(id) + " (worker rank"))
        << sched;
    const std::string &fresh = rest.back().output;
    EXPECT_TRUE(contains(fresh, "worker " + std::to_string(id) +
                                    " took over from a dead process; resumes at round"))
        << fresh;
    EXPECT_TRUE(contains(fresh, "job checked: 120 slots on each of 2 servers")) << fresh;
    for (int s = 1; s <= 2; s++) {
        EXPECT_TRUE(contains(rest[s].output, "120 slots right, 0 wrong; 120 applied"))
            << rest[s].output;
        EXPECT_TRUE(contains(rest[s].output, "node " + std::to_string(id) + " recovered"))
            << rest[s].output;
    }
    report("worker killed -9, replaced", of_day(fault), log_time(sched, ") is dead: "), secs);
}

size_t count_of(const std::string &hay, const std::string &needle)
{
    size_t n = 0;
    for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1))
        n++;
    return n;
}

TEST(LateJoin, AnotherJobOnTheSamePortIsRefusedAndNeverTakesARank)
{
    // Limit 150 s. Job A runs (2 servers, 2 workers, 80 rounds). Job B is
    // started with the same DMLC_PS_ROOT_PORT and counts: its scheduler
    // cannot listen, and its servers and workers, registering with A's
    // scheduler, are refused at once (not after the 120 s start time-out).
    // Then a worker of A is killed -9: a stranger worker registering now,
    // with a dead node to take over, is refused again; the worker restarted
    // with A's job id takes over and every one of A's slots is right.
    Running r = start_job(store_job(2, 2, 80, 30, 60000));
    ASSERT_TRUE(wait_for_output(r.by_name("worker1"), "round 5\n", std::chrono::seconds(30)))
        << read_file(r.by_name("worker1").out_path);
    std::string job_id = started_job(read_file(r.by_name("worker0").out_path));
    ASSERT_EQ(16u, job_id.size()) << read_file(r.by_name("worker0").out_path);

    std::vector<Proc> b;
    b.push_back(spawn("b-scheduler", role_env(r.job, r.base, "b", "scheduler")));
    for (int i = 0; i < 2; i++)
        b.push_back(spawn("b-server" + std::to_string(i), role_env(r.job, r.base, "b", "server")));
    for (int i = 0; i < 2; i++)
        b.push_back(spawn("b-worker" + std::to_string(i), role_env(r.job, r.base, "b", "worker")));
    double b_secs = wait_all(b, std::chrono::seconds(60));
    printf("[ timing   ] the second job's five processes ended %.3f s after they started\n",
           b_secs);
    EXPECT_LT(b_secs, 30.0) << dump(b); // refused, not timed out
    EXPECT_EQ(1, b[0].exit_code) << b[0].output;
    EXPECT_TRUE(contains(b[0].output, "DMLC_PS_ROOT_PORT")) << b[0].output;
    for (size_t i = 1; i < b.size(); i++) {
        EXPECT_EQ(1, b[i].exit_code) << dump(b);
        EXPECT_TRUE(contains(b[i].output, "failed: PS_ERR_CONFIG")) << b[i].output;
        EXPECT_TRUE(contains(b[i].output, "already runs job " + job_id + " (2 servers, 2 workers"))
            << b[i].output;
        EXPECT_FALSE(contains(b[i].output, "assigned id")) << b[i].output;
    }

    Proc &victim = r.by_name("worker1");
    int id = started_id(read_file(victim.out_path));
    ASSERT_GT(id, 8);
    kill_proc(victim, SIGKILL);
    ASSERT_TRUE(wait_for_output(r.by_name("scheduler"), ") is dead", std::chrono::seconds(30)));
    std::vector<Proc> again = {spawn("b-worker-again", role_env(r.job, r.base, "b", "worker"))};
    wait_all(again, std::chrono::seconds(60));
    EXPECT_EQ(1, again[0].exit_code) << again[0].output;
    EXPECT_TRUE(contains(again[0].output, "failed: PS_ERR_CONFIG")) << again[0].output;

    Env fresh_env = role_env(r.job, r.base, "worker1", "worker");
    fresh_env["PS_JOB_ID"] = job_id;
    r.procs.push_back(spawn("worker1-new", fresh_env));
    std::vector<Proc> rest;
    for (auto &p : r.procs) {
        if (p.pid > 0)
            rest.push_back(p);
    }
    wait_all(rest, std::chrono::seconds(60));
    for (const auto &p : rest)
        EXPECT_EQ(0, p.exit_code) << dump(rest);
    const std::string &sched = rest[0].output;
    EXPECT_EQ(5u, count_of(sched, "registering after the job started")) << sched;
    EXPECT_EQ(1u, count_of(sched, "took over node")) << sched;
    EXPECT_TRUE(contains(sched, "took over node " + std::to_string(id) + " (worker rank"))
        << sched;
    EXPECT_EQ(id, started_id(rest.back().output)) << rest.back().output;
    EXPECT_TRUE(contains(rest.back().output, "job checked: 160 slots on each of 2 servers"))
        << rest.back().output;
    for (int s = 1; s <= 2; s++)
        EXPECT_TRUE(contains(rest[s].output, "160 slots right, 0 wrong; 160 applied"))
            << rest[s].output;
}

TEST(LateJoin, RestartedNodeWithTheJobSecretTakesOver)
{
    // Limit 60 s. The job has a secret: a worker restarted after kill -9
    // proves it on every connection, so it needs no PS_JOB_ID.
    Job job = store_job(2, 2, 60, 30, 30000);
    job.extra["PS_JOB_SECRET"] = "late-join-test-secret";
    Running r = start_job(job);
    ASSERT_TRUE(wait_for_output(r.by_name("worker1"), "round 10\n", std::chrono::seconds(30)))
        << read_file(r.by_name("worker1").out_path);
    Proc &victim = r.by_name("worker1");
    int id = started_id(read_file(victim.out_path));
    ASSERT_GT(id, 8);
    kill_proc(victim, SIGKILL);
    r.procs.push_back(spawn("worker1-new", role_env(r.job, r.base, "worker1", "worker")));
    std::vector<Proc> rest;
    for (auto &p : r.procs) {
        if (p.pid > 0)
            rest.push_back(p);
    }
    wait_all(rest, std::chrono::seconds(60));
    for (const auto &p : rest)
        EXPECT_EQ(0, p.exit_code) << dump(rest);
    EXPECT_TRUE(contains(rest[0].output, "took over node " + std::to_string(id))) << rest[0].output;
    EXPECT_TRUE(contains(rest.back().output, "job checked: 120 slots on each of 2 servers"))
        << rest.back().output;
    for (int s = 1; s <= 2; s++)
        EXPECT_TRUE(contains(rest[s].output, "120 slots right, 0 wrong; 120 applied"))
            << rest[s].output;
}

TEST(LateJoin, AStartThatTimesOutSaysTheSchedulerRefusedANode)
{
    // The job was given a job id; the only worker that comes carries
    // another job's. It is refused at once; the server, still waiting for
    // a worker, hears at the time-out that the scheduler refused one.
    Job job{1, 1};
    job.extra["PS_JOB_ID"] = "job-alpha";
    job.extra["PS_START_TIMEOUT_MS"] = "4000";
    job.per["worker0"]["PS_JOB_ID"] = "job-beta";
    auto procs = run_job(job, std::chrono::seconds(40));
    for (const auto &p : procs)
        EXPECT_EQ(1, p.exit_code) << dump(procs);
    EXPECT_TRUE(contains(procs[2].output, "failed: PS_ERR_CONFIG")) << procs[2].output;
    EXPECT_TRUE(contains(procs[2].output, "PS_JOB_ID=job-beta is not this job's (job-alpha)"))
        << procs[2].output;
    EXPECT_TRUE(contains(procs[1].output, "failed: PS_ERR_TIMED_OUT")) << procs[1].output;
    EXPECT_TRUE(contains(procs[1].output, "the scheduler refused 1 registration meanwhile"))
        << procs[1].output;
}

TEST(Fault, KilledServerEndsEveryWaitWithPeerGone)
{
    // Limit 30 s. A server killed -9 mid-job, nobody replaces it: workers'
    // requests to it, and every barrier, end with PS_ERR_PEER_GONE.
    Running r = start_job(store_job(2, 2, 100000, 20, 0));
    ASSERT_TRUE(wait_for_output(r.by_name("worker0"), "round 10\n", std::chrono::seconds(30)));
    double fault = kill_proc(r.by_name("server1"), SIGKILL);
    int id = started_id(r.by_name("server1").output);
    ASSERT_GE(id, 8);
    std::vector<Proc> rest;
    for (auto &p : r.procs) {
        if (p.pid > 0)
            rest.push_back(p);
    }
    double secs = wait_all(rest, std::chrono::seconds(30));
    for (const auto &p : rest) {
        EXPECT_EQ(1, p.exit_code) << dump(rest);
        EXPECT_TRUE(contains(p.output, "failed: PS_ERR_PEER_GONE")) << dump(rest);
    }
    // Every worker had requests out to it, so each loses its connection at
    // once. (The scheduler may see a worker leave on that error before it
    // sees the server's connection close, and end first: the detection
    // that is sure to happen is the workers'.)
    std::string lost = "lost the connection to server " + std::to_string(id) + " (rank " +
                       std::to_string(id / 2 - 4) + ")";
    double detected = -1;
    for (const auto &p : rest) {
        if (p.name.rfind("worker", 0) != 0)
            continue;
        EXPECT_TRUE(contains(p.output, lost)) << p.name << ":\n" << p.output;
        double t = log_time(p.output, lost);
        if (t >= 0 && (detected < 0 || t < detected))
            detected = t;
    }
    report("server killed -9", of_day(fault), detected, secs);
}

// After the scheduler is lost: servers (which wait only in barriers) learn
// it themselves; a worker may first see its servers leave. Every process
// ends with an error; returns the time of the first loss noticed.
double check_scheduler_lost(const std::vector<Proc> &rest, const std::string &why)
{
    double detected = -1;
    for (const auto &p : rest) {
        EXPECT_EQ(1, p.exit_code) << dump(rest);
        EXPECT_TRUE(contains(p.output, "failed: PS_ERR_PEER_GONE") ||
                    contains(p.output, "failed: PS_ERR_LINK_FAILED"))
            << dump(rest);
        if (p.name.rfind("server", 0) == 0) {
            EXPECT_TRUE(contains(p.output, "lost the scheduler (" + why)) << dump(rest);
        }
        double t = log_time(p.output, "lost the scheduler");
        if (t >= 0 && (detected < 0 || t < detected))
            detected = t;
    }
    return detected;
}

TEST(Fault, KilledSchedulerEndsEveryWaitWithPeerGone)
{
    // Limit 30 s. The scheduler killed -9 mid-job: every node's waits end.
    Running r = start_job(store_job(2, 2, 100000, 20, 30000));
    ASSERT_TRUE(wait_for_output(r.by_name("worker0"), "round 10\n", std::chrono::seconds(30)));
    double fault = kill_proc(r.procs[0], SIGKILL);
    std::vector<Proc> rest(r.procs.begin() + 1, r.procs.end());
    double secs = wait_all(rest, std::chrono::seconds(30));
    double detected = check_scheduler_lost(rest, "connection failed");
    report("scheduler killed -9", of_day(fault), detected, secs);
}

TEST(Fault, HungSchedulerIsDetectedByHeartbeats)
{
    // Limit 30 s. The scheduler stops (SIGSTOP: its connections stay open);
    // with heartbeats every 1 s and a 3 s timeout every node gives it up.
    Job job = store_job(1, 2, 100000, 20, 30000);
    job.extra["PS_HEARTBEAT_INTERVAL"] = "1";
    job.extra["PS_HEARTBEAT_TIMEOUT"] = "3";
    Running r = start_job(job);
    ASSERT_TRUE(wait_for_output(r.by_name("worker0"), "round 10\n", std::chrono::seconds(30)));
    double fault = kill_proc(r.procs[0], SIGSTOP);
    std::vector<Proc> rest(r.procs.begin() + 1, r.procs.end());
    double secs = wait_all(rest, std::chrono::seconds(30));
    kill_proc(r.procs[0], SIGKILL);
    double detected = check_scheduler_lost(rest, "no message from it for more than 3 s");
    report("scheduler stopped (heartbeat 1 s, timeout 3 s)", of_day(fault), detected, secs);
}

TEST(Fault, HungServerFailsRequestsAfterTheHeartbeatTimeout)
{
    // Limit 30 s. A server stops (SIGSTOP: its connections stay open, so
    // only its silence tells): once the scheduler declares it dead (3 s),
    // requests waiting for it end with PS_ERR_PEER_GONE, and so does the job.
    Job job = store_job(2, 2, 100000, 20, 0);
    job.extra["PS_HEARTBEAT_INTERVAL"] = "1";
    job.extra["PS_HEARTBEAT_TIMEOUT"] = "3";
    Running r = start_job(job);
    ASSERT_TRUE(wait_for_output(r.by_name("worker0"), "round 10\n", std::chrono::seconds(30)));
    double fault = kill_proc(r.by_name("server1"), SIGSTOP);
    int id = started_id(read_file(r.by_name("server1").out_path));
    ASSERT_GE(id, 8);
    std::vector<Proc> rest;
    for (auto &p : r.procs) {
        if (p.name != "server1")
            rest.push_back(p);
    }
    double secs = wait_all(rest, std::chrono::seconds(30));
    kill_proc(r.by_name("server1"), SIGKILL);
    for (const auto &p : rest) {
        EXPECT_EQ(1, p.exit_code) << dump(rest);
        EXPECT_TRUE(contains(p.output, "failed: PS_ERR_PEER_GONE")) << dump(rest);
    }
    std::string who = "server " + std::to_string(id) + " (rank " + std::to_string(id / 2 - 4) + ")";
    EXPECT_TRUE(contains(rest[0].output, who + " is dead: no heartbeat for")) << rest[0].output;
    report("server stopped (heartbeat 1 s, timeout 3 s)", of_day(fault),
           log_time(rest[0].output, ") is dead: "), secs);
}

TEST(Fault, HungWorkerIsDeclaredDeadReplacedAndFenced)
{
    // Limit 60 s. A worker stops (SIGSTOP) and a new worker process starts
    // at once: it waits until the scheduler declares the silent one dead
    // (heartbeat timeout 3 s), takes its id over, and the job finishes.
    // The old process, continued, finds itself cut off and fails.
    Job job = store_job(2, 2, 60, 30, 30000);
    job.extra["PS_HEARTBEAT_INTERVAL"] = "1";
    job.extra["PS_HEARTBEAT_TIMEOUT"] = "3";
    Running r = start_job(job);
    ASSERT_TRUE(wait_for_output(r.by_name("worker1"), "round 10\n", std::chrono::seconds(30)));
    double fault = kill_proc(r.by_name("worker1"), SIGSTOP);
    std::vector<Proc> old = {r.by_name("worker1")};
    int id = started_id(read_file(old[0].out_path));
    ASSERT_GT(id, 8);
    std::string who = "worker " + std::to_string(id) + " (rank " + std::to_string(id / 2 - 4) + ")";
    Env fresh_env = role_env(r.job, r.base, "worker1", "worker");
    fresh_env["PS_JOB_ID"] = started_job(read_file(old[0].out_path));
    r.procs.push_back(spawn("worker1-new", fresh_env));
    std::vector<Proc> rest;
    for (auto &p : r.procs) {
        if (p.name != "worker1")
            rest.push_back(p);
    }
    double secs = wait_all(rest, std::chrono::seconds(60));
    kill(old[0].pid, SIGCONT);
    wait_all(old, std::chrono::seconds(30));
    for (const auto &p : rest)
        EXPECT_EQ(0, p.exit_code) << dump(rest);
    const std::string &sched = rest[0].output;
    EXPECT_TRUE(contains(sched, who + " is dead: no heartbeat for")) << sched;
    EXPECT_TRUE(contains(sched, "took over node " + std::to_string(id))) << sched;
    EXPECT_TRUE(contains(rest.back().output, "job checked: 120 slots")) << rest.back().output;
    EXPECT_EQ(1, old[0].exit_code) << old[0].output;
    EXPECT_TRUE(contains(old[0].output, "PS_ERR_PEER_GONE")) << old[0].output;
    report("worker stopped (heartbeat 1 s, timeout 3 s), replaced", of_day(fault),
           log_time(sched, ") is dead: "), secs);
}

TEST(Cluster, UnknownVanIsAClearError)
{
    std::vector<Proc> procs;
    Env env = {{"DMLC_ROLE", "worker"},       {"DMLC_PS_ROOT_URI", "127.0.0.1"},
               {"DMLC_PS_ROOT_PORT", "9"},    {"DMLC_NUM_SERVER", "1"},
               {"DMLC_NUM_WORKER", "1"},      {"DMLC_PS_VAN_TYPE", "nosuchvan"}};
    procs.push_back(spawn("worker", env));
    Env env2 = env;
    env2["DMLC_ROLE"] = "scheduler";
    env2.erase("DMLC_PS_VAN_TYPE");
    env2["DMLC_ENABLE_RDMA"] = "nosuchvan";
    procs.push_back(spawn("scheduler", env2));
    double secs = wait_all(procs, std::chrono::seconds(10));
    for (const auto &p : procs) {
        EXPECT_EQ(1, p.exit_code) << dump(procs);
        EXPECT_TRUE(contains(p.output, "nosuchvan")) << dump(procs);
        // The vans linked into po_node, in name order.
        EXPECT_TRUE(contains(p.output, "available: ipc (also mixed), shm, tcp (also zmq,0)"))
            << dump(procs);
        EXPECT_TRUE(contains(p.output, "PS_ERR_NOT_FOUND")) << dump(procs);
    }
    EXPECT_LT(secs, 5.0);
}

TEST(Cluster, MissingRoleIsAClearError)
{
    std::vector<Proc> procs;
    procs.push_back(spawn("worker", {{"DMLC_PS_ROOT_URI", "127.0.0.1"}}));
    Env env = {{"DMLC_ROLE", "worker"}, {"DMLC_PS_ROOT_URI", "127.0.0.1"},
               {"DMLC_NUM_SERVER", "1"}, {"DMLC_NUM_WORKER", "1"}};
    procs.push_back(spawn("noport", env));
    wait_all(procs, std::chrono::seconds(10));
    EXPECT_EQ(1, procs[0].exit_code);
    EXPECT_TRUE(contains(procs[0].output, "DMLC_ROLE is not set")) << dump(procs);
    EXPECT_TRUE(contains(procs[0].output, "PS_ERR_CONFIG")) << dump(procs);
    EXPECT_EQ(1, procs[1].exit_code);
    EXPECT_TRUE(contains(procs[1].output, "DMLC_PS_ROOT_PORT is not set")) << dump(procs);
}

TEST(Cluster, SchedulerPortTaken)
{
    // Something else holds the scheduler's port: a clear error, no hang.
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(0, bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)));
    ASSERT_EQ(0, listen(fd, 1));
    socklen_t len = sizeof(a);
    ASSERT_EQ(0, getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len));
    std::vector<Proc> procs;
    procs.push_back(spawn("scheduler", {{"DMLC_ROLE", "scheduler"},
                                        {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                        {"DMLC_PS_ROOT_PORT", std::to_string(ntohs(a.sin_port))},
                                        {"DMLC_NUM_SERVER", "1"},
                                        {"DMLC_NUM_WORKER", "1"}}));
    double secs = wait_all(procs, std::chrono::seconds(10));
    close(fd);
    EXPECT_EQ(1, procs[0].exit_code) << dump(procs);
    EXPECT_TRUE(contains(procs[0].output, "PS_ERR_ADDRESS_IN_USE")) << dump(procs);
    EXPECT_LT(secs, 5.0);
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s <po_node binary>\n", argv[0]);
        return 2;
    }
    g_po_node = argv[1];
    if (g_po_node[0] != '/') {
        char cwd[4096];
        if (getcwd(cwd, sizeof(cwd)) != nullptr)
            g_po_node = std::string(cwd) + "/" + g_po_node;
    }
    signal(SIGPIPE, SIG_IGN);
    return RUN_ALL_TESTS();
}

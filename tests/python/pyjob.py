"""Runs a ps job of Python processes on 127.0.0.1 for the pytest suites:
one scheduler, S servers and W workers as subprocesses, each in its own
process group, all bounded by one deadline (every process is killed when it
passes, and the job counts as failed)."""
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

PYTHON = os.environ.get("PS_PYTHON", "/usr/bin/python3")
FAIL_GRACE_S = 5


def free_port():
    """A loopback port the kernel says is free now (another program may take
    it before the scheduler binds; rare)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


class Job:
    def __init__(self, results, timed_out):
        self.results = results  # [(role, rank, returncode, output)]
        self.timed_out = timed_out

    def output(self, role=None, rank=None):
        return "\n".join(o for (r, k, _, o) in self.results
                         if (role is None or r == role) and (rank is None or k == rank))

    def check(self):
        """Asserts every process exited 0 within the deadline."""
        report = "\n".join("== %s %d exit %s\n%s" % (r, k, rc, o) for r, k, rc, o in self.results)
        assert not self.timed_out, "the job passed its deadline (a hang):\n" + report
        bad = [(r, k, rc) for r, k, rc, _ in self.results if rc != 0]
        assert not bad, "processes failed: %s\n%s" % (bad, report)
        return self


def van_env(van):
    """What selects the van for every process of a job."""
    if van == "tcp":
        return {}
    if van == "shm":
        return {"DMLC_PS_VAN_TYPE": "shm", "PS_JOB_ID": "pyjob-%d-%d" % (os.getpid(),
                                                                        random.randrange(1 << 30))}
    raise ValueError("unknown van %s" % van)


def run(worker_cmd, workers, servers, van="tcp", deadline_s=90, server_cmd=None,
        scheduler_cmd=None, env=None, group_size=1):
    """Runs the job; commands are argument lists (the role arrives as
    DMLC_ROLE). server_cmd defaults to worker_cmd, scheduler_cmd to
    `python3 -m ps.server` (which runs the job until the workers finalize).
    group_size > 1: workers and servers count groups of that many
    instances, a process each (DMLC_NODE_RANK, DMLC_INSTANCE_ID); ranks in
    the results count instances."""
    server_cmd = server_cmd or worker_cmd
    scheduler_cmd = scheduler_cmd or sum_server_cmd()
    base = dict(os.environ)
    for k in list(base):
        if k.startswith("DMLC_") or k in ("PS_JOB_ID",):
            del base[k]
    base.update({
        "DMLC_NUM_WORKER": str(workers),
        "DMLC_NUM_SERVER": str(servers),
        "DMLC_PS_ROOT_URI": "127.0.0.1",
        "DMLC_PS_ROOT_PORT": str(free_port()),
        "DMLC_NODE_HOST": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
    })
    base.update(van_env(van))
    base.update(env or {})
    if group_size > 1:
        base["DMLC_GROUP_SIZE"] = str(group_size)
    plan = [("scheduler", 0, scheduler_cmd)]
    plan += [("server", i, server_cmd) for i in range(servers * group_size)]
    plan += [("worker", i, worker_cmd) for i in range(workers * group_size)]
    tmp = tempfile.mkdtemp(prefix="pyjob.", dir=os.environ.get("TEST_TMPDIR"))
    procs = []
    for role, rank, cmd in plan:
        penv = dict(base, DMLC_ROLE=role)
        if role != "scheduler" and group_size > 1:
            penv["DMLC_NODE_RANK"] = str(rank // group_size)
            penv["DMLC_INSTANCE_ID"] = str(rank % group_size)
        elif role != "scheduler":
            penv["DMLC_RANK"] = str(rank)
        out = open(os.path.join(tmp, "%s.%d.log" % (role, rank)), "w+")
        p = subprocess.Popen(cmd, env=penv, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        procs.append((role, rank, p, out))
    end = time.monotonic() + deadline_s
    timed_out = False
    failed_at = None
    # Wait for all; once one failed, the others get FAIL_GRACE_S to end by
    # themselves (a peer's failure makes theirs end) before they are killed.
    while any(p.poll() is None for _, _, p, _ in procs):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for _, _, p, _ in procs):
            failed_at = now
        if now > end or (failed_at is not None and now > failed_at + FAIL_GRACE_S):
            timed_out = now > end
            for _, _, p, _ in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, 9)
                    except ProcessLookupError:
                        pass
                    p.wait()
            break
        time.sleep(0.05)
    results = []
    for role, rank, p, out in procs:
        out.seek(0)
        results.append((role, rank, p.returncode, out.read()))
        out.close()
    return Job(results, timed_out)


def node_cmd(script, *args):
    """A Python node of a test: tests/python/<script> with args."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [PYTHON, os.path.join(here, script)] + [str(a) for a in args]


def sum_server_cmd():
    return [PYTHON, "-m", "ps.server"]



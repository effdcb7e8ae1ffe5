#!/usr/bin/env python3
"""Drives a small summation job (sum_node) on 127.0.0.1 and attacks it.

  job_driver.py MODE VAN SUM_NODE RAW_CLIENT

MODE
  hostile         raw_client sends garbage, truncated frames, huge lengths,
                  a wrong version, undecodable metas and hellos claiming a
                  running node's id to the scheduler's, a server's and a
                  worker's port while the job runs (TCP van).
  hostile-secret  the same against a job with a PS_JOB_SECRET.
  strangers       a job with a PS_JOB_SECRET on VAN (the workers read it
                  from PS_JOB_SECRET_FILE); while it runs, a worker with a
                  wrong secret and one with none try to join, and one whose
                  secret file others may read fails to start.

Every case: each attacked connection is closed (raw_client says so within
10 s) with a log line on the attacked node; strangers fail to start with
PS_ERR_AUTH and a clear line on both sides and are in nobody's node table;
the job finishes, every process exits 0 and every worker checked every sum.
Deadline: JOB_DEADLINE_S (90 s) for the whole job; the test fails after it.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

JOB_DEADLINE_S = 90
SECRET = "correct horse battery staple"

# case -> what the attacked node logs when it closes the connection.
# (Lines of one kind are counted: one per attacked connection.)
HOSTILE_CASES = {
    "garbage": r"bad frame header from \S+ \(protocol error\)",
    "truncated": r"connection from \S+ closed in the middle of a frame",
    "huge": r"bad frame header from \S+ \(too large\)",
    "hugemeta": r"bad frame header from \S+ \(too large\)",
    "segments": r"bad frame header from \S+ \(too large\)",
    "version": r"bad frame header from \S+ \(protocol error\)",
    "badmeta": r"undecodable meta",
    "hellover": r"first frame from .* is not a hello",
    "claim": r"claims node id \d+, which it may not",
}
REFUSED_LINE = r"refused connection from 127\.0\.0\.1:\d+: it does not hold the job secret"
CLAIM_LINE = HOSTILE_CASES["claim"]
WRONG_SECRET = "not the secret"
# With a secret: (case, the secret raw_client proves, the line it gets).
SECRET_CASES = [
    ("secret-as", WRONG_SECRET, REFUSED_LINE),     # wrong secret: refused at the proof
    ("secret-empty", WRONG_SECRET, REFUSED_LINE),
    ("secret-as", SECRET, CLAIM_LINE),             # right secret, a running node's id
    ("secret-empty", SECRET, CLAIM_LINE),          # unassigned, then a running node's id
    ("secret-switch", SECRET, CLAIM_LINE),         # proved as 1001, hello as another id
]


_handed_out = set()


def skip(why):
    """Says why and leaves the marker tools/test.sh counts as skipped."""
    print("SKIPPED: " + why)
    out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if out:
        with open(os.path.join(out, "PS_TEST_SKIPPED"), "w") as f:
            f.write(why + "\n")


def rdma_host(test_env):
    """The address of an RDMA interface, as the rdma_test_env program at
    `test_env` names it; None (the skip marker left) when there is none."""
    verdict = subprocess.run([test_env], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    if verdict.startswith("SKIP "):
        skip(verdict[len("SKIP "):])
        return None
    if not verdict.startswith("HOST "):
        raise SystemExit("FAILED: rdma_test_env said: " + verdict)
    host = verdict[len("HOST "):]
    print("== RDMA interface address " + host)
    global RDMA_HOST
    RDMA_HOST = host
    return host


# The RDMA interface's address once rdma_host() found it: where an
# "ibverbs" job lives (van_env).
RDMA_HOST = None


def free_port():
    # A port the kernel says is free now, and never one handed out before:
    # the shm van listens by name (host:port), not on the TCP port, so the
    # kernel may offer a port again that a node of this job already uses.
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def van_env(van):
    if van == "tcp":
        return {"DMLC_PS_VAN_TYPE": "tcp"}
    if van == "shm":
        return {"DMLC_ENABLE_RDMA": "shm"}
    if van == "fabric":
        return {"DMLC_ENABLE_RDMA": "fabric", "FI_PROVIDER": "tcp;ofi_rxm",
                "FI_TCP_IFACE": "lo"}
    if van == "ucx":
        return {"DMLC_ENABLE_UCX": "1", "UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}
    if van == "ibverbs":
        if RDMA_HOST is None:
            raise SystemExit("an ibverbs job needs rdma_host() first")
        # Applied after the 127.0.0.1 defaults: the job lives on the RDMA
        # interface. Few receive buffers: every process pins its own.
        return {"DMLC_ENABLE_RDMA": "ibverbs", "DMLC_PS_ROOT_URI": RDMA_HOST,
                "DMLC_NODE_HOST": RDMA_HOST, "BYTEPS_RDMA_RX_DEPTH": "256"}
    raise SystemExit("unknown van " + van)


class Job:
    def __init__(self, sum_node, van, env_extra):
        self.sum_node = sum_node
        self.dir = tempfile.mkdtemp(prefix="hostile.", dir=os.environ.get("TEST_TMPDIR"))
        self.base = dict(os.environ)
        for k in list(self.base):
            if k.startswith("DMLC_") or k.startswith("PS_") or k.startswith("SN_"):
                del self.base[k]
        self.base.update({
            "DMLC_PS_ROOT_URI": "127.0.0.1",
            "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NODE_HOST": "127.0.0.1",
            "DMLC_NUM_WORKER": "2",
            "DMLC_NUM_SERVER": "2",
            "SN_ROUNDS": "80",
            "SN_ROUND_MS": "50",
        })
        self.base.update(van_env(van))
        self.base.update(env_extra)
        self.procs = {}

    def spawn(self, name, role, port=None, env=None):
        e = dict(self.base)
        e["DMLC_ROLE"] = role
        if port is not None:
            e["DMLC_PORT"] = str(port)
        if env:
            for k, v in env.items():
                if v is None:
                    e.pop(k, None)
                else:
                    e[k] = v
        path = os.path.join(self.dir, name + ".log")
        out = open(path, "w")
        p = subprocess.Popen([self.sum_node], env=e, stdout=out, stderr=subprocess.STDOUT)
        self.procs[name] = (p, path)
        return p

    def log(self, name):
        with open(self.procs[name][1], errors="replace") as f:
            return f.read()

    def wait_for(self, name, pattern, deadline):
        while time.time() < deadline:
            if re.search(pattern, self.log(name)):
                return True
            if self.procs[name][0].poll() is not None:
                return bool(re.search(pattern, self.log(name)))
            time.sleep(0.05)
        return False

    def finish(self, names, deadline):
        codes = {}
        for n in names:
            p = self.procs[n][0]
            try:
                codes[n] = p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                codes[n] = "killed at the deadline"
        return codes

    def kill_all(self):
        for p, _ in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def main():
    mode, van, sum_node, raw_client = sys.argv[1:5]
    t0 = time.time()
    deadline = t0 + JOB_DEADLINE_S
    secret = mode in ("hostile-secret", "strangers")
    job = Job(sum_node, van, {"PS_JOB_SECRET": SECRET} if secret else {})
    errors = []
    ports = {"scheduler": int(job.base["DMLC_PS_ROOT_PORT"])}
    job.spawn("scheduler", "scheduler")
    file_env = None
    if mode == "strangers":
        # The workers read the secret from a file (0600, trailing newline).
        path = os.path.join(job.dir, "secret")
        with open(path, "w") as f:
            f.write(SECRET + "\n")
        os.chmod(path, 0o600)
        file_env = {"PS_JOB_SECRET": None, "PS_JOB_SECRET_FILE": path}
    for name, role in (("server0", "server"), ("server1", "server"),
                       ("worker0", "worker"), ("worker1", "worker")):
        ports[name] = free_port()
        job.spawn(name, role, ports[name], file_env if role == "worker" else None)
    try:
        for w in ("worker0", "worker1"):
            if not job.wait_for(w, r"sum_node: worker \d+ started", deadline):
                errors.append(w + " did not start")
        ids = {}
        for n in ports:
            m = re.search(r"sum_node: \w+ (\d+) started", job.log(n))
            ids[n] = int(m.group(1)) if m else -1
        print("job started in %.1f s; ids %s" % (time.time() - t0, ids))

        if mode.startswith("hostile"):
            a_worker, a_server = ids["worker0"], ids["server0"]
            # (case, secret raw_client uses, the line the target must log)
            cases = []
            for case, pat in HOSTILE_CASES.items():
                # With a secret, a frame that decodes is refused as not
                # being the handshake.
                want = REFUSED_LINE if secret and case in ("hellover", "claim") else pat
                cases.append((case, "", want))
            if secret:
                cases += SECRET_CASES
            for target in ("scheduler", "server0", "worker0"):
                for case, rc_secret, _ in cases:
                    # A hello claiming a node that runs and is connected to
                    # the target: a worker to the scheduler and servers, a
                    # server to a worker; the push goes to server0.
                    claim = a_server if target == "worker0" else a_worker
                    env = dict(os.environ, RC_SECRET=rc_secret)
                    r = subprocess.run([raw_client, "127.0.0.1", str(ports[target]), case,
                                        str(claim), str(a_server)], env=env,
                                       capture_output=True, text=True, timeout=30)
                    line = " / ".join((r.stdout + r.stderr).strip().splitlines())
                    print("%-9s %-13s %-5s %s" % (target, case, "right" if rc_secret == SECRET
                                                   else "wrong" if rc_secret else "", line))
                    if r.returncode != 0:
                        errors.append("%s/%s: connection not closed (%s)" % (target, case, line))
            time.sleep(0.3)  # the log lines of the last cases
            # One line per attacked connection: count each kind.
            want_counts = {}
            for _, _, want in cases:
                want_counts[want] = want_counts.get(want, 0) + 1
            for target in ("scheduler", "server0", "worker0"):
                text = job.log(target)
                for want, n in want_counts.items():
                    got = len(re.findall(want, text))
                    if got != n:
                        errors.append("%s: %d log lines /%s/, want %d" % (target, got, want, n))

        if mode == "strangers":
            job.spawn("stranger_wrong", "worker", free_port(), {"PS_JOB_SECRET": WRONG_SECRET})
            job.spawn("stranger_none", "worker", free_port(), {"PS_JOB_SECRET": None})
            # The right secret in a file others may read: refused locally.
            loose = os.path.join(job.dir, "secret.loose")
            with open(loose, "w") as f:
                f.write(SECRET + "\n")
            os.chmod(loose, 0o644)
            job.spawn("stranger_loose", "worker", free_port(),
                      {"PS_JOB_SECRET": None, "PS_JOB_SECRET_FILE": loose})
            codes = job.finish(["stranger_wrong", "stranger_none", "stranger_loose"],
                               min(deadline, time.time() + 30))
            text = job.log("stranger_loose")
            print("== stranger_loose (exit %s)\n%s" % (codes["stranger_loose"], text))
            if codes["stranger_loose"] != 1 or "start failed: PS_ERR_AUTH" not in text or \
                    "readable or writable by others" not in text:
                errors.append("stranger_loose: a world-readable secret file was not refused")
            for s in ("stranger_wrong", "stranger_none"):
                text = job.log(s)
                print("== %s (exit %s)\n%s" % (s, codes[s], text))
                if codes[s] != 1 or "start failed: PS_ERR_AUTH" not in text:
                    errors.append("%s: expected start to fail with PS_ERR_AUTH (exit %s)" % (s, codes[s]))
                if not re.search(r"refused us: wrong or missing PS_JOB_SECRET", text):
                    errors.append("%s: no 'refused us' line" % s)
            n_refused = len(re.findall(r"refused connection from .*job secret", job.log("scheduler")))
            if n_refused < 2:
                errors.append("scheduler logged %d refusals, want 2" % n_refused)

        names = ["scheduler", "server0", "server1", "worker0", "worker1"]
        codes = job.finish(names, deadline)
        print("job ended after %.1f s (deadline %d s)" % (time.time() - t0, JOB_DEADLINE_S))
        for n in names:
            text = job.log(n)
            if codes[n] != 0 or not re.search(r"sum_node: \w+ ok", text):
                errors.append("%s exited %s" % (n, codes[n]))
                print("== %s\n%s" % (n, text[-4000:]))
            if n.startswith("worker"):
                if "every sum right" not in text:
                    errors.append(n + ": sums not verified")
                # Nobody else joined: the node table has the 2+2 nodes.
                if not re.search(r"table: 2 workers, 2 servers", text):
                    errors.append(n + ": node table is not 2 workers, 2 servers")
    finally:
        job.kill_all()
    if errors:
        print("FAILED:\n  " + "\n  ".join(errors))
        return 1
    print("PASSED (%s, van %s) in %.1f s" % (mode, van, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())

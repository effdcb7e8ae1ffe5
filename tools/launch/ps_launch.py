#!/usr/bin/env python3
"""ps_launch: start a ps job (one scheduler, S servers, W workers).

Three modes:

  local (default)   every process on this machine:
                      ps_launch -s 2 -w 2 [--timeout 60] -- prog args...
  --hostfile FILE   processes on the hosts named in FILE, started over ssh
                    (`ssh HOST 'cd DIR && exec env DMLC_...=... prog args'`).
                    FILE has one `host [role]` per line (role: scheduler,
                    server or worker; `#` starts a comment). The scheduler
                    runs on the host marked `scheduler`, else on the first
                    host. Server i runs on the i-th host marked `server`
                    (cycling), worker i likewise; when no host carries a
                    role, every host takes servers and workers in turn.
                    DMLC_PS_ROOT_URI is the scheduler's host; a host given
                    as an IP address is also DMLC_NODE_HOST of the
                    processes there. The port is --port, or one free here.
                    Killing ssh stops a remote process only if it dies with
                    the connection: `--ssh-opt=-tt` gives it a remote tty.
  --slurm           run under `srun`: one ps_launch per Slurm task, each
                    starting one process, e.g.
                      srun -N 3 -n 5 ps_launch --slurm -s 2 -- prog args
                    Task 0 is the scheduler, tasks 1..S the servers
                    (rank = task - 1), tasks S+1..S+W the workers
                    (rank = task - 1 - S). DMLC_PS_ROOT_URI is the
                    first node of SLURM_NODELIST (where srun puts task 0),
                    DMLC_PS_ROOT_PORT is --port or 20000 + SLURM_JOB_ID %
                    30000, so every task computes the same values alone.
                    S and W default to what -s/-w leave of SLURM_NTASKS.

Every process gets DMLC_ROLE, DMLC_NUM_SERVER, DMLC_NUM_WORKER,
DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_RANK (servers and workers: their
rank, unless --no-rank), DMLC_NODE_HOST (local mode: --host), --van as
DMLC_PS_VAN_TYPE (an inherited DMLC_ENABLE_RDMA is dropped), then --env and
--role-env, which win.

Instance groups (local mode): --group-size G starts G processes per server
and per worker group, StepMesh's way (a process per GPU): every process
gets DMLC_GROUP_SIZE=G, and each server or worker DMLC_INSTANCE_ID (its
instance) and DMLC_NODE_RANK (its group, unless --no-rank) instead of
DMLC_RANK. A program that runs a whole group itself
(ps_postoffice_start_group) takes --env DMLC_GROUP_SIZE=G instead.

Every line a process prints is prefixed with its role and rank
(`[worker 1] ...`), stdout to stdout and stderr to stderr. When any process
fails, or the time limit passes, or ps_launch itself is interrupted, every
process (and the process group it started) is stopped: SIGTERM, then
SIGKILL after --kill-grace seconds. ps_launch says why on stderr and exits:

  0     every process exited 0
  N     the first process that failed exited with N (128+sig if killed)
  124   the time limit passed
  128+s ps_launch received signal s

Python 3 standard library only.
"""

import argparse
import ipaddress
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

EXIT_TIMEOUT = 124
ROLES = ("scheduler", "server", "worker")


class LaunchError(Exception):
    """A bad command line, host file or Slurm environment."""


# ---------------------------------------------------------------- pure parts


def parse_env_assignments(items):
    """['K=V', ...] -> dict; raises LaunchError on an item without '='."""
    out = {}
    for item in items or ():
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise LaunchError("--env wants KEY=VALUE, got %r" % item)
        out[key] = val
    return out


def parse_role_env(items):
    """['worker:K=V', ...] -> {role: {K: V}}."""
    out = {}
    for item in items or ():
        role, sep, assignment = item.partition(":")
        if not sep or role not in ROLES:
            raise LaunchError("--role-env wants ROLE:KEY=VALUE with ROLE one of %s, got %r"
                              % ("/".join(ROLES), item))
        out.setdefault(role, {}).update(parse_env_assignments([assignment]))
    return out


def van_env(van):
    """Environment that selects van `van` (None: leave the user's choice).

    Returns (set, unset): variables to set and inherited ones to drop, so a
    stray DMLC_ENABLE_RDMA in the caller's environment cannot override the
    explicit choice."""
    if not van:
        return {}, []
    if van == "ucx":
        return {"DMLC_ENABLE_UCX": "1", "DMLC_PS_VAN_TYPE": "ucx"}, ["DMLC_ENABLE_RDMA"]
    return {"DMLC_PS_VAN_TYPE": van}, ["DMLC_ENABLE_RDMA", "DMLC_ENABLE_UCX"]


def build_env(role, rank, num_servers, num_workers, root_uri, root_port,
              node_host=None, set_rank=True, van=None, extra=None, group_size=1):
    """The DMLC_* variables one process of the job needs (additions only).

    With group_size > 1, `rank` counts instances (group * group_size +
    instance) and the process gets StepMesh's group variables instead of
    DMLC_RANK. Returns (set, unset) like van_env. `extra` (the user's
    --env) wins."""
    if role not in ROLES:
        raise LaunchError("unknown role %r" % role)
    env = {
        "DMLC_ROLE": role,
        "DMLC_NUM_SERVER": str(num_servers),
        "DMLC_NUM_WORKER": str(num_workers),
        "DMLC_PS_ROOT_URI": str(root_uri),
        "DMLC_PS_ROOT_PORT": str(root_port),
    }
    if node_host:
        env["DMLC_NODE_HOST"] = node_host
    if group_size > 1:
        env["DMLC_GROUP_SIZE"] = str(group_size)
        if role != "scheduler":
            env["DMLC_INSTANCE_ID"] = str(rank % group_size)
            if set_rank:
                env["DMLC_NODE_RANK"] = str(rank // group_size)
    elif set_rank and role != "scheduler":
        env["DMLC_RANK"] = str(rank)
    vset, unset = van_env(van)
    env.update(vset)
    env.update(extra or {})
    unset = [k for k in unset if k not in env]
    return env, unset


def process_label(role, rank):
    return role if role == "scheduler" else "%s %d" % (role, rank)


def local_plan(num_servers, num_workers):
    """[(role, rank)] in start order: scheduler, servers, workers."""
    plan = [("scheduler", 0)]
    plan += [("server", r) for r in range(num_servers)]
    plan += [("worker", r) for r in range(num_workers)]
    return plan


def _split_top_level(text):
    """Splits at commas that are not inside [...]."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise LaunchError("unbalanced ']' in node list %r" % text)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise LaunchError("unbalanced '[' in node list %r" % text)
    parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts) if p]


def _expand_range_list(body, text):
    """'01-03,7' -> ['01', '02', '03', '7'] (zero padding kept)."""
    out = []
    for item in body.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise LaunchError("bad range %r in node list %r" % (item, text))
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise LaunchError("descending range %r in node list %r" % (item, text))
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def expand_nodelist(text):
    """Slurm's compressed host list -> host names, in order.

    'node[01-03],other' -> ['node01', 'node02', 'node03', 'other'];
    'r[1-2]-n[1,3]' -> ['r1-n1', 'r1-n3', 'r2-n1', 'r2-n3']."""
    hosts = []
    for part in _split_top_level(text):
        names = [""]
        pos = 0
        for m in re.finditer(r"\[([^\]]*)\]", part):
            prefix = part[pos:m.start()]
            choices = _expand_range_list(m.group(1), text)
            names = [n + prefix + c for n in names for c in choices]
            pos = m.end()
        names = [n + part[pos:] for n in names]
        hosts.extend(names)
    return hosts


def slurm_counts(ntasks, num_servers=None, num_workers=None):
    """(S, W) for a job of `ntasks` Slurm tasks (one is the scheduler)."""
    if ntasks < 3:
        raise LaunchError("a ps job needs at least 3 Slurm tasks (scheduler, server, "
                          "worker); SLURM_NTASKS is %d" % ntasks)
    if num_servers is None and num_workers is None:
        num_servers = (ntasks - 1) // 2
    if num_servers is None:
        num_servers = ntasks - 1 - num_workers
    if num_workers is None:
        num_workers = ntasks - 1 - num_servers
    if num_servers < 1 or num_workers < 1 or 1 + num_servers + num_workers != ntasks:
        raise LaunchError("SLURM_NTASKS %d does not fit 1 scheduler + %d servers + %d workers"
                          % (ntasks, num_servers, num_workers))
    return num_servers, num_workers


def slurm_role(procid, num_servers, num_workers):
    """Slurm task id -> (role, rank): 0 scheduler, then servers, then workers."""
    if procid == 0:
        return "scheduler", 0
    if procid <= num_servers:
        return "server", procid - 1
    if procid <= num_servers + num_workers:
        return "worker", procid - 1 - num_servers
    raise LaunchError("Slurm task %d is beyond the job's %d processes"
                      % (procid, 1 + num_servers + num_workers))


def slurm_port(job_id):
    """A port every task of job `job_id` picks alike without talking."""
    return 20000 + int(job_id) % 30000


def slurm_plan(environ, num_servers=None, num_workers=None, port=None):
    """From a Slurm task's environment: (role, rank, S, W, root_uri, port)."""
    def need(*names):
        for n in names:
            if environ.get(n, "") != "":
                return environ[n]
        raise LaunchError("--slurm needs %s in the environment (run under srun)" % names[0])

    try:
        procid = int(need("SLURM_PROCID"))
        ntasks = int(need("SLURM_NTASKS", "SLURM_NPROCS"))
    except ValueError as e:
        raise LaunchError("bad Slurm task numbers: %s" % e)
    nodes = expand_nodelist(need("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    if not nodes:
        raise LaunchError("SLURM_NODELIST names no node")
    s, w = slurm_counts(ntasks, num_servers, num_workers)
    role, rank = slurm_role(procid, s, w)
    if port is None:
        port = slurm_port(need("SLURM_JOB_ID", "SLURM_JOBID"))
    return role, rank, s, w, nodes[0], port


def parse_hostfile(text):
    """Host-file text -> [(host, role or None)]."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) > 2:
            raise LaunchError("host file line %d: want `host [role]`, got %r" % (lineno, line))
        role = fields[1] if len(fields) == 2 else None
        if role is not None and role not in ROLES:
            raise LaunchError("host file line %d: unknown role %r (scheduler, server, worker)"
                              % (lineno, role))
        entries.append((fields[0], role))
    if not entries:
        raise LaunchError("host file names no host")
    return entries


def host_of(entry_host):
    """'user@host' -> 'host' (what other processes connect to)."""
    return entry_host.rsplit("@", 1)[-1]


def ip_literal(host):
    """host if it is an IPv4/IPv6 address (a process there binds and
    advertises it), else None (the process picks by DMLC_INTERFACE)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def hostfile_plan(entries, num_servers, num_workers):
    """[(host, role|None)] -> [(role, rank, host)] in start order."""
    def hosts_for(role):
        marked = [h for h, r in entries if r == role]
        if marked:
            return marked
        free = [h for h, r in entries if r is None]
        if free:
            return free
        raise LaunchError("host file has no host for the %ss (mark one `%s` or leave one unmarked)"
                          % (role, role))

    sched = [h for h, r in entries if r == "scheduler"]
    if len(sched) > 1:
        raise LaunchError("host file marks %d schedulers; a job has one" % len(sched))
    plan = [("scheduler", 0, sched[0] if sched else entries[0][0])]
    servers = hosts_for("server") if num_servers else []
    workers = hosts_for("worker") if num_workers else []
    plan += [("server", r, servers[r % len(servers)]) for r in range(num_servers)]
    plan += [("worker", r, workers[r % len(workers)]) for r in range(num_workers)]
    return plan


def ssh_argv(ssh, ssh_opts, host, env, unset, cwd, argv):
    """argv that runs `argv` on `host` with `env` added, from `cwd`."""
    words = []
    if cwd:
        words += ["cd", shlex.quote(cwd), "&&"]
    words += ["exec", "env"]
    for key in unset:
        words += ["-u", shlex.quote(key)]
    words += [shlex.quote("%s=%s" % kv) for kv in sorted(env.items())]
    words += [shlex.quote(a) for a in argv]
    return [ssh] + list(ssh_opts) + [host, " ".join(words)]


def find_free_port(host):
    """A port the kernel considers free on `host` (bind to 0, read, close)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def describe_exit(rc):
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "signal %d" % -rc
        return "killed by %s" % name
    return "exit code %d" % rc


def launcher_exit_code(rc):
    """A child's returncode -> the code ps_launch exits with."""
    if rc < 0:
        return 128 + (-rc)
    return rc if rc else 1


# ---------------------------------------------------------------- running


class Proc:
    def __init__(self, role, rank, argv, env):
        self.role, self.rank, self.argv, self.env = role, rank, argv, env
        self.label = process_label(role, rank)
        self.popen = None
        self.readers = []
        self.returncode = None


class Runner:
    """Starts processes, relays their output with prefixes, watches them."""

    def __init__(self, procs, timeout=None, kill_grace=3.0, quiet=False):
        self.procs = procs
        self.timeout = timeout
        self.kill_grace = kill_grace
        self.quiet = quiet
        self.events = queue.Queue()
        self.out_lock = threading.Lock()
        self.got_signal = None

    def say(self, msg):
        with self.out_lock:
            sys.stderr.write("[ps_launch] %s\n" % msg)
            sys.stderr.flush()

    def _relay(self, pipe, stream, prefix):
        pending = b""
        while True:
            chunk = pipe.read1(65536) if hasattr(pipe, "read1") else pipe.read(4096)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if lines:
                with self.out_lock:
                    for line in lines:
                        stream.write(prefix + line + b"\n")
                    stream.flush()
        if pending:
            with self.out_lock:
                stream.write(prefix + pending + b"\n")
                stream.flush()
        pipe.close()

    def _watch(self, proc):
        rc = proc.popen.wait()
        self.events.put((proc, rc))

    def _start(self, proc):
        proc.popen = subprocess.Popen(
            proc.argv, env=proc.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)
        prefix = ("[%s] " % proc.label).encode()
        for pipe, stream in ((proc.popen.stdout, sys.stdout.buffer),
                             (proc.popen.stderr, sys.stderr.buffer)):
            t = threading.Thread(target=self._relay, args=(pipe, stream, prefix), daemon=True)
            t.start()
            proc.readers.append(t)
        threading.Thread(target=self._watch, args=(proc,), daemon=True).start()

    def _signal_group(self, proc, sig):
        try:
            os.killpg(proc.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop_all(self):
        """SIGTERM every process group, SIGKILL what is left after the grace."""
        live = [p for p in self.procs if p.popen and p.popen.poll() is None]
        if live:
            self.say("stopping %s" % ", ".join(p.label for p in live))
        for p in self.procs:
            if p.popen:
                self._signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + self.kill_grace
        for p in live:
            try:
                p.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            if p.popen:
                # Also reaches what a process left behind in its group.
                self._signal_group(p, signal.SIGKILL)
                p.popen.wait()

    def _on_signal(self, signum, frame):
        # Only a flag: the main loop may hold the queue's lock right now.
        self.got_signal = signum

    def run(self):
        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                old[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread
                pass
        try:
            return self._run()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def _run(self):
        start = time.monotonic()
        code = 0
        try:
            for p in self.procs:
                try:
                    self._start(p)
                except OSError as e:
                    self.say("cannot start %s (%s): %s" % (p.label, p.argv[0], e))
                    code = 127
                    break
            running = {id(p) for p in self.procs if p.popen}
            while code == 0 and running:
                if self.got_signal:
                    self.say("received %s" % signal.Signals(self.got_signal).name)
                    code = 128 + self.got_signal
                    break
                wait = 0.2
                if self.timeout:
                    wait = self.timeout - (time.monotonic() - start)
                    if wait <= 0:
                        names = [p.label for p in self.procs if id(p) in running]
                        self.say("time limit of %g s passed; still running: %s"
                                 % (self.timeout, ", ".join(names)))
                        code = EXIT_TIMEOUT
                        break
                    wait = min(wait, 0.2)
                try:
                    proc, val = self.events.get(timeout=wait)
                except queue.Empty:
                    continue
                proc.returncode = val
                running.discard(id(proc))
                if val != 0:
                    self.say("%s failed: %s" % (proc.label, describe_exit(val)))
                    code = launcher_exit_code(val)
                elif not self.quiet:
                    self.say("%s finished" % proc.label)
        finally:
            self.stop_all()
            for p in self.procs:
                for t in p.readers:
                    t.join(5.0)
        if code == 0 and not self.quiet:
            self.say("all %d processes succeeded in %.1f s"
                     % (len(self.procs), time.monotonic() - start))
        return code


# ---------------------------------------------------------------- command line


def make_parser():
    ap = argparse.ArgumentParser(
        prog="ps_launch",
        usage="ps_launch -s S -w W [options] -- prog [args...]",
        description="Start a ps job: a scheduler, S servers and W workers.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-s", "--num-servers", type=int, default=None, help="servers (local/hostfile: 1)")
    ap.add_argument("-w", "--num-workers", type=int, default=None, help="workers (local/hostfile: 1)")
    ap.add_argument("--van", default=None,
                    help="van name (tcp, shm, ibverbs, fabric, ucx); default: the environment's choice")
    ap.add_argument("--timeout", type=float, default=None, help="time limit in seconds for the whole job")
    ap.add_argument("--kill-grace", type=float, default=3.0,
                    help="seconds between SIGTERM and SIGKILL when stopping (3)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="extra environment for every process (repeatable)")
    ap.add_argument("--role-env", action="append", default=[], metavar="ROLE:K=V",
                    help="extra environment for one role only, e.g. worker:PS_BUSY_POLL=1")
    ap.add_argument("--host", default="127.0.0.1",
                    help="local mode: address to bind and advertise (127.0.0.1, ::1, ...)")
    ap.add_argument("--port", type=int, default=None, help="scheduler port (default: a free one)")
    ap.add_argument("--scheduler-cmd", default=None,
                    help="command line of the scheduler (default: the program itself)")
    ap.add_argument("--no-rank", action="store_true",
                    help="do not pass DMLC_RANK: let the scheduler assign ranks")
    ap.add_argument("--group-size", type=int, default=1, metavar="G",
                    help="local mode: G processes (instances) per server and worker group")
    ap.add_argument("--hostfile", default=None, help="start processes over ssh on the hosts of FILE")
    ap.add_argument("--ssh", default=os.environ.get("PS_LAUNCH_SSH", "ssh"), help="ssh program")
    ap.add_argument("--ssh-opt", action="append", default=None, metavar="OPT",
                    help="ssh option (repeatable; default -o BatchMode=yes)")
    ap.add_argument("--remote-cwd", default=None,
                    help="hostfile mode: directory to run in (default: the current one)")
    ap.add_argument("--slurm", action="store_true", help="one process of a job started by srun")
    ap.add_argument("-q", "--quiet", action="store_true", help="only report failures")
    ap.add_argument("prog", nargs=argparse.REMAINDER, help="-- program and its arguments")
    return ap


def build_procs(args, environ):
    prog = list(args.prog)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if not prog:
        raise LaunchError("no program given (ps_launch ... -- prog args)")
    sched_argv = shlex.split(args.scheduler_cmd) if args.scheduler_cmd else prog
    common = parse_env_assignments(args.env)
    per_role = parse_role_env(args.role_env)

    def extra_for(role):
        env = dict(common)
        env.update(per_role.get(role, {}))
        return env

    def argv_for(role):
        return sched_argv if role == "scheduler" else prog

    def full_env(add, unset):
        env = dict(environ)
        for k in unset:
            env.pop(k, None)
        env.update(add)
        return env

    if args.slurm:
        role, rank, s, w, root, port = slurm_plan(environ, args.num_servers, args.num_workers,
                                                  args.port)
        add, unset = build_env(role, rank, s, w, root, port, set_rank=not args.no_rank,
                               van=args.van, extra=extra_for(role))
        return [Proc(role, rank, argv_for(role), full_env(add, unset))]

    s = 1 if args.num_servers is None else args.num_servers
    w = 1 if args.num_workers is None else args.num_workers
    if s < 1 or w < 1:
        raise LaunchError("a job needs at least one server and one worker")

    if args.hostfile:
        try:
            with open(args.hostfile) as f:
                entries = parse_hostfile(f.read())
        except OSError as e:
            raise LaunchError("cannot read host file: %s" % e)
        plan = hostfile_plan(entries, s, w)
        root = host_of(plan[0][2])
        # A guess: free here, where the scheduler often runs; --port to fix it.
        port = args.port or find_free_port("0.0.0.0")
        cwd = args.remote_cwd or os.getcwd()
        ssh_opts = args.ssh_opt if args.ssh_opt is not None else ["-o", "BatchMode=yes"]
        procs = []
        for role, rank, host in plan:
            add, unset = build_env(role, rank, s, w, root, port,
                                   node_host=ip_literal(host_of(host)),
                                   set_rank=not args.no_rank, van=args.van,
                                   extra=extra_for(role))
            argv = ssh_argv(args.ssh, ssh_opts, host, add, unset, cwd, argv_for(role))
            procs.append(Proc(role, rank, argv, dict(environ)))
        return procs

    g = args.group_size
    if g < 1:
        raise LaunchError("--group-size must be at least 1")
    port = args.port or find_free_port(args.host)
    procs = []
    for role, rank in local_plan(s * g, w * g):
        add, unset = build_env(role, rank, s, w, args.host, port, node_host=args.host,
                               set_rank=not args.no_rank, van=args.van, extra=extra_for(role),
                               group_size=g)
        procs.append(Proc(role, rank, argv_for(role), full_env(add, unset)))
    return procs


def main(argv=None):
    args = make_parser().parse_args(argv)
    # `bazel run` starts us in the runfiles tree; relative program paths
    # mean the caller's directory.
    if os.environ.get("BUILD_WORKING_DIRECTORY"):
        os.chdir(os.environ["BUILD_WORKING_DIRECTORY"])
    try:
        procs = build_procs(args, os.environ)
    except LaunchError as e:
        sys.stderr.write("ps_launch: %s\n" % e)
        return 2
    runner = Runner(procs, timeout=args.timeout, kill_grace=args.kill_grace, quiet=args.quiet)
    return runner.run()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Admission control under a flood, while a summation job (sum_node) runs.

  admission_test.py MODE VAN SUM_NODE RAW_CLIENT

MODE
  idle       2,000 connections that never speak and 200 that send half a
             hello, at server0's port, then the same at the scheduler's
             (VAN tcp, fabric (its TCP port), ucx (its handshake
             listener) or shm: shm floods the nodes' rendezvous sockets).
  halfframe  (tcp) 2,000 connections that send a valid frame header
             announcing a meta just under 1 MiB, part of it, and stall; then
             200 that send a valid hello first and then the same.
  emfile     (tcp, shm, fabric, ucx) server0 runs with RLIMIT_NOFILE 96; 600
             silent connections exhaust its descriptors.

Checks, per attacked process: its CPU (utime+stime from /proc over a window
of at least 2 s while the connections are held) stays under 10% of a core;
its RSS, and its data (VmData: memory allocated, touched or not, which is
where a buffer sized by an announced length shows), grow by less than
64 MiB; every connection that has not finished a
handshake is closed by the node within PS_HANDSHAKE_TIMEOUT_MS (3 s) plus
a margin (the client sees EOF or a reset). emfile: the listener does not
spin (CPU as above), says so once, and after the flood a new connection is
accepted again (it is closed at its handshake deadline). Every mode: the
job finishes, every process exits 0 and every worker checked every sum.
"""
import os
import re
import resource
import select
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_driver import Job, free_port, skip  # noqa: E402

HS_MS = 3000
MARGIN_S = 3.0
WINDOW_S = 2.0
CPU_MAX = 0.10
RSS_MAX = 64 << 20
# Set under --config=tsan / asan (the .bazelrc's test environment).
SANITIZER = "tsan" if "TSAN_OPTIONS" in os.environ else "asan" if "ASAN_OPTIONS" in os.environ else ""
N_IDLE = 2000
N_HALF = 200
EMFILE_NOFILE = 96
N_EMFILE = 600
DEADLINE_S = 60
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])  # utime, stime


def rss(pid):
    with open("/proc/%d/statm" % pid) as f:
        return int(f.read().split()[1]) * PAGE


def vm_data(pid):
    # Heap and anonymous mappings, touched or not: a buffer allocated at
    # an announced size shows here before its pages are written.
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def frame_header(meta_len):
    # "PSF1", version 1, flags 0, meta length, no data segments.
    return b"PSF1" + struct.pack("<HHIHH", 1, 0, meta_len, 0, 0)


def shm_name(pid, port):
    # The node's listening rendezvous socket: an abstract name ending in
    # ":PORT" (shm_job.c); /proc/net/unix lists it with a leading '@'.
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", link)
        if m:
            inodes.add(m.group(1))
    with open("/proc/net/unix") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[6] in inodes and parts[7].startswith("@ps-shm/") \
                    and parts[7].endswith(":%d" % port):
                return "\0" + parts[7][1:]
    return None


class Target:
    def __init__(self, van, name, pid, port):
        self.van, self.name, self.pid, self.port = van, name, pid, port
        self.addr = ("127.0.0.1", port)
        if van == "shm":
            self.addr = shm_name(pid, port)
            if self.addr is None:
                raise SystemExit("no rendezvous socket found for %s" % name)

    def connect(self):
        if self.van == "shm":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3.0)
        end = time.time() + 3.0
        while True:
            try:
                s.connect(self.addr)
                return s
            except BlockingIOError:
                # A unix socket's full backlog: no waiting in connect() for
                # a socket with a timeout; the node drains it soon.
                if time.time() < end:
                    time.sleep(0.002)
                    continue
            except OSError:
                pass
            s.close()
            return None


def send_quietly(s, data):
    try:
        s.sendall(data)
    except OSError:
        pass  # already closed by the node: counts as closed below


def watch(pid, socks, errors, what, max_close_s):
    """Measures CPU and RSS while `socks` are held, then waits until every
    socket has seen EOF or a reset (within max_close_s from now)."""
    t0 = time.time()
    c0 = cpu_ticks(pid)
    peak = (0, 0)
    while time.time() - t0 < WINDOW_S:
        peak = (max(peak[0], rss(pid)), max(peak[1], vm_data(pid)))
        time.sleep(0.1)
    cpu = (cpu_ticks(pid) - c0) / CLK / (time.time() - t0)
    if max_close_s is None:
        return cpu, peak
    open_ = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in open_:
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    end = t0 + max_close_s
    last = 0.0
    while open_ and time.time() < end:
        for fd, _ in poller.poll(100):
            s = open_.get(fd)
            if s is None:
                continue
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                poller.unregister(fd)
                del open_[fd]
                last = time.time() - t0
        peak = (max(peak[0], rss(pid)), max(peak[1], vm_data(pid)))
    print("%s: %d of %d connections closed by the node, the last %.1f s after the flood" %
          (what, len(socks) - len(open_), len(socks), last))
    if open_:
        errors.append("%s: %d of %d connections still open %.1f s after the flood" %
                      (what, len(open_), len(socks), max_close_s))
    return cpu, peak


def mem(pid):
    return (rss(pid), vm_data(pid))


def check(errors, what, cpu, base, peak, cpu_bound=True):
    print("%s: cpu %.1f%% of a core over %.1f s, rss %.1f -> %.1f MiB, data %.1f -> %.1f MiB" %
          (what, 100 * cpu, WINDOW_S, base[0] / 2**20, peak[0] / 2**20, base[1] / 2**20,
           peak[1] / 2**20))
    if not cpu_bound:
        print("%s: cpu bound not checked under %s" % (what, SANITIZER))
    elif cpu >= CPU_MAX:
        errors.append("%s: %.1f%% of a core while the connections were held" % (what, 100 * cpu))
    if SANITIZER:
        # A sanitizer's shadow memory and quarantine grow with every
        # allocation: the program's own growth cannot be told from it.
        print("%s: memory bound not checked under %s" % (what, SANITIZER))
        return
    for i, name in enumerate(("rss", "data (VmData)")):
        if peak[i] - base[i] >= RSS_MAX:
            errors.append("%s: %s grew by %.1f MiB" % (what, name, (peak[i] - base[i]) / 2**20))


def flood_idle(target, errors, half_hello):
    what = "%s idle+half-hello" % target.name
    base = mem(target.pid)
    socks = []
    for _ in range(N_IDLE):
        s = target.connect()
        if s is not None:
            socks.append(s)
    for _ in range(N_HALF):
        s = target.connect()
        if s is not None:
            send_quietly(s, half_hello)
            socks.append(s)
    if len(socks) < N_IDLE + N_HALF:
        errors.append("%s: only %d connections could be made" % (what, len(socks)))
    cpu, peak = watch(target.pid, socks, errors, what, HS_MS / 1000 + MARGIN_S)
    check(errors, what, cpu, base, peak)
    for s in socks:
        s.close()


def flood_halfframe(target, errors, hello):
    what = "%s half-frame" % target.name
    base = mem(target.pid)
    big = frame_header((1 << 20) - 64) + b"\x08" * 1000
    socks = []
    for _ in range(N_IDLE):
        s = target.connect()
        if s is not None:
            send_quietly(s, big)
            socks.append(s)
    cpu, peak = watch(target.pid, socks, errors, what, HS_MS / 1000 + MARGIN_S)
    check(errors, what, cpu, base, peak)
    for s in socks:
        s.close()
    # After a valid hello (no job secret: anyone may say hello) the
    # connection is admitted, and its big meta costs what it sent, not
    # what it announced. The node keeps these; we close them.
    what = "%s hello+half-frame" % target.name
    base = mem(target.pid)
    socks = []
    for _ in range(N_HALF):
        s = target.connect()
        if s is not None:
            send_quietly(s, hello + big)
            socks.append(s)
    cpu, peak = watch(target.pid, socks, errors, what, None)
    check(errors, what, cpu, base, peak)
    for s in socks:
        s.close()


def flood_emfile(target, errors, job):
    what = "%s emfile" % target.name
    base = mem(target.pid)
    socks = []
    for _ in range(N_EMFILE):
        s = target.connect()
        if s is not None:
            socks.append(s)
    time.sleep(0.3)
    cpu, peak = watch(target.pid, socks, errors, what, None)
    check(errors, what, cpu, base, peak)
    for s in socks:
        s.close()
    if not re.search(r"cannot accept connections: Too many open files", job.log(target.name)):
        errors.append("%s: no line about running out of descriptors" % what)
    # Recovered: a new connection is accepted (and dropped at its deadline).
    time.sleep(0.5)
    s = target.connect()
    if s is None:
        errors.append("%s: cannot connect after the flood" % what)
        return
    _, _ = watch(target.pid, [s], errors, what + " (after the flood)",
                 HS_MS / 1000 + MARGIN_S)
    s.close()


def end_job(job, errors, t0, deadline, until_file=None):
    """After the attacks: the job was still running (the workers had not
    finished), then every node exits 0 and every worker checked every sum.
    With `until_file` (SN_UNTIL_FILE) the workers are told to stop."""
    print("attacks done after %.1f s" % (time.time() - t0))
    for w in ("worker0", "worker1"):
        if re.search(r"sum_node: worker ok", job.log(w)):
            errors.append(w + " finished before the attacks did: the job was not running")
    if until_file is not None:
        open(until_file, "w").close()
    names = ["scheduler", "server0", "server1", "worker0", "worker1"]
    codes = job.finish(names, deadline)
    print("job ended after %.1f s" % (time.time() - t0))
    for n in names:
        text = job.log(n)
        if codes[n] != 0 or not re.search(r"sum_node: \w+ ok", text):
            errors.append("%s exited %s" % (n, codes[n]))
            print("== %s\n%s" % (n, text[-3000:]))
        if n.startswith("worker") and "every sum right" not in text:
            errors.append(n + ": sums not verified")


def main():
    mode, van, sum_node, raw_client = sys.argv[1:5]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = N_IDLE + N_HALF + 200
    if hard != resource.RLIM_INFINITY and hard < need:
        skip("RLIMIT_NOFILE hard limit %d < %d sockets" % (hard, need))
        return 0
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    t0 = time.time()
    deadline = t0 + DEADLINE_S
    job = Job(sum_node, van, {"PS_HANDSHAKE_TIMEOUT_MS": str(HS_MS), "SN_ROUNDS": "240",
                              "SN_ROUND_MS": "50"})
    errors = []
    ports = {"scheduler": int(job.base["DMLC_PS_ROOT_PORT"])}
    procs = {"scheduler": job.spawn("scheduler", "scheduler")}
    for name, role in (("server0", "server"), ("server1", "server"),
                       ("worker0", "worker"), ("worker1", "worker")):
        ports[name] = free_port()
        if mode == "emfile" and name == "server0":
            # The child inherits a low descriptor limit.
            resource.setrlimit(resource.RLIMIT_NOFILE, (EMFILE_NOFILE, hard))
            procs[name] = job.spawn(name, role, ports[name])
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        else:
            procs[name] = job.spawn(name, role, ports[name])
    hello = bytes.fromhex(subprocess.run([raw_client, "-", "0", "hello-hex", "32767"],
                                         capture_output=True, text=True,
                                         check=True).stdout.strip())
    if van in ("tcp", "fabric"):
        half_hello = hello[:len(hello) // 2]
    elif van == "ucx":
        # A HELLO record (ps/rdma/ucx/ucx_hs.c) announcing a 600-byte worker
        # address, cut short 100 bytes into it.
        half_hello = (struct.pack("<I", 32 + 4 + 600) + b"PSUX" + bytes([3, 1, 0, 0]) +
                      bytes(24) + struct.pack("<HH", 600, 0) + bytes(100))
    else:
        half_hello = b"\x01\x00"
    try:
        for w in ("worker0", "worker1"):
            if not job.wait_for(w, r"sum_node: worker \d+ started", deadline):
                errors.append(w + " did not start")
        print("job started in %.1f s" % (time.time() - t0))
        targets = ["server0", "scheduler"] if mode != "emfile" else ["server0"]
        for name in targets:
            t = Target(van, name, procs[name].pid, ports[name])
            if mode == "idle":
                flood_idle(t, errors, half_hello)
            elif mode == "halfframe":
                flood_halfframe(t, errors, hello)
            elif mode == "emfile":
                flood_emfile(t, errors, job)
            else:
                raise SystemExit("unknown mode " + mode)
        end_job(job, errors, t0, deadline)
    finally:
        job.kill_all()
    if errors:
        print("FAILED:\n  " + "\n  ".join(errors))
        return 1
    print("PASSED (%s, van %s) in %.1f s" % (mode, van, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())

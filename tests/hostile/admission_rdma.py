#!/usr/bin/env python3
"""Admission control of the ibverbs van under a flood of RDMA CM requests.

  admission_rdma.py RDMA_TEST_ENV RDMA_FLOOD SUM_NODE

The summation job of admission_test.py runs on the address of an RDMA
interface (rdma_test_env: PS_TEST_RDMA_HOST or the first one; without a
device the test says "SKIPPED: ..." and leaves the skip marker). While it
runs, rdma_flood sends 2,000 connect requests that never complete and 200
two-QP connections that stop after the first QP at server0's port, then
the same at the scheduler's. Per attacked process, as admission_test.py
checks it: under 10% of a core while the requests are held (beyond what
the job alone cost it in the 2 s before the flood), RSS and VmData
growth under 64 MiB, every request answered (accepted, or refused at once
past PS_MAX_PENDING_CONNS) and every accepted one closed by the node
within PS_HANDSHAKE_TIMEOUT_MS (3 s) plus the margin. The job finishes,
every process exits 0 and every worker checked every sum. The node's own
queue pairs (`rdma res show qp`) must be back to the job's by then. The job
runs with PS_MAX_PENDING_CONNS=128: unlike a pending TCP connection, a
pending RDMA request holds a queue pair whose send queue rxe maps into the
process (about 250 KiB), so the cap is what bounds the memory a flood can
pin (at the default 256 up to ~63 MiB, at the test's limit) and the work of
expiring what waits. Under a
sanitizer the closes may take 15 times as long, CPU is not bounded, and a
request that saw no close message is reported, not counted (the node's
queue pairs still are).
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import admission_test as at  # noqa: E402
import job_driver as jd  # noqa: E402

# Past the flood's own setup (address and route resolution of 2,200 ids).
FLOOD_SETUP_S = 60
# Under a sanitizer inside the VM's emulated CPU the node's CM thread is
# several times slower: its deadline still closes every connection, later,
# and its CPU share is the sanitizer's (not checked then).
SLOW = 15 if at.SANITIZER else 1
# The nodes' cap on pending requests (see the docstring).
MAX_PENDING = 128


def node_qps(pid):
    """Queue pairs process `pid` holds now, as the kernel lists them (under
    the id of the thread that made each: one of the process's)."""
    tids = {int(t) for t in os.listdir("/proc/%d/task" % pid)}
    out = subprocess.run(["rdma", "-j", "res", "show", "qp"], capture_output=True, text=True,
                         timeout=30).stdout
    return sum(1 for q in json.loads(out or "[]") if q.get("pid") in tids)


def flood(target_name, pid, host, port, flooder, errors):
    what = "%s rdma flood" % target_name
    qps_before = node_qps(pid)
    if qps_before == 0:
        errors.append("%s: the node holds no queue pair before the flood: the count "
                      "cannot see it" % what)
    # What the job itself costs the node, measured first: under an emulated
    # CPU (the soft-RoCE VM) serving the job alone takes several percent.
    job_cpu, _ = at.watch(pid, [], errors, what + " (job only)", None)
    base = at.mem(pid)
    hold = SLOW * (at.HS_MS / 1000 + at.MARGIN_S)
    t0 = time.time()
    p = subprocess.Popen([flooder, host, str(port), str(at.N_IDLE), str(at.N_HALF), str(hold)],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("flood: sent"):
        p.kill()
        p.wait()
        errors.append("%s: rdma_flood did not get its requests out: %r" % (what, line))
        return
    print("%s: %s (%.1f s)" % (what, line.strip(), time.time() - t0))
    cpu, peak = at.watch(pid, [], errors, what, None)
    print("%s: cpu %.1f%% of a core with the job alone, %.1f%% while the requests are held" %
          (what, 100 * job_cpu, 100 * cpu))
    try:
        out, _ = p.communicate(timeout=hold + FLOOD_SETUP_S)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    print("%s: %s" % (what, out.strip()))
    m = re.search(r"made (\d+) refused (\d+) closed (\d+) open (\d+) errors (\d+)", out)
    if m is None:
        errors.append("%s: no summary from rdma_flood" % what)
    else:
        made, refused, open_, errs = (int(m.group(i)) for i in (1, 2, 4, 5))
        if made + refused + errs != at.N_IDLE + at.N_HALF or errs:
            errors.append("%s: %d accepted, %d refused, %d failed of %d requests" %
                          (what, made, refused, errs, at.N_IDLE + at.N_HALF))
        if made == 0:
            errors.append("%s: the node accepted none: nothing was held" % what)
        # The node's side: its queue pairs are back to those of the job.
        qps_after = node_qps(pid)
        print("%s: the node holds %d queue pairs (%d before the flood)" %
              (what, qps_after, qps_before))
        if qps_after > qps_before:
            errors.append("%s: the node still holds %d queue pairs more than before the flood, "
                          "%.1f s after it" % (what, qps_after - qps_before, hold))
        # The flood's side: a reject or disconnect for each. Under a
        # sanitizer some never reach the flood (seen: 15 of 1,765, while the
        # node held none of their queue pairs, checked above): reported only.
        if open_ and at.SANITIZER:
            print("%s: %d requests saw no close message (not checked under %s)" %
                  (what, open_, at.SANITIZER))
        elif open_:
            errors.append("%s: %d of %d accepted requests still open %.1f s after the flood" %
                          (what, open_, made, hold))
    at.check(errors, what, max(0.0, cpu - job_cpu), base, peak, cpu_bound=not at.SANITIZER)


def main():
    test_env, flooder, sum_node = sys.argv[1:4]
    host = jd.rdma_host(test_env)
    if host is None:
        return 0
    t0 = time.time()
    deadline = t0 + at.DEADLINE_S + 2 * (FLOOD_SETUP_S + SLOW * (at.HS_MS / 1000 + at.MARGIN_S))
    job = jd.Job(sum_node, "ibverbs", {})
    # The workers push until the attacks are over, however long they take
    # here (under an emulated CPU, minutes).
    until = os.path.join(job.dir, "attacks-done")
    job.base.update({
        "PS_HANDSHAKE_TIMEOUT_MS": str(at.HS_MS),
        "PS_MAX_PENDING_CONNS": str(MAX_PENDING),
        "SN_ROUNDS": "40", "SN_ROUND_MS": "50", "SN_UNTIL_FILE": until})
    errors = []
    ports = {"scheduler": int(job.base["DMLC_PS_ROOT_PORT"])}
    procs = {"scheduler": job.spawn("scheduler", "scheduler")}
    for name, role in (("server0", "server"), ("server1", "server"),
                       ("worker0", "worker"), ("worker1", "worker")):
        ports[name] = jd.free_port()
        procs[name] = job.spawn(name, role, ports[name])
    try:
        for w in ("worker0", "worker1"):
            if not job.wait_for(w, r"sum_node: worker \d+ started", deadline):
                errors.append(w + " did not start")
        print("job started in %.1f s" % (time.time() - t0))
        for name in ("server0", "scheduler"):
            flood(name, procs[name].pid, host, ports[name], flooder, errors)
        at.end_job(job, errors, t0, deadline, until)
    finally:
        job.kill_all()
    if errors:
        print("FAILED:\n  " + "\n  ".join(errors))
        return 1
    print("PASSED (ibverbs) in %.1f s" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())

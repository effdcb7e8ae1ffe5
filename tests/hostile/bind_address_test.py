#!/usr/bin/env python3
"""The scheduler listens on the configured address (DMLC_PS_ROOT_URI), not
on every interface; DMLC_USE_KUBERNETES=1 (upstream's opt-in) binds the
wildcard. Reads the listening socket from /proc/PID/net/tcp.

  bind_address_test.py SUM_NODE

Deadline: 20 s per case (the scheduler waits for nodes that never come and
is killed once its socket was checked).
"""
import os
import socket
import subprocess
import sys
import time

DEADLINE_S = 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def listening(pid, port):
    """Local addresses (hex, as /proc shows them) listening on `port`."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            addr, p = cols[1].split(":")
            if int(p, 16) == port and cols[3] == "0A":  # TCP_LISTEN
                found.append(addr)
    return found


def run(sum_node, extra):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "PS_"))}
    env.update({"DMLC_ROLE": "scheduler", "DMLC_PS_ROOT_URI": "127.0.0.1",
                "DMLC_PS_ROOT_PORT": str(port), "DMLC_NUM_WORKER": "1",
                "DMLC_NUM_SERVER": "1", "PS_START_TIMEOUT_MS": str(DEADLINE_S * 1000)})
    env.update(extra)
    p = subprocess.Popen([sum_node], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        end = time.time() + DEADLINE_S
        while time.time() < end:
            addrs = listening(p.pid, port)
            if addrs:
                return addrs
            if p.poll() is not None:
                break
            time.sleep(0.05)
        return []
    finally:
        p.kill()
        p.wait()


def main():
    sum_node = sys.argv[1]
    errors = []
    addrs = run(sum_node, {})
    print("DMLC_PS_ROOT_URI=127.0.0.1: listening on %s" % addrs)
    if addrs != ["0100007F"]:
        errors.append("scheduler should listen on 127.0.0.1 only, got %s" % addrs)
    addrs = run(sum_node, {"DMLC_USE_KUBERNETES": "1"})
    print("DMLC_USE_KUBERNETES=1: listening on %s" % addrs)
    if not addrs or any(a.strip("0") != "" for a in addrs):
        errors.append("with DMLC_USE_KUBERNETES=1 the scheduler should listen on the wildcard, "
                      "got %s" % addrs)
    if errors:
        print("FAILED: " + "; ".join(errors))
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())

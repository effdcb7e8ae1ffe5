#!/usr/bin/env python3
"""Where one small round trip's time goes, from the stage marks of a
--define=ps_stage_trace=1 build (ps/base/stage_trace.h).

    stage_trace.py WORKER_FILE SERVER_FILE [TOOL_RTT_US [TOOL_RTT_US_AFTER]]

The files are what the worker and the server of a 1 x 1 latency run wrote
at exit (one request at a time). Marks are times of the CPU's time-stamp
counter, one clock for both processes: each request's chain is followed
by time (the first "posted" after its "issue", the first server "handle"
after that, and so on), so a mark of another message (a heartbeat, a
second write) does not shift the rest. Prints the median, p10 and p90 of
each stage in ns and the share of the median round trip.
"""
import bisect
import sys


def load(path):
    stages, per_ns = {}, None
    with open(path) as f:
        for line in f:
            fields = line.split()
            if fields[0] == "ticks_per_ns":
                per_ns = float(fields[1])
            else:
                stages[fields[0]] = [int(x) for x in fields[2:]]
    return per_ns, stages


def pct(sorted_vals, q):
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * q))]


def main():
    per_ns, w = load(sys.argv[1])
    _, s = load(sys.argv[2])
    tools = [float(a) * 1000 for a in sys.argv[3:5] if a]
    issue, wposted, found, waited = (sorted(w[k]) for k in ("issue", "posted", "found", "waited"))
    handle, sposted = sorted(s["handle"]), sorted(s["posted"])

    def after(marks, t):
        i = bisect.bisect_left(marks, t)
        return marks[i] if i < len(marks) else None

    chains = []
    for t0 in issue:
        chain = [t0]
        for marks in (wposted, handle, sposted, found, waited):
            t = after(marks, chain[-1])
            if t is None:
                break
            chain.append(t)
        if len(chain) == 6:
            chains.append(chain)
    n = len(chains)
    if n < 100:
        sys.exit("too few traced round trips (%d): was the binary built with "
                 "--define=ps_stage_trace=1?" % n)
    rows = [
        ("worker: request to transport", lambda i: chains[i][1] - chains[i][0]),
        ("transport + server polling", lambda i: chains[i][2] - chains[i][1]),
        ("server: request to response", lambda i: chains[i][3] - chains[i][2]),
        ("transport + worker polling", lambda i: chains[i][4] - chains[i][3]),
        ("worker: response to caller", lambda i: chains[i][5] - chains[i][4]),
        ("caller: to the next request", lambda i: chains[i + 1][0] - chains[i][5]),
        ("round trip (issue to issue)", lambda i: chains[i + 1][0] - chains[i][0]),
    ]
    first = n // 10  # the first tenth: caches and branch predictors warming
    span = range(first, n - 1)
    dist = {name: sorted(fn(i) / per_ns for i in span) for name, fn in rows}
    total = pct(dist[rows[-1][0]], 0.5)
    print("%-32s %8s %8s %8s %6s" % ("stage (%d round trips)" % len(span), "p50_ns",
                                     "p10_ns", "p90_ns", "share"))
    for name, _ in rows:
        vals = dist[name]
        print("%-32s %8.0f %8.0f %8.0f %5.0f%%" % (name, pct(vals, 0.5), pct(vals, 0.1),
                                                  pct(vals, 0.9), 100.0 * pct(vals, 0.5) / total))
    if tools:
        print("tool round trip %s ns; ps round trip / tool = %s" % (
            " / ".join("%.0f" % t for t in tools), " / ".join("%.2f" % (total / t) for t in tools)))
        # The host switches between a fast and a slow state (docs/PERF.md):
        # a ratio means something only when the tool stayed in one.
        if len(tools) == 2 and max(tools) > 1.5 * min(tools):
            print("the tool changed state during the run (%.0f -> %.0f ns): the ratio is not "
                  "like for like" % (tools[0], tools[1]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ps_sweep: run test_benchmark over sizes x job shapes x modes; tables + plot.

Each point is one job started by ps_launch (scheduler, S servers, W workers
on this machine) running `test_benchmark LEN 1 MODE --json` for a bounded
number of rounds (TOTAL_DURATION, one report window). The workers' summary
JSON lines and every process's CPU line are collected into

  OUT/results.csv, OUT/results.json   one row per (shape, mode, size)
  OUT/latency.csv                     small-message round trips (ps and raw TCP)
  OUT/sweep.png                       goodput and latency against size
  OUT/logs/                           every job's output

and the table is printed. In the same run, when the tools exist, reference
figures are measured too, so comparisons never mix runs: iperf3 over
loopback (one stream), and a raw TCP ping-pong (tcp_pingpong) in blocking
and busy-poll mode next to ps's 8-byte push-pull round trip (mode 4) with
PS_BUSY_POLL unset and =1.

Columns: gbps is the sum over workers of upstream's goodput (push-pull
counts one direction); lat_us_mean is upstream's "avg latency per key"
(mean over workers); lat_us_p50/p99 are request round trips while every key
is in flight (p50: mean over workers, p99: worst worker); job_cpu_s_per_gb
is the CPU time of every process of the job (scheduler, servers, workers)
per GB that the workers' van moved.

Shapes are WxS: W workers, S servers (e.g. 1x1,2x2,8x2).

AF mode (--af) runs the AF benchmark test_benchmark_af instead, one job per
shape and van (--af-shapes as NaMf: N attention workers, M FFN servers,
e.g. 1A1F,2A2F; --af-vans, e.g. tcp,shm), each over the batch sizes
--batch-start..--batch-end by --batch-step with --af-warmup + --af-iter
iterations (BENCHMARK_*). Every worker's AF_BENCH lines are collected into

  OUT/af_results.csv, OUT/af_results.json   one row per (shape, van, op, batch)
  OUT/af_latency.png                        push-pull p50 and p99 against batch
  OUT/logs/                                 every job's output

Columns: p50_us and mean_us are means over workers, p90_us, p99_us and
max_us the worst worker, min_us the best, samples the sum over workers.
The KV sweep, its references and its plot are not run in AF mode. Plots
need gnuplot; without it the tables are still written.
"""

import argparse
import csv
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import time

MODE_NAMES = {0: "push_then_pull", 1: "push_pull", 2: "push_only", 3: "pull_only", 4: "latency"}
DEFAULT_SIZES = "4K,16K,64K,256K,1M,4M,16M"

ROW_FIELDS = ["workers", "servers", "mode", "mode_name", "len", "keys", "rounds", "ok", "gbps",
              "gbps_per_worker", "lat_us_mean", "lat_us_p50", "lat_us_p99",
              "worker_cpu_s_per_gb", "job_cpu_s_per_gb", "elapsed_s", "busy_poll"]
AF_FIELDS = ["workers", "servers", "van", "op", "batch", "hidden", "samples", "mean_us",
             "min_us", "p50_us", "p90_us", "p99_us", "max_us", "ok"]
AF_OPS = ("push", "pull", "pushpull")
LAT_FIELDS = ["what", "busy_poll", "size", "samples", "lat_us_p50", "lat_us_p99", "lat_us_mean",
              "ok"]


# ---------------------------------------------------------------- pure parts


def parse_size(text):
    """'4K' -> 4096, '16M' -> 16777216, '1000' -> 1000 (binary units)."""
    text = text.strip().upper().rstrip("B")
    mult = 1
    if text and text[-1] in "KMG":
        mult = 1024 ** ("KMG".index(text[-1]) + 1)
        text = text[:-1]
    value = int(float(text) * mult)
    if value <= 0:
        raise ValueError("size must be positive")
    return value


def parse_shapes(text):
    """'1x1,8x2' -> [(1, 1), (8, 2)] as (workers, servers)."""
    shapes = []
    for item in text.split(","):
        w, sep, s = item.strip().lower().partition("x")
        if not sep:
            raise ValueError("shape %r is not WxS" % item)
        shapes.append((int(w), int(s)))
        if shapes[-1][0] < 1 or shapes[-1][1] < 1:
            raise ValueError("shape %r needs at least one worker and one server" % item)
    return shapes


def parse_af_shapes(text):
    """'1A1F,4a2f' -> [(1, 1), (4, 2)] as (attention workers, FFN servers)."""
    shapes = []
    for item in text.split(","):
        spec = item.strip().upper()
        a, sep, f = spec.partition("A")
        if not sep or not f.endswith("F") or not a.isdigit() or not f[:-1].isdigit():
            raise ValueError("AF shape %r is not NaMf (e.g. 2A2F)" % item)
        shapes.append((int(a), int(f[:-1])))
        if shapes[-1][0] < 1 or shapes[-1][1] < 1:
            raise ValueError("AF shape %r needs at least one worker and one server" % item)
    return shapes


def parse_af_records(text):
    """The AF_BENCH JSON records in launcher output (after any [role] prefix)."""
    return parse_records(text, "AF_BENCH {")


def af_rows(recs, workers, servers, van, batches):
    """One row per (op, batch) of a job: ok only when every worker reported it."""
    rows = []
    for op in AF_OPS:
        for b in batches:
            got = [r for r in recs if r.get("op") == op and r.get("batch") == b]
            row = {"workers": workers, "servers": servers, "van": van, "op": op, "batch": b,
                   "ok": len({r.get("rank") for r in got}) == workers and len(got) == workers}
            if got:
                n = len(got)
                row.update({
                    "hidden": got[0].get("hidden"),
                    "samples": sum(r["samples"] for r in got),
                    "mean_us": round(sum(r["mean_us"] for r in got) / n, 3),
                    "min_us": min(r["min_us"] for r in got),
                    "p50_us": round(sum(r["p50_us"] for r in got) / n, 3),
                    "p90_us": max(r["p90_us"] for r in got),
                    "p99_us": max(r["p99_us"] for r in got),
                    "max_us": max(r["max_us"] for r in got),
                })
            rows.append(row)
    return rows


def af_batches(start, end, step):
    """The batch sizes test_benchmark_af runs for these BENCHMARK_BATCH_* values."""
    if start < 1 or step < 1 or end < start:
        raise ValueError("batches need 1 <= start <= end and step >= 1")
    return list(range(start, end + 1, step))


def human_size(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return "%dB" % n


def rounds_for(size, keys, bytes_per_job, min_rounds, max_rounds):
    """Rounds so one worker moves about bytes_per_job, within the bounds."""
    per_round = max(1, size * keys)
    return int(max(min_rounds, min(max_rounds, bytes_per_job // per_round)))


def parse_records(text, marker='{"bench":'):
    """JSON records in launcher output: each from the '{' of marker to the end
    of a line that holds marker (lines may carry a [role] prefix)."""
    recs = []
    for line in text.splitlines():
        i = line.find(marker)
        if i < 0:
            continue
        try:
            recs.append(json.loads(line[i + marker.index("{"):]))
        except ValueError:
            pass
    return recs


def summarize(recs, workers, servers, mode, size):
    """One table row from a job's records (ok False when something is missing)."""
    summaries = [r for r in recs if r.get("bench") == "test_benchmark"
                 and r.get("event") == "summary"]
    cpus = [r for r in recs if r.get("bench") == "test_benchmark" and r.get("event") == "cpu"]
    row = {"workers": workers, "servers": servers, "mode": mode,
           "mode_name": MODE_NAMES.get(mode, str(mode)), "len": size}
    if mode == 0:
        summaries = [r for r in summaries if r.get("phase") == "push"] or summaries
    if not summaries:
        row["ok"] = False
        return row
    n = len(summaries)
    row.update({
        "ok": True,
        "keys": summaries[0]["keys"],
        "rounds": summaries[0]["rounds"],
        "gbps": sum(r["gbps"] for r in summaries),
        "gbps_per_worker": sum(r["gbps"] for r in summaries)
                           / len({r.get("worker_rank") for r in summaries}),
        "lat_us_mean": sum(r["lat_us_mean"] for r in summaries) / n,
        "lat_us_p50": sum(r["lat_us_p50"] for r in summaries) / n,
        "lat_us_p99": max(r["lat_us_p99"] for r in summaries),
        "worker_cpu_s_per_gb": sum(r["cpu_s_per_gb"] for r in summaries) / n,
        "elapsed_s": max(r["elapsed_s"] for r in summaries),
        "busy_poll": summaries[0].get("busy_poll", 0),
    })
    worker_gb = sum(r["gb_moved"] for r in cpus if r.get("role") == "worker")
    if worker_gb > 0:
        row["job_cpu_s_per_gb"] = sum(r["cpu_s"] for r in cpus) / worker_gb
    return row


def fmt(v, digits=3):
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "ok" if v else "FAIL"
    if isinstance(v, float):
        return "%.*f" % (digits, v)
    return str(v)


def format_table(rows, columns, headers=None):
    headers = headers or columns
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
    return "\n".join(lines)


def gnuplot_head(png, title):
    """The lines every plot starts with: a 1600x800 PNG of two plots side by side."""
    return [
        "set terminal pngcairo size 1600,800 font 'sans,11' noenhanced",
        "set output '%s'" % png.replace("'", "''"),
        "set multiplot layout 1,2 title '%s'" % title.replace("'", "''"),
        "set grid",
        "set key below",
    ]


def gnuplot_lines(series, column):
    """Plot items: column of every series' datafile against its first, as lines."""
    return ["'%s' using 1:%d with linespoints lw 2 title '%s'" % (f, column, lab)
            for lab, f in series]


def gnuplot_script(png, series, refs, title, sizes):
    """A gnuplot script: goodput (left) and latency (right) against size.

    series: [(label, datafile)] with columns size, gbps, lat_us_mean, lat_us_p50.
    refs: [(label, gbps)] horizontal lines on the goodput plot."""
    lines = gnuplot_head(png, title) + [
        "set logscale x 2",
        "set xlabel 'value size per key (bytes)'",
        "set xtics (%s)" % ", ".join('"%s" %d' % (human_size(n), n) for n in sorted(sizes)),
        "set xrange [%d:%d]" % (min(sizes) * 0.8, max(sizes) * 1.25),
        "set ylabel 'goodput (Gbit/s)'",
        "set title 'goodput'",
        "set yrange [0:*]",
    ]
    plots = gnuplot_lines(series, 2)
    for i, (lab, gbps) in enumerate(refs):
        plots.append("%f with lines dt %d lw 2 lc rgb 'black' title '%s'" % (gbps, 2 + i, lab))
    lines.append("plot " + ", \\\n     ".join(plots) if plots else "plot 0 notitle")
    lines += [
        "set logscale y 10",
        "set yrange [*:*]",
        "set ylabel 'latency per key (us)'",
        "set title 'avg latency per key (upstream definition)'",
        "set key below",
    ]
    plots = gnuplot_lines(series, 3)
    lines.append("plot " + ", \\\n     ".join(plots) if plots else "plot 1 notitle")
    lines.append("unset multiplot")
    return "\n".join(lines) + "\n"


def af_gnuplot_script(png, series, title, batches):
    """A gnuplot script: push-pull p50 (left) and p99 (right) against batch size.

    series: [(label, datafile)] with columns batch, p50_us, p99_us."""
    lines = gnuplot_head(png, title) + [
        "set xlabel 'batch size b (rows of the [b, hidden] tensors)'",
        "set xrange [%f:%f]" % (min(batches) - 0.5, max(batches) + 0.5),
        "set yrange [0:*]",
        "set ylabel 'push-pull latency (us)'",
    ]
    for col, name in ((2, "p50"), (3, "p99")):
        lines.append("set title 'push-pull %s'" % name)
        plots = gnuplot_lines(series, col)
        lines.append("plot " + ", \\\n     ".join(plots) if plots else "plot 0 notitle")
    lines.append("unset multiplot")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- running


def repo_paths():
    """Where the programs are: under `bazel run` (runfiles) or in a checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))

    def pick(*cands):
        for c in cands:
            if os.path.isfile(c) and os.access(c, os.X_OK):
                return c
        return cands[-1]

    return {
        "bench": pick(os.path.join(root, "tests", "test_benchmark"),
                      os.path.join(root, "bazel-bin", "tests", "test_benchmark")),
        "pingpong": pick(os.path.join(root, "tests", "bench", "tcp_pingpong"),
                         os.path.join(root, "bazel-bin", "tests", "bench", "tcp_pingpong")),
        "af_bench": pick(os.path.join(root, "tests", "test_benchmark_af"),
                         os.path.join(root, "bazel-bin", "tests", "test_benchmark_af")),
        "launcher": os.path.join(root, "tools", "launch", "ps_launch.py"),
    }


def run_job(args, workers, servers, mode, size, rounds, extra_env, log_path, role_env=()):
    env_args = ["--role-env=%s" % r for r in role_env]
    env = {"TOTAL_DURATION": str(rounds), "LOG_DURATION": str(rounds),
           "NUM_KEY_PER_SERVER": str(args.keys), "PS_BENCH_JSON": "1"}
    env.update(extra_env)
    for k, v in sorted(env.items()):
        env_args += ["--env", "%s=%s" % (k, v)]
    cmd = [sys.executable, args.launcher, "-s", str(servers), "-w", str(workers), "-q",
           "--timeout", str(args.timeout)] + env_args
    if args.van:
        cmd += ["--van", args.van]
    cmd += ["--", args.bench, str(size), "1", str(mode)]
    rc, out = run_logged(cmd, log_path)
    return rc, parse_records(out)


def run_logged(cmd, log_path):
    """Runs cmd, writes the command, its output and its exit to log_path; (exit, output)."""
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, errors="replace")
    with open(log_path, "w") as f:
        f.write("$ %s\n" % " ".join(cmd))
        f.write(proc.stdout)
        f.write("\n# exit %d after %.1f s\n" % (proc.returncode, time.monotonic() - t0))
    return proc.returncode, proc.stdout


def run_af_job(args, workers, servers, van, extra_env, log_path):
    """One test_benchmark_af job over every batch size; (exit status, AF_BENCH records)."""
    env = {"BENCHMARK_WARMUP": str(args.af_warmup), "BENCHMARK_ITER": str(args.af_iter),
           "BENCHMARK_BATCH_START": str(args.batch_start),
           "BENCHMARK_BATCH_END": str(args.batch_end),
           "BENCHMARK_BATCH_STEP": str(args.batch_step),
           "BENCHMARK_WORKER_NUMBER": str(workers),
           # The shm and ipc vans name their sockets with the job id.
           "PS_JOB_ID": "sweep-%d-%s" % (os.getpid(), os.path.basename(log_path)[:-4])}
    env.update(extra_env)
    cmd = [sys.executable, args.launcher, "-s", str(servers), "-w", str(workers),
           "--timeout", str(args.timeout)]
    for k, v in sorted(env.items()):
        cmd += ["--env", "%s=%s" % (k, v)]
    if van:
        cmd += ["--van", van]
    cmd += ["--", args.af_bench]
    rc, out = run_logged(cmd, log_path)
    return rc, parse_af_records(out)


def run_af(args, extra_env):
    """The AF mode: tables and plot of test_benchmark_af over shapes x vans."""
    try:
        shapes = parse_af_shapes(args.af_shapes)
        batches = af_batches(args.batch_start, args.batch_end, args.batch_step)
    except ValueError as e:
        sys.stderr.write("ps_sweep: %s\n" % e)
        return 2
    vans = [v.strip() for v in args.af_vans.split(",") if v.strip()] or [None]
    if not os.access(args.af_bench, os.X_OK):
        sys.stderr.write("ps_sweep: no AF benchmark at %s (bazel build //tests:test_benchmark_af)\n"
                         % args.af_bench)
        return 2
    log_dir = os.path.join(args.out, "logs")
    os.makedirs(log_dir, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()[0]
    rows = []
    failed = 0
    for workers, servers in shapes:
        for van in vans:
            name = "af_%dA%dF_%s" % (workers, servers, van or "env")
            print("ps_sweep: %dA%dF over %s, batches %d..%d by %d ..." % (
                workers, servers, van or "the environment's van", batches[0], batches[-1],
                args.batch_step), flush=True)
            log = os.path.join(log_dir, name + ".log")
            rc, recs = run_af_job(args, workers, servers, van, extra_env, log)
            job_rows = af_rows(recs, workers, servers, van or "(environment)", batches)
            if rc != 0 or not all(r["ok"] for r in job_rows):
                for r in job_rows:
                    r["ok"] = False
                failed += 1
                print("ps_sweep:   FAILED (exit %d), see %s" % (rc, log), flush=True)
            rows += job_rows
    load_after = os.getloadavg()[0]

    write_csv(os.path.join(args.out, "af_results.csv"), AF_FIELDS, rows)
    meta = {"started": started, "host": socket.gethostname(), "cpus": os.cpu_count(),
            "loadavg_1min_before": load_before, "loadavg_1min_after": load_after,
            "shapes": shapes, "vans": vans, "batches": batches, "warmup": args.af_warmup,
            "iter": args.af_iter, "env": extra_env, "bench": args.af_bench}
    with open(os.path.join(args.out, "af_results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)

    png = os.path.join(args.out, "af_latency.png")
    series = []
    for workers, servers in shapes:
        for van in vans:
            pts = [r for r in rows if r["workers"] == workers and r["servers"] == servers
                   and r["van"] == (van or "(environment)") and r["op"] == "pushpull"
                   and r["ok"]]
            if not pts:
                continue
            dat = os.path.join(args.out, "af_%dA%dF_%s.dat" % (workers, servers, van or "env"))
            with open(dat, "w") as f:
                f.write("# batch p50_us p99_us\n")
                for r in pts:
                    f.write("%d %f %f\n" % (r["batch"], r["p50_us"], r["p99_us"]))
            series.append(("%dA%dF %s" % (workers, servers, van or "(environment)"), dat))
    if not args.no_plot and series and shutil.which("gnuplot"):
        title = "ps test_benchmark_af, %d iterations x 3 micro-batches, %s, %s" % (
            args.af_iter, socket.gethostname(), started)
        if not run_gnuplot(os.path.join(args.out, "af_latency.gp"),
                           af_gnuplot_script(png, series, title, batches)):
            png = None
    else:
        png = None

    print()
    print(format_table([r for r in rows if r["op"] == "pushpull"],
                       ["workers", "servers", "van", "batch", "samples", "mean_us", "p50_us",
                        "p99_us", "ok"],
                       ["A", "F", "van", "batch", "n", "mean us", "p50 us", "p99 us", "ok"]))
    print("load average (1 min): %.2f before, %.2f after, %d CPUs"
          % (load_before, load_after, os.cpu_count()))
    print("\ntables: %s, %s%s" % (os.path.join(args.out, "af_results.csv"),
                                  os.path.join(args.out, "af_results.json"),
                                  ("\nplot: %s" % png) if png else ""))
    return 1 if failed else 0


def run_gnuplot(script, text):
    """Writes the gnuplot script and runs it; False (and gnuplot's output on stderr) on failure."""
    with open(script, "w") as f:
        f.write(text)
    gp = subprocess.run(["gnuplot", script], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, universal_newlines=True)
    if gp.returncode != 0:
        sys.stderr.write("ps_sweep: gnuplot failed:\n%s" % gp.stdout)
    return gp.returncode == 0


def write_csv(path, fields, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_iperf3(seconds, log_dir, tag):
    """One TCP stream over loopback, Gbit/s (None when iperf3 is missing)."""
    if not shutil.which("iperf3"):
        return None
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Retry the client until the server listens (a probe connection
        # would count as the one session `-1` allows).
        for _ in range(20):
            time.sleep(0.25)
            out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t",
                                  str(seconds), "-J"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, universal_newlines=True,
                                 timeout=seconds + 30)
            if out.returncode == 0 or server.poll() is not None:
                break
        with open(os.path.join(log_dir, "iperf3_%s.json" % tag), "w") as f:
            f.write(out.stdout)
        data = json.loads(out.stdout)
        return data["end"]["sum_received"]["bits_per_second"] / 1e9
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        sys.stderr.write("ps_sweep: iperf3 failed: %s\n" % e)
        return None
    finally:
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def measure_pingpong(path, busy, iterations, log_dir):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None
    cmd = [path, "8", str(iterations), "--json"] + (["--busy-poll"] if busy else [])
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None
    with open(os.path.join(log_dir, "tcp_pingpong_%s.log" % ("busy" if busy else "blocking")),
              "w") as f:
        f.write(out.stdout)
    recs = [r for r in parse_records(out.stdout) if r.get("bench") == "tcp_pingpong"]
    if out.returncode != 0 or not recs:
        return None
    return recs[0]


def make_parser():
    ap = argparse.ArgumentParser(
        prog="ps_sweep", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    paths = repo_paths()
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="value sizes (default %(default)s)")
    ap.add_argument("--shapes", "--configs", default="1x1,2x2",
                    help="job shapes WxS: workers x servers (default %(default)s)")
    ap.add_argument("--modes", default="1,2", help="benchmark modes 0-3 (default %(default)s)")
    ap.add_argument("--keys", type=int, default=40, help="NUM_KEY_PER_SERVER (default 40)")
    ap.add_argument("--bytes-per-job", type=parse_size, default=parse_size("1G"),
                    help="bytes each worker pushes per point; sets the rounds (default 1G)")
    ap.add_argument("--min-rounds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=180, help="time limit per job, seconds")
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="extra environment for every job (repeatable)")
    ap.add_argument("--van", default=None, help="van name passed to the launcher")
    ap.add_argument("--no-latency", action="store_true",
                    help="skip the 8-byte round-trip measurements")
    ap.add_argument("--latency-rounds", type=int, default=100,
                    help="mode-4 rounds (each key once, one at a time) per latency job")
    ap.add_argument("--pingpong-iterations", type=int, default=20000,
                    help="raw TCP round trips per ping-pong mode (default %(default)s)")
    ap.add_argument("--no-iperf", action="store_true", help="skip the iperf3 reference")
    ap.add_argument("--iperf-seconds", type=int, default=3)
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--af", action="store_true",
                    help="run the AF benchmark (test_benchmark_af) instead of the KV sweep")
    ap.add_argument("--af-shapes", default="1A1F,2A2F",
                    help="AF job shapes NaMf: attention workers, FFN servers (default %(default)s)")
    ap.add_argument("--af-vans", default="tcp",
                    help="vans for the AF jobs, comma-separated (default %(default)s)")
    ap.add_argument("--batch-start", type=int, default=1, help="BENCHMARK_BATCH_START (1)")
    ap.add_argument("--batch-end", type=int, default=128, help="BENCHMARK_BATCH_END (128)")
    ap.add_argument("--batch-step", type=int, default=16, help="BENCHMARK_BATCH_STEP (16)")
    ap.add_argument("--af-warmup", type=int, default=10, help="BENCHMARK_WARMUP (10)")
    ap.add_argument("--af-iter", type=int, default=100, help="BENCHMARK_ITER (100)")
    ap.add_argument("--out", default="sweep-results", help="output directory (default %(default)s)")
    ap.add_argument("--bench", default=paths["bench"], help="test_benchmark binary")
    ap.add_argument("--pingpong", default=paths["pingpong"], help="tcp_pingpong binary")
    ap.add_argument("--af-bench", default=paths["af_bench"], help="test_benchmark_af binary")
    ap.add_argument("--launcher", default=paths["launcher"], help="ps_launch.py")
    return ap


def main(argv=None):
    args = make_parser().parse_args(argv)
    # Binaries were resolved from the script's location; outputs go where
    # the user ran `bazel run` from.
    args.bench = os.path.abspath(args.bench)
    args.pingpong = os.path.abspath(args.pingpong)
    args.af_bench = os.path.abspath(args.af_bench)
    args.launcher = os.path.abspath(args.launcher)
    if os.environ.get("BUILD_WORKING_DIRECTORY"):
        os.chdir(os.environ["BUILD_WORKING_DIRECTORY"])
    try:
        extra_env = dict(kv.split("=", 1) for kv in args.env)
        if not args.af:
            sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
            shapes = parse_shapes(args.shapes)
            modes = [int(m) for m in args.modes.split(",") if m.strip()]
    except ValueError as e:
        sys.stderr.write("ps_sweep: %s\n" % e)
        return 2
    if args.af:
        return run_af(args, extra_env)
    if any(m not in (0, 1, 2, 3) for m in modes):
        sys.stderr.write("ps_sweep: --modes takes 0-3 (mode 4 runs with the latency section)\n")
        return 2
    if not os.access(args.bench, os.X_OK):
        sys.stderr.write("ps_sweep: no benchmark at %s (bazel build //tests:test_benchmark "
                         "//tests/bench:tcp_pingpong)\n" % args.bench)
        return 2
    log_dir = os.path.join(args.out, "logs")
    os.makedirs(log_dir, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")

    refs = {}
    if not args.no_iperf:
        print("ps_sweep: iperf3 one stream over loopback, %d s ..." % args.iperf_seconds, flush=True)
        refs["iperf3_gbps_before"] = measure_iperf3(args.iperf_seconds, log_dir, "before")
    load_before = os.getloadavg()[0]

    rows = []
    failed = 0
    for workers, servers in shapes:
        for mode in modes:
            for size in sizes:
                rounds = rounds_for(size, args.keys * servers, args.bytes_per_job,
                                    args.min_rounds, args.max_rounds)
                name = "w%d_s%d_m%d_%s" % (workers, servers, mode, human_size(size))
                print("ps_sweep: %dx%d %s %s, %d rounds ..." % (workers, servers,
                      MODE_NAMES[mode], human_size(size), rounds), flush=True)
                rc, recs = run_job(args, workers, servers, mode, size, rounds, extra_env,
                                   os.path.join(log_dir, name + ".log"))
                row = summarize(recs, workers, servers, mode, size)
                if rc != 0:
                    row["ok"] = False
                if not row["ok"]:
                    failed += 1
                    print("ps_sweep:   FAILED (exit %d), see %s" % (rc,
                          os.path.join(log_dir, name + ".log")), flush=True)
                rows.append(row)

    latency = []
    if not args.no_latency:
        for busy in (0, 1):
            # Busy-polling on the server and the worker only: the scheduler
            # has nothing to do after start-up, and three spinning processes
            # would not fit two cores.
            role_env = ["server:PS_BUSY_POLL=1", "worker:PS_BUSY_POLL=1"] if busy else []
            name = "latency_%s" % ("busy" if busy else "blocking")
            print("ps_sweep: ps 8-byte push-pull round trips, %s ..." % name[8:], flush=True)
            rc, recs = run_job(args, 1, 1, 4, 8, args.latency_rounds, extra_env,
                               os.path.join(log_dir, name + ".log"), role_env)
            s = [r for r in recs if r.get("event") == "summary"]
            entry = {"what": "ps push-pull (mode 4)", "busy_poll": busy, "size": 8,
                     "ok": rc == 0 and bool(s)}
            if s:
                entry.update({"samples": s[0]["requests"], "lat_us_p50": s[0]["lat_us_p50"],
                              "lat_us_p99": s[0]["lat_us_p99"],
                              "lat_us_mean": s[0]["elapsed_s"] * 1e6 / max(1, s[0]["requests"])})
            if not entry["ok"]:
                failed += 1
            latency.append(entry)
            pp = measure_pingpong(args.pingpong, busy, args.pingpong_iterations, log_dir)
            if pp is not None:
                latency.append({"what": "raw TCP ping-pong", "busy_poll": busy, "size": 8,
                                "samples": pp["round_trips"], "lat_us_p50": pp["lat_us_p50"],
                                "lat_us_p99": pp["lat_us_p99"],
                                "lat_us_mean": pp["lat_us_mean"], "ok": True})

    # The machine may be shared: measure the reference again at the end and
    # record the load, so a drift shows.
    load_after = os.getloadavg()[0]
    if not args.no_iperf:
        print("ps_sweep: iperf3 again ...", flush=True)
        refs["iperf3_gbps_after"] = measure_iperf3(args.iperf_seconds, log_dir, "after")
        got = [v for v in (refs["iperf3_gbps_before"], refs["iperf3_gbps_after"]) if v]
        refs["iperf3_gbps"] = sum(got) / len(got) if got else None

    # Tables.
    write_csv(os.path.join(args.out, "results.csv"), ROW_FIELDS, rows)
    if latency:
        write_csv(os.path.join(args.out, "latency.csv"), LAT_FIELDS, latency)
    meta = {"started": started, "host": socket.gethostname(), "cpus": os.cpu_count(),
            "loadavg_1min_before": load_before, "loadavg_1min_after": load_after,
            "sizes": sizes, "shapes": shapes, "modes": modes, "keys_per_server": args.keys,
            "env": extra_env, "van": args.van or "(environment)", "bench": args.bench}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "reference": refs, "rows": rows, "latency": latency}, f,
                  indent=1)

    # Plot.
    png = os.path.join(args.out, "sweep.png")
    if not args.no_plot and rows and shutil.which("gnuplot"):
        series = []
        for workers, servers in shapes:
            for mode in modes:
                pts = [r for r in rows if r["workers"] == workers and r["servers"] == servers
                       and r["mode"] == mode and r.get("ok")]
                if not pts:
                    continue
                dat = os.path.join(args.out, "w%d_s%d_m%d.dat" % (workers, servers, mode))
                with open(dat, "w") as f:
                    f.write("# size gbps lat_us_mean lat_us_p50 lat_us_p99\n")
                    for r in sorted(pts, key=lambda r: r["len"]):
                        f.write("%d %f %f %f %f\n" % (r["len"], r["gbps"], r["lat_us_mean"],
                                                      r["lat_us_p50"], r["lat_us_p99"]))
                series.append(("%dw x %ds %s" % (workers, servers, MODE_NAMES[mode]), dat))
        ref_lines = []
        if refs.get("iperf3_gbps"):
            ref_lines.append(("iperf3, 1 stream, same run",
                              refs["iperf3_gbps"]))
        title = "ps test_benchmark over loopback, %d keys/server, %s, %s" % (
            args.keys, socket.gethostname(), started)
        if not run_gnuplot(os.path.join(args.out, "sweep.gp"),
                           gnuplot_script(png, series, ref_lines, title, sizes)):
            png = None
    else:
        png = None

    # Report.
    print()
    print(format_table(rows, ["workers", "servers", "mode_name", "len", "rounds", "gbps",
                              "lat_us_mean", "lat_us_p50", "lat_us_p99", "job_cpu_s_per_gb",
                              "ok"],
                       ["W", "S", "mode", "bytes", "rounds", "Gbit/s", "us/key", "p50 us",
                        "p99 us", "cpu s/GB", "ok"]))
    if refs.get("iperf3_gbps") is not None:
        print("\niperf3, one stream over loopback (same run): %s Gbit/s before, %s after"
              % (fmt(refs["iperf3_gbps_before"], 2), fmt(refs["iperf3_gbps_after"], 2)))
    print("load average (1 min): %.2f before, %.2f after, %d CPUs"
          % (load_before, load_after, os.cpu_count()))
    if latency:
        print()
        print(format_table(latency, ["what", "busy_poll", "size", "samples", "lat_us_p50",
                                     "lat_us_p99", "ok"],
                           ["8-byte round trip", "busy", "bytes", "n", "p50 us", "p99 us", "ok"]))
    print("\ntables: %s, %s%s" % (os.path.join(args.out, "results.csv"),
                                  os.path.join(args.out, "results.json"),
                                  ("\nplot: %s" % png) if png else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

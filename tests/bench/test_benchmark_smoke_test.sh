#!/usr/bin/env bash
# Smoke test of the seed-compatible benchmark through the launcher: a 1x1
# job on loopback for a few rounds in each kind of mode. Checks the upstream
# goodput line, the JSON lines, the data (DEBUG_MODE makes the worker check
# every pulled byte), the CPU report of every process and the exit codes.
#
#   test_benchmark_smoke_test.sh LAUNCHER BENCHMARK
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"

LAUNCH=${1:?launcher}
BENCH=${2:?benchmark}
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# run NAME ENV... -- ARGS...: one job; output in $TMP/NAME.out (stdout+stderr).
# Launcher options other than the defaults (1x1 on 127.0.0.1) in LOPTS.
LOPTS=(-s 1 -w 1)
run() {
  local name=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("--env" "$1"); shift; done
  shift
  python3 "$LAUNCH" "${LOPTS[@]}" --timeout 120 --kill-grace 2 "${envs[@]}" -- "$BENCH" "$@" \
    >"$TMP/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    fail "$name exited $rc"
    cat "$TMP/$name.out"
    return 1
  fi
  pass "$name exits 0"
}

# The JSON line of event $2 from $1's output, checked by python.
json_check() {
  python3 - "$TMP/$1.out" "$2" "$3" <<'EOF'
import json, sys
path, event, expr = sys.argv[1:]
recs = []
for line in open(path, errors="replace"):
    i = line.find('{"bench":')
    if i >= 0:
        recs.append(json.loads(line[i:]))
got = [r for r in recs if r.get("event") == event]
if not got:
    sys.exit("no %s record" % event)
for r in got:
    if not eval(expr, {}, dict(r)):
        sys.exit("%s record fails %s: %s" % (event, expr, r))
EOF
}

# 1. push-pull (the default mode), 64 KB, with data checks and JSON.
if run pushpull TOTAL_DURATION=20 LOG_DURATION=10 DEBUG_MODE=1 NUM_KEY_PER_SERVER=8 -- 65536 10 1 --json; then
  n=$(grep -cP '^\[worker 0\] \[0\]\tApplication goodput: [0-9.]+ Gbps\.\tAvg latency = [0-9.]+ us per key$' \
      "$TMP/pushpull.out")
  [ "$n" -eq 2 ] && pass "two goodput lines" || fail "$n goodput lines instead of 2"
  grep -q "^\[worker 0\] \[0\]	DEBUG_MODE: $((20 * 8 * 65536)) pulled bytes checked$" "$TMP/pushpull.out" \
    && pass "every pulled byte checked" || fail "pulled data not checked"
  json_check pushpull summary 'mode == 1 and len == 65536 and keys == 8 and rounds == 20 and gbps > 0 and lat_us_p50 > 0 and lat_us_p99 >= lat_us_p50 and cpu_s_per_gb > 0' \
    && pass "summary JSON" || fail "summary JSON"
  json_check pushpull window 'rounds == 10' && pass "window JSON" || fail "window JSON"
  for who in "scheduler" "server 0" "worker 0"; do
    grep -q "^\[$who\] .*: cpu [0-9.]* s for " "$TMP/pushpull.out" || fail "no cpu report from $who"
  done
fi

# 2. push-then-pull prints upstream's timing lines.
if run pushthenpull -- 4096 3 0; then
  grep -q '^\[worker 0\] push 4096 bytes to each server, repeat=3, total_time=[0-9.]* ms$' "$TMP/pushthenpull.out" &&
    grep -q '^\[worker 0\] pull 4096 bytes to each server, repeat=3, total_time=[0-9.]* ms$' "$TMP/pushthenpull.out" \
    && pass "push-then-pull lines" || fail "push-then-pull lines"
fi

# 3. push-only and pull-only, JSON through the environment.
for mode in 2 3; do
  if run "mode$mode" TOTAL_DURATION=5 LOG_DURATION=5 PS_BENCH_JSON=1 NUM_KEY_PER_SERVER=4 -- 1024 10 $mode; then
    json_check "mode$mode" summary "mode == $mode and rounds == 5 and keys == 4" \
      && pass "mode $mode summary" || fail "mode $mode summary"
  fi
done

# 4. Small-message latency (mode 4): round trips checked and timed.
if run latency TOTAL_DURATION=10 LOG_DURATION=10 DEBUG_MODE=1 NUM_KEY_PER_SERVER=10 -- 8 1 4 --json; then
  json_check latency summary 'mode == 4 and len == 8 and requests == 100 and 0 < lat_us_p50 <= lat_us_p99' \
    && pass "latency summary" || fail "latency summary"
fi

# 5. Slurm mode: four tasks started the way srun would (1 server, 2 workers),
#    each computing its role and the scheduler's address on its own.
pids=()
port=$(job_free_port)
for task in 0 1 2 3; do
  SLURM_PROCID=$task SLURM_NTASKS=4 SLURM_NODELIST='localhost' SLURM_JOB_ID=1234 \
    python3 "$LAUNCH" --slurm -s 1 --port "$port" --timeout 120 --env TOTAL_DURATION=5 --env NUM_KEY_PER_SERVER=4 \
    -- "$BENCH" 4096 1 1 >"$TMP/slurm$task.out" 2>&1 &
  pids+=($!)
done
slurm_ok=1
for p in "${pids[@]}"; do wait "$p" || slurm_ok=0; done
if [ $slurm_ok -eq 1 ] && grep -q '^\[worker 1\] \[0\]	summary: 5 rounds of 4 keys' "$TMP/slurm3.out"; then
  pass "slurm tasks"
else
  fail "slurm tasks"
  cat "$TMP"/slurm*.out
fi

# 6. IPv6 loopback, 2 servers x 2 workers, data checked.
LOPTS=(-s 2 -w 2 --host ::1)
if run ipv6 TOTAL_DURATION=5 NUM_KEY_PER_SERVER=4 DEBUG_MODE=1 -- 4096 1 1; then
  for w in 0 1; do
    grep -q "^\[worker $w\] \[0\]	DEBUG_MODE: $((5 * 8 * 4096)) pulled bytes checked$" "$TMP/ipv6.out" \
      || fail "ipv6: worker $w did not check its data"
  done
fi
# 6a. IPv6 over the fabric van (libfabric's tcp provider).
if run ipv6_fabric DMLC_ENABLE_RDMA=fabric "FI_PROVIDER=tcp;ofi_rxm" TOTAL_DURATION=5 NUM_KEY_PER_SERVER=2 DEBUG_MODE=1 -- 4096 1 1; then
  for w in 0 1; do
    grep -q "^\[worker $w\] \[0\]	DEBUG_MODE: $((5 * 4 * 4096)) pulled bytes checked$" "$TMP/ipv6_fabric.out" \
      || fail "ipv6 fabric: worker $w did not check its data"
  done
fi

# 6b. ENABLE_RECV_BUFFER: every push lands in the buffer its server
# registered for (worker rank, key); the pulled data is still right.
if run recvbuf ENABLE_RECV_BUFFER=1 TOTAL_DURATION=5 NUM_KEY_PER_SERVER=4 DEBUG_MODE=1 -- 65536 1 1; then
  for s in 0 1; do
    line=$(grep "^\[server $s\] server: ENABLE_RECV_BUFFER: " "$TMP/recvbuf.out")
    if [[ $line =~ :\ ([0-9]+)\ of\ ([0-9]+)\ pushes ]] && [ "${BASH_REMATCH[2]}" -gt 0 ] &&
      [ "${BASH_REMATCH[1]}" -eq "${BASH_REMATCH[2]}" ]; then
      pass "recvbuf: server $s: every push landed in its registered buffer"
    else
      fail "recvbuf: server $s: $line"
    fi
  done
  for w in 0 1; do
    grep -q "^\[worker $w\] \[0\]	DEBUG_MODE: $((5 * 8 * 65536)) pulled bytes checked$" "$TMP/recvbuf.out" \
      || fail "recvbuf: worker $w did not check its data"
  done
fi
LOPTS=(-s 1 -w 1)

# 7. BENCHMARK_NTHREAD: one KV worker per thread, each reports and checks.
if run threads BENCHMARK_NTHREAD=2 TOTAL_DURATION=5 NUM_KEY_PER_SERVER=4 DEBUG_MODE=1 -- 4096 1 1; then
  for t in 0 1; do
    grep -q "^\[worker 0\] \[$t\]	DEBUG_MODE: $((5 * 4 * 4096)) pulled bytes checked$" "$TMP/threads.out" \
      || fail "thread $t did not check its data"
  done
fi

# 8. Bad arguments: usage, exit 2, before touching the network.
"$BENCH" 100 10 9 >"$TMP/bad.out" 2>&1
[ $? -eq 2 ] && grep -q usage "$TMP/bad.out" && pass "bad mode rejected" || fail "bad mode not rejected"

if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"

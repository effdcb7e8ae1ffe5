#!/usr/bin/env bash
# Short runs of the AF benchmarks through test_benchmark_af.sh (every
# process on this host): the latency lines as StepMesh's DumpLatency, the
# machine-readable lines, the traced stages, every pulled value verified,
# and a BENCHMARK_WORKER_NUMBER that disagrees with the job refused.
#
#   test_benchmark_af_smoke_test.sh SCRIPT LAUNCHER BENCH VERIFY_BENCH
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
script=$1
export LAUNCHER=$2
bench=$3 verify=$4
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/afbench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAILED: $*"; failed=1; }

# run NAME VAN BIN [VAR=VALUE...]: the benchmark job, bounded in time.
run() {
  local name=$1 van=$2 bin=$3
  shift 3
  (
    job_use_van "$van" || exit 2
    export BENCHMARK_WARMUP=2 BENCHMARK_ITER=20 BENCHMARK_BATCH_START=1
    export BENCHMARK_BATCH_END=128 BENCHMARK_BATCH_STEP=127 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1
    for kv in "$@"; do export "${kv?}"; done
    BIN=$bin timeout 120 bash "$script"
  ) >"$dir/$name.log" 2>&1
  local rc=$?
  grep -v " info " "$dir/$name.log" | sed "s/^/[$name] /"
  return $rc
}

latency='batch latency overall: mean=[0-9.]*us, min=[0-9.]*us, p50=[0-9.]*us, p90=[0-9.]*us, p99=[0-9.]*us, max=[0-9.]*us$'

# 1. 1A1F over shm with tracing: 3 operations x 2 batch sizes, 6 stages each.
if run trace shm "$bench" STEPMESH_ENABLE_TRACE=1; then
  log=$dir/trace.log
  for op in push pull pushpull; do
    n=$(grep -c "\] $op $latency" "$log")
    [ "$n" -eq 2 ] || fail "$n '$op batch latency overall' lines, expected 2"
  done
  for st in req_send server_queue process rsp_send net_cost rsp_wake; do
    n=$(grep -c "pushpull stage $st overall: mean=" "$log")
    [ "$n" -eq 2 ] || fail "$n '$st' stage lines, expected 2"
  done
  python3 - "$log" <<'PY' || fail "the AF_BENCH lines do not hold together"
import json, sys
rows = [json.loads(l.split("AF_BENCH ", 1)[1]) for l in open(sys.argv[1]) if "AF_BENCH {" in l]
assert len(rows) == 6, len(rows)
assert sorted({(r["op"], r["batch"]) for r in rows}) == sorted(
    (op, b) for op in ("push", "pull", "pushpull") for b in (1, 128)), rows
for r in rows:
    assert r["samples"] == 20 * 3, r
    assert 0 < r["min_us"] <= r["p50_us"] <= r["p90_us"] <= r["p99_us"] <= r["max_us"] * 1.02, r
    assert r["min_us"] <= r["mean_us"] <= r["max_us"], r
print("AF_BENCH lines: 6, consistent")
PY
  grep -q "PASS server 0: .* of .* push bytes into registered tensors" "$log" ||
    fail "no server PASS line"
else
  fail "the traced shm run exited non-zero"
fi

# 2. 2A2F over tcp, every pulled value verified.
if run verify tcp "$verify" DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 BENCHMARK_ITER=5 \
  BENCHMARK_BATCH_END=65 BENCHMARK_BATCH_STEP=32; then
  n=$(grep -c "PASS worker [01]: .*every pulled value verified" "$dir/verify.log")
  [ "$n" -eq 2 ] || fail "$n verified worker PASS lines, expected 2"
  grep -q "verify failed" "$dir/verify.log" && fail "a pull did not verify"
else
  fail "the verify run exited non-zero"
fi

# 3. A worker number the job does not have is refused.
if run mismatch tcp "$bench" BENCHMARK_WORKER_NUMBER=3; then
  fail "BENCHMARK_WORKER_NUMBER=3 with one worker ran"
elif ! grep -q "BENCHMARK_WORKER_NUMBER is 3 but the job has 1 workers" "$dir/mismatch.log"; then
  fail "the refusal does not say why"
fi

[ $failed -eq 0 ] && echo "PASSED"
exit $failed

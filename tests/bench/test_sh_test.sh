#!/usr/bin/env bash
# tests/test.sh, StepMesh's benchmark driver, on the emulated device: every
# pairing of host and device memory (cpu2cpu, cpu2gpu, gpu2gpu, gpu2cpu) for
# push-pull with every pulled byte checked (DEBUG_MODE), push-only and
# pull-only, a job split into its `local` and `remote` halves, and bad
# arguments refused. Each job ends by itself after a few rounds.
#
#   test_sh_test.sh TEST_SH TEST_BENCHMARK
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"

TEST_SH=${1:?test.sh}
export TEST_BENCHMARK=${2:?test_benchmark}
export PS_BENCH_DEVICE_KIND=emu DEBUG_MODE=1 TOTAL_DURATION=20 LOG_DURATION=10
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/test_sh.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# job NAME ARGS...: a joint job; its output in $TMP/NAME.out.
job() {
  local name=$1
  shift
  DMLC_PS_ROOT_PORT=$(job_free_port) timeout 120 "$TEST_SH" joint "$@" >"$TMP/$name.out" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "summary: 20 rounds of 4 keys x 65536 bytes" "$TMP/$name.out"; then
    fail "$name: status $rc"
    tail -20 "$TMP/$name.out"
    return 1
  fi
  echo "ok: $name"
}

for pairing in cpu2cpu cpu2gpu gpu2gpu gpu2cpu; do
  job "push_pull $pairing" 65536 4 push_pull "$pairing" &&
    { grep -q "DEBUG_MODE: 5242880 pulled bytes checked" "$TMP/push_pull $pairing.out" ||
      fail "push_pull $pairing: the pulled bytes were not all checked"; }
done
job "push_only gpu2gpu" 65536 4 push_only gpu2gpu
job "pull_only gpu2cpu" 65536 4 pull_only gpu2cpu

# The two halves of a job, as on two hosts (here both on 127.0.0.1).
port=$(job_free_port)
DMLC_PS_ROOT_PORT=$port timeout 120 "$TEST_SH" local 65536 4 push_pull cpu2gpu \
  >"$TMP/local.out" 2>&1 &
local_pid=$!
DMLC_PS_ROOT_PORT=$port timeout 120 "$TEST_SH" remote 65536 4 push_pull cpu2gpu \
  >"$TMP/remote.out" 2>&1
remote_rc=$?
wait "$local_pid"
local_rc=$?
if [ "$local_rc" -ne 0 ] || [ "$remote_rc" -ne 0 ] ||
  ! grep -q "DEBUG_MODE: 5242880 pulled bytes checked" "$TMP/remote.out"; then
  fail "local + remote: status $local_rc and $remote_rc"
  tail -10 "$TMP/local.out" "$TMP/remote.out"
else
  echo "ok: local + remote"
fi

for bad in "joint 65536 4 push_pull cpu2tpu" "joint 65536 4 pushpull cpu2cpu" \
  "both 65536 4 push_pull cpu2cpu" "joint 0 4 push_pull cpu2cpu" "joint 65536 4"; do
  # shellcheck disable=SC2086
  "$TEST_SH" $bad >/dev/null 2>&1
  rc=$?
  [ "$rc" -eq 2 ] || fail "'$bad' exited $rc, not 2"
done

if [ "$failures" -ne 0 ]; then
  echo "FAILED: $failures checks"
  exit 1
fi
echo "PASSED: tests/test.sh, every pairing and operation, split and joint"

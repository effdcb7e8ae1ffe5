#!/usr/bin/env bash
# Registered receive buffers over the ibverbs van: a 2x2 test_benchmark job
# on the RDMA interface with ENABLE_RECV_BUFFER (each server registers a
# buffer per worker rank and key, ps_kv_server_register_recv_buffer) and
# 64 KB values, which go by rendezvous. Every push must land in its buffer,
# written there by the sender's NIC (each server's van counts the segments
# it received in place), and the workers check every pulled byte. Without
# an RDMA device it ends as skipped (job_skip).
#
#   recv_buffer_rdma_test.sh TEST_ENV LAUNCHER BENCHMARK
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
test_env=$1 launcher=$2 bench=$3

job_rdma_host "$test_env"
out=$(mktemp "${TEST_TMPDIR:-/tmp}/recvbuf.XXXXXX")
python3 "$launcher" -s 2 -w 2 --host "$JOB_RDMA_HOST" --timeout 300 --kill-grace 2 \
  --env DMLC_ENABLE_RDMA=ibverbs --env PS_LOG_LEVEL=info --env ENABLE_RECV_BUFFER=1 \
  --env TOTAL_DURATION=5 --env NUM_KEY_PER_SERVER=4 --env DEBUG_MODE=1 \
  -- "$bench" 65536 1 1 >"$out" 2>&1
rc=$?
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[ $rc -eq 0 ] || fail "the job exited $rc"

for s in 0 1; do
  line=$(grep "^\[server $s\] server: ENABLE_RECV_BUFFER: " "$out")
  if [[ $line =~ :\ ([0-9]+)\ of\ ([0-9]+)\ pushes ]] && [ "${BASH_REMATCH[2]}" -gt 0 ] &&
    [ "${BASH_REMATCH[1]}" -eq "${BASH_REMATCH[2]}" ]; then
    pushes=${BASH_REMATCH[2]}
    echo "ok: server $s: all $pushes pushes landed in their registered buffers"
  else
    fail "server $s: ${line:-no ENABLE_RECV_BUFFER line}"
    continue
  fi
  # The van's closing line: segments written straight into those buffers.
  van=$(grep "^\[server $s\] .*ibverbs van closes: " "$out")
  if [[ $van =~ ([0-9]+)\ segments\ received\ in\ place ]] && [ "${BASH_REMATCH[1]}" -eq "$pushes" ]; then
    echo "ok: server $s: ${BASH_REMATCH[1]} pushes written in place by the NIC, none copied"
  else
    fail "server $s: not every push was received in place: ${van:-no closing line of the van}"
  fi
done
for w in 0 1; do
  grep -q "^\[worker $w\] \[0\]	DEBUG_MODE: $((5 * 8 * 65536)) pulled bytes checked$" "$out" ||
    fail "worker $w did not check its data"
done
if [ $failures -ne 0 ]; then
  echo "--- job output ($out)"
  tail -n 200 "$out"
  exit 1
fi
echo "PASS"

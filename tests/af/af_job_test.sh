#!/usr/bin/env bash
# Runs one AF job (a scheduler, S servers, W workers on 127.0.0.1) over a
# van and checks that every process exited 0 with its PASS line and that
# every worker printed "Batch b: ALL PASS" for every batch size.
#
#   af_job_test.sh LAUNCHER VAN WORKERS SERVERS TIME_LIMIT_S PROGRAM [ARGS...]
#
# VAN: tcp, shm, fabric (tcp;ofi_rxm), ucx (UCX_TLS=tcp) or ucx_sm
# (UCX_TLS=sm: data through shared memory). The log must name the van.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
launcher=$1 van=$2 workers=$3 servers=$4 limit=$5
shift 5

case $van in
  ucx_sm) job_use_van ucx && export UCX_TLS=sm ;;
  fabric) job_use_van fabric && export PS_FABRIC_PROVIDER="$FI_PROVIDER" ;;
  *) job_use_van "$van" ;;
esac || exit 2
export PS_VERBOSE=1

batches=4
args=("$@")
for ((i = 1; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = "--batches" ] && batches=${args[i + 1]}
done

dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/af.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for attempt in 1 2; do
  log="$dir/job.$attempt.log"
  python3 "$launcher" -s "$servers" -w "$workers" --timeout "$limit" -- "$@" >"$log" 2>&1
  rc=$?
  # The launcher picks a free port; another process may take it first.
  if [ "$rc" -ne 0 ] && [ "$attempt" -eq 1 ] && grep -qi "address already in use" "$log"; then
    echo "== port taken, retrying once"
    continue
  fi
  break
done
grep -v " info " "$log" | head -200

expected=$((workers + servers + 1))
passes=$(grep -c "PASS \(scheduler\|server\|worker\)" "$log")
fails=$(grep -c "FAIL " "$log")
batch_passes=$(grep -c "Batch [0-9]*: ALL PASS" "$log")
batch_fails=$(grep -c "Batch [0-9]*: FAILED" "$log")
echo "== exit $rc, $passes of $expected PASS lines, $batch_passes of $((workers * batches)) batch passes"
if [ "$rc" -ne 0 ]; then
  echo "FAILED: the job exited $rc"
  exit 1
fi
if [ "$passes" -ne "$expected" ] || [ "$fails" -ne 0 ]; then
  echo "FAILED: expected $expected PASS lines and no FAIL line"
  exit 1
fi
if [ "$batch_passes" -ne $((workers * batches)) ] || [ "$batch_fails" -ne 0 ]; then
  echo "FAILED: expected $((workers * batches)) 'ALL PASS' batch lines"
  exit 1
fi
want_van=${van%_sm}
if ! grep -q "(van $want_van)" "$log"; then
  echo "FAILED: the log does not show the $want_van van"
  grep -m3 "(van " "$log"
  exit 1
fi
echo "PASSED: ${workers}A${servers}F over $van"

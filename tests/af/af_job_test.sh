#!/usr/bin/env bash
# Runs one AF job (a scheduler, S servers, W workers on 127.0.0.1) over a
# van through tests/app's cluster_test.sh (every process exits 0 with its
# PASS line) and checks that every worker printed "Batch b: ALL PASS" for
# every batch size.
#
#   af_job_test.sh CLUSTER_TEST_SH LAUNCHER VAN WORKERS SERVERS TIME_LIMIT_S PROGRAM [ARGS...]
#
# VAN: tcp, shm, fabric (tcp;ofi_rxm), ucx (UCX_TLS=tcp) or ucx_sm
# (UCX_TLS=sm: data through shared memory). The log must name the van.
# CLUSTER_GROUP_SIZE (cluster_test.sh) makes WORKERS and SERVERS group
# counts: every worker instance checks its batches.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
cluster=$1 launcher=$2 van=$3 workers=$4 servers=$5 limit=$6
shift 6

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

out=$(bash "$cluster" "$launcher" "$workers" "$servers" "$limit" "$@" 2>&1)
rc=$?
grep -v " info " <<<"$out" | tail -300
[ "$rc" -eq 0 ] || exit 1

batch_passes=$(grep -c "Batch [0-9]*: ALL PASS" <<<"$out")
batch_fails=$(grep -c "Batch [0-9]*: FAILED" <<<"$out")
want=$((workers * ${CLUSTER_GROUP_SIZE:-1} * batches))
echo "== $batch_passes of $want batch passes"
if [ "$batch_passes" -ne "$want" ] || [ "$batch_fails" -ne 0 ]; then
  echo "FAILED: expected $want 'ALL PASS' batch lines"
  exit 1
fi
want_van=${van%_sm}
if ! grep -q "(van $want_van)" <<<"$out"; then
  echo "FAILED: the log does not show the $want_van van"
  exit 1
fi
echo "PASSED: ${workers}A${servers}F over $van"

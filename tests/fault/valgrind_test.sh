#!/usr/bin/env bash
# A small job (scheduler, 2 servers, 2 workers of fault_node, 30 rounds with
# every sum checked) with each process under valgrind memcheck: any invalid
# access, use of uninitialised memory or definite leak fails the test.
# Skips, saying so, when valgrind is not installed. Deadline: 600 s.
#
#   valgrind_test.sh FAULT_NODE VAN [BYTES [RDMA_TEST_ENV]]
#       VAN: tcp, shm, fabric, ucx, ibverbs; BYTES per value, 65536
#
# With small values (BYTES 16) the requests and answers of a van with a
# small lane (ucx, fabric) take it. ibverbs runs on the address of an RDMA
# interface that RDMA_TEST_ENV names (it skips, saying why, without one).
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
prog=$1 van=$2 bytes=${3:-65536} rdma_test_env=${4:-}
command -v valgrind >/dev/null || job_skip "valgrind is not installed"
host=127.0.0.1
if [ "$van" = ibverbs ]; then
  job_rdma_host "$rdma_test_env"
  host=$JOB_RDMA_HOST
fi
# Valgrind cannot run ASan or TSan binaries (their shadow memory); under
# those configs the sanitizer is the check.
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then
  job_skip "sanitizer build (valgrind runs on plain builds)"
fi
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/vg.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT

export DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 DMLC_PS_ROOT_URI=$host DMLC_PS_ROOT_PORT=$(job_free_port)
export DMLC_NODE_HOST=$host FAULT_ROUNDS=30 FAULT_BYTES=$bytes PS_START_TIMEOUT_MS=120000
job_use_van "$van" || exit 2
names=()
# --vgdb=no: valgrind's gdb server maps a file in /tmp, which a 9p /tmp
# (the soft-RoCE VM's) cannot map.
for node in "scheduler -1" "server 0" "server 1" "worker 0" "worker 1"; do
  read -r role rank <<<"$node"
  DMLC_ROLE=$role DMLC_RANK=$rank timeout 600 valgrind -q --vgdb=no --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite "$prog" >"$dir/$role$rank.log" 2>&1 &
  pids+=($!)
  names+=("$role$rank")
done
fail=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  rc=$?
  log="$dir/${names[$i]}.log"
  if [ $rc -ne 0 ] || ! grep -q "^PASS" "$log"; then
    echo "FAILED: ${names[$i]} exited $rc (99: valgrind found errors)"
    cat "$log"
    fail=1
  else
    grep "^PASS" "$log"
  fi
done
[ $fail -eq 0 ] && echo "PASSED: valgrind memcheck clean over $van"
exit $fail

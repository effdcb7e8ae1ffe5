#!/usr/bin/env bash
# StepMesh's benchmark driver, with its arguments and variables, for the
# scripts users already have: one job of a scheduler, a server and a worker
# running test_benchmark.
#
#   tests/test.sh (local|remote|joint) BYTES_PER_MSG MSG_COUNT \
#       (push_only|pull_only|push_pull) (cpu2cpu|cpu2gpu|gpu2gpu|gpu2cpu)
#
#   local   the scheduler and the server, here, at NODE_ONE_IP
#   remote  the worker, here, at NODE_TWO_IP, joining NODE_ONE_IP's job
#   joint   all three here (NODE_ONE_IP)
#
# MSG_COUNT is the keys per server (NUM_KEY_PER_SERVER); the operation picks
# test_benchmark's mode (push_only 2, pull_only 3, push_pull 1); the pairing
# says where the worker's buffers and the server's store live (worker side
# first: cpu2gpu is a CPU worker and a GPU server), through
# TEST_NUM_GPU_WORKER and TEST_NUM_GPU_SERVER. test_benchmark runs with
# BYTES_PER_MSG 100000 MODE, as upstream, for TOTAL_DURATION rounds (set it
# to end sooner). NODE_ONE_IP and NODE_TWO_IP default to 127.0.0.1,
# DMLC_PS_ROOT_PORT to 9123; the van comes from the usual DMLC_* variables.
# TEST_BENCHMARK names the binary (default: bazel-bin/tests/test_benchmark).
# Exit status: the first failing process's, else 0.
set -uo pipefail

usage() { sed -n 6,12p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -eq 5 ] || usage
where=$1 bytes=$2 count=$3 op=$4 pairing=$5
case $op in
  push_only) mode=2 ;;
  pull_only) mode=3 ;;
  push_pull) mode=1 ;;
  *) usage ;;
esac
case $pairing in
  cpu2cpu) gpu_worker=0 gpu_server=0 ;;
  cpu2gpu) gpu_worker=0 gpu_server=1 ;;
  gpu2gpu) gpu_worker=1 gpu_server=1 ;;
  gpu2cpu) gpu_worker=1 gpu_server=0 ;;
  *) usage ;;
esac
case $where in local | remote | joint) ;; *) usage ;; esac
[[ $bytes =~ ^[1-9][0-9]*$ && $count =~ ^[1-9][0-9]*$ ]] || usage

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TEST_BENCHMARK:-$root/bazel-bin/tests/test_benchmark}
[ -x "$bin" ] || { echo "test.sh: no $bin (bazel build //tests:test_benchmark, or set TEST_BENCHMARK)" >&2; exit 2; }

export DMLC_PS_ROOT_URI=${NODE_ONE_IP:-127.0.0.1}
export DMLC_PS_ROOT_PORT=${DMLC_PS_ROOT_PORT:-9123}
export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1
export NUM_KEY_PER_SERVER=$count TEST_NUM_GPU_WORKER=$gpu_worker TEST_NUM_GPU_SERVER=$gpu_server

pids=()
start() {  # start ROLE HOST
  DMLC_ROLE=$1 DMLC_NODE_HOST=$2 "$bin" "$bytes" 100000 "$mode" &
  pids+=($!)
}
case $where in
  local) start scheduler "$DMLC_PS_ROOT_URI"; start server "$DMLC_PS_ROOT_URI" ;;
  remote) start worker "${NODE_TWO_IP:-127.0.0.1}" ;;
  joint) start scheduler "$DMLC_PS_ROOT_URI"; start server "$DMLC_PS_ROOT_URI"
    start worker "$DMLC_PS_ROOT_URI" ;;
esac
trap 'kill "${pids[@]}" 2>/dev/null' INT TERM
rc=0
for p in "${pids[@]}"; do
  wait "$p" || { s=$?; [ "$rc" -ne 0 ] || rc=$s; }
done
exit "$rc"

#!/usr/bin/env bash
# The AF benchmark's figures for docs/PERF.md next to their references, all
# in one run (a program, not a test). Build first:
#   bazel build --config=opt //tests:test_benchmark_af //tests/shm:shm_ref_bench
#   tests/af/af_perf.sh "$(bazel info --config=opt bazel-bin)" [ITER]
# Prints, in this order:
#   the load average and the CPUs
#   references: shm_ref_bench spin ping-pong round trip and memcpy GB/s (the
#     shm van's floor for moving the bytes: spin round trip + bytes / memcpy);
#     ucx_perftest tag_lat (UCX_TLS=sm) one-way latency at the push and the
#     pull sizes of batch 1 and 128 (a push-pull's floor is their sum)
#   test_benchmark_af push-pull p50 / p99 for 1A1F batch 1 and 128 over shm
#   and over UCX (UCX_TLS=sm), and 2A2F and 4A2F over shm, busy-polling
#   (the default), with the AF_BENCH lines.
set -uo pipefail
bin=${1:?usage: af_perf.sh BAZEL_BIN [ITER]}
iter=${2:-500}
here=$(cd "$(dirname "$0")/../.." && pwd)
bench="$bin/tests/test_benchmark_af"
echo "== $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, commit $(git -C "$here" rev-parse --short HEAD)"

echo "== references"
"$bin/tests/shm/shm_ref_bench" pingpong --iters 100000
"$bin/tests/shm/shm_ref_bench" memcpy --mib 64 --reps 5
ucx_lat() { # SIZE: ucx_perftest tag_lat one-way typical latency (us), UCX_TLS=sm
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  UCX_TLS=sm timeout 60 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=sm timeout 60 ucx_perftest 127.0.0.1 -p "$port" -t tag_lat -s "$1" -n "$2" -w 50 2>&1 |
    awk '/Final:/ {print "ucx_perftest tag_lat size '"$1"': typical " $3 " us, average " $4 " us"}'
  wait "$srv" 2>/dev/null
}
for s in 7168 14336; do ucx_lat "$s" 5000; done
for s in 917504 1835008; do ucx_lat "$s" 500; done

# af JOB VAN WORKERS SERVERS BATCHES...: one benchmark job per batch size.
af() {
  local van=$1 w=$2 s=$3
  shift 3
  for b in "$@"; do
    echo "== ${w}A${s}F over $van, batch $b"
    (
      unset DMLC_ENABLE_UCX DMLC_PS_VAN_TYPE UCX_TLS
      case $van in
        shm) export DMLC_PS_VAN_TYPE=shm PS_JOB_ID="afperf-$$-$RANDOM" ;;
        ucx_sm) export DMLC_ENABLE_UCX=1 UCX_TLS=sm ;;
      esac
      BENCHMARK_WARMUP=50 BENCHMARK_ITER=$iter BENCHMARK_BATCH_START=$b BENCHMARK_BATCH_END=$b \
        BENCHMARK_BATCH_STEP=1 BENCHMARK_WORKER_NUMBER=$w \
        timeout 600 python3 "$here/tools/launch/ps_launch.py" -s "$s" -w "$w" --timeout 580 -- \
        "$bench" 2>&1 | grep -E "pushpull batch latency overall|AF_BENCH .*\"op\":\"pushpull\"|busy-poll"
    )
  done
}
af shm 1 1 1 128
af ucx_sm 1 1 1 128
af shm 2 2 1 128
af shm 4 2 1 128
echo "== $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"

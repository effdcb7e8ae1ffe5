#!/usr/bin/env bash
# The README's main command: installs what is missing, builds ps (optimised),
# prints what this machine offers, then runs a local job on loopback — a
# scheduler, 2 servers and 2 workers — through test_benchmark over a range of
# value sizes, with iperf3 and a raw TCP ping-pong as references measured in
# the same run. Prints the tables; writes CSV, JSON and a PNG plot to out/.
#
#   tools/run.sh [extra ps_sweep.py arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

./tools/install_deps.sh

echo "== building (bazel build -c opt)"
bazel build -c opt //tests:test_benchmark //tests/bench:tcp_pingpong //tools/ps_info
BIN=$(bazel info -c opt bazel-bin 2>/dev/null)

echo "== what this machine offers"
"$BIN/tools/ps_info/ps_info" -d

echo "== local cluster: 2 servers x 2 workers on loopback"
mkdir -p out
python3 tools/sweep/ps_sweep.py \
  --shapes 2x2 --modes 1,2 \
  --sizes 4K,64K,1M,4M \
  --bytes-per-job 512M \
  --bench "$BIN/tests/test_benchmark" \
  --pingpong "$BIN/tests/bench/tcp_pingpong" \
  --launcher tools/launch/ps_launch.py \
  --out out "$@"
bazel shutdown >/dev/null 2>&1 || true

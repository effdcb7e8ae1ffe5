# shellcheck shell=bash
# Sourced by the benchmark scripts here: sets `here` (the repository),
# `bench` (test_benchmark: the first argument, else where a plain
# `bazel build --config=opt //tests:test_benchmark` leaves it; OUTPUT_BASE
# picks a non-default bazel output base) and `launch` (the second
# argument, else tools/launch/ps_launch.py), and exits 2 without a
# test_benchmark.
here=$(cd "$(dirname "${BASH_SOURCE[1]}")/../.." && pwd)
if [ $# -ge 1 ]; then
  bench=$1
else
  out=$(cd "$here" && bazel ${OUTPUT_BASE:+--output_base=$OUTPUT_BASE} info --config=opt \
        output_path 2>/dev/null)
  bench=$out/k8-opt/bin/tests/test_benchmark
fi
launch=${2:-$here/tools/launch/ps_launch.py}
[ -x "$bench" ] || { echo "no test_benchmark at $bench" >&2; exit 2; }

#!/bin/sh
# Keeps tcp_van_bench working: a short run of every mode (both the van and
# raw sockets, one process and --fork) must finish and print its lines. No
# figures are checked; benchmarks are programs, not timed tests.
set -eu
bench="$1"
out=$("$bench" --seconds 0.2 --iters 200 --size 4096 --blocking)
echo "$out"
for want in "raw  push" "van  push" "raw  pingpong" "van  pingpong"; do
    echo "$out" | grep -q "^$want" || { echo "missing: $want" >&2; exit 1; }
done
out=$("$bench" --van --fork --busy --app-block --seconds 0.2 --iters 200 --size 65536)
echo "$out"
echo "$out" | grep -q "^van  push" || { echo "missing: van push (--fork)" >&2; exit 1; }
out=$("$bench" --van --inline --mode pingpong --iters 200 --repeat 2)
echo "$out"
echo "$out" | grep -q "^== median of 2: pingpong" || { echo "missing: median line" >&2; exit 1; }

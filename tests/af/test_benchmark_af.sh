#!/usr/bin/env bash
# Runs the AF benchmark (tests/af/test_benchmark_af.c) as StepMesh's
# test_benchmark_af.sh: the scheduler and the FFN servers on this host, the
# attention workers on WORKER_HOST (started over ssh by the launcher), or
# every process here when no host is given.
#
#   test_benchmark_af.sh [WORKER_HOST]
#
# Environment: DMLC_NUM_SERVER (1), DMLC_NUM_WORKER (1; also
# BENCHMARK_WORKER_NUMBER), BIN (the benchmark; default
# bazel-bin/tests/test_benchmark_af, or test_benchmark_af_verify),
# LAUNCHER (tools/launch/ps_launch.py), THIS_HOST (this host's address as
# WORKER_HOST reaches it; default the first of `hostname -I`), and every
# BENCHMARK_*, STEPMESH_*, DMLC_*, PS_*, UCX_*, FI_* variable set here is
# passed to every process.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$root/bazel-bin/tests/test_benchmark_af}
launcher=${LAUNCHER:-$root/tools/launch/ps_launch.py}
servers=${DMLC_NUM_SERVER:-1}
workers=${DMLC_NUM_WORKER:-1}
export BENCHMARK_WORKER_NUMBER=${BENCHMARK_WORKER_NUMBER:-$workers}

envs=()
while IFS='=' read -r k v; do
  case $k in
    BENCHMARK_* | STEPMESH_* | STEPAF_* | UCX_* | FI_* | PS_* | DMLC_ENABLE_* | DMLC_PS_VAN_TYPE)
      envs+=(--env "$k=$v") ;;
  esac
done < <(env)

if [ $# -eq 0 ]; then
  exec python3 "$launcher" -s "$servers" -w "$workers" "${envs[@]}" -- "$bin"
fi
worker_host=$1
this_host=${THIS_HOST:-$(hostname -I | awk '{print $1}')}
hostfile=$(mktemp)
trap 'rm -f "$hostfile"' EXIT
printf '%s scheduler\n%s server\n%s worker\n' "$this_host" "$this_host" "$worker_host" >"$hostfile"
python3 "$launcher" --hostfile "$hostfile" -s "$servers" -w "$workers" "${envs[@]}" \
  --remote-cwd "$PWD" -- "$bin"

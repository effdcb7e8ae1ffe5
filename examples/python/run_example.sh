#!/usr/bin/env bash
# Runs a Python example through the launcher with the package from the
# runfiles: run_example.sh LAUNCHER EXAMPLE [LAUNCHER OPTIONS] [-- EXAMPLE ARGS]
# (bazel run //examples/python:train_mlp -- -w 2 -s 1 --van shm -- --steps 30).
set -euo pipefail
launcher=$1 example=$2
shift 2
opts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
root=${RUNFILES_DIR:-$0.runfiles}/ps
[ -d "$root" ] || root=$PWD
export PYTHONPATH="$root/ps/python${PYTHONPATH:+:$PYTHONPATH}"
python=${PS_PYTHON:-/usr/bin/python3}
[ ${#opts[@]} -gt 0 ] || opts=(-s 1 -w 2)
exec "$python" "$launcher" --timeout "${PS_EXAMPLE_TIMEOUT_S:-300}" "${opts[@]}" -- \
  "$python" "$example" "$@"

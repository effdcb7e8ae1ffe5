#!/usr/bin/env bash
# bazel run -c opt //tests/python:bench_py_vs_c -- [--van tcp|shm] [--repeats N]
# Runs bench_py_vs_c.py with Debian's python3 and the package and
# test_benchmark built in the same configuration.
set -euo pipefail
bench=$1
shift
root=${RUNFILES_DIR:-$0.runfiles}/ps
export PYTHONPATH="$root/ps/python:$root/tests/python"
exec "${PS_PYTHON:-/usr/bin/python3}" "$root/tests/python/bench_py_vs_c.py" "$root/$bench" "$@"

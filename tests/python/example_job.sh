# Runs a Python example job for the example tests (sourced after
# tests/lib/job.sh): example_job RUN LAUNCHER EXAMPLE VAN LOG [ARGS...] runs
# RUN LAUNCHER EXAMPLE ARGS on VAN (bounded by 120 s), prints the log and
# exits 1 when the job failed. Skips without torch and numpy.
python=${PS_PYTHON:-/usr/bin/python3}
"$python" -c "import torch, numpy" 2>/dev/null || job_skip "$python lacks torch or numpy"
export RUNFILES_DIR="$TEST_SRCDIR"
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/python/sanitizer.sh"
py_sanitizer_env "$TEST_SRCDIR/$TEST_WORKSPACE/ps/python/ps/_ps.abi3.so"

example_job() {
  local run=$1 launcher=$2 example=$3 van=$4 log=$5
  shift 5
  job_use_van "$van"
  PS_EXAMPLE_TIMEOUT_S=120 "$run" "$launcher" "$example" "$@" >"$log" 2>&1
  local rc=$?
  cat "$log"
  [ "$rc" -eq 0 ] || { echo "FAILED: the $van job exited $rc"; exit 1; }
}

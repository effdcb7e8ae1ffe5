#!/usr/bin/env bash
# Runs the AF example through the launcher (2 attention workers, 2 FFN
# servers; tcp then shm) and checks that each worker reported every step
# within bfloat16 rounding of its local FFN and the job exited 0.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
run=$1 launcher=$2 example=$3
python=${PS_PYTHON:-/usr/bin/python3}
"$python" -c "import torch, numpy" 2>/dev/null || job_skip "$python lacks torch or numpy"
export RUNFILES_DIR="$TEST_SRCDIR"
steps=6
for van in tcp shm; do
  job_use_van "$van"
  log="$TEST_TMPDIR/af_toy.$van.log"
  PS_EXAMPLE_TIMEOUT_S=120 "$run" "$launcher" "$example" -s 2 -w 2 -- --steps "$steps" >"$log" 2>&1
  rc=$?
  cat "$log"
  [ "$rc" -eq 0 ] || { echo "FAILED: the $van job exited $rc"; exit 1; }
  for w in 0 1; do
    grep -q "worker $w of 2 joined over van $van" "$log" || { echo "FAILED: worker $w not on $van"; exit 1; }
    n=$(grep -cE "worker $w step [0-9]+: 16 tokens through 2 FFN servers, .* ok$" "$log")
    [ "$n" -eq "$steps" ] || { echo "FAILED: worker $w reported $n of $steps good steps ($van)"; exit 1; }
    grep -q "worker $w: all $steps steps matched the local FFN" "$log" ||
      { echo "FAILED: worker $w did not finish ($van)"; exit 1; }
  done
  ! grep -q WRONG "$log" || { echo "FAILED: a wrong FFN answer ($van)"; exit 1; }
  echo "PASSED $van"
done

#!/usr/bin/env bash
# Runs the AF example through the launcher (2 attention workers, 2 FFN
# servers; tcp then shm) and checks that each worker reported every step
# within bfloat16 rounding of its local FFN and the job exited 0.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/python/example_job.sh"
steps=6
for van in tcp shm; do
  log="$TEST_TMPDIR/af_toy.$van.log"
  example_job "$1" "$2" "$3" "$van" "$log" -s 2 -w 2 -- --steps "$steps"
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

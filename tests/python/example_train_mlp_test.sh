#!/usr/bin/env bash
# Runs the training example through the launcher (2 workers, 1 server; tcp
# then shm) and checks that each worker printed a finite loss for every step
# and that the loss went down.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/python/example_job.sh"
steps=12
for van in tcp shm; do
  log="$TEST_TMPDIR/train.$van.log"
  example_job "$1" "$2" "$3" "$van" "$log" -s 1 -w 2 -- --steps "$steps"
  for w in 0 1; do
    grep -q "worker $w of 2 joined over van $van" "$log" || { echo "FAILED: worker $w not on $van"; exit 1; }
    n=$(grep -cE "worker $w step [0-9]+ loss [0-9.]+$" "$log")
    [ "$n" -eq "$steps" ] || { echo "FAILED: worker $w printed $n of $steps losses ($van)"; exit 1; }
    first=$(grep -E "worker $w step 0 loss" "$log" | awk '{print $NF}')
    last=$(grep -E "worker $w step $((steps - 1)) loss" "$log" | awk '{print $NF}')
    "$python" -c "import sys; sys.exit(0 if float('$last') < float('$first') else 1)" ||
      { echo "FAILED: worker $w loss $first -> $last did not go down ($van)"; exit 1; }
  done
  echo "PASSED $van"
done

#!/usr/bin/env bash
# A KV job (tests/app's kv_check: every pulled byte and every sum checked)
# with PS_RESEND=1 and PS_DROP_MSG set by the test's environment: runs it
# through tests/app's job script, which requires every PASS line, then
# checks that messages were really dropped and resent, so that a sum that
# is right was not right by luck.
#
#   resend_job_test.sh CLUSTER_TEST_SH LAUNCHER WORKERS SERVERS LIMIT PROGRAM
set -uo pipefail
script=$1
shift
out=$(bash "$script" "$@" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || exit "$rc"
dropped=$(echo "$out" | sed -n 's/.*: \([0-9]*\) received data messages dropped on purpose.*/\1/p' |
  awk '{s += $1} END {print s + 0}')
resent=$(echo "$out" | sed -n 's/.*PS_RESEND: \([0-9]*\) resent.*/\1/p' | awk '{s += $1} END {print s + 0}')
echo "== PS_DROP_MSG=${PS_DROP_MSG:-0}: $dropped messages dropped on purpose, $resent resent"
if [ "$dropped" -eq 0 ] || [ "$resent" -lt "$dropped" ]; then
  echo "FAILED: expected messages dropped, and at least as many resent"
  exit 1
fi
echo "PASSED: every sum right with $dropped drops"

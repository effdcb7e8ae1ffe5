#!/usr/bin/env bash
# Runs a job script (tests/app/cluster_test.sh) and checks, besides its own
# verdict, what the job's log must and must not show — e.g. that the
# shared-memory van carried the job:
#
#   job_check.sh [+PATTERN:N | -PATTERN]... -- SCRIPT ARGS...
#
# +PATTERN:N  PATTERN (grep -E) appears in at least N lines
# -PATTERN    PATTERN appears in no line
set -uo pipefail
want=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  want+=("$1")
  shift
done
shift
out=$(mktemp "${TEST_TMPDIR:-/tmp}/job.XXXXXX")
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ $rc -ne 0 ]; then
  echo "FAILED: the job script exited $rc"
  exit 1
fi
fail=0
for w in "${want[@]}"; do
  case "$w" in
    +*)
      pat=${w#+}
      n=${pat##*:}
      pat=${pat%:*}
      got=$(grep -cE -- "$pat" "$out")
      if [ "$got" -lt "$n" ]; then
        echo "FAILED: '$pat' in $got lines, expected at least $n"
        fail=1
      fi
      ;;
    -*)
      pat=${w#-}
      if grep -qE -- "$pat" "$out"; then
        echo "FAILED: '$pat' must not appear:"
        grep -E -- "$pat" "$out" | head -5
        fail=1
      fi
      ;;
  esac
done
[ $fail -eq 0 ] && echo "PASSED: the job's log is as expected"
exit $fail

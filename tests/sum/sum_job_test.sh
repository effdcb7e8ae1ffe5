#!/usr/bin/env bash
# Runs one summation job (a scheduler, S servers, W workers on 127.0.0.1)
# through the launcher and checks that every process exited 0 and printed
# its PASS line.
#
#   sum_job_test.sh LAUNCHER WORKERS SERVERS TIME_LIMIT_S [K=V ...] -- PROGRAM [ARGS...]
#
# K=V pairs go to every process (--env). An argument @DIR@ is replaced by a
# fresh directory shared by the job. CLUSTER_GROUP_SIZE=G (1) makes WORKERS
# and SERVERS group counts of G instances, a process each.
set -uo pipefail
launcher=$1 workers=$2 servers=$3 limit=$4
shift 4
envs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  envs+=(--env "$1")
  shift
done
[ "${1:-}" = "--" ] && shift

dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/sumjob.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/shared"
args=()
for a in "$@"; do
  if [ "$a" = "@DIR@" ]; then args+=("$dir/shared"); else args+=("$a"); fi
done

group=${CLUSTER_GROUP_SIZE:-1}
expected=$(((workers + servers) * group + 1))
for attempt in 1 2; do
  log="$dir/job.$attempt.log"
  start=$(date +%s)
  python3 "$launcher" -s "$servers" -w "$workers" --group-size "$group" --timeout "$limit" \
    "${envs[@]}" -- "${args[@]}" \
    >"$log" 2>&1
  rc=$?
  cat "$log"
  # The launcher picks a free port; another process may take it before the
  # scheduler binds. That, and only that, is worth one more try.
  if [ "$rc" -ne 0 ] && [ "$attempt" -eq 1 ] && grep -qi "address in use\|address already in use" "$log"; then
    echo "== port taken, retrying once"
    rm -rf "$dir/shared" && mkdir -p "$dir/shared"
    continue
  fi
  break
done

passes=$(grep -c "PASS \(scheduler\|server\|worker\)" "$log")
fails=$(grep -c "FAIL " "$log")
echo "== exit $rc after $(( $(date +%s) - start )) s, $passes of $expected PASS lines, $fails FAIL lines"
if [ "$rc" -ne 0 ]; then
  echo "FAILED: the job exited $rc"
  exit 1
fi
if [ "$passes" -ne "$expected" ] || [ "$fails" -ne 0 ]; then
  echo "FAILED: expected $expected PASS lines and no FAIL line"
  exit 1
fi
echo "PASSED: ${workers} workers x ${servers} servers ${envs[*]:-}"

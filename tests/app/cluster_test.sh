#!/usr/bin/env bash
# Runs one job (a scheduler, S servers, W workers on 127.0.0.1) through the
# launcher and checks that every process exited 0 and printed its PASS line.
#
#   cluster_test.sh LAUNCHER WORKERS SERVERS TIME_LIMIT_S PROGRAM [ARGS...]
#
# An argument @DIR@ is replaced by a fresh directory shared by the job.
#
# Instance groups: CLUSTER_GROUP_SIZE=G (1) makes WORKERS and SERVERS group
# counts and expects a PASS line per instance. CLUSTER_GROUP_MODE says who
# starts the instances: "instance" (the launcher, a process each, with
# DMLC_NODE_RANK and DMLC_INSTANCE_ID), "instance-no-rank" (the same
# without DMLC_NODE_RANK: the scheduler assigns ranks by instance) or
# "whole-group" (a process per group runs its instances; pass the
# program's flag for it among ARGS).
set -uo pipefail
launcher=$1 workers=$2 servers=$3 limit=$4
shift 4
group=${CLUSTER_GROUP_SIZE:-1}
launch_args=()
case "${CLUSTER_GROUP_MODE:-instance}" in
  instance) launch_args=(--group-size "$group") ;;
  instance-no-rank) launch_args=(--group-size "$group" --no-rank) ;;
  whole-group) launch_args=(--env "DMLC_GROUP_SIZE=$group") ;;
  *) echo "unknown CLUSTER_GROUP_MODE ${CLUSTER_GROUP_MODE}"; exit 2 ;;
esac

dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/cluster.XXXXXX")
trap 'rm -rf "$dir"' EXIT
args=()
for a in "$@"; do
  if [ "$a" = "@DIR@" ]; then
    mkdir -p "$dir/shared"
    args+=("$dir/shared")
  else
    args+=("$a")
  fi
done

expected=$(((workers + servers) * group + 1))
for attempt in 1 2; do
  log="$dir/job.$attempt.log"
  python3 "$launcher" -s "$servers" -w "$workers" "${launch_args[@]}" --timeout "$limit" \
    -- "${args[@]}" >"$log" 2>&1
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
echo "== exit $rc, $passes of $expected PASS lines, $fails FAIL lines"
if [ "$rc" -ne 0 ]; then
  echo "FAILED: the job exited $rc"
  exit 1
fi
if [ "$passes" -ne "$expected" ] || [ "$fails" -ne 0 ]; then
  echo "FAILED: expected $expected PASS lines and no FAIL line"
  exit 1
fi
if [ "$group" -gt 1 ]; then
  echo "PASSED: ${workers} worker groups x ${servers} server groups of ${group} instances"
else
  echo "PASSED: ${workers} workers x ${servers} servers"
fi

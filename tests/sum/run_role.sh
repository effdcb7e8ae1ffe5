#!/usr/bin/env bash
# One process of a job whose scheduler and servers run the ready program
# tools/sum_server and whose workers run a check program:
#
#   run_role.sh SUM_SERVER WORKER_PROGRAM [ARGS...]
#
# For the scheduler and servers it prints a PASS line when sum_server
# exited 0 (its own summary line is kept above it).
set -uo pipefail
server=$1 program=$2
shift 2
if [ "${DMLC_ROLE:-}" = "worker" ]; then
  exec "$program" "$@"
fi
out=$("$server" --serve-timeout-s 300)
rc=$?
echo "$out"
if [ "$rc" -eq 0 ] && grep -q "^sum_server: .* done" <<<"$out"; then
  echo "PASS ${DMLC_ROLE} ${DMLC_RANK:-0}: tools/sum_server exited 0"
else
  echo "FAIL ${DMLC_ROLE} ${DMLC_RANK:-0}: tools/sum_server exited $rc"
  exit 1
fi

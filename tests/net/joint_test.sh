#!/usr/bin/env bash
# DMLC_ROLE=joint: two joint processes (each a server and a worker) and a
# plain server form a job of 3 servers and 2 workers; each worker sends
# every server its rounds and checks every byte of every answer (po_node),
# and every process ends its flows and exits 0.
#
#   joint_test.sh PO_NODE
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
NODE=$PWD/${1:?po_node}
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/joint.XXXXXX")
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/net/po_job.sh"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export PO_ROUNDS=5

if ! po_job j joint@127.0.0.1 server@127.0.0.1 joint@127.0.0.1; then
  fail "the job failed"
  tail -n 5 "$TMP"/j.*
fi
for i in 0 2; do
  out="$TMP/j.$i"
  n=$(grep -c '^po_node: \(server\|worker\) [0-9]* started' "$out")
  [ "$n" -eq 2 ] || fail "joint process $i started $n postoffices instead of 2: $(cat "$out")"
  grep -q "^po_node: worker [0-9]*: 5 rounds with 3 servers ok" "$out" ||
    fail "joint process $i: its worker did not check its rounds: $(cat "$out")"
  grep -q "^po_node: joint ok" "$out" || fail "joint process $i did not end both flows"
done
grep -q "^po_node: server ok" "$TMP/j.1" || fail "the plain server did not end: $(cat "$TMP/j.1")"
workers=$(cat "$TMP"/j.[0-2] | grep -c "rounds with 3 servers ok")
[ "$workers" -eq 2 ] || fail "$workers workers checked their rounds instead of 2"

[ $failures -eq 0 ] && echo PASS
exit $((failures > 0))

#!/usr/bin/env bash
# BYTEPS_ENABLE_MIXED_MODE at the scheduler: a job of 3 servers and 2
# workers on three loopback addresses, each worker sharing its host with a
# server and one server alone (127.0.0.3). Without mixed mode the servers
# take ranks in host order; with it the lone server takes rank 0. Every
# worker checks every byte of every server's answers (po_node). A mixed
# job with three nodes on one host is refused at start.
#
#   mixed_mode_test.sh PO_NODE
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
NODE=$PWD/${1:?po_node}
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mixed.XXXXXX")
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/net/po_job.sh"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if ! python3 -c 'import socket; socket.socket().bind(("127.0.0.3", 0))' 2>/dev/null; then
  job_skip "cannot bind 127.0.0.3 (loopback beyond 127.0.0.1 not routed here)"
fi
export PO_ROUNDS=4

# server_rank NAME I: the rank process I of job NAME reported.
server_rank() {
  sed -n 's/^po_node: server [0-9]* started (rank \([0-9]*\),.*/\1/p' "$TMP/$1.$2"
}

LAYOUT=(server@127.0.0.1 worker@127.0.0.1 server@127.0.0.2 worker@127.0.0.2 server@127.0.0.3)
for mixed in 0 1; do
  if ! BYTEPS_ENABLE_MIXED_MODE=$mixed po_job "m$mixed" "${LAYOUT[@]}"; then
    fail "the job with BYTEPS_ENABLE_MIXED_MODE=$mixed failed"
    tail -n 5 "$TMP"/m$mixed.*
    continue
  fi
  for i in 1 3; do
    grep -q "^po_node: worker [0-9]*: 4 rounds with 3 servers ok" "$TMP/m$mixed.$i" ||
      fail "mixed=$mixed: worker process $i did not check its rounds: $(cat "$TMP/m$mixed.$i")"
  done
  got="$(server_rank m$mixed 0) $(server_rank m$mixed 2) $(server_rank m$mixed 4)"
  [ $mixed = 0 ] && want="0 1 2" || want="1 2 0"
  [ "$got" = "$want" ] && echo "ok: mixed=$mixed server ranks (127.0.0.1 .2 .3): $got" ||
    fail "mixed=$mixed: server ranks by host .1 .2 .3 are '$got', expected '$want'"
done

if BYTEPS_ENABLE_MIXED_MODE=1 po_job refused server@127.0.0.1 worker@127.0.0.1 server@127.0.0.1; then
  fail "a mixed job with three nodes on one host started"
elif ! grep -q "3 nodes registered from host 127.0.0.1" "$TMP/refused.sched"; then
  fail "the scheduler did not say why it refused: $(cat "$TMP/refused.sched")"
else
  echo "ok: three nodes on one host refused"
fi

[ $failures -eq 0 ] && echo PASS
exit $((failures > 0))

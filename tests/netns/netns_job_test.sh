#!/usr/bin/env bash
# A job across two network namespaces joined by a veth pair, each process
# finding its address from DMLC_INTERFACE (no DMLC_NODE_HOST): host A runs
# the scheduler and a server, host B two workers. kv_check verifies every
# pulled byte and sum. Needs root (ip netns); skips with the reason otherwise.
# Time limit: 60 s for the job; the namespaces are removed on every exit.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"

kv_check="$TEST_SRCDIR/$TEST_WORKSPACE/tests/app/kv_check"
tag="ps$$"
nsa="${tag}a" nsb="${tag}b"
limit=60

cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  job_netns_remove "$tag"
}
trap cleanup EXIT

# Addresses exist only inside these two namespaces.
why=$(job_netns_pair "$tag" 10.231.7.1 10.231.7.2)
case $? in
  0) ;;
  1) job_skip "$why" ;;
  *) echo "FAILED: setting up the namespaces: $why"; exit 1 ;;
esac

dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/netns.XXXXXX")
common=(DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=1 DMLC_PS_ROOT_URI=10.231.7.1 DMLC_PS_ROOT_PORT=9371
        PS_START_TIMEOUT_MS=30000 PS_VERBOSE=1)
run() { # run NS INTERFACE ROLE RANK
  ip netns exec "$1" env -u DMLC_NODE_HOST "${common[@]}" DMLC_INTERFACE="$2" DMLC_ROLE="$3" \
    ${4:+DMLC_RANK=$4} timeout "$limit" "$kv_check" >"$dir/$3$4.log" 2>&1
}
run "$nsa" "${tag}va" scheduler "" &
run "$nsa" "${tag}va" server 0 &
run "$nsb" "${tag}vb" worker 0 &
run "$nsb" "${tag}vb" worker 1 &

fail=0
for p in $(jobs -p); do wait "$p" || fail=1; done
for f in "$dir"/*.log; do sed "s|^|[$(basename "$f" .log)] |" "$f"; done

# Each process passed, and the workers' addresses are B's, found through the
# interface name.
passes=$(cat "$dir"/*.log | grep -c "PASS \(scheduler\|server\|worker\)")
[ "$passes" -eq 4 ] || { echo "FAILED: $passes of 4 PASS lines"; fail=1; }
grep -q "10.231.7.2" "$dir"/worker0.log "$dir"/scheduler.log || { echo "FAILED: host B's address not seen"; fail=1; }
[ $fail -eq 0 ] && echo "PASSED: a job across two network namespaces"
exit $fail

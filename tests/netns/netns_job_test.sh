#!/usr/bin/env bash
# A job across two network namespaces joined by a veth pair, each process
# finding its address from DMLC_INTERFACE (no DMLC_NODE_HOST): host A runs
# the scheduler and a server, host B two workers. kv_check verifies every
# pulled byte and sum. Needs root (ip netns); skips with the reason otherwise.
# Time limit: 60 s for the job; the namespaces are removed on every exit.
set -uo pipefail

kv_check="$TEST_SRCDIR/$TEST_WORKSPACE/tests/app/kv_check"
tag="ps$$"
nsa="${tag}a" nsb="${tag}b"
limit=60

skip() { echo "SKIPPED: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "not root: creating network namespaces needs root"
command -v ip >/dev/null || skip "no ip command (iproute2)"

cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
}
trap cleanup EXIT

ip netns add "$nsa" 2>/dev/null || skip "ip netns add failed (no namespace support here)"
ip netns add "$nsb" || exit 1
ip link add "${tag}va" type veth peer name "${tag}vb" || skip "no veth support"
ip link set "${tag}va" netns "$nsa" && ip link set "${tag}vb" netns "$nsb" || exit 1
# Addresses exist only inside these two namespaces.
ip -n "$nsa" addr add 10.231.7.1/24 dev "${tag}va" && ip -n "$nsb" addr add 10.231.7.2/24 dev "${tag}vb" || exit 1
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
ip -n "$nsa" link set "${tag}va" up && ip -n "$nsb" link set "${tag}vb" up || exit 1

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

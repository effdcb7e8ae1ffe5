#!/usr/bin/env bash
# A mixed job through the composed van ("ipc"): two "hosts" — this network
# namespace and a fresh one joined by a veth pair — with a scheduler, a
# server and a worker here, and a server and a worker there. Peers on the
# same side must talk through shared memory, peers on different sides
# through TCP, and kv_check must verify every byte and sum.
#
#   mixed_netns_test.sh KV_CHECK [LIMIT_S]
#
# Needs root and `ip netns` (tag "local": Bazel's sandbox cannot create
# namespaces); skips with the reason otherwise.
set -uo pipefail
prog=$1 limit=${2:-120}

skip() { echo "SKIPPED: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create a network namespace"
command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"

tag=$$
ns="psshm$tag"
va="vpsa$tag" vb="vpsb$tag"
net="10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
here="$net.1" there="$net.2"
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mixed.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip link del "$va" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

ip netns add "$ns" 2>"$dir/err" || skip "ip netns add failed: $(cat "$dir/err")"
ip link add "$va" type veth peer name "$vb" || exit 1
ip link set "$vb" netns "$ns" || exit 1
ip addr add "$here/24" dev "$va" && ip link set "$va" up || exit 1
ip netns exec "$ns" ip addr add "$there/24" dev "$vb" || exit 1
ip netns exec "$ns" ip link set "$vb" up || exit 1
ip netns exec "$ns" ip link set lo up || exit 1

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("'"$here"'",0)); print(s.getsockname()[1])')
ls -A /dev/shm | sort >"$dir/shm.before"
export DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 DMLC_PS_ROOT_URI=$here DMLC_PS_ROOT_PORT=$port
export DMLC_PS_VAN_TYPE=ipc PS_VERBOSE=1 PS_JOB_ID="mixed-$tag"
unset DMLC_ENABLE_RDMA DMLC_ENABLE_UCX

start() { # NAME ROLE HOST [netns]
  if [ $# -eq 4 ]; then
    DMLC_ROLE=$2 DMLC_NODE_HOST=$3 ip netns exec "$4" "$prog" >"$dir/$1.log" 2>&1 &
  else
    DMLC_ROLE=$2 DMLC_NODE_HOST=$3 "$prog" >"$dir/$1.log" 2>&1 &
  fi
  pids+=($!)
  eval "pid_$1=$!"
}
start scheduler scheduler "$here"
# Everyone else after the scheduler listens, so that the routes do not
# depend on who started first.
for _ in $(seq 100); do grep -q "listening as" "$dir/scheduler.log" && break; sleep 0.1; done
start server0 server "$here"
start worker0 worker "$here"
start server1 server "$there" "$ns"
start worker1 worker "$there" "$ns"

fail=0
end=$((SECONDS + limit))
for name in worker0 worker1 server0 server1 scheduler; do
  pid_var="pid_$name"
  pid=${!pid_var}
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAILED: $name still runs after ${limit} s"
    fail=1
    continue
  fi
  wait "$pid"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "^PASS" "$dir/$name.log"; then
    echo "FAILED: $name exited $rc without its PASS line"
    fail=1
  fi
done
for f in scheduler server0 worker0 server1 worker1; do sed "s/^/[$f] /" "$dir/$f.log"; done >"$dir/all.log"
grep -E "PASS|FAIL|reached through|error" "$dir/all.log"

# Workers and servers: each side's pair through shared memory (2 lines per
# pair), across the sides through TCP.
pair='^\[(server|worker)[01]\] .* node (8|9|1[0-9]) \(.*\) is reached through'
shm=$(grep -cE "$pair shared memory" "$dir/all.log")
tcp=$(grep -cE "$pair tcp" "$dir/all.log")
if [ "$shm" -ne 4 ] || [ "$tcp" -ne 4 ]; then
  echo "FAILED: worker/server routes: $shm through shared memory, $tcp through tcp (want 4 and 4)"
  fail=1
fi
ls -A /dev/shm | sort >"$dir/shm.after"
# Other programs may add files meanwhile: only those named after ours count.
ours="(^|[^0-9])($(IFS='|'; echo "${pids[*]}"))([^0-9]|\$)|^ps|ps-shm"
if comm -13 "$dir/shm.before" "$dir/shm.after" | grep -E "$ours"; then
  echo "FAILED: the job left the files above in /dev/shm"
  fail=1
fi
[ $fail -eq 0 ] && echo "PASSED: same-side peers through shared memory, the others through TCP, every byte checked"
exit $fail

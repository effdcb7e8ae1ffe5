#!/usr/bin/env bash
# A mixed job through the composed van ("ipc"): two "hosts" — two network
# namespaces joined by a veth pair — with a scheduler, a server and a
# worker on one, and a server and a worker on the other. Peers on the
# same side must talk through shared memory, peers on different sides
# through TCP, and kv_check must verify every byte and sum.
#
#   mixed_netns_test.sh KV_CHECK [LIMIT_S]
#
# Needs root and `ip netns` (tag "local": Bazel's sandbox cannot create
# namespaces); skips with the reason otherwise.
set -uo pipefail
prog=$1 limit=${2:-120}
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"

tag="pm$$"
nsa="${tag}a" nsb="${tag}b"
net="10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
here="$net.1" there="$net.2"
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mixed.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  job_netns_remove "$tag"
  rm -rf "$dir"
}
trap cleanup EXIT

why=$(job_netns_pair "$tag" "$here" "$there")
case $? in 0) ;; 1) job_skip "$why" ;; *) echo "FAILED: setting up the namespaces: $why"; exit 1 ;; esac
port=9375 # the namespaces are new: every port is free there
job_shm_snapshot "$dir/shm.before"
export DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 DMLC_PS_ROOT_URI=$here DMLC_PS_ROOT_PORT=$port
export DMLC_PS_VAN_TYPE=ipc PS_VERBOSE=1 PS_JOB_ID="mixed-$tag"
unset DMLC_ENABLE_RDMA DMLC_ENABLE_UCX

start() { # NAME ROLE HOST NETNS
  DMLC_ROLE=$2 DMLC_NODE_HOST=$3 ip netns exec "$4" "$prog" >"$dir/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
}
start scheduler scheduler "$here" "$nsa"
# Everyone else after the scheduler listens, so that the routes do not
# depend on who started first.
job_wait_for "$dir/scheduler.log" "listening as" 10
start server0 server "$here" "$nsa"
start worker0 worker "$here" "$nsa"
start server1 server "$there" "$nsb"
start worker1 worker "$there" "$nsb"

fail=0
end=$((SECONDS + limit))
for name in worker0 worker1 server0 server1 scheduler; do
  pid_var="pid_$name"
  job_wait_pid "${!pid_var}" "$end"
  rc=$?
  if [ $rc -eq 124 ]; then
    echo "FAILED: $name still runs after ${limit} s"
    fail=1
    continue
  fi
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
if ! job_shm_leaks "$dir/shm.before" "${pids[@]}"; then
  echo "FAILED: the job left the files above in /dev/shm"
  fail=1
fi
[ $fail -eq 0 ] && echo "PASSED: same-side peers through shared memory, the others through TCP, every byte checked"
exit $fail

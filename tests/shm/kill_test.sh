#!/usr/bin/env bash
# kill -9 of a co-located process in a job on one host: 2 servers and 2
# workers run kill_check; once the workers loop, server 1 gets SIGKILL. The
# others must end on their own (bounded), each with its PASS line, and the
# job must leave nothing behind: no new file in /dev/shm of its processes,
# no rendezvous socket of the job. While they run, the processes must map
# their shared memory from memfds (the van in use) and nothing from
# /dev/shm. Other programs on the host may add and remove /dev/shm files
# meanwhile: only new files named after the job's processes (or ps) count.
#
#   kill_test.sh KILL_CHECK VAN [LIMIT_S]
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
prog=$1 van=$2 limit=${3:-90}
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/kill.XXXXXX")
job="killtest-$$-$RANDOM"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT

port=$(job_free_port)
job_shm_snapshot "$dir/shm.before"
export DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port
export DMLC_NODE_HOST=127.0.0.1 PS_JOB_ID=$job DMLC_PS_VAN_TYPE=$van
export KILL_CHECK_DONE=$dir/done
unset DMLC_ENABLE_RDMA DMLC_ENABLE_UCX
# Quicker failure detection than the defaults would not change the outcome,
# only its time; keep the defaults.

start() { # NAME ROLE RANK
  DMLC_ROLE=$2 DMLC_RANK=$3 "$prog" >"$dir/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
}
start scheduler scheduler -1
start server0 server 0
start server1 server 1
start worker0 worker 0
start worker1 worker 1

show() { for f in scheduler server0 server1 worker0 worker1; do sed "s/^/[$f] /" "$dir/$f.log"; done; }

if ! job_wait_for "$dir/worker0.log" looping 60 || ! job_wait_for "$dir/worker1.log" looping 60; then
  show
  echo "FAILED: the workers never got going"
  exit 1
fi
for name in scheduler server0 server1 worker0 worker1; do
  pid_var="pid_$name"
  maps=/proc/${!pid_var}/maps
  if grep -q " /dev/shm/" "$maps"; then
    echo "FAILED: $name maps files of /dev/shm:"; grep " /dev/shm/" "$maps"; exit 1
  fi
  if [ "$name" != scheduler ] && ! grep -q "memfd:ps-shm" "$maps"; then
    echo "FAILED: $name maps no shared memory of ps: is the shm van in use?"; exit 1
  fi
done
echo "== killing server 1 (pid $pid_server1) with SIGKILL"
kill -9 "$pid_server1"

fail=0
end=$((SECONDS + limit))
for name in worker0 worker1 scheduler server0 server1; do
  [ "$name" = scheduler ] && touch "$KILL_CHECK_DONE"
  pid_var="pid_$name"
  job_wait_pid "${!pid_var}" "$end"
  rc=$?
  if [ $rc -eq 124 ]; then
    echo "FAILED: $name still runs after ${limit} s (a hang)"
    fail=1
    continue
  fi
  if [ "$name" = server1 ]; then
    [ $rc -eq 137 ] || { echo "FAILED: server 1 exited $rc, not by SIGKILL"; fail=1; }
  elif [ $rc -ne 0 ] || ! grep -q "^PASS" "$dir/$name.log"; then
    echo "FAILED: $name exited $rc without its PASS line"
    fail=1
  fi
done
show

if ! job_shm_leaks "$dir/shm.before" "${pids[@]}"; then
  echo "FAILED: the job left the files above in /dev/shm"
  fail=1
fi
if grep -q "@ps-shm/$job/" /proc/net/unix; then
  echo "FAILED: rendezvous sockets of the job are left:"
  grep "@ps-shm/$job/" /proc/net/unix
  fail=1
fi
[ $fail -eq 0 ] && echo "PASSED: survivors ended with errors, not hangs; nothing left behind"
exit $fail

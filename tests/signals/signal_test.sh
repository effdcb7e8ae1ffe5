#!/usr/bin/env bash
# A job (scheduler, server, worker) over VAN; once the worker has checked 64
# rounds of sums, every process is sent SIG (SEGV, then in a second job
# TERM) and must die of it: wait reports 128 + n (139, 143), not the
# exit(1) of a library's handler. Before the kill, mid-job, each process is
# checked:
#   - it catches none of the fatal signals (SigCgt of /proc/PID/status:
#     SEGV BUS FPE ILL ABRT TERM INT QUIT);
#   - a job of the tcp, shm or ipc van maps none of the RDMA-family
#     libraries (libfabric, UCX, libibverbs, librdmacm, libinfinipath,
#     libpsm); a fabric or UCX worker maps its own (the check can fail).
# The exception: libfabric's shm provider, once it has an endpoint, handles
# SEGV BUS TERM INT to unlink its /dev/shm files, then puts back the
# disposition it found (ps's) and raises the signal again: it does not decide
# how the process dies (the status check below still holds), and removing
# it would leak those files on every crash, so fabric-shm allows those four.
# ucx-handlers runs UCX with the user asking for UCX's handlers
# (UCX_ERROR_SIGNALS, UCX_HANDLE_ERRORS=bt): the van must log that it
# restored the process's dispositions, and the process still dies of SIG.
#
#   signal_test.sh SIGNAL_NODE VAN
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
prog=$1 van=$2
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/signals.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
ulimit -c 0   # a SIGSEGV'd process would write a core; not here

# A sanitizer's runtime handles SIGSEGV, SIGBUS and SIGFPE itself (a report,
# then exit 1), before and whatever ps does.
if grep -qaE '__(asan|tsan)_init|__ubsan_handle_' "$prog"; then
  job_skip "signal_node is built with a sanitizer, whose runtime handles fatal signals"
fi

unset DMLC_ENABLE_RDMA DMLC_ENABLE_UCX DMLC_PS_VAN_TYPE BYTEPS_ENABLE_IPC DMLC_INTERFACE
unset UCX_ERROR_SIGNALS UCX_HANDLE_ERRORS IPATH_NO_BACKTRACE
own_lib=""
case $van in
  tcp) ;;
  shm) export DMLC_PS_VAN_TYPE=shm PS_JOB_ID="sig-$$-$RANDOM" ;;
  ipc) export BYTEPS_ENABLE_IPC=1 PS_JOB_ID="sig-$$-$RANDOM" ;;
  fabric-tcp) export DMLC_ENABLE_RDMA=fabric FI_PROVIDER="tcp;ofi_rxm"; own_lib=libfabric ;;
  fabric-shm) export DMLC_ENABLE_RDMA=fabric FI_PROVIDER=shm; own_lib=libfabric ;;
  ucx-tcp) export DMLC_ENABLE_UCX=1 UCX_TLS=tcp UCX_NET_DEVICES=lo; own_lib=libucp ;;
  ucx-sm) export DMLC_ENABLE_UCX=1 UCX_TLS=sm,self UCX_NET_DEVICES=lo; own_lib=libucp ;;
  ucx-handlers)
    export DMLC_ENABLE_UCX=1 UCX_TLS=tcp UCX_NET_DEVICES=lo PS_LOG_LEVEL=info
    export UCX_ERROR_SIGNALS=SEGV,BUS,ILL,FPE UCX_HANDLE_ERRORS=bt
    own_lib=libucp ;;
  *) echo "unknown van $van"; exit 2 ;;
esac
export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 SIG_LIMIT_MS=60000 PS_START_TIMEOUT_MS=30000

rdma_libs='lib(fabric|ucp|ucs|uct|ibverbs|rdmacm|infinipath|psm)[^/]*\.so'
# SIGINT 2, SIGQUIT 3, SIGILL 4, SIGABRT 6, SIGBUS 7, SIGFPE 8, SIGSEGV 11, SIGTERM 15
fatal_mask=0
for n in 2 3 4 6 7 8 11 15; do fatal_mask=$((fatal_mask | (1 << (n - 1)))); done
allowed_mask=0
if [ "$van" = fabric-shm ]; then
  for n in 2 7 11 15; do allowed_mask=$((allowed_mask | (1 << (n - 1)))); done
fi

fail=0
names=(scheduler server worker)
show() { for f in "${names[@]}"; do sed "s/^/[$f] /" "$dir/$f.log"; done; }

run_job() { # SIG
  local sig=$1 signo want
  signo=$(kill -l "$1")
  want=$((128 + signo))
  export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$(job_free_port)
  # The previous job's logs go first: a line of theirs would pass the waits
  # below while a process is still the shell about to exec the program (and
  # its SigCgt the shell's).
  rm -f "$dir/scheduler.log" "$dir/server.log" "$dir/worker.log"
  local -A pid
  DMLC_NODE_HOST=127.0.0.1 DMLC_ROLE=scheduler "$prog" >"$dir/scheduler.log" 2>&1 &
  pid[scheduler]=$!; pids+=($!)
  DMLC_NODE_HOST=127.0.0.1 DMLC_ROLE=server "$prog" >"$dir/server.log" 2>&1 &
  pid[server]=$!; pids+=($!)
  DMLC_NODE_HOST=127.0.0.1 DMLC_ROLE=worker "$prog" >"$dir/worker.log" 2>&1 &
  pid[worker]=$!; pids+=($!)
  if ! job_wait_for "$dir/worker.log" "^rounds 64" 60 ||
     ! job_wait_for "$dir/server.log" "^looping" 5 ||
     ! job_wait_for "$dir/scheduler.log" "^looping" 5; then
    show
    echo "FAILED: $van $sig: the job never got 64 rounds in"
    fail=1
    return
  fi
  local name
  for name in "${names[@]}"; do
    local p=${pid[$name]} cgt maps
    cgt=$(awk '/^SigCgt:/ {print $2}' "/proc/$p/status")
    if (( (16#$cgt & fatal_mask & ~allowed_mask) != 0 )); then
      echo "FAILED: $van: the $name catches fatal signals (SigCgt $cgt, fatal mask $(printf %x $fatal_mask))"
      fail=1
    fi
    maps=$(grep -oE "$rdma_libs" "/proc/$p/maps" | sort -u | tr '\n' ' ')
    if [ -z "$own_lib" ] && [ -n "$maps" ]; then
      echo "FAILED: $van: the $name maps $maps"
      fail=1
    fi
    if [ -n "$own_lib" ] && [ "$name" = worker ] && ! grep -q "$own_lib" <<<"$maps"; then
      echo "FAILED: $van: the worker does not map $own_lib (maps: ${maps:-none of them})"
      fail=1
    fi
    echo "$van $sig: $name: SigCgt $cgt; RDMA-family libraries mapped: ${maps:-none}"
  done
  # Stopped first, so that none sees another die and ends by itself before
  # its own signal arrives; on SIGCONT each meets its pending signal at once.
  local all=("${pid[worker]}" "${pid[server]}" "${pid[scheduler]}")
  kill -STOP "${all[@]}"
  kill -s "$sig" "${all[@]}"
  kill -CONT "${all[@]}"
  local end=$((SECONDS + 30))
  for name in worker server scheduler; do
    local rc
    job_wait_pid "${pid[$name]}" "$end"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
      echo "FAILED: $van: the $name sent SIG$sig ended with status $rc, not $want"
      fail=1
    else
      echo "$van: the $name sent SIG$sig died of it (status $rc)"
    fi
  done
  if [ "$van" = ucx-handlers ] &&
     ! grep -q "ucx van: its libraries installed handlers of fatal signals; restored" "$dir/worker.log"; then
    echo "FAILED: $van: the worker did not log restoring UCX's handlers"
    fail=1
  fi
  if grep -q "^FAIL" "$dir"/*.log; then
    echo "FAILED: $van $sig: a process reported a failure"
    fail=1
  fi
  [ $fail -eq 0 ] || show
}

run_job SEGV
run_job TERM
[ $fail -eq 0 ] && echo "PASS: $van: every process died of SIGSEGV (139) and SIGTERM (143)"
exit $fail

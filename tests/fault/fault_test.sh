#!/usr/bin/env bash
# Fault injection into a running KV job (2 servers, 2 workers, fault_node
# verifying every sum), one scenario per run:
#
#   kill-server     kill -9 of server 1 while the workers push and pull
#   kill-worker     kill -9 of worker 1
#   kill-scheduler  kill -9 of the scheduler
#   cut-short       hosts A (scheduler, servers) and B (workers) in network
#                   namespaces; their link goes down for 2 s, less than
#                   PS_HEARTBEAT_TIMEOUT, then up again: the job must go on
#                   and finish with every sum right and no error
#   cut-long        the link goes down for good: every process must end with
#                   an error status, none may hang
#   loss            5% of the packets leaving either host dropped (nftables)
#                   and host B's link limited to 200 Mbit/s (tc tbf, which
#                   also delays): the job finishes with every sum right
#
# The netns scenarios need root; they skip, saying why, when they cannot
# set up namespaces. Deadline: LIMIT seconds (default 90) for the whole job;
# a process still running then is a hang and fails the test. Heartbeats are
# sped up (interval 1 s, timeout 4 s) so that detection by silence is quick;
# detection of a killed process comes from its closed connections anyway.
#
# Prints "RESULT <scenario>: ..." with the time from the fault to its first
# detection and to the moment every surviving waiter had returned.
#
# VAN (kill scenarios only) runs the job over another van: tcp (default),
# shm (the whole job through shared memory), ipc (BYTEPS_ENABLE_IPC=1 over
# tcp: same-host peers through shared memory), fabric (libfabric,
# tcp;ofi_rxm), fabric_shm (libfabric's shm provider), ucx (UCX_TLS=tcp) or
# ucx_shm (UCX_TLS=posix,sysv: data through shared memory, tcp for UCX's
# connection manager only) or ucx_sm (UCX_TLS=sm, the alias, of which the
# van leaves cma out, see docs/RELIABILITY.md).
#
# MODE "stress" kills at a random moment 0-1 s into the benchmark instead of
# at 0.3 s, so that repeated runs (bazel test --runs_per_test=N) hit every
# phase of a round. Every survivor must still end by itself, without a
# crash or a sanitizer report, with the statuses checked below.
#
# A survivor's exit status is its own decision, as a training script's
# would be: 0 when the barrier of everyone ended OK, 1 when it reported the
# lost node; anything else (a crash, a handler's exit) fails the test.
#
#   fault_test.sh FAULT_NODE SCENARIO [LIMIT] [VAN] [MODE]
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
prog=$1 scenario=$2 limit=${3:-90} van=${4:-tcp} mode=${5:-once}
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/fault.XXXXXX")
tag="pf$$"
nsa="${tag}a" nsb="${tag}b"
netns=0
case $scenario in cut-short | cut-long | loss) netns=1 ;; esac
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ $netns -eq 1 ] && job_netns_remove "$tag"
  rm -rf "$dir"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }

export DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 PS_HEARTBEAT_INTERVAL=1 PS_HEARTBEAT_TIMEOUT=4
export PS_START_TIMEOUT_MS=30000 FAULT_LIMIT_MS=$(( (limit - 10) * 1000 ))
unset DMLC_INTERFACE
case $van in
  ipc) job_use_van tcp && export BYTEPS_ENABLE_IPC=1 PS_JOB_ID="job-$$-$RANDOM" ;;
  fabric_shm) job_use_van fabric && export FI_PROVIDER=shm ;;
  ucx_shm) job_use_van ucx && export UCX_TLS=posix,sysv ;;
  ucx_sm) job_use_van ucx && export UCX_TLS=sm ;;
  *) job_use_van "$van" ;;
esac || exit 2
case $scenario in
  cut-short) export FAULT_ROUNDS=300 FAULT_ROUND_MS=20 ;;
  loss) export FAULT_ROUNDS=300 FAULT_ROUND_MS=10 FAULT_BYTES=16384 ;;
  cut-long) export FAULT_ROUNDS=0 FAULT_ROUND_MS=10 ;;
  kill-*) export FAULT_ROUNDS=0 FAULT_ROUND_MS=5 ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
esac

if [ $netns -eq 1 ]; then
  why=$(job_netns_pair "$tag" 10.231.9.1 10.231.9.2)
  case $? in 0) ;; 1) job_skip "$why" ;; *) echo "FAILED: setting up the namespaces: $why"; exit 1 ;; esac
  export DMLC_PS_ROOT_URI=10.231.9.1 DMLC_PS_ROOT_PORT=9373
  host_of() { case $1 in worker*) echo "$nsb 10.231.9.2" ;; *) echo "$nsa 10.231.9.1" ;; esac; }
else
  export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$(job_free_port)
fi

names=(scheduler server0 server1 worker0 worker1)
start() { # NAME ROLE RANK
  if [ $netns -eq 1 ]; then
    read -r ns addr <<<"$(host_of "$1")"
    ip netns exec "$ns" env DMLC_NODE_HOST="$addr" DMLC_ROLE=$2 DMLC_RANK=$3 "$prog" >"$dir/$1.log" 2>&1 &
  else
    DMLC_NODE_HOST=127.0.0.1 DMLC_ROLE=$2 DMLC_RANK=$3 "$prog" >"$dir/$1.log" 2>&1 &
  fi
  pids+=($!)
  eval "pid_$1=$!"
}
# The scheduler logs its barrier releases (info), which the kill-server
# check below orders against its verdict on the dead server. It starts
# first: a port another test took between job_free_port and the bind is
# replaced by another (twice at most) before anyone else starts.
for attempt in 1 2 3; do
  PS_LOG_LEVEL=info start scheduler scheduler -1
  for _ in $(seq 600); do
    grep -q " listening (van \|ADDRESS_IN_USE" "$dir/scheduler.log" && break
    kill -0 "$pid_scheduler" 2>/dev/null || break
    sleep 0.05
  done
  grep -q "ADDRESS_IN_USE" "$dir/scheduler.log" && [ $netns -eq 0 ] && [ $attempt -lt 3 ] || break
  echo "== the scheduler's port $DMLC_PS_ROOT_PORT was taken; another one"
  wait "$pid_scheduler" 2>/dev/null
  pids=()
  export DMLC_PS_ROOT_PORT=$(job_free_port)
done
start server0 server 0
start server1 server 1
start worker0 worker 0
start worker1 worker 1

show() { for f in "${names[@]}"; do sed "s/^/[$f] /" "$dir/$f.log"; done; }
if ! job_wait_for "$dir/worker0.log" "^looping" 60 || ! job_wait_for "$dir/worker1.log" "^looping" 60; then
  show
  echo "FAILED: the workers never got going"
  exit 1
fi
if [ "$mode" = stress ]; then
  delay=$(awk -v r=$RANDOM 'BEGIN {printf "%.3f", r / 32768}')
else
  delay=0.3   # mid-benchmark: the workers are several rounds in
fi
sleep "$delay"

victim=""
fault_ms=$(now_ms)
case $scenario in
  kill-server) victim=server1 ;;
  kill-worker) victim=worker1 ;;
  kill-scheduler) victim=scheduler ;;
esac
if [ -n "$victim" ]; then
  pid_var="pid_$victim"
  echo "== kill -9 $victim (pid ${!pid_var}) $delay s after the workers got going"
  kill -9 "${!pid_var}"
fi
case $scenario in
  cut-short)
    echo "== link down for 2 s"
    ip -n "$nsa" link set "${tag}va" down
    sleep 2
    ip -n "$nsa" link set "${tag}va" up
    echo "== link up" ;;
  cut-long)
    echo "== link down for good"
    ip -n "$nsa" link set "${tag}va" down ;;
  loss)
    echo "== 5% loss leaving each host, host B limited to 200 Mbit/s"
    for ns in "$nsa" "$nsb"; do
      ip netns exec "$ns" nft -f - <<'NFT' || { echo "FAILED: nft rules refused"; exit 1; }
table inet psloss {
  chain out {
    type filter hook output priority 0;
    numgen random mod 100 < 5 counter drop
  }
}
NFT
    done
    tc -n "$nsb" qdisc add dev "${tag}vb" root tbf rate 200mbit burst 64kb latency 20ms ||
      { echo "FAILED: tc tbf refused"; exit 1; } ;;
esac

fail=0
end=$((SECONDS + limit))
for name in "${names[@]}"; do
  pid_var="pid_$name"
  job_wait_pid "${!pid_var}" "$end"
  rc=$?
  if [ $rc -eq 124 ]; then
    echo "FAILED: $name still runs after ${limit} s (a hang)"
    fail=1
    continue
  fi
  if [ "$name" = "$victim" ]; then
    [ $rc -eq 137 ] || { echo "FAILED: $name exited $rc, not by SIGKILL"; fail=1; }
  elif ! grep -q "^PASS" "$dir/$name.log" || grep -q "^FAIL" "$dir/$name.log"; then
    echo "FAILED: $name exited $rc without its PASS line"
    fail=1
  else
    # A survivor decides its own exit status: 0 when the job ended whole,
    # 1 when the barrier of everyone reported the lost node.
    want=1
    grep -q "^BARRIER [0-9]* PS_OK$" "$dir/$name.log" && want=0
    [ $rc -eq $want ] || { echo "FAILED: $name exited $rc, not $want, after its barrier"; fail=1; }
  fi
done
show

survivors=()
for name in "${names[@]}"; do [ "$name" != "$victim" ] && survivors+=("$dir/$name.log"); done
# A survivor that exited 0 may still have crashed on its way out if a
# signal handler turned the abort into an exit: what glibc, the sanitizers
# and a backtrace print is looked for too.
if grep -El "double free|free\(\): |corrupted |malloc\(\): |ERROR: (Address|Leak|Thread|UndefinedBehavior)Sanitizer|runtime error: |terminated with signal|Assertion .* failed" "${survivors[@]}"; then
  echo "FAILED: a survivor crashed or a sanitizer reported an error (file above)"; fail=1
fi
# UCX_TLS=sm brings in cma, whose failed transfer from a killed peer UCX
# makes fatal: the van must have left it out (logged at info level).
if [ "$van" = ucx_sm ] && ! grep -q "without cma" "$dir/scheduler.log"; then
  echo "FAILED: the scheduler's log does not say cma was left out"; fail=1
fi
# What each scenario must look like, beyond "every survivor ended by itself
# with PASS" (which already means every sum it pulled was right).
barriers=$(cat "${survivors[@]}" | awk '/^BARRIER/ {print $3}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
case $scenario in
  cut-short | loss)
    if grep -q "^FAULT_SEEN\|^NODE_FAILED" "${survivors[@]}"; then
      echo "FAILED: a request or a node failed, yet the fault was one TCP rides out"; fail=1
    fi
    [ "$(grep -c "^BARRIER [0-9]* PS_OK$" "${survivors[@]}" | awk -F: '{s+=$2} END {print s}')" -eq 5 ] ||
      { echo "FAILED: not every barrier ended OK ($barriers)"; fail=1; }
    # The fault must have hit the job: the cut stalled a round, the rule
    # dropped packets.
    if [ "$scenario" = cut-short ]; then
      slow=$(sed -n 's/.*slowest round \([0-9]*\) ms.*/\1/p' "$dir"/worker*.log | sort -n | tail -1)
      [ "${slow:-0}" -ge 1000 ] || { echo "FAILED: no round stalled during the cut (slowest ${slow:-?} ms)"; fail=1; }
    else
      dropped=0
      for ns in "$nsa" "$nsb"; do
        n=$(ip netns exec "$ns" nft list table inet psloss | sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
        dropped=$((dropped + ${n:-0}))
      done
      echo "packets dropped on purpose: $dropped"
      [ "$dropped" -gt 0 ] || { echo "FAILED: the loss rule dropped nothing"; fail=1; }
    fi ;;
  *)
    # A barrier says whether every member arrived. Servers arrive at once
    # and wait there, so a killed server had arrived: if the last worker
    # came before the scheduler declared it dead, the barrier rightly
    # succeeds (the death shows in the requests and callbacks). That is
    # the only way a barrier of everyone may end OK here.
    released_first=0
    if [ "$scenario" = kill-server ]; then
      # Releases of the barrier of everyone before the verdict: the start
      # barrier's, then the final one's.
      released_first=$(awk '/barrier of group all released/ {r++} / is dead: / {exit}
                            END {print (r >= 2)}' "$dir/scheduler.log")
    fi
    if grep -q "^BARRIER [0-9]* PS_OK$" "${survivors[@]}" && [ "$released_first" -ne 1 ]; then
      echo "FAILED: a barrier of everyone succeeded with a node gone"; fail=1
    fi
    case $scenario in
      kill-server | kill-scheduler)
        # UCX reports a peer that vanished as an endpoint timeout, which ps
        # cannot tell from a broken link: a worker that notices before the
        # scheduler's verdict arrives says "link failed" there.
        want="PS_ERR_PEER_GONE"
        case $van in ucx*) want="(PS_ERR_PEER_GONE|PS_ERR_LINK_FAILED)" ;; esac
        for w in worker0 worker1; do
          want_w=$want
          # Servers finish once they lost the scheduler, so a worker that
          # heard of the scheduler's death late may first see a server's
          # link go (the fabric van cannot tell a peer that left from a
          # broken link either): "link failed" is right then, and only if
          # the worker's log has that link's loss before the scheduler's.
          if [ "$scenario" = kill-scheduler ] &&
             awk '/lost the connection to server .*: link failed/ {print "yes"; exit}
                  /lost the scheduler/ {exit}' "$dir/$w.log" | grep -q yes; then
            want_w="(PS_ERR_PEER_GONE|PS_ERR_LINK_FAILED)"
          fi
          # A fabric van whose progress thread got stuck inside the
          # provider (shm: a lock the killed process held) fails every
          # link at once, the live server's too: "link failed" is right
          # then, and only if its watchdog said so.
          if grep -q "has not come round for" "$dir/$w.log"; then
            want_w="(PS_ERR_PEER_GONE|PS_ERR_LINK_FAILED)"
          fi
          grep -Eq "^FAULT_SEEN [0-9]+ $want_w " "$dir/$w.log" ||
            { echo "FAILED: $w did not see its requests fail with $want_w"; fail=1; }
        done ;;
      kill-worker)
        grep -q "^NODE_FAILED" "$dir/worker0.log" ||
          { echo "FAILED: worker 0 was not told worker 1 died"; fail=1; } ;;
    esac ;;
esac

first=$(cat "${survivors[@]}" | awk '/^(FAULT_SEEN|NODE_FAILED)/ {print $2}' | sort -n | head -1)
last=$(cat "${survivors[@]}" | awk '/^RETURNED/ {print $2}' | sort -n | tail -1)
checked=$(cat "$dir"/worker*.log | sed -n 's/.* \([0-9]*\) elements checked.*/\1/p' | awk '{s+=$1} END {print s+0}')
slowest=$(cat "$dir"/worker*.log | sed -n 's/.*slowest round \([0-9]*\) ms.*/\1/p' | sort -n | tail -1)
detect="none"
[ -n "$first" ] && detect="$((first - fault_ms)) ms"
echo "RESULT $scenario ($van): detected after $detect; every waiter returned $(( ${last:-$fault_ms} - fault_ms )) ms after the fault; barriers: $barriers elements verified: $checked; slowest round ${slowest:-?} ms"
[ $fail -eq 0 ] && echo "PASSED: $scenario over $van"
exit $fail

#!/usr/bin/env bash
# Load: W workers x S servers (default 32 x 4) on this machine, ROUNDS
# (default 10000) push-pull rounds per worker, fault_node checking every sum.
# Checks: every process ends by itself with PASS within LIMIT seconds; file
# descriptors per process stay within a bound linear in the number of peers
# (and do not grow from the first round to the last); resident memory does
# not grow by more than GROW_KB per process over the run. Leaks are found by
# running this under --config=asan (LeakSanitizer fails the process at exit).
#
#   load_test.sh FAULT_NODE [W] [S] [ROUNDS] [LIMIT]
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
prog=$1 W=${2:-32} S=${3:-4} rounds=${4:-10000} limit=${5:-1500}
grow_kb=${GROW_KB:-65536}
# Under a sanitizer resident memory is the sanitizer's as much as ours
# (ASan's quarantine keeps freed blocks, TSan its shadow): the growth bound
# is checked in plain builds; leaks are LeakSanitizer's job under ASan.
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then
  grow_kb=-1
  echo "note: sanitizer build: resident-memory growth not bounded (leaks: LeakSanitizer)"
fi
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/load.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT

export DMLC_NUM_SERVER=$S DMLC_NUM_WORKER=$W DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$(job_free_port)
export DMLC_NODE_HOST=127.0.0.1 PS_START_TIMEOUT_MS=120000 FAULT_ROUNDS=$rounds FAULT_BYTES=${FAULT_BYTES:-1024}
export FAULT_LIMIT_MS=$(( (limit - 10) * 1000 ))
job_use_van tcp
start=$SECONDS
run() { DMLC_ROLE=$1 DMLC_RANK=$2 "$prog" >"$dir/$1$2.log" 2>&1 & pids+=($!); }
run scheduler ""
for ((i = 0; i < S; i++)); do run server $i; done
for ((i = 0; i < W; i++)); do run worker $i; done

fail=0
end=$((SECONDS + limit))
for p in "${pids[@]}"; do
  job_wait_pid "$p" "$end" || fail=1
done
took=$((SECONDS - start))
for f in "$dir"/*.log; do
  grep -q "^PASS" "$f" || { echo "FAILED: no PASS in $(basename "$f"):"; tail -20 "$f"; fail=1; }
done
# Peers of a process: every other node (the scheduler counts). A van may
# keep a few descriptors per peer (connections both ways, an eventfd) and a
# fixed set of its own (epoll, timers, the log).
peers=$((W + S))
max_fds=$((32 + 4 * peers))
awk -v max="$max_fds" -v grow="$grow_kb" '
  /^RESOURCES start/ { fd0[FILENAME] = $4; rss0[FILENAME] = $6 }
  /^RESOURCES end/ {
    if ($4 > max) { printf "FAILED: %s has %d descriptors (bound %d)\n", FILENAME, $4, max; bad = 1 }
    # Workers sample "start" after their first round, when every
    # connection exists; servers before any, so only workers must not grow.
    if (FILENAME ~ /worker/ && $4 > fd0[FILENAME]) { printf "FAILED: %s descriptors grew %d -> %d\n", FILENAME, fd0[FILENAME], $4; bad = 1 }
    if (grow >= 0 && $6 - rss0[FILENAME] > grow) { printf "FAILED: %s resident memory grew %d kB\n", FILENAME, $6 - rss0[FILENAME]; bad = 1 }
    n++; if ($4 > fdmax) fdmax = $4; if ($6 > rssmax) rssmax = $6
    d = $6 - rss0[FILENAME]; if (d > dmax) dmax = d
  }
  END { printf "resources: %d processes reported; max descriptors %d (bound %d); max RSS %d kB; max RSS growth %d kB\n", n, fdmax, max, rssmax, dmax; exit bad }
' "$dir"/*.log || fail=1
checked=$(cat "$dir"/worker*.log | sed -n 's/.* \([0-9]*\) elements checked.*/\1/p' | awk '{s+=$1} END {print s+0}')
echo "RESULT load ${W}x${S}, $rounds rounds: $took s; elements verified: $checked"
[ $fail -eq 0 ] && echo "PASSED: load ${W}x${S} x $rounds rounds"
exit $fail

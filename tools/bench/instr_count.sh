#!/usr/bin/env bash
# CPU instructions per small round trip, per van: a measure of ps's own
# per-message work that the machine's load does not move (timings here
# swing by 2x when anything else runs).
#
#   tools/bench/instr_count.sh [TEST_BENCHMARK] [LAUNCHER]
#
# For each van, a 1 worker x 1 server job of test_benchmark mode 4 (one
# 8-byte push-pull at a time, blocking waits) runs twice under valgrind's
# callgrind, with R1 and R2 rounds; the difference of the instruction
# counts over R2 - R1 is what one round trip costs in each process, free of
# start-up and shutdown. Spinning is part of it (a waiting progress thread
# spins ~50 us before it sleeps), so compare a van with itself across
# changes to its per-message path, not vans with each other; a change that
# makes an idle loop turn cheaper only adds turns to the same spin and does
# not show here (look at callgrind's per-function counts for those).
#
# Environment: VANS ("tcp shm fabric-shm ucx-sm"), R1 (2000), R2 (6000).
set -uo pipefail
source "$(dirname "$0")/bench_args.sh"
source "$(dirname "$0")/transport_env.sh"
source "$(dirname "$0")/callgrind_wrap.sh"
vans=${VANS:-"tcp shm fabric-shm ucx-sm"}
r1=${R1:-2000} r2=${R2:-6000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

callgrind_wrapper "$dir" "$bench"

# run ROUNDS -> "worker_instr server_instr"
run() {
  rm -f "$dir"/cg.*
  PS_BUSY_POLL=0 TOTAL_DURATION=$1 LOG_DURATION=$1 NUM_KEY_PER_SERVER=1 \
    timeout 600 python3 "$launch" -q -s 1 -w 1 --timeout 580 -- "$dir/wrap.sh" 8 10 4 >/dev/null 2>&1
  local w s
  w=$(sed -n 's/^summary: //p' "$dir/cg.worker" 2>/dev/null)
  s=$(sed -n 's/^summary: //p' "$dir/cg.server" 2>/dev/null)
  echo "${w:-0} ${s:-0}"
}

echo "# $(date -u +%FT%TZ) $(git -C "$here" rev-parse --short HEAD 2>/dev/null) rounds $r1 and $r2"
printf '%-11s %14s %14s\n' van worker/rtt server/rtt
for v in $vans; do
  ( transport_env "$v" || exit 1
    read -r w1 s1 < <(run "$r1")
    read -r w2 s2 < <(run "$r2")
    if [ "$w1" = 0 ] || [ "$w2" = 0 ]; then
      printf '%-11s %14s %14s\n' "$v" failed failed
      exit 0
    fi
    awk -v v="$v" -v w1="$w1" -v w2="$w2" -v s1="$s1" -v s2="$s2" -v n=$((r2 - r1)) \
      'BEGIN { printf "%-11s %14.0f %14.0f\n", v, (w2 - w1) / n, (s2 - s1) / n }' )
done

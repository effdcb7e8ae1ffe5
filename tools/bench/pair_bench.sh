#!/usr/bin/env bash
# Two builds of test_benchmark side by side, interleaved, on the vans, for
# before/after comparisons on a noisy machine:
#
#   tools/bench/pair_bench.sh BENCH_A BENCH_B [ROUNDS] [LAUNCHER]
#
# Per round and transport (TRANSPORTS, default "tcp shm ucx-tcp ucx-sm
# fabric-tcp"; names as in transport_env.sh), A then B (B then A on even
# rounds), 1 worker x 1 server, 1 key: test_benchmark mode 4 (one 8-byte
# push-pull round trip at a time, LAT_ROUNDS = 20000) busy-polling and
# blocking, and mode 2 (push-only) at 4 MiB (BW_ROUNDS = 600 values)
# busy-polling and blocking. Prints one line per run and the medians.
set -uo pipefail
[ $# -ge 2 ] || { sed -n 2,12p "$0"; exit 2; }
a=$1 b=$2 rounds=${3:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
launch=${4:-$here/tools/launch/ps_launch.py}
transports=${TRANSPORTS:-"tcp shm ucx-tcp ucx-sm fabric-tcp"}
lat_rounds=${LAT_ROUNDS:-20000}
bw_rounds=${BW_ROUNDS:-600}
source "$here/tools/bench/transport_env.sh"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# ps BENCH LEN MODE BUSY ROUNDS -> the worker's summary JSON
ps_run() {
  PS_BUSY_POLL=$4 TOTAL_DURATION=$5 LOG_DURATION=$5 NUM_KEY_PER_SERVER=1 PS_BENCH_JSON=1 \
    timeout 200 python3 "$launch" -q -s 1 -w 1 --timeout 180 -- "$1" "$2" 10 "$3" 2>&1 |
    grep -o '{"bench":"test_benchmark","event":"summary".*}' | tail -1
}
field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }

# one BUILD_NAME BENCH TRANSPORT ROUND: a line of figures
one() {
  local lb lk bb bk
  lb=$(field "$(ps_run "$2" 8 4 1 "$lat_rounds")" lat_us_p50)
  lk=$(field "$(ps_run "$2" 8 4 0 "$lat_rounds")" lat_us_p50)
  bb=$(field "$(ps_run "$2" 4194304 2 1 "$bw_rounds")" gbps)
  bk=$(field "$(ps_run "$2" 4194304 2 0 "$bw_rounds")" gbps)
  printf '%-10s %s %2d %5s | %8s %8s | %8s %8s\n' "$3" "$1" "$4" "$(cut -d' ' -f1 /proc/loadavg)" \
    "${lb:-NA}" "${lk:-NA}" "${bb:-NA}" "${bk:-NA}" | tee -a "$results"
}

echo "# $(date -u +%FT%TZ) $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# A=$a"
echo "# B=$b"
printf '%-10s %s %2s %5s | %8s %8s | %8s %8s\n' transport x r load busy_us block_us \
  busy_Gb/s block_Gb/s
for r in $(seq "$rounds"); do
  for t in $transports; do
    ( transport_env "$t" || exit 1
      if [ $((r % 2)) = 1 ]; then one A "$a" "$t" "$r"; one B "$b" "$t" "$r"
      else one B "$b" "$t" "$r"; one A "$a" "$t" "$r"; fi )
  done
done

echo "# medians over $rounds rounds: busy / blocking round-trip p50 (us), 4 MiB push busy / blocking (Gbit/s)"
for t in $transports; do
  for x in A B; do
    grep "^$t *$x " "$results" | awk -v t="$t" -v x="$x" '
      function med(a, n,   i, j, v) {
        for (i = 2; i <= n; ++i) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; --j) a[j + 1] = a[j]; a[j + 1] = v }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      { n++; lb[n] = $6; lk[n] = $7; bb[n] = $9; bk[n] = $10 }
      END { if (n) printf "%-10s %s busy %7.1f us, blocking %7.1f us, 4 MiB busy %6.2f Gb/s, blocking %6.2f Gb/s\n",
            t, x, med(lb, n), med(lk, n), med(bb, n), med(bk, n) }'
  done
done

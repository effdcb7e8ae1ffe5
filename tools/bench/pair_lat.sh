#!/usr/bin/env bash
# Paired small round trips of two builds of test_benchmark, each next to the
# transport's own tool, for before/after comparisons on a noisy machine:
#
#   tools/bench/pair_lat.sh BENCH_A BENCH_B TRANSPORT [ROUNDS] [LAUNCHER]
#
# TRANSPORT: ucx-sm (UCX_TLS=posix,sysv,cma, against ucx_perftest tag_lat),
# ucx-tcp, fabric-shm (against fi_pingpong), fabric-tcp. Per round: the
# tool's 8-byte round trip (2x its one-way figure), then A's busy-poll p50
# (test_benchmark mode 4, 8 bytes, 1 key, LAT_ROUNDS = 20000 round trips),
# then the tool again and B's. Rounds alternate which build goes first.
# Prints one line per run and the medians of A and B.
set -uo pipefail
[ $# -ge 3 ] || { sed -n 2,12p "$0"; exit 2; }
a=$1 b=$2 t=$3 rounds=${4:-5}
here=$(cd "$(dirname "$0")/../.." && pwd)
launch=${5:-$here/tools/launch/ps_launch.py}
lat_rounds=${LAT_ROUNDS:-20000}
port=$((30000 + RANDOM % 20000))
source "$here/tools/bench/transport_env.sh"
source "$here/tools/bench/tool_rtt.sh"
case $t in
ucx-* | fabric-*) transport_env "$t" ;;
*) echo "no tool to compare $t with (ucx-sm, ucx-tcp, fabric-shm, fabric-tcp)" >&2; exit 2 ;;
esac

# ps busy-poll p50 in us.
ps_p50() {
  PS_BUSY_POLL=1 TOTAL_DURATION=$lat_rounds LOG_DURATION=$lat_rounds NUM_KEY_PER_SERVER=1 \
    PS_BENCH_JSON=1 timeout 120 python3 "$launch" -q -s 1 -w 1 --timeout 100 -- "$1" 8 10 4 \
    2>&1 | grep -o '{"bench":"test_benchmark","event":"summary".*}' | tail -1 |
    grep -o '"lat_us_p50":[0-9.]*' | head -1 | cut -d: -f2
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "# $(date -u +%FT%TZ) $t, load $(cut -d' ' -f1-3 /proc/loadavg); A=$a B=$b"
for r in $(seq "$rounds"); do
  order="A B"
  [ $((r % 2)) -eq 0 ] && order="B A"
  for w in $order; do
    bin=$a
    [ "$w" = B ] && bin=$b
    port=$((port + 1))
    tl=$(tool_rtt "$t" "$port")
    p=$(ps_p50 "$bin")
    echo "round $r $w tool_rtt ${tl:-?} ps_p50 ${p:-?}" | tee -a "$results"
  done
done
for w in A B; do
  awk -v w="$w" '$3 == w && $7 != "?" {print $7}' "$results" | sort -g |
    awk -v w="$w" '{v[NR] = $1} END { if (NR) printf "%s median p50 %.2f us over %d runs\n", w,
      (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), NR }'
done

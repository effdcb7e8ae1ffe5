#!/usr/bin/env bash
# The RDMA-family vans next to their transports' own tools, in one run:
#
#   tools/bench/rdma_bench.sh [TEST_BENCHMARK] [LAUNCHER]
#
# TEST_BENCHMARK is //tests:test_benchmark (it links //ps/rdma:vans; build it
# with --config=opt), LAUNCHER tools/launch/ps_launch.py. Both default to the
# places a plain `bazel build --config=opt //tests:test_benchmark` leaves
# them in (OUTPUT_BASE picks a non-default bazel output base).
#
# For every transport and round, right next to each other:
#   - the tool's bandwidth at 4 MiB: fi_pingpong -e rdm (libfabric) or
#     ucx_perftest tag_bw (UCX), same provider / UCX_TLS;
#   - test_benchmark mode 2 (push-only), 4 MiB, 1 worker x 1 server,
#     busy-polling (as the tools do), with 1 key (one 4 MiB value sent again
#     and again, as the tools do: it stays in the CPU caches, which doubles
#     a copy's speed here) and with KEYS keys per server (40, upstream's
#     default: 160 MiB of distinct values, copies at memory speed; expect it
#     below the tool); and the 1-key run once more with blocking waits (the
#     default mode: each thread that sleeps costs a wake-up per message,
#     ~70 us on this machine's idle vCPU);
#   - the tool's latency at 8 B (fi_pingpong, ucx_perftest tag_lat; both
#     report one way, the table shows the round trip, 2x);
#   - test_benchmark mode 4 (one 8-byte push-pull round trip at a time, 1
#     key), busy-polling (as the tools do) and blocking.
# Then the medians per transport: goodput / tool bandwidth (target >= 80%;
# the 1-key figure is the like-for-like one) and busy-poll round-trip p50 /
# tool round trip (target <= 2x).
#
# Environment: ROUNDS (3), TRANSPORTS ("fabric-tcp fabric-shm ucx-tcp
# ucx-sm"), KEYS (40), BW_ROUNDS (rounds of KEYS x 4 MiB, 30; the 1-key run
# moves as many bytes), LAT_ROUNDS (20000, as many as fi_pingpong's; a
# short run's median still has the start in it), UCX_NET_DEVICES (lo: other tests on this machine create and
# remove veth pairs, whose lanes then fail to wire up), RAW=1 also prints
# each summary line.
set -uo pipefail
source "$(dirname "$0")/bench_args.sh"
source "$(dirname "$0")/transport_env.sh"
rounds=${ROUNDS:-3}
transports=${TRANSPORTS:-"fabric-tcp fabric-shm ucx-tcp ucx-sm"}
keys=${KEYS:-40}
bw_rounds=${BW_ROUNDS:-30}
lat_rounds=${LAT_ROUNDS:-20000}
port=$((30000 + RANDOM % 20000))
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# fi_pingpong PROVIDER SIZE ITERS -> "MB/s one-way-us"
fi_tool() {
  port=$((port + 1))
  timeout 120 fi_pingpong -p "$1" -e rdm -S "$2" -I "$3" -B "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local line
  line=$(timeout 120 fi_pingpong -p "$1" -e rdm -S "$2" -I "$3" -P "$port" 127.0.0.1 2>&1 |
         tail -1)
  wait "$srv" 2>/dev/null
  # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec (usec/xfer: one way)
  awk '{print $6, $7}' <<<"$line"
}

# ucx_perftest TEST SIZE ITERS -> "MB/s one-way-us"
ucx_tool() {
  port=$((port + 1))
  timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  local line
  line=$(timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" 2>&1 |
         grep '^Final:')
  wait "$srv" 2>/dev/null
  # Final: iters p50 avg overall MB/s-avg MB/s-overall msg/s-avg msg/s-overall
  awk '{print $7, $3}' <<<"$line"
}

# ps LEN MODE BUSY ROUNDS NKEYS -> the worker's summary JSON
ps_run() {
  local line
  line=$(PS_BUSY_POLL=$3 TOTAL_DURATION=$4 LOG_DURATION=$4 NUM_KEY_PER_SERVER=$5 PS_BENCH_JSON=1 \
         timeout 300 python3 "$launch" -q -s 1 -w 1 --timeout 280 -- "$bench" "$1" 10 "$2" 2>&1 |
         grep -o '{"bench":"test_benchmark","event":"summary".*}' | tail -1)
  [ "${RAW:-0}" = 1 ] && echo "    $line" >&2
  echo "$line"
}
field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }

echo "# $(date -u +%FT%TZ) $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $bench"
printf '%-10s %2s %5s | %9s %8s %6s %8s %6s %8s | %8s %8s %8s %6s %9s\n' transport r load \
  "tool_MB/s" "ps1_MB/s" "ps1/bw" "psK_MB/s" "psK/bw" "ps1_blk" "tool_rtt" "ps_busy" "ps_p99" \
  "ratio" "ps_block"
for r in $(seq "$rounds"); do
  for t in $transports; do
    ( transport_env "$t" || exit 1
      load=$(cut -d' ' -f1 /proc/loadavg)
      case $t in
      fabric-*) read -r tbw _ < <(fi_tool "$PS_FABRIC_PROVIDER" 4194304 200) ;;
      ucx-*) read -r tbw _ < <(ucx_tool tag_bw 4194304 1000) ;;
      esac
      j=$(ps_run 4194304 2 1 $((bw_rounds * keys)) 1)
      pbw1=$(awk -v g="$(field "$j" gbps)" 'BEGIN {printf "%.0f", g * 1000 / 8}')
      j=$(ps_run 4194304 2 1 "$bw_rounds" "$keys")
      pbw=$(awk -v g="$(field "$j" gbps)" 'BEGIN {printf "%.0f", g * 1000 / 8}')
      j=$(ps_run 4194304 2 0 $((bw_rounds * keys)) 1)
      pbwb=$(awk -v g="$(field "$j" gbps)" 'BEGIN {printf "%.0f", g * 1000 / 8}')
      case $t in
      fabric-*) read -r _ tlat < <(fi_tool "$PS_FABRIC_PROVIDER" 8 20000) ;;
      ucx-*) read -r _ tlat < <(ucx_tool tag_lat 8 100000) ;;
      esac
      j1=$(ps_run 8 4 1 "$lat_rounds" 1)
      j0=$(ps_run 8 4 0 "$lat_rounds" 1)
      awk -v t="$t" -v r="$r" -v load="$load" -v tbw="${tbw:-0}" -v pbw="${pbw:-0}" -v pbw1="${pbw1:-0}" \
          -v pbwb="${pbwb:-0}" \
          -v tl="${tlat:-0}" -v p50="$(field "$j1" lat_us_p50)" -v p99="$(field "$j1" lat_us_p99)" \
          -v b50="$(field "$j0" lat_us_p50)" 'BEGIN {
        rtt = 2 * tl
        printf "%-10s %2d %5s | %9.0f %8.0f %5.0f%% %8.0f %5.0f%% %8.0f | %8.2f %8.1f %8.1f %5.2fx %9.1f\n",
               t, r, load, tbw, pbw1, (tbw > 0 ? 100 * pbw1 / tbw : 0), pbw,
               (tbw > 0 ? 100 * pbw / tbw : 0), pbwb, rtt, p50, p99, (rtt > 0 ? p50 / rtt : 0), b50
      }' | tee -a "$results"
    )
  done
done

echo "# medians over $rounds rounds (ps/bw target >= 80%, ratio = busy p50 / tool rtt, target <= 2x)"
for t in $transports; do
  grep "^$t " "$results" | awk -v t="$t" -v keys="$keys" '
    function med(a, n,   i, j, x) {
      for (i = 2; i <= n; ++i) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; --j) a[j + 1] = a[j]; a[j + 1] = x }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { n++; tb[n] = $5; p1[n] = $6; c1[n] = $7 + 0; pb[n] = $8; pc[n] = $9 + 0; bk[n] = $10
      tr[n] = $12; pr[n] = $13; ra[n] = $15 + 0; bl[n] = $16 }
    END { if (n) printf "%-10s tool %6.0f MB/s, ps 1 key %6.0f MB/s (%3.0f%%), %s keys %6.0f MB/s (%3.0f%%), 1 key blocking %6.0f MB/s | tool rtt %6.2f us, ps busy p50 %6.1f us (%5.2fx), blocking %6.1f us\n",
          t, med(tb, n), med(p1, n), med(c1, n), keys, med(pb, n), med(pc, n), med(bk, n), med(tr, n), med(pr, n), med(ra, n), med(bl, n) }'
done

#!/usr/bin/env bash
# The UCX van next to UCX's own perf tool, on loopback, in one run: for each
# UCX_TLS setting, ucx_perftest tag_bw (4 MiB) and tag_lat (8 B), then
# test_benchmark over the UCX van, 1 worker x 1 server: mode 2 (push-only)
# 4 MiB and mode 4 (8-byte push-pull round trips), blocking and busy-poll.
# The tool and ps alternate, ROUNDS times, so load from elsewhere hits both.
#
#   ucx_bench.sh TEST_BENCHMARK LAUNCHER [TLS...]      (default TLS: tcp sm)
#
# TEST_BENCHMARK must have the UCX van linked in. Environment: ROUNDS (3),
# BW_ROUNDS (test_benchmark rounds of 40 x 4 MiB, 30), LAT_ROUNDS (2000),
# PERF_N (tag_bw iterations, 1000).
# tools/bench/rdma_bench.sh runs both vans on all four transports in one go
# and prints one table with the ratios.
set -uo pipefail
bench=$1 launcher=$2
shift 2
tls_list=("$@")
[ ${#tls_list[@]} -eq 0 ] && tls_list=(tcp sm)
rounds=${ROUNDS:-3}
bw_rounds=${BW_ROUNDS:-30}
lat_rounds=${LAT_ROUNDS:-2000}
perf_n=${PERF_N:-1000}
port=$((20000 + RANDOM % 20000))

# ucx_perftest TEST SIZE ITERS: prints "bw_MBps lat_us" of the Final line
# (tag_lat's latency is one way: half a round trip).
perftest() {
  local test=$1 size=$2 iters=$3
  port=$((port + 1))
  timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  local line
  line=$(timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" 2>&1 |
         grep '^Final:')
  wait "$srv" 2>/dev/null
  # Final: iters p50 avg overall MB/s-avg MB/s-overall msg/s-avg msg/s-overall
  awk '{print $7, $3}' <<<"$line"
}

# test_benchmark LEN MODE BUSY: prints the summary JSON line of the worker.
ps_bench() {
  local len=$1 mode=$2 busy=$3 total=$4
  DMLC_ENABLE_UCX=1 PS_BUSY_POLL=$busy TOTAL_DURATION=$total LOG_DURATION=$total \
  NUM_KEY_PER_SERVER=${NKEYS:-40} PS_BENCH_JSON=1 \
    timeout 300 python3 "$launcher" -q -s 1 -w 1 --timeout 280 -- "$bench" "$len" 10 "$mode" 2>&1 |
    grep -o '{"bench":"test_benchmark","event":"summary".*}' | tail -1
}

field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2; }

echo "# $(date -u +%FT%TZ) $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), ucx $(ucx_info -v | sed -n 's/# Version //p')"
for tls in "${tls_list[@]}"; do
  export UCX_TLS=$tls
  for r in $(seq "$rounds"); do
    read -r tool_bw _ < <(perftest tag_bw 4194304 "$perf_n")
    j=$(ps_bench 4194304 2 0 "$bw_rounds")
    ps_gbps=$(field "$j" gbps)
    read -r _ tool_lat < <(perftest tag_lat 8 100000)
    j0=$(NKEYS=1 ps_bench 8 4 0 "$lat_rounds")
    j1=$(NKEYS=1 ps_bench 8 4 1 "$lat_rounds")
    awk -v tls="$tls" -v r="$r" -v tbw="$tool_bw" -v pg="$ps_gbps" -v tl="$tool_lat" \
        -v b50="$(field "$j0" lat_us_p50)" -v b99="$(field "$j0" lat_us_p99)" \
        -v p50="$(field "$j1" lat_us_p50)" -v p99="$(field "$j1" lat_us_p99)" 'BEGIN {
      pbw = pg * 1000 / 8;   # Gbit/s -> MB/s
      printf "UCX_TLS=%-4s round %d | 4MiB push-only: ps %7.0f MB/s (%5.2f Gbit/s), ucx_perftest tag_bw %7.0f MB/s -> %5.1f%%\n",
             tls, r, pbw, pg, tbw, (tbw > 0 ? 100 * pbw / tbw : 0)
      printf "UCX_TLS=%-4s round %d | 8B round trip p50/p99: ps busy-poll %.1f/%.1f us, blocking %.1f/%.1f us; ucx_perftest tag_lat %.2f us one way = %.2f us round trip -> busy %.2fx\n",
             tls, r, p50, p99, b50, b99, tl, 2 * tl, (tl > 0 ? p50 / (2 * tl) : 0)
    }'
  done
done

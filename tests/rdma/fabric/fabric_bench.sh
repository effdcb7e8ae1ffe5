#!/usr/bin/env bash
# The libfabric van next to libfabric's own tool, on the same provider, in
# one run (a program, not a test):
#
#   fabric_bench.sh BENCHMARK LAUNCHER [ROUNDS=3] [PROVIDERS="tcp;ofi_rxm shm"]
#
# BENCHMARK is a test_benchmark binary with the fabric van linked in
# (//tests:test_benchmark once it links //ps/rdma:vans), LAUNCHER
# tools/launch/ps_launch.py. Per round and provider it prints:
#   - fi_pingpong -e rdm, 4 MiB and 8 B (MB/s and one-way us per transfer);
#   - test_benchmark mode 2 (push-only), 4 MiB, with 1 key per server (one
#     value in flight, like the tool) and 40 (upstream's default);
#   - test_benchmark mode 4 (8-byte push-pull round trip, one at a time),
#     busy-polling and blocking.
# Each ps line is the benchmark's `summary` (goodput; request p50/p99).
# tools/bench/rdma_bench.sh runs both vans on all four transports in one go
# and prints one table with the ratios.
set -uo pipefail
BENCH=${1:?benchmark binary}
LAUNCH=${2:?launcher}
ROUNDS=${3:-3}
PROVIDERS=${4:-"tcp;ofi_rxm shm"}
port=$((47700 + RANDOM % 1000))

pingpong() { # provider size iterations
  port=$((port + 1))
  fi_pingpong -p "$1" -e rdm -S "$2" -I "$3" -B "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 0.3
  local out
  out=$(timeout 120 fi_pingpong -p "$1" -e rdm -S "$2" -I "$3" -P "$port" 127.0.0.1 2>&1 | tail -1)
  wait "$server" 2>/dev/null
  echo "$out" | awk '{print $6 " MB/s, " $7 " us/xfer"}'
}

ps_bench() { # provider len mode busy [VAR=value...]
  local prov=$1 len=$2 mode=$3 busy=$4
  shift 4
  env DMLC_ENABLE_RDMA=fabric PS_FABRIC_PROVIDER="$prov" PS_BUSY_POLL="$busy" "$@" \
    timeout 300 python3 "$LAUNCH" -s 1 -w 1 --timeout 280 -- "$BENCH" "$len" 10 "$mode" 2>&1 |
    grep summary | sed 's/.*summary: //'
}

for round in $(seq 1 "$ROUNDS"); do
  for prov in $PROVIDERS; do
    echo "== round $round provider $prov load $(cut -d' ' -f1 /proc/loadavg)"
    echo "fi_pingpong 4MiB: $(pingpong "$prov" 4194304 200)"
    echo "ps mode2 4MiB 1 key: $(ps_bench "$prov" 4194304 2 0 NUM_KEY_PER_SERVER=1 TOTAL_DURATION=200 LOG_DURATION=100)"
    echo "ps mode2 4MiB 40 keys: $(ps_bench "$prov" 4194304 2 0 NUM_KEY_PER_SERVER=40 TOTAL_DURATION=6 LOG_DURATION=3)"
    echo "fi_pingpong 8B: $(pingpong "$prov" 8 20000)"
    echo "ps mode4 8B busy: $(ps_bench "$prov" 8 4 1 NUM_KEY_PER_SERVER=10 TOTAL_DURATION=500 LOG_DURATION=250)"
    echo "ps mode4 8B blocking: $(ps_bench "$prov" 8 4 0 NUM_KEY_PER_SERVER=10 TOTAL_DURATION=1000 LOG_DURATION=500)"
  done
done

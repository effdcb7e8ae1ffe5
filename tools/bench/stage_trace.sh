#!/usr/bin/env bash
# Where the time of one small push-pull round trip goes, per transport,
# next to the transport's own tool in the same run:
#
#   tools/bench/stage_trace.sh [TEST_BENCHMARK] [LAUNCHER]
#
# Without TEST_BENCHMARK, builds test_benchmark with the stage marks
# (`--config=opt --define=ps_stage_trace=1`, ps/base/stage_trace.h; set
# OUTPUT_BASE for a non-default bazel output base) and uses a copy. Per
# transport: the tool's 8-byte round trip (ucx_perftest tag_lat,
# fi_pingpong; none for tcp) before and after a 1 worker x 1 server
# busy-polling run
# of test_benchmark mode 4 (8 bytes, 1 key, LAT_ROUNDS round trips), whose
# marks tools/bench/stage_trace.py splits into worker, transport and server
# stages. The marks cost ~20 ns a round trip; compare stages, not totals,
# with untraced runs.
#
# Environment: TRANSPORTS ("ucx-sm fabric-shm ucx-tcp fabric-tcp tcp"),
# LAT_ROUNDS (20000).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ $# -ge 1 ]; then
  bench=$1
else
  (cd "$here" && bazel ${OUTPUT_BASE:+--output_base=$OUTPUT_BASE} build --config=opt \
     --define=ps_stage_trace=1 //tests:test_benchmark >"$dir/build.log" 2>&1) ||
    { cat "$dir/build.log" >&2; exit 2; }
  out=$(cd "$here" && bazel ${OUTPUT_BASE:+--output_base=$OUTPUT_BASE} info --config=opt \
        output_path 2>/dev/null)
  cp "$out/k8-opt/bin/tests/test_benchmark" "$dir/test_benchmark"
  bench=$dir/test_benchmark
fi
launch=${2:-$here/tools/launch/ps_launch.py}
[ -x "$bench" ] || { echo "no test_benchmark at $bench" >&2; exit 2; }
source "$here/tools/bench/transport_env.sh"
source "$here/tools/bench/tool_rtt.sh"
lat_rounds=${LAT_ROUNDS:-20000}
port=$((30000 + RANDOM % 20000))

echo "# $(date -u +%FT%TZ) $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $bench"
for t in ${TRANSPORTS:-ucx-sm fabric-shm ucx-tcp fabric-tcp tcp}; do
  ( transport_env "$t" || exit 1
    port=$((port + 1))
    tool=$(tool_rtt "$t" "$port")
    rm -f "$dir"/stage.*
    PS_STAGE_TRACE_FILE=$dir/stage PS_BUSY_POLL=1 TOTAL_DURATION=$lat_rounds \
      LOG_DURATION=$lat_rounds NUM_KEY_PER_SERVER=1 timeout 120 \
      python3 "$launch" -q -s 1 -w 1 --timeout 100 -- "$bench" 8 10 4 >"$dir/run.log" 2>&1 ||
      { echo "## $t: the run failed"; tail -5 "$dir/run.log"; exit 1; }
    port=$((port + 1))
    tool_after=$(tool_rtt "$t" "$port")
    echo "## $t"
    python3 "$here/tools/bench/stage_trace.py" "$(ls "$dir"/stage.worker.* | head -1)" \
      "$(ls "$dir"/stage.server.* | head -1)" "$tool" "$tool_after" )
  port=$((port + 10))
done

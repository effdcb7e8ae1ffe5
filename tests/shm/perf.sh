#!/usr/bin/env bash
# The shared-memory van's performance figures next to their references, all
# in one run (a program, not a test). Build first:
#   bazel build --config=opt //tests:test_benchmark //tests:test_ipc_benchmark \
#       //tests/shm:shm_ref_bench //tests/shm:shm_van_bench
#   tests/shm/perf.sh "$(bazel info --config=opt bazel-bin)" [REPEAT=3]
# Prints, for each figure, the median of REPEAT runs (and all of them):
#   memcpy of 256 MiB buffers (GB/s)                 shm_ref_bench memcpy
#   shared-memory spin ping-pong (us, p50)           shm_ref_bench pingpong
#   test_benchmark 4096000 push-pull 1x1, shm / tcp  goodput (Gbit/s)
#   test_ipc_benchmark 4096000, 1x1 co-located       goodput (Gbit/s)
#   test_benchmark 8-byte push-pull round trip       p50 (us), busy-polling and not
#   shm_van_bench 8 bytes, busy                      van round trip p50 (us)
set -uo pipefail
bin=${1:?usage: perf.sh BAZEL_BIN [REPEAT]}
rep=${2:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
launch="python3 $here/tools/launch/ps_launch.py -s 1 -w 1 --timeout 300 --"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A med
run() { # NAME COMMAND... (the command prints one number)
  local name=$1; shift
  local vals=()
  for _ in $(seq "$rep"); do vals+=("$("$@")"); done
  med[$name]=$(printf '%s\n' "${vals[@]}" | median)
  printf '%-44s %10s   (%s)\n' "$name" "${med[$name]}" "${vals[*]}"
}
ratio() { # LABEL NUM DEN SCALE: NUM/DEN*SCALE from the medians
  awk -v l="$1" -v a="${med[$2]:-0}" -v b="${med[$3]:-0}" -v k="$4" \
    'BEGIN { if (b > 0) printf "%-44s %10.2f\n", l, a / b * k; else printf "%-44s %10s\n", l, "n/a" }'
}

memcpy_gbs() { "$bin/tests/shm/shm_ref_bench" memcpy | awk '{print $5}'; }
spin_us() { "$bin/tests/shm/shm_ref_bench" pingpong --iters 200000 | awk '{print $3}'; }
bench_gbps() { # VAN BUSY
  env DMLC_ENABLE_RDMA="$1" PS_BUSY_POLL="$2" LOG_DURATION=10 TOTAL_DURATION=40 \
    $launch "$bin/tests/test_benchmark" 4096000 10 1 2>/dev/null |
    sed -n 's/.*summary:.*goodput \([0-9.]*\) Gbps.*/\1/p'
}
ipc_gbps() {
  env LOG_DURATION=20 TOTAL_DURATION=40 $launch "$bin/tests/test_ipc_benchmark" 4096000 2>/dev/null |
    sed -n 's/.*Application goodput: \([0-9.]*\) Gbps.*/\1/p' | tail -1
}
lat_us() { # VAN BUSY
  env DMLC_ENABLE_RDMA="$1" PS_BUSY_POLL="$2" NUM_KEY_PER_SERVER=1 LOG_DURATION=20000 \
    TOTAL_DURATION=20000 $launch "$bin/tests/test_benchmark" 8 10 4 2>/dev/null |
    sed -n 's/.*request latency p50 \([0-9.]*\) us.*/\1/p'
}
van_us() { "$bin/tests/shm/shm_van_bench" --iters 50000 --busy "$@" | sed -n 's/.*p50 \([0-9.]*\) us.*/\1/p'; }

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
run "memcpy 256 MiB (GB/s)" memcpy_gbs
run "shm spin ping-pong p50 (us)" spin_us
run "test_benchmark 4 MB push-pull shm (Gbit/s)" bench_gbps shm 0
run "test_benchmark 4 MB push-pull tcp (Gbit/s)" bench_gbps tcp 0
run "test_ipc_benchmark 4 MB (Gbit/s)" ipc_gbps
run "test_benchmark 4 MB push-pull shm busy (Gbit/s)" bench_gbps shm 1
run "test_benchmark 4 MB push-pull tcp busy (Gbit/s)" bench_gbps tcp 1
run "8 B push-pull p50, shm busy (us)" lat_us shm 1
run "8 B push-pull p50, tcp busy (us)" lat_us tcp 1
run "8 B push-pull p50, shm blocking (us)" lat_us shm 0
run "8 B push-pull p50, tcp blocking (us)" lat_us tcp 0
run "shm van 8 B round trip p50, busy (us)" van_us
run "shm van 8 B round trip p50, busy inline (us)" van_us --inline
# The issue's targets, from the medians (memcpy GB/s is 8 Gbit/s).
ratio "shm 4 MB / memcpy (%)" "test_benchmark 4 MB push-pull shm (Gbit/s)" "memcpy 256 MiB (GB/s)" 12.5
ratio "ipc benchmark 4 MB / memcpy (%)" "test_ipc_benchmark 4 MB (Gbit/s)" "memcpy 256 MiB (GB/s)" 12.5
ratio "shm 4 MB / tcp 4 MB (x)" "test_benchmark 4 MB push-pull shm (Gbit/s)" "test_benchmark 4 MB push-pull tcp (Gbit/s)" 1
ratio "ipc benchmark 4 MB / tcp 4 MB (x)" "test_ipc_benchmark 4 MB (Gbit/s)" "test_benchmark 4 MB push-pull tcp (Gbit/s)" 1
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

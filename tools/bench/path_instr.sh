#!/usr/bin/env bash
# Instructions on the critical path of one small round trip, per van:
# what ps itself spends between "the worker asks" and "the worker has the
# answer", free of spinning and of the machine's load.
#
#   tools/bench/path_instr.sh [TEST_BENCHMARK] [LAUNCHER]
#
# A 1 worker x 1 server job of test_benchmark mode 4 (one LEN-byte push-pull
# at a time, busy polling) runs ROUNDS rounds with worker and server under
# valgrind's callgrind. Per round trip it prints the inclusive counts of
# the worker's ps_kv_zpushpull (request: KV, customer, postoffice, codec,
# the van's send) and of each process's receive entry points (receive,
# delivery, and on the server the handler and its reply), summed as
# "path". The transport's own polling that finds the message is not in
# it (the same for every version of ps); compare a van with itself across
# changes. tools/bench/instr_count.sh counts whole processes instead.
#
# Environment: VANS ("ucx-sm fabric-shm tcp"; also ucx-tcp, fabric-tcp),
# ROUNDS (6000), LEN (8: the value's bytes).
#
# The functions counted must exist: build TEST_BENCHMARK without link-time
# optimisation, which inlines them into their callers
# (`bazel build --config=opt --features=-lto //tests:test_benchmark`).
set -uo pipefail
source "$(dirname "$0")/bench_args.sh"
source "$(dirname "$0")/transport_env.sh"
source "$(dirname "$0")/callgrind_wrap.sh"
vans=${VANS:-"ucx-sm fabric-shm tcp"}
rounds=${ROUNDS:-6000}
len=${LEN:-8}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

callgrind_wrapper "$dir" "$bench"
# (grep reads all of nm's output: -q would end the pipe early, and
# pipefail would count nm's broken pipe as a miss.)
nm "$bench" 2>/dev/null | grep ' ps_kv_zpushpull$' >/dev/null || {
  echo "$bench has no ps_kv_zpushpull (link-time optimised?): build it with" \
       "bazel build --config=opt --features=-lto //tests:test_benchmark" >&2
  exit 2
}

# Sets the van's environment and `entries`, its receive entry points.
setup() {
  transport_env "$1" || return 1
  case $1 in
  ucx-*) entries="ps__ucx_am_meta ps__ucx_am_take ps__ucx_rx_process ps__ucx_lane_deliver" ;;
  fabric-*) entries="ps__fab_on_meta" ;;
  tcp) entries="ps__tcp_on_readable" ;;
  *) echo "no receive entry points known for $1" >&2; return 1 ;;
  esac
}

# Inclusive instructions of function $2 in callgrind file $1 (0 if absent).
incl() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v f=":$2 " 'index($0, f) { gsub(",", "", $1); print $1; found = 1; exit }
                     END { if (!found) print 0 }'
}

echo "# $(date -u +%FT%TZ) $bench, $rounds rounds of $len bytes; instructions per round trip"
for v in $vans; do
  ( setup "$v" || exit 1
    rm -f "$dir"/cg.*
    PS_BUSY_POLL=1 TOTAL_DURATION=$rounds LOG_DURATION=$rounds NUM_KEY_PER_SERVER=1 \
      timeout 900 python3 "$launch" -q -s 1 -w 1 --timeout 880 -- "$dir/wrap.sh" "$len" 10 4 \
      >/dev/null 2>&1
    [ -s "$dir/cg.worker" ] && [ -s "$dir/cg.server" ] || { echo "$v: the job failed"; exit 1; }
    req=$(incl "$dir/cg.worker" ps_kv_zpushpull)
    path=$req line=""
    for e in $entries; do
      w=$(incl "$dir/cg.worker" "$e") s=$(incl "$dir/cg.server" "$e")
      path=$((path + w + s))
      line="$line worker.$e $((w / rounds)) server.$e $((s / rounds))"
    done
    echo "$v path $((path / rounds)): request $((req / rounds))$line"
  )
done

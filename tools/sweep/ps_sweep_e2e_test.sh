#!/usr/bin/env bash
# A tiny sweep end to end: two sizes, one 1x1 shape, push-only, the latency
# section, no iperf3 (time). Checks the tables, the printed table and that
# gnuplot wrote a PNG.
#
#   ps_sweep_e2e_test.sh SWEEP BENCH PINGPONG LAUNCHER
set -uo pipefail
SWEEP=${1:?}
BENCH=${2:?}
PINGPONG=${3:?}
LAUNCH=${4:?}
OUT=$(mktemp -d "${TEST_TMPDIR:-/tmp}/sweep.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

python3 "$SWEEP" --bench "$BENCH" --pingpong "$PINGPONG" --launcher "$LAUNCH" \
  --sizes 4K,64K --shapes 1x1 --modes 2 --keys 4 --bytes-per-job 1M --max-rounds 20 \
  --latency-rounds 5 --pingpong-iterations 2000 --no-iperf --timeout 60 --out "$OUT" >"$OUT/stdout" 2>&1
rc=$?
cat "$OUT/stdout"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: sweep exited $rc"; fail=1; }
[ "$(wc -l <"$OUT/results.csv")" -eq 3 ] || { echo "FAIL: results.csv rows"; fail=1; }
head -1 "$OUT/results.csv" | grep -q '^workers,servers,mode,mode_name,len,keys,rounds,ok,gbps,' \
  || { echo "FAIL: results.csv header"; fail=1; }
python3 - "$OUT/results.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert [r["len"] for r in rows] == [4096, 65536], rows
assert all(r["ok"] and r["gbps"] > 0 and r["rounds"] >= 3 for r in rows), rows
lat = d["latency"]
assert {(l["what"], l["busy_poll"]) for l in lat} >= {("ps push-pull (mode 4)", 0),
                                                     ("ps push-pull (mode 4)", 1)}, lat
assert all(l["ok"] and l["lat_us_p50"] > 0 for l in lat), lat
PY
grep -Eq 'push_only +4096 +' "$OUT/stdout" || { echo "FAIL: no table printed"; fail=1; }
if command -v gnuplot >/dev/null; then
  [ "$(head -c 4 "$OUT/sweep.png" | od -An -c | tr -d ' ')" = '211PNG' ] \
    || { echo "FAIL: no PNG"; fail=1; }
fi
[ $fail -eq 0 ] && echo "all checks passed"
exit $fail

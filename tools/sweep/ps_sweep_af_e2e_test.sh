#!/usr/bin/env bash
# A tiny AF sweep end to end: test_benchmark_af as 1A1F and 2A2F over tcp,
# batches 1 and 2, a few iterations. Checks that af_results.csv has a row
# per (shape, op, batch) with positive latencies, that the JSON agrees, that
# the push-pull table is printed and that gnuplot wrote the PNG (without
# gnuplot that part is reported SKIPPED).
#
#   ps_sweep_af_e2e_test.sh SWEEP AF_BENCH LAUNCHER
set -uo pipefail
SWEEP=${1:?}
AF_BENCH=${2:?}
LAUNCH=${3:?}
OUT=$(mktemp -d "${TEST_TMPDIR:-/tmp}/afsweep.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

python3 "$SWEEP" --af --af-bench "$AF_BENCH" --launcher "$LAUNCH" --af-shapes 1A1F,2A2F \
  --af-vans tcp --batch-start 1 --batch-end 2 --batch-step 1 --af-warmup 2 --af-iter 5 \
  --timeout 60 --out "$OUT" >"$OUT/stdout" 2>&1
rc=$?
cat "$OUT/stdout"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: sweep exited $rc"; fail=1; }
head -1 "$OUT/af_results.csv" | grep -q '^workers,servers,van,op,batch,hidden,samples,mean_us,' \
  || { echo "FAIL: af_results.csv header"; fail=1; }
python3 - "$OUT/af_results.csv" "$OUT/af_results.json" <<'PY' || fail=1
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = [(w, s, op, b) for w, s in ((1, 1), (2, 2)) for op in ("push", "pull", "pushpull")
        for b in (1, 2)]
assert [(int(r["workers"]), int(r["servers"]), r["op"], int(r["batch"])) for r in rows] == want, rows
for r in rows:
    assert r["van"] == "tcp" and r["ok"] == "True", r
    # 5 iterations x 3 micro-batches per worker.
    assert int(r["samples"]) == 15 * int(r["workers"]), r
    lo, p50, p90, p99, hi = (float(r[k]) for k in ("min_us", "p50_us", "p90_us", "p99_us",
                                                     "max_us"))
    # Quantiles come from a histogram: p99 may round a little above the max.
    assert 0 < lo <= p50 <= p90 <= p99 <= hi * 1.02, r
    assert float(r["mean_us"]) > 0, r
js = json.load(open(sys.argv[2]))["rows"]
assert [(j["op"], j["batch"], j["p99_us"]) for j in js] == \
    [(r["op"], int(r["batch"]), float(r["p99_us"])) for r in rows], js
print("af_results: %d rows, latencies positive and ordered" % len(rows))
PY
for shape in "1  1" "2  2"; do
  grep -Eq "^ *${shape/  / +} +tcp +1 +" "$OUT/stdout" || { echo "FAIL: no table row for $shape"; fail=1; }
done
if command -v gnuplot >/dev/null; then
  [ "$(head -c 4 "$OUT/af_latency.png" | od -An -c | tr -d ' ')" = '211PNG' ] \
    || { echo "FAIL: no PNG"; fail=1; }
else
  echo "SKIPPED: no gnuplot; af_latency.png not checked (the tables were)"
  if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
    echo "no gnuplot; af_latency.png not checked" >"$TEST_UNDECLARED_OUTPUTS_DIR/PS_TEST_SKIPPED"
  fi
fi
[ $fail -eq 0 ] && echo "all checks passed"
exit $fail

#!/usr/bin/env bash
# ENABLE_PROFILING / PROFILE_PATH: a 1x1 push-only job writes one CSV file
# per node, named <PROFILE_PATH><role>_<us>; the server's file has a
# push_request line for every push the worker's file answers with a
# push_response line, with the pushed bytes; without ENABLE_PROFILING no
# file appears.
#
#   profile_test.sh LAUNCHER BENCHMARK
set -uo pipefail
LAUNCH=$PWD/${1:?launcher}
BENCH=$PWD/${2:?benchmark}
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/profile.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

job() { # job OUT ENV...
  local out=$1
  shift
  local envs=()
  for e in "$@"; do envs+=(--env "$e"); done
  python3 "$LAUNCH" -s 1 -w 1 --timeout 120 --kill-grace 2 "${envs[@]}" -- \
    "$BENCH" 2048 10 2 >"$out" 2>&1
}

ROUNDS=7
if ! job "$TMP/on.out" ENABLE_PROFILING=1 PROFILE_PATH="$TMP/prof_" TOTAL_DURATION=$ROUNDS \
    LOG_DURATION=$ROUNDS NUM_KEY_PER_SERVER=3 PS_SMALL_LANE=0; then
  fail "the profiled job failed"; cat "$TMP/on.out"
fi
for role in scheduler server worker; do
  n=$(ls "$TMP" | grep -c "^prof_${role}_[0-9]*\$")
  [ "$n" -eq 1 ] || fail "$n profile files for the $role instead of 1: $(ls "$TMP")"
done
python3 - "$TMP" "$ROUNDS" <<'PY' || failures=$((failures + 1))
import csv, glob, os, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
head = "recv_us,sender,recver,app_id,customer_id,timestamp,kind,key,bytes"
def rows(role):
    path = glob.glob(os.path.join(tmp, "prof_%s_*" % role))[0]
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == head, "%s: header %r" % (path, lines[0])
    out = list(csv.DictReader(lines))
    for r in out:
        assert int(r["recv_us"]) > 1_500_000_000_000_000, r  # wall clock, in us
    return out
server, worker, sched = rows("server"), rows("worker"), rows("scheduler")
pushes = [r for r in server if r["kind"] == "push_request"]
answers = [r for r in worker if r["kind"] == "push_response"]
# Mode 2 pushes every key (3, of 2048 bytes) at least once per round.
if len(pushes) < 3 * rounds or len(pushes) != len(answers):
    sys.exit("FAIL: %d push requests at the server, %d push answers at the worker, %d rounds"
             % (len(pushes), len(answers), rounds))
bad = [r for r in pushes if int(r["bytes"]) < 2048 or r["sender"] != answers[0]["recver"]]
if bad:
    sys.exit("FAIL: push requests without the pushed bytes or from another node: %s" % bad[:3])
if sorted(r["timestamp"] for r in pushes) != sorted(r["timestamp"] for r in answers):
    sys.exit("FAIL: the server's request timestamps differ from the worker's answers'")
if not any(r["kind"] == "control" for r in sched):
    sys.exit("FAIL: the scheduler's file has no control message")
print("ok: %d pushes profiled at both ends" % len(pushes))
PY

mkdir "$TMP/off"
if ! (cd "$TMP/off" && job "$TMP/off.out" TOTAL_DURATION=3 LOG_DURATION=3 NUM_KEY_PER_SERVER=1); then
  fail "the job without profiling failed"; cat "$TMP/off.out"
fi
if ls "$TMP/off" | grep -q .; then fail "files without ENABLE_PROFILING: $(ls "$TMP/off")"; fi

[ $failures -eq 0 ] && echo PASS
exit $((failures > 0))

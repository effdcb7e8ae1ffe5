#!/usr/bin/env bash
# The README's test command: installs what is missing, builds //ps:all, runs
# the default test suite (hardware tests filtered out by .bazelrc), builds and
# tests the consumer workspace, checks that Bazel rejects a layering
# violation, and ends with the line `bazel: N passed, N failed, N skipped`.
#
# A test whose precondition is missing (no GPU, no RDMA device, not root)
# ends as skipped (tools/test_skips.py says how that is seen); it counts as
# skipped, not passed. With --ci, a skipped test that .ci/may_skip does not
# name fails the run: CI runs as root with every package installed, so only
# hardware may be missing there.
#
#   tools/test.sh [--ci] [extra bazel test flags...]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# Bazel 4 expands //... into its own convenience link bazel-<this folder>
# (only the names .bazelignore lists are skipped, and a clone may have any
# name), so this script makes no links and removes a stale one.
NO_LINKS=(--symlink_prefix=/)
link="bazel-$(basename "$ROOT")"
if [ -L "$link" ]; then rm -f "$link"; fi

CI_FLAGS=()
if [ "${1:-}" = "--ci" ]; then
  CI_FLAGS=(--config=ci)
  shift
fi

./tools/install_deps.sh || { echo "bazel: 0 passed, 1 failed"; exit 1; }

passed=0
failed=0
skipped=0
LOG=$(mktemp -d)/test.log
trap 'rm -rf "$(dirname "$LOG")"' EXIT

# Counts Bazel's per-target result lines in $1.
count_results() {
  local p f
  p=$(grep -Ec '^(//|@)[^ ]+ +(\(cached\) +)?PASSED' "$1")
  f=$(grep -Ec '^(//|@)[^ ]+ +(\(cached\) +)?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE|FAILED TO BUILD)' "$1")
  passed=$((passed + p))
  failed=$((failed + f))
}

step() { echo "== $*"; }

step "bazel build //ps:all"
if ! bazel build "${CI_FLAGS[@]}" "${NO_LINKS[@]}" //ps:all; then
  echo "FAILED: bazel build //ps:all"
  failed=$((failed + 1))
fi

# The tests the tag filters keep from running here (RDMA, GPU hardware)
# must still compile: a change to an interface they use shows up now.
step "bazel build //... (hardware tests included)"
if ! bazel build "${CI_FLAGS[@]}" "${NO_LINKS[@]}" //...; then
  echo "FAILED: bazel build //..."
  failed=$((failed + 1))
fi

step "bazel test //..."
touch "$LOG.start"
bazel test "${CI_FLAGS[@]}" "${NO_LINKS[@]}" "$@" //... 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
count_results "$LOG"

FAILED_TESTS=$(grep -Eo '^(//|@)[^ ]+ +(FAILED|TIMEOUT|FLAKY)' "$LOG" | awk '{print $1}')

# Skipped tests are counted as such, not as passed.
TESTLOGS=$(bazel info "${CI_FLAGS[@]}" "${NO_LINKS[@]}" bazel-testlogs 2>/dev/null)
count_skips() {
  python3 tools/test_skips.py "$1" "$TESTLOGS" >"$LOG.skips"
  while IFS=$'\t' read -r label why; do
    [ -n "$label" ] || continue
    skipped=$((skipped + 1))
    passed=$((passed - 1))
    if [ ${#CI_FLAGS[@]} -gt 0 ] && ! grep -qxF "$label" <(grep -v '^#' .ci/may_skip | awk '{print $1}'); then
      echo "FAILED: $label skipped in CI ($why); only the targets in .ci/may_skip may"
      failed=$((failed + 1))
    else
      echo "SKIPPED: $label: $why"
    fi
  done <"$LOG.skips"
}
count_skips "$LOG"
# 1 = tests failed (counted above), 4 = no tests; anything else is a build or infrastructure failure.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ "$rc" -ne 4 ] && ! grep -Eq 'FAILED|TIMEOUT' "$LOG"; then
  echo "FAILED: bazel test exited $rc"
  failed=$((failed + 1))
fi

# The fault matrix's stress cells (kill -9 at a random moment): CI runs each
# twice (//tests/fault:ci_stress, which leaves out the cells of a provider
# known to hang); `bazel test --runs_per_test=20 //tests/fault:all_stress`
# runs them all.
if [ ${#CI_FLAGS[@]} -gt 0 ]; then
  step "bazel test --runs_per_test=2 //tests/fault:ci_stress"
  bazel test "${CI_FLAGS[@]}" "${NO_LINKS[@]}" --runs_per_test=2 //tests/fault:ci_stress 2>&1 | tee "$LOG"
  count_results "$LOG"
  if ! grep -Eq '^//tests/fault:[^ ]+ +(\(cached\) +)?PASSED' "$LOG"; then
    echo "FAILED: the fault matrix's stress cells did not run"
    failed=$((failed + 1))
  fi
fi

# The ibverbs van's hardware tests (requires-rdma), in a VM whose kernel
# makes a soft-RoCE device (tools/softroce/vm_run.sh): this machine's own
# kernel may have no RDMA support at all. A test that finds no device there
# reports itself skipped, which CI does not allow.
step "bazel test --config=softroce (the ibverbs van on soft-RoCE)"
bazel test "${CI_FLAGS[@]}" "${NO_LINKS[@]}" --config=softroce //... 2>&1 | tee "$LOG"
count_results "$LOG"
SOFTROCE_FAILED=$(grep -Eo '^(//|@)[^ ]+ +(FAILED|TIMEOUT|FLAKY)' "$LOG" | awk '{print $1}')
FAILED_TESTS="$FAILED_TESTS $SOFTROCE_FAILED"
count_skips "$LOG"
if ! grep -Eq '^//tests/rdma/verbs:verbs_hw_test +(\(cached\) +)?PASSED' "$LOG"; then
  echo "FAILED: the soft-RoCE tests did not run"
  failed=$((failed + 1))
fi

step "visibility: an app target that reaches into a transport must be rejected"
if bazel build "${CI_FLAGS[@]}" "${NO_LINKS[@]}" //ps/app:visibility_violation >"$LOG" 2>&1; then
  echo "FAILED: //ps/app:visibility_violation built, visibility is not enforced"
  failed=$((failed + 1))
elif grep -q "is not visible from target" "$LOG"; then
  echo "//ps/app:visibility_violation rejected by Bazel: PASSED"
  passed=$((passed + 1))
else
  cat "$LOG"
  echo "FAILED: //ps/app:visibility_violation failed for another reason"
  failed=$((failed + 1))
fi

step "consumer workspace (tests/consumer) depending on @ps//ps"
(cd tests/consumer && bazel test "${CI_FLAGS[@]}" //...) 2>&1 | tee "$LOG"
count_results "$LOG"
if ! grep -Eq '^//[^ ]+ +(\(cached\) +)?PASSED' "$LOG"; then
  echo "FAILED: the consumer workspace ran no passing test"
  failed=$((failed + 1))
fi
(cd tests/consumer && bazel shutdown) >/dev/null 2>&1

# What each failed test said last, where a log reader that keeps only the
# end of this output still sees it.
for label in $FAILED_TESTS; do
  rel=${label#//}
  rel=${rel/://}
  for f in $(find "$TESTLOGS/$rel" -name test.log -newer "$LOG.start" 2>/dev/null | sort); do
    echo "== ${label}: the end of ${f#"$TESTLOGS"/}"
    grep -E "FAIL|[Ee]rror|TIMEOUT|Assertion|not ok" "$f" | tail -8
    tail -4 "$f"
  done
done

bazel shutdown >/dev/null 2>&1
echo "bazel: ${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# tools/gpu_check.sh run on the emulated device: the layout `pack` makes
# (the script, the launcher, bin/), with the KV device check built here, so
# the script that a GPU host runs is itself tested on every build.
#
#   gpu_check_dry_run_test.sh GPU_CHECK LAUNCHER KV_DEVICE_CHECK MEM_BW PY_EXTENSION TRAIN_NODE
#                             TEST_SH TEST_BENCHMARK KV_NODE AF_NODE
# PY_EXTENSION is the test build of the package (the emulated kind linked).
set -uo pipefail
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/bin"
cp "$1" "$dir/gpu_check.sh" && cp "$2" "$dir/ps_launch.py" && cp "$3" "$4" "$dir/bin/" || exit 1
# The package: the extension and the Python files beside it in the runfiles.
mkdir -p "$dir/python/ps" &&
  cp "$5" "$(dirname "$5")"/*.py "$dir/python/ps/" && cp "$6" "$7" "$9" "${10}" "$dir/" &&
  cp "$8" "$dir/bin/" || exit 1
chmod +x "$dir/gpu_check.sh"
# An extension built with ASan or TSan cannot load into the plain
# interpreter (tests/python/sanitizer.sh): the training step is left out of
# such builds, and said so.
train=1 want_trained=1
# (ldd's whole output first: with pipefail, grep -q leaving early could
# fail the pipe while ldd still writes.)
if grep -qE 'lib(asan|tsan)\.so' <<<"$(ldd "$5" 2>/dev/null)"; then
  echo "the extension is built with a sanitizer runtime: the training step is not run"
  train=0 want_trained=0
fi
out=$(GPU_CHECK_REPS=1 GPU_CHECK_PYTHON=/usr/bin/python3 GPU_CHECK_TRAIN=$train \
  "$dir/gpu_check.sh" run emu 2>&1)
rc=$?
echo "$out"
# The three jobs ran every path at every size: 2 workers x 3 jobs x 3
# sizes x 6,
# the bandwidth table has its 3 sizes, and each worker's late-ready push
# carried what its stream wrote, in every job; the training run (on CPU
# tensors here) matched its single-process run; tests/test.sh ran its four
# pairings; the Python device nodes ran (KV, KV into a device store and
# AF, 2 workers each).
lines=$(grep -c "worker [01]: .* push .* pull .*sums checked" <<<"$out")
bw=$(grep -c "bytes: d2h pageable .* GB/s" <<<"$out")
late=$(grep -c "worker [01]: late-ready push .* bytes checked" <<<"$out")
late_answer=$(grep -c "worker [01]: late-ready answer .* bytes checked" <<<"$out")
trained=$(grep -c "PASSED: training (cpu)" <<<"$out")
driven=$(grep -c "PASSED: test.sh \(cpu2cpu\|cpu2gpu\|gpu2gpu\|gpu2cpu\)" <<<"$out")
pydev=$(grep -c "PASSED: Python \(kv\|kv-store\|af\) device values (emu)" <<<"$out")
# IPC pushes into the device store: both jobs passed, every push landed in
# a registered buffer, and the push-only job's goodput was set against the
# device-to-device copy.
store=$(grep -c "PASSED: IPC pushes into a device store (push_\(pull\|only\))" <<<"$out")
landed=$(grep -cE "ENABLE_RECV_BUFFER: ([1-9][0-9]*) of \1 pushes landed" <<<"$out")
store_vs_d2d=$(grep -c "IPC push of 4 MiB: [0-9.]* GB/s, device-to-device copy of 4 MiB: [0-9.]* GB/s" <<<"$out")
# Pulls into device memory: written in place through IPC handles by the
# servers in the shm-ipc job (every byte of them: the worker checks the
# count), by none in the tcp and shm jobs; the IPC job's bad destination
# descriptors were answered as bytes.
job_lines() { awk -v job="== KV job over $1," 'index($0, "== ") == 1 { on = index($0, job) == 1 } on' <<<"$out"; }
ipc_pulled=$(job_lines shm-ipc | grep -c "worker [01]: device values pulled: [1-9][0-9]* bytes written in place")
ipc_hostile=$(job_lines shm-ipc | grep -c "worker [01]: hostile pulls: 5 bad destination descriptors answered")
staged_pulled=$( (job_lines tcp; job_lines shm) | grep -c "worker [01]: device values pulled: 0 bytes written in place")
if [ "$rc" -ne 0 ] || [ "$lines" -ne 108 ] || [ "$bw" -ne 3 ] || [ "$late" -ne 6 ] || [ "$late_answer" -ne 6 ] || [ "$trained" -ne "$want_trained" ] || [ "$driven" -ne 4 ] ||
  [ "$pydev" -ne $((3 * want_trained)) ] || [ "$ipc_pulled" -ne 2 ] || [ "$ipc_hostile" -ne 2 ] ||
  [ "$staged_pulled" -ne 4 ] || [ "$store" -ne 2 ] || [ "$landed" -ne 2 ] || [ "$store_vs_d2d" -ne 1 ] ||
  ! grep -q "every check passed" <<<"$out"; then
  echo "FAILED: gpu_check.sh run emu: status $rc, $lines of 108 round lines, $bw of 3 bandwidth lines, $late of 6 late-ready lines, $late_answer of 6 late-answer lines, training passed $trained of $want_trained, test.sh $driven of 4 pairings, Python device jobs $pydev of $((3 * want_trained)), IPC pull lines $ipc_pulled of 2 (shm-ipc), hostile pull lines $ipc_hostile of 2 (shm-ipc), no-IPC pull lines $staged_pulled of 4 (tcp, shm), device store jobs $store of 2 ($landed with every push landed, $store_vs_d2d set against d2d)"
  exit 1
fi
echo "PASSED: gpu_check.sh run emu ($lines rounds checked, device pulls through IPC in the shm-ipc job only)"

# The budget: with 2 seconds, the run ends within seconds, fails, and names
# the steps it did not start.
start=$SECONDS
short=$(GPU_CHECK_BUDGET_S=2 GPU_CHECK_REPS=1 GPU_CHECK_PYTHON=/usr/bin/python3 GPU_CHECK_TRAIN=0 \
  "$dir/gpu_check.sh" run emu 2>&1)
src=$? took=$((SECONDS - start))
skipped=$(grep -c "not run: past the budget of 2s" <<<"$short")
if [ "$src" -eq 0 ] || [ "$took" -gt 30 ] || [ "$skipped" -lt 4 ] ||
  ! grep -q "IPC pushes into a device store not run: past the budget" <<<"$short"; then
  echo "$short"
  echo "FAILED: a 2 s budget: status $src, ${took}s, $skipped steps named as not run"
  exit 1
fi
echo "PASSED: a 2 s budget ended the run in ${took}s, $skipped steps not run and named"

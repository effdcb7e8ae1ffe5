#!/usr/bin/env bash
# The GPU checks, as one script for a machine with a GPU and no Bazel: it
# runs binaries built elsewhere and prints what docs/GPU.md records.
#
#   tools/gpu_check.sh pack DIR     (here, after a build) copies the
#                                    binaries, the launcher and this script
#                                    into DIR, to carry to the GPU host
#   DIR/gpu_check.sh run [KIND]     (there) runs every check; KIND cuda
#                                    (default) or emu, which runs the same
#                                    checks on the emulated device here
#
# The checks, each bounded in time, each with its data verified:
#   - the requires-gpu test binaries (the CUDA memory kind's own test, the
#     CUDA runtime probe, the ibverbs van's GPUDirect test where the host
#     has an RDMA device too, and the fabric van's where libfabric's
#     provider registers CUDA memory);
#   - the kind's copy bandwidth (tools/bench/mem_bw.c: cudaMemcpy to and
#     from pageable and pinned host memory, device to device, chunked on
#     two streams), the reference for staged traffic;
#   - a KV job (scheduler, 2 servers, 2 workers) over tcp, over shm, and
#     over shm with PS_DEVICE_IPC=1 (device pushes, and pulls into device
#     memory, as CUDA IPC handles) whose
#     workers push from and pull into device memory at 4 KiB, 1 MiB and
#     4 MiB: cpu2cpu (the host reference of the same run), gpu2gpu,
#     cpu2gpu, gpu2cpu, and a push-pull from host and from device memory,
#     every sum checked, each time the median of GPU_CHECK_REPS rounds
#     (default 5; tests/app/kv_device_check.c; the vans move host memory,
#     so device memory is staged through pinned host buffers, except for
#     the pushes and the device pulls of the IPC job, whose count of pulled
#     bytes written in place each worker prints and checks; that job also
#     sends pull requests by hand with bad destination descriptors, which
#     must be answered with the values as bytes).
#     Last, each worker pushes data a stream writes 50 ms late (a host
#     function sleeping, then an asynchronous memset) with the stream as its
#     readiness: the call returns at once and the pulled bytes are the sum;
#     and pulls what a server answers from device memory its stream writes
#     50 ms late, with that stream as the answer's readiness
#     (ps_kv_server_respond_when): every byte must be what the stream wrote;
#   - a data-parallel PyTorch training run (tests/python/train_node.py: 2
#     workers and a summation server, ps.torch) on CUDA tensors (CPU ones
#     for `run emu`) whose parameters must match a single-process run, when
#     the host's python3 (GPU_CHECK_PYTHON) has torch; GPU_CHECK_TRAIN=0
#     leaves it out;
#   - device memory from Python without a copy (with the training run's
#     interpreter and GPU_CHECK_TRAIN switch): tests/python/kv_node.py
#     device (ps.DeviceArray values of the kind through KVWorker, and for
#     cuda CUDA torch tensors, one written on a stream of its own),
#     kv_node.py devicestore (over shm with PS_DEVICE_IPC=1: pushes into a
#     Python server's registered device buffers) and
#     af_node.py sum (2 attention workers, 2 FFN servers, bf16 device
#     tensors through ps.af, sums checked);
#   - StepMesh's driver, tests/test.sh joint 4096000 10 push_pull, for each
#     pairing (cpu2cpu, cpu2gpu, gpu2gpu, gpu2cpu), every pulled byte checked
#     (DEBUG_MODE), 30 rounds;
#   - IPC pushes into a device store: test.sh gpu2gpu over shm with
#     PS_DEVICE_IPC=1 and ENABLE_RECV_BUFFER=1 (the server's registered
#     receive buffers in device memory, each push one device-to-device
#     copy by the server), first push-pull with every pulled byte checked,
#     then 4 MiB push-only, whose goodput is printed against the kind's
#     device-to-device copy of 4 MiB from the mem_bw step; every push must
#     have landed in its registered buffer.
# The whole run has a budget, GPU_CHECK_BUDGET_S seconds (default 300):
# each step's own limit is cut to what is left, and the steps not started
# within it are named and fail the run.
# Exit status 0 when every check passed, 1 otherwise; a check whose device
# is missing says so and counts as failed (this script exists to run them).
set -uo pipefail

BINARIES=(
  tests/app/kv_device_check
  tests/test_benchmark
  tools/bench/mem_bw
  ps/gpu/mem_cuda_device_test
  tests/deps/cuda_device_test
  tests/rdma/verbs/verbs_gpudirect_test
  tests/rdma/fabric/fabric_gpudirect_test
)

pack() {
  local out=$1 bin
  bin=$(bazel info --dynamic_mode=off bazel-bin 2>/dev/null) || { echo "gpu_check: no bazel here"; return 1; }
  # Static links of ps's own libraries: the GPU host has no build tree.
  bazel build --dynamic_mode=off //tests/app:kv_device_check //tools/bench:mem_bw \
    //tests:test_benchmark \
    //ps/python:package //ps/gpu:mem_cuda_device_test \
    //tests/deps:cuda_device_test //tests/rdma/verbs:verbs_gpudirect_test \
    //tests/rdma/fabric:fabric_gpudirect_test || return 1
  mkdir -p "$out/bin"
  for b in "${BINARIES[@]}"; do cp "$bin/$b" "$out/bin/" || return 1; done
  # The Python package (its stable-ABI extension loads in any CPython
  # 3.11+) and the training job's worker.
  mkdir -p "$out/python/ps"
  cp ps/python/ps/*.py "$bin/ps/python/ps/_ps.abi3.so" "$out/python/ps/" &&
    cp tests/python/train_node.py tests/python/kv_node.py tests/python/af_node.py \
      tests/test.sh "$out/" || return 1
  # The shared libraries they need beyond the C and C++ runtimes (libsodium),
  # which the GPU host may lack.
  mkdir -p "$out/lib"
  ldd "$out"/bin/* "$out"/python/ps/*.so | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$out/lib/" || exit 1; done || return 1
  cp tools/launch/ps_launch.py "$0" "$out/" || return 1
  echo "packed into $out: $(ls "$out/bin" "$out/lib" | tr '\n' ' ')"
}

failed=0
budget=${GPU_CHECK_BUDGET_S:-300}
step() { echo; echo "== $*"; }
# A step's limit: its own, or what is left of the budget when that is less.
cap() {
  local left=$((budget - SECONDS))
  if [ "$left" -lt "$1" ]; then echo $((left > 1 ? left : 1)); else echo "$1"; fi
}
# 0 while the budget lasts; past it, names the step not run and fails the run.
within_budget() {
  [ "$SECONDS" -lt "$budget" ] && return 0
  echo
  echo "FAILED: $* not run: past the budget of ${budget}s (GPU_CHECK_BUDGET_S) at ${SECONDS}s"
  failed=1
  return 1
}
verdict() {  # verdict NAME STATUS
  if [ "$2" -eq 0 ]; then echo "PASSED: $1"; else echo "FAILED: $1 (status $2)"; failed=1; fi
}

# The training job: the scheduler and the server run the summation server,
# the 2 workers train_node.py on the kind's device (cuda, or cpu for emu).
train() {
  local kind=$1 here=$2 launcher=$3 device=cpu log rc py=${GPU_CHECK_PYTHON:-python3}
  [ "$kind" = cuda ] && device=cuda
  if [ "${GPU_CHECK_TRAIN:-1}" = 0 ]; then
    step "PyTorch training: not run (GPU_CHECK_TRAIN=0)"
    return
  fi
  step "PyTorch training, 2 workers, $device tensors, over tcp"
  if ! "$py" -c "import torch" 2>/dev/null; then
    echo "no torch in $(command -v "$py")"
    verdict "training ($device)" 1
    return
  fi
  log=$(mktemp)
  PYTHONPATH="$here/python" timeout "$(cap 240)" "$py" "$launcher" -s 1 -w 2 --timeout "$(cap 200)" -- \
    sh -c 'if [ "$DMLC_ROLE" = worker ]; then exec "$2" "$0" 20 "$1"; else exec "$2" -m ps.server; fi' \
    "$here/train_node.py" "$device" "$py" >"$log" 2>&1
  rc=$?
  grep -E "step 19 loss|parameters match|PASS worker|Error|error" "$log"
  [ "$rc" -eq 0 ] && [ "$(grep -c "PASS worker [01] ($device" "$log")" -eq 2 ] ||
    { tail -20 "$log"; [ "$rc" -eq 0 ] && rc=1; }
  verdict "training ($device)" "$rc"
  rm -f "$log"
}

# Device memory from Python: KVWorker (kv_node.py device, 2 workers, 1
# server) and ps.af (af_node.py sum, 2A2F) on the kind's memory.
pydevice() {
  local kind=$1 here=$2 launcher=$3 py=${GPU_CHECK_PYTHON:-python3} log rc
  if [ "${GPU_CHECK_TRAIN:-1}" = 0 ]; then
    step "Python device values: not run (GPU_CHECK_TRAIN=0)"
    return
  fi
  local job name node servers want jobenv
  for job in "kv:kv_node.py device:1:device ($kind) sum ok:" \
             "kv-store:kv_node.py devicestore:1:device store pushes ok:DMLC_PS_VAN_TYPE=shm PS_DEVICE_IPC=1 PS_JOB_ID=gpu-check-store-$$" \
             "af:af_node.py sum:2:PASS worker sum on $kind memory:"; do
    IFS=: read -r name node servers want jobenv <<<"$job"
    step "Python $name device values on $kind memory, 2 workers x $servers servers"
    log=$(mktemp)
    # shellcheck disable=SC2086  # node is the script and its mode, jobenv words
    env $jobenv PYTHONPATH="$here/python" PS_TEST_DEVICE_KIND=$kind timeout "$(cap 240)" "$py" "$launcher" \
      -s "$servers" -w 2 --timeout "$(cap 200)" -- "$py" "$here/"$node >"$log" 2>&1
    rc=$?
    grep -E "round trips ok|sum ok|CUDA tensors ok|device store|PASS worker|Error" "$log"
    # The device store's server found every push in its buffer.
    [ "$name" != kv-store ] || grep -q "device store: 6 of 6 pushes landed" "$log" ||
      { [ "$rc" -eq 0 ] && rc=1; }
    [ "$rc" -eq 0 ] && [ "$(grep -c "$want" "$log")" -eq 2 ] ||
      { tail -20 "$log"; [ "$rc" -eq 0 ] && rc=1; }
    verdict "Python $name device values ($kind)" "$rc"
    rm -f "$log"
  done
}

# A TCP port free now on the loopback, the kernel's choice.
free_port() {
  "${GPU_CHECK_PYTHON:-python3}" -c \
    'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# tests/test.sh's four pairings, each a short job with its pulls checked.
# A port another program took between free_port and the scheduler's bind
# is replaced by another (twice at most).
drive() {
  local kind=$1 here=$2 pairing log rc attempt
  for pairing in cpu2cpu cpu2gpu gpu2gpu gpu2cpu; do
    step "tests/test.sh joint 4096000 10 push_pull $pairing"
    log=$(mktemp)
    for attempt in 1 2 3; do
      TEST_BENCHMARK="$here/bin/test_benchmark" PS_BENCH_DEVICE_KIND=$kind DEBUG_MODE=1 \
        TOTAL_DURATION=30 LOG_DURATION=10 DMLC_PS_ROOT_PORT=$(free_port) \
        timeout "$(cap 120)" "$here/test.sh" joint 4096000 10 push_pull "$pairing" >"$log" 2>&1
      rc=$?
      [ "$rc" -ne 0 ] && [ "$attempt" -lt 3 ] && grep -qE "address already in use|ADDRESS_IN_USE" "$log" || break
      echo "the scheduler's port was taken; another one"
    done
    grep -E "summary:|pulled bytes checked" "$log"
    [ "$rc" -eq 0 ] && grep -q "DEBUG_MODE: [1-9][0-9]* pulled bytes checked" "$log" ||
      { tail -15 "$log"; [ "$rc" -eq 0 ] && rc=1; }
    verdict "test.sh $pairing" "$rc"
    rm -f "$log"
  done
}

# IPC pushes landing in device-memory receive buffers (see the top);
# d2d is mem_bw's device-to-device figure for 4 MiB, in GB/s.
ipc_store() {
  local kind=$1 here=$2 d2d=$3 op log rc attempt gbps
  for op in push_pull push_only; do
    step "IPC pushes into a device store: test.sh joint 4194304 4 $op gpu2gpu, shm"
    log=$(mktemp)
    for attempt in 1 2 3; do
      TEST_BENCHMARK="$here/bin/test_benchmark" PS_BENCH_DEVICE_KIND=$kind \
        DMLC_ENABLE_RDMA=shm PS_JOB_ID="gpu-check-store-$$-$attempt" PS_DEVICE_IPC=1 \
        ENABLE_RECV_BUFFER=1 DEBUG_MODE=$([ $op = push_pull ] && echo 1 || echo 0) \
        TOTAL_DURATION=100 LOG_DURATION=50 DMLC_PS_ROOT_PORT=$(free_port) \
        timeout "$(cap 120)" "$here/test.sh" joint 4194304 4 "$op" gpu2gpu >"$log" 2>&1
      rc=$?
      [ "$rc" -ne 0 ] && [ "$attempt" -lt 3 ] && grep -qE "address already in use|ADDRESS_IN_USE" "$log" || break
      echo "the scheduler's port was taken; another one"
    done
    grep -E "summary:|pulled bytes checked|pushes landed" "$log"
    # Every push (the warm-up's included) landed in its registered buffer.
    grep -qE "ENABLE_RECV_BUFFER: ([1-9][0-9]*) of \1 pushes landed" "$log" || { [ "$rc" -eq 0 ] && rc=1; }
    if [ $op = push_pull ]; then
      grep -q "DEBUG_MODE: [1-9][0-9]* pulled bytes checked" "$log" || { [ "$rc" -eq 0 ] && rc=1; }
    else
      gbps=$(sed -n 's/.*summary:.* goodput \([0-9.]*\) Gbps.*/\1/p' "$log")
      [ -n "$gbps" ] && [ -n "$d2d" ] &&
        awk -v g="$gbps" -v d="$d2d" 'BEGIN { printf "IPC push of 4 MiB: %.2f GB/s, device-to-device copy of 4 MiB: %.2f GB/s: %.0f%%\n", g / 8, d, 100 * g / 8 / d }'
    fi
    [ "$rc" -eq 0 ] || tail -15 "$log"
    verdict "IPC pushes into a device store ($op)" "$rc"
    rm -f "$log"
  done
}

run() {
  local kind=${1:-cuda} reps=${GPU_CHECK_REPS:-5} here
  here=$(cd "$(dirname "$0")" && pwd)
  local bin=$here/bin launcher=$here/ps_launch.py
  export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), memory kind $kind"
  if [ "$kind" = cuda ]; then
    step "the device"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 ||
      { echo "no nvidia-smi or no GPU"; failed=1; }
    for t in mem_cuda_device_test cuda_device_test; do
      step "$t"
      local out rc
      out=$(timeout "$(cap 120)" "$bin/$t" 2>&1)
      rc=$?
      echo "$out" | tail -15
      # A test without its device reports itself skipped: here that fails.
      if [ "$rc" -eq 0 ] && grep -q "SKIPPED" <<<"$out"; then rc=1; fi
      verdict "$t" "$rc"
    done
    # GPUDirect RDMA needs an RDMA device beside the GPU, which a GPU host
    # without a network may lack: then it is reported, not counted.
    step "verbs_gpudirect_test (GPUDirect RDMA through the ibverbs van)"
    local gd
    gd=$(timeout "$(cap 180)" "$bin/verbs_gpudirect_test" 2>&1)
    rc=$?
    echo "$gd" | tail -15
    if [ "$rc" -eq 0 ] && grep -q "no RDMA device" <<<"$gd"; then
      echo "not run: this host has no RDMA device"
    else
      if [ "$rc" -eq 0 ] && grep -q "SKIPPED" <<<"$gd"; then rc=1; fi
      verdict verbs_gpudirect_test "$rc"
    fi
    # The fabric van moves CUDA memory only where libfabric's provider
    # registers it (EFA, a libfabric built with CUDA); the GPU host may have
    # no libfabric at all: then it is reported, not counted.
    step "fabric_gpudirect_test (CUDA memory through the fabric van, FI_HMEM)"
    local fg
    fg=$(timeout "$(cap 180)" "$bin/fabric_gpudirect_test" 2>&1)
    rc=$?
    echo "$fg" | tail -15
    if [ "$rc" -eq 0 ] && grep -q -e "cannot open here" -e "does not register CUDA" <<<"$fg"; then
      echo "not run: no libfabric here, or its provider does not register CUDA memory"
    else
      if [ "$rc" -eq 0 ] && grep -q "SKIPPED" <<<"$fg"; then rc=1; fi
      verdict fabric_gpudirect_test "$rc"
    fi
  fi
  step "copy bandwidth of the $kind kind"
  local bw d2d
  bw=$(timeout "$(cap 60)" "$bin/mem_bw" "$kind" -r 20)
  verdict "mem_bw $kind" $?
  echo "$bw"
  d2d=$(awk '$1 == 4194304 { for (i = 1; i < NF; i++) if ($i == "d2d") print $(i + 1) }' <<<"$bw")
  for van in tcp shm shm-ipc; do
    within_budget "KV job over $van" || continue
    step "KV job over $van, $kind memory: 2 workers x 2 servers"
    local env=() flags=()
    case $van in
      # The sizes include 4 MiB: pulls piped on both vans, pushes sent as
      # copied out over tcp.
      tcp) flags=(-p -P) ;;
      shm) env=(DMLC_ENABLE_RDMA=shm PS_JOB_ID="gpu-check-$$")
        flags=(-p) ;;
      shm-ipc) env=(DMLC_ENABLE_RDMA=shm PS_JOB_ID="gpu-check-ipc-$$" PS_DEVICE_IPC=1)
        flags=(-i) ;;
    esac
    local log
    log=$(mktemp)
    env "${env[@]}" timeout "$(cap 240)" python3 "$launcher" -s 2 -w 2 --timeout "$(cap 200)" -- \
      "$bin/kv_device_check" "$kind" -r "$reps" "${flags[@]}" >"$log" 2>&1
    local rc=$?
    grep -E "push .* pull |late-ready|values pushed|values pulled|copied out|hostile pulls|behind the default|PASS|FAIL" "$log"
    local passes
    passes=$(grep -c "PASS \(scheduler\|server\|worker\)" "$log")
    [ "$rc" -eq 0 ] && [ "$passes" -eq 5 ] || { tail -20 "$log"; [ "$rc" -eq 0 ] && rc=1; }
    verdict "KV $van $kind" "$rc"
    rm -f "$log"
  done
  within_budget "PyTorch training" && train "$kind" "$here" "$launcher"
  within_budget "Python device values" && pydevice "$kind" "$here" "$launcher"
  within_budget "tests/test.sh pairings" && drive "$kind" "$here"
  within_budget "IPC pushes into a device store" && ipc_store "$kind" "$here" "$d2d"
  echo
  if [ "$failed" -eq 0 ]; then echo "gpu_check: every check passed"; else echo "gpu_check: some checks FAILED"; fi
  return "$failed"
}

case ${1:-} in
  pack) [ $# -eq 2 ] || { sed -n 2,12p "$0"; exit 2; }; pack "$2" ;;
  run) run "${2:-cuda}" ;;
  *) sed -n 2,20p "$0"; exit 2 ;;
esac

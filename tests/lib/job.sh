# Shell helpers for tests that run a ps job as separate processes. Source it:
#   source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
# (data dependency //tests/lib:job). Every helper is bounded in time.

# job_free_port [ADDR]: a free TCP port on ADDR (127.0.0.1), the kernel's
# choice; a race with another program taking it before the job binds is
# possible but rare.
job_free_port() {
  python3 -c 'import socket, sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' \
    "${1:-127.0.0.1}"
}

# Exports what selects VAN for the job's processes: tcp (the default), shm
# (the whole job through shared memory), fabric (libfabric on tcp;ofi_rxm),
# ucx (UCX_TLS=tcp on the loopback device) or ibverbs (the job's hosts must
# be an RDMA interface's address; few receive buffers, as five processes
# register them). Returns 2 for another name.
job_use_van() {
  unset DMLC_ENABLE_RDMA DMLC_ENABLE_UCX DMLC_PS_VAN_TYPE BYTEPS_ENABLE_IPC
  case $1 in
    tcp) ;;
    shm) export DMLC_PS_VAN_TYPE=shm PS_JOB_ID="${PS_JOB_ID:-job-$$-$RANDOM}" ;;
    fabric) export DMLC_ENABLE_RDMA=fabric FI_PROVIDER="tcp;ofi_rxm" ;;
    ucx) export DMLC_ENABLE_UCX=1 UCX_TLS=tcp UCX_NET_DEVICES=lo ;;
    ibverbs) export DMLC_ENABLE_RDMA=ibverbs BYTEPS_RDMA_RX_DEPTH=256 ;;
    *) echo "unknown van $1"; return 2 ;;
  esac
}

# job_rdma_host RDMA_TEST_ENV: sets JOB_RDMA_HOST to the RDMA interface's
# address that the rdma_test_env program names; without a device it ends
# the test as skipped (job_skip), and on any other answer as failed.
job_rdma_host() {
  local verdict
  verdict=$("$1")
  case $verdict in
    "HOST "*) JOB_RDMA_HOST=${verdict#HOST } ;;
    "SKIP "*) job_skip "${verdict#SKIP }" ;;
    *) echo "FAILED: rdma_test_env said: $verdict"; exit 1 ;;
  esac
  echo "== RDMA interface address $JOB_RDMA_HOST"
}

# job_wait_for FILE PATTERN SECONDS: 0 once FILE has a line matching
# PATTERN (grep), 1 when SECONDS passed first.
job_wait_for() {
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# job_wait_pid PID DEADLINE: waits for PID until $SECONDS reaches DEADLINE;
# its exit code, or 124 (and a message) when it still runs then.
job_wait_pid() {
  while kill -0 "$1" 2>/dev/null && [ $SECONDS -lt "$2" ]; do sleep 0.05; done
  if kill -0 "$1" 2>/dev/null; then
    echo "process $1 still runs at the deadline (a hang)"
    return 124
  fi
  wait "$1"
}

# job_netns_pair TAG ADDR_A ADDR_B: two network namespaces TAGa and TAGb
# joined by a veth pair TAGva / TAGvb with the two addresses (/24), up.
# Needs root; prints why and returns 1 when namespaces cannot be made
# (the caller skips), 2 when a later step fails.
job_netns_pair() {
  local tag=$1
  [ "$(id -u)" -eq 0 ] || { echo "not root: network namespaces need root"; return 1; }
  command -v ip >/dev/null || { echo "no ip command (iproute2)"; return 1; }
  ip netns add "${tag}a" 2>/dev/null || { echo "ip netns add failed (no namespace support here)"; return 1; }
  ip netns add "${tag}b" || return 2
  ip link add "${tag}va" type veth peer name "${tag}vb" || { echo "no veth support"; return 1; }
  ip link set "${tag}va" netns "${tag}a" && ip link set "${tag}vb" netns "${tag}b" || return 2
  ip -n "${tag}a" addr add "$2/24" dev "${tag}va" && ip -n "${tag}b" addr add "$3/24" dev "${tag}vb" || return 2
  ip -n "${tag}a" link set lo up && ip -n "${tag}b" link set lo up || return 2
  ip -n "${tag}a" link set "${tag}va" up && ip -n "${tag}b" link set "${tag}vb" up || return 2
}

# job_netns_remove TAG: removes what job_netns_pair made (the veth goes
# with its namespaces).
job_netns_remove() {
  ip netns del "${1}a" 2>/dev/null
  ip netns del "${1}b" 2>/dev/null
  return 0
}

# job_shm_snapshot FILE: the names in /dev/shm now, for job_shm_leaks.
job_shm_snapshot() {
  ls -A /dev/shm | sort >"$1"
}

# job_shm_leaks BEFORE PID...: prints the files in /dev/shm that are new
# since the snapshot BEFORE and belong to the job (named after one of its
# PIDs, or after ps); returns 1 if there is any. Other programs on the host
# may add and remove files meanwhile: those do not count. For jobs whose vans
# do not load libfabric (its callers: shm and ipc): a libfabric shm region
# ("<pid>:ps<16 hex>:...", the fabric van's) is then another job's, from a
# test in another PID namespace whose pid happens to equal one of ours.
job_shm_leaks() {
  local before=$1 ours now
  shift
  ours="(^|[^0-9])($(IFS='|'; echo "$*"))([^0-9]|\$)|^ps|ps-shm"
  now=$(mktemp)
  job_shm_snapshot "$now"
  if comm -13 "$before" "$now" | grep -Ev '^[0-9]+:ps[0-9a-f]{16}:' | grep -E "$ours"; then
    rm -f "$now"
    return 1
  fi
  rm -f "$now"
  return 0
}

# Ends the test as skipped: prints "SKIPPED: <why>" and leaves the marker
# file that tools/test.sh counts (Bazel 4 has no skipped state of its own:
# without the marker a skipped test would count as passed).
job_skip() {
  echo "SKIPPED: $*"
  if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
    printf '%s\n' "$*" >"$TEST_UNDECLARED_OUTPUTS_DIR/PS_TEST_SKIPPED"
  fi
  exit 0
}

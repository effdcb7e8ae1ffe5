#!/usr/bin/env bash
# A van whose library is missing is unavailable, saying which library: in a
# user and mount namespace of its own, libfabric.so.1 (then libucp.so.0) is
# hidden behind an empty file; ps_info must report the van unavailable
# naming the library, and a node selecting that van must fail to start with
# "not supported" and that line, while a TCP node there is unaffected.
# SKIPPED where unprivileged namespaces are refused.
#
#   missing_lib_test.sh PS_INFO SIGNAL_NODE
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
info=$1 node=$2
if ! unshare -rm true 2>/dev/null; then
  job_skip "cannot create a user and mount namespace here (unshare -rm)"
fi
fail=0
check() { # NAME PATTERN TEXT
  if grep -Eq -- "$2" <<<"$3"; then echo "ok: $1"; else echo "FAILED: $1: no line matching '$2'"; echo "$3"; fail=1; fi
}
hide() { # SONAME CMD...: runs CMD with SONAME replaced by an empty file
  local lib=$1 real
  shift
  real=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  [ -n "$real" ] || { echo "no $lib on this machine"; return 1; }
  real=$(readlink -f "$real")
  unshare -rm sh -c 'mount --bind /dev/null "$0" && exec "$@"' "$real" "$@"
}
export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=9
export PS_START_TIMEOUT_MS=3000
unset DMLC_ENABLE_RDMA DMLC_ENABLE_UCX DMLC_PS_VAN_TYPE BYTEPS_ENABLE_IPC

out=$(hide libfabric.so.1 "$info" -d 2>&1)
check "ps_info: fabric unavailable" '^  fabric .*unavailable: libfabric\.so\.1 not found \(' "$out"
check "ps_info: fabric's library listed as missing" '^    loads at open: libfabric\.so\.1 \(libfabric\.so\.1 not found' "$out"
check "ps_info: tcp still available" '^  tcp +aliases .* available' "$out"
out=$(DMLC_ENABLE_RDMA=fabric DMLC_ROLE=worker hide libfabric.so.1 timeout 20 "$node" 2>&1)
check "fabric node: refused naming the library" "van 'fabric' .*cannot run here \(libfabric\.so\.1 not found" "$out"
check "fabric node: fails to start" 'ps_postoffice_start.*operation not supported' "$out"

out=$(hide libucp.so.0 "$info" -d 2>&1)
check "ps_info: ucx unavailable" '^  ucx .*unavailable: libucp\.so\.0 not found \(' "$out"
out=$(DMLC_ENABLE_UCX=1 DMLC_ROLE=worker hide libucp.so.0 timeout 20 "$node" 2>&1)
check "ucx node: refused naming the library" "van 'ucx' .*cannot run here \(libucp\.so\.0 not found" "$out"
[ $fail -eq 0 ] && echo PASS
exit $fail

#!/usr/bin/env bash
# A KV job over the UCX van with one UCX_TLS setting: runs tests/app's
# cluster_test.sh (launcher, PASS lines, every byte and sum checked) with
# DMLC_ENABLE_UCX=1, then checks from the connection log that the job
# really ran on UCX and on the transports asked for.
#
#   ucx_cluster_test.sh TLS CLUSTER_TEST_SH LAUNCHER WORKERS SERVERS LIMIT PROGRAM [ARGS...]
#
# TLS "sm": every connection's data must go over shared memory (sysv/posix
# for messages, cma for large ones); tcp only carries the connection
# manager's traffic (the listeners, failure detection).
set -uo pipefail
tls=$1 cluster=$2 workers=$4 servers=$5
shift 2

export DMLC_ENABLE_UCX=1 UCX_TLS="$tls" PS_VERBOSE=1
out=$(bash "$cluster" "$@" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 0 ]; then
  exit 1
fi
if ! grep -q "(van ucx)" <<<"$out"; then
  echo "FAILED: the job did not run on the ucx van"
  exit 1
fi
# "connected to node N at ADDR (data over TL/DEV ...)": one per connection.
peers=$(grep -o "connected to node [0-9]* at [^ ]* (data over [^)]*)" <<<"$out")
npeers=$(grep -c . <<<"$peers")
echo "== $npeers connections"
sed 's/ at [^ ]*//' <<<"$peers" | sort | uniq -c | sed 's/^/   /'
# Every process connects to the scheduler; workers and servers to each other.
want=$(( (workers + servers) + workers * servers * 2 ))
if [ "$npeers" -lt "$want" ]; then
  echo "FAILED: $npeers connections logged, expected at least $want"
  exit 1
fi
case "$tls" in
  tcp)
    if grep -v "data over tcp/" <<<"$peers" | grep -q .; then
      echo "FAILED: UCX_TLS=tcp but some data went over another transport"
      exit 1
    fi
    ;;
  sm)
    if grep -q "tcp/" <<<"$peers"; then
      echo "FAILED: UCX_TLS=sm but some data went over tcp"
      exit 1
    fi
    if ! grep -q "sysv/\|posix/" <<<"$peers"; then
      echo "FAILED: UCX_TLS=sm but no connection used shared memory"
      exit 1
    fi
    ;;
esac
echo "PASSED: ucx van with UCX_TLS=$tls"

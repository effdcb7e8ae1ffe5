#!/usr/bin/env bash
set -uo pipefail
bin="$TEST_SRCDIR/$TEST_WORKSPACE/tools/ps_info/ps_info"
fail=0
expect() { # expect NAME PATTERN TEXT
  if ! grep -Eq -- "$2" <<<"$3"; then echo "FAIL: $1: no line matching '$2'"; fail=1; fi
}

out=$("$bin") || { echo "FAIL: ps_info exited $?"; fail=1; }
expect version '^ps [0-9]+\.[0-9]+\.[0-9]+$' "$out"
expect tcp-van '^  tcp +aliases' "$out"
expect host-mem '^  host +available' "$out"
expect ibverbs '^ibverbs devices' "$out"
expect fabric '^libfabric [0-9]+\.[0-9]+ providers:|^libfabric providers: none' "$out"
expect ucx '^ucx ' "$out"
# Each RDMA-family van names the libraries it loads at open, and whether they load.
expect fabric-libs '^    loads at open: libfabric\.so\.1 \((loads|libfabric\.so\.1 not found)' "$out"
expect ucx-libs '^    loads at open: libucs\.so\.0 \(.*\) libuct\.so\.0 \(.*\) libucp\.so\.0 \(' "$out"
expect verbs-libs '^    loads at open: libibverbs\.so\.1 \(.*\) librdmacm\.so\.1 \(' "$out"
expect config '^DMLC_ROLE=' "$out"

out=$(DMLC_NUM_WORKER=3 "$bin" -s)
expect set-only '^DMLC_NUM_WORKER=3  \[env\]' "$out"
if grep -q '^DMLC_ROLE=' <<<"$out"; then echo "FAIL: -s printed an unset variable"; fail=1; fi

# A value that does not parse is reported and makes ps_info fail.
if out=$(DMLC_NUM_WORKER=three "$bin" 2>&1); then echo "FAIL: bad value accepted"; fail=1; fi
expect bad-value 'DMLC_NUM_WORKER' "$out"

out=$("$bin" --markdown)
expect md-header '^\| variable \| type \| default \| meaning \|$' "$out"
expect md-row '^\| `PS_VERBOSE` \| int \| `0` \|' "$out"

"$bin" --bogus >/dev/null 2>&1 && { echo "FAIL: unknown option accepted"; fail=1; }
[ $fail -eq 0 ] && echo PASS
exit $fail

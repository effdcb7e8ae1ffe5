#!/usr/bin/env bash
# The layering lint passes on the real tree, and fails, naming each offending
# include, on a tree with a planted violation.
set -uo pipefail
lint="$TEST_SRCDIR/$TEST_WORKSPACE/tools/lint/check_layering.sh"
data="$TEST_SRCDIR/$TEST_WORKSPACE"
fail=0

# The real tree must have been read: the app layer includes headers.
if ! grep -q . <<<"$(find -L "$data/ps/app" -name '*.c')"; then
  echo "FAIL: no ps/app sources in the test's data"; fail=1
fi
if ! out=$("$lint" "$data"); then
  echo "FAIL: the real tree has layering violations:"; echo "$out"; fail=1
fi
if ! "$lint" "$data/tests/lint/testdata/good_tree" >/dev/null; then
  echo "FAIL: the clean fixture was rejected"; fail=1
fi
if out=$("$lint" "$data/tests/lint/testdata/bad_tree"); then
  echo "FAIL: the planted bad include was not caught"; fail=1
else
  for want in 'ps/net/tcp/tcp_van.h' 'ps/rdma/verbs/verbs_van.h'; do
    if ! grep -q "bad_app.c: includes \"$want\"" <<<"$out"; then
      echo "FAIL: violation $want not reported; got:"; echo "$out"; fail=1
    fi
  done
fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail

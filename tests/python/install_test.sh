#!/usr/bin/env bash
# //ps/python:install puts a working package where users point it: a site
# directory given as an argument, and the active virtualenv (made here with
# --system-site-packages --without-pip); each is imported from outside the
# repository by a single process, no job started, whose check calls into
# the extension (error classes, a worker refused before ps.init()).
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
install=$1
python=${PS_PYTHON:-/usr/bin/python3}
export RUNFILES_DIR="$TEST_SRCDIR"
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/python/sanitizer.sh"
py_sanitizer_env "$TEST_SRCDIR/$TEST_WORKSPACE/ps/python/ps/_ps.abi3.so"
check='import ps, sys
assert ps.__file__.startswith(sys.argv[1]), ps.__file__
assert issubclass(ps.TimedOut, ps.Error) and not ps.is_started()
try:
    ps.KVWorker()
    raise AssertionError("a KVWorker was made before ps.init()")
except ps.BadState as exc:
    assert "not started" in str(exc), exc
print("imported", ps.__file__)'

site="$TEST_TMPDIR/site"
"$install" "$site" || { echo "FAILED: install into $site"; exit 1; }
(cd / && env -u PYTHONPATH PYTHONPATH="$site" "$python" -c "$check" "$site") ||
  { echo "FAILED: import from $site"; exit 1; }

if "$python" -m venv --system-site-packages --without-pip "$TEST_TMPDIR/venv" 2>/dev/null; then
  VIRTUAL_ENV="$TEST_TMPDIR/venv" "$install" || { echo "FAILED: install into the venv"; exit 1; }
  (cd / && env -u PYTHONPATH "$TEST_TMPDIR/venv/bin/python" -c "$check" "$TEST_TMPDIR/venv") ||
    { echo "FAILED: import in the venv"; exit 1; }
else
  echo "no venv module here: the virtualenv case was not run"
fi
echo PASSED

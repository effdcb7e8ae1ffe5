#!/usr/bin/env bash
# Runs pytest suites of the Python package with Debian's interpreter, the
# package taken from the runfiles (the extension module next to its Python
# files): run_pytest.sh [--emu] MODULE... [-- PYTHON_MODULE_NEEDED...]
# --emu takes the test build of the package whose extension also has the
# emulated device kind (//ps/python:package_emu).
# A missing interpreter or module (python3-numpy, python3-pytest,
# python3-torch) makes the test SKIPPED, never a silent pass.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"

python=${PS_PYTHON:-/usr/bin/python3}
package=ps/python
if [ "${1:-}" = "--emu" ]; then package=ps/python/emu; shift; fi
tests=()
needs=(numpy pytest)
while [ $# -gt 0 ] && [ "$1" != "--" ]; do tests+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
needs+=("$@")

[ -x "$python" ] || job_skip "no $python (python3)"
for m in "${needs[@]}"; do
  "$python" -c "import $m" 2>/dev/null || job_skip "$python lacks module $m (tools/install_deps.sh installs it)"
done

root="$TEST_SRCDIR/$TEST_WORKSPACE"
source "$root/tests/python/sanitizer.sh"
py_sanitizer_env "$root/$package/ps/_ps.abi3.so" python-only
export PYTHONPATH="$root/$package:$root/tests/python"
export PYTHONDONTWRITEBYTECODE=1
cd "$root/tests/python" || exit 1
exec "$python" -m pytest -v -p no:cacheprovider "${tests[@]}"

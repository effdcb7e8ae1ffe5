#!/usr/bin/env bash
# Regenerates the README's environment-variable reference from the config
# tables (ps/base/config_vars.h and each van's own) via `ps_info --markdown`.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //tools/ps_info >/dev/null 2>&1
table=$(mktemp)
trap 'rm -f "$table"' EXIT
"$(bazel info bazel-bin 2>/dev/null)/tools/ps_info/ps_info" --markdown >"$table"
python3 - "$table" <<'PY'
import sys
begin, end = "<!-- BEGIN CONFIG TABLE -->", "<!-- END CONFIG TABLE -->"
table = open(sys.argv[1]).read()
readme = open("README.md").read()
head, rest = readme.split(begin, 1)
_, tail = rest.split(end, 1)
open("README.md", "w").write(head + begin + "\n" + table + end + tail)
PY
echo "README.md: environment reference regenerated"

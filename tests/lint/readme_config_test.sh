#!/usr/bin/env bash
# The README's environment reference must equal `ps_info --markdown`, i.e.
# the config table. Fix with tools/update_readme.sh.
set -uo pipefail
root="$TEST_SRCDIR/$TEST_WORKSPACE"
want=$("$root/tools/ps_info/ps_info" --markdown)
have=$(sed -n '/<!-- BEGIN CONFIG TABLE -->/,/<!-- END CONFIG TABLE -->/p' "$root/README.md" | sed '1d;$d')
if [ -z "$want" ]; then echo "FAIL: ps_info --markdown printed nothing"; exit 1; fi
if [ "$want" != "$have" ]; then
  echo "FAIL: README.md's environment reference is stale; run tools/update_readme.sh"
  diff <(echo "$have") <(echo "$want") | head -20
  exit 1
fi
echo PASS

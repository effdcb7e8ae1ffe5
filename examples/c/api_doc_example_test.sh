#!/usr/bin/env bash
# Checks that docs/API.md shows the example program exactly as it is: the
# first ```c block after the line "<!-- example: NAME -->" must equal the file.
#
#   api_doc_example_test.sh API.md EXAMPLE.c
set -euo pipefail
doc=$1 src=$2
name=$(basename "$src")
shown=$(mktemp)
trap 'rm -f "$shown"' EXIT
awk -v marker="<!-- example: $name -->" '
  $0 == marker { found = 1; next }
  found && !inside && /^```c$/ { inside = 1; next }
  inside && /^```$/ { exit }
  inside { print }
' "$doc" >"$shown"
if [ ! -s "$shown" ]; then
  echo "FAILED: $doc has no \`\`\`c block after <!-- example: $name -->"
  exit 1
fi
if ! diff -u "$src" "$shown"; then
  echo "FAILED: $doc shows another $name than the one built and run (diff above)"
  exit 1
fi
echo "PASSED: $doc shows $name as built ($(wc -l <"$src") lines)"

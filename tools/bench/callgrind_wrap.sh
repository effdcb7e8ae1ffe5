# shellcheck shell=bash
# Sourced by the callgrind-based scripts here (instr_count.sh,
# path_instr.sh). callgrind_wrapper DIR BENCH writes DIR/wrap.sh, what the
# launcher starts for every role: BENCH itself for the scheduler, BENCH
# under valgrind's callgrind for worker and server, whose profiles land in
# DIR/cg.worker and DIR/cg.server. Exits 2 without valgrind.
callgrind_wrapper() {
  command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
  cat >"$1/wrap.sh" <<WRAP
#!/bin/sh
[ "\$DMLC_ROLE" = scheduler ] && exec "$2" "\$@"
exec valgrind --tool=callgrind --callgrind-out-file="$1/cg.\$DMLC_ROLE" "$2" "\$@" 2>/dev/null
WRAP
  chmod +x "$1/wrap.sh"
}

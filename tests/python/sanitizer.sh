# Lets an uninstrumented interpreter load a sanitized extension module
# (sourced after tests/lib/job.sh): py_sanitizer_env EXTENSION looks at the
# runtime EXTENSION was linked with (--config=asan, ubsan, tsan) and exports
# what the Python processes of the test need for it; a build without one
# changes nothing. A runtime that cannot work here makes the test SKIPPED.
py_sanitizer_env() {
  local ext=$1 lib
  [ -f "$ext" ] || { echo "FAILED: no extension module $ext"; exit 1; }
  # The runtime the extension itself resolves to: the same one the
  # toolchain linked, whichever compiler that was.
  lib=$(ldd "$ext" 2>/dev/null | awk '$1 ~ /^lib(asan|tsan)\.so/ { print $3; exit }')
  case $lib in
    */libasan.so*)
      # ASan must be the first library of the process, before the
      # interpreter's own: preloaded into every process the test starts.
      # The interpreter keeps its objects to the end on purpose, which
      # LeakSanitizer would report as leaks of every run: leak checking is
      # off for these tests (the C tests check ps for leaks).
      export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
      export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
      echo "extension built with ASan: $lib preloaded, leak checking off"
      ;;
    */libtsan.so*)
      job_skip "the extension is built with ThreadSanitizer, which cannot see the uninstrumented interpreter's locking (the GIL): every Python test would report races that are not there"
      ;;
  esac
}

# Lets an uninstrumented interpreter load a sanitized extension module
# (sourced after tests/lib/job.sh): py_sanitizer_env EXTENSION [python-only]
# looks at the runtime EXTENSION was linked with (--config=asan, tsan) and
# exports what the test's processes need for it; a build without one, or
# with UBSan (whose runtime loads with the extension), changes nothing. "python-only": the caller runs nothing but Python from
# here on. A runtime that cannot work here makes the test SKIPPED.
py_sanitizer_env() {
  local ext=$1 only=${2:-} lib
  [ -f "$ext" ] || { echo "FAILED: no extension module $ext"; exit 1; }
  # The runtime the extension itself resolves to: the one the toolchain
  # linked, whichever compiler that was.
  # (awk reads to the end: leaving early could fail the pipe under
  # pipefail while ldd still writes.)
  lib=$(ldd "$ext" 2>/dev/null | awk '!found && $1 ~ /^lib(asan|tsan)\.so/ { print $3; found = 1 }')
  case $lib in
    */libasan.so*)
      # ASan must be the first library of the process, before the
      # interpreter's own: preloaded into every process the test starts
      # (shells and tools run with it too). The interpreter keeps objects
      # to the end on purpose, which LeakSanitizer would report as leaks of
      # every run: leak checking is off for these tests (the C tests check
      # ps for leaks).
      export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
      export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
      echo "extension built with ASan: $lib preloaded, leak checking off"
      ;;
    */libtsan.so*)
      # TSan must be preloaded too, but bash and dash crash at start with
      # it: only a test whose processes are all Python can run.
      [ "$only" = python-only ] ||
        job_skip "the extension is built with TSan, which must be preloaded into every process of the job, and this test's shell scripts crash at start with libtsan preloaded"
      export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
      echo "extension built with TSan: $lib preloaded"
      ;;
  esac
}

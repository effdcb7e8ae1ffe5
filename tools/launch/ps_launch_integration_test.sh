#!/usr/bin/env bash
# Runs small shell "programs" through ps_launch and checks what it promises:
# prefixes, environment, exit codes, and that every process (and what it
# started) is gone after a failure, a time limit or a signal. Also the
# hostfile mode through a fake `ssh` that runs the command here, and one
# task of the Slurm mode.
#
#   ps_launch_integration_test.sh [path/to/ps_launch.py]
set -uo pipefail

LAUNCH=${1:-$(dirname "$0")/ps_launch.py}
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/launch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

launch() { python3 "$LAUNCH" "$@"; }

# Every pid listed in $1 must be gone (killed, not just orphaned). A zombie
# counts as gone: an orphan waits there until init reaps it.
all_dead() {
  local pid state
  for pid in $(cat "$1"/*.pid 2>/dev/null); do
    state=$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' /proc/"$pid"/stat 2>/dev/null)
    if [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]; then
      echo "  pid $pid still alive: $(cat /proc/"$pid"/cmdline 2>/dev/null | tr '\0' ' ')"
      kill -9 "$pid" 2>/dev/null
      return 1
    fi
  done
  return 0
}

# The program: prints its environment, records its pid and a grandchild's,
# then behaves as BEHAVE says for the process named in FAIL_WHO.
PROG=$TMP/prog.sh
cat >"$PROG" <<'EOF'
#!/bin/sh
me="$DMLC_ROLE${DMLC_RANK:+.$DMLC_RANK}"
echo "hello role=$DMLC_ROLE rank=${DMLC_RANK:-none} servers=$DMLC_NUM_SERVER workers=$DMLC_NUM_WORKER uri=$DMLC_PS_ROOT_URI port=$DMLC_PS_ROOT_PORT extra=${EXTRA:-} cwd=$(pwd)"
echo "on stderr" >&2
[ -n "${PIDDIR:-}" ] && echo $$ >"$PIDDIR/$me.pid"
if [ -n "${PIDDIR:-}" ]; then
  sleep 1000 &
  echo $! >"$PIDDIR/$me.child.pid"
fi
case "${BEHAVE:-ok}" in
  ok) printf "last line without newline" ;;
  fail) if [ "$me" = "${FAIL_WHO:-}" ]; then sleep 0.3; exit 3; fi; sleep 1000 ;;
  hang) sleep 1000 ;;
  segv) if [ "$me" = "${FAIL_WHO:-}" ]; then sleep 0.3; kill -SEGV $$; fi; sleep 1000 ;;
esac
EOF
chmod +x "$PROG"

# 1. Success: prefixes on stdout and stderr, env per role, exit 0.
out=$TMP/ok.out
err=$TMP/ok.err
launch -s 2 -w 2 --env EXTRA=yes -- "$PROG" >"$out" 2>"$err"
rc=$?
[ $rc -eq 0 ] && pass "success exits 0" || fail "success exited $rc"
for who in "scheduler" "server 0" "server 1" "worker 0" "worker 1"; do
  grep -q "^\[$who\] hello " "$out" || fail "no stdout line prefixed [$who]"
  grep -q "^\[$who\] on stderr$" "$err" || fail "no stderr line prefixed [$who]"
  grep -q "^\[$who\] last line without newline$" "$out" || fail "unterminated line of [$who] lost"
done
grep -q '^\[worker 1\] hello role=worker rank=1 servers=2 workers=2 uri=127.0.0.1 port=[0-9]* extra=yes' "$out" \
  && pass "prefixes and environment" || { fail "worker 1 environment"; cat "$out"; }
grep -q '^\[scheduler\] hello role=scheduler rank=none ' "$out" || fail "scheduler got a rank"
ports=$(sed -n 's/.* port=\([0-9]*\) .*/\1/p' "$out" | sort -u | wc -l)
[ "$ports" -eq 1 ] || fail "processes disagree on the scheduler port"
grep -q "all 5 processes succeeded" "$err" || fail "no success summary"

# 2. One failing process: non-zero (its exit code), says who, kills the rest.
mkdir -p "$TMP/fail"
start=$(date +%s)
BEHAVE=fail FAIL_WHO=worker.1 PIDDIR=$TMP/fail launch -s 1 -w 2 --kill-grace 1 -- "$PROG" \
  >"$TMP/fail.out" 2>"$TMP/fail.err"
rc=$?
elapsed=$(($(date +%s) - start))
[ $rc -eq 3 ] && pass "failure exits with the process's code" || fail "failure exited $rc"
grep -q "worker 1 failed: exit code 3" "$TMP/fail.err" || { fail "failure not named"; cat "$TMP/fail.err"; }
[ "$(ls "$TMP/fail"/*.pid | wc -l)" -eq 8 ] || fail "not every process recorded its pids"
all_dead "$TMP/fail" && pass "everything killed after a failure" || fail "processes left after a failure"
[ $elapsed -lt 60 ] || fail "stopping after a failure took ${elapsed}s"

# 2b. A process killed by a signal: 128 + signal.
BEHAVE=segv FAIL_WHO=server.0 launch -s 1 -w 1 --kill-grace 1 -- "$PROG" >/dev/null 2>"$TMP/segv.err"
rc=$?
[ $rc -eq 139 ] && pass "signal death exits 128+sig" || fail "segv exited $rc"
grep -q "server 0 failed: killed by SIGSEGV" "$TMP/segv.err" || fail "signal death not named"

# 3. Time limit: exit 124, says so, kills everything.
mkdir -p "$TMP/hang"
BEHAVE=hang PIDDIR=$TMP/hang launch -s 1 -w 1 --timeout 1 --kill-grace 1 -- "$PROG" \
  >/dev/null 2>"$TMP/hang.err"
rc=$?
[ $rc -eq 124 ] && pass "time limit exits 124" || fail "time limit exited $rc"
grep -q "time limit of 1 s passed; still running: scheduler, server 0, worker 0" "$TMP/hang.err" \
  || { fail "time limit not reported"; cat "$TMP/hang.err"; }
all_dead "$TMP/hang" && pass "everything killed after the time limit" || fail "processes left after the time limit"

# 4. SIGTERM to the launcher: stops everything, exits 143.
mkdir -p "$TMP/sig"
BEHAVE=hang PIDDIR=$TMP/sig python3 "$LAUNCH" -s 1 -w 1 --kill-grace 1 -- "$PROG" \
  >/dev/null 2>"$TMP/sig.err" &
lpid=$!
for _ in $(seq 100); do [ "$(ls "$TMP/sig"/*.pid 2>/dev/null | wc -l)" -eq 6 ] && break; sleep 0.1; done
kill -TERM $lpid
wait $lpid
rc=$?
[ $rc -eq 143 ] && pass "SIGTERM exits 143" || fail "SIGTERM exited $rc"
all_dead "$TMP/sig" && pass "everything killed after SIGTERM" || fail "processes left after SIGTERM"

# 5. A program that cannot be started.
launch -- "$TMP/does-not-exist" >/dev/null 2>"$TMP/nostart.err"
rc=$?
[ $rc -eq 127 ] && grep -q "cannot start scheduler" "$TMP/nostart.err" \
  && pass "missing program exits 127" || fail "missing program exited $rc"

# 6. Usage errors exit 2.
launch -s 1 >/dev/null 2>&1
[ $? -eq 2 ] && pass "no program exits 2" || fail "no program did not exit 2"

# 7. Host file over a fake ssh that runs the remote command here.
mkdir -p "$TMP/bin" "$TMP/remote dir"
cat >"$TMP/bin/ssh" <<EOF
#!/bin/sh
# Fake ssh: skips options, records the host, runs the command locally.
while [ \$# -gt 0 ]; do
  case "\$1" in
    -o) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
echo "\$1" >>"$TMP/ssh_hosts"
shift
exec sh -c "\$*"
EOF
chmod +x "$TMP/bin/ssh"
printf '# test hosts\nlocalhost scheduler\n127.0.0.1 server\nuser@127.0.0.1 worker\n' >"$TMP/hosts"
PATH="$TMP/bin:$PATH" launch --hostfile "$TMP/hosts" -s 1 -w 2 --port 4567 \
  --remote-cwd "$TMP/remote dir" --env EXTRA='a b' -- "$PROG" >"$TMP/ssh.out" 2>"$TMP/ssh.err"
rc=$?
[ $rc -eq 0 ] && pass "hostfile job exits 0" || { fail "hostfile job exited $rc"; cat "$TMP/ssh.err"; }
grep -q "^\[worker 1\] hello role=worker rank=1 servers=1 workers=2 uri=localhost port=4567 extra=a b cwd=$TMP/remote dir$" \
  "$TMP/ssh.out" && pass "hostfile env, quoting and cwd" || { fail "hostfile worker line"; cat "$TMP/ssh.out"; }
[ "$(sort "$TMP/ssh_hosts" | tr '\n' ' ')" = "127.0.0.1 localhost user@127.0.0.1 user@127.0.0.1 " ] \
  && pass "hostfile placement" || fail "ssh hosts: $(tr '\n' ' ' <"$TMP/ssh_hosts")"

mkdir -p "$TMP/sshfail"
BEHAVE=fail FAIL_WHO=server.0 PIDDIR=$TMP/sshfail PATH="$TMP/bin:$PATH" \
  launch --hostfile "$TMP/hosts" -s 1 -w 1 --kill-grace 1 -- "$PROG" >/dev/null 2>"$TMP/sshfail.err"
rc=$?
[ $rc -eq 3 ] && pass "hostfile failure exits 3" || fail "hostfile failure exited $rc"
all_dead "$TMP/sshfail" && pass "hostfile: everything killed" || fail "hostfile: processes left"

# 8. One Slurm task (what srun would start on each node).
SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_NODELIST='node[07-08]' SLURM_JOB_ID=42 \
  launch --slurm -s 1 -- "$PROG" >"$TMP/slurm.out" 2>/dev/null
rc=$?
[ $rc -eq 0 ] || fail "slurm task exited $rc"
grep -q '^\[worker 1\] hello role=worker rank=1 servers=1 workers=2 uri=node07 port=20042 ' "$TMP/slurm.out" \
  && pass "slurm task environment" || { fail "slurm task line"; cat "$TMP/slurm.out"; }

if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"

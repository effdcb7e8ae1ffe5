# shellcheck shell=bash
# Sourced by the benchmark scripts here. tool_rtt TRANSPORT PORT prints the
# transport's own tool's 8-byte round trip in us (2x the one-way latency
# that ucx_perftest tag_lat and fi_pingpong report), with the environment
# transport_env.sh set for TRANSPORT (ucx-* or fabric-*); nothing for
# another transport or when the tool fails.
tool_rtt() {
  case $1 in
  ucx-*)
    timeout 60 ucx_perftest -p "$2" >/dev/null 2>&1 &
    sleep 0.5
    timeout 60 ucx_perftest 127.0.0.1 -p "$2" -t tag_lat -s 8 -n 100000 2>&1 |
      awk '/^Final:/ {print 2 * $3}' ;;
  fabric-*)
    timeout 60 fi_pingpong -p "$PS_FABRIC_PROVIDER" -e rdm -S 8 -I 20000 -B "$2" \
      >/dev/null 2>&1 &
    sleep 0.3
    timeout 60 fi_pingpong -p "$PS_FABRIC_PROVIDER" -e rdm -S 8 -I 20000 -P "$2" \
      127.0.0.1 2>&1 | tail -1 | awk '{print 2 * $7}' ;;
  esac
  wait 2>/dev/null
}

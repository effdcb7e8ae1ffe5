# A po_node job as separate processes, for the shell tests of tests/net.
# Source it after tests/lib/job.sh, with NODE (the po_node binary) and TMP
# (a scratch folder) set; it installs an EXIT trap that kills what is left
# and removes TMP.
#
# po_job NAME SPEC...: a scheduler on 127.0.0.1 and one process per SPEC,
# role@host (server, worker or joint; host is the DMLC_NODE_HOST), each
# bounded by `timeout 60`; DMLC_NUM_SERVER / DMLC_NUM_WORKER count the
# specs (a joint one in both). Output in $TMP/NAME.sched and $TMP/NAME.<i>
# for the i-th spec. Returns the number of processes that failed. Other
# variables (PO_ROUNDS, BYTEPS_ENABLE_MIXED_MODE, ...) come from the caller.
po_pids=()
po_cleanup() {
  for p in "${po_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap po_cleanup EXIT

po_job() {
  local name=$1
  shift
  po_pids=()
  local n_s=0 n_w=0 spec port
  for spec in "$@"; do
    case ${spec%@*} in
      server) n_s=$((n_s + 1)) ;;
      worker) n_w=$((n_w + 1)) ;;
      joint) n_s=$((n_s + 1)) n_w=$((n_w + 1)) ;;
    esac
  done
  port=$(job_free_port)
  export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=$n_s \
    DMLC_NUM_WORKER=$n_w PS_START_TIMEOUT_MS=${PS_START_TIMEOUT_MS:-20000}
  DMLC_ROLE=scheduler timeout 60 "$NODE" >"$TMP/$name.sched" 2>&1 &
  po_pids+=($!)
  local i=0
  for spec in "$@"; do
    DMLC_ROLE=${spec%@*} DMLC_NODE_HOST=${spec#*@} timeout 60 "$NODE" >"$TMP/$name.$i" 2>&1 &
    po_pids+=($!)
    i=$((i + 1))
  done
  local bad=0 p
  for p in "${po_pids[@]}"; do
    wait "$p" || bad=$((bad + 1))
  done
  po_pids=()
  return $bad
}

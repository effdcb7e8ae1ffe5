# shellcheck shell=bash
# Sourced by the benchmark scripts here. transport_env NAME sets, in the
# calling shell, the environment that makes ps (and the transport's own
# tool) use transport NAME, after clearing what another one set:
#   tcp         the tcp van (the default)
#   shm         the shared-memory van (a job id of its own)
#   fabric-tcp  libfabric, tcp;ofi_rxm    fabric-shm  libfabric, shm
#   ucx-tcp     UCX, UCX_TLS=tcp          ucx-sm      UCX, posix,sysv,cma
# UCX lanes stay on lo unless UCX_NET_DEVICES says otherwise (other tests on
# this machine create and remove veth pairs, whose lanes then fail to wire
# up). Returns 1 for an unknown name.
transport_env() {
  unset DMLC_ENABLE_RDMA DMLC_ENABLE_UCX DMLC_PS_VAN_TYPE PS_FABRIC_PROVIDER FI_PROVIDER UCX_TLS
  export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
  case $1 in
  tcp) ;;
  shm) export DMLC_PS_VAN_TYPE=shm PS_JOB_ID=${PS_JOB_ID:-bench-$$} ;;
  fabric-tcp) export DMLC_ENABLE_RDMA=fabric PS_FABRIC_PROVIDER="tcp;ofi_rxm" ;;
  fabric-shm) export DMLC_ENABLE_RDMA=fabric PS_FABRIC_PROVIDER=shm ;;
  ucx-tcp) export DMLC_ENABLE_UCX=1 UCX_TLS=tcp ;;
  ucx-sm) export DMLC_ENABLE_UCX=1 UCX_TLS=posix,sysv,cma ;;
  *) echo "unknown transport $1" >&2; return 1 ;;
  esac
}

#!/usr/bin/env bash
# Runs tests/app's job script with the libfabric van on one provider:
#   fabric_cluster_test.sh PROVIDER CLUSTER_TEST_SH [its arguments...]
# The job's processes inherit DMLC_ENABLE_RDMA=fabric and the provider.
set -uo pipefail
export FI_PROVIDER="$1"
export PS_FABRIC_PROVIDER="$1"
export DMLC_ENABLE_RDMA=fabric
script=$2
shift 2
exec bash "$script" "$@"

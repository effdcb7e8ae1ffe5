#!/usr/bin/env bash
# The KV job of //tests/app over the ibverbs van: finds the RDMA interface
# (rdma_test_env), then runs tests/app/cluster_test.sh with a launcher that
# puts the job on that interface with DMLC_ENABLE_RDMA=ibverbs. Without an
# RDMA device it says why and ends as skipped (job_skip), as hardware tests do.
#
#   rdma_cluster_test.sh TEST_ENV CLUSTER_TEST LAUNCH_SHIM LAUNCHER W S LIMIT PROGRAM
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/lib/job.sh"
test_env=$1 cluster_test=$2 shim=$3 launcher=$4 workers=$5 servers=$6 limit=$7 program=$8

job_rdma_host "$test_env"
export PS_TEST_RDMA_HOST=$JOB_RDMA_HOST PS_TEST_LAUNCHER=$launcher DMLC_ENABLE_RDMA=ibverbs
exec bash "$cluster_test" "$shim" "$workers" "$servers" "$limit" "$program"

#!/usr/bin/env python3
"""The "strangers" job of //tests/hostile:job_driver.py on the ibverbs van.

  strangers_rdma.py RDMA_TEST_ENV JOB_DRIVER SUM_NODE RAW_CLIENT

rdma_test_env names the address of an RDMA interface (PS_TEST_RDMA_HOST, or
the first one with an address). Without an RDMA device it says why and this
test says "SKIPPED: ..." and leaves the skip marker, as the other
requires-rdma tests do.
Otherwise the summation job runs on that address with
DMLC_ENABLE_RDMA=ibverbs and a PS_JOB_SECRET, and job_driver.py judges it
with its own checks: a worker with a wrong secret and one with none fail to
start with PS_ERR_AUTH and a "refused us" line, the scheduler logs a
refusal for each, nobody's node table has them, and the job finishes with
every sum right within the driver's deadline (90 s).
"""
import importlib.util
import sys


def main():
    test_env, driver, sum_node, raw_client = sys.argv[1:5]
    spec = importlib.util.spec_from_file_location("job_driver", driver)
    jd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(jd)
    if jd.rdma_host(test_env) is None:
        return 0
    sys.argv = [driver, "strangers", "ibverbs", sum_node, raw_client]
    return jd.main()


if __name__ == "__main__":
    sys.exit(main())

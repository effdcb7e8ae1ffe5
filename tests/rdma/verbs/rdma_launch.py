#!/usr/bin/env python3
"""The launcher (tools/launch/ps_launch.py) with the job on the RDMA
interface: runs $PS_TEST_LAUNCHER with --host $PS_TEST_RDMA_HOST added, so
that tests/app/cluster_test.sh, which only knows the loopback job, starts
the job unchanged on the RDMA address. The van comes from the environment
(the caller exports DMLC_ENABLE_RDMA=ibverbs).

    rdma_launch.py [launcher arguments...]
"""
import os
import sys


def main():
    launcher = os.environ.get("PS_TEST_LAUNCHER", "")
    host = os.environ.get("PS_TEST_RDMA_HOST", "")
    if not launcher or not host:
        sys.stderr.write("rdma_launch.py: set PS_TEST_LAUNCHER and PS_TEST_RDMA_HOST\n")
        return 2
    args = sys.argv[1:]
    # Options go before the "--" that starts the program's command line.
    cut = args.index("--") if "--" in args else len(args)
    extra = ["--host", host]
    os.execv(sys.executable, [sys.executable, launcher] + args[:cut] + extra + args[cut:])


if __name__ == "__main__":
    sys.exit(main())

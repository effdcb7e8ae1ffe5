"""python3 -m ps.server: the summation server program, as BytePS's server
process. Started like any ps node (DMLC_ROLE server or scheduler and the
rest of DMLC_* / BYTEPS_* from the environment); a server serves KV app 0
until the workers leave the job (their ps.finalize()), the scheduler runs
the job. Exits 0 when the job ended cleanly, 1 otherwise (and says why)."""
import argparse
import sys

from ps import _ps


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m ps.server", description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds to wait for the workers to finish (default: no limit)")
    args = parser.parse_args(argv)
    try:
        report = _ps.sum_server_run(args.timeout)
    except _ps.Error as exc:
        sys.stderr.write("ps.server: %s\n" % exc)
        return 1
    if report["role"] == "server":
        print("ps.server: server %d served %d pushes, %d pulls, %d rounds"
              % (report["rank"], report["pushes"], report["pulls"], report["rounds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

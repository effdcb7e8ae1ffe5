#!/usr/bin/env python3
"""tools/test_skips.py finds the skipped targets of a bazel test log, and
only those: a marker folder, a zipped marker, a googletest binary whose
every case skipped; not a partly skipped binary, a plain pass or a failure."""
import os
import subprocess
import sys
import tempfile
import zipfile

SCRIPT = sys.argv[1]

XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2" name="AllTests"><testsuite name="S" tests="2">
<testcase name="A" status="run" result="%s" classname="S">%s</testcase>
<testcase name="B" status="run" result="skipped" classname="S"><skipped message="x.cc:9&#x0A;no device here"/></testcase>
</testsuite></testsuites>
"""


def target(root, name):
    d = os.path.join(root, "t", name)
    os.makedirs(os.path.join(d, "test.outputs"))
    return d


def main():
    root = tempfile.mkdtemp()
    with open(os.path.join(target(root, "marker"), "test.outputs", "PS_TEST_SKIPPED"), "w") as f:
        f.write("not root\n")
    with zipfile.ZipFile(os.path.join(target(root, "zipped"), "test.outputs", "outputs.zip"), "w") as z:
        z.writestr("PS_TEST_SKIPPED", "no valgrind\n")
    with open(os.path.join(target(root, "gtest_all"), "test.xml"), "w") as f:
        f.write(XML % ("skipped", '<skipped message="x.cc:3&#x0A;no device here"/>'))
    with open(os.path.join(target(root, "gtest_some"), "test.xml"), "w") as f:
        f.write(XML % ("completed", ""))
    target(root, "plain")
    with open(os.path.join(target(root, "failed"), "test.outputs", "PS_TEST_SKIPPED"), "w") as f:
        f.write("a failure is not a skip\n")
    log = os.path.join(root, "log")
    with open(log, "w") as f:
        f.write("//t:marker   PASSED in 0.1s\n"
                "//t:zipped   (cached) PASSED in 0.2s\n"
                "//t:gtest_all   PASSED in 0.1s\n"
                "//t:gtest_some   PASSED in 0.1s\n"
                "//t:plain   PASSED in 0.1s\n"
                "//t:failed   FAILED in 0.1s\n")
    out = subprocess.run([sys.executable, SCRIPT, log, root], capture_output=True, text=True,
                         check=True).stdout
    got = dict(line.split("\t", 1) for line in out.splitlines())
    want = {
        "//t:marker": "not root",
        "//t:zipped": "no valgrind",
        "//t:gtest_all": "all 2 test cases skipped: no device here",
    }
    if got != want:
        print("FAILED: got %r, want %r" % (got, want))
        return 1
    print("PASSED: %d skipped targets found, none else" % len(got))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Lists the test targets of a `bazel test` run that skipped.

  test_skips.py BAZEL_TEST_LOG TESTLOGS_DIR

Bazel 4 has no skipped state: a test whose precondition is missing exits 0
and counts as passed. This finds those among the targets the log shows as
PASSED and prints one line per skipped target, "LABEL<TAB>REASON":
- a test that called job_skip (tests/lib/job.sh) or ps_test_skip
  (tests/lib/skip.h) left the marker PS_TEST_SKIPPED among its undeclared
  outputs (a folder, or outputs.zip when Bazel zips them);
- a googletest binary all of whose test cases skipped (GTEST_SKIP) says so
  in its test.xml.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET
import zipfile

MARKER = "PS_TEST_SKIPPED"
PASSED = re.compile(r"^(//[^ ]+) +(?:\(cached\) +)?PASSED")


def marker_reason(outputs):
    path = os.path.join(outputs, MARKER)
    if os.path.isfile(path):
        with open(path, errors="replace") as f:
            return f.read().strip() or "no reason given"
    archive = os.path.join(outputs, "outputs.zip")
    if os.path.isfile(archive):
        try:
            with zipfile.ZipFile(archive) as z:
                if MARKER in z.namelist():
                    return z.read(MARKER).decode(errors="replace").strip() or "no reason given"
        except zipfile.BadZipFile:
            return None
    return None


def gtest_reason(xml_path):
    """All of a googletest binary's cases skipped: the first one's message."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    cases = root.findall(".//testcase")
    if not cases or any(c.get("result") != "skipped" for c in cases):
        return None
    for c in cases:
        s = c.find("skipped")
        if s is not None and s.get("message"):
            # "file:line" first, then what GTEST_SKIP() was given.
            lines = [l for l in s.get("message").splitlines() if l.strip()]
            return "all %d test cases skipped: %s" % (len(cases), lines[-1].strip())
    return "all %d test cases skipped" % len(cases)


def main():
    log, testlogs = sys.argv[1], sys.argv[2]
    with open(log, errors="replace") as f:
        labels = [m.group(1) for m in map(PASSED.match, f) if m]
    for label in labels:
        pkg, _, name = label[2:].partition(":")
        base = os.path.join(testlogs, pkg, name)
        why = marker_reason(os.path.join(base, "test.outputs"))
        if why is None:
            why = gtest_reason(os.path.join(base, "test.xml"))
        if why is not None:
            print("%s\t%s" % (label, why.splitlines()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

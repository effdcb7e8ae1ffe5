#!/usr/bin/env python3
"""Config-table completeness: the tables (the core's in ps/base/config_vars.h
and each layer's own, ps/**/*_config_vars.h) and the code that reads the
environment agree.

  check_config_vars.py ROOT    exit 0 when ROOT's tree is clean, 1 with one
                               line per violation otherwise

Rules (C and C++ sources under ps/, tests/ and tools/; Python under tests/
and tools/; the config module itself and ps_info, which print every entry,
never count as readers):

  unread     every table entry has a reader: PS_CFG_<NAME> (a layer's own:
             PS_<LAYER>_CFG(<NAME>)) used in a source
             that is not a unit test (*_test.c, *_test.cc) other than as the
             first argument of ps_config_set(), or "<NAME>" read with
             getenv() or an environment-reading helper (a C function that
             calls getenv(<parameter>) and no setenv(); Python's
             os.environ.get / os.environ[...] / os.getenv (an assignment to
             os.environ[...] sets, it does not read), and the helpers
             in PY_READ_HELPERS). An alias is honoured by the table reader
             whenever its entry is read, so it needs no reader of its own.
  untabled   every name read as above is in the table (as a name or alias)
             or in NOT_IN_TABLE, which says why.
  bypass     library code (ps/) reads table names through the table, never
             with getenv(), except BYPASS_ALLOWED.
  opaque     getenv() with a computed name only inside a recognised helper,
             and Python environment reads with a computed name only in the
             helpers of PY_READ_HELPERS: otherwise this lint cannot see the
             name.
  stale      every name in NOT_IN_TABLE is still read, only where its reason
             allows (TEST_ONLY names only from tests), and is not in the
             table; every name in OTHER_OWNER_UNREAD is a table entry that
             still has no reader.

Shell scripts are not scanned: they set variables for the programs they
start (tests/lib/job.sh, tools/bench) and read only their own arguments and
Bazel's test environment.
"""
import os
import re
import sys

# Table entries that have no reader yet and whose implementation (or removal
# from the table) is in progress. Each must leave this list as it gets a
# reader or leaves the table; the lint fails on a name listed here that is
# read or gone.
OTHER_OWNER_UNREAD = set()

# Names read that are not ps configuration, and why. "where" limits the
# readers: "tests" means only test code (under tests/, or a *_test file).
THIRD_PARTY = "a variable of a library ps loads; ps only consults or sets it"
BAZEL = "set by Bazel for tests and `bazel run`, not by users"
TEST_KNOB = "a knob of one test's own processes, set by that test"
NOT_IN_TABLE = {
    "FI_PROVIDER": (THIRD_PARTY + " (libfabric's provider filter, named in "
                    "the fabric van's error when no provider fits)", "any"),
    "CUDA_VISIBLE_DEVICES": (THIRD_PARTY + " (CUDA's GPU list; DMLC_INTERFACE=auto maps "
                             "STEPMESH_GPU through it to the GPU's PCI device)", "any"),
    "UCX_TLS": (THIRD_PARTY + " (tests save and restore it)", "tests"),
    "UCX_RNDV_THRESH": (THIRD_PARTY + " (tests save and restore it)", "tests"),
    "UCX_TCP_RX_SEG_SIZE": (THIRD_PARTY + " (the ucx van sets its own default when "
                            "the user did not set it, ps/rdma/ucx/ucx_ctx.c)", "any"),
    "SLURM_PROCID": ("set by Slurm; ps_launch --slurm takes the rank from it", "any"),
    "SLURM_NTASKS": ("set by Slurm; ps_launch --slurm takes the job size from it", "any"),
    "SLURM_NPROCS": ("set by older Slurm instead of SLURM_NTASKS", "any"),
    "SLURM_NODELIST": ("set by Slurm; ps_launch --slurm takes the scheduler host from it", "any"),
    "SLURM_JOB_NODELIST": ("set by Slurm instead of SLURM_NODELIST", "any"),
    "SLURM_JOB_ID": ("set by Slurm; ps_launch --slurm derives the scheduler port from it", "any"),
    "SLURM_JOBID": ("set by older Slurm instead of SLURM_JOB_ID", "any"),
    "PS_LAUNCH_SSH": ("the default of ps_launch's --ssh option (a launcher "
                      "setting, documented in its --help; no ps process reads it)", "any"),
    "PS_STAGE_TRACE_FILE": ("read only by the diagnostic stage-trace build "
                            "(--define=ps_stage_trace=1), documented in "
                            "ps/base/stage_trace.h and docs/STYLE.md", "any"),
    "TEST_TMPDIR": (BAZEL, "tests"),
    "TEST_SRCDIR": (BAZEL, "tests"),
    "TEST_WORKSPACE": (BAZEL, "tests"),
    "TEST_UNDECLARED_OUTPUTS_DIR": (BAZEL, "tests"),
    "BUILD_WORKING_DIRECTORY": (BAZEL + " (tools resolve paths from where "
                                "`bazel run` was called)", "any"),
    "PS_TEST_DEVICE_KIND": (TEST_KNOB + " (the memory kind of the Python device nodes: emu, "
                            "or cuda in tools/gpu_check.sh)", "tests"),
    "PO_ROUNDS": (TEST_KNOB, "tests"),
    "PO_MODE": (TEST_KNOB, "tests"),
    "PO_ROUND_MS": (TEST_KNOB, "tests"),
    "PO_RECOVERY_MS": (TEST_KNOB, "tests"),
    "FAULT_AFTER": (TEST_KNOB, "tests"),
    "FAULT_BYTES": (TEST_KNOB, "tests"),
    "FAULT_LIMIT_MS": (TEST_KNOB, "tests"),
    "FAULT_ROUNDS": (TEST_KNOB, "tests"),
    "FAULT_ROUND_MS": (TEST_KNOB, "tests"),
    "SN_LEN": (TEST_KNOB, "tests"),
    "SN_ROUNDS": (TEST_KNOB, "tests"),
    "SN_UNTIL_FILE": (TEST_KNOB, "tests"),
    "SN_ROUND_MS": (TEST_KNOB, "tests"),
    "SIG_BYTES": (TEST_KNOB, "tests"),
    "SIG_LIMIT_MS": (TEST_KNOB, "tests"),
    "RC_SECRET": (TEST_KNOB, "tests"),
    "KILL_CHECK_DONE": (TEST_KNOB, "tests"),
    "PS_TEST_LAUNCHER": (TEST_KNOB, "tests"),
    "PS_TEST_RDMA_HOST": (TEST_KNOB + " (the RDMA tests' device address)", "tests"),
    "PS_FABRIC_TEST_PROVIDER": (TEST_KNOB, "tests"),
    "PS_FABRIC_TEST_CHILD": (TEST_KNOB, "tests"),
    "PS_SIGKEEP_TEST_VAR": (TEST_KNOB, "tests"),
    "ENV_TEST_KEPT": ("a name ps/base/env_test.cc sets and reads: no setting of ps", "tests"),
    "PS_PYTHON": (TEST_KNOB + " (the interpreter the Python tests start their nodes with)",
                  "tests"),
}

# Library files that read table names with getenv(), and why.
BYPASS_ALLOWED = {
    ("ps/base/log.c", "PS_VERBOSE"): "logging works before and without the config table",
    ("ps/base/log.c", "PS_LOG_LEVEL"): "logging works before and without the config table",
    ("ps/base/log.c", "PS_LOG_COMPONENTS"): "logging works before and without the config table",
    ("ps/base/stage_trace.c", "DMLC_ROLE"): "read in an exit-time destructor of the diagnostic build",
}

# Python functions that read environment variables whose names are their
# string arguments (path -> function names).
PY_READ_HELPERS = {
    "tools/launch/ps_launch.py": {"need"},
}

# The config module and the tools that print every entry: not readers.
CONFIG_MODULE = {
    "ps/base/config.c", "ps/base/config.h", "ps/base/config_vars.h",
    "ps/base/config_test.cc",
}
PRINTERS_DIR = "tools/ps_info/"

TABLE_RE = re.compile(
    r'^PS_CONFIG_VAR\(\s*([A-Z0-9_]+)\s*,\s*[A-Z]+\s*,\s*"[^"]*"\s*,\s*"[^"]*"\s*,'
    r'\s*(?:NULL|"([A-Z0-9_]+)")', re.M)
GETENV_LIT_RE = re.compile(r'\b(?:secure_)?getenv\s*\(\s*"([A-Za-z0-9_]+)"')
GETENV_ANY_RE = re.compile(r'\b(?:secure_)?getenv\s*\(\s*([^)"\s][^)]*)\)')
CFG_RE = re.compile(r'\bPS_CFG_([A-Z0-9_]+)\b|\bPS_[A-Z]+_CFG\(\s*([A-Z0-9_]+)\s*\)')
PY_LIT_RE = re.compile(
    r'\b(?:os\.)?(?:environ\.get|getenv)\s*\(\s*["\']([A-Za-z0-9_]+)["\']'
    r'|\benviron\s*\[\s*["\']([A-Za-z0-9_]+)["\']\s*\](?!\s*=[^=])')
PY_ANY_RE = re.compile(
    r'\b(?:os\.)?(?:environ\.get|getenv)\s*\(\s*([^"\'\s)][^,)]*)'
    r'|\benviron\s*\[\s*([^"\'\s\]][^\]]*)\](?!\s*=[^=])')
C_EXT = (".c", ".h", ".cc")


def strip_c_comments(text):
    """Blanks out comments (keeping line breaks) so prose is not code."""
    def blank(m):
        return re.sub(r'[^\n]', ' ', m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*', blank, text, flags=re.S)


def strip_py_comments(text):
    return re.sub(r'#[^\n]*', '', text)


def is_test_path(rel):
    base = os.path.basename(rel)
    return rel.startswith("tests/") or re.search(r'_test\.(c|cc|py)$', base) is not None


def enclosing_function(text, pos):
    """(name, parameter text) of the C function whose body holds `pos`: the
    last line before it that starts in column 0 with a declaration."""
    for line in reversed(text[:pos].split("\n")):
        m = re.match(r'[A-Za-z_][\w\s\*:&<>,]*?\b([A-Za-z_]\w*)\s*\(([^)]*)', line)
        if m and not re.match(r'(return|if|for|while|switch)\b', line):
            return m.group(1), m.group(2)
    return None, ""


def function_body(text, pos):
    """The text from the '{' that opens the function holding `pos` to its
    matching '}'."""
    start = text.rfind("\n{", 0, pos)
    if start < 0:
        start = text.rfind("{", 0, pos)
    depth, i = 0, start
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1
    return text[start:]


# This lint and its test name the patterns it looks for, in strings.
SELF = {"tools/lint/check_config_vars.py", "tests/lint/config_vars_test.py"}


def table_files(root):
    """The core table and every layer's own (ps/**/*_config_vars.h)."""
    yield "ps/base/config_vars.h"
    for d, dirs, files in os.walk(os.path.join(root, "ps")):
        dirs.sort()
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
            if f.endswith("_config_vars.h") and rel != "ps/base/config_vars.h":
                yield rel


def source_files(root):
    for top in ("ps", "tests", "tools"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            rel_d = os.path.relpath(d, root)
            if rel_d.replace(os.sep, "/").startswith("tests/lint/testdata"):
                dirs[:] = []
                continue
            dirs.sort()
            for f in sorted(files):
                if f.endswith(C_EXT) or f.endswith(".py"):
                    rel = os.path.join(rel_d, f).replace(os.sep, "/")
                    if rel in SELF:
                        continue
                    yield rel, os.path.join(d, f)


def check(root, other_owner_unread=None, not_in_table=None, bypass_allowed=None,
          py_read_helpers=None):
    """The violations in ROOT's tree, one line each; the lists default to
    this file's (a test passes its own for a fixture tree)."""
    other_owner_unread = OTHER_OWNER_UNREAD if other_owner_unread is None else other_owner_unread
    not_in_table = NOT_IN_TABLE if not_in_table is None else not_in_table
    bypass_allowed = BYPASS_ALLOWED if bypass_allowed is None else bypass_allowed
    py_read_helpers = PY_READ_HELPERS if py_read_helpers is None else py_read_helpers
    errors = []
    names, aliases = [], {}
    for rel in table_files(root):
        with open(os.path.join(root, rel)) as f:
            table_text = strip_c_comments(f.read())
        for m in TABLE_RE.finditer(table_text):
            names.append(m.group(1))
            if m.group(2):
                aliases[m.group(2)] = m.group(1)
    if not names:
        return ["ps/base/config_vars.h: no PS_CONFIG_VAR entries found"]
    in_table = set(names) | set(aliases)

    sources = {}
    for rel, path in source_files(root):
        with open(path, errors="replace") as f:
            text = f.read()
        sources[rel] = strip_py_comments(text) if rel.endswith(".py") else strip_c_comments(text)

    # Environment-reading C helpers: functions calling getenv(<identifier>).
    read_helpers = set()
    reads = []  # (name, rel)
    for rel, text in sources.items():
        if not rel.endswith(C_EXT) or rel == "ps/base/config.c":
            continue
        for m in GETENV_ANY_RE.finditer(text):
            arg = m.group(1).strip()
            fn, params = enclosing_function(text, m.start())
            body = function_body(text, m.start())
            if fn is None or not re.fullmatch(r'[A-Za-z_]\w*', arg) or \
                    re.search(r'\b%s\b' % re.escape(arg), params) is None:
                errors.append("%s: opaque: getenv(%s) with a computed name outside an "
                              "environment helper" % (rel, arg))
                continue
            if re.search(r'\bsetenv\s*\(', body) is None:
                read_helpers.add(fn)
    helper_call_re = (re.compile(r'\b(%s)\s*\(\s*"([A-Za-z0-9_]+)"' % "|".join(sorted(read_helpers)))
                      if read_helpers else None)

    readers = {}  # table name -> first reader
    for rel, text in sources.items():
        if rel.endswith(".py"):
            helpers = py_read_helpers.get(rel, set())
            for m in PY_LIT_RE.finditer(text):
                reads.append((m.group(1) or m.group(2), rel))
            for m in PY_ANY_RE.finditer(text):
                arg = (m.group(1) or m.group(2)).strip()
                defs = re.findall(r'^\s*def (\w+)', text[:m.start()], re.M)
                if not defs or defs[-1] not in helpers:
                    errors.append("%s: opaque: environment read of %s with a computed name "
                                  "outside PY_READ_HELPERS" % (rel, arg))
            for h in helpers:
                for call in re.finditer(r'\b%s\s*\(([^)]*)\)' % re.escape(h), text):
                    for lit in re.findall(r'["\']([A-Z0-9_]+)["\']', call.group(1)):
                        reads.append((lit, rel))
            continue
        for m in GETENV_LIT_RE.finditer(text):
            reads.append((m.group(1), rel))
            if rel.startswith("ps/") and m.group(1) in in_table and rel not in CONFIG_MODULE \
                    and (rel, m.group(1)) not in bypass_allowed:
                errors.append("%s: bypass: getenv(\"%s\") reads a table variable around the "
                              "table (use ps_config_*(PS_CFG_%s, ...))"
                              % (rel, m.group(1), aliases.get(m.group(1), m.group(1))))
        if helper_call_re is not None:
            for m in helper_call_re.finditer(text):
                reads.append((m.group(2), rel))
        if rel in CONFIG_MODULE or rel.startswith(PRINTERS_DIR) or \
                re.search(r'_test\.(c|cc)$', rel):
            continue
        for m in CFG_RE.finditer(text):
            before = text[max(0, m.start() - 40):m.start()]
            if re.search(r'ps_config_set\s*\(\s*$', before):
                continue
            readers.setdefault(m.group(1) or m.group(2), rel)

    # C and Python literal reads count as readers of table names (outside
    # the config module and unit tests), and must be of known names.
    read_where = {}
    for name, rel in reads:
        read_where.setdefault(name, set()).add(rel)
        if name in in_table:
            if rel not in CONFIG_MODULE and not re.search(r'_test\.(c|cc|py)$', rel):
                readers.setdefault(aliases.get(name, name), rel)
        elif name not in not_in_table:
            errors.append("%s: untabled: reads %s, which is not in ps/base/config_vars.h "
                          "(add it to the table, or to NOT_IN_TABLE with a reason)" % (rel, name))

    for name in names:
        if name in readers:
            if name in other_owner_unread:
                errors.append("ps/base/config_vars.h: stale: %s is read (%s); remove it from "
                              "OTHER_OWNER_UNREAD" % (name, readers[name]))
        elif name not in other_owner_unread:
            errors.append("ps/base/config_vars.h: unread: %s has no reader outside the "
                          "config module (implement it, or remove it from the table)" % name)
    for name in sorted(other_owner_unread - set(names)):
        errors.append("tools/lint/check_config_vars.py: stale: %s in OTHER_OWNER_UNREAD is "
                      "not in the table" % name)
    for name, (_, where) in sorted(not_in_table.items()):
        files = read_where.get(name, set())
        if name in in_table:
            errors.append("tools/lint/check_config_vars.py: stale: %s is in the table and in "
                          "NOT_IN_TABLE" % name)
        if not files:
            errors.append("tools/lint/check_config_vars.py: stale: %s in NOT_IN_TABLE is "
                          "read nowhere" % name)
        elif where == "tests":
            for rel in sorted(files):
                if not is_test_path(rel):
                    errors.append("%s: untabled: reads %s, which NOT_IN_TABLE allows only in "
                                  "tests" % (rel, name))
    return sorted(set(errors))


def main(argv):
    if len(argv) != 2:
        print("usage: check_config_vars.py ROOT", file=sys.stderr)
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

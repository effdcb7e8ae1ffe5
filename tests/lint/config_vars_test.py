#!/usr/bin/env python3
"""tools/lint/check_config_vars.py passes on the real tree and catches each
rule's violation in a planted tree.

The real tree is the whole repository (every C, C++ and Python source under
ps/, tests/ and tools/). Declaring each as data would take a filegroup in
every package, so the test finds the checkout through the README's runfiles
link, and is tagged "external" so that Bazel reruns it every time instead of
reusing a pass from before the sources changed."""
import importlib.util
import os
import sys
import tempfile

LINT = sys.argv[1]
spec = importlib.util.spec_from_file_location("check_config_vars", LINT)
lint = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lint)

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


TABLE = """/* A table of four. */
PS_CONFIG_VAR(PS_READ_BY_GETTER, INT, "1", "van", "PS_OLD_NAME",
              "Read through the table.")
PS_CONFIG_VAR(PS_READ_BY_PROGRAM, BOOL, "0", "benchmark", NULL,
              "Read by a benchmark program's own helper.")
PS_CONFIG_VAR(PS_PENDING, BOOL, "0", "van", NULL,
              "Not read yet; listed as pending.")
PS_CONFIG_VAR(PS_TOOL_KNOB, STRING, "", "launch", NULL,
              "Read by a Python tool.")
"""

GOOD = {
    "ps/base/config_vars.h": TABLE,
    # The config module and unit tests never count as readers.
    "ps/base/config.c": 'static const char *g(const char *name) { return getenv(name); }\n',
    "ps/net/a.c": "int a(void)\n{\n    return (int)ps_config_int_or(PS_CFG_PS_READ_BY_GETTER, 1);\n}\n",
    "tests/bench/prog.c": ('static long env_long(const char *name, long dflt)\n{\n'
                           '    const char *v = getenv(name);\n'
                           '    return v != NULL ? strtol(v, NULL, 10) : dflt;\n}\n'
                           'static void save(const char *name)\n{\n'
                           '    if (getenv(name) == NULL)\n        setenv(name, "x", 0);\n}\n'
                           'int main(void)\n{\n    save("LIB_SETTING");\n'
                           '    return (int)env_long("PS_READ_BY_PROGRAM", 0) +\n'
                           '           (int)env_long("T_ROUNDS", 1) + (getenv("TEST_TMPDIR") != 0);\n}\n'),
    "tools/launch/tool.py": ('import os\n\ndef need(*names):\n'
                             '    for n in names:\n        if os.environ.get(n):\n'
                             '            return os.environ[n]\n\n'
                             'K = os.environ.get("PS_TOOL_KNOB", "")\nJ = need("SLURM_X")\n'),
}
LISTS = dict(other_owner_unread={"PS_PENDING"},
             not_in_table={"T_ROUNDS": ("test knob", "tests"),
                           "TEST_TMPDIR": ("bazel", "tests"),
                           "SLURM_X": ("slurm", "any")},
             bypass_allowed={},
             py_read_helpers={"tools/launch/tool.py": {"need"}})


def tree(files):
    root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    for rel, text in files.items():
        write(root, rel, text)
    return root


def main():
    # The real tree.
    readme = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"], "README.md")
    real = os.path.dirname(os.path.realpath(readme))
    expect(os.path.isfile(os.path.join(real, "ps/base/config_vars.h")),
           "the checkout was not found from %s (got %s)" % (readme, real))
    errors = lint.check(real)
    expect(errors == [], "the real tree has violations:\n  " + "\n  ".join(errors))

    # A clean fixture passes.
    errors = lint.check(tree(GOOD), **LISTS)
    expect(errors == [], "the clean fixture was rejected:\n  " + "\n  ".join(errors))

    # Each planted violation is reported, naming the file and the variable.
    cases = [
        ("unread entry", {"ps/net/a.c": "int a(void) { return 0; }\n"},
         "ps/base/config_vars.h: unread: PS_READ_BY_GETTER"),
        ("set, not read", {"ps/net/a.c": "void a(void)\n{\n    ps_config_set(PS_CFG_PS_READ_BY_GETTER, \"2\");\n}\n"},
         "unread: PS_READ_BY_GETTER"),
        ("read only by a unit test", {"ps/net/a.c": "int a(void) { return 0; }\n",
                                      "ps/net/a_test.cc": "int t() { return ps_config_int_or(PS_CFG_PS_READ_BY_GETTER, 0); }\n"},
         "unread: PS_READ_BY_GETTER"),
        ("untabled library read", {"ps/net/b.c": 'int b(void) { return getenv("PS_SECRET_KNOB") != 0; }\n'},
         "ps/net/b.c: untabled: reads PS_SECRET_KNOB"),
        ("untabled helper read", {"tests/bench/x.c": GOOD["tests/bench/prog.c"].replace("T_ROUNDS", "T_OTHER")},
         "tests/bench/x.c: untabled: reads T_OTHER"),
        ("untabled python read", {"tools/sweep/s.py": 'import os\nX = os.environ["PS_SWEEP_KNOB"]\n'},
         "tools/sweep/s.py: untabled: reads PS_SWEEP_KNOB"),
        ("test knob in the library", {"ps/net/c.c": 'int c(void) { return getenv("T_ROUNDS") != 0; }\n'},
         "ps/net/c.c: untabled: reads T_ROUNDS, which NOT_IN_TABLE allows only in tests"),
        ("bypass", {"ps/net/d.c": 'int d(void) { return getenv("PS_READ_BY_PROGRAM") != 0; }\n'},
         "ps/net/d.c: bypass: getenv(\"PS_READ_BY_PROGRAM\")"),
        ("bypass by alias", {"ps/net/d.c": 'int d(void) { return getenv("PS_OLD_NAME") != 0; }\n'},
         "ps/net/d.c: bypass: getenv(\"PS_OLD_NAME\") reads a table variable around the table (use ps_config_*(PS_CFG_PS_READ_BY_GETTER"),
        ("opaque C read", {"ps/net/e.c": 'const char *names[2];\nint e(int i)\n{\n    return getenv(names[i]) != 0;\n}\n'},
         "ps/net/e.c: opaque: getenv(names[i])"),
        ("opaque python read", {"tools/sweep/s.py": 'import os\ndef f(n):\n    return os.environ.get(n)\n'},
         "tools/sweep/s.py: opaque"),
        ("pending entry now read", {"ps/net/f.c": "int f(void) { return ps_config_bool_or(PS_CFG_PS_PENDING, 0); }\n"},
         "stale: PS_PENDING is read (ps/net/f.c)"),
        ("stale exception", {"tools/launch/tool.py": 'import os\nK = os.environ.get("PS_TOOL_KNOB", "")\n'},
         "stale: SLURM_X in NOT_IN_TABLE is read nowhere"),
    ]
    for what, change, want in cases:
        files = dict(GOOD)
        files.update(change)
        errors = lint.check(tree(files), **LISTS)
        expect(any(want in e for e in errors),
               "%s: no line with %r; got:\n  %s" % (what, want, "\n  ".join(errors)))
    lists = dict(LISTS, other_owner_unread={"PS_PENDING", "PS_GONE"})
    errors = lint.check(tree(GOOD), **lists)
    expect(any("stale: PS_GONE in OTHER_OWNER_UNREAD is not in the table" in e for e in errors),
           "a pending name missing from the table was not reported: %s" % errors)

    for f in failures:
        print("FAIL: " + f)
    if not failures:
        print("PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

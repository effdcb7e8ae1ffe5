"""Every external repository ps needs, all provided from the local machine.

Nothing here downloads: Bazel 4 would otherwise fetch @rules_cc and
@remote_coverage_tools from the network, so both are written locally, and
@rules_java comes from Debian's bazel-rules-java. A consumer repository calls
ps_dependencies() from its WORKSPACE.
"""

def _rules_cc_impl(rctx):
    # Bazel 4's WORKSPACE suffix wants @rules_cc; the native rules are all we use.
    rctx.file("WORKSPACE", "workspace(name = \"rules_cc\")\n")
    rctx.file("BUILD", "")
    rctx.file("cc/BUILD", "")
    rctx.file("cc/defs.bzl", "\n".join([
        "def cc_binary(**kw):",
        "    native.cc_binary(**kw)",
        "def cc_library(**kw):",
        "    native.cc_library(**kw)",
        "def cc_test(**kw):",
        "    native.cc_test(**kw)",
        "def cc_import(**kw):",
        "    native.cc_import(**kw)",
        "def cc_proto_library(**kw):",
        "    native.cc_proto_library(**kw)",
        "def cc_toolchain(**kw):",
        "    native.cc_toolchain(**kw)",
        "def cc_toolchain_suite(**kw):",
        "    native.cc_toolchain_suite(**kw)",
        "def objc_library(**kw):",
        "    native.objc_library(**kw)",
        "",
    ]))

_rules_cc = repository_rule(implementation = _rules_cc_impl)

def _coverage_stub_impl(rctx):
    # Every cc_test depends on these labels; `bazel coverage` is not offered.
    rctx.file("WORKSPACE", "workspace(name = \"remote_coverage_tools\")\n")
    rctx.file("unavailable.sh", "#!/bin/sh\necho 'coverage tools are not available offline' >&2\nexit 1\n", executable = True)
    rctx.file("BUILD", "\n".join([
        "sh_binary(name = \"coverage_report_generator\", srcs = [\"unavailable.sh\"], visibility = [\"//visibility:public\"])",
        "sh_binary(name = \"lcov_merger\", srcs = [\"unavailable.sh\"], visibility = [\"//visibility:public\"])",
        "",
    ]))

_coverage_stub = repository_rule(implementation = _coverage_stub_impl)

def _local_cuda_impl(rctx):
    cuda = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    header = rctx.path(cuda + "/include/cuda_runtime_api.h")
    static_lib = rctx.path(cuda + "/lib64/libcudart_static.a")
    if header.exists and static_lib.exists:
        rctx.symlink(cuda + "/include", "include")
        rctx.symlink(cuda + "/lib64", "lib64")
        rctx.template("BUILD", rctx.attr.build_file, {"%{CUDA_PATH}": cuda})
        rctx.file("defs.bzl", "CUDA_AVAILABLE = True\n")
    else:
        # No CUDA: every target that needs it becomes incompatible and is
        # skipped by `bazel build //...` and `bazel test //...`.
        rctx.template("BUILD", rctx.attr.stub_build_file, {"%{CUDA_PATH}": cuda})
        rctx.file("defs.bzl", "CUDA_AVAILABLE = False\n")

_local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    attrs = {
        "build_file": attr.label(allow_single_file = True),
        "stub_build_file": attr.label(allow_single_file = True),
    },
    environ = ["CUDA_PATH"],
    local = True,
)

def _local_python_impl(rctx):
    # The headers of Debian's python3-dev (the interpreter the Python package
    # targets), found by asking that interpreter; absent, the extension's
    # targets become incompatible and //... skips them.
    python = rctx.os.environ.get("PS_PYTHON", "/usr/bin/python3")
    res = rctx.execute([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
    include = res.stdout.strip() if res.return_code == 0 else ""
    if include and rctx.path(include + "/Python.h").exists:
        rctx.symlink(include, "include")
        rctx.file("BUILD", "\n".join([
            "package(default_visibility = [\"//visibility:public\"])",
            "cc_library(",
            "    name = \"headers\",",
            "    hdrs = glob([\"include/**/*.h\"]),",
            "    includes = [\"include\"],",
            ")",
            "",
        ]))
    else:
        rctx.file("BUILD", "\n".join([
            "package(default_visibility = [\"//visibility:public\"])",
            "# No Python.h for %s: targets needing it are incompatible." % python,
            "constraint_setting(name = \"python_presence\")",
            "constraint_value(name = \"python_missing\", constraint_setting = \":python_presence\")",
            "cc_library(name = \"headers\", target_compatible_with = [\":python_missing\"])",
            "",
        ]))

_local_python = repository_rule(
    implementation = _local_python_impl,
    environ = ["PS_PYTHON"],
    local = True,
)

def ps_dependencies():
    """Declares every external repository of ps. Call once from WORKSPACE."""
    existing = native.existing_rules()
    if "rules_cc" not in existing:
        _rules_cc(name = "rules_cc")
    if "rules_java" not in existing:
        native.local_repository(name = "rules_java", path = "/usr/share/bazel/rules/java")
    if "remote_coverage_tools" not in existing:
        _coverage_stub(name = "remote_coverage_tools")
    if "local_cuda" not in existing:
        _local_cuda(
            name = "local_cuda",
            build_file = Label("//third_party:cuda.BUILD"),
            stub_build_file = Label("//third_party:cuda_absent.BUILD"),
        )
    if "local_python" not in existing:
        _local_python(name = "local_python")
    if "com_google_googletest" not in existing:
        native.new_local_repository(
            name = "com_google_googletest",
            path = "/usr/src/googletest",
            build_file = str(Label("//third_party:googletest.BUILD")),
        )

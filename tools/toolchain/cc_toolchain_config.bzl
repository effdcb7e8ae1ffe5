"""A C/C++ toolchain pinned to Debian's compilers by absolute path.

C is compiled as C11 and C++ as C++17. Our code builds with -Wall -Wextra
-Werror (feature `warnings_as_errors`, on by default); third-party packages turn
it off with `package(features = ["-warnings_as_errors"])`.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load(
    "@bazel_tools//tools/cpp:cc_toolchain_config_lib.bzl",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
    "with_feature_set",
)

_C_COMPILE = [ACTION_NAMES.c_compile]
_CXX_COMPILE = [
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
    ACTION_NAMES.cpp_module_compile,
    ACTION_NAMES.linkstamp_compile,
]
_ALL_COMPILE = _C_COMPILE + _CXX_COMPILE + [ACTION_NAMES.assemble, ACTION_NAMES.preprocess_assemble]
_ALL_LINK = [
    ACTION_NAMES.cpp_link_executable,
    ACTION_NAMES.cpp_link_dynamic_library,
    ACTION_NAMES.cpp_link_nodeps_dynamic_library,
]

def _flags(actions, flags, features = None):
    return flag_set(
        actions = actions,
        flag_groups = [flag_group(flags = flags)],
        with_features = [with_feature_set(features = features)] if features else [],
    )

def _impl(ctx):
    tools = {
        "gcc": ctx.attr.cc,
        "cpp": ctx.attr.cpp,
        "ld": "/usr/bin/ld",
        "ar": ctx.attr.ar,
        "nm": "/usr/bin/nm",
        "objcopy": "/usr/bin/objcopy",
        "objdump": "/usr/bin/objdump",
        "strip": "/usr/bin/strip",
        "gcov": "/usr/bin/gcov",
        "dwp": "/usr/bin/dwp",
        "llvm-cov": "/bin/false",
    }
    features = [
        feature(name = "supports_pic", enabled = True),
        feature(name = "supports_dynamic_linker", enabled = True),
        feature(name = "dbg"),
        feature(name = "opt"),
        feature(name = "fastbuild"),
        feature(
            name = "default_compile_flags",
            enabled = True,
            flag_sets = [
                _flags(_ALL_COMPILE, [
                    "-U_FORTIFY_SOURCE",
                    "-fstack-protector",
                    "-fno-omit-frame-pointer",
                    "-no-canonical-prefixes",
                    "-Wno-builtin-macro-redefined",
                    "-D__DATE__=\"redacted\"",
                    "-D__TIMESTAMP__=\"redacted\"",
                    "-D__TIME__=\"redacted\"",
                    "-D_GNU_SOURCE",
                ]),
                _flags(_C_COMPILE, ["-std=c11"]),
                _flags(_CXX_COMPILE, ["-std=c++17"]),
                _flags(_ALL_COMPILE, ["-g", "-O0"], ["dbg"]),
                # -O3: ~6% off a small round trip against -O2 in paired runs
                # (docs/PERF.md, "The request's bookkeeping").
                _flags(_ALL_COMPILE, ["-g1", "-O3", "-DNDEBUG", "-ffunction-sections", "-fdata-sections"], ["opt"]),
                _flags(_ALL_COMPILE, ["-g1", "-O1"], ["fastbuild"]),
            ],
        ),
        # Link-time optimisation in optimised gcc builds: a small message
        # crosses many small functions in several layers (KV app, customer,
        # postoffice, van), and GCC inlines across them only at link time
        # (docs/PERF.md, "The request's bookkeeping": -7% on a small round trip). Debian's gcc
        # package installs the plugin /usr/bin/ar needs for such objects.
        # Off with --features=-lto (tools/bench/path_instr.sh counts
        # instructions per function, which inlining would merge).
        feature(
            name = "lto",
            enabled = ctx.attr.compiler == "gcc",
            flag_sets = [
                _flags(_ALL_COMPILE, ["-flto=auto"], ["opt"]),
                _flags(_ALL_LINK, ["-flto=auto"], ["opt"]),
            ],
        ),
        feature(
            name = "warnings_as_errors",
            enabled = True,
            flag_sets = [_flags(_C_COMPILE + _CXX_COMPILE, ["-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"])],
        ),
        feature(
            name = "default_link_flags",
            enabled = True,
            flag_sets = [
                _flags(_ALL_LINK, ["-no-canonical-prefixes", "-Wl,-z,relro,-z,now", "-lstdc++", "-lm", "-pthread"] +
                                  (["-pass-exit-codes"] if ctx.attr.compiler == "gcc" else [])),
                _flags(_ALL_LINK, ["-Wl,--gc-sections"], ["opt"]),
            ],
        ),
        feature(name = "user_compile_flags", enabled = True, flag_sets = [
            flag_set(
                actions = _ALL_COMPILE,
                flag_groups = [flag_group(
                    flags = ["%{user_compile_flags}"],
                    iterate_over = "user_compile_flags",
                    expand_if_available = "user_compile_flags",
                )],
            ),
        ]),
    ]
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        features = features,
        cxx_builtin_include_directories = ctx.attr.include_dirs,
        toolchain_identifier = ctx.attr.toolchain_identifier,
        host_system_name = "x86_64-unknown-linux-gnu",
        target_system_name = "x86_64-unknown-linux-gnu",
        target_cpu = "k8",
        target_libc = "glibc",
        compiler = ctx.attr.compiler,
        abi_version = "local",
        abi_libc_version = "local",
        tool_paths = [tool_path(name = k, path = v) for k, v in tools.items()],
    )

cc_toolchain_config = rule(
    implementation = _impl,
    attrs = {
        "toolchain_identifier": attr.string(mandatory = True),
        "compiler": attr.string(mandatory = True),
        "cc": attr.string(mandatory = True),
        "cpp": attr.string(mandatory = True),
        "ar": attr.string(default = "/usr/bin/ar"),
        "include_dirs": attr.string_list(mandatory = True),
    },
    provides = [CcToolchainConfigInfo],
)

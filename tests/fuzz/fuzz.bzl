"""One fuzz target's three rules: the fuzzer, its corpus test, its seed writer."""

def ps_fuzz_target(name, deps, min_inputs):
    """NAME_fuzzer (libFuzzer under --config=fuzz, else a corpus replayer),
    NAME_corpus_test (replays corpus/NAME/ in the default suite; fails
    under min_inputs inputs) and NAME_corpus_gen (writes the seeds:
    bazel run //tests/fuzz:NAME_corpus_gen -- DIR), from NAME_fuzzer.c and
    NAME_corpus_gen.c."""
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = [name + "_fuzzer.c"] + select({
            ":fuzzing": [],
            "//conditions:default": ["replay_main.c"],
        }),
        linkopts = select({
            ":fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps,
    )
    native.cc_test(
        name = name + "_corpus_test",
        size = "small",
        srcs = [name + "_fuzzer.c", "replay_main.c"],
        args = ["--min=%d" % min_inputs, "tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/%s/*" % name]),
        deps = deps,
    )
    native.cc_binary(
        name = name + "_corpus_gen",
        srcs = [name + "_corpus_gen.c"],
        deps = deps + [":corpus_file"],
    )

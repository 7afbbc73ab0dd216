"""terse_fuzz_target: one fuzz target, two drivers (see fuzz_target.h)."""

def terse_fuzz_target(name, src, deps = [], corpus = None):
    """Declares <name>_fuzzer (libFuzzer) and <name>_corpus_test (replay).

    <name>_fuzzer links with -fsanitize=fuzzer and so needs clang: it is
    tagged manual (left out of //... patterns) and built by
    tests/fuzz/run_fuzzers.sh with --config=fuzz. <name>_corpus_test replays
    corpus/<corpus or name>/ through the same source in the normal build
    (and under --config=asan).
    """
    corpus = corpus or name
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = [src, "fuzz_target.h"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzzer"],
        deps = deps,
    )
    native.cc_test(
        name = name + "_corpus_test",
        size = "small",
        srcs = [src, "fuzz_target.h", "corpus_main.cc"],
        args = ["tests/fuzz/corpus/" + corpus],
        data = native.glob(["corpus/" + corpus + "/**"]),
        deps = deps,
    )

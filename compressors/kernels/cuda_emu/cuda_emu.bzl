"""cuda_emu_library: CUDA sources compiled as C++ on cuda_emu (testonly).

Each .cu is rewritten (`kernel<<<grid, block, shared, stream>>>(args)` ->
`::cuda_emu::Launcher(grid, block, shared, stream)([&] { kernel(args); })`)
and built
with cuda_emu.h force-included and its fake CUDA headers first on the path,
so that a test can run the very kernels the GPU build compiles, on the CPU.
`rename` maps a namespace of the sources to another name (for example
{"device_ops_cuda": "device_ops_cuda_emu"}) so that the emulated functions
and the real ones can live in one test binary.
"""

EMU_COPTS = [
    "-include",
    "compressors/kernels/cuda_emu/cuda_emu.h",
    # __dadd_rn and friends round each operation, as on the GPU: no fused
    # multiply-adds.
    "-ffp-contract=off",
    "-Wno-sign-compare",
    # nvcc's #pragma unroll means nothing to gcc.
    "-Wno-unknown-pragmas",
]

def emu_rename_copts(rename):
    return ["-D%s=%s" % (k, v) for k, v in rename.items()]

def cuda_emu_library(name, srcs, hdrs = [], deps = [], rename = {}):
    """A testonly cc_library of `srcs` (.cu) built for cuda_emu."""
    cc_srcs = []
    for src in srcs:
        out = name + "_" + src.replace("/", "_").replace(".cu", "_emu.cc")
        native.genrule(
            name = out.replace(".", "_"),
            srcs = [src],
            outs = [out],
            cmd = ("perl -0pe 's/(\\w+(?:<[^<>;()]*>)?)\\s*<<<(.*?)>>>\\s*" +
                   "(\\((?:[^()]++|(?3))*\\))" +
                   "/::cuda_emu::Launcher($$2)([&] { $$1$$3; })/gs' $< > $@"),
            testonly = True,
        )
        cc_srcs.append(out)
    native.cc_library(
        name = name,
        srcs = cc_srcs + hdrs,
        copts = EMU_COPTS + emu_rename_copts(rename),
        deps = deps + ["//compressors/kernels/cuda_emu"],
        testonly = True,
    )

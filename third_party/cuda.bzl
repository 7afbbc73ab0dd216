"""cuda_library: compiles .cu files with the system nvcc, one genrule a file.

nvcc is not a Bazel toolchain here, so each .cu becomes a position-independent
object through a genrule and the objects are wrapped in a cc_library. The
genrule sandbox sees only declared inputs: list every header a .cu includes in
`hdrs` (or in `cu_deps_hdrs` for headers of other packages).
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# Hopper (sm_90) and Ampere (sm_80) SASS, plus PTX for newer parts.
NVCC_ARCH_FLAGS = (
    "-gencode arch=compute_80,code=sm_80 " +
    "-gencode arch=compute_90,code=[sm_90,compute_90]"
)

def cuda_library(name, srcs, hdrs = [], deps = [], cu_deps_hdrs = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc.

    Args:
      name: target name.
      srcs: .cu files (host+device code) and optionally .cc files.
      hdrs: public headers (also inputs to every nvcc run).
      deps: cc_library dependencies (linked; their headers are not visible to
        nvcc unless named in cu_deps_hdrs).
      cu_deps_hdrs: extra header files (labels) nvcc needs.
      **kwargs: forwarded to cc_library.
    """
    objects = []
    cc_srcs = []
    for src in srcs:
        if not src.endswith(".cu"):
            cc_srcs.append(src)
            continue
        obj = src[:-3] + ".cu.o"
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + cu_deps_hdrs,
            outs = [obj],
            cmd = (NVCC + " -ccbin /usr/bin/g++ -std=c++17 -O2 " +
                   "-Xcompiler -fPIC " + NVCC_ARCH_FLAGS +
                   " -I. -I$(GENDIR) -c $(location " + src + ") -o $@"),
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects + cc_srcs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_runtime"],
        **kwargs
    )

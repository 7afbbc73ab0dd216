#!/bin/bash
# gpu_bundle.sh: builds here, with Bazel, what tools/gpu_check.sh needs on a
# GPU machine that has neither Bazel nor a network (the device machines this
# project is lent: CUDA 13, a Python 3.12 with a CUDA PyTorch, no MPI known).
#
#   tools/gpu_bundle.sh [DIR]     (default .gpubundle, git-ignored)
#
# DIR then holds, all x86-64 and built on this machine:
#   bin/    every gpu-tagged test and the device-aware untagged ones
#           (<package>_<name>), the GPU benchmarks, and terse_info;
#   solib/  the Bazel shared libraries those tests load (_solib_k8);
#   lib/    the system libraries they need beyond glibc, libstdc++ and the
#           GPU driver (abseil, protobuf, Open MPI, PMIx, hwloc, libevent,
#           the CUDA 13 runtime). NCCL (208 MB) stays behind: gpu_check.sh
#           uses the machine's own libnccl.so.2 (PyTorch ships one);
#   ompi/   Open MPI's runtime under its Debian layout (usr/bin/mpirun,
#           usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 plugins,
#           usr/share/openmpi help files, PMIx plugins), relocated there with
#           OPAL_PREFIX;
#   py/     libterse.so and the objects of the Python module _terse.so
#           except terse_module.cc, which gpu_check.sh compiles there
#           against that machine's Python headers (its Python is not this
#           one's), and the headers it needs (abseil, MPI, pybind11).
# The files it prints last are what `env` gpu_check.sh must export.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-.gpubundle}
rm -rf "$B"
mkdir -p "$B"/{bin,solib,lib,py/obj,py/include,ompi}

# Device-aware tests that are not tagged gpu: they check the no-device path
# and, with a device, skip those cases by design.
AWARE="//common:cuda_probe_test //device:cuda_runtime_test
  //compressors/kernels:cuda_checked_test
  //collectives/nccl:nccl_communicator_test
  //efcp:sparse_mfac_cuda_test //efcp:dense_mfac_cuda_test"
GPU=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
# The GPU benchmarks that exist in this checkout.
BENCH=$(bazel query 'attr(name, "engine_nccl_bench|sparse_mfac_cuda_bench",
  //bench/...)' 2>/dev/null || true)
bazel build $GPU $AWARE $BENCH //tools:terse_info //bindings/c:libterse.so \
  //bindings/python:_terse.so
for t in $GPU $AWARE $BENCH //tools:terse_info; do
  p=${t#//}
  p=${p/://}
  cp "bazel-bin/$p" "$B/bin/${p//\//_}"
done
cp bazel-bin/_solib_k8/*.so "$B/solib/"

# System libraries: whatever ldd resolves outside glibc / libstdc++ / NCCL.
skip='^(linux-vdso|libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|librt|libdl|libnccl)'
{
  ldd "$B"/bin/* "$B"/solib/*.so bazel-bin/bindings/c/libterse.so \
    /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_pmix_ext3x.so \
    /usr/bin/orterun 2>/dev/null
} | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] || cp -L "$path" "$B/lib/$name"
  done

# Open MPI's runtime (mpirun, plugins, help texts) and PMIx's plugins.
O=$B/ompi/usr
mkdir -p "$O/bin" "$O/lib/x86_64-linux-gnu/openmpi/lib" \
  "$O/lib/x86_64-linux-gnu/pmix2/lib" "$O/share"
cp -L /usr/bin/orterun "$O/bin/mpirun"
cp -L /usr/bin/orted "$O/bin/orted"
cp -r /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 \
  "$O/lib/x86_64-linux-gnu/openmpi/lib/"
cp -r /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix \
  "$O/lib/x86_64-linux-gnu/pmix2/lib/" 2>/dev/null || true
cp -r /usr/lib/x86_64-linux-gnu/pmix2/share "$O/lib/x86_64-linux-gnu/pmix2/"
cp -r /usr/share/openmpi "$O/share/"
for plugin in "$O"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so \
  "$O"/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so; do
  [ -f "$plugin" ] && ldd "$plugin" 2>/dev/null
done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] || [ -f "$B/lib/$name" ] ||
      cp -L "$path" "$B/lib/$name"
  done

# The Python module: Bazel's objects for everything but terse_module.cc
# (the link line of //bindings/python:_terse.so, aquery'd).
cp bazel-bin/bindings/c/libterse.so "$B/py/"
bazel aquery 'mnemonic("CppLink", //bindings/python:_terse.so)' 2>/dev/null |
  grep -oE 'bazel-out/[^ ]+\.o' | grep -v terse_module |
  while read -r obj; do cp "$obj" "$B/py/obj/"; done
cp -r /usr/include/absl "$B/py/include/"
cp -r /usr/include/pybind11 "$B/py/include/"
cp -r /usr/lib/x86_64-linux-gnu/openmpi/include/. "$B/py/include/"

du -sh "$B"
echo "bundle in $B: $(ls "$B/bin" | wc -l) test binaries, $(ls "$B/lib" | wc -l) system libraries"

#!/bin/bash
# gpu_check.sh: one run of terse's GPU code on a fresh machine with one GPU
# (CUDA 13 in /usr/local/cuda, 16 cores, no network), from the repository
# root, in about 8 minutes (GPU_CHECK_BUDGET seconds, default 470). Logs go
# under $OUT (default ./gpu_check_out); the last lines are a pass/fail
# summary, also in $OUT/summary.txt. Exit 0 only when every GPU test passed
# on a device (a test that skipped for lack of a device is not a pass).
#
# Steps:
#   1. nvidia-smi: the driver (CUDA 13 needs >= 580).
#   2. nvcc outside Bazel: a probe (the first CUDA initialisation) and the
#      TopK benchmark: cuda::TopK at 1% of 2^20, 2^24 and 2^27 floats,
#      checked against a host oracle, next to the device's copy bandwidth
#      measured in the same run; then bench/kernels/topk_filter_probe.cu
#      (topk_probe.log: the sampled-threshold path's phase times).
#   3. Every gpu-tagged test plus the device-aware untagged ones: with
#      Bazel, bazel test by name (never //...: the TensorFlow binding needs
#      a venv from PyPI); without (the lent machines have no Bazel and no
#      network), the binaries that tools/gpu_bundle.sh built elsewhere and
#      the checkout carries in .gpubundle (GPU_BUNDLE), run directly with
#      the bundle's libraries, its Open MPI, and this machine's NCCL. A
#      test is PASS only when it exits 0 and no case skipped for lack of a
#      device.
#   4. PyTorch on CUDA tensors: _terse.so compiled here against this
#      Python (the bundle carries the rest), then tools/gpu_torch_check.py
#      under mpirun with 1 rank over NCCL and 2 ranks sharing the GPU with
#      TERSE_GPU_OPERATIONS=mpi.
#   5. Benchmarks (figures, in bench.log): TopK against torch.topk
#      (bench/topk_cuda_vs_torch.py), the engine against raw ncclAllReduce
#      and the CUDA SparseMFAC step, where the bundle has them.
#
# NCCL refuses two ranks on one GPU, so multi-rank NCCL is not tested here
# (engine_cuda_gpu_test runs 4 ranks on one GPU with
# TERSE_GPU_OPERATIONS=mpi, and 1 rank over NCCL).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT/testlogs"
export PATH=/usr/local/cuda/bin:$PATH
TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT
DEADLINE=$((SECONDS + ${GPU_CHECK_BUDGET:-470}))
RESULTS=()
PASSED=0
FAILED=0
SKIPPED=0
note() { RESULTS+=("$1"); echo "=== $1"; }
# left CAP: seconds left, at most CAP, at least 15.
left() {
  local l=$((DEADLINE - SECONDS))
  ((l > $1)) && l=$1
  ((l < 15)) && l=15
  echo "$l"
}
count() {  # count pass|fail|skip
  case $1 in pass) PASSED=$((PASSED + 1)) ;; fail) FAILED=$((FAILED + 1)) ;;
    skip) SKIPPED=$((SKIPPED + 1)) ;; esac
}
ARCH="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]"

# --- 1. The driver ----------------------------------------------------------
{ timeout 20 nvidia-smi; timeout 20 nvidia-smi --format=csv \
    --query-gpu=name,driver_version,compute_cap,memory.total; } \
  >"$OUT/nvidia-smi.txt" 2>&1
drv=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader \
  2>/dev/null | head -1)
if [ -z "$drv" ]; then
  note "nvidia-smi: FAIL (no driver answers)"; count fail
elif [ "${drv%%.*}" -lt 580 ] 2>/dev/null; then
  note "nvidia-smi: FAIL driver $drv < 580 (the CUDA 13 runtime refuses it)"
  count fail
else
  note "nvidia-smi: PASS driver $drv"; count pass
fi

# --- 2. nvcc probe and the TopK benchmark -----------------------------------
cat >"$TMPD/topk_bench.cu" <<'CU'
#include <cuda_runtime.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>
#include "compressors/kernels/topk_cuda.h"
int main() {
  int n = 0, rt = 0, dv = 0, bad = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&dv);
  if (e != cudaSuccess || n == 0) {
    printf("FAIL no device: %s (runtime %d, driver %d)\n", cudaGetErrorString(e), rt, dv);
    return 2;
  }
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  printf("device %s sm_%d%d (%d devices) runtime %d driver %d\n", p.name, p.major, p.minor, n, rt, dv);
  for (int lg : {20, 24, 27}) {
    const int64_t d = int64_t{1} << lg, k = d / 100;
    uint32_t s = 12345u + lg;
    int err = 0;
    std::vector<float> x(d);
    for (auto& v : x) { s ^= s << 13; s ^= s >> 17; s ^= s << 5; v = (int32_t)s * 4.6566e-10f; }
    float *dx = nullptr, *dy = nullptr;
    uint32_t* di = nullptr;
    err |= cudaMalloc(&dx, 4 * d);
    err |= cudaMalloc(&dy, 4 * d);
    err |= cudaMalloc(&di, 4 * k);
    err |= cudaMemcpy(dx, x.data(), 4 * d, cudaMemcpyHostToDevice);
    // Copy bandwidth in this run (reads d floats and writes d floats).
    err |= cudaMemcpy(dy, dx, 4 * d, cudaMemcpyDeviceToDevice);
    err |= cudaDeviceSynchronize();
    auto c0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 5; ++r) err |= cudaMemcpy(dy, dx, 4 * d, cudaMemcpyDeviceToDevice);
    err |= cudaDeviceSynchronize();
    double copy_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count() / 5;
    double read_gbs = 4e-6 * d / copy_ms * 2;  // read + write traffic of a copy
    err |= terse::kernels::cuda::TopK(dx, d, k, di, nullptr);  // warm-up
    err |= cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 5; ++r) err |= terse::kernels::cuda::TopK(dx, d, k, di, nullptr);
    err |= cudaDeviceSynchronize();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 5;
    std::vector<uint32_t> idx(k);
    err |= cudaMemcpy(idx.data(), di, 4 * k, cudaMemcpyDeviceToHost);
    std::vector<char> sel(d, 0);
    bool ok = err == 0;
    float lo = INFINITY;
    for (int64_t j = 0; ok && j < k; ++j) {  // ascending, in range
      ok = idx[j] < d && (j == 0 || idx[j] > idx[j - 1]);
      if (ok) { sel[idx[j]] = 1; lo = fminf(lo, fabsf(x[idx[j]])); }
    }
    for (int64_t i = 0; ok && i < d; ++i) ok = sel[i] || fabsf(x[i]) <= lo;  // none larger left out
    double topk_gbs = 4e-6 * d / ms;
    printf("%s TopK d=2^%d k=%lld: %.3f ms/call, %.0f GB/s of input; copy traffic %.0f GB/s; "
           "TopK at %.0f%% of it err=%d\n", ok ? "PASS" : "FAIL", lg, (long long)k, ms,
           topk_gbs, read_gbs, 100.0 * topk_gbs / read_gbs, err);
    bad |= !ok;
    cudaFree(dx); cudaFree(dy); cudaFree(di);
  }
  return bad;
}
CU
HOST_SEES_GPU=0
if timeout "$(left 150)" nvcc -std=c++17 -O2 -t 0 $ARCH -I. \
    compressors/kernels/topk_cuda.cu compressors/kernels/topk_filter_cuda.cu "$TMPD/topk_bench.cu" \
    -o "$TMPD/topk_bench" >"$OUT/topk_bench.log" 2>&1; then
  timeout "$(left 120)" "$TMPD/topk_bench" >>"$OUT/topk_bench.log" 2>&1
  rc=$?
  cat "$OUT/topk_bench.log"
  grep -q '^device ' "$OUT/topk_bench.log" && HOST_SEES_GPU=1
  if [ "$rc" -eq 0 ]; then
    note "TopK benchmark (nvcc): PASS ($(grep -c '^PASS' "$OUT/topk_bench.log")/3 sizes; figures in topk_bench.log)"
    count pass
  else
    note "TopK benchmark (nvcc): FAIL rc=$rc (topk_bench.log)"; count fail
  fi
else
  note "TopK benchmark (nvcc): FAIL to compile (topk_bench.log)"; count fail
fi

# Where the sampled-threshold top-k's time goes (block 0's phase clock).
if [ "$HOST_SEES_GPU" -eq 1 ] && timeout "$(left 120)" nvcc -std=c++17 -O2 \
    $ARCH -I. compressors/kernels/topk_cuda.cu \
    compressors/kernels/topk_filter_cuda.cu bench/kernels/topk_filter_probe.cu \
    -o "$TMPD/topk_probe" >"$OUT/topk_probe.log" 2>&1; then
  timeout "$(left 60)" "$TMPD/topk_probe" >>"$OUT/topk_probe.log" 2>&1
  tail -n 5 "$OUT/topk_probe.log"
fi

# --- 3. The GPU tests ---------------------------------------------------------
# With Bazel: bazel test by name. Without (the lent machines have none, and
# no network for tools/setup.sh): the binaries tools/gpu_bundle.sh built
# elsewhere, carried in $GPU_BUNDLE (default .gpubundle), run directly.
BUNDLE=${GPU_BUNDLE:-$PWD/.gpubundle}  # GPU_CHECK_NO_BAZEL=1: use it even where Bazel is
NAMED="//common:cuda_probe_gpu_test //device:cuda_runtime_gpu_test
  //compressors/kernels:kernels_cuda_test
  //compressors/kernels:cuda_checked_gpu_test //engine:engine_cuda_gpu_test
  //collectives/nccl:nccl_communicator_gpu_test
  //efcp:sparse_mfac_cuda_gpu_test //efcp:dense_mfac_cuda_gpu_test
  //compressors/device:device_ops_cuda_gpu_test
  //engine:device_compression_cuda_gpu_test
  //engine:device_policy_cuda_gpu_test
  //common:cuda_probe_test //device:cuda_runtime_test
  //compressors/kernels:cuda_checked_test
  //collectives/nccl:nccl_communicator_test
  //efcp:sparse_mfac_cuda_test //efcp:dense_mfac_cuda_test"
NODEV=0
# verdict NAME LOG RC: one test's result from its gtest log and exit code.
verdict() {
  local name=$1 log=$2 rc=$3 sk
  sk=$(grep -c '\[  SKIPPED \]' "$log" 2>/dev/null)
  if [ "$rc" -ne 0 ]; then
    note "test $name: FAIL (rc=$rc; $(grep -m1 -E '\[  FAILED  \]|Failure|TIMEOUT' "$log" | cut -c1-150))"
    count fail
  elif [ "${sk:-0}" -gt 0 ] && grep -qiE 'no (CUDA )?device' "$log"; then
    NODEV=1
    note "test $name: SKIPPED ($sk case(s): $(grep -m1 -oiE 'no (CUDA )?device.*' "$log" | cut -c1-100))"
    count skip
  elif [ "${sk:-0}" -gt 0 ]; then
    # A device answers: the no-device cases of a device-aware test skip.
    note "test $name: PASS ($sk no-device case(s) skipped by design)"
    count pass
  else
    note "test $name: PASS ($(grep -m1 -oE '\[  PASSED  \] [0-9]+ tests?' "$log" | grep -oE '[0-9]+ tests?'))"
    count pass
  fi
}

bundle_env() {  # the bundle's libraries, Open MPI and the machine's NCCL
  local nccl_dir="" d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
    $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null); do
    [ -e "$d/libnccl.so.2" ] && { nccl_dir=$d; break; }
  done
  if [ -z "$nccl_dir" ]; then
    nccl_dir=$(dirname "$(find / -xdev -name 'libnccl.so.2*' -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null)
  fi
  echo "libnccl.so.2 from: ${nccl_dir:-NOT FOUND}" | tee -a "$OUT/environment.txt"
  export LD_LIBRARY_PATH="$BUNDLE/lib:$BUNDLE/solib:$BUNDLE/py:$nccl_dir:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX=$BUNDLE/ompi/usr
  export PMIX_INSTALL_PREFIX=$BUNDLE/ompi/usr/lib/x86_64-linux-gnu/pmix2
  export PATH=$BUNDLE/ompi/usr/bin:$PATH
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  export PMIX_MCA_pcompress_base_silence_warning=1 PMIX_MCA_pcompress=^zlib
}

if [ -z "${GPU_CHECK_NO_BAZEL:-}" ] && command -v bazel >/dev/null; then
  QUERIED=$(timeout "$(left 60)" bazel query --keep_going \
    'attr(tags, "\bgpu\b", tests(//...))' 2>"$OUT/bazel_query.err")
  TARGETS=$(echo $NAMED $QUERIED | tr ' ' '\n' | sort -u | tr '\n' ' ')
  echo "targets: $TARGETS" >"$OUT/targets.txt"
  BZ=(--keep_going --build_tests_only --test_tag_filters=
      --test_output=errors --test_summary=short --cache_test_results=no
      --test_timeout=180,300,900,3600 --test_env=NCCL_DEBUG=WARN
      --jobs=16)
  timeout -s INT -k 20 "$(left 330)" bazel test "${BZ[@]}" $TARGETS \
    >"$OUT/bazel_test.log" 2>&1
  [ $? -eq 124 ] && echo "TIMEOUT" >>"$OUT/bazel_test.log"
  tail -n 40 "$OUT/bazel_test.log"
  for t in $TARGETS; do
    p=${t#//}; p=${p/://}
    log="$OUT/testlogs/${p//\//_}.log"
    cp "bazel-testlogs/$p/test.log" "$log" 2>/dev/null || echo "no log" >"$log"
    grep -qE "^${t}[[:space:]].*PASSED" "$OUT/bazel_test.log"
    verdict "$t" "$log" $?
  done
elif [ -d "$BUNDLE/bin" ]; then
  bundle_env
  echo "bundle: $BUNDLE ($(ls "$BUNDLE/bin" | wc -l) binaries)" >>"$OUT/environment.txt"
  # Four at a time (16 cores, one GPU); each bounded.
  run_one() {
    local bin=$1 name log rc tmp
    name=$(basename "$bin")
    log="$OUT/testlogs/$name.log"
    tmp=$(mktemp -d)
    TEST_TMPDIR=$tmp timeout -k 10 "$(left 200)" "$bin" --gtest_color=no >"$log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "TIMEOUT" >>"$log"
    echo "$rc" >"$log.rc"
    rm -rf "$tmp"
  }
  TESTS=$(ls "$BUNDLE"/bin/*_test)
  for bin in $TESTS; do
    while [ "$(jobs -rp | wc -l)" -ge 4 ]; do sleep 0.2; done
    run_one "$bin" &
  done
  wait
  for bin in $TESTS; do
    name=$(basename "$bin")
    verdict "$name" "$OUT/testlogs/$name.log" "$(cat "$OUT/testlogs/$name.log.rc" 2>/dev/null || echo 99)"
  done
  rm -f "$OUT"/testlogs/*.rc
else
  note "GPU tests: FAIL (no bazel and no bundle at $BUNDLE: run tools/gpu_bundle.sh where Bazel is)"
  count fail
fi
[ $NODEV -eq 1 ] && note "WARNING: GPU tests saw no CUDA device (the nvcc probe saw one: $HOST_SEES_GPU)"

# compute-sanitizer's race check over the block-shared row kernels (one
# launch over all rows, a shared-memory tile per block).
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
KT=$(ls "$BUNDLE"/bin/compressors_kernels_kernels_cuda_test 2>/dev/null)
if [ -n "$SAN" ] && [ -n "$KT" ] && [ "$HOST_SEES_GPU" -eq 1 ] && ((DEADLINE - SECONDS > 60)); then
  timeout -k 10 "$(left 90)" "$SAN" --tool racecheck --error-exitcode 3 \
    "$KT" --gtest_filter='*RowOps*' >"$OUT/racecheck.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then note "racecheck of the row kernels: PASS"; count pass
  else note "racecheck of the row kernels: FAIL rc=$rc (racecheck.log)"; count fail; fi
fi

# --- 4. PyTorch on CUDA tensors ------------------------------------------------
# The module is compiled here against this machine's Python (the bundle
# carries every other object of it), then tools/gpu_torch_check.py runs
# with 1 rank over NCCL and 2 ranks sharing the GPU over staged MPI.
PY=$(command -v python3)
if ! timeout 60 "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  note "PyTorch CUDA: SKIPPED (no python3 whose torch sees a GPU)"; count skip
elif [ ! -d "$BUNDLE/py" ] && ! command -v bazel >/dev/null; then
  note "PyTorch CUDA: FAIL (no bundle to build the module from)"; count fail
else
  echo "python: $PY $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)')" >>"$OUT/environment.txt"
  PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  PBINC=$("$PY" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null)
  MODDIR=$TMPD/pymod
  mkdir -p "$MODDIR"
  cp "$BUNDLE/py/libterse.so" "$MODDIR/"
  {
    g++ -std=c++17 -O2 -fPIC -fvisibility=hidden -DOMPI_SKIP_MPICXX=1 -I. \
      ${PBINC:+-isystem "$PBINC"} -isystem "$BUNDLE/py/include" \
      -isystem "$PYINC" -isystem /usr/local/cuda/include \
      -c bindings/python/terse_module.cc -o "$MODDIR/terse_module.o" &&
    g++ -shared -o "$MODDIR/_terse.so" "$MODDIR/terse_module.o" \
      "$BUNDLE"/py/obj/*.o -L"$MODDIR" -lterse \
      "$BUNDLE"/lib/libabsl_*.so.* "$BUNDLE/lib/libmpi.so.40" \
      "$BUNDLE/lib/libcudart.so.13" -Wl,-rpath,'$ORIGIN'
  } >"$OUT/pymodule_build.log" 2>&1
  if [ $? -ne 0 ]; then
    note "PyTorch CUDA: FAIL to build _terse.so (pymodule_build.log; Python.h in $PYINC?)"
    count fail
  else
    for mode in "1 nccl" "2 mpi"; do
      set -- $mode
      log="$OUT/torch_np$1_$2.log"
      PYTHONPATH="$MODDIR:$PWD/bindings/python" TERSE_GPU_OPERATIONS=$2 \
        TERSE_GRAVAC_CANDIDATES=none,fp16,bf16 \
        timeout -k 10 "$(left 150)" mpirun -np "$1" --bind-to none \
        --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
        --mca oob_tcp_if_include lo -x PYTHONPATH -x TERSE_GPU_OPERATIONS \
        -x TERSE_GRAVAC_CANDIDATES -x LD_LIBRARY_PATH \
        "$PY" tools/gpu_torch_check.py >"$log" 2>&1
      rc=$?
      grep -E "PASS|FAIL|passed|queueing" "$log" | sort | uniq -c | sed 's/^/    /'
      if [ $rc -eq 0 ]; then
        note "PyTorch CUDA, $1 rank(s), TERSE_GPU_OPERATIONS=$2: PASS ($(grep -m1 -oE '[0-9]+ passed, [0-9]+ failed' "$log"))"
        count pass
      else
        note "PyTorch CUDA, $1 rank(s), TERSE_GPU_OPERATIONS=$2: FAIL rc=$rc ($(grep -m1 -oE 'FAIL [^:]*' "$log"); torch_np$1_$2.log)"
        count fail
      fi
    done
  fi
fi

# --- 5. GPU benchmarks ----------------------------------------------------------
# Figures, not verdicts: each prints a table and one JSON line (bench.log).
if grep -q '^PASS TopK' "$OUT/topk_bench.log" 2>/dev/null && [ -n "$PY" ]; then
  timeout "$(left 90)" "$PY" bench/topk_cuda_vs_torch.py --log "$OUT/topk_bench.log" \
    2>&1 | tee -a "$OUT/bench.log"
fi
# The engine bench twice: on the defaults, and with TERSE_CYCLE_TIME_MS=0
# (the background thread does not pause between cycles).
for run in "engine_nccl_bench 1" "engine_nccl_bench 0" "sparse_mfac_cuda_bench 1"; do
  set -- $run
  bench=$1
  bin=$(ls "$BUNDLE"/bin/*"$bench" 2>/dev/null | head -1)
  [ -z "$bin" ] && command -v bazel >/dev/null && bin=$(ls bazel-bin/bench/*/"$bench" 2>/dev/null | head -1)
  if [ -n "$bin" ] && ((DEADLINE - SECONDS > 30)); then
    echo "== $bench (TERSE_CYCLE_TIME_MS=$2)" >>"$OUT/bench.log"
    TERSE_CYCLE_TIME_MS=$2 timeout -k 10 "$(left 120)" mpirun -np 1 \
      --bind-to none -x LD_LIBRARY_PATH -x TERSE_CYCLE_TIME_MS \
      "$bin" 2>&1 | tee -a "$OUT/bench.log"
  else
    echo "== $bench: not run (no binary or no time left)" | tee -a "$OUT/bench.log"
  fi
done

note "not covered: multi-GPU NCCL (one GPU here: NCCL refuses two ranks on one device)"
echo "===== SUMMARY (${SECONDS} s) ====="
printf '%s\n' "${RESULTS[@]}" >"$OUT/summary.txt"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
[ "$FAILED" -eq 0 ] && [ "$SKIPPED" -eq 0 ]

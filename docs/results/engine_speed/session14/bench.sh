#!/bin/bash
# Session 14: issue 19's programs after the staged pipeline (aa10840).
# engine_bench alternates the binary of 1f71d2a (before: pieces written into
# slices of a bucket-sized buffer, 4 MiB) and of aa10840 (after: one reused
# piece-sized buffer, 1 MiB), built beforehand into /tmp/eb_old1f7 and
# /tmp/eb_aa10840 (bazel build //bench/engine:engine_bench in a worktree of
# each commit). The Python programs run the current tree.
cd "$(dirname "$0")/../../../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
Q() { grep -v "^INFO\|^Loading\|^Analyzing\|^Target\|^  bazel\|^\[" ; }
engine() {  # engine NP BTL BINARY
  local y=()
  (( $1 > $(nproc) )) && y=(-x OMPI_MCA_mpi_yield_when_idle=1)
  mpirun -np "$1" --oversubscribe --bind-to none "${y[@]}" --mca btl "$2" \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$3" --shapes bench/engine/resnet50_param_shapes.tsv \
    --workloads small,resnet50 --rounds 5 --steps 3
}
for r in 1 2; do
  for np in 4 2; do
    for b in eb_old1f7 eb_aa10840; do
      L "engine_bench shm np=$np $b run $r"
      engine $np self,vader,tcp /tmp/$b
    done
  done
done
for b in eb_old1f7 eb_aa10840; do
  L "engine_bench tcp np=4 $b"
  engine 4 self,tcp /tmp/$b
done
L "py_allreduce_bench"
/usr/bin/python3 bench/py_allreduce_bench.py --modes terse:none,terse:unpipelined,horovod:none,terse:fp16,horovod:fp16,mpi:per_tensor,mpi:flat --rounds 5 --steps 5 --warmup 1 2>&1 | Q
L "torch_step_bench"
/usr/bin/python3 bench/torch_step_bench.py --transport shm --modes terse:none,horovod:none,terse:fp16,horovod:fp16 --rounds 5 --steps 80 --warmup 10 2>&1 | Q
for np in 4 2; do
  L "allreduce_bench np=$np"
  bench/run_allreduce_bench.sh $np --min_bytes=1048576 --max_bytes=67108864 --budget_bytes=134217728 --rounds=3 2>&1 | Q
done
L "done"

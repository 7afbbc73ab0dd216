#!/bin/bash
# Session 18: issue 19's shared-memory targets rerun at session 14's and 17's
# flags (run/ holds bench/run_engine_speed.sh's shorter pass): engine_bench
# (C++, (a) against the flat allreduce (c)) and the training step against
# Horovod, twice each, alternated. Run from the repository root, nothing
# else running.
cd "$(dirname "$0")/../../../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
L() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
bazel build //bench/engine:engine_bench //bindings/python:_terse.so >/dev/null 2>&1
for r in 1 2; do
  L "engine_bench shm np=4 run $r"
  mpirun -np 4 --oversubscribe --bind-to none -x OMPI_MCA_mpi_yield_when_idle=1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo bazel-bin/bench/engine/engine_bench \
    --shapes bench/engine/resnet50_param_shapes.tsv \
    --workloads small,resnet50 --rounds 5 --steps 3 2>&1 | grep -v '^{'
  L "torch_step shm run $r"
  /usr/bin/python3 bench/torch_step_bench.py --transport shm \
    --modes terse:none,horovod:none,terse:fp16,horovod:fp16 --rounds 5 \
    --steps 80 --warmup 10 2>&1 | grep -E '^(mode|terse|horovod)'
done
L done
